// The in-process provider's progress and notification queue: progress, poll (reordered),
// and a blocking wait on the endpoint's condition variable.
#include <inproc/inproc_transport.hpp>

namespace pcoll::transport::inproc {

void InprocTransport::progress() {
  copy_pending();
  check_error();
}

size_t InprocTransport::poll(std::span<uint64_t> out) {
  progress();
  std::lock_guard lock(self_->mutex);
  auto& inbox = self_->inbox;
  size_t n = 0;
  for (; n < out.size() && !inbox.empty(); ++n) {
    if (self_->fifo) {
      out[n] = inbox.front();
      inbox.pop_front();
      continue;
    }
    // Any queued value may come next: the engine must not depend on arrival order.
    std::uniform_int_distribution<size_t> pick(0, inbox.size() - 1);
    std::swap(inbox[pick(self_->order)], inbox.back());
    out[n] = inbox.back();
    inbox.pop_back();
  }
  return n;
}

bool InprocTransport::wait(std::chrono::microseconds timeout, WaitFor what) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Endpoint& self = *self_;
  uint64_t wakes_at_entry = 0;
  {
    std::lock_guard lock(self.mutex);
    if (self.wake_pending) {
      self.wake_pending = false;
      return true;
    }
    wakes_at_entry = self.wakes;
  }
  // What the caller waits for. Activity counts from what the last such wait returned on, so
  // that nothing that arrived between two waits of the progress driver is slept through.
  auto happened = [&] {
    return what == WaitFor::notification ? !self.inbox.empty() : self.activity != self.activity_seen;
  };
  for (;;) {
    progress();  // this rank's queued writes, which a peer may be waiting for
    std::unique_lock lock(self.mutex);
    if (self.wakes != wakes_at_entry) {
      self.wake_pending = false;  // a wake() that came in just before this thread slept: ours
      return true;
    }
    if (happened()) {
      self.activity_seen = self.activity;
      return true;
    }
    ++self.waiters;
    const bool woken = self.changed.wait_until(lock, deadline, [&] {
      return self.wakes != wakes_at_entry || happened() || !self.outbox.empty() || self.closed;
    });
    --self.waiters;
    if (!woken || self.closed) return false;
  }
}

void InprocTransport::wake() {
  std::lock_guard lock(self_->mutex);
  ++self_->wakes;
  if (self_->waiters == 0) self_->wake_pending = true;
  self_->changed.notify_all();
}

}  // namespace pcoll::transport::inproc
