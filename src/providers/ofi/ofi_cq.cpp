// Completion queue: progress (reaping completions, queueing notifications, re-posting
// notify receives), poll() and wait()/wake().
//
// Waiting: with an FI_WAIT_FD CQ (tcp;ofi_rxm, sockets) one thread at a time (the "poller")
// sleeps in ppoll() on the CQ fd and an eventfd, after fi_trywait() said that is safe; other
// waiters sleep on a condition variable that progress() and the poller signal. shm has no
// fd (and its fi_cq_sread yields in a loop, burning a core), so there a notification waiter
// spins for ~30 us, then progresses on growing sleeps of 50 us up to 1 ms. An activity
// waiter (the progress thread, or a flush past its own spin) skips the spin: it runs
// beside an application that spins itself or computes, often on the same core.
#include <poll.h>
#include <unistd.h>

#include <cstring>

#include "log.hpp"
#include "ofi_transport.hpp"

namespace pcoll::transport::ofi {

namespace {

constexpr size_t kCqBatch = 16;
constexpr auto kSpin = std::chrono::microseconds(30);
constexpr auto kFirstBackoff = std::chrono::microseconds(50);
constexpr auto kMaxBackoff = std::chrono::milliseconds(1);
// The poller re-checks at least this often, in case the provider needs a poll to make
// progress that does not signal its fd.
constexpr auto kMaxFdSleep = std::chrono::milliseconds(10);

void signal_fd(int fd) {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof one);
}

void drain_fd(int fd) {
  uint64_t count = 0;
  [[maybe_unused]] ssize_t n = ::read(fd, &count, sizeof count);
}

}  // namespace

void OfiTransport::repost_receive_locked(RecvSlot& slot) {
  const ssize_t rc = fi_recv(ep_.get(), slot.value, sizeof(uint64_t), scratch_desc_,
                             FI_ADDR_UNSPEC, static_cast<Op*>(&slot));
  if (rc == -FI_EAGAIN) {
    pending_reposts_.push_back(&slot);  // capacity reserved: no allocation
    return;
  }
  if (rc != 0) fail_fi("fi_recv(notify buffer)", rc);
}

void OfiTransport::handle_error_locked() {
  fi_cq_err_entry err{};
  const ssize_t rc = fi_cq_readerr(cq_.get(), &err, 0);
  if (rc == -FI_EAGAIN) return;
  if (rc < 0) fail_fi("fi_cq_readerr", rc);
  char buffer[256] = {};
  const char* detail = fi_cq_strerror(cq_.get(), err.prov_errno, err.err_data, buffer, sizeof buffer);
  std::string text = std::string(fi_strerror(err.err)) + " (" + std::to_string(-err.err) + ")";
  if (detail != nullptr && *detail != '\0') text += ": " + std::string(detail);

  auto* op = static_cast<Op*>(err.op_context);
  if (op == nullptr || (err.flags & (FI_REMOTE_WRITE | FI_REMOTE_READ))) {
    log::warn("ofi: completion error for a peer's access to this rank: " + text);
    return;
  }
  switch (op->kind) {
    case Op::Kind::recv: {
      // Cancelled at shutdown; anything else (a truncated message) is reported and the
      // buffer goes back into service.
      if (err.err != FI_ECANCELED) {
        log::warn("ofi: notify receive failed: " + text);
        repost_receive_locked(*static_cast<RecvSlot*>(op));
      }
      return;
    }
    case Op::Kind::write: {
      auto& bucket = *static_cast<WriteBucket*>(op);
      if (bucket.outstanding > 0) --bucket.outstanding;
      const std::string message = "write to rank " + std::to_string(bucket.peer) + " failed: " + text;
      if (bucket.error.empty()) bucket.error = message;
      if (is_peer_loss(-static_cast<ssize_t>(err.err)) && peer_failure_[bucket.peer].empty())
        peer_failure_[bucket.peer] = "ofi: rank " + std::to_string(bucket.peer) + " failed: " + text;
      return;
    }
    case Op::Kind::atomic: {
      auto& slot = *static_cast<AtomicSlot*>(op);
      if (is_peer_loss(-static_cast<ssize_t>(err.err)) && peer_failure_[slot.peer].empty())
        peer_failure_[slot.peer] = "ofi: rank " + std::to_string(slot.peer) + " failed: " + text;
      if (slot.state == AtomicSlot::State::abandoned) {
        slot.state = AtomicSlot::State::free;
      } else {
        slot.error = "rank " + std::to_string(slot.peer) + " failed: " + text;
        slot.state = AtomicSlot::State::done;
      }
      return;
    }
  }
}

