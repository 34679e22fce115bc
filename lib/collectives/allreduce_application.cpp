// The application side of an allreduce handle: posting rounds, collecting results, and the
// waiting in between (allreduce.hpp). A waiter drives the engine itself while it spins, so
// a fast round pays no thread hand-off, and sleeps once the engine stops moving.
#include <collectives/allreduce.hpp>

#include <algorithm>
#include <thread>

#include <sched.h>

#include <collectives/comm.hpp>
#include <support/error.hpp>

namespace pcoll {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// How long a round may stand still before its waiter asks whether the peer is alive.
std::chrono::milliseconds probe_after(std::chrono::milliseconds timeout) { return FailureDetector::probe_period(timeout); }

}  // namespace

// While a waiter spins it drives the engine and the progress thread is parked; asleep, it
// is the other way round.
struct Allreduce::ProgressHold {
  Comm& comm;
  bool on = false;
  void set(bool want, bool resume_now = true) {
    if (want == on) return;
    if (want) comm.hold_progress(); else comm.release_progress(resume_now);
    on = want;
  }
  // The round is done and the application will likely be back for the next one soon.
  ~ProgressHold() { set(false, false); }
};

void Allreduce::start(const void* sendbuf, void* recvbuf) {
  if (sendbuf == nullptr && spec_.count > 0)
    invalid_argument("pcoll_allreduce_start: sendbuf is NULL but count is " + std::to_string(spec_.count));
  if (recvbuf == nullptr && spec_.count > 0)
    invalid_argument("pcoll_allreduce_start: recvbuf is NULL but count is " + std::to_string(spec_.count));
  std::unique_lock lock(comm_.engine_mutex());
  comm_.check_failed();
  if (posted_)
    fail(Errc::invalid_state, "pcoll_allreduce_start: round " + std::to_string(posted_->round) +
                                  " is still outstanding; call pcoll_allreduce_wait first");
  post(app_next_, sendbuf, recvbuf, false, lock);
}

void Allreduce::flush(void* recvbuf, RoundInfo* info) {
  if (recvbuf == nullptr && spec_.count > 0)
    invalid_argument("pcoll_allreduce_flush: recvbuf is NULL but count is " + std::to_string(spec_.count));
  {
    std::unique_lock lock(comm_.engine_mutex());
    comm_.check_failed();
    if (posted_)
      fail(Errc::invalid_state, "pcoll_allreduce_flush: round " + std::to_string(posted_->round) +
                                    " is still outstanding; call pcoll_allreduce_wait first");
    // Another rank's run started this round: the calls differ (docs/design.md, "Mismatched
    // calls"), and the communicator fails so that the other ranks hear of it.
    if (app_next_ < joined_)
      comm_.fail_locked(Error(Errc::mismatch, "rank " + std::to_string(rank_) + " called flush of handle " +
                                                  std::to_string(id_) + " at round " + std::to_string(app_next_) +
                                                  ", which another rank had started with run"));
    post(app_next_, nullptr, recvbuf, true, lock);
  }
  wait_for_round(info);
}

// The application posts `round` (engine lock held by `lock`).
void Allreduce::post(uint64_t round, const void* sendbuf, void* recvbuf, bool flush, std::unique_lock<std::mutex>& lock) {
  ++app_next_;
  posted_ = Posted{round, sendbuf, recvbuf, round < joined_, flush, false};
  if (flush) observe([&](RoundObserver& o) { o.flush_posted(round); });
  else observe([&](RoundObserver& o) { o.posted(round, posted_->late); });
  if (!flush && round == completed_ && round < joined_) {
    // The active round started without us: our sendbuf joins the carry once it completes
    // (until then the round is outstanding, so the buffer stays ours).
    pending_late_ = sendbuf;
  } else if (!flush && round < completed_) {
    // The round already completed without us: hand over its result now.
    const HandleMemory::Completed& slot = memory_->completed(round);
    if (slot.round != round) fail(Errc::internal, "result of round " + std::to_string(round) + " was overwritten");
    if (memory_->holds() == HandleMemory::Holds::result && round + 1 == completed_) memory_->hand_over_result(recvbuf, sendbuf);
    else memory_->hand_over_moved(round, recvbuf, sendbuf);
    posted_->delivered = true;
  }
  // The round is posted: a failure found from here on is the next wait's (or test's) to
  // report, so that a start that returns an error has posted nothing, and the call a failure
  // interrupts is always one whose round is outstanding (pcoll_allreduce_resume settles it).
  try {
    // Rounds before a resumed handle's first ran on the old communicator: nothing to count.
    if (round >= first_round_ && policy_->arrival_counter(round)) count_arrival(lock, round);
    comm_.drive_locked();
  } catch (const Error&) {
    if (!comm_.failed()) throw;
  }
}

