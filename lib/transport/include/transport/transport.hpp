// The transport interface: the only door from the collectives to the network.
//
// One Transport is one endpoint of one process (rank) connected to every rank of the job.
// Providers (providers/ofi, providers/ucx) implement it; the collectives never see a
// libfabric or UCX type. Everything here is about bytes, peers and 64-bit values: a
// provider never knows what a round or a handle is.
//
// Threading: every method may be called from any thread, concurrently (the application
// thread and the progress thread share the transport).
// Errors: every failure throws pcoll::Error (support/error.hpp) with a message that names
// the peer and the operation; a dead or silent peer gives Errc::peer_failed or
// Errc::timeout, never a hang.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace pcoll::transport {

using Bytes = std::vector<std::byte>;

// What the provider can do, reported by Transport::capabilities() (and pcoll_info).
struct Capabilities {
  std::string name;                 // selector that made it: "ofi:shm", "ofi:tcp", "ucx:shm", ...
  std::string provider;             // the underlying provider/transports: "shm", "tcp;ofi_rxm", "posix,sysv"
  std::string domain;               // domain / device name
  size_t inject_bytes = 0;          // writes up to this size complete locally at once
  size_t max_write_bytes = 0;       // largest single provider write (larger writes are split)
  size_t max_atomic_count = 0;      // largest element count of one provider atomic
  unsigned notify_bits = 64;        // low bits of a notification value that arrive intact
  bool target_progress = false;     // RMA/atomics aimed at this process need it to poll
  // 64-bit remote atomics: fetch_add and compare_swap (hence swap and max, emulated where
  // need be). Without them every atomic throws Errc::unsupported; the engine's solo,
  // majority and sync handles use none, so they run either way.
  bool remote_atomics = false;
  bool native_atomic_max = false;   // max is a provider atomic (else compare-swap loop)
  bool wait_object = false;         // wait() sleeps on a provider fd (else spin, then back off)
  bool partial_connect = false;     // connect() accepts empty addresses (ranks it does not reach)
};

// Where the job's ranks run, learnt before any transport exists (gather_layout in
// rendezvous.hpp); the provider registry picks its default from it.
struct JobLayout {
  int hosts = 0;             // distinct hosts; 0: not known (every rank is then treated alike)
  int ranks_on_my_host = 0;  // this rank included
  // node_of[r]: the node of rank r, numbered 0.. in the order of each node's lowest rank. A
  // node is a host key (host name and boot id, rendezvous.hpp: host_key); every rank
  // derives it from the same gathered records, so every rank holds the same map.
  std::vector<int> node_of;
  std::string host_key;      // this rank's (rendezvous.hpp: host_key)
  // Two ranks with different host names run on one kernel (containers, network namespaces
  // given their own host name): libraries that take one kernel for one machine, as UCX does,
  // would try shared memory between them and fail.
  bool hosts_share_a_kernel = false;
};

// How the notifications this process sent to one peer travelled (Transport::
// notification_paths): stores into memory mapped from the peer (a shared-memory mailbox)
// or provider messages. Tests read it to see which path a peer gets; a
// provider with a single path counts nothing.
struct NotificationPaths {
  uint64_t by_memory = 0;
  uint64_t by_message = 0;
};

// Per-transport settings the collectives pass down.
struct Options {
  // Blocking operations (atomics, flush, connect) give up after this long with
  // Errc::timeout naming the peer. A communicator sets half of PCOLL_TIMEOUT_MS
  // (collectives/comm.cpp says why).
  std::chrono::milliseconds timeout{30000};
  JobLayout layout;
  // The ranks are the survivors of another communicator (pcoll_comm_shrink), numbered
  // afresh: test rules that name ranks of the job as launched (PCOLL_FAULT) do not apply.
  bool survivors = false;
};

// How provider errors quote Options::timeout: "1000 ms (half of PCOLL_TIMEOUT_MS)".
inline std::string timeout_text(std::chrono::milliseconds timeout) {
  return std::to_string(timeout.count()) + " ms (half of PCOLL_TIMEOUT_MS)";
}
// "rank " before one entry of a list of ranks, "ranks " before several.
inline std::string ranks_word(size_t count) { return count == 1 ? "rank " : "ranks "; }

// Memory of this process registered with the transport. Persistent: register once, use often.
// The base holds the span, so that Transport's checks read it without a virtual call.
class LocalRegion {
 public:
  virtual ~LocalRegion() = default;
  std::span<std::byte> bytes() const { return bytes_; }
  // Opaque blob (address, key, length) that peers pass to Transport::import_region().
  virtual Bytes remote_key() const = 0;

