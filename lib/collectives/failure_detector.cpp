// Liveness and failure news (failure_detector.hpp).
#include <collectives/failure_detector.hpp>

#include <algorithm>

#include <support/error.hpp>
#include <support/log.hpp>

namespace pcoll {

FailureDetector::FailureDetector(int rank, int size, PeerNotices& notices, Clock::time_point now)
    : rank_(rank), size_(size), notices_(notices), ping_sent_(static_cast<size_t>(size)),
      last_heard_(static_cast<size_t>(size), now), last_ping_(static_cast<size_t>(size), now), knows_(static_cast<size_t>(size), false),
      named_(static_cast<size_t>(size), false) {}

void FailureDetector::heard_from(int peer, Clock::time_point now) {
  ping_sent_[static_cast<size_t>(peer)].reset();
  last_heard_[static_cast<size_t>(peer)] = now;
}

void FailureDetector::watch(int peer, std::chrono::milliseconds timeout, Clock::time_point now) {
  auto& sent = ping_sent_[static_cast<size_t>(peer)];
  if (!sent) {
    sent = now;
    notices_.send_ping(peer);
    return;
  }
  if (now - *sent > timeout) {
    mark_failed(peer, "rank " + std::to_string(peer) + " did not answer within " + std::to_string(timeout.count()) +
                          " ms (PCOLL_TIMEOUT_MS / timeout_ms): its process or progress engine is gone");
    check_failed();
  }
}

bool FailureDetector::unanswered(int peer, std::chrono::milliseconds timeout, Clock::time_point now) {
  const auto p = static_cast<size_t>(peer);
  const auto period = probe_period(timeout);
  if (!ping_sent_[p] && now - last_heard_[p] < period) return false;
  // A ping can be lost (a rank failing drops what is not failure news), so one is sent
  // again every period while none is answered; silence counts from the first.
  if (!ping_sent_[p] || now - last_ping_[p] >= period) {
    if (!ping_sent_[p]) ping_sent_[p] = now;
    last_ping_[p] = now;
    try {
      notices_.send_ping(peer);
    } catch (const Error&) {
      return true;  // it cannot even be reached
    }
  }
  return now - *ping_sent_[p] > timeout;
}

void FailureDetector::name_later(int culprit, const std::string& reason) {
  if (culprit < 0 || culprit >= size_) return;
  std::vector<bool> named;
  {
    std::lock_guard lock(failure_mutex_);
    if (named_[static_cast<size_t>(culprit)]) return;
    named_[static_cast<size_t>(culprit)] = true;
    named = named_;
  }
  log::error(reason);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || (named[static_cast<size_t>(r)] && r != culprit)) continue;
    try {
      notices_.send_failure(r, culprit);
    } catch (const Error&) {
      // Gone too; the others still hear.
    }
  }
  notices_.wake_waiters();
}

void FailureDetector::heartbeat(Clock::time_point now, std::chrono::milliseconds timeout) {
  if (size_ < 2 || !heartbeat_on_.load(std::memory_order_relaxed)) return;
  const int successor = (rank_ + 1) % size_;
  const auto period = probe_period(timeout);
  const auto s = static_cast<size_t>(successor);
  if (!ping_sent_[s] && now - last_heard_[s] < period) return;
  watch(successor, timeout, now);
}

void FailureDetector::mark_failed(int culprit, const std::string& reason, Errc code) {
  if (code == Errc::ok) code = culprit >= 0 ? Errc::peer_failed : Errc::transport;
  {
    std::lock_guard lock(failure_mutex_);
    if (culprit >= 0 && culprit < size_) named_[static_cast<size_t>(culprit)] = true;
    if (failed_.load(std::memory_order_relaxed)) return;
    failure_reason_ = reason;
    failure_code_ = static_cast<int>(code);
    culprit_ = culprit;
    failed_.store(true, std::memory_order_release);
  }
  log::error(reason);
  // Tell everyone else so that ranks waiting on a live peer do not wait forever.
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || r == culprit) continue;
    try {
      if (code == Errc::mismatch) notices_.send_report(r, culprit, FailureReport{code, reason});
      else notices_.send_failure(r, culprit);
    } catch (const Error&) {
      // That peer may be gone too; the others still need to hear. Nobody waits for its
      // acknowledgement.
      knows_[static_cast<size_t>(r)] = true;
    }
  }
  // The culprit last, unless it owes us an answer (then it is presumably dead, and a send
  // into its full queue could block): a provider error about it (a reset connection, a
  // failed write) may leave it alive, and it would otherwise learn of the failure only by
  // timing out on a partner that, failed, no longer answers.
  if (culprit >= 0 && culprit < size_ && culprit != rank_ && !ping_sent_[static_cast<size_t>(culprit)]) {
    try {
      notices_.send_failure(culprit, culprit);
    } catch (const Error&) {
      // Gone indeed.
    }
  }
  notices_.wake_waiters();
}

void FailureDetector::check_failed() const {
  if (!failed_.load(std::memory_order_acquire)) return;
  std::lock_guard lock(failure_mutex_);
  throw Error(static_cast<Errc>(failure_code_), failure_reason_);
}

void FailureDetector::on_failure_notice(int sender, int culprit, const FailureReport* report) {
  knows_[static_cast<size_t>(sender)] = true;
  try {
    notices_.send_failure_ack(sender);
  } catch (const Error&) {
    // The sender is gone; it did not wait for us then.
  }
  if (report != nullptr) {
    mark_failed(culprit, std::string(errc_name(report->code)) + " (rank " + std::to_string(sender) + " reported: " +
                             report->text + ")",
                report->code);
    return;
  }
  mark_failed(culprit,
              culprit < 0 ? "another rank reported a failure of the job"
              : culprit == rank_
                  ? "rank " + std::to_string(culprit) + " (this rank) was reported failed by another rank: its "
                    "connection to this rank failed, or this rank did not answer it in time"
                  : "rank " + std::to_string(culprit) + " failed or stopped answering (reported by another rank)");
}

std::vector<int> FailureDetector::failed_ranks() const {
  std::vector<int> ranks;
  std::lock_guard lock(failure_mutex_);
  for (int r = 0; r < size_; ++r)
    if (named_[static_cast<size_t>(r)]) ranks.push_back(r);
  return ranks;
}

bool FailureDetector::everyone_knows() const {
  for (int r = 0; r < size_; ++r)
    if (r != rank_ && r != culprit_ && !knows_[static_cast<size_t>(r)]) return false;
  return true;
}

}  // namespace pcoll