bool Allreduce::deliver_if_ready_locked(RoundInfo* info) {
  if (!posted_) fail(Errc::invalid_state, "no round outstanding: call pcoll_allreduce_start first");
  const uint64_t round = posted_->round;
  if (completed_ <= round) return false;
  const HandleMemory::Completed& slot = memory_->completed(round);
  if (slot.round != round) fail(Errc::internal, "result of round " + std::to_string(round) + " was overwritten");
  if (!posted_->delivered) fail(Errc::internal, "round " + std::to_string(round) + " completed undelivered");
  if (info != nullptr) {
    *info = slot.info;
    if (posted_->flush) info->caller_late = false;
  }
  observe([&](RoundObserver& o) { o.delivered(round, posted_->late); });
  posted_.reset();
  return true;
}

bool Allreduce::test(RoundInfo* info) {
  std::unique_lock lock(comm_.engine_mutex());
  comm_.check_failed();
  // A round this call completes was waited for, not computed over (the statistics).
  struct Polling {
    int& waiters;
    explicit Polling(int& w) : waiters(w) { ++waiters; }
    ~Polling() { --waiters; }
  } polling{waiters_};
  comm_.drive_locked();
  if (deliver_if_ready_locked(info)) return true;
  probe_locked(Clock::now());
  return false;
}

void Allreduce::wait(RoundInfo* info) {
  {
    std::lock_guard lock(comm_.engine_mutex());
    if (!posted_) fail(Errc::invalid_state, "pcoll_allreduce_wait: no round outstanding; call pcoll_allreduce_start first");
  }
  wait_for_round(info);
}

bool Allreduce::wait_until(RoundInfo* info, Clock::time_point deadline) {
  {
    std::lock_guard lock(comm_.engine_mutex());
    if (!posted_)
      fail(Errc::invalid_state, "pcoll_allreduce_timedwait: no round outstanding; call pcoll_allreduce_start first");
  }
  return wait_for_round(info, deadline);
}

void Allreduce::probe_locked(Clock::time_point now) {
  if (!ready_) return;
  if (epoch() != probe_epoch_) {
    probe_epoch_ = epoch();
    probe_moved_at_ = now;
    return;
  }
  const int peer = awaited_peer();
  if (peer < 0 || peer == rank_) return;
  if (now - probe_moved_at_ > probe_after(timeout_)) comm_.watch_locked(peer, timeout_);
}

int Allreduce::awaited_peer() const {
  if (joined_ > completed_) {
    const int peer = executor_->awaited_peer();
    if (peer >= 0) return peer;
  }
  if (!policy_->synchronous(joined_) && joined_ >= activated_) return policy_->awaited_initiator(joined_);
  return -1;
}