 protected:
  explicit LocalRegion(std::span<std::byte> bytes) : bytes_(bytes) {}

 private:
  std::span<std::byte> bytes_;
};

// A peer's registered memory, made from its remote_key() blob. Knows its peer and length
// (held by the base) so that every access is bounds-checked on the initiator side.
class RemoteRegion {
 public:
  virtual ~RemoteRegion() = default;
  int peer() const { return peer_; }
  size_t size() const { return size_; }
  // The peer's memory mapped into this process, for loads (and stores) of its own: a peer on
  // this host whose provider maps its regions here (Transport::maps_memory_of). Empty where
  // it does not. Ordering is the caller's: read what the peer published with a notification
  // only after that notification arrived.
  virtual std::span<std::byte> mapped() const { return {}; }

 protected:
  RemoteRegion(int peer, size_t size) : peer_(peer), size_(size) {}

 private:
  int peer_;
  size_t size_;
};

class Transport {
 public:
  virtual ~Transport() = default;
  Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  virtual const Capabilities& capabilities() const = 0;

  // --- Addressing: address() of every rank is gathered by the bootstrap (rank order) and
  // handed to connect(), which inserts them all. Rank r is peer r afterwards. connect() is
  // collective: every rank calls it, and a provider may exchange messages with every peer
  // before returning (at most Options::timeout), so that the first operation finds its
  // connection made. Where a provider supports it (Capabilities::partial_connect), an empty
  // address marks a rank this transport does not reach: a routed transport gives each of
  // its transports only the peers that transport serves. Any operation towards such a rank
  // is Errc::invalid_argument.
  virtual Bytes address() const = 0;
  void connect(int my_rank, std::span<const Bytes> addresses);
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // --- Memory.
  // Provider-allocated, registered, zeroed memory (UCX maps it with UCP_MEM_MAP_ALLOCATE).
  virtual std::unique_ptr<LocalRegion> allocate(size_t bytes) = 0;
  // Registers memory the caller owns; it must outlive the region, and be backed by pages
  // already (written once): some NICs pin at registration (libfabric's FI_MR_ALLOCATED).
  virtual std::unique_ptr<LocalRegion> register_memory(std::span<std::byte> memory) = 0;
  // Validates the blob (malformed blob -> Errc::protocol) and prepares access to it.
  std::unique_ptr<RemoteRegion> import_region(int peer, std::span<const std::byte> key) {
    check_peer("import_region", peer);
    return do_import_region(peer, key);
  }

  // --- One-sided data movement. Asynchronous: the source bytes must stay unchanged until
  // flush() returns. Out-of-range offsets (either side) throw Errc::invalid_argument.
  void write(const LocalRegion& src, size_t src_offset, const RemoteRegion& dst, size_t dst_offset,
             size_t bytes) {
    check_write("write", src, src_offset, dst, dst_offset, bytes);
    do_write(src, src_offset, dst, dst_offset, bytes);
  }
  // write() plus `value` delivered to the target's notification queue once the written
  // bytes are visible there. bytes may be 0.
  void write_notify(const LocalRegion& src, size_t src_offset, const RemoteRegion& dst, size_t dst_offset,
                    size_t bytes, uint64_t value) {
    check_write("write_notify", src, src_offset, dst, dst_offset, bytes);
    do_write_notify(src, src_offset, dst, dst_offset, bytes, value);
  }
  // `value` alone. No ordering against earlier writes unless flush() came between.
  void notify(int peer, uint64_t value) {
    check_peer("notify", peer);
    do_notify(peer, value);
  }
  // notify(), but only if the provider takes `value` now: false when its transmit queue
  // stays full after one reaping of completions (nothing was sent). For messages that may
  // go to a departed peer (failure news): a provider that cannot reach one may keep the
  // queue full, and notify() then waits the transport's timeout for each such peer. Other
  // errors as notify().
  bool try_notify(int peer, uint64_t value) {
    check_peer("try_notify", peer);
    return do_try_notify(peer, value);
  }
  // Counts of the paths notify()/write_notify() to `peer` took so far (see
  // NotificationPaths); all zero where the provider has one path only.
  virtual NotificationPaths notification_paths(int /*peer*/) const { return {}; }
  // Whether regions `peer` allocates (allocate()) will be mapped here once imported
  // (RemoteRegion::mapped): known once connect() returned, so that ranks can choose a plan
  // that reads a peer's memory before any region exists. False by default.
  virtual bool maps_memory_of(int /*peer*/) const { return false; }

