// The one fake transport of the unit tests of what sits on a transport (providers/fault,
// providers/routed): a transport of one process that is every rank at once. It records
// what it is asked to do (the peer of each operation, the addresses it was connected with,
// writes, flushes, registrations), and a notification to any peer lands in its own queue,
// so a test sees exactly what the layer above made of a call.
#pragma once

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <transport/transport.hpp>

namespace pcoll::test {

class FakeTransport final : public transport::Transport {
 public:
  using Bytes = transport::Bytes;
  // Local and remote at once: 64 bytes, and the name of the transport that made it (for
  // an import, the key it came from).
  struct Region final : transport::LocalRegion, transport::RemoteRegion {
    Region(int peer, std::string origin)
        : LocalRegion({memory, sizeof memory}), RemoteRegion(peer, sizeof memory), origin(std::move(origin)) {}
    Bytes remote_key() const override {
      const auto* text = reinterpret_cast<const std::byte*>(origin.data());
      return Bytes(text, text + origin.size());
    }
    std::string origin;
    std::byte memory[64] = {};
  };

  // `name` is its selector and provider name; with `partial_connect` an empty address is a
  // rank it does not reach (a routed transport's halves).
  explicit FakeTransport(std::string name, bool partial_connect = false) : name_(std::move(name)) {
    caps.name = name_;
    caps.provider = name_;
    caps.domain = name_;
    caps.partial_connect = partial_connect;
  }

  const transport::Capabilities& capabilities() const override { return caps; }
  Bytes address() const override {
    const std::string a = name_ + "-address";
    return Bytes(reinterpret_cast<const std::byte*>(a.data()), reinterpret_cast<const std::byte*>(a.data()) + a.size());
  }
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(connected.size()); }
  std::unique_ptr<transport::LocalRegion> allocate(size_t) override { return std::make_unique<Region>(rank_, name_); }
  std::unique_ptr<transport::LocalRegion> register_memory(std::span<std::byte>) override {
    ++registered;
    return std::make_unique<Region>(rank_, name_);
  }
  void flush() override { ++flushes; }
  void progress() override { ++progressed; }
  void set_wait_hook(std::function<void()> hook) override { wait_hook = std::move(hook); }
  size_t poll(std::span<uint64_t> out) override {
    std::lock_guard lock(mutex_);
    size_t n = 0;
    for (; n < out.size() && !queue_.empty(); ++n) {
      out[n] = queue_.front();
      queue_.pop_front();
    }
    return n;
  }
  bool wait(std::chrono::microseconds timeout, WaitFor) override {
    const auto until = std::chrono::steady_clock::now() + timeout;
    do {
      {
        std::lock_guard lock(mutex_);
        if (!queue_.empty()) return true;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    } while (std::chrono::steady_clock::now() < until);
    return false;
  }
  void wake() override {}

  std::atomic<int> progressed{0};  // progress() calls
  std::function<void()> wait_hook;  // what set_wait_hook gave
  transport::Capabilities caps;  // change before connect() to model another provider
  std::vector<Bytes> connected;  // the addresses connect() got
  std::vector<int> touched;      // the peer of every operation, in order
  int writes = 0;                // plain writes
  int flushes = 0;
  int registered = 0;

 protected:
  void do_connect(int my_rank, std::span<const Bytes> addresses) override {
    rank_ = my_rank;
    connected.assign(addresses.begin(), addresses.end());
  }
  std::unique_ptr<transport::RemoteRegion> do_import_region(int peer, std::span<const std::byte> key) override {
    return std::make_unique<Region>(peer, std::string(reinterpret_cast<const char*>(key.data()), key.size()));
  }
  void do_write(const transport::LocalRegion& src, size_t, const transport::RemoteRegion& dst, size_t,
                size_t) override {
    CHECK(dynamic_cast<const Region&>(src).origin == name_);  // a region of this transport
    ++writes;
    touched.push_back(dst.peer());
  }
  void do_write_notify(const transport::LocalRegion& src, size_t, const transport::RemoteRegion& dst, size_t,
                       size_t, uint64_t value) override {
    CHECK(dynamic_cast<const Region&>(src).origin == name_);
    touched.push_back(dst.peer());
    notify(dst.peer(), value);
  }
  void do_notify(int peer, uint64_t value) override {
    touched.push_back(peer);
    std::lock_guard lock(mutex_);
    queue_.push_back(value);
  }
  uint64_t do_fetch_add(const transport::RemoteRegion& dst, size_t, uint64_t) override { return touch(dst); }
  uint64_t do_compare_swap(const transport::RemoteRegion& dst, size_t, uint64_t, uint64_t) override {
    return touch(dst);
  }
  uint64_t do_swap(const transport::RemoteRegion& dst, size_t, uint64_t) override { return touch(dst); }
  uint64_t do_atomic_max(const transport::RemoteRegion& dst, size_t, uint64_t) override { return touch(dst); }

 private:
  uint64_t touch(const transport::RemoteRegion& dst) {
    touched.push_back(dst.peer());
    return 0;
  }

  std::string name_;
  int rank_ = -1;
  std::mutex mutex_;
  std::deque<uint64_t> queue_;
};

}  // namespace pcoll::test
