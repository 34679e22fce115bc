// The failure detector (collectives/failure_detector.hpp) on its own: liveness pings, the
// ring heartbeat, the failure record and the failure news, driven with a clock of the
// test's and a sink that records what the detector sends. Each case is one rule of
// docs/design.md, "Failures".
#include <doctest/doctest.h>

#include <chrono>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <collectives/failure_detector.hpp>
#include <support/error.hpp>

using namespace pcoll;
using namespace std::chrono_literals;

namespace {

using Clock = FailureDetector::Clock;

// What the detector sent, and peers the test declares gone (a send to them throws).
struct Recorder final : PeerNotices {
  std::vector<int> pings, pongs, acks;
  std::vector<std::pair<int, int>> failures;  // (to, culprit)
  std::vector<std::pair<int, std::string>> reports;  // (to, text)
  std::set<int> gone;
  int wakes = 0;
  void refuse(int peer) {
    if (gone.count(peer)) fail_peer(Errc::peer_failed, peer, "rank " + std::to_string(peer) + " is gone");
  }
  void send_ping(int peer) override { refuse(peer); pings.push_back(peer); }
  void send_pong(int peer) override { refuse(peer); pongs.push_back(peer); }
  void send_failure(int peer, int culprit) override { refuse(peer); failures.emplace_back(peer, culprit); }
  void send_report(int peer, int, const FailureReport& report) override {
    refuse(peer);
    reports.emplace_back(peer, report.text);
  }
  void send_failure_ack(int peer) override { refuse(peer); acks.push_back(peer); }
  void wake_waiters() override { ++wakes; }
};

std::string failure_of(const FailureDetector& detector) {
  try {
    detector.check_failed();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("a watched peer is pinged once, and named once it stays silent for the timeout") {
  Recorder sent;
  const auto t0 = Clock::now();
  FailureDetector detector(0, 4, sent, t0);
  detector.watch(2, 1000ms, t0);
  detector.watch(2, 1000ms, t0 + 500ms);  // still within the timeout: no second ping
  CHECK(sent.pings == std::vector<int>{2});
  CHECK_FALSE(detector.failed());
  CHECK_THROWS_AS(detector.watch(2, 1000ms, t0 + 1001ms), Error);
  REQUIRE(detector.failed());
  const std::string reason = failure_of(detector);
  CHECK(reason.find("rank 2 did not answer within 1000 ms") != std::string::npos);
  CHECK(reason.find("PCOLL_TIMEOUT_MS") != std::string::npos);
}

TEST_CASE("an answer, or any message of the peer's engine, keeps a slow peer alive") {
  Recorder sent;
  const auto t0 = Clock::now();
  FailureDetector detector(0, 3, sent, t0);
  // Ten minutes of pings answered each within the timeout: never a failure.
  for (int k = 0; k < 600; ++k) {
    const auto now = t0 + std::chrono::seconds(k);
    detector.watch(1, 1000ms, now);
    detector.heard_from(1, now + 10ms);
  }
  CHECK_FALSE(detector.failed());
  CHECK(sent.pings.size() == 600);
}

TEST_CASE("a ping is answered by the engine") {
  Recorder sent;
  FailureDetector detector(1, 3, sent, Clock::now());
  detector.on_ping(2);
  CHECK(sent.pongs == std::vector<int>{2});
}

TEST_CASE("the heartbeat asks the ring successor once per period, and only once started") {
  Recorder sent;
  const auto t0 = Clock::now();
  FailureDetector detector(3, 4, sent, t0);
  detector.heartbeat(t0 + 5s, 2000ms);
  CHECK(sent.pings.empty());  // not started: setup is still running
  detector.start_heartbeat();
  detector.heartbeat(t0 + 100ms, 2000ms);  // heard (at setup) within the period of 500 ms
  CHECK(sent.pings.empty());
  detector.heartbeat(t0 + 600ms, 2000ms);
  CHECK(sent.pings == std::vector<int>{0});  // rank 3's successor is rank 0
  detector.heard_from(0, t0 + 610ms);
  detector.heartbeat(t0 + 700ms, 2000ms);
  CHECK(sent.pings.size() == 1);
  // A successor that stops answering is named within the timeout.
  detector.heartbeat(t0 + 1200ms, 2000ms);
  CHECK(sent.pings.size() == 2);
  CHECK_THROWS_AS(detector.heartbeat(t0 + 3300ms, 2000ms), Error);
  CHECK(failure_of(detector).find("rank 0 did not answer") != std::string::npos);
  // Leaving stops it: a rank that has left must not look dead to one still leaving.
  Recorder quiet;
  FailureDetector leaving(0, 2, quiet, t0);
  leaving.start_heartbeat();
  leaving.begin_leaving();
  CHECK(leaving.is_leaving());
  leaving.heartbeat(t0 + 10s, 2000ms);
  CHECK(quiet.pings.empty());
}

TEST_CASE("a one-rank job has no heartbeat") {
  Recorder sent;
  const auto t0 = Clock::now();
  FailureDetector detector(0, 1, sent, t0);
  detector.start_heartbeat();
  detector.heartbeat(t0 + 1h, 1000ms);
  CHECK(sent.pings.empty());
}

TEST_CASE("a failure is told to every other rank, the culprit last, and the first failure wins") {
  Recorder sent;
  FailureDetector detector(1, 5, sent, Clock::now());
  detector.mark_failed(3, "rank 3 broke");
  detector.mark_failed(4, "rank 4 broke too");
  const std::vector<std::pair<int, int>> want = {{0, 3}, {2, 3}, {4, 3}, {3, 3}};
  CHECK(sent.failures == want);
  CHECK(sent.wakes == 1);
  CHECK(failure_of(detector) == "rank 3 broke");
  try {
    detector.check_failed();
  } catch (const Error& e) {
    CHECK(e.code() == Errc::peer_failed);
  }
}

TEST_CASE("every culprit named is a failed rank, ascending, also after the first failure") {
  Recorder sent;
  const auto t0 = Clock::now();
  FailureDetector detector(1, 6, sent, t0);
  CHECK(detector.failed_ranks().empty());
  detector.mark_failed(4, "rank 4 broke");
  CHECK(detector.failed_ranks() == std::vector<int>{4});
  detector.on_failure_notice(0, 2);   // a later failure: not the record, but a known one
  detector.on_failure_notice(3, 4);   // named twice, listed once
  detector.watch(5, 1000ms, t0);
  CHECK_THROWS(detector.watch(5, 1000ms, t0 + 2s));
  CHECK(detector.failed_ranks() == std::vector<int>{2, 4, 5});
  CHECK(failure_of(detector) == "rank 4 broke");
  // A culprit outside the job (from a peer's bytes) names nobody; this rank, reported by a
  // peer, is named.
  detector.on_failure_notice(0, 6);
  detector.on_failure_notice(0, -7);
  detector.on_failure_notice(0, 1);
  CHECK(detector.failed_ranks() == std::vector<int>{1, 2, 4, 5});
  Recorder other;
  FailureDetector mismatched(0, 3, other, t0);
  mismatched.mark_failed(-1, "rank 0 called barrier while rank 1 called run", Errc::mismatch);
  CHECK(mismatched.failed());
  CHECK(mismatched.failed_ranks().empty());
}

TEST_CASE("a culprit that owes an answer is not told (it is presumably dead); a failure naming nobody is a transport error") {
  Recorder sent;
  const auto t0 = Clock::now();
  FailureDetector detector(0, 3, sent, t0);
  detector.watch(2, 1000ms, t0);
  CHECK_THROWS(detector.watch(2, 1000ms, t0 + 2s));
  const std::vector<std::pair<int, int>> want = {{1, 2}};
  CHECK(sent.failures == want);
  Recorder other;
  FailureDetector anonymous(0, 2, other, t0);
  anonymous.mark_failed(-1, "the provider failed");
  try {
    anonymous.check_failed();
    FAIL("no failure recorded");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::transport);
  }
  CHECK(other.failures == std::vector<std::pair<int, int>>{{1, -1}});
}

TEST_CASE("failure news: a notice is acknowledged and recorded, naming the culprit") {
  Recorder sent;
  FailureDetector detector(0, 4, sent, Clock::now());
  detector.on_failure_notice(2, 3);
  CHECK(sent.acks == std::vector<int>{2});
  CHECK(failure_of(detector).find("rank 3 failed or stopped answering (reported by another rank)") != std::string::npos);
  Recorder mine;
  FailureDetector accused(1, 3, mine, Clock::now());
  accused.on_failure_notice(0, 1);
  CHECK(failure_of(accused).find("rank 1 (this rank) was reported failed") != std::string::npos);
  Recorder nobody;
  FailureDetector told(1, 3, nobody, Clock::now());
  told.on_failure_notice(0, -1);
  CHECK(failure_of(told) == "another rank reported a failure of the job");
}

TEST_CASE("a mismatch is reported to every peer with its message, and keeps its code there") {
  Recorder sent;
  FailureDetector finder(1, 3, sent, Clock::now());
  const std::string found = "rank 0 called barrier while rank 1 called run of handle 0 (round 0)";
  finder.mark_failed(-1, found, Errc::mismatch);
  CHECK(sent.failures.empty());
  CHECK(sent.reports == std::vector<std::pair<int, std::string>>{{0, found}, {2, found}});
  try {
    finder.check_failed();
  } catch (const Error& e) {
    CHECK(e.code() == Errc::mismatch);
  }
  Recorder told;
  FailureDetector peer(0, 3, told, Clock::now());
  const FailureReport report{Errc::mismatch, found};
  peer.on_failure_notice(1, -1, &report);
  CHECK(told.acks == std::vector<int>{1});
  try {
    peer.check_failed();
    FAIL("no failure recorded");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::mismatch);
    CHECK(std::string(e.what()).find("(rank 1 reported: " + found + ")") != std::string::npos);
  }
}

TEST_CASE("a failed rank knows when every peer but the culprit heard of the failure") {
  Recorder sent;
  sent.gone = {4};  // a send to rank 4 fails: nobody waits for it
  FailureDetector detector(0, 5, sent, Clock::now());
  detector.mark_failed(3, "rank 3 broke");
  CHECK_FALSE(detector.everyone_knows());
  detector.on_failure_ack(1);
  CHECK_FALSE(detector.everyone_knows());
  detector.on_failure_notice(2, 3);  // rank 2 told us itself
  CHECK(detector.everyone_knows());
}