  // --- 64-bit remote atomics on an 8-byte-aligned word. Blocking; return the old value.
  // Where capabilities().remote_atomics is false each throws Errc::unsupported naming the
  // provider.
  uint64_t fetch_add(const RemoteRegion& dst, size_t offset, uint64_t operand) {
    check_word("fetch_add", dst, offset);
    return do_fetch_add(dst, offset, operand);
  }
  // Stores `desired` if the word equals `expected`; returns the old word either way.
  uint64_t compare_swap(const RemoteRegion& dst, size_t offset, uint64_t expected, uint64_t desired) {
    check_word("compare_swap", dst, offset);
    return do_compare_swap(dst, offset, expected, desired);
  }
  uint64_t swap(const RemoteRegion& dst, size_t offset, uint64_t value) {
    check_word("swap", dst, offset);
    return do_swap(dst, offset, value);
  }
  // Unsigned max; emulated with compare_swap where the provider has no native max.
  uint64_t atomic_max(const RemoteRegion& dst, size_t offset, uint64_t value) {
    check_word("atomic_max", dst, offset);
    return do_atomic_max(dst, offset, value);
  }

  // Waits until every operation this process posted before the call is complete: its
  // source bytes may be reused, a plain write's data is visible at the target, and a
  // write_notify's data is visible there no later than its notification.
  virtual void flush() = 0;

  // --- Progress and notifications.
  // Drives the provider (completions, target-side work for peers' RMA/atomics) and moves
  // arrived notifications to an internal queue. Never blocks.
  virtual void progress() = 0;
  // progress(), then pops up to out.size() notification values. Each value written by
  // notify()/write_notify() is returned exactly once, by exactly one poll().
  // A delivery error found by progress (a write that completed in error, a notification
  // that arrived damaged) is thrown by the next poll(), once, naming the peer where the
  // provider knows it: the side waiting on that delivery would otherwise wait forever,
  // since nothing but a later flush() would look. flush() still reports its own writes'.
  virtual size_t poll(std::span<uint64_t> out) = 0;
  // What wait() waits for.
  enum class WaitFor {
    notification,  // the notification queue is non-empty (a consumer about to poll())
    activity,      // any provider event was progressed (a progress driver that does not
                   // consume notifications: it must not spin on a non-empty queue)
  };
  // Blocks until `what` happened, wake() was called, or `timeout` passed; false on timeout.
  // Drives progress while it waits. Sleeps on the provider's wait object where there is
  // one; otherwise spins briefly and then backs off, so an idle waiter costs little CPU.
  // Several threads may wait at once; notifications queued by one thread's progress()
  // wake the others' WaitFor::notification.
  virtual bool wait(std::chrono::microseconds timeout, WaitFor what = WaitFor::notification) = 0;
  // Makes a concurrent or the next wait() return promptly (shutdown, new local work).
  virtual void wake() = 0;
  // While a call of this transport waits for room in a full queue or for completions, it
  // calls `hook` now and then with none of its own locks held. A transport made of several
  // (routed: shared memory to some peers, the network to others) has each part progress the
  // others meanwhile: a part that only progresses itself while it waits leaves the peers of
  // the other part waiting on this rank, and around a ring of ranks that alternates parts
  // they all wait for good. Set before connect(). A provider whose calls never wait for
  // long ignores it.
  virtual void set_wait_hook(std::function<void()> /*hook*/) {}
  // The job failed before it was set up: the destructor must not wait for or progress
  // towards peers (no best-effort flush). A provider without such a flush ignores it.
  virtual void abandon() {}
  // The job is ending: this rank has entered the communicator's last barrier, and a peer
  // that finishes it closes its endpoints, possibly before this rank has finished. A
  // provider that logs a peer's lost connection as it happens logs it quietly from now on
  // (most likely a departure; the communicator still names a rank that died meanwhile, by
  // its failure notices and pings); calls to such a peer still fail as before.
  virtual void expect_departures() {}

