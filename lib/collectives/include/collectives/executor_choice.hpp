// Which round executor a handle runs, chosen in one place from the handle's sizes, its
// settings and what the transport offers: the engine (Allreduce::prepare) and the
// simulator (perf/sim) ask the same function, so a simulated rank runs the plan a real one
// would.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <collectives/plan_table.hpp>

#include <collectives/round_executor.hpp>

namespace pcoll {

struct ExecutorInputs {
  int ranks = 1;
  int rank = 0;
  uint32_t handle = 0;
  size_t count = 0;           // the caller's elements (the flag words come on top)
  size_t acc_elem_bytes = 4;  // bytes of one accumulation element (dtype.hpp)
  size_t chunk_bytes = 0;     // PCOLL_CHUNK_BYTES
  size_t pool_bytes = 0;      // PCOLL_POOL_BYTES
  std::vector<PlanRule> plan_rules;  // the handle's rules (plan_table.hpp)
  bool flat_plan = false;     // PCOLL_PLAN=flat
  bool peers_mapped = false;  // every peer's memory maps here (Transport::maps_memory_of)
  std::vector<int> node_of;   // the node of each rank (Comm::node_of); empty: not known
  uint32_t max_chunks = 1;    // what a notification numbers (NoticeCodec)
  uint32_t max_tags = 1;
  std::string codec;          // the notification layout in words, for the refusal
  size_t inject_bytes = 0;    // the provider's inject size
};

struct ChosenExecutor {
  std::unique_ptr<RoundExecutor> executor;
  bool direct = false;       // the direct plan (DirectExecutor) rather than a ReducePlan
  size_t landing_elems = 0;  // the landing pool the handle's memory must hold
};

// The first of plan_rules that holds the bytes a round moves (the vector and its flag words)
// and whose plan applies (the direct plan: every peer maps here, not flat_plan, and the
// notifications number its phases and slices; node_leader: node_of spans several nodes, one
// of them with more than one rank, and not flat_plan). Throws Error(unsupported) when the plan
// needs more exchange tags than a notification numbers.
ChosenExecutor choose_executor(const ExecutorInputs& in);

}  // namespace pcoll
