// The join rule (join_rule.hpp).
#include <collectives/join_rule.hpp>

namespace pcoll {

bool lag_allows(uint64_t round, uint64_t posted, uint32_t max_lag) {
  return round < max_lag || posted >= round - max_lag + 1;
}

JoinDecision decide_join(StartPolicy& policy, const JoinView& view, uint64_t round, PolicyClock::time_point now) {
  const bool posted = view.posted > round;
  const bool flush = view.flush_posted && view.posted == round + 1;
  if (flush || policy.synchronous(round)) return posted ? JoinDecision::join : JoinDecision::wait;
  // An application inside an agreement posts no round before it ends; a peer's round it
  // has not posted waits (docs/design.md, "Mismatched calls").
  if (!posted && view.in_agreement) return JoinDecision::wait;
  if (round < view.activated) return lag_allows(round, view.posted, view.max_lag) ? JoinDecision::join : JoinDecision::wait;
  if (!posted || !policy.starts(round, now)) return JoinDecision::wait;
  return JoinDecision::initiate;
}

}  // namespace pcoll
