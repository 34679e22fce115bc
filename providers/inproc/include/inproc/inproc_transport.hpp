// The in-process provider's internal types: the process-wide directory of endpoints and
// registered regions (the "fabric"), an endpoint's queues, regions and InprocTransport
// itself. Only providers/inproc/*.cpp include this; the rest of pcoll sees
// pcoll::transport::Transport.
//
// Design in one paragraph: every rank is a thread of this process (tests/threads), so the
// network is memory. A process-wide directory lists live endpoints and registered regions by
// id; an address is (process id, endpoint id), a remote key (endpoint id, region id, size),
// and connect() refuses an address from another process with a message saying so. Data
// moves by memcpy into the target's region under the directory's shared lock, so a region
// being deregistered is never written. Writes up to inject_bytes are copied at once; larger
// ones are queued at the initiator and copied by its next progress(), poll(), wait() or
// flush() (whichever thread gets there first), so that the rule "the source stays
// unchanged until flush()" really matters. A write_notify's value is queued at the target
// after its copy. poll() hands out what is queued in a seeded random order (variant
// "fifo": in arrival order): nothing is ordered, and the engine's tolerance is exercised.
// Atomics are std::atomic_ref operations on the target's word. wait() sleeps on the
// endpoint's condition variable. One mutex per endpoint guards its queues.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <inproc/inproc_provider.hpp>
#include <support/error.hpp>
#include <transport/transport.hpp>

namespace pcoll::transport::inproc {

struct Endpoint;

// A large write waiting at its initiator (see the design paragraph).
struct PendingWrite {
  uint64_t src_region = 0;
  size_t src_offset = 0;
  std::shared_ptr<Endpoint> target;
  int peer = -1;  // the target's rank
  uint64_t dst_region = 0;
  size_t dst_offset = 0;
  size_t bytes = 0;
  bool notify = false;
  uint64_t value = 0;
};

// One rank's endpoint. Peers hold it by shared_ptr after connect(), so it outlives its
// transport; `closed` then turns their deliveries into errors.
struct Endpoint {
  const uint64_t id;
  const bool fifo;  // deliver notifications in arrival order (variant "fifo")
  int rank = -1;    // set by connect()

  std::mutex mutex;  // guards everything below
  std::condition_variable changed;  // a notification, an activity, a wake, a write done
  bool closed = false;
  std::deque<uint64_t> inbox;   // delivered notifications not yet polled
  std::mt19937_64 order;        // picks which queued value poll() hands out next
  uint64_t activity = 0;        // deliveries and queued writes, for WaitFor::activity
  uint64_t activity_seen = 0;   // the value the last WaitFor::activity returned on
  uint64_t wakes = 0;
  bool wake_pending = false;    // a wake() that no wait() has seen yet
  int waiters = 0;
  std::deque<PendingWrite> outbox;  // large writes posted here, not yet copied
  size_t copying = 0;               // taken from the outbox, copy in progress
  Errc error_code = Errc::ok;       // first failed queued write: every later call throws it
  std::string error;

  Endpoint(uint64_t endpoint_id, bool in_order) : id(endpoint_id), fifo(in_order), order(endpoint_id) {}
};

// The process-wide directory: endpoints and registered regions by id. The only global of
// the provider: it is what the ranks of one process share, as a NIC's table is for RDMA.
class Fabric {
 public:
  static Fabric& instance();

  uint64_t next_id() { return next_id_.fetch_add(1, std::memory_order_relaxed); }

  void add_endpoint(const std::shared_ptr<Endpoint>& endpoint);
  void remove_endpoint(uint64_t id);
  std::shared_ptr<Endpoint> find_endpoint(uint64_t id);

  struct Region {
    uint64_t owner;  // endpoint id
    std::span<std::byte> bytes;
  };
  // Exclusive lock: no copy or atomic is running on the memory afterwards.
  uint64_t add_region(uint64_t owner, std::span<std::byte> bytes);
  void remove_region(uint64_t id);
  // Accesses to region memory hold this shared; (de)registration holds it exclusive.
  std::shared_mutex& regions_mutex() { return regions_mutex_; }
  // With regions_mutex() held: the region, or nullptr once deregistered.
  const Region* find_region_locked(uint64_t id) const;

 private:
  std::atomic<uint64_t> next_id_{1};
  std::mutex endpoints_mutex_;
  std::unordered_map<uint64_t, std::weak_ptr<Endpoint>> endpoints_;
  std::shared_mutex regions_mutex_;
  std::unordered_map<uint64_t, Region> regions_;
};

// Memory of this rank, listed in the fabric's directory while it lives.
class InprocLocalRegion final : public LocalRegion {
 public:
  // `owned` holds provider-allocated memory (allocate()); empty for register_memory().
  InprocLocalRegion(std::shared_ptr<Endpoint> endpoint, std::span<std::byte> bytes,
                    std::unique_ptr<std::byte, void (*)(void*)> owned);
  ~InprocLocalRegion() override;
  Bytes remote_key() const override;
  uint64_t id() const { return id_; }
  const Endpoint& endpoint() const { return *endpoint_; }

