// Internal declarations of the UCX (UCP) provider: RAII wrappers for UCP objects, the
// shared provider state (UcxCore), the region classes and the Transport implementation.
// Nothing outside providers/ucx includes this file.
//
// Locking: one mutex (UcxCore::mutex) serialises every UCP call on the worker (the worker is
// created UCS_THREAD_MODE_SERIALIZED), so UCP callbacks, which only run inside
// ucp_worker_progress(), always run with it held and may touch UcxCore freely.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#include <ucp/api/ucp.h>
#pragma GCC diagnostic pop

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <support/error.hpp>
#include <transport/transport.hpp>
#include <ucx/ucx_key.hpp>
#include <ucx/ucx_provider.hpp>
#include <util/delivery_error.hpp>
#include <util/wait_loop.hpp>

namespace pcoll::transport::ucx {

using Clock = std::chrono::steady_clock;

// --- RAII for UCP handles -------------------------------------------------------------
struct ConfigDeleter {
  void operator()(ucp_config_t* config) const noexcept { ucp_config_release(config); }
};
struct ContextDeleter {
  void operator()(ucp_context* context) const noexcept { ucp_cleanup(context); }
};
struct WorkerDeleter {
  void operator()(ucp_worker* worker) const noexcept { ucp_worker_destroy(worker); }
};
using ConfigPtr = std::unique_ptr<ucp_config_t, ConfigDeleter>;
using ContextPtr = std::unique_ptr<ucp_context, ContextDeleter>;
using WorkerPtr = std::unique_ptr<ucp_worker, WorkerDeleter>;

// Throws pcoll::Error(code) with "ucx: <what>: <UCS status string>".
[[noreturn]] void fail_status(Errc code, const std::string& what, ucs_status_t status);
// The same for a failure about one peer (Error::rank() = peer_rank).
[[noreturn]] void fail_peer_status(Errc code, int peer_rank, const std::string& what,
                                   ucs_status_t status);
// Errc for a failed operation towards a peer: peer_failed for connection-level statuses.
Errc errc_for_peer_status(ucs_status_t status);

// Active message ids of this provider.
enum AmId : unsigned {
  am_notify = 0x31,        // header: uint64 value; no data
  am_write_notify = 0x32,  // header: uint64 target address, uint64 value; data: the bytes
  am_hello = 0x33,         // connect, first phase. header: uint64 sender rank, uint64 job size;
                           // data: the sender's mailbox key blob, or nothing
  am_kick = 0x34,          // no header, no data: wakes a receiver asleep on its mailbox
  am_ready = 0x35,         // connect, second phase. header: uint64 sender rank; no data
  am_atomic = 0x36,        // ucx:tcp atomics (ucx_atomic.cpp). header: AtomicRequest; no data
  am_atomic_reply = 0x37,  // header: uint64 request id, uint64 old value; no data
};

// An atomic that the target runs in its am_atomic handler and answers with am_atomic_reply
// (ucx:tcp, where UCP would run it in software with an answer UCX may abort on).
enum class AtomicKind : uint64_t { add = 1, compare_swap = 2, swap = 3 };
struct AtomicRequest {
  uint64_t kind;     // AtomicKind
  uint64_t sender;   // rank the reply goes to
  uint64_t id;       // the sender's request id
  uint64_t address;  // of an 8-byte-aligned word in one of the target's regions
  uint64_t operand;  // add: addend; compare_swap: expected; swap: new value
  uint64_t desired;  // compare_swap: the new value; otherwise 0
};

// The key blob around a packed rkey (envelope and its validation: ucx_key.hpp).
Bytes pack_key(ucp_context_h context, ucp_mem_h memh, uint64_t address, size_t length,
               uint64_t origin);

// Bytes a write()/write_notify() copies before posting, so the caller's buffer is free at
// once (Capabilities::inject_bytes).
inline constexpr size_t kInjectBytes = 256;
// write_notify payloads up to this size travel inside one eager active message (copied into
// SendOp::inline_bytes); larger ones are a put, an endpoint flush where nothing else orders
// the two, and the notification (ucx_rma.cpp).
inline constexpr size_t kEagerNotifyBytes = 8192;

class UcxCore;

// Fire-and-forget send (put, active message). Pooled; lives until UCP completes it.
struct SendOp {
  UcxCore* core = nullptr;
  int peer = -1;
  std::array<uint64_t, 2> header{};
  uint64_t puts_posted = 0;  // large write_notify: Peer::puts_posted when its flush was posted
  alignas(16) std::array<std::byte, kEagerNotifyBytes> inline_bytes{};
};

// Blocking operation (atomic, flush): the waiter polls `done`. Heap-allocated and kept by the
// core if the waiter times out, because UCP may still write `reply` later.
struct BlockingOp {
  bool done = false;
  ucs_status_t status = UCS_OK;
  uint64_t operand = 0;
  uint64_t reply = 0;
};

// Rendezvous receive of a write_notify whose data UCP fetches after the callback returned.
struct RecvOp {
  UcxCore* core = nullptr;
  uint64_t value = 0;
};

// One connected rank.
struct Peer {
  UcxCore* core = nullptr;
  int rank = -1;
  ucp_ep_h ep = nullptr;
  uint64_t address_fingerprint = 0;  // of its worker address; checked against region keys
  // First error UCP reported for this peer (error handler or a failed send); UCS_OK if none.
  ucs_status_t failure = UCS_OK;
  std::string failure_what;
  size_t sends_in_flight = 0;  // SendOps not yet completed
  bool dirty = false;          // operations posted since the last flush
  // Puts posted to this peer, and how many of them an endpoint flush has since completed.
  // flush() only flushes the endpoint when they differ: on tcp an endpoint flush is a round
  // trip that needs the peer to progress, and active messages (notify, write_notify) never
  // need one (their bytes are placed together with the value).
  uint64_t puts_posted = 0;
  uint64_t puts_flushed = 0;
  // connect()'s two phases (UcxTransport::wire_up): this peer's hello and ready arrived.
  bool hello_received = false;
  bool ready_received = false;
  NotificationPaths paths;  // how our notifications to it travelled
};

// Shared-memory notification rings (ucx_mailbox.cpp), opened under every selector but
// ucx:tcp and used towards each peer whose mailbox UCX maps into this process (its
// ucp_rkey_ptr succeeds: a peer on this host, in the same IPC namespace): notify() and
// write_notify() to it become plain stores. Other peers keep the UCP path.
//
// Each rank maps one mailbox region: a sleep flag, then one ring of kSlots slots per
// sender, then one credit word per receiver. A sender copies the data straight into the
// target region (ucp_rkey_ptr), writes the value into its next slot of the target's ring,
// and publishes the slot with a release store of its sequence number; the receiver polls
// the sequence words, so a value is never seen before its bytes. The receiver reports what
// it consumed into the sender's credit word; a full ring, a peer whose mailbox key has not
// arrived yet, or memory that is not mapped all fall back to active messages. A receiver
// about to sleep on the worker fd raises its sleep flag and looks at the rings once more;
// a sender that sees the flag after publishing sends an am_kick (a Dekker handshake with
// sequentially consistent fences on both sides), so no notification is slept through.
class Mailbox {
 public:
  static constexpr uint64_t kSlots = 64;

