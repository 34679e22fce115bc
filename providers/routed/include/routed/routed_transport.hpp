// RoutedTransport: a Transport that sends each peer's traffic through one of two inner
// transports, chosen by where the peer lives. Only providers/routed/*.cpp include this.
//
// Design in one paragraph: the address blob carries this rank's host key and both inner
// addresses; connect() gives the local transport the addresses of the ranks on this host
// and the network transport those of the others (empty addresses elsewhere: partial
// connects), and remembers each peer's route. Memory is allocated by the network transport
// (NICs may need their own allocation) and registered with the local one too; a region's
// key carries both keys, and a peer imports the one of its route. Operations on a remote
// region go to its route's transport with the matching local half; flush() and progress()
// drive both; poll() drains both; wait() checks the local transport without blocking and
// blocks on the network one in growing slices (up to 1 ms), so an idle rank sleeps on the
// network's wait object and still sees local notifications within a millisecond.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <transport/transport.hpp>

namespace pcoll::transport::routed {

class RoutedLocalRegion final : public LocalRegion {
 public:
  RoutedLocalRegion(std::unique_ptr<LocalRegion> network, std::unique_ptr<LocalRegion> local)
      : LocalRegion(network->bytes()), network_(std::move(network)), local_(std::move(local)) {}
  Bytes remote_key() const override;
  const LocalRegion& half(bool local) const { return local ? *local_ : *network_; }

 private:
  std::unique_ptr<LocalRegion> network_;
  std::unique_ptr<LocalRegion> local_;
};

class RoutedRemoteRegion final : public RemoteRegion {
 public:
  RoutedRemoteRegion(std::unique_ptr<RemoteRegion> inner, bool local)
      : RemoteRegion(inner->peer(), inner->size()), inner_(std::move(inner)), local_(local) {}
  const RemoteRegion& inner() const { return *inner_; }
  bool local() const { return local_; }

 private:
  std::unique_ptr<RemoteRegion> inner_;
  bool local_;
};

class RoutedTransport final : public Transport {
 public:
  RoutedTransport(std::unique_ptr<Transport> local, std::unique_ptr<Transport> network, std::string host_key,
                  const std::string& name);

  const Capabilities& capabilities() const override { return caps_; }
  // Unhooks the halves from each other first: neither may progress the other once one is gone.
  ~RoutedTransport() override;

  Bytes address() const override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::unique_ptr<LocalRegion> allocate(size_t bytes) override;
  std::unique_ptr<LocalRegion> register_memory(std::span<std::byte> memory) override;

  NotificationPaths notification_paths(int peer) const override { return route(peer).notification_paths(peer); }
  void flush() override;

  void progress() override;
  size_t poll(std::span<uint64_t> out) override;
  bool wait(std::chrono::microseconds timeout, WaitFor what) override;
  void wake() override;
  void abandon() override;
  void expect_departures() override;
  void set_wait_hook(std::function<void()> hook) override;

 protected:
  void do_connect(int my_rank, std::span<const Bytes> addresses) override;
  std::unique_ptr<RemoteRegion> do_import_region(int peer, std::span<const std::byte> key) override;
  void do_write(const LocalRegion& src, size_t src_offset, const RemoteRegion& dst, size_t dst_offset,
                size_t bytes) override;
  void do_write_notify(const LocalRegion& src, size_t src_offset, const RemoteRegion& dst, size_t dst_offset,
                       size_t bytes, uint64_t value) override;
  void do_notify(int peer, uint64_t value) override;
  bool do_try_notify(int peer, uint64_t value) override;
  uint64_t do_fetch_add(const RemoteRegion& dst, size_t offset, uint64_t operand) override;
  uint64_t do_compare_swap(const RemoteRegion& dst, size_t offset, uint64_t expected, uint64_t desired) override;
  uint64_t do_swap(const RemoteRegion& dst, size_t offset, uint64_t value) override;
  uint64_t do_atomic_max(const RemoteRegion& dst, size_t offset, uint64_t value) override;

 private:
  Transport& route(int peer) const;
  bool is_local(int peer) const;
  static const RoutedRemoteRegion& remote(const RemoteRegion& region);
  static const RoutedLocalRegion& local(const LocalRegion& region);

  std::unique_ptr<Transport> local_;
  std::unique_ptr<Transport> network_;
  std::string host_key_;
  Capabilities caps_;
  int rank_ = -1;
  int size_ = 0;
  std::vector<bool> local_peer_;  // [rank]: on this host, through local_
  std::atomic<uint64_t> wakes_{0};
  std::atomic<bool> poll_local_first_{true};
};

}  // namespace pcoll::transport::routed