 private:
  std::shared_ptr<Endpoint> endpoint_;
  std::span<std::byte> bytes_;
  std::unique_ptr<std::byte, void (*)(void*)> owned_;
  uint64_t id_ = 0;
};

// A peer's region, from its key.
class InprocRemoteRegion final : public RemoteRegion {
 public:
  InprocRemoteRegion(int peer, uint64_t id, size_t size, std::span<std::byte> bytes)
      : RemoteRegion(peer, size), id_(id), bytes_(bytes) {}
  uint64_t id() const { return id_; }
  // Ranks share the process: the peer's memory is right here (valid while the peer keeps
  // the region registered, which a collective's protocol guarantees while it reads it).
  std::span<std::byte> mapped() const override { return bytes_; }

 private:
  uint64_t id_;
  std::span<std::byte> bytes_;
};

class InprocTransport final : public Transport {
 public:
  InprocTransport(const std::string& variant, const Options& options);
  ~InprocTransport() override;

  const Capabilities& capabilities() const override { return caps_; }

  Bytes address() const override;
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(peers_.size()); }

  std::unique_ptr<LocalRegion> allocate(size_t bytes) override;
  std::unique_ptr<LocalRegion> register_memory(std::span<std::byte> memory) override;
  // Every peer: they are threads of this process.
  bool maps_memory_of(int peer) const override { return rank_ >= 0 && peer != rank_ && peer >= 0 && peer < size(); }


  void flush() override;

  void progress() override;
  size_t poll(std::span<uint64_t> out) override;
  bool wait(std::chrono::microseconds timeout, WaitFor what) override;
  void wake() override;

 protected:
  void do_connect(int my_rank, std::span<const Bytes> addresses) override;
  std::unique_ptr<RemoteRegion> do_import_region(int peer, std::span<const std::byte> key) override;
  void do_write(const LocalRegion& src, size_t src_offset, const RemoteRegion& dst, size_t dst_offset,
                size_t bytes) override;
  void do_write_notify(const LocalRegion& src, size_t src_offset, const RemoteRegion& dst,
                       size_t dst_offset, size_t bytes, uint64_t value) override;
  void do_notify(int peer, uint64_t value) override;
  uint64_t do_fetch_add(const RemoteRegion& dst, size_t offset, uint64_t operand) override;
  uint64_t do_compare_swap(const RemoteRegion& dst, size_t offset, uint64_t expected,
                           uint64_t desired) override;
  uint64_t do_swap(const RemoteRegion& dst, size_t offset, uint64_t value) override;
  uint64_t do_atomic_max(const RemoteRegion& dst, size_t offset, uint64_t value) override;

 private:
  // Checks that the transport is connected and `peer` is a rank of it.
  Endpoint& peer_endpoint(int peer, const char* op) const;
  // The write's checks, then the copy now (small) or a queued write (large).
  void post_write(const char* op, const LocalRegion& src, size_t src_offset, const RemoteRegion& dst,
                  size_t dst_offset, size_t bytes, bool notify, uint64_t value);
  // Copies queued writes until the outbox is empty (inproc_rma.cpp).
  void copy_pending();
  // Throws the first failed queued write, if any.
  void check_error();
  // Runs `op` on the 8-byte word at `offset` of `dst`, under the directory's shared lock.
  template <typename Op>
  uint64_t atomic(const char* name, const RemoteRegion& dst, size_t offset, Op&& op);

  Capabilities caps_;
  Options options_;
  std::shared_ptr<Endpoint> self_;
  int rank_ = -1;
  std::vector<std::shared_ptr<Endpoint>> peers_;  // by rank, after connect()
};

// The provider's own region types, or Errc::invalid_argument naming `op` (inproc_mr.cpp).
const InprocLocalRegion& local_of(const LocalRegion& region, const char* op);
const InprocRemoteRegion& remote_of(const RemoteRegion& region, const char* op);

// Queues `value` at `target` (Errc::peer_failed once its transport is gone).
void deliver(Endpoint& target, uint64_t value);

// Copies `bytes` between two registered regions under the directory's shared lock;
// `peer` names the target in errors.
void copy_between(uint64_t src_region, size_t src_offset, uint64_t dst_region, size_t dst_offset,
                  size_t bytes, int peer);

// "inproc" or "inproc:fifo" for messages.
std::string selector_of(const Endpoint& endpoint);

}  // namespace pcoll::transport::inproc
