// The eager-SGD experiment's options (imbalance_options.hpp), and the mode names of the perf
// tools (perf_job.hpp: ModeSpec), on the public header alone.
#include "imbalance_options.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "perf_error.hpp"

namespace pcoll::perf {

using Kind = ImbalanceModel::Kind;

const char kImbalanceOptionsUsage[] =
    "  --model M         paper (default), lognormal, slowrank, trace:FILE, none\n"
    "  --modes LIST      comma-separated from sync, solo, majority, quorum[:K[:GRACE_US]], mpi\n"
    "                    (default sync,solo,majority; e.g. sync,solo,quorum:2,quorum:3:500)\n"
    "  --steps N         training steps per mode (default 100)\n"
    "  --count N         float32 gradient elements (default 262144 = 1 MiB)\n"
    "  --compute-ms C    compute time per step (default 20)\n"
    "  --delay-ms D      paper: extra time of the two ranks drawn each step (default 16)\n"
    "  --sigma S         lognormal: sigma of the log (default 0.5)\n"
    "  --slow-rank K     slowrank: the slow rank (default 0)\n"
    "  --slow-factor F   slowrank: its slowdown (default 2)\n"
    "  --trace-scale X   trace: multiplies the file's times (default 1)\n"
    "  --seed N          shared seed of the draws (default 42)\n"
    "  --compute K       sleep (default) or spin (burns a CPU like real compute)\n"
    "  --max-lag N       handle option (default 1)\n"
    "  --sync-every K    handle option: every K-th round synchronous (default 0: never)\n"
    "  --late carry|drop handle option (default carry)\n"
    "  --json            one JSON object per mode instead of the table\n";

bool parse_imbalance_option(const char* tool, const char* usage, int argc, char** argv, int& i, ImbalanceOptions& o) {
  const std::string arg = argv[i];
  const auto value = [&]() -> std::string {
    if (i + 1 >= argc) usage_error(tool, arg + " needs a value", usage);
    return argv[++i];
  };
  const auto number = [&](double min, double max) { return parse_double(tool, usage, value(), arg.c_str(), min, max); };
  const auto integer = [&](uint64_t min, uint64_t max) { return parse_uint(tool, usage, value(), arg.c_str(), min, max); };
  if (arg == "--model") {
    const std::string v = value();
    if (v == "paper") o.model.kind = Kind::paper;
    else if (v == "lognormal") o.model.kind = Kind::lognormal;
    else if (v == "slowrank") o.model.kind = Kind::slowrank;
    else if (v == "none") o.model.kind = Kind::none;
    else if (v.starts_with("trace:") && v.size() > 6) {
      o.model.kind = Kind::trace;
      o.model.trace_path = v.substr(6);
    } else usage_error(tool, "--model '" + v + "' is not one of paper, lognormal, slowrank, trace:FILE, none", usage);
  } else if (arg == "--modes") {
    const std::string v = value();
    o.modes.clear();
    std::istringstream list(v);
    for (std::string name; std::getline(list, name, ',');) {
      ModeSpec m;
      try {
        m = parse_mode_spec(name);
      } catch (const Error& e) {
        usage_error(tool, std::string("--modes: ") + e.what(), usage);
      }
      if (std::find(o.modes.begin(), o.modes.end(), m) != o.modes.end())
        usage_error(tool, "--modes: '" + name + "' is listed twice", usage);
      o.modes.push_back(m);
    }
    if (o.modes.empty()) usage_error(tool, "--modes needs at least one of sync, solo, majority, quorum, mpi", usage);
  } else if (arg == "--steps") {
    o.steps = integer(1, 10000000);
  } else if (arg == "--count") {
    o.count = integer(1, uint64_t{1} << 28);
  } else if (arg == "--compute-ms") {
    o.model.compute_ms = number(0.0, 3.6e6);
  } else if (arg == "--delay-ms") {
    o.model.delay_ms = number(0.0, 3.6e6);
  } else if (arg == "--sigma") {
    o.model.sigma = number(0.0, 10.0);
  } else if (arg == "--slow-rank") {
    o.model.slow_rank = static_cast<int>(integer(0, 65535));
  } else if (arg == "--slow-factor") {
    o.model.slow_factor = number(0.0, 1e6);
  } else if (arg == "--trace-scale") {
    o.model.trace_scale = number(0.0, 1e6);
  } else if (arg == "--seed") {
    o.model.seed = integer(0, UINT64_MAX);
    o.handle_opts.seed = o.model.seed;
  } else if (arg == "--compute") {
    const std::string v = value();
    if (v == "sleep") o.spin = false;
    else if (v == "spin") o.spin = true;
    else usage_error(tool, "--compute '" + v + "' is not sleep or spin", usage);
  } else if (arg == "--max-lag") {
    o.handle_opts.max_lag = static_cast<uint32_t>(integer(1, 1u << 20));
  } else if (arg == "--sync-every") {
    o.handle_opts.sync_every = static_cast<uint32_t>(integer(0, UINT32_MAX));
  } else if (arg == "--late") {
    const std::string v = value();
    if (v == "carry") o.handle_opts.late = PCOLL_LATE_CARRY;
    else if (v == "drop") o.handle_opts.late = PCOLL_LATE_DROP;
    else usage_error(tool, "--late '" + v + "' is not carry or drop", usage);
  } else if (arg == "--json") {
    o.json = true;
  } else if (arg == "--trace") {
    o.trace_dir = value();
    if (o.trace_dir.empty()) usage_error(tool, "--trace needs a directory", usage);
  } else {
    return false;
  }
  return true;
}

void check_imbalance_options(const char* tool, const char* usage, const ImbalanceOptions& o) {
  if (o.model.kind == Kind::lognormal && o.model.compute_ms <= 0)
    usage_error(tool, "--model lognormal needs --compute-ms > 0 (the mean)", usage);
  if (o.model.kind == Kind::trace) {
    try {
      read_trace(o.model.trace_path);  // fail before any rank starts the transport
    } catch (const Error& e) {
      usage_error(tool, e.what(), usage);
    }
  }
}

double schedule_lower_bound_s(const std::vector<std::vector<double>>& schedule, int ranks) {
  double lower_bound_s = 0;
  for (size_t r = 0; r < static_cast<size_t>(ranks); ++r) {
    double sum_ms = 0;
    for (const auto& step : schedule) sum_ms += step[r];
    lower_bound_s = std::max(lower_bound_s, sum_ms / 1e3);
  }
  return lower_bound_s;
}

void write_schedule(const std::string& path, const std::vector<std::vector<double>>& schedule) {
  FILE* out = std::fopen(path.c_str(), "w");
  if (out == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return;
  }
  std::fputs("step,rank,compute_ms\n", out);
  for (size_t step = 0; step < schedule.size(); ++step)
    for (size_t rank = 0; rank < schedule[step].size(); ++rank)
      std::fprintf(out, "%zu,%zu,%.6f\n", step, rank, schedule[step][rank]);
  std::fclose(out);
}

std::string ModeSpec::name() const {
  if (mode != Mode::quorum || (quorum == 0 && grace_us == 0)) return mode_name(mode);
  // Appended piece by piece (g++ 12 warns falsely on "literal" + std::to_string here).
  std::string text("quorum:");
  text.append(std::to_string(quorum));
  if (grace_us != 0) {
    text.push_back(':');
    text.append(std::to_string(grace_us));
  }
  return text;
}

pcoll_mode_t ModeSpec::pcoll_mode() const {
  switch (mode) {
    case Mode::sync: return PCOLL_MODE_SYNC;
    case Mode::solo: return PCOLL_MODE_SOLO;
    case Mode::majority: return PCOLL_MODE_MAJORITY;
    case Mode::quorum: return PCOLL_MODE_QUORUM;
    case Mode::mpi: break;
  }
  fail(PCOLL_ERR_INTERNAL, "MPI_Allreduce is not a pcoll mode");
}

void ModeSpec::apply(pcoll_allreduce_opts_t& opts) const {
  opts.quorum = mode == Mode::quorum ? quorum : 0;
  opts.grace_us = mode == Mode::quorum ? grace_us : 0;
}

ModeSpec parse_mode_spec(const std::string& text) {
  for (const Mode m : {Mode::sync, Mode::solo, Mode::majority, Mode::quorum, Mode::mpi})
    if (text == mode_name(m)) return ModeSpec{m};
  if (text.rfind("quorum:", 0) != 0)
    invalid_argument("'" + text + "' is not one of sync, solo, majority, quorum[:K[:GRACE_US]], mpi");
  ModeSpec spec{Mode::quorum};
  const std::string rest = text.substr(7);
  const size_t colon = rest.find(':');
  spec.quorum = static_cast<uint32_t>(parse_u64(rest.substr(0, colon), "quorum K in '" + text + "'", 1, 1u << 20));
  if (colon != std::string::npos)
    spec.grace_us = static_cast<uint32_t>(parse_u64(rest.substr(colon + 1), "quorum GRACE_US in '" + text + "'", 0, 60000000));
  return spec;
}

}  // namespace pcoll::perf
