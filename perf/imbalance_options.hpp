// The options of the eager-SGD experiment, shared by pcoll_imbalance (which runs it) and
// pcoll_sim (which predicts it): one parser, so that an option means the same in both and a
// predicted row compares with a measured one field by field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <pcoll/pcoll.h>

#include "imbalance_model.hpp"
#include "perf_job.hpp"

namespace pcoll::perf {

struct ImbalanceOptions {
  ImbalanceModel model;
  std::vector<ModeSpec> modes{{Mode::sync}, {Mode::solo}, {Mode::majority}};
  uint64_t steps = 100;
  uint64_t count = 262144;
  bool spin = false;
  pcoll_allreduce_opts_t handle_opts{};  // the caller initialises it (pcoll_allreduce_opts_init)
  bool json = false;
  std::string trace_dir;
};

// The usage lines of these options, for a tool's --help.
extern const char kImbalanceOptionsUsage[];

// When argv[i] is one of these options, parses it (and its value, advancing i) into `o`
// and returns true; false leaves it to the tool. A bad value is a usage_error of `tool`.
bool parse_imbalance_option(const char* tool, const char* usage, int argc, char** argv, int& i, ImbalanceOptions& o);

// Checks across options, once all are read (a lognormal mean, the trace file readable).
void check_imbalance_options(const char* tool, const char* usage, const ImbalanceOptions& o);

// lower_bound_s of a schedule: the largest per-rank sum of its own compute (no method
// finishes sooner).
double schedule_lower_bound_s(const std::vector<std::vector<double>>& schedule, int ranks);

// Writes `schedule` in the trace:FILE format (step,rank,compute_ms); a failure is reported
// on stderr, the run goes on.
void write_schedule(const std::string& path, const std::vector<std::vector<double>>& schedule);

}  // namespace pcoll::perf
