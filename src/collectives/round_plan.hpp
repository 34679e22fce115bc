// A round's reduction plan as the engine executes it: for one rank, the ordered
// exchanges of a schedule (recursive doubling or Rabenseifner, with the fold-in steps for
// non-power-of-two P), each tagged with an id both partners agree on, and the layout of
// the landing slots, which is the same on every rank so a sender can address the
// receiver's slot without asking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "schedule.hpp"

namespace pcoll {

struct PlanStep {
  int peer = -1;
  uint32_t tag = 0;             // exchange id, equal on both partners; indexes slots
  bool send = false;
  size_t send_offset = 0;       // elements of my work buffer
  size_t send_count = 0;
  bool send_to_result = false;  // lands at send_offset of the peer's work buffer; else
                                // in the peer's landing slot at send_slot_offset
  size_t send_slot_offset = 0;  // elements from the start of the peer's slot area
  bool recv = false;
  size_t recv_offset = 0;       // elements of my work buffer
  size_t recv_count = 0;
  bool recv_reduce = false;     // reduce my slot into work[recv_offset..]; else the data
                                // landed in my work buffer directly (a copy)
  size_t recv_slot_offset = 0;  // elements from the start of my slot area
};

struct RoundPlan {
  ReduceAlgorithm algorithm = ReduceAlgorithm::recursive_doubling;
  std::vector<PlanStep> steps;
  size_t slot_elems = 0;            // slot area size, elements (per round parity)
  uint32_t tags = 0;
};

// Plan for `rank` of `size` over `elems` accumulation elements.
RoundPlan make_round_plan(ReduceAlgorithm algorithm, int size, int rank, size_t elems);

}  // namespace pcoll
