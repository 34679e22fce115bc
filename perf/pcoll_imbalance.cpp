// pcoll_imbalance: the eager-SGD experiment as a tool. Every rank loops `steps` times:
// compute (sleep, or spin), then allreduce a float32 gradient. The compute times follow an
// imbalance model shared by all ranks (imbalance_model.hpp); the modes listed in --modes
// run one after another on the same schedule:
//
//   pcollrun -n 4 pcoll_imbalance --model paper --compute-ms 20 --delay-ms 16 --steps 150
//   mpirun.openmpi -np 4 pcoll_imbalance --modes sync,solo,majority,mpi
//
// Per mode: wall time (slowest rank, flush included), steps/s, speedup over sync,
// lower_bound_s (the largest per-rank sum of its own compute: no method finishes sooner),
// efficiency = lower_bound_s / wall_s, the fraction of fresh contributions, the longest
// run of consecutive late rounds of any rank, and the job's CPU time (getrusage user+sys,
// all threads, summed over ranks).
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "imbalance_model.hpp"
#include <pcoll/pcoll.h>
#include "perf_error.hpp"
#include "perf_job.hpp"

#if PCOLL_PERF_MPI
#include <mpi.h>
#endif

namespace {

namespace perf = pcoll::perf;
using Kind = perf::ImbalanceModel::Kind;
const char kTool[] = "pcoll_imbalance";

const char kUsage[] =
    "usage: pcollrun -n N pcoll_imbalance [options]\n"
    "       mpirun.openmpi -np N pcoll_imbalance [--modes ...,mpi] [options]\n"
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
    "  --json            one JSON object per mode instead of the table\n"
    "  --trace DIR       every rank writes a round trace per mode into DIR (PCOLL_TRACE);\n"
    "                    tools/pcoll_trace.py DIR prints the straggler report\n"
    "  -h, --help        this help\n"
    "trace:FILE is a CSV with the header step,rank,compute_ms and one row per (step, rank);\n"
    "steps wrap around, and the job may not have more ranks than the file.\n";

[[noreturn]] void usage_error(const std::string& message) { perf::usage_error(kTool, message, kUsage); }

using perf::Mode;

struct Options {
  perf::ImbalanceModel model;
  std::vector<perf::ModeSpec> modes{{Mode::sync}, {Mode::solo}, {Mode::majority}};
  uint64_t steps = 100;
  uint64_t count = 262144;
  bool spin = false;
  pcoll_allreduce_opts_t handle_opts{};
  bool json = false;
  std::string trace_dir;
};

Options parse_options(int argc, char** argv) {
  Options o;
  pcoll_allreduce_opts_init(&o.handle_opts);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(arg + " needs a value");
      return argv[++i];
    };
    const auto number = [&](double min, double max) { return perf::parse_double(kTool, kUsage, value(), arg.c_str(), min, max); };
    const auto integer = [&](uint64_t min, uint64_t max) { return perf::parse_uint(kTool, kUsage, value(), arg.c_str(), min, max); };
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "--model") {
      const std::string v = value();
      if (v == "paper") o.model.kind = Kind::paper;
      else if (v == "lognormal") o.model.kind = Kind::lognormal;
      else if (v == "slowrank") o.model.kind = Kind::slowrank;
      else if (v == "none") o.model.kind = Kind::none;
      else if (v.starts_with("trace:") && v.size() > 6) {
        o.model.kind = Kind::trace;
        o.model.trace_path = v.substr(6);
      } else usage_error("--model '" + v + "' is not one of paper, lognormal, slowrank, trace:FILE, none");
    } else if (arg == "--modes") {
      const std::string v = value();
      o.modes.clear();
      std::istringstream list(v);
      for (std::string name; std::getline(list, name, ',');) {
        perf::ModeSpec m;
        try {
          m = perf::parse_mode_spec(name);
        } catch (const perf::Error& e) {
          usage_error(std::string("--modes: ") + e.what());
        }
        if (std::find(o.modes.begin(), o.modes.end(), m) != o.modes.end())
          usage_error("--modes: '" + name + "' is listed twice");
        o.modes.push_back(m);
      }
      if (o.modes.empty()) usage_error("--modes needs at least one of sync, solo, majority, quorum, mpi");
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
      else usage_error("--compute '" + v + "' is not sleep or spin");
    } else if (arg == "--max-lag") {
      o.handle_opts.max_lag = static_cast<uint32_t>(integer(1, 1u << 20));
    } else if (arg == "--sync-every") {
      o.handle_opts.sync_every = static_cast<uint32_t>(integer(0, UINT32_MAX));
    } else if (arg == "--late") {
      const std::string v = value();
      if (v == "carry") o.handle_opts.late = PCOLL_LATE_CARRY;
      else if (v == "drop") o.handle_opts.late = PCOLL_LATE_DROP;
      else usage_error("--late '" + v + "' is not carry or drop");
    } else if (arg == "--json") {
      o.json = true;
    } else if (arg == "--trace") {
      o.trace_dir = value();
      if (o.trace_dir.empty()) usage_error("--trace needs a directory");
    } else {
      usage_error("unknown option '" + arg + "'");
    }
  }
  if (o.model.kind == Kind::lognormal && o.model.compute_ms <= 0)
    usage_error("--model lognormal needs --compute-ms > 0 (the mean)");
  if (o.model.kind == Kind::trace) {
    try {
      perf::read_trace(o.model.trace_path);  // fail before any rank starts the transport
    } catch (const perf::Error& e) {
      usage_error(e.what());
    }
  }
  return o;
}