  explicit Mailbox(UcxCore& core) : core_(core) {}
  ~Mailbox() { close(); }
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  // All below: core mutex held.
  // Maps this rank's mailbox for a job of `ranks`; its key goes to every peer (am_mailbox).
  void open(int my_rank, int ranks);
  bool is_open() const { return base_ != nullptr; }
  const Bytes& key() const { return key_; }
  // A peer's key arrived (its hello). Malformed keys are logged and ignored, and a key UCX
  // cannot map here (another host) is dropped: that peer keeps using active messages.
  void attach(int peer, std::span<const std::byte> key);
  // Whether the peer's ring is mapped here (notifications to it can be stores).
  bool attached(int peer) const;
  // notify / write_notify through the peer's ring; false: use an active message instead.
  // `target` is where the bytes go in this process's mapping of the peer's memory, and
  // `target_address` the same place in the peer's address space.
  bool send(int peer, std::byte* target, uint64_t target_address, const void* bytes,
            size_t count, uint64_t value);
  // Whether the last successful send() found its receiver asleep (it needs an am_kick).
  bool receiver_asleep() const { return receiver_asleep_; }
  // Moves arrived values to the core's notification queue; returns how many.
  size_t drain();
  void set_asleep(bool asleep);
  // Unmaps the region and drops the peers' keys (before the endpoints close).
  void close();

 private:
  struct PeerBox {
    ucp_rkey_h rkey = nullptr;
    std::byte* ring = nullptr;         // my ring inside the peer's mailbox
    uint64_t* asleep = nullptr;        // the peer's sleep flag
    uint64_t* credit_for_it = nullptr; // the peer's credit word about my consumption
    uint64_t sent = 0;                 // values I put into its ring
    uint64_t received = 0;             // values I took from its ring in mine
    uint64_t reported = 0;             // `received` as last written to credit_for_it
  };
  std::byte* ring_of(int sender) const;
  uint64_t* credit_of(int receiver) const;
  void report(PeerBox& box);

