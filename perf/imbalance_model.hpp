// Compute-time schedules of pcoll_imbalance: how long each rank "computes" before each
// step's allreduce. Deterministic from the options alone, so every rank (and every mode of
// one run) sees the same schedule without communicating.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pcoll::perf {

struct ImbalanceModel {
  enum class Kind { none, paper, lognormal, slowrank, trace } kind = Kind::paper;
  double compute_ms = 20.0;  // C
  double delay_ms = 16.0;    // D (paper)
  double sigma = 0.5;        // lognormal
  int slow_rank = 0;         // slowrank
  double slow_factor = 2.0;  // slowrank
  std::string trace_path;    // trace
  double trace_scale = 1.0;  // trace
  uint64_t seed = 42;

  std::string name() const;         // "paper", ..., "trace:FILE"
  std::string description() const; // parameters in words, for the table header
};

// compute_ms[step][rank]. Throws perf::Error(PCOLL_ERR_INVALID_ARGUMENT) with a message naming the
// problem (unreadable or malformed trace, rank out of range).
std::vector<std::vector<double>> make_schedule(const ImbalanceModel& model, uint64_t steps, int ranks);

// The trace file alone (step,rank,compute_ms with a header): trace[step][rank] in ms.
std::vector<std::vector<double>> read_trace(const std::string& path);

}  // namespace pcoll::perf
