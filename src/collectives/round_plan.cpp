// Turns a schedule's ReducePlan into the engine's RoundPlan: exchange tags are the
// schedule's step indices (equal on both partners) and slot ranges are per tag.
#include "round_plan.hpp"

#include "error.hpp"

namespace pcoll {

RoundPlan make_round_plan(ReduceAlgorithm algorithm, int size, int rank, size_t elems) {
  const ReducePlan plan = make_plan(algorithm, size, rank, elems);
  RoundPlan out;
  out.algorithm = algorithm;
  out.tags = static_cast<uint32_t>(plan.step_index_count);
  out.slot_elems = plan.slot_total_elems();
  for (const Step& step : plan.steps) {
    PlanStep s;
    s.peer = step.peer;
    s.tag = static_cast<uint32_t>(step.index);
    s.send = step.sends();
    s.send_offset = step.send_offset;
    s.send_count = step.send_count;
    s.send_to_result = step.peer_lands_in_result;
    s.recv = step.receives();
    s.recv_offset = step.recv_offset;
    s.recv_count = step.recv_count;
    s.recv_reduce = step.reduces();
    if (s.send && !s.send_to_result) {
      if (step.peer_slot == kNoSlot) fail(Errc::internal, "plan step sends to no slot");
      // The writer addresses the receiver's slot: its layout is the same on every rank.
      s.send_slot_offset = plan.slot_offset(step.peer_slot);
    }
    if (s.recv && s.recv_reduce) {
      if (step.slot == kNoSlot) fail(Errc::internal, "plan step reduces from no slot");
      s.recv_slot_offset = plan.slot_offset(step.slot);
    }
    out.steps.push_back(s);
  }
  return out;
}

}  // namespace pcoll