  UcxCore& core_;
  ucp_mem_h memh_ = nullptr;
  std::byte* base_ = nullptr;
  size_t bytes_ = 0;
  int my_rank_ = -1;
  int ranks_ = 0;
  Bytes key_;
  std::vector<PeerBox> peers_;
  bool receiver_asleep_ = false;
};

// Provider state shared (shared_ptr) by the transport and the regions it made, so that a
// region destroyed after its transport still finds a live worker.
class UcxCore : private WaitLoop::Hooks {
 public:
  UcxCore(const std::string& variant, const Options& options);
  ~UcxCore();
  UcxCore(const UcxCore&) = delete;
  UcxCore& operator=(const UcxCore&) = delete;

  // --- set once at construction
  Capabilities caps;
  Options options;
  std::string variant;
  // The selector lets same-host peers use the mailbox (every one but ucx:tcp, whose suites
  // test what they name).
  bool mailbox_wanted = false;
  // ucx:tcp: UCP has no RMA lane and would run a put in software, so a large write_notify
  // carries its bytes in its own active message instead (ucx_rma.cpp says why).
  bool software_rma = false;
  // PCOLL_TEST_UCX_UNMAPPED_RANK: this rank and its peers do not map each other's memory,
  // as if it ran on another host; -1: unset.
  int unmapped_rank = -1;
  // Whether memory of `peer` may be used through a local mapping (the test setting aside,
  // whether ucp_rkey_ptr succeeds decides).
  bool may_map(int peer) const;

  std::mutex mutex;

  // Blocked threads (ucx_progress.cpp): at most one sleeps on the worker fd, the others on a
  // condition variable; every call with `mutex` held. Made with the worker.
  std::optional<WaitLoop> wait_loop;
  // One ucp_worker_progress() pass plus the bookkeeping that wakes sleeping threads.
  unsigned progress_locked();

  // Notification queue (lock held).
  void enqueue_notification(uint64_t value);
  size_t pop_notifications(std::span<uint64_t> out);
  bool has_notifications() const { return !notifications_.empty(); }
  uint64_t activity_seq() const { return activity_seq_; }
  // A delivery error (a peer's notification dropped here as malformed or aimed outside
  // every region, a write_notify of ours that failed): kept, first one only, for the next
  // poll() to throw once (transport.hpp). Lock held.
  void defer_delivery_error(Error error);
  void throw_delivery_error_once();

  // Notifications whose put was flushed inside ucp_worker_progress(): their active message
  // goes out once progress has returned, since UCP callbacks must not start communication
  // on the endpoint being progressed (UCX asserts on its arbiter). Lock held.
  void defer_notify(SendOp* op) { deferred_notifies_.push_back(op); }
  void send_deferred_notifies();

  // ucx:tcp atomics (ucx_atomic.cpp). Requests of ours awaiting their reply, by id (an op
  // whose waiter gave up stays in abandoned_ops until its reply comes); and replies of ours,
  // queued by the am_atomic handler and sent once progress has returned, like notifications
  // above. Lock held.
  uint64_t next_atomic_id = 1;
  std::map<uint64_t, BlockingOp*> atomics_awaited;
  void defer_atomic_reply(int rank, uint64_t id, uint64_t old_value) {
    deferred_atomic_replies_.push_back({rank, id, old_value});
  }
  void send_deferred_atomic_replies();
  void run_atomic_request(const AtomicRequest& request);
  void take_atomic_reply(uint64_t id, uint64_t old_value);

  // Send-op pool and completion bookkeeping (lock held).
  SendOp* acquire_send_op(int peer);
  void release_send_op(SendOp* op);
  void record_failure(Peer& peer, ucs_status_t status, const std::string& what);
  // Set by expect_departures(): a peer's lost connection is then logged at debug level
  // (ucx:tcp reports "Endpoint timeout" for a peer that closed while finalizing).
  std::atomic<bool> departures_expected{false};
  // Throws peer_failed if UCP reported an error for the peer.
  void check_peer(const Peer& peer) const;
  Peer& peer(int rank);

  // Local regions that incoming write_notify data may land in (lock held).
  void add_local_range(uintptr_t address, size_t bytes);
  void remove_local_range(uintptr_t address);
  bool contains_local_range(uintptr_t address, size_t bytes) const;

