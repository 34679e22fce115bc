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
#include "imbalance_options.hpp"
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

const std::string kUsageText = std::string(
    "usage: pcollrun -n N pcoll_imbalance [options]\n"
    "       mpirun.openmpi -np N pcoll_imbalance [--modes ...,mpi] [options]\n") +
    perf::kImbalanceOptionsUsage +
    "  --trace DIR       every rank writes a round trace per mode into DIR (PCOLL_TRACE);\n"
    "                    tools/pcoll_trace.py DIR prints the straggler report\n"
    "  -h, --help        this help\n"
    "trace:FILE is a CSV with the header step,rank,compute_ms and one row per (step, rank);\n"
    "steps wrap around, and the job may not have more ranks than the file.\n";
const char* const kUsage = kUsageText.c_str();

[[noreturn]] void usage_error(const std::string& message) { perf::usage_error(kTool, message, kUsage); }

using perf::Mode;
using Options = perf::ImbalanceOptions;

Options parse_options(int argc, char** argv) {
  Options o;
  pcoll_allreduce_opts_init(&o.handle_opts);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (!perf::parse_imbalance_option(kTool, kUsage, argc, argv, i, o)) usage_error("unknown option '" + arg + "'");
  }
  perf::check_imbalance_options(kTool, kUsage, o);
  return o;
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
    if (reporter && !options.trace_dir.empty()) perf::write_schedule(options.trace_dir + "/pcoll_imbalance.schedule.csv", schedule);
    const double lower_bound_s = perf::schedule_lower_bound_s(schedule, job.size());
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
