// A transport that passes every call through to an inner one, as libfabric's hook providers
// do: a wrapper (providers/fault) derives from it and overrides only what it changes. The
// inner transport runs Transport's checks again, which costs a compare or two per call.
#pragma once

#include <memory>
#include <utility>

#include <transport/transport.hpp>

namespace pcoll::transport {

class ForwardingTransport : public Transport {
 public:
  explicit ForwardingTransport(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}

  const Capabilities& capabilities() const override { return inner_->capabilities(); }
  Bytes address() const override { return inner_->address(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::unique_ptr<LocalRegion> allocate(size_t bytes) override { return inner_->allocate(bytes); }
  std::unique_ptr<LocalRegion> register_memory(std::span<std::byte> memory) override {
    return inner_->register_memory(memory);
  }
  NotificationPaths notification_paths(int peer) const override { return inner_->notification_paths(peer); }
  bool maps_memory_of(int peer) const override { return inner_->maps_memory_of(peer); }
  void flush() override { inner_->flush(); }
  void progress() override { inner_->progress(); }
  size_t poll(std::span<uint64_t> out) override { return inner_->poll(out); }
  bool wait(std::chrono::microseconds timeout, WaitFor what) override { return inner_->wait(timeout, what); }
  void wake() override { inner_->wake(); }
  void abandon() override { inner_->abandon(); }
  void expect_departures() override { inner_->expect_departures(); }
  void set_wait_hook(std::function<void()> hook) override { inner_->set_wait_hook(std::move(hook)); }

 protected:
  Transport& inner() const { return *inner_; }

  void do_connect(int my_rank, std::span<const Bytes> addresses) override { inner_->connect(my_rank, addresses); }
  std::unique_ptr<RemoteRegion> do_import_region(int peer, std::span<const std::byte> key) override {
    return inner_->import_region(peer, key);
  }
  void do_write(const LocalRegion& src, size_t src_offset, const RemoteRegion& dst, size_t dst_offset,
                size_t bytes) override {
    inner_->write(src, src_offset, dst, dst_offset, bytes);
  }
  void do_write_notify(const LocalRegion& src, size_t src_offset, const RemoteRegion& dst, size_t dst_offset,
                       size_t bytes, uint64_t value) override {
    inner_->write_notify(src, src_offset, dst, dst_offset, bytes, value);
  }
  void do_notify(int peer, uint64_t value) override { inner_->notify(peer, value); }
  bool do_try_notify(int peer, uint64_t value) override { return inner_->try_notify(peer, value); }

  uint64_t do_fetch_add(const RemoteRegion& dst, size_t offset, uint64_t operand) override {
    return inner_->fetch_add(dst, offset, operand);
  }
  uint64_t do_compare_swap(const RemoteRegion& dst, size_t offset, uint64_t expected, uint64_t desired) override {
    return inner_->compare_swap(dst, offset, expected, desired);
  }
  uint64_t do_swap(const RemoteRegion& dst, size_t offset, uint64_t value) override {
    return inner_->swap(dst, offset, value);
  }
  uint64_t do_atomic_max(const RemoteRegion& dst, size_t offset, uint64_t value) override {
    return inner_->atomic_max(dst, offset, value);
  }

 private:
  std::unique_ptr<Transport> inner_;
};

}  // namespace pcoll::transport
