// Progress, the notification queue, and blocking waits.
//
// Waiting: a thread spins (progressing) for a short while, then at most one thread (the
// "sleeper") arms the worker (ucp_worker_arm) and sleeps in ppoll() on the worker's event fd
// plus our own eventfd ("kick"); the other blocked threads sleep on a condition variable.
// Whoever makes progress (any thread) wakes the sleeper through the kick fd when the
// sleeper's condition may now hold, and notifies the condition variable, so notifications
// queued by one thread wake the others, and an idle transport costs no CPU.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "ucx_transport.hpp"

namespace pcoll::transport::ucx {

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

void UcxCore::kick_sleeper() {
  if (!sleeper_active_) return;
  const uint64_t one = 1;
  // A full counter (EAGAIN) still leaves the fd readable, which is all we need.
  [[maybe_unused]] const ssize_t n = ::write(kick_fd.get(), &one, sizeof one);
}

unsigned UcxCore::progress_locked() {
  const uint64_t activity_before = activity_seq_;
  unsigned events = ucp_worker_progress(worker.get()) + static_cast<unsigned>(mailbox.drain());
  if (!deferred_notifies_.empty()) {
    send_deferred_notifies();
    ++events;
  }
  if (events > 0) ++activity_seq_;
  if (activity_seq_ != activity_before) {
    // Wake the sleeper only if what it waits for may now hold: a notification waiter does not
    // care about unrelated completions.
    if (sleeper_active_ && (sleeper_kind_ != WaitKind::notification || !notifications_.empty()))
      kick_sleeper();
    if (cv_waiters_ > 0) waiters_cv_.notify_all();
  }
  return events;
}

bool UcxCore::block_until(std::unique_lock<std::mutex>& lock, const std::function<bool()>& pred,
                          Clock::time_point deadline, WaitKind kind,
                          std::chrono::microseconds spin, uint64_t wake_seq_at_entry) {
  const bool wakeable = kind != WaitKind::operation;
  const auto spin_until = std::min(Clock::now() + spin, deadline);
  for (;;) {
    progress_locked();
    if (pred()) return true;
    if (wakeable && wake_seq_ != wake_seq_at_entry) return true;
    const auto now = Clock::now();
    if (now >= deadline) return false;
    if (now < spin_until) {
      // yield rather than pause: ranks often outnumber cores on one node.
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
      continue;
    }
    if (sleeper_active_) {
      ++cv_waiters_;
      waiters_cv_.wait_until(lock, deadline);
      --cv_waiters_;
      continue;
    }
    // ucp_worker_arm() only reports events that reach the fd from now on: whatever an earlier
    // progress pass left (a partly read socket, pending UCP callbacks) must be drained first,
    // or we would sleep on work that is already here (ucp_worker_arm(3): progress until 0).
    if (progress_locked() != 0) continue;
    const ucs_status_t status = ucp_worker_arm(worker.get());
    if (status == UCS_ERR_BUSY) continue;  // events arrived meanwhile: progress them
    if (status != UCS_OK) fail_status(Errc::transport, "ucp_worker_arm", status);
    // Mailbox values arrive without touching the fd: raise the sleep flag (senders that see
    // it send a wake-up message), then look at the rings once more.
    mailbox.set_asleep(true);
    if (mailbox.drain() > 0) {
      mailbox.set_asleep(false);
      ++activity_seq_;
      if (cv_waiters_ > 0) waiters_cv_.notify_all();
      continue;
    }
    sleeper_active_ = true;
    sleeper_kind_ = kind;
    lock.unlock();
    // Re-check the deadline at least once a second in case of a lost wake-up.
    const auto remaining = std::min<Clock::duration>(deadline - now, std::chrono::seconds(1));
    const auto remaining_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(remaining).count();
    timespec timeout{static_cast<time_t>(remaining_ns / 1000000000),
                     static_cast<long>(remaining_ns % 1000000000)};
    pollfd fds[2] = {{worker_fd, POLLIN, 0}, {kick_fd.get(), POLLIN, 0}};
    const int ready = ::ppoll(fds, 2, &timeout, nullptr);
    if (ready > 0 && (fds[1].revents & POLLIN)) {
      uint64_t drained = 0;
      [[maybe_unused]] const ssize_t n = ::read(kick_fd.get(), &drained, sizeof drained);
    }
    lock.lock();
    mailbox.set_asleep(false);
    sleeper_active_ = false;
    if (cv_waiters_ > 0) waiters_cv_.notify_all();  // one of them may take over sleeping
  }
}

void UcxCore::wake() {
  ++wake_seq_;
  wake_pending_ = true;
  kick_sleeper();
  if (cv_waiters_ > 0) waiters_cv_.notify_all();
}

bool UcxCore::take_pending_wake() {
  if (!wake_pending_) return false;
  wake_pending_ = false;
  return true;
}

void UcxTransport::progress() {
  std::unique_lock lock(core_->mutex);
  core_->progress_locked();
}

size_t UcxTransport::poll(std::span<uint64_t> out) {
  std::unique_lock lock(core_->mutex);
  core_->progress_locked();
  return core_->pop_notifications(out);
}

bool UcxTransport::wait(std::chrono::microseconds timeout, WaitFor what) {
  std::unique_lock lock(core_->mutex);
  if (core_->take_pending_wake()) return true;
  const uint64_t wake_at_entry = core_->wake_seq();
  const uint64_t activity_at_entry = core_->activity_seq();
  const auto deadline = Clock::now() + timeout;
  bool satisfied = false;
  if (what == WaitFor::notification) {
    satisfied = core_->block_until(
        lock, [&] { return core_->has_notifications(); }, deadline, WaitKind::notification,
        std::chrono::microseconds(50), wake_at_entry);
  } else {
    satisfied = core_->block_until(
        lock, [&] { return core_->activity_seq() != activity_at_entry; }, deadline,
        WaitKind::activity, std::chrono::microseconds(20), wake_at_entry);
  }
  // A concurrent waiter took this wake(): it must not also end the next wait().
  if (core_->wake_seq() != wake_at_entry) core_->take_pending_wake();
  return satisfied;
}

void UcxTransport::wake() {
  std::unique_lock lock(core_->mutex);
  core_->wake();
}

}  // namespace pcoll::transport::ucx