 protected:
  // What a provider implements behind the checked calls above: peer, ranges and alignment
  // are checked once here (transport.cpp), so an implementation sees a connected peer it
  // reaches and in-range offsets; region types and the provider's own state stay its job.
  virtual void do_connect(int my_rank, std::span<const Bytes> addresses) = 0;
  virtual std::unique_ptr<RemoteRegion> do_import_region(int peer, std::span<const std::byte> key) = 0;
  virtual void do_write(const LocalRegion& src, size_t src_offset, const RemoteRegion& dst, size_t dst_offset,
                        size_t bytes) = 0;
  virtual void do_write_notify(const LocalRegion& src, size_t src_offset, const RemoteRegion& dst,
                               size_t dst_offset, size_t bytes, uint64_t value) = 0;
  virtual void do_notify(int peer, uint64_t value) = 0;
  // A provider whose notify() never waits for room sends it.
  virtual bool do_try_notify(int peer, uint64_t value) {
    do_notify(peer, value);
    return true;
  }
  virtual uint64_t do_fetch_add(const RemoteRegion& dst, size_t offset, uint64_t operand) = 0;
  virtual uint64_t do_compare_swap(const RemoteRegion& dst, size_t offset, uint64_t expected,
                                   uint64_t desired) = 0;
  virtual uint64_t do_swap(const RemoteRegion& dst, size_t offset, uint64_t value) = 0;
  virtual uint64_t do_atomic_max(const RemoteRegion& dst, size_t offset, uint64_t value) = 0;

 private:
  // The checks: inline where they pass, the errors out of line (transport.cpp), all
  // Errc::invalid_argument in one format: "<selector>: <operation> to rank <peer>: ...".
  void check_peer(const char* operation, int peer) const {
    if (peer < 0 || peer >= peer_count_ || unreachable_[static_cast<size_t>(peer)]) refuse_peer(operation, peer);
  }
  static bool inside(size_t offset, size_t bytes, size_t size) { return offset <= size && bytes <= size - offset; }
  void check_write(const char* operation, const LocalRegion& src, size_t src_offset, const RemoteRegion& dst,
                   size_t dst_offset, size_t bytes) const {
    check_peer(operation, dst.peer());
    if (!inside(src_offset, bytes, src.bytes().size()))
      refuse_range(operation, dst.peer(), "local", src_offset, bytes, src.bytes().size());
    if (!inside(dst_offset, bytes, dst.size()))
      refuse_range(operation, dst.peer(), "remote", dst_offset, bytes, dst.size());
  }
  void check_word(const char* operation, const RemoteRegion& dst, size_t offset) const {
    check_peer(operation, dst.peer());
    if (offset % sizeof(uint64_t) != 0 || !inside(offset, sizeof(uint64_t), dst.size()))
      refuse_word(operation, dst.peer(), offset, dst.size());
  }
  [[noreturn]] void refuse_peer(const char* operation, int peer) const;
  [[noreturn]] void refuse_range(const char* operation, int peer, const char* side, size_t offset, size_t bytes,
                                 size_t size) const;
  [[noreturn]] void refuse_word(const char* operation, int peer, size_t offset, size_t size) const;

  int peer_count_ = 0;             // 0 until connect()
  std::vector<bool> unreachable_;  // ranks connect() got no address for (partial_connect)
};

// A provider, as the registry (providers/registry/include/registry/registry.hpp) lists it: like libfabric's
// struct fi_provider, one descriptor per implementation instead of #if branches.
struct ProviderDescriptor {
  // A core provider opens a network itself; a layered one wraps the transport of another
  // selector, written "<family>+<selector>" (libfabric's hook providers).
  enum class Kind { core, layered };

  const char* family;                 // the selector's part before the colon: "ofi", "ucx"
  const char* summary;                // one line for pcoll_info
  std::vector<std::string> variants;  // accepted after the colon ("" alone: the best one); none when layered
  // Core: makes a transport for `variant` ("" = the best this provider finds). Throws
  // Errc::invalid_argument / Errc::unsupported naming what is missing.
  std::unique_ptr<Transport> (*create)(const std::string& variant, const Options& options);
  Kind kind = Kind::core;
  // Layered: wraps `inner`, the transport the selector after the "+" made.
  std::unique_ptr<Transport> (*wrap)(std::unique_ptr<Transport> inner, const Options& options) = nullptr;
  // Core: the variants that name a network whose peers on this host the registry routes
  // through `local_variant` instead (PCOLL_LOCAL_PATH; docs/transport.md, "Routing").
  std::vector<std::string> network_variants = {};
  const char* local_variant = nullptr;
};

}  // namespace pcoll::transport
