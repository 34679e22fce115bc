// The libfabric provider's internal types: RAII owners for fi_* objects, the selected
// provider description, memory regions and OfiTransport itself. Only providers/ofi/*.cpp
// include this; the rest of pcoll sees pcoll::transport::Transport.
//
// Design in one paragraph: one FI_EP_RDM endpoint with one CQ (FI_CQ_FORMAT_DATA) bound for
// transmit and receive. Data moves with fi_writemsg (plain writes FI_DELIVERY_COMPLETE,
// write_notify FI_TRANSMIT_COMPLETE; FI_INJECT when small); write_notify carries the value
// as remote CQ data, which the target's CQ reports only once the data is placed. notify()
// cannot use RMA (connect() exchanges addresses, not keys), so it sends the 8-byte value as
// an FI_MSG inject into a pool of posted receives that progress() re-posts. All libfabric
// calls run under one mutex (the domain is opened FI_THREAD_DOMAIN, which that mutex makes
// correct). Every operation that produces a completion carries a context of its own that
// begins with the fi_context2 FI_CONTEXT providers write into, then an Op tag saying what to
// update (ofi_context.hpp). 64-bit atomics are used where the provider has them and refused
// with Errc::unsupported where it has not (Capabilities::remote_atomics).
#pragma once

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <ofi/ofi_context.hpp>
#include <ofi/ofi_provider.hpp>
#include <support/error.hpp>
#include <transport/transport.hpp>
#include <util/delivery_error.hpp>
#include <util/wait_loop.hpp>

