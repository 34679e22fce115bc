// The shared wait loop (wait_loop.hpp): spin, then one sleeper on the provider fd and the
// others on the condition variable, or back-off sleeps where the provider has no fd.
#include <util/wait_loop.hpp>

#include <poll.h>

#include <algorithm>
#include <thread>

#include <support/error.hpp>

namespace pcoll::transport {

using Clock = std::chrono::steady_clock;

WaitLoop::WaitLoop(Hooks& hooks, int provider_fd, const WaitTuning& tuning, const std::string& name)
    : hooks_(hooks), provider_fd_(provider_fd), tuning_(tuning) {
  if (provider_fd_ >= 0) kick_fd_ = open_eventfd(Errc::transport, name + ": wait loop");
}

void WaitLoop::wake() {
  ++wake_seq_;
  wake_pending_ = true;
  if (sleeper_active_) kick();
  if (cv_waiters_ > 0) cv_.notify_all();
}

bool WaitLoop::wait(std::unique_lock<std::mutex>& lock, const std::function<bool()>& done,
                    Clock::time_point deadline, WaitKind kind, std::chrono::microseconds spin) {
  const bool wakeable = kind != WaitKind::operation;
  if (wakeable && wake_pending_) {
    wake_pending_ = false;
    return true;
  }
  const uint64_t wake_seq_at_entry = wake_seq_;
  const bool satisfied = run(lock, done, deadline, kind, spin, wake_seq_at_entry);
  // A wake() this wait saw (whatever ended it) is used up: it must not also end the next one.
  if (wakeable && wake_seq_ != wake_seq_at_entry) wake_pending_ = false;
  return satisfied;
}

bool WaitLoop::run(std::unique_lock<std::mutex>& lock, const std::function<bool()>& done,
                   Clock::time_point deadline, WaitKind kind, std::chrono::microseconds spin,
                   uint64_t wake_seq_at_entry) {
  const bool wakeable = kind != WaitKind::operation;
  const auto spin_until = std::min(Clock::now() + spin, deadline);
  Clock::duration backoff = Clock::duration::zero();
  unsigned refusals = 0;
  for (;;) {
    hooks_.progress_pass();
    if (done()) return true;
    if (wakeable && wake_seq_ != wake_seq_at_entry) return true;
    const auto now = Clock::now();
    if (now >= deadline) return false;

    if (now < spin_until) {
      lock.unlock();  // let other threads progress and post between passes
      if (tuning_.yield_while_spinning) std::this_thread::yield();
      lock.lock();
      continue;
    }
    if (provider_fd_ < 0) {
      backoff = backoff == Clock::duration::zero()
                    ? Clock::duration(tuning_.first_backoff)
                    : std::min<Clock::duration>(2 * backoff, tuning_.max_backoff);
      sleep_on_cv(lock, std::min(deadline, now + backoff));
      continue;
    }
    if (sleeper_active_) {
      sleep_on_cv(lock, std::min(deadline, now + tuning_.max_sleep));
      continue;
    }
    if (!hooks_.arm()) {
      if (tuning_.arm_refusals_before_pause != 0 && ++refusals > tuning_.arm_refusals_before_pause)
        sleep_on_cv(lock, std::min(deadline, now + tuning_.first_backoff));
      continue;
    }
    refusals = 0;
    sleep_on_fd(lock, std::min<Clock::duration>(deadline - now, tuning_.max_sleep), kind);
  }
}

void WaitLoop::sleep_on_cv(std::unique_lock<std::mutex>& lock, Clock::time_point until) {
  ++cv_waiters_;
  cv_.wait_until(lock, until);
  --cv_waiters_;
}

void WaitLoop::sleep_on_fd(std::unique_lock<std::mutex>& lock, Clock::duration timeout, WaitKind kind) {
  sleeper_active_ = true;
  sleeper_kind_ = kind;
  lock.unlock();
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
  const timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  pollfd fds[2] = {{provider_fd_, POLLIN, 0}, {kick_fd_.get(), POLLIN, 0}};
  const int ready = ::ppoll(fds, 2, &ts, nullptr);
  if (ready > 0 && (fds[1].revents & POLLIN)) drain_eventfd(kick_fd_.get());
  lock.lock();
  sleeper_active_ = false;
  hooks_.disarm();
  if (cv_waiters_ > 0) cv_.notify_all();  // one of them may take over sleeping
}

}  // namespace pcoll::transport
