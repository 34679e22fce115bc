// The statistics observer (allreduce_stats.hpp).
#include <collectives/allreduce_stats.hpp>

#include <algorithm>

namespace pcoll {

StatsObserver::StatsObserver(int ranks) {
  const auto n = static_cast<size_t>(ranks);
  stats_.fresh_rounds.assign(n, 0);
  stats_.late_rounds.assign(n, 0);
  stats_.longest_late_run.assign(n, 0);
  stats_.fresh_histogram.assign(n + 1, 0);
  late_run_.assign(n, 0);
}

void StatsObserver::joined(uint64_t, bool, bool flush, bool carried) {
  if (flush && carried) ++stats_.flushes_carried;
}

void StatsObserver::completed(const RoundInfo& info, bool initiated, bool flush, bool while_computing) {
  ++stats_.rounds;
  if (initiated) ++stats_.rounds_initiated;
  if (while_computing) ++stats_.rounds_while_computing;
  if (flush) {
    ++stats_.flushes;
    return;
  }
  ++stats_.fresh_histogram[static_cast<size_t>(info.fresh)];
  for (size_t r = 0; r < late_run_.size(); ++r) {
    if ((info.fresh_mask[r / 64] >> (r % 64)) & 1u) {
      ++stats_.fresh_rounds[r];
      late_run_[r] = 0;
    } else {
      ++stats_.late_rounds[r];
      stats_.longest_late_run[r] = std::max(stats_.longest_late_run[r], ++late_run_[r]);
    }
  }
}

}  // namespace pcoll
