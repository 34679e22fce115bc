// The blocking wait every provider needs, written once (libfabric keeps its wait objects in
// prov/util for the same reason): Transport::wait(), and the waits inside blocking
// operations (atomics, flush), over a provider that can be progressed and may offer an fd
// that becomes readable when it has work.
//
// How a thread waits: it progresses and checks its condition; for `spin` it keeps doing so
// (releasing the provider's mutex between passes); after that, at most one thread at a time
// -- the "sleeper" -- asks the provider whether sleeping is safe (Hooks::arm: fi_trywait,
// ucp_worker_arm) and sleeps in ppoll() on the provider's fd plus an eventfd of ours (the
// "kick"); every other blocked thread sleeps on a condition variable. Whoever makes progress
// (any thread) kicks the sleeper when what it waits for may now hold, and notifies the
// condition variable, so notifications queued by one thread wake the others and an idle
// transport costs no CPU. When the sleeper wakes it notifies the condition variable, so a
// waiter there may take over the sleeping role. A provider without an fd (ofi:shm) has its
// waiters sleep on the condition variable on growing back-off intervals instead.
//
// Locking: the WaitLoop has no mutex of its own. Every call is made with the provider's mutex
// held (the one that serialises its progress), and wait() releases it only to spin, sleep
// or poll; so a waker and a waiter that is between its last check and its sleep cannot miss
// each other.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include <support/fd.hpp>

namespace pcoll::transport {

// What a blocked thread waits for; decides whether progress made by another thread must
// wake it, and whether wake() ends its wait.
enum class WaitKind {
  notification,  // Transport::wait(WaitFor::notification): woken only when one is queued
  activity,      // Transport::wait(WaitFor::activity): woken by any progress
  operation,     // a blocking operation (atomic, flush): any progress; wake() does not end it
};

// Per-provider timing.
struct WaitTuning {
  // The sleeper and the condition-variable waiters re-check at least this often, in case
  // the provider needs a poll to make progress that does not signal its fd.
  std::chrono::microseconds max_sleep{std::chrono::milliseconds(10)};
  // Without a provider fd: the first sleep on the condition variable, doubled each time up
  // to max_backoff. Also the pause after too many refused arm() calls (below).
  std::chrono::microseconds first_backoff{50};
  std::chrono::microseconds max_backoff{1000};
  // Whether a spinning waiter yields its CPU between passes (ranks may outnumber cores).
  bool yield_while_spinning = false;
  // After this many arm() refusals in a row, pause for first_backoff between further tries
  // instead of spinning on a provider that keeps saying "progress first". 0: never pause.
  unsigned arm_refusals_before_pause = 0;
};

class WaitLoop {
 public:
  // What the provider supplies. Called with its mutex held.
  class Hooks {
   public:
    // One progress pass; returns the number of events it handled. The provider reports
    // what it found through WaitLoop::on_progress().
    virtual unsigned progress_pass() = 0;
    // Prepares to sleep on the provider fd; false: events are pending (or the provider
    // refuses for now), progress first.
    virtual bool arm() = 0;
    // Undoes arm() after the sleep (the mutex is held again).
    virtual void disarm() {}

   protected:
    ~Hooks() = default;
  };

  // `provider_fd` < 0: the provider has no fd to sleep on (back off on the condition
  // variable instead). `name` prefixes errors ("ofi", "ucx").
  WaitLoop(Hooks& hooks, int provider_fd, const WaitTuning& tuning, const std::string& name);
  WaitLoop(const WaitLoop&) = delete;
  WaitLoop& operator=(const WaitLoop&) = delete;

  // Blocks, `lock` (the provider mutex) held on entry and on return, until done() holds
  // (true), the deadline passes (false), or -- unless kind is operation -- wake() is called
  // (true). A wake() that came while no wait was running ends the next wait at once; one that
  // a running wait saw is used up by it. Spins (progressing) for `spin` first.
  bool wait(std::unique_lock<std::mutex>& lock, const std::function<bool()>& done,
            std::chrono::steady_clock::time_point deadline, WaitKind kind, std::chrono::microseconds spin);

  // A progress pass found events: wakes the sleeper if what it waits for may now hold (a
  // notification waiter only when `notifications_queued`), and the condition-variable waiters.
  void on_progress(bool notifications_queued) {
    if (sleeper_active_ && (sleeper_kind_ != WaitKind::notification || notifications_queued)) kick();
    if (cv_waiters_ > 0) cv_.notify_all();
  }
  // Wakes every blocked thread so that it re-checks its condition (a peer failed).
  void wake_all_waiters() {
    if (sleeper_active_) kick();
    if (cv_waiters_ > 0) cv_.notify_all();
  }
  // Transport::wake(): ends a running or the next wait() of kind notification / activity.
  void wake();

 private:
  bool run(std::unique_lock<std::mutex>& lock, const std::function<bool()>& done,
           std::chrono::steady_clock::time_point deadline, WaitKind kind, std::chrono::microseconds spin,
           uint64_t wake_seq_at_entry);
  void sleep_on_cv(std::unique_lock<std::mutex>& lock, std::chrono::steady_clock::time_point until);
  void sleep_on_fd(std::unique_lock<std::mutex>& lock, std::chrono::steady_clock::duration timeout,
                   WaitKind kind);
  void kick() noexcept { signal_eventfd(kick_fd_.get()); }

  Hooks& hooks_;
  const int provider_fd_;
  const WaitTuning tuning_;
  Fd kick_fd_;  // wakes the sleeper out of ppoll(); only with a provider fd

  std::condition_variable cv_;
  size_t cv_waiters_ = 0;
  bool sleeper_active_ = false;
  WaitKind sleeper_kind_ = WaitKind::notification;
  uint64_t wake_seq_ = 0;      // bumped by wake()
  bool wake_pending_ = false;  // a wake() no wait has used up yet
};

}  // namespace pcoll::transport