  // Keeps a timed-out op alive until UCP completes it or the worker is gone.
  void abandon(std::unique_ptr<BlockingOp> op);

  // connect()'s messages (lock held). A hello that comes before our own connect() (a peer
  // that was faster) is kept until connect() has made the endpoints.
  void take_hello(int rank, uint64_t job_size, std::span<const std::byte> key);
  void take_ready(int rank);
  void take_early_hellos();

  Mailbox mailbox{*this};

  // --- UCP objects. ~UcxCore closes the endpoints, then destroys the worker and the context
  // explicitly, before any member that UCP callbacks touch (peers, send-op pool, queues).
  std::list<std::unique_ptr<BlockingOp>> abandoned_ops;
  std::vector<std::unique_ptr<SendOp>> send_op_storage;
  ContextPtr context;
  WorkerPtr worker;
  std::vector<std::unique_ptr<Peer>> peers;
  Bytes worker_address;
  int worker_fd = -1;  // owned by the worker
  int my_rank = -1;

 private:
  void create_context();
  void create_worker();
  void close_endpoints();
  static WaitTuning wait_tuning();
  // WaitLoop::Hooks (mutex held): a progress pass; arming the worker fd and the mailbox's
  // sleep flag before sleeping, and lowering the flag after.
  unsigned progress_pass() override { return progress_locked(); }
  bool arm() override;
  void disarm() override;

  std::vector<SendOp*> free_send_ops_;
  std::vector<SendOp*> deferred_notifies_;
  struct AtomicReply {
    int rank;
    uint64_t id;
    uint64_t old_value;
  };
  std::vector<AtomicReply> deferred_atomic_replies_;
  struct EarlyHello {
    int rank;
    uint64_t job_size;
    Bytes key;
  };
  std::vector<EarlyHello> early_hellos_;
  std::deque<uint64_t> notifications_;
  DeliveryError delivery_error_;
  std::map<uintptr_t, size_t> local_ranges_;
  mutable std::pair<uintptr_t, size_t> last_range_{0, 0};  // last range a lookup matched
  uint64_t activity_seq_ = 0;  // bumped by progress that handled events, and peer failures
  unsigned passes_without_ucp_ = 0;  // progress passes served by the mailbox alone (progress_locked)
};

// Registered memory of this process.
class UcxLocalRegion final : public LocalRegion {
 public:
  UcxLocalRegion(std::shared_ptr<UcxCore> core, ucp_mem_h memh, std::span<std::byte> bytes);
  ~UcxLocalRegion() override;
  Bytes remote_key() const override { return key_; }
  const UcxCore* core() const { return core_.get(); }

 private:
  std::shared_ptr<UcxCore> core_;
  ucp_mem_h memh_;  // null for an empty region
  std::span<std::byte> bytes_;
  Bytes key_;
};

// A peer's registered memory.
class UcxRemoteRegion final : public RemoteRegion {
 public:
  UcxRemoteRegion(std::shared_ptr<UcxCore> core, int peer, uint64_t address, size_t bytes,
                  ucp_rkey_h rkey);
  ~UcxRemoteRegion() override;
  uint64_t address() const { return address_; }
  ucp_rkey_h rkey() const { return rkey_; }
  const UcxCore* core() const { return core_.get(); }
  // The region in this process's address space where UCX maps it (shared memory), or null.
  std::byte* mapped_at() const { return mapped_; }
  std::span<std::byte> mapped() const override {
    return mapped_ ? std::span<std::byte>(mapped_, bytes_) : std::span<std::byte>{};
  }

 private:
  std::shared_ptr<UcxCore> core_;
  int peer_;
  uint64_t address_;
  size_t bytes_;
  ucp_rkey_h rkey_;  // null for an empty region
  std::byte* mapped_ = nullptr;
};

class UcxTransport final : public Transport {
 public:
  UcxTransport(const std::string& variant, const Options& options);
  ~UcxTransport() override;

  const Capabilities& capabilities() const override { return core_->caps; }
  Bytes address() const override { return core_->worker_address; }
  int rank() const override { return core_->my_rank; }
  int size() const override { return static_cast<int>(core_->peers.size()); }

  std::unique_ptr<LocalRegion> allocate(size_t bytes) override;
  std::unique_ptr<LocalRegion> register_memory(std::span<std::byte> memory) override;

  NotificationPaths notification_paths(int peer) const override;
  bool maps_memory_of(int peer) const override;


  void flush() override;