size_t OfiTransport::progress_locked() {
  fi_cq_data_entry entries[kCqBatch];
  size_t events = 0;
  bool queued = false;
  for (;;) {
    const ssize_t n = fi_cq_read(cq_.get(), entries, kCqBatch);
    if (n == -FI_EAGAIN) break;
    if (n == -FI_EAVAIL) {
      handle_error_locked();
      ++events;
      continue;
    }
    if (n < 0) fail_fi("fi_cq_read", n);
    for (ssize_t i = 0; i < n; ++i) {
      const fi_cq_data_entry& e = entries[i];
      // sockets echoes FI_REMOTE_CQ_DATA on the initiator's own completion: only entries
      // for a peer's access (remote write or receive) carry notifications.
      const bool incoming = (e.flags & (FI_RECV | FI_REMOTE_WRITE | FI_REMOTE_READ)) != 0;
      if (incoming && (e.flags & FI_REMOTE_CQ_DATA)) {
        // write_notify's value; the data it describes is already in place.
        notifications_.push_back(e.data);
        queued = true;
        if ((e.flags & FI_RECV) && e.op_context != nullptr &&
            static_cast<Op*>(e.op_context)->kind == Op::Kind::recv)
          repost_receive_locked(*static_cast<RecvSlot*>(static_cast<Op*>(e.op_context)));
        continue;
      }
      if (incoming && (e.flags & FI_RECV)) {
        auto& slot = *static_cast<RecvSlot*>(static_cast<Op*>(e.op_context));
        notifications_.push_back(*slot.value);
        queued = true;
        repost_receive_locked(slot);
        continue;
      }
      if (incoming) continue;  // a peer's access without a value: nothing to do
      auto* op = static_cast<Op*>(e.op_context);
      if (op == nullptr) continue;
      if (op->kind == Op::Kind::write) {
        auto& bucket = *static_cast<WriteBucket*>(op);
        if (bucket.outstanding > 0) --bucket.outstanding;
      } else if (op->kind == Op::Kind::atomic) {
        auto& slot = *static_cast<AtomicSlot*>(op);
        slot.state = slot.state == AtomicSlot::State::abandoned ? AtomicSlot::State::free
                                                                : AtomicSlot::State::done;
      }
    }
    events += static_cast<size_t>(n);
    if (static_cast<size_t>(n) < kCqBatch) break;
  }
  if (!pending_reposts_.empty()) {
    std::vector<RecvSlot*> retry;
    retry.swap(pending_reposts_);
    pending_reposts_.reserve(kRecvSlots);
    for (RecvSlot* slot : retry) repost_receive_locked(*slot);
  }
  if (events > 0) {
    if (queued) queued_.store(notifications_.size(), std::memory_order_release);
    event_seq_.fetch_add(1, std::memory_order_acq_rel);
    if (poller_sleeping_.load(std::memory_order_acquire)) signal_fd(wake_fd_.get());
    if (waiters_.load(std::memory_order_acquire) > 0) event_cv_.notify_all();
  }
  return events;
}

void OfiTransport::progress() {
  std::lock_guard lock(mutex_);
  progress_locked();
}

size_t OfiTransport::poll(std::span<uint64_t> out) {
  std::lock_guard lock(mutex_);
  progress_locked();
  size_t count = 0;
  while (count < out.size() && !notifications_.empty()) {
    out[count++] = notifications_.front();
    notifications_.pop_front();
  }
  queued_.store(notifications_.size(), std::memory_order_release);
  return count;
}