namespace pcoll::transport::ofi {

// --- RAII for libfabric objects -------------------------------------------------------

template <class T>
struct FidCloser {
  void operator()(T* object) const noexcept {
    if (object != nullptr) fi_close(&object->fid);
  }
};
template <class T>
using FidPtr = std::unique_ptr<T, FidCloser<T>>;

struct InfoDeleter {
  void operator()(fi_info* info) const noexcept { fi_freeinfo(info); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

// "fi_writemsg to rank 3: Connection reset by peer (-104)"
std::string fi_message(const std::string& call, ssize_t rc);
// Throws Errc::transport for a failed libfabric call that has no peer to blame.
[[noreturn]] void fail_fi(const std::string& call, ssize_t rc);
// Throws for a post that failed for good: Errc::timeout (queue stayed full),
// Errc::peer_failed (connection lost) or Errc::transport, naming the rank (ofi_rma.cpp).
[[noreturn]] void fail_post(const std::string& op, int peer, ssize_t rc,
                            std::chrono::milliseconds timeout);
// Errors that mean the peer is gone rather than a local problem.
bool is_peer_loss(ssize_t rc);

// --- Provider selection (ofi_fabric.cpp) -------------------------------------------------

// Everything fi_getinfo said about the chosen provider, plus the pcoll selector name.
struct ProviderInfo {
  InfoPtr info;            // one fi_info, owned
  std::string selector;    // "ofi:shm", "ofi:tcp", ...
  // Why info->caps lacks FI_ATOMIC ("" when it has it): no entry that offers it also offers
  // what pcoll needs, or a test asked for none (PCOLL_TEST_OFI_WITHOUT_ATOMICS).
  std::string no_atomics;
};

// Candidate libfabric provider names for a variant ("" = best available, in order).
std::vector<std::string> candidate_providers(const std::string& variant);
// fi_getinfo for one provider name: an entry with everything pcoll needs
// (ofi_requirements.hpp), with FI_ATOMIC where one offers it; nullopt with the reasons in
// *why_not (one per kind of entry refused) when none does.
std::optional<ProviderInfo> query_provider(const std::string& prov_name, std::string* why_not);
// "shm, tcp;ofi_rxm, sockets" (usable) and providers present but unusable for pcoll.
std::string describe_available_providers();

// --- Memory regions (ofi_mr.cpp) ---------------------------------------------------------

class OfiTransport;
class OfiLocalRegion;
class OfiRemoteRegion;
// Downcasts that refuse regions made by another transport (Errc::invalid_argument).
const OfiLocalRegion& local(const LocalRegion& region);
const OfiRemoteRegion& remote(const RemoteRegion& region);

// Memory owned by OfiLocalRegion when it came from allocate(): page-aligned, zeroed.
struct FreeDeleter {
  void operator()(void* p) const noexcept;
};

class OfiLocalRegion final : public LocalRegion {
 public:
  OfiLocalRegion(OfiTransport& transport, std::span<std::byte> memory,
                 std::unique_ptr<std::byte, FreeDeleter> owned);
  // Deregisters under the provider lock: the domain is FI_THREAD_DOMAIN, and the progress
  // thread may be reading the CQ.
  ~OfiLocalRegion() override;
  Bytes remote_key() const override { return key_blob_; }

  void* desc() const { return desc_; }
  // Start of the registration (memory_.data(), or a private word for an empty region).
  std::byte* base() const { return reg_base_; }

 private:
  std::mutex& provider_lock_;                      // the transport's mutex_
  std::unique_ptr<std::byte, FreeDeleter> owned_;  // before mr_: freed after deregistration
  std::span<std::byte> memory_;
  std::byte* reg_base_ = nullptr;
  FidPtr<fid_mr> mr_;
  void* desc_ = nullptr;
  Bytes key_blob_;
};

class OfiRemoteRegion final : public RemoteRegion {
 public:
  OfiRemoteRegion(fid_domain* domain, std::mutex& provider_lock, int peer, uint64_t address,
                  uint64_t bytes, uint64_t key, bool raw_mapped)
      : RemoteRegion(peer, bytes), domain_(domain), provider_lock_(provider_lock), address_(address),
        key_(key), raw_mapped_(raw_mapped) {}
  // Unmaps a raw key under the provider lock (FI_THREAD_DOMAIN).
  ~OfiRemoteRegion() override;

  // Address libfabric wants for byte `offset`: virtual address or offset (mr_mode).
  uint64_t address(size_t offset) const { return address_ + offset; }
  uint64_t key() const { return key_; }

 private:
  fid_domain* domain_;
  std::mutex& provider_lock_;
  uint64_t address_;  // remote virtual base, or 0 with offset addressing
  uint64_t key_;
  bool raw_mapped_;   // FI_MR_RAW: key came from fi_mr_map_raw and must be unmapped
};

// --- The transport -------------------------------------------------------------------------

class OfiTransport final : public Transport, private WaitLoop::Hooks {
 public:
  OfiTransport(ProviderInfo provider, const Options& options);  // ofi_domain.cpp
  ~OfiTransport() override;

  const Capabilities& capabilities() const override { return caps_; }

  // ofi_ep.cpp
  Bytes address() const override;
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(peers_.size()); }

  // ofi_mr.cpp
  std::unique_ptr<LocalRegion> allocate(size_t bytes) override;
  std::unique_ptr<LocalRegion> register_memory(std::span<std::byte> memory) override;

  // ofi_rma.cpp
  void flush() override;

  // ofi_atomic.cpp

  // ofi_cq.cpp
  void progress() override;
  void set_wait_hook(std::function<void()> hook) override { wait_hook_ = std::move(hook); }
  size_t poll(std::span<uint64_t> out) override;
  bool wait(std::chrono::microseconds timeout, WaitFor what) override;
  void wake() override;

  // For regions (ofi_mr.cpp).
  fid_domain* domain() const { return domain_.get(); }
  fid_ep* endpoint() const { return ep_.get(); }
  uint64_t mr_mode() const { return mr_mode_; }
  size_t mr_key_bytes() const { return mr_key_bytes_; }
  uint64_t next_requested_key();
  int my_rank_or_unknown() const { return rank_; }

 protected:
  void do_connect(int my_rank, std::span<const Bytes> addresses) override;
  std::unique_ptr<RemoteRegion> do_import_region(int peer, std::span<const std::byte> key) override;
  void do_write(const LocalRegion& src, size_t src_offset, const RemoteRegion& dst,
                size_t dst_offset, size_t bytes) override;
  void do_write_notify(const LocalRegion& src, size_t src_offset, const RemoteRegion& dst,
                       size_t dst_offset, size_t bytes, uint64_t value) override;
  void do_notify(int peer, uint64_t value) override;
  bool do_try_notify(int peer, uint64_t value) override;
  uint64_t do_fetch_add(const RemoteRegion& dst, size_t offset, uint64_t operand) override;
  uint64_t do_compare_swap(const RemoteRegion& dst, size_t offset, uint64_t expected,
                           uint64_t desired) override;
  uint64_t do_swap(const RemoteRegion& dst, size_t offset, uint64_t value) override;
  uint64_t do_atomic_max(const RemoteRegion& dst, size_t offset, uint64_t value) override;

 private:
  using Clock = std::chrono::steady_clock;
  friend class OfiLocalRegion;

  // ofi_domain.cpp
  void open_objects();
  void check_atomics();
  void fill_capabilities();
  void post_receives();

  // ofi_rma.cpp
  void post_write(const OfiLocalRegion& src, size_t src_offset, const OfiRemoteRegion& dst,
                  size_t dst_offset, size_t bytes, bool with_value, uint64_t value);
  void post_write_chunk(const OfiLocalRegion& src, size_t src_offset, const OfiRemoteRegion& dst,
                        size_t dst_offset, size_t bytes, bool with_value, uint64_t value);

  // ofi_atomic.cpp
  // Throws Errc::unsupported naming the provider when it has no 64-bit atomics.
  void require_atomics(const char* op_name) const;
  uint64_t atomic(const char* op_name, const RemoteRegion& dst, size_t offset, enum fi_op op,
                  uint64_t operand, uint64_t compare);
  AtomicSlot& acquire_atomic_slot(const char* op_name, int peer, Clock::time_point deadline);

  // ofi_cq.cpp; *_locked expect mutex_ held.
  void open_wait_loop();
  size_t progress_locked();
  // Writes outstanding to a peer that have not moved for the timeout: a delivery error.
  void check_stalled_writes_locked();
  void handle_error_locked();
  void repost_receive_locked(RecvSlot& slot);
  // Waits (progressing) until `done()` holds, used by blocking operations. Returns false at
  // the deadline. Does not consume wake() calls meant for wait().
  template <class Done>
  bool block_until(Done done, Clock::time_point deadline);
  bool wait_impl(Clock::time_point deadline, WaitKind kind);
  // WaitLoop::Hooks (mutex_ held): a progress pass, and fi_trywait() before sleeping on the CQ fd.
  unsigned progress_pass() override { return static_cast<unsigned>(progress_locked()); }
  bool arm() override;
  // notify() and try_notify() (ofi_rma.cpp): false only when not waiting and the queue is full.
  bool post_notify(int peer, uint64_t value, bool wait_for_room);
  // Retries a post that returned -FI_EAGAIN, progressing between tries (mutex_ held).
  template <class Post>
  ssize_t post_with_retry(Post post, std::unique_lock<std::mutex>& lock,
                          Clock::time_point deadline);

  // Provider facts.
  ProviderInfo provider_;
  Options options_;
  Capabilities caps_;
  uint64_t mr_mode_ = 0;
  size_t mr_key_bytes_ = 8;
  size_t inject_bytes_ = 0;
  // Bytes of remote CQ data a write_notify carries (fi_getinfo's cq_data_size, or less under
  // PCOLL_TEST_OFI_CQ_DATA_SIZE), and the mask of the value bits that arrive intact.
  size_t cq_data_bytes_ = 8;
  uint64_t value_mask_ = ~uint64_t{0};
  size_t max_write_bytes_ = 0;
  bool fd_wait_ = false;
  std::function<void()> wait_hook_;  // set_wait_hook: called while a post or flush waits
  bool native_swap_ = false;
  // Why there are no remote atomics ("" when there are), for the error the atomics throw.
  std::string atomics_missing_;

  // libfabric objects, declared in the order they must be closed last-to-first.
  FidPtr<fid_fabric> fabric_;
  FidPtr<fid_domain> domain_;
  FidPtr<fid_cq> cq_;
  FidPtr<fid_av> av_;
  std::unique_ptr<std::byte, FreeDeleter> scratch_memory_;
  FidPtr<fid_mr> scratch_mr_;  // atomic words + receive buffers
  void* scratch_desc_ = nullptr;
  FidPtr<fid_ep> ep_;          // closed first, by the destructor: cancels the posted receives
  int cq_fd_ = -1;

  // Connection state.
  int rank_ = -1;
  std::vector<fi_addr_t> peers_;
  std::vector<std::string> peer_failure_;  // non-empty: that rank failed; ops refuse it

  // Everything below is guarded by mutex_ (libfabric calls included).
  mutable std::mutex mutex_;
  std::mutex flush_mutex_;             // serialises flush epochs
  std::vector<WriteBucket> buckets_;   // [parity * size + peer]; sized once, at connect()
  WriteOpPool write_ops_;              // one context per write in flight
  unsigned parity_ = 0;
  std::vector<AtomicSlot> atomic_slots_;
  std::vector<RecvSlot> recv_slots_;
  std::vector<RecvSlot*> pending_reposts_;
  std::deque<uint64_t> notifications_;
  DeliveryError delivery_error_;  // the first one progress found, for the next poll()
  Clock::time_point next_stall_check_{};
  uint64_t next_key_ = 1;
  uint64_t event_seq_ = 0;             // bumped when progress read CQ entries
  std::optional<WaitLoop> wait_loop_;  // sleeps on the CQ fd where there is one (ofi_cq.cpp)
};

// Number of receives kept posted for notify() and of concurrent blocking atomics.
inline constexpr size_t kRecvSlots = 64;
inline constexpr size_t kAtomicSlots = 64;

// Address blob magic (the key blob's is in ofi_key.hpp).
inline constexpr uint32_t kAddressMagic = 0x5043414e;  // "PCAN"

// --- Templates shared by ofi_rma.cpp, ofi_atomic.cpp and ofi_cq.cpp --------------------------

template <class Post>
ssize_t OfiTransport::post_with_retry(Post post, std::unique_lock<std::mutex>& lock,
                                      Clock::time_point deadline) {
  // -FI_EAGAIN means the transmit queue is full: completions must be reaped to make room.
  for (unsigned tries = 0;; ++tries) {
    const ssize_t rc = post();
    if (rc != -FI_EAGAIN) return rc;
    progress_locked();
    if (Clock::now() >= deadline) return rc;
    if (tries % 64 == 63) {  // let other threads progress too, and the transports beside this one
      lock.unlock();
      if (wait_hook_) wait_hook_();
      std::this_thread::yield();
      lock.lock();
    }
  }
}

template <class Done>
bool OfiTransport::block_until(Done done, Clock::time_point deadline) {
  // Spin first: atomics and flushes usually finish within microseconds.
  const auto spin_until = Clock::now() + std::chrono::microseconds(50);
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      progress_locked();
      if (done()) return true;
    }
    const auto now = Clock::now();
    if (now >= deadline) return false;
    if (now < spin_until) continue;
    if (wait_hook_) wait_hook_();
    wait_impl(std::min(deadline, now + std::chrono::milliseconds(1)), WaitKind::operation);
  }
}

}  // namespace pcoll::transport::ofi
