// Unit tests of the rule that decides when a rank's engine joins a round
// (lib/collectives/include/collectives/join_rule.hpp), asked with each mode's own start
// policy from the mode table, as the engine and pcoll_sim ask it: docs/design.md, "A round".
#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <string>

#include <collectives/activation.hpp>
#include <collectives/join_rule.hpp>
#include <collectives/mode_table.hpp>

using namespace pcoll;

namespace {

constexpr int kRanks = 5;
constexpr uint64_t kSeed = 7;

std::unique_ptr<StartPolicy> policy_of(pcoll_mode_t mode, int rank, uint32_t sync_every = 0, uint32_t grace_us = 0) {
  pcoll_allreduce_opts_t opts{};
  opts.max_lag = 1;
  opts.sync_every = sync_every;
  opts.grace_us = grace_us;
  opts.seed = kSeed;
  const ModeRow* row = find_mode(mode);
  REQUIRE(row != nullptr);
  REQUIRE(row->check_options(opts, kRanks).empty());
  return row->make_policy(PolicyContext{rank, kRanks, 3, opts});
}

// What the engine of a rank decides for `round`, the rounds before it joined and completed.
JoinDecision decide(StartPolicy& policy, uint64_t round, bool posted, bool activated, bool flush = false,
                    bool in_agreement = false) {
  JoinView view;
  view.posted = posted ? round + 1 : round;
  view.flush_posted = posted && flush;
  view.activated = activated ? round + 1 : round;
  view.max_lag = 1;
  return decide_join(policy, view, round, [] { return PolicyClock::now(); }, [&] { return in_agreement; });
}

const char* name(JoinDecision d) {
  return d == JoinDecision::wait ? "wait" : d == JoinDecision::join ? "join" : "initiate";
}

}  // namespace

TEST_CASE("a rank joins by its mode's rule: its own post, the activation, or starting the round") {
  for (uint64_t round = 0; round < 40; ++round) {
    const int drawn = activation::majority_initiator(kSeed, 3, round, kRanks);
    for (int rank = 0; rank < kRanks; ++rank) {
      CAPTURE(round);
      CAPTURE(rank);
      auto sync = policy_of(PCOLL_MODE_SYNC, rank);
      CHECK(decide(*sync, round, true, false) == JoinDecision::join);
      CHECK(decide(*sync, round, false, false) == JoinDecision::wait);
      auto solo = policy_of(PCOLL_MODE_SOLO, rank);
      CHECK(decide(*solo, round, true, false) == JoinDecision::initiate);
      CHECK(decide(*solo, round, false, true) == JoinDecision::join);
      CHECK(decide(*solo, round, false, false) == JoinDecision::wait);
      auto majority = policy_of(PCOLL_MODE_MAJORITY, rank);
      // The drawn rank starts the round; a rank that posted joins without starting it (its
      // contribution is fresh either way); one that did not post waits for the activation.
      CHECK(name(decide(*majority, round, true, false)) == std::string(rank == drawn ? "initiate" : "join"));
      CHECK(decide(*majority, round, false, true) == JoinDecision::join);
      CHECK(decide(*majority, round, false, false) == JoinDecision::wait);
      CHECK(decide(*majority, round, true, true) == JoinDecision::join);
      auto quorum = policy_of(PCOLL_MODE_QUORUM, rank);
      CHECK(decide(*quorum, round, false, true) == JoinDecision::join);
      CHECK(decide(*quorum, round, true, false) == JoinDecision::wait);  // its arrival is not counted yet
      CHECK(decide(*quorum, round, false, false) == JoinDecision::wait);
    }
  }
}

TEST_CASE("quorum: the k-th arrival starts the round, the others that posted join as their count returns") {
  const uint32_t k = kRanks / 2 + 1;
  for (const uint32_t grace_us : {0u, 1000000u})
    for (uint64_t round = 0; round < 12; ++round)
      for (uint32_t arrival = 1; arrival <= kRanks; ++arrival) {
        CAPTURE(grace_us);
        CAPTURE(round);
        CAPTURE(arrival);
        auto policy = policy_of(PCOLL_MODE_QUORUM, 1, 0, grace_us);
        // Counted rounds before this one leave nothing behind.
        for (uint64_t earlier = 0; earlier < round; ++earlier) {
          const ArrivalCounter c = *policy->arrival_counter(earlier);
          policy->arrival_counted(earlier, c.before + kRanks - 1, true, PolicyClock::now());
        }
        const ArrivalCounter counter = *policy->arrival_counter(round);
        CHECK(policy->arrival_counted(round, counter.before + arrival - 1, true, PolicyClock::now()) == arrival);
        // The first arrival with a grace may yet start the round when the grace ends: it waits.
        const char* want = arrival == k ? "initiate" : arrival == 1 && grace_us > 0 ? "wait" : "join";
        CHECK(name(decide(*policy, round, true, false)) == std::string(want));
      }
}

TEST_CASE("a rank starts a round only where its mode lets it") {
  for (const pcoll_mode_t mode : {PCOLL_MODE_SYNC, PCOLL_MODE_SOLO, PCOLL_MODE_MAJORITY, PCOLL_MODE_QUORUM})
    for (int rank = 0; rank < kRanks; ++rank) {
      auto policy = policy_of(mode, rank);
      for (uint64_t round = 0; round < 40; ++round)
        if (decide(*policy, round, true, false) == JoinDecision::initiate) {
          CAPTURE(mode);
          CAPTURE(rank);
          CHECK(policy->may_initiate(round, rank));
        }
    }
}

TEST_CASE("a flush, a synchronous round and a round past the lag wait for the rank's own post") {
  for (const pcoll_mode_t mode : {PCOLL_MODE_SOLO, PCOLL_MODE_MAJORITY, PCOLL_MODE_QUORUM}) {
    CAPTURE(mode);
    for (int rank = 0; rank < kRanks; ++rank) {
      auto policy = policy_of(mode, rank);
      // A flush is joined on the post, never started.
      CHECK(decide(*policy, 4, true, false, true) == JoinDecision::join);
      auto every3 = policy_of(mode, rank, 3);
      CHECK(decide(*every3, 2, false, true) == JoinDecision::wait);  // round 2 of sync_every 3
      CHECK(decide(*every3, 2, true, false) == JoinDecision::join);
      // Inside a collective agreement a rank joins no round its application has not posted.
      CHECK(decide(*policy, 4, false, true, false, true) == JoinDecision::wait);
      // Activated, but the application has not yet called run(t - max_lag).
      JoinView view;
      view.posted = 2;
      view.activated = 5;
      view.max_lag = 1;
      CHECK(decide_join(*policy, view, 4, [] { return PolicyClock::now(); }, [] { return false; }) ==
            JoinDecision::wait);
      view.posted = 4;
      CHECK(decide_join(*policy, view, 4, [] { return PolicyClock::now(); }, [] { return false; }) ==
            JoinDecision::join);
    }
  }
}
