// Liveness and failure news of one communicator (docs/design.md, "Failures"): which peers
// owe a ping an answer, the ring heartbeat that finds a rank nobody waits on, the record of
// the first failure (every later call reports it), the failure notice every other rank is
// told, and who has heard of it (a failed rank lingers until they all have).
//
// A state machine: it owns no thread, clock or transport. The communicator calls it with
// the engine lock held (check_failed and failed from any thread), passes the time, and
// sends what it asks for through PeerNotices; tests drive it with a clock and a sink of
// their own (tests/unit/test_failure_detector.cpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <support/error.hpp>

namespace pcoll {

// A failure as a rank reports it to the others (mismatches: docs/design.md, "Mismatched
// calls"): the code every rank returns and the reporter's message.
struct FailureReport {
  Errc code = Errc::internal;
  std::string text;
};

// How the detector reaches its peers. A send may throw Error (the peer is gone).
class PeerNotices {
 public:
  virtual ~PeerNotices() = default;
  virtual void send_ping(int peer) = 0;
  virtual void send_pong(int peer) = 0;
  // `culprit` -1: the failure names nobody.
  virtual void send_failure(int peer, int culprit) = 0;
  // A failure notice that brings the failure's code and message along (a mismatch, which
  // names no culprit). By default a plain notice.
  virtual void send_report(int peer, int culprit, const FailureReport& /*report*/) { send_failure(peer, culprit); }
  virtual void send_failure_ack(int peer) = 0;
  // Wakes every thread waiting on the engine: a failure was recorded.
  virtual void wake_waiters() = 0;
};

class FailureDetector {
 public:
  using Clock = std::chrono::steady_clock;

  FailureDetector(int rank, int size, PeerNotices& notices, Clock::time_point now);

  // How long a waiter lets a peer stay quiet before it pings it, and how often the heartbeat
  // pings: a quarter of `timeout`, at most a second.
  static std::chrono::milliseconds probe_period(std::chrono::milliseconds timeout) {
    return std::min<std::chrono::milliseconds>(timeout / 4, std::chrono::milliseconds(1000));
  }

  // --- Liveness.
  // The peer's engine answered: a pong, or any message that only its engine sends.
  void heard_from(int peer, Clock::time_point now);
  // A ping arrived: the engine answers, whatever the application is doing.
  void on_ping(int peer) { notices_.send_pong(peer); }
  // A waiter that heard nothing useful from `peer` for a while: pings it, and once a ping
  // stays unanswered for `timeout`, fails the communicator naming it (and throws).
  void watch(int peer, std::chrono::milliseconds timeout, Clock::time_point now);
  // Every engine pings its ring successor once per probe period (a quarter of `timeout`,
  // at most a second), so a dead rank is found even when nobody waits on it.
  void heartbeat(Clock::time_point now, std::chrono::milliseconds timeout);
  // After the failure (a shrink waits on `peer`): pings `peer` once it has been quiet for a
  // probe period, and says whether a ping of it stayed unanswered for `timeout`.
  bool unanswered(int peer, std::chrono::milliseconds timeout, Clock::time_point now);
  // The heartbeat runs from the end of setup until pcoll_finalize begins.
  void start_heartbeat() { heartbeat_on_.store(true, std::memory_order_relaxed); }
  void begin_leaving() {
    heartbeat_on_.store(false, std::memory_order_relaxed);
    leaving_.store(true, std::memory_order_release);
  }
  bool is_leaving() const { return leaving_.load(std::memory_order_acquire); }

  // --- The failure record.
  // Records the failure (the first one wins), tells every peer, wakes waiters. The code is
  // peer_failed when a culprit is named, else transport, unless `code` says otherwise; a
  // mismatch is reported to the peers with its message (send_report).
  void mark_failed(int culprit, const std::string& reason, Errc code = Errc::ok);
  // A failure this rank found after the first (a rank silent during a shrink): named, and
  // every peer not named is told, so that every live rank hears of it.
  void name_later(int culprit, const std::string& reason);
  // Throws the recorded failure, if any. Any thread.
  void check_failed() const;
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // Every rank named as a culprit so far, ascending: by this rank's own detection or by a
  // peer's failure notice, before the record or after it (a later failure does not replace
  // the record, but its culprit is known). This rank is among them when a peer reported it.
  std::vector<int> failed_ranks() const;

  // --- Failure news.
  // `sender` reports a failure naming `culprit` (-1: nobody in particular): acknowledged,
  // and recorded here unless a failure already is; with the sender's `report` when it
  // wrote one (its code, and its message appended: "(rank S reported: ...)").
  void on_failure_notice(int sender, int culprit, const FailureReport* report = nullptr);
  // `peer` acknowledged our failure notice.
  void on_failure_ack(int peer) { knows_[static_cast<size_t>(peer)] = true; }
  // Every peer but the culprit acknowledged our notice or told us of the failure itself.
  bool everyone_knows() const;

 private:
  int rank_;
  int size_;
  PeerNotices& notices_;
  // Per peer: when our oldest unanswered ping was sent, and when we last heard.
  std::vector<std::optional<Clock::time_point>> ping_sent_;
  std::vector<Clock::time_point> last_heard_;
  std::vector<Clock::time_point> last_ping_;  // unanswered(): when a ping last went out
  std::atomic<bool> heartbeat_on_{false};
  std::atomic<bool> leaving_{false};

  std::atomic<bool> failed_{false};
  mutable std::mutex failure_mutex_;
  std::string failure_reason_;
  int failure_code_ = 0;
  int culprit_ = -1;
  std::vector<bool> knows_;  // [peer]: heard of the failure (acknowledged, or told us)
  std::vector<bool> named_;  // [rank]: named as a culprit (failure_mutex_)
};

}  // namespace pcoll