void OfiTransport::wake() {
  {
    // Under the mutex so a waiter between its predicate check and its sleep cannot miss it.
    std::lock_guard lock(mutex_);
    wake_seq_.fetch_add(1, std::memory_order_acq_rel);
  }
  if (fd_wait_) signal_fd(wake_fd_.get());
  event_cv_.notify_all();
}

bool OfiTransport::wait(std::chrono::microseconds timeout, WaitFor what) {
  return wait_impl(Clock::now() + timeout, what, true);
}

bool OfiTransport::wait_impl(Clock::time_point deadline, WaitFor what, bool honor_wake) {
  const uint64_t wake_seen = wake_seq_.load(std::memory_order_acquire);
  if (honor_wake && wake_consumed_.exchange(wake_seen) != wake_seen) return true;  // pending wake()
  const uint64_t events_seen = event_seq_.load(std::memory_order_acquire);
  auto satisfied = [&] {
    return what == WaitFor::notification ? queued_.load(std::memory_order_acquire) > 0
                                         : event_seq_.load(std::memory_order_acquire) != events_seen;
  };
  auto woken = [&] {
    if (!honor_wake) return false;
    const uint64_t now_seq = wake_seq_.load(std::memory_order_acquire);
    if (now_seq == wake_seen) return false;
    wake_consumed_.store(now_seq);
    return true;
  };
  // Sleeps on the condition variable until something changed or `until`.
  auto sleep_on_cv = [&](Clock::time_point until) {
    std::unique_lock lock(mutex_);
    const uint64_t seq_before = event_seq_.load(std::memory_order_acquire);
    waiters_.fetch_add(1);
    event_cv_.wait_until(lock, until, [&] {
      return satisfied() || event_seq_.load(std::memory_order_acquire) != seq_before ||
             (honor_wake && wake_seq_.load(std::memory_order_acquire) != wake_seen);
    });
    waiters_.fetch_sub(1);
  };

  const auto spin_until = what == WaitFor::notification ? Clock::now() + kSpin : Clock::now();
  Clock::duration backoff = Clock::duration::zero();
  unsigned trywait_refusals = 0;
  for (;;) {
    progress();
    if (satisfied() || woken()) return true;
    const auto now = Clock::now();
    if (now >= deadline) return false;

    if (!fd_wait_) {
      if (now < spin_until) continue;
      backoff = backoff == Clock::duration::zero() ? Clock::duration(kFirstBackoff)
                                                   : std::min<Clock::duration>(2 * backoff, kMaxBackoff);
      sleep_on_cv(std::min(deadline, now + backoff));
      continue;
    }

    if (!poller_.try_lock()) {
      sleep_on_cv(std::min(deadline, now + kMaxFdSleep));
      continue;
    }
    int rc = 0;
    {
      std::lock_guard lock(mutex_);
      fid* fids[] = {&cq_->fid};
      rc = fi_trywait(fabric_.get(), fids, 1);
      if (rc == FI_SUCCESS) poller_sleeping_.store(true, std::memory_order_release);
    }
    if (rc == FI_SUCCESS) {
      trywait_refusals = 0;
      const auto left = std::min<Clock::duration>(deadline - now, kMaxFdSleep);
      const auto left_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
      timespec ts{static_cast<time_t>(left_ns / 1000000000), static_cast<long>(left_ns % 1000000000)};
      pollfd fds[2] = {{cq_fd_, POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}};
      ::ppoll(fds, 2, &ts, nullptr);
      poller_sleeping_.store(false, std::memory_order_release);
      if (fds[1].revents & POLLIN) drain_fd(wake_fd_.get());
    } else if (++trywait_refusals > 16) {
      // The provider keeps saying "progress first" without producing events: do not spin.
      poller_.unlock();
      sleep_on_cv(std::min(deadline, now + kFirstBackoff));
      continue;
    }
    poller_.unlock();
    // Hand the poller role to another waiter, if any.
    if (waiters_.load(std::memory_order_acquire) > 0) event_cv_.notify_all();
  }
}

}  // namespace pcoll::transport::ofi
