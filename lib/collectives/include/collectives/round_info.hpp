// What a completed round was, as run/wait/test report it (pcoll_round_info_t): the same on
// every rank, read from the flags reduced with the data.
#pragma once

#include <cstdint>
#include <vector>

namespace pcoll {

struct RoundInfo {
  uint64_t round = 0;
  int initiator = -1;       // -1: a synchronous round nobody activated
  int fresh = 0;
  bool caller_late = false;
  std::vector<uint64_t> fresh_mask;  // ceil(P/64) words
};

}  // namespace pcoll
