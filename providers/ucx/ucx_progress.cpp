// Progress, the notification queue, and blocking waits.
//
// Waiting is the shared WaitLoop (transport/wait_loop.hpp): a thread spins (progressing,
// yielding its CPU between passes) for a short while, then at most one thread (the
// "sleeper") arms the worker (ucp_worker_arm) and sleeps in ppoll() on the worker's event fd
// plus the loop's eventfd ("kick"); the other blocked threads sleep on a condition variable.
// Whoever makes progress (any thread) wakes the sleeper through the kick fd when the
// sleeper's condition may now hold, and notifies the condition variable, so notifications
// queued by one thread wake the others, and an idle transport costs no CPU.
#include <algorithm>

#include <ucx/ucx_transport.hpp>

namespace pcoll::transport::ucx {

namespace {

// Passes in a row that may find mailbox values and skip ucp_worker_progress: bounds how long
// a stream of mailbox values defers UCP's own work (flush acknowledgements, messages).
constexpr unsigned kRingFirstPasses = 8;
// How long each kind of waiter spins before it sleeps.
constexpr auto kNotificationSpin = std::chrono::microseconds(50);
constexpr auto kActivitySpin = std::chrono::microseconds(20);

}  // namespace

WaitTuning UcxCore::wait_tuning() {
  WaitTuning tuning;
  // Re-check the deadline at least once a second in case of a lost wake-up.
  tuning.max_sleep = std::chrono::seconds(1);
  // yield rather than pause: ranks often outnumber cores on one node.
  tuning.yield_while_spinning = true;
  tuning.arm_refusals_before_pause = 0;  // a busy worker has events: progress them at once
  return tuning;
}

void UcxCore::enqueue_notification(uint64_t value) {
  notifications_.push_back(value);
  ++activity_seq_;
}

size_t UcxCore::pop_notifications(std::span<uint64_t> out) {
  const size_t n = std::min(out.size(), notifications_.size());
  for (size_t i = 0; i < n; ++i) {
    out[i] = notifications_.front();
    notifications_.pop_front();
  }
  return n;
}

void UcxCore::add_local_range(uintptr_t address, size_t bytes) { local_ranges_[address] = bytes; }

void UcxCore::remove_local_range(uintptr_t address) {
  local_ranges_.erase(address);
  last_range_ = {0, 0};
}

bool UcxCore::contains_local_range(uintptr_t address, size_t bytes) const {
  // Incoming data nearly always lands in the region the previous message hit.
  auto inside = [&](uintptr_t first, size_t length) {
    const size_t offset = address - first;
    return address >= first && offset <= length && bytes <= length - offset;
  };
  if (last_range_.second != 0 && inside(last_range_.first, last_range_.second)) return true;
  auto it = local_ranges_.upper_bound(address);
  if (it == local_ranges_.begin()) return false;
  --it;
  if (!inside(it->first, it->second)) return false;
  last_range_ = *it;
  return true;
}

unsigned UcxCore::progress_locked() {
  const uint64_t activity_before = activity_seq_;
  // The rings first: a value that arrived while the caller was away is returned without a
  // ucp_worker_progress pass (a good part of a poll) in front of it; that pass then runs on
  // the next call, and at the latest on every kRingFirstPasses-th. Empty rings: the UCP
  // pass, and the rings once more for what came during it.
  auto events = static_cast<unsigned>(mailbox.drain());
  if (events == 0 || ++passes_without_ucp_ >= kRingFirstPasses) {
    passes_without_ucp_ = 0;
    events += ucp_worker_progress(worker.get()) + static_cast<unsigned>(mailbox.drain());
  }
  if (!deferred_notifies_.empty()) {
    send_deferred_notifies();
    ++events;
  }
  if (!deferred_atomic_replies_.empty()) {
    send_deferred_atomic_replies();
    ++events;
  }
  if (events > 0) ++activity_seq_;
  // Wake the sleeper only if what it waits for may now hold: a notification waiter does not
  // care about unrelated completions.
  if (activity_seq_ != activity_before) wait_loop->on_progress(!notifications_.empty());
  return events;
}

bool UcxCore::arm() {
  // ucp_worker_arm() only reports events that reach the fd from now on: whatever an earlier
  // progress pass left (a partly read socket, pending UCP callbacks) must be drained first,
  // or we would sleep on work that is already here (ucp_worker_arm(3): progress until 0).
  if (progress_locked() != 0) return false;
  const ucs_status_t status = ucp_worker_arm(worker.get());
  if (status == UCS_ERR_BUSY) return false;  // events arrived meanwhile: progress them
  if (status != UCS_OK) fail_status(Errc::transport, "ucp_worker_arm", status);
  // Mailbox values arrive without touching the fd: raise the sleep flag (senders that see
  // it send a wake-up message), then look at the rings once more.
  mailbox.set_asleep(true);
  if (mailbox.drain() > 0) {
    mailbox.set_asleep(false);
    ++activity_seq_;
    wait_loop->on_progress(!notifications_.empty());
    return false;
  }
  return true;
}

void UcxCore::disarm() { mailbox.set_asleep(false); }

void UcxTransport::progress() {
  std::unique_lock lock(core_->mutex);
  core_->progress_locked();
}

void UcxCore::defer_delivery_error(Error error) {
  delivery_error_.keep(std::move(error));
  ++activity_seq_;
  wait_loop->wake_all_waiters();
}

void UcxCore::throw_delivery_error_once() { delivery_error_.throw_once(); }

size_t UcxTransport::poll(std::span<uint64_t> out) {
  std::unique_lock lock(core_->mutex);
  core_->progress_locked();
  core_->throw_delivery_error_once();
  return core_->pop_notifications(out);
}

bool UcxTransport::wait(std::chrono::microseconds timeout, WaitFor what) {
  std::unique_lock lock(core_->mutex);
  const auto deadline = Clock::now() + timeout;
  if (what == WaitFor::notification)
    return core_->wait_loop->wait(lock, [&] { return core_->has_notifications(); }, deadline,
                                  WaitKind::notification, kNotificationSpin);
  const uint64_t activity_at_entry = core_->activity_seq();
  return core_->wait_loop->wait(lock, [&] { return core_->activity_seq() != activity_at_entry; },
                                deadline, WaitKind::activity, kActivitySpin);
}

void UcxTransport::wake() {
  std::unique_lock lock(core_->mutex);
  core_->wait_loop->wake();
}

}  // namespace pcoll::transport::ucx