  void progress() override;
  size_t poll(std::span<uint64_t> out) override;
  bool wait(std::chrono::microseconds timeout, WaitFor what) override;
  void wake() override;
  // No shutdown flush: UCX 1.13 faults in ucp_worker_progress on the endpoint of a peer
  // that died before its wire-up finished (docs/reliability.md).
  void abandon() override { abandoned_ = true; }
  void expect_departures() override { core_->departures_expected.store(true, std::memory_order_relaxed); }

 protected:
  void do_connect(int my_rank, std::span<const Bytes> addresses) override;
  std::unique_ptr<RemoteRegion> do_import_region(int peer, std::span<const std::byte> key) override;
  void do_write(const LocalRegion& src, size_t src_offset, const RemoteRegion& dst,
                size_t dst_offset, size_t bytes) override;
  void do_write_notify(const LocalRegion& src, size_t src_offset, const RemoteRegion& dst,
                       size_t dst_offset, size_t bytes, uint64_t value) override;
  void do_notify(int peer, uint64_t value) override;
  uint64_t do_fetch_add(const RemoteRegion& dst, size_t offset, uint64_t operand) override;
  uint64_t do_compare_swap(const RemoteRegion& dst, size_t offset, uint64_t expected,
                           uint64_t desired) override;
  uint64_t do_swap(const RemoteRegion& dst, size_t offset, uint64_t value) override;
  uint64_t do_atomic_max(const RemoteRegion& dst, size_t offset, uint64_t value) override;

 private:
  void flush_within(std::chrono::milliseconds timeout);
  // connect()'s wire-up of every endpoint (ucx_ep.cpp).
  void wire_up(std::unique_lock<std::mutex>& lock);
  // Posts `id` with `header` (and `data`) to every peer but this rank.
  void send_to_every_peer(std::unique_lock<std::mutex>& lock, AmId id,
                          std::span<const uint64_t> header, std::span<const std::byte> data,
                          const char* what);
  std::unique_ptr<LocalRegion> map_memory(void* address, size_t bytes, bool allocate);
  const UcxLocalRegion& local(const LocalRegion& region) const;
  const UcxRemoteRegion& remote(const RemoteRegion& region) const;
  void check_connected(const char* operation) const;
  // Posts one atomic and waits for it (lock held by the caller's scope inside).
  uint64_t atomic(const RemoteRegion& dst, size_t offset, ucp_atomic_op_t opcode,
                  uint64_t operand, uint64_t reply_in, const char* what);
  // ucx:tcp: the same as an am_atomic request and its reply.
  uint64_t atomic_by_message(const UcxRemoteRegion& dst, size_t offset, AtomicKind kind,
                             uint64_t operand, uint64_t desired, const char* what);
  // Waits for a blocking op posted under `lock`; throws timeout / peer_failed naming `peer`.
  void await(std::unique_lock<std::mutex>& lock, ucs_status_ptr_t request, BlockingOp& op,
             std::unique_ptr<BlockingOp>& owner, int peer, const std::string& what);
  void await_done(std::unique_lock<std::mutex>& lock, BlockingOp& op,
                  std::unique_ptr<BlockingOp>& owner, int peer, const std::string& what);
  void post_send(std::unique_lock<std::mutex>& lock, Peer& peer, SendOp* op,
                 ucs_status_ptr_t request, const char* what);
  // A notification (with `count` bytes for `target` / `target_address`, see Mailbox::send)
  // through the peer's mailbox, kicking it awake if it sleeps; false: the caller sends an
  // active message.
  bool send_by_mailbox(std::unique_lock<std::mutex>& lock, Peer& peer, std::byte* target,
                       uint64_t target_address, const void* bytes, size_t count, uint64_t value);

  bool abandoned_ = false;
  std::shared_ptr<UcxCore> core_;
};

// Request parameters of a fire-and-forget send completed by on_send_complete.
ucp_request_param_t send_param(SendOp* op);

// UCP callbacks (ucx_progress.cpp / ucx_rma.cpp).
void on_send_complete(void* request, ucs_status_t status, void* user_data);
void on_blocking_complete(void* request, ucs_status_t status, void* user_data);

// Posts an endpoint flush towards `p`, completed by on_blocking_complete: the op (done at
// once where UCX completed it inline), or null when UCX refused it, which is recorded as
// the peer's failure with `what`.
std::unique_ptr<BlockingOp> start_endpoint_flush(UcxCore& core, Peer& p, const char* what);

}  // namespace pcoll::transport::ucx
