// Shared-memory notification rings towards the peers whose memory UCX maps here (see Mailbox
// in ucx_transport.hpp).
//
// Region layout, in bytes from the base (every part 64-byte aligned):
//   [0, 64)                     sleep flag (uint64): non-zero while a thread sleeps on the fd
//   ring of sender s            kRingBase + s * kRingBytes: kSlots one-line slots
//   credit word of receiver r   credit_base + r * 64: values of mine that r has consumed
// A slot is one cache line: value (8 bytes), where (8), inline bytes (40), sequence (8).
// It carries sequence number n (1, 2, ...) once the sender's n-th value is in it; the
// sender may reuse the slot of n when the receiver's credit says n was consumed. Up to
// kInlineBytes of write_notify data travel inside the slot ("where" = target address in the
// receiver | length << 48) and the receiver copies them into place, so a small message
// costs the receiver one cache line from the sender instead of two; larger data is copied
// by the sender into the target region before the slot is published ("where" = 0).
#include <atomic>
#include <cstring>

#include <support/log.hpp>
#include <ucx/ucx_transport.hpp>

namespace pcoll::transport::ucx {

namespace {

constexpr size_t kLine = 64;
constexpr size_t kSlotBytes = 64;
constexpr size_t kWhere = 8;       // offsets inside a slot
constexpr size_t kInline = 16;
constexpr size_t kSequence = 56;
constexpr size_t kInlineBytes = kSequence - kInline;
constexpr unsigned kLengthShift = 48;
constexpr uint64_t kAddressMask = (uint64_t{1} << kLengthShift) - 1;
constexpr size_t kRingBase = kLine;
constexpr size_t kRingBytes = Mailbox::kSlots * kSlotBytes;
// The receiver reports consumption after this many values: often enough that a sender
// never finds the ring full while the receiver keeps up, rarely enough to stay cheap.
constexpr uint64_t kReportEvery = Mailbox::kSlots / 4;

std::atomic_ref<uint64_t> word(uint64_t* at) { return std::atomic_ref<uint64_t>(*at); }
uint64_t* word_at(std::byte* at) { return reinterpret_cast<uint64_t*>(at); }

}  // namespace

std::byte* Mailbox::ring_of(int sender) const {
  return base_ + kRingBase + static_cast<size_t>(sender) * kRingBytes;
}

uint64_t* Mailbox::credit_of(int receiver) const {
  return word_at(base_ + kRingBase + static_cast<size_t>(ranks_) * kRingBytes +
                 static_cast<size_t>(receiver) * kLine);
}

void Mailbox::open(int my_rank, int ranks) {
  my_rank_ = my_rank;
  ranks_ = ranks;
  bytes_ = kRingBase + static_cast<size_t>(ranks) * (kRingBytes + kLine);
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  params.address = nullptr;
  params.length = bytes_;
  params.flags = UCP_MEM_MAP_ALLOCATE;
  ucs_status_t status = ucp_mem_map(core_.context.get(), &params, &memh_);
  if (status != UCS_OK) {
    memh_ = nullptr;
    log::debug(std::string("ucx: no mailbox (ucp_mem_map: ") + ucs_status_string(status) +
               "); notifications use active messages");
    return;
  }
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  status = ucp_mem_query(memh_, &attr);
  if (status != UCS_OK || attr.length < bytes_) {
    ucp_mem_unmap(core_.context.get(), memh_);
    memh_ = nullptr;
    return;
  }
  base_ = static_cast<std::byte*>(attr.address);
  std::memset(base_, 0, bytes_);
  key_ = pack_key(core_.context.get(), memh_, reinterpret_cast<uintptr_t>(base_), bytes_,
                  address_fingerprint(core_.worker_address));
  peers_.assign(static_cast<size_t>(ranks), PeerBox{});
}

bool Mailbox::attached(int peer) const {
  return is_open() && peer >= 0 && peer < ranks_ && peers_[static_cast<size_t>(peer)].ring != nullptr;
}

void Mailbox::attach(int peer, std::span<const std::byte> key) {
  if (!is_open()) return;
  if (peer < 0 || peer >= ranks_ || peer == my_rank_) {
    log::warn("ucx: ignored a mailbox key that names rank " + std::to_string(peer));
    return;
  }
  PeerBox& box = peers_[static_cast<size_t>(peer)];
  if (box.rkey != nullptr) return;  // already attached
  const Peer& p = core_.peer(peer);
  // A peer that failed (it died while its announcement was on the way): UCX 1.13 faults
  // unpacking a key on the endpoint its error handler tore down.
  if (p.failure != UCS_OK || p.ep == nullptr || !core_.may_map(peer)) return;
  try {
    const KeyView view = decode_key(key, "mailbox key from rank " + std::to_string(peer));
    const size_t expected = kRingBase + static_cast<size_t>(ranks_) * (kRingBytes + kLine);
    if (view.origin != p.address_fingerprint || view.length != expected || view.rkey.empty())
      fail(Errc::protocol, "mailbox key from rank " + std::to_string(peer) +
                               " does not describe that rank's mailbox for " + std::to_string(ranks_) + " ranks");
    // UCX unpacks only the parts of the key that this endpoint's transports reach: a
    // peer on another host (or in another IPC namespace, which UCX 1.13's shared-memory
    // transports compare) gets no shared-memory part, so nothing is attached and
    // ucp_rkey_ptr says UNREACHABLE. Attaching is what fails in UCX's crashing error path
    // (docs/reliability.md); that peer answered our connect just now, so it is alive.
    ucp_rkey_h rkey = nullptr;
    if (ucp_ep_rkey_unpack(p.ep, view.rkey.data(), &rkey) != UCS_OK) return;
    void* local = nullptr;
    const ucs_status_t mapped = ucp_rkey_ptr(rkey, view.address, &local);
    if (mapped != UCS_OK) {
      ucp_rkey_destroy(rkey);  // not mapped here: that peer keeps using active messages
      log::debug("ucx: rank " + std::to_string(peer) + "'s mailbox is not mapped here (" +
                 ucs_status_string(mapped) + "); its notifications are messages");
      return;
    }
    auto* theirs = static_cast<std::byte*>(local);
    box.rkey = rkey;
    box.asleep = word_at(theirs);
    box.ring = theirs + kRingBase + static_cast<size_t>(my_rank_) * kRingBytes;
    box.credit_for_it = word_at(theirs + kRingBase + static_cast<size_t>(ranks_) * kRingBytes +
                                static_cast<size_t>(my_rank_) * kLine);
    report(box);
  } catch (const Error& e) {
    log::warn(std::string("ucx: ") + e.what() + "; rank " + std::to_string(peer) +
              " keeps using active messages");
  }
}

bool Mailbox::send(int peer, std::byte* target, uint64_t target_address, const void* bytes,
                   size_t count, uint64_t value) {
  if (!is_open() || peer < 0 || peer >= ranks_) return false;
  PeerBox& box = peers_[static_cast<size_t>(peer)];
  if (box.ring == nullptr || (count > 0 && target == nullptr)) return false;
  const uint64_t consumed = word(credit_of(peer)).load(std::memory_order_acquire);
  if (box.sent - consumed >= kSlots) return false;  // ring full: the receiver is behind
  const uint64_t n = ++box.sent;
  std::byte* slot = box.ring + ((n - 1) % kSlots) * kSlotBytes;
  uint64_t where = 0;
  if (count > 0 && count <= kInlineBytes && target_address <= kAddressMask) {
    std::memcpy(slot + kInline, bytes, count);
    where = target_address | (static_cast<uint64_t>(count) << kLengthShift);
  } else if (count > 0) {
    std::memcpy(target, bytes, count);
  }
  word(word_at(slot)).store(value, std::memory_order_relaxed);
  word(word_at(slot + kWhere)).store(where, std::memory_order_relaxed);
  word(word_at(slot + kSequence)).store(n, std::memory_order_release);  // publishes it all
  std::atomic_thread_fence(std::memory_order_seq_cst);
  receiver_asleep_ = word(box.asleep).load(std::memory_order_relaxed) != 0;
  return true;
}

void Mailbox::report(PeerBox& box) {
  if (box.credit_for_it == nullptr || box.received == box.reported) return;
  word(box.credit_for_it).store(box.received, std::memory_order_release);
  box.reported = box.received;
}

size_t Mailbox::drain() {
  if (!is_open()) return 0;
  size_t taken = 0;
  for (int sender = 0; sender < ranks_; ++sender) {
    PeerBox& box = peers_[static_cast<size_t>(sender)];
    std::byte* ring = ring_of(sender);
    for (;;) {
      const uint64_t n = box.received + 1;
      std::byte* slot = ring + ((n - 1) % kSlots) * kSlotBytes;
      if (word(word_at(slot + kSequence)).load(std::memory_order_acquire) != n) break;
      const uint64_t value = word(word_at(slot)).load(std::memory_order_relaxed);
      const uint64_t where = word(word_at(slot + kWhere)).load(std::memory_order_relaxed);
      box.received = n;
      if (where != 0) {
        // Inline data: the sender names the destination; check it like an active message's.
        const uintptr_t address = where & kAddressMask;
        const size_t count = static_cast<size_t>(where >> kLengthShift);
        if (count > kInlineBytes || !core_.contains_local_range(address, count)) {
          core_.defer_delivery_error(Error(Errc::protocol, "ucx: a mailbox write_notify from rank " +
                                                               std::to_string(sender) + " of " + std::to_string(count) +
                                                               " bytes arrived aimed outside every registered region",
                                           sender));
          continue;
        }
        std::memcpy(reinterpret_cast<void*>(address), slot + kInline, count);
      }
      core_.enqueue_notification(value);
      ++taken;
    }
    if (box.received - box.reported >= kReportEvery) report(box);
  }
  return taken;
}

void Mailbox::set_asleep(bool asleep) {
  if (!is_open()) return;
  word(word_at(base_)).store(asleep ? 1 : 0, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void Mailbox::close() {
  for (PeerBox& box : peers_) {
    if (box.rkey != nullptr) ucp_rkey_destroy(box.rkey);
    box = PeerBox{};
  }
  peers_.clear();
  if (memh_ != nullptr && core_.context) ucp_mem_unmap(core_.context.get(), memh_);
  memh_ = nullptr;
  base_ = nullptr;
}

}  // namespace pcoll::transport::ucx
