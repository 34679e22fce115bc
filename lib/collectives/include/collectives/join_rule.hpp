// When a rank's engine joins a round: the rule of docs/design.md "Semantics" (bounded lag,
// synchronous rounds, activation, the start policy), apart from the engine so that the
// engine (allreduce.cpp) and the simulator (perf/sim) decide with the same code. Like the
// policies it asks, it owns no thread, lock or clock. Inline: the engine asks it several
// times a round, and reads the clock and the agreement state only when the rule needs them.
#pragma once

#include <cstdint>

#include <collectives/start_policy.hpp>

namespace pcoll {

// What one rank's engine knows when it looks at the next round to join.
struct JoinView {
  uint64_t posted = 0;        // rounds the application posted (run/start and flush calls)
  bool flush_posted = false;  // the round posted last is a flush
  uint64_t activated = 0;     // rounds below it were activated (by this rank or a root)
  uint32_t max_lag = 1;
};

enum class JoinDecision {
  wait,      // not yet
  join,      // join now
  initiate,  // join now, and this rank starts the round: it sends the activation
};

// Round t may be joined only once the application has posted round t - max_lag.
inline bool lag_allows(uint64_t round, uint64_t posted, uint32_t max_lag) {
  return round < max_lag || posted >= round - max_lag + 1;
}

// A new data notice of `round` arrived and the executor says who started that round
// (RoundExecutor::started_by: -1 for nobody): whether it activates the round, rounds below
// `activated` being activated already. The caller then records round + 1, as for an
// activation message, and passes nothing on.
inline bool notice_activates(int starter, uint64_t round, uint64_t activated) {
  return starter >= 0 && round >= activated;
}

// Whether the engine joins `round` (the round after the last one it joined) now. A
// synchronous round and a flush wait for this rank's own post; an activated round waits
// for bounded lag only; one nobody activated yet is joined when this rank posted it and
// its policy starts it (StartPolicy::starts, asked with now()), or joins posted rounds
// without starting them (StartPolicy::joins_when_posted). `in_agreement()`: the
// application is inside a collective agreement, so it posts no round before it ends.
template <typename Now, typename InAgreement>
JoinDecision decide_join(StartPolicy& policy, const JoinView& view, uint64_t round, Now&& now,
                         InAgreement&& in_agreement) {
  const bool posted = view.posted > round;
  const bool flush = view.flush_posted && view.posted == round + 1;
  if (flush || policy.synchronous(round)) return posted ? JoinDecision::join : JoinDecision::wait;
  // A peer's round this application has not posted waits (docs/design.md, "Mismatched calls").
  if (!posted && in_agreement()) return JoinDecision::wait;
  if (round < view.activated) return lag_allows(round, view.posted, view.max_lag) ? JoinDecision::join : JoinDecision::wait;
  if (!posted) return JoinDecision::wait;
  if (policy.starts(round, policy.starts_by_time(round) ? now() : PolicyClock::time_point{}))
    return JoinDecision::initiate;
  return policy.joins_when_posted(round) ? JoinDecision::join : JoinDecision::wait;
}

}  // namespace pcoll