bool Allreduce::wait_for_round(RoundInfo* info, std::optional<Clock::time_point> deadline) {
  ProgressHold holding{comm_};
  // When this waiter last saw the engine move, to within kClockEvery polls: the clock is read
  // every kClockEvery polls, not at each change (a round moves several times; a clock read
  // costs about 20 ns here, a twentieth of a small round), so a round that completes within
  // its first polls reads it only at the start and the end of the call.
  constexpr unsigned kClockEvery = 16;
  auto moved_at = Clock::now();
  bool moved = false;  // the engine moved since moved_at was read
  bool spinning = true;
  std::unique_lock lock(comm_.engine_mutex());
  // Counts this call as a waiter and its time as blocked; ends before the lock is released.
  struct Waiting {
    Allreduce& handle;
    Clock::time_point since;
    Waiting(Allreduce& h, Clock::time_point t) : handle(h), since(t) { ++handle.waiters_; }
    ~Waiting() {
      --handle.waiters_;
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - since).count();
      handle.observe([&](RoundObserver& o) { o.blocked(static_cast<uint64_t>(ns)); });
    }
  } waiting{*this, moved_at};
  uint64_t seen = epoch();  // written under the engine lock by whoever drives the engine
  for (unsigned poll = 1, idle = 1;; ++poll, ++idle) {
    comm_.check_failed();
    comm_.drive_locked();
    if (deliver_if_ready_locked(info)) return true;
    if (deadline && poll % kClockEvery == 0 && Clock::now() >= *deadline) return false;
    if (epoch() != seen) {
      seen = epoch();
      moved = true;
      idle = 1;
      spinning = true;
    } else if (idle % kClockEvery == 0) {
      const auto now = Clock::now();
      if (moved) {
        moved_at = now;
        moved = false;
      }
      const int peer = awaited_peer();
      // Only a waiter that heard nothing for a while asks whether the peer is alive.
      if (peer >= 0 && peer != rank_ && now - moved_at > probe_after(timeout_)) comm_.watch_locked(peer, timeout_);
      // Spin while the round moves: within the spin budget of the start of the wait or of
      // the engine's last step, so a large round that keeps receiving is driven here to
      // the end, and a wait for a late peer goes to sleep soon.
      spinning = now < moved_at + comm_.spin_budget();
    }
    pause_waiting(lock, spinning, holding, deadline);
    if (!spinning) idle = kClockEvery - 1;  // look at the clock again after every sleep
  }
}

// Between two polls of a waiter: a short pause while it spins (driving the engine itself,
// the progress thread parked), or a sleep until the progress thread moves the engine on.
void Allreduce::pause_waiting(std::unique_lock<std::mutex>& lock, bool spinning, ProgressHold& holding,
                              std::optional<Clock::time_point> deadline) {
  if (spinning) {
    holding.set(true);
    // A short pause between polls (a long one adds microseconds to every round). Yield
    // only when the node is oversubscribed: then the rank we wait for may need this CPU;
    // otherwise a yield can hand the core to unrelated work for a whole slice.
    lock.unlock();
    if (comm_.yield_when_spinning()) {
      sched_yield();
    } else {
      for (int i = 0; i < 4; ++i) cpu_relax();
    }
    lock.lock();
    return;
  }
  holding.set(false);
  auto nap = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::milliseconds(std::clamp<int64_t>(timeout_.count() / 8, 1, 100)));
  // Wake for a grace that ends sooner, or for the caller's own deadline.
  for (const auto due : {next_deadline_locked(), deadline})
    if (due)
      nap = std::clamp(std::chrono::duration_cast<std::chrono::microseconds>(*due - Clock::now()),
                       std::chrono::microseconds(0), nap);
  comm_.sleep_locked(lock, nap);
}

void Allreduce::destroy() {
  // The contract (pcoll.h): destroy always frees the handle. A round still outstanding is
  // waited for first (its peers need this rank's part); then every rank's writes into
  // this handle's memory are fenced by a barrier before the memory is deregistered. On a
  // failed communicator there is nobody to wait for: the memory stays registered until
  // pcoll_finalize (Comm::release_region), and the failure is returned (pcoll.h), so that
  // a rank told of a mismatch before its destroy does not report success.
  comm_.check_failed();
  bool outstanding = false;
  {
    std::lock_guard lock(comm_.engine_mutex());
    outstanding = posted_.has_value();
  }
  if (outstanding) wait_for_round(nullptr);
  {
    std::lock_guard lock(comm_.engine_mutex());
    try {
      executor_->settle(*this);
    } catch (const Error& error) {
      // A write of the last round failed: its target waits for it, tell everyone.
      comm_.fail_locked(error);
    }
  }
  uint64_t rounds = 0;
  {
    std::lock_guard lock(comm_.engine_mutex());
    rounds = app_next_;
  }
  comm_.barrier(CallHeader{CallKind::destroy, 0, id_, rounds}, timeout_);
}

}  // namespace pcoll
