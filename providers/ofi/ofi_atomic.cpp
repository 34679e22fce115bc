// Blocking 64-bit remote atomics: fetch-add, compare-swap, swap and max.
//
// Each call takes an AtomicSlot whose words live in the registered scratch region, posts one
// fetching atomic and waits (progressing) for its completion. Swap uses FI_ATOMIC_WRITE's
// fetched old value; max uses FI_MAX where fi_fetch_atomicvalid allows it. Where either is
// missing, compare-swap loops stand in (transport/atomic_emulation.hpp). A provider without
// 64-bit fetch-add and compare-swap (Capabilities::remote_atomics false) refuses them all.
#include <string>

#include <ofi/ofi_transport.hpp>
#include <util/atomic_emulation.hpp>

namespace pcoll::transport::ofi {

void OfiTransport::require_atomics(const char* op_name) const {
  if (caps_.remote_atomics) return;
  fail(Errc::unsupported,
       std::string("ofi: ") + op_name + " needs 64-bit remote atomics, and " + atomics_missing_ +
           ". Only handles that count arrivals with fetch_add (quorum mode) need them; solo, majority "
           "and sync handles run without. Pick a provider whose pcoll_info line 'atomics' says available.");
}

AtomicSlot& OfiTransport::acquire_atomic_slot(const char* op_name, int peer,
                                              Clock::time_point deadline) {
  // Called with mutex_ held through `lock` owned by the caller; slots free up as
  // completions (or late completions of abandoned slots) are reaped.
  for (;;) {
    for (auto& slot : atomic_slots_)
      if (slot.state == AtomicSlot::State::free) return slot;
    progress_locked();
    for (auto& slot : atomic_slots_)
      if (slot.state == AtomicSlot::State::free) return slot;
    if (Clock::now() >= deadline)
      fail_peer(Errc::timeout, peer, std::string("ofi: ") + op_name + " to rank " + std::to_string(peer) +
                              ": all " + std::to_string(kAtomicSlots) +
                              " atomic slots stayed busy for " +
                              timeout_text(options_.timeout));
    mutex_.unlock();
    std::this_thread::yield();
    mutex_.lock();
  }
}

uint64_t OfiTransport::atomic(const char* op_name, const RemoteRegion& dst_in, size_t offset,
                              enum fi_op op, uint64_t operand, uint64_t compare) {
  require_atomics(op_name);
  const OfiRemoteRegion& dst = remote(dst_in);
  const int peer = dst.peer();
  const auto deadline = Clock::now() + options_.timeout;

  std::unique_lock lock(mutex_);
  if (!peer_failure_[peer].empty()) fail_peer(Errc::peer_failed, peer, peer_failure_[peer]);
  AtomicSlot& slot = acquire_atomic_slot(op_name, peer, deadline);
  slot.state = AtomicSlot::State::busy;
  slot.peer = peer;
  slot.error.clear();
  uint64_t* words = slot.words;
  words[0] = operand;
  words[1] = compare;
  words[2] = 0;
  void* context = slot.context();
  const uint64_t address = dst.address(offset);
  const ssize_t rc = post_with_retry(
      [&]() -> ssize_t {
        if (op == FI_CSWAP)
          return fi_compare_atomic(ep_.get(), &words[0], 1, scratch_desc_, &words[1],
                                   scratch_desc_, &words[2], scratch_desc_, peers_[peer], address,
                                   dst.key(), FI_UINT64, FI_CSWAP, context);
        return fi_fetch_atomic(ep_.get(), &words[0], 1, scratch_desc_, &words[2], scratch_desc_,
                               peers_[peer], address, dst.key(), FI_UINT64, op, context);
      },
      lock, deadline);
  if (rc != 0) {
    slot.state = AtomicSlot::State::free;
    fail_post(op_name, peer, rc, options_.timeout);
  }
  lock.unlock();

  block_until([&] { return slot.state == AtomicSlot::State::done; }, deadline);

  lock.lock();
  if (slot.state != AtomicSlot::State::done) {
    // The provider may still write the result word: keep the slot until it completes.
    slot.state = AtomicSlot::State::abandoned;
    fail_peer(Errc::timeout, peer, std::string("ofi: ") + op_name + " on rank " + std::to_string(peer) +
                            " did not complete within " +
                            timeout_text(options_.timeout) +
                            "; is its progress engine running?");
  }
  const uint64_t old_value = words[2];
  std::string error = std::move(slot.error);
  slot.state = AtomicSlot::State::free;
  if (!error.empty()) fail(Errc::peer_failed, std::string("ofi: ") + op_name + ": " + error);
  return old_value;
}

uint64_t OfiTransport::do_fetch_add(const RemoteRegion& dst, size_t offset, uint64_t operand) {
  return atomic("fetch_add", dst, offset, FI_SUM, operand, 0);
}

uint64_t OfiTransport::do_compare_swap(const RemoteRegion& dst, size_t offset, uint64_t expected,
                                       uint64_t desired) {
  return atomic("compare_swap", dst, offset, FI_CSWAP, desired, expected);
}

uint64_t OfiTransport::do_swap(const RemoteRegion& dst, size_t offset, uint64_t value) {
  require_atomics("swap");
  if (native_swap_) return atomic("swap", dst, offset, FI_ATOMIC_WRITE, value, 0);
  return swap_by_compare_swap(*this, dst, offset, value);
}

uint64_t OfiTransport::do_atomic_max(const RemoteRegion& dst, size_t offset, uint64_t value) {
  require_atomics("atomic_max");
  if (caps_.native_atomic_max) return atomic("atomic_max", dst, offset, FI_MAX, value, 0);
  return max_by_compare_swap(*this, dst, offset, value);
}

}  // namespace pcoll::transport::ofi