void write_schedule(const std::string& path, const std::vector<std::vector<double>>& schedule) {
  FILE* out = std::fopen(path.c_str(), "w");
  if (out == nullptr) {
    std::fprintf(stderr, "pcoll_imbalance: cannot write %s\n", path.c_str());
    return;
  }
  std::fputs("step,rank,compute_ms\n", out);
  for (size_t step = 0; step < schedule.size(); ++step)
    for (size_t rank = 0; rank < schedule[step].size(); ++rank)
      std::fprintf(out, "%zu,%zu,%.6f\n", step, rank, schedule[step][rank]);
  std::fclose(out);
}

// user + system CPU seconds of this process, all threads (the progress engine included).
double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& tv) { return static_cast<double>(tv.tv_sec) + tv.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

void compute(double ms, bool spin) {
  if (ms <= 0) return;
  const auto until = perf::Clock::now() + std::chrono::duration_cast<perf::Clock::duration>(
                                             std::chrono::duration<double, std::milli>(ms));
  if (!spin) {
    std::this_thread::sleep_until(until);
    return;
  }
  volatile double sink = 1.0;
  while (perf::Clock::now() < until)
    for (int i = 0; i < 1000; ++i) sink = sink * 1.0000001 + 1e-9;
}

struct ModeResult {
  perf::ModeSpec mode;
  double wall_s = 0;
  double cpu_s = 0;          // summed over ranks
  double fresh_fraction = 1; // fresh contributions / (steps * P)
  uint64_t max_late_run = 0; // longest streak of consecutive late rounds of one rank
};

ModeResult run_mode(const perf::ModeSpec& mode, const Options& o, perf::Job& job,
                    const std::vector<std::vector<double>>& schedule) {
  const size_t P = static_cast<size_t>(job.size());
  const size_t me = static_cast<size_t>(job.rank());
  std::vector<float> grad(o.count), avg(o.count);
  for (size_t i = 0; i < grad.size(); ++i) grad[i] = static_cast<float>(me + 1) * 1e-3f + static_cast<float>(i % 7);

  pcoll_allreduce_t* handle = nullptr;
  if (mode.mode != Mode::mpi) {
    pcoll_allreduce_opts_t opts = o.handle_opts;
    mode.apply(opts);
    perf::check(pcoll_allreduce_create(job.comm(), o.count, PCOLL_FLOAT32, PCOLL_OP_AVG, mode.pcoll_mode(), &opts, &handle),
                "pcoll_allreduce_create");
  }
  uint64_t fresh_total = 0;
  std::vector<uint64_t> late_run(P, 0);
  uint64_t max_late_run = 0;

  job.barrier();
  const double cpu_start = cpu_seconds();
  const auto start = perf::Clock::now();
  for (uint64_t step = 0; step < o.steps; ++step) {
    compute(schedule[step][me], o.spin);
    if (handle != nullptr) {
      pcoll_round_info_t info;
      perf::check(pcoll_allreduce_run(handle, grad.data(), avg.data(), &info), "pcoll_allreduce_run");
      fresh_total += static_cast<uint64_t>(info.fresh);
      for (size_t r = 0; r < P; ++r) {
        const bool fresh = (info.fresh_mask[r / 64] >> (r % 64)) & 1u;
        late_run[r] = fresh ? 0 : late_run[r] + 1;
        max_late_run = std::max(max_late_run, late_run[r]);
      }
    } else {
#if PCOLL_PERF_MPI
      MPI_Allreduce(grad.data(), avg.data(), static_cast<int>(o.count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      const float scale = 1.0f / static_cast<float>(P);
      for (float& v : avg) v *= scale;
      fresh_total += P;
#endif
    }
  }
  if (handle != nullptr) perf::check(pcoll_allreduce_flush(handle, avg.data(), nullptr), "pcoll_allreduce_flush");
  const double wall = std::chrono::duration<double>(perf::Clock::now() - start).count();
  const double cpu = cpu_seconds() - cpu_start;
  if (handle != nullptr) perf::check(pcoll_allreduce_destroy(handle), "pcoll_allreduce_destroy");

  std::vector<double> slowest{wall};
  job.max_over_ranks(slowest);
  std::vector<double> total_cpu{cpu};
  job.sum_over_ranks(total_cpu);
  ModeResult r{mode};
  r.wall_s = slowest[0];
  r.cpu_s = total_cpu[0];
  r.fresh_fraction = static_cast<double>(fresh_total) / static_cast<double>(o.steps * P);
  r.max_late_run = max_late_run;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  // The library reads PCOLL_TRACE when each handle is made (docs/observability.md).
  if (!options.trace_dir.empty()) setenv("PCOLL_TRACE", options.trace_dir.c_str(), 1);
  try {
    perf::Job job(&argc, &argv);
    const bool reporter = job.rank() == 0;
    const bool wants_mpi = std::find(options.modes.begin(), options.modes.end(), perf::ModeSpec{Mode::mpi}) != options.modes.end();
    if (wants_mpi && !job.has_mpi()) {
      if (reporter)
        std::fprintf(stderr, "pcoll_imbalance: --modes mpi needs an MPI build run under mpirun.openmpi; this job was started by %s\n",
                     job.launcher().c_str());
      return perf::kUsageExit;
    }
    std::vector<std::vector<double>> schedule;
    try {
      schedule = perf::make_schedule(options.model, options.steps, job.size());
    } catch (const perf::Error& e) {
      if (reporter) std::fprintf(stderr, "pcoll_imbalance: %s\n", e.what());
      return perf::kUsageExit;
    }
    // Next to the traces, the compute times each rank was given (step = round of each
    // mode's handle), in the trace:FILE format: what the report's lateness can be held to.
    if (reporter && !options.trace_dir.empty()) write_schedule(options.trace_dir + "/pcoll_imbalance.schedule.csv", schedule);
    double lower_bound_s = 0;
    for (size_t r = 0; r < static_cast<size_t>(job.size()); ++r) {
      double sum_ms = 0;
      for (const auto& step : schedule) sum_ms += step[r];
      lower_bound_s = std::max(lower_bound_s, sum_ms / 1e3);
    }
    const int P = job.size();
    if (reporter && !options.json) {
      std::printf("# pcoll_imbalance: P=%d, provider %s, bootstrap %s, %llu steps, model %s, compute %s\n", P,
                  job.provider().c_str(), job.launcher().c_str(), static_cast<unsigned long long>(options.steps),
                  options.model.description().c_str(), options.spin ? "spin" : "sleep");
      std::printf("# gradient %llu float32 (avg), max_lag %u, sync_every %u, late %s; lower bound %.3f s\n",
                  static_cast<unsigned long long>(options.count), options.handle_opts.max_lag,
                  options.handle_opts.sync_every, options.handle_opts.late == PCOLL_LATE_CARRY ? "carry" : "drop",
                  lower_bound_s);
      std::printf("%-12s %9s %9s %9s %14s %11s %8s %9s %9s\n", "mode", "wall(s)", "steps/s", "speedup", "lower_bound(s)",
                  "efficiency", "fresh", "max_late", "cpu(s)");
    }
    std::optional<double> sync_wall;
    for (const perf::ModeSpec& mode : options.modes) {
      const ModeResult r = run_mode(mode, options, job, schedule);
      if (mode.mode == Mode::sync) sync_wall = r.wall_s;
      if (!reporter) continue;
      const double efficiency = lower_bound_s / r.wall_s;
      char speedup[32] = "-";
      char speedup_json[32] = "null";
      if (sync_wall) {
        std::snprintf(speedup, sizeof speedup, "%.3f", *sync_wall / r.wall_s);
        std::snprintf(speedup_json, sizeof speedup_json, "%.4f", *sync_wall / r.wall_s);
      }
      if (options.json) {
        std::printf("{\"tool\":\"pcoll_imbalance\",\"mode\":\"%s\",\"P\":%d,\"steps\":%llu,\"model\":\"%s\","
                    "\"compute_ms\":%g,\"delay_ms\":%g,\"count\":%llu,\"compute\":\"%s\",\"provider\":\"%s\","
                    "\"wall_s\":%.4f,\"steps_per_s\":%.3f,\"speedup_vs_sync\":%s,\"lower_bound_s\":%.4f,"
                    "\"efficiency\":%.4f,\"fresh_fraction\":%.4f,\"max_late_run\":%llu,\"cpu_s\":%.3f}\n",
                    mode.name().c_str(), P, static_cast<unsigned long long>(options.steps), options.model.name().c_str(),
                    options.model.compute_ms, options.model.delay_ms, static_cast<unsigned long long>(options.count),
                    options.spin ? "spin" : "sleep", job.provider().c_str(), r.wall_s,
                    static_cast<double>(options.steps) / r.wall_s, speedup_json, lower_bound_s, efficiency,
                    r.fresh_fraction, static_cast<unsigned long long>(r.max_late_run), r.cpu_s);
      } else {
        std::printf("%-12s %9.3f %9.2f %9s %14.3f %11.3f %8.3f %9llu %9.3f\n", mode.name().c_str(), r.wall_s,
                    static_cast<double>(options.steps) / r.wall_s, speedup, lower_bound_s, efficiency,
                    r.fresh_fraction, static_cast<unsigned long long>(r.max_late_run), r.cpu_s);
      }
      std::fflush(stdout);
    }
  } catch (const perf::Error& e) {
    std::fprintf(stderr, "pcoll_imbalance: %s\n", e.what());
    return 1;
  }
  return 0;
}
