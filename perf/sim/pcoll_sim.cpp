// pcoll_sim: the eager-SGD experiment of pcoll_imbalance, predicted on SimGrid for any P.
//
//   pcoll_sim calibrate [--out FILE]            measure this machine (pcoll_pingpong, kernels)
//   pcoll_sim -n 1024 --platform fat-tree --ranks-per-node 4 --model paper --json
//
// Every rank runs pcoll's own round logic (sim_engine.hpp); the options are
// pcoll_imbalance's (imbalance_options.hpp) with the same meaning, and the rows have
// pcoll_imbalance's fields plus the simulated breakdown, so that a predicted row and a
// measured one compare field by field.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <simgrid/s4u.hpp>

#include <collectives/notification.hpp>

#include "imbalance_model.hpp"
#include "imbalance_options.hpp"
#include "perf_error.hpp"
#include "sim_calibration.hpp"
#include "sim_engine.hpp"
#include "sim_platform.hpp"

namespace {

namespace perf = pcoll::perf;
namespace sim = pcoll::sim;
const char kTool[] = "pcoll_sim";

const std::string kUsageText = std::string(
    "usage: pcoll_sim -n P [--platform calibrated|fat-tree|dragonfly|ideal|FILE.xml] [--ranks-per-node K] [options]\n"
    "       pcoll_sim calibrate [--out FILE] [--pingpong PATH] [--pcollrun PATH]\n"
    "  -n P              ranks (1 .. 16384 and what the notification layout numbers)\n"
    "  --platform X      calibrated (default: this machine, from 'pcoll_sim calibrate'), fat-tree,\n"
    "                    dragonfly, ideal (no communication cost), or a SimGrid platform file\n"
    "                    (ranks on its hosts in name order)\n"
    "  --ranks-per-node K  ranks per host (default: calibrated every rank on the one host, else 1)\n"
    "  --calibration F   the calibration file (default pcoll_sim.calibrated.xml)\n"
    "  --write-platform F  also write the platform's SimGrid XML to F\n"
    "  --write-schedule F  write the compute times the ranks were given (trace:FILE format) to F\n"
    "  --trace DIR       every rank writes a Chrome trace of its rounds per mode into DIR,\n"
    "                    as PCOLL_TRACE does (tools/pcoll_trace.py DIR reads them)\n") +
    perf::kImbalanceOptionsUsage +
    "  --cfg=NAME:VALUE  a SimGrid setting (e.g. --cfg=contexts/stack-size:128)\n"
    "  -h, --help        this help\n"
    "The options mean what they mean to pcoll_imbalance; --compute spin and mode mpi have no\n"
    "meaning in a simulation and are refused.\n";
const char* const kUsage = kUsageText.c_str();

[[noreturn]] void usage_error(const std::string& message) { perf::usage_error(kTool, message, kUsage); }

struct Options {
  int ranks = 0;
  sim::PlatformChoice platform;
  std::string calibration;
  std::string write_platform;
  std::string write_schedule;
  perf::ImbalanceOptions run;
};

Options parse_options(int argc, char** argv) {
  Options o;
  pcoll_allreduce_opts_init(&o.run.handle_opts);
  std::string platform = "calibrated";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "-n") {
      o.ranks = static_cast<int>(perf::parse_uint(kTool, kUsage, value(), "-n", 1, 1u << 20));
    } else if (arg == "--platform") {
      platform = value();
    } else if (arg == "--ranks-per-node") {
      o.platform.ranks_per_node = static_cast<int>(perf::parse_uint(kTool, kUsage, value(), "--ranks-per-node", 1, 256));
    } else if (arg == "--calibration") {
      o.calibration = value();
    } else if (arg == "--write-platform") {
      o.write_platform = value();
    } else if (arg == "--write-schedule") {
      o.write_schedule = value();
    } else if (!perf::parse_imbalance_option(kTool, kUsage, argc, argv, i, o.run)) {
      usage_error("unknown option '" + arg + "'");
    }
  }
  if (o.ranks == 0) usage_error("-n P is required: the ranks to simulate");
  if (platform == "calibrated") o.platform.kind = sim::PlatformKind::calibrated;
  else if (platform == "fat-tree") o.platform.kind = sim::PlatformKind::fat_tree;
  else if (platform == "dragonfly") o.platform.kind = sim::PlatformKind::dragonfly;
  else if (platform == "ideal") o.platform.kind = sim::PlatformKind::ideal;
  else if (platform.size() > 4 && platform.ends_with(".xml")) {
    o.platform.kind = sim::PlatformKind::file;
    o.platform.file = platform;
  } else usage_error("--platform '" + platform + "' is not calibrated, fat-tree, dragonfly or a FILE.xml");
  if (o.platform.kind == sim::PlatformKind::calibrated) o.platform.file = o.calibration;
  if (o.run.spin) usage_error("--compute spin has no meaning in a simulation: compute is simulated time");
  for (const perf::ModeSpec& m : o.run.modes)
    if (m.mode == perf::Mode::mpi) usage_error("--modes mpi has no meaning in a simulation (it simulates pcoll's modes)");
  perf::check_imbalance_options(kTool, kUsage, o.run);
  // Refused here, before any actor runs: an actor that throws ends the whole simulation.
  for (const perf::ModeSpec& m : o.run.modes) {
    try {
      sim::mode_options(m, o.run.handle_opts, o.ranks);
    } catch (const perf::Error& e) {
      usage_error(e.what());
    }
  }
  const pcoll::NoticeCodec codec(64);
  if (o.ranks > 16384 || static_cast<uint32_t>(o.ranks) > codec.max_ranks())
    usage_error("-n " + std::to_string(o.ranks) + " is above what pcoll_sim runs (16384)");
  return o;
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

// SimGrid's own settings, before the user's --cfg: small actor stacks without guard pages
// (32768 actors need more memory maps than Linux allows by default otherwise), the plain
// latency + size / bandwidth network model with no cross-traffic of acknowledgements (a
// write over RDMA, not TCP), and quiet configuration logs.
std::vector<std::string> simgrid_arguments(int argc, char** argv) {
  std::vector<std::string> args{argv[0], "--cfg=contexts/stack-size:256", "--cfg=contexts/guard-size:0",
                                "--cfg=network/model:CM02", "--cfg=network/crosstraffic:0",
                                "--log=root.thres:warning"};
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).starts_with("--cfg=") || std::string(argv[i]).starts_with("--log=")) args.push_back(argv[i]);
  return args;
}

std::vector<char*> without_simgrid_arguments(int argc, char** argv) {
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i)
    if (i == 0 || !(std::string(argv[i]).starts_with("--cfg=") || std::string(argv[i]).starts_with("--log=")))
      rest.push_back(argv[i]);
  return rest;
}

int simulate(int argc, char** argv) {
  std::vector<char*> ours = without_simgrid_arguments(argc, argv);
  const Options o = parse_options(static_cast<int>(ours.size()), ours.data());
  sim::JobSpec spec;
  spec.ranks = o.ranks;
  spec.options = o.run;
  spec.trace_dir = o.run.trace_dir;
  try {
    spec.schedule = perf::make_schedule(o.run.model, o.run.steps, o.ranks);
    spec.platform = sim::make_platform(o.platform, o.ranks);
  } catch (const perf::Error& e) {
    std::fprintf(stderr, "%s: %s\n", kTool, e.what());
    return perf::kUsageExit;
  }
  if (!o.write_schedule.empty()) perf::write_schedule(o.write_schedule, spec.schedule);
  std::string file = spec.platform.file;
  if (!spec.platform.xml.empty()) {
    file = o.write_platform.empty() ? "/tmp/pcoll_sim." + std::to_string(getpid()) + ".xml" : o.write_platform;
    std::ofstream(file) << spec.platform.xml;
  }
  std::vector<std::string> sg_args = simgrid_arguments(argc, argv);
  std::vector<char*> sg_argv;
  for (std::string& a : sg_args) sg_argv.push_back(a.data());
  int sg_argc = static_cast<int>(sg_argv.size());
  const auto began = std::chrono::steady_clock::now();
  std::vector<sim::ModeOutcome> outcomes;
  {
    simgrid::s4u::Engine engine(&sg_argc, sg_argv.data());
    engine.load_platform(file);
    if (!spec.platform.xml.empty() && o.write_platform.empty()) std::remove(file.c_str());
    try {
      sim::read_file_properties(spec.platform);
    } catch (const perf::Error& e) {
      std::fprintf(stderr, "%s: %s\n", kTool, e.what());
      return perf::kUsageExit;
    }
    sim::SimJob job(spec);
    try {
      job.start();
    } catch (const perf::Error& e) {
      std::fprintf(stderr, "%s: %s\n", kTool, e.what());
      return perf::kUsageExit;
    }
    engine.run();
    outcomes = job.outcomes();
  }
  const double sim_runtime_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  if (outcomes.size() != o.run.modes.size()) {
    std::fprintf(stderr, "%s: the simulation ended after %zu of %zu modes (a round that never completed)\n", kTool,
                 outcomes.size(), o.run.modes.size());
    return 1;
  }
  const double lower_bound_s = perf::schedule_lower_bound_s(spec.schedule, o.ranks);
  const double rss = peak_rss_mib();
  if (!o.run.json) {
    std::printf("# pcoll_sim: P=%d, platform %s, %d ranks per node, %llu steps, model %s\n", o.ranks,
                spec.platform.name.c_str(), spec.platform.ranks_per_node,
                static_cast<unsigned long long>(o.run.steps), o.run.model.description().c_str());
    std::printf("# %s\n", spec.platform.description.c_str());
    std::printf("# gradient %llu float32 (avg), max_lag %u, sync_every %u, late %s; lower bound %.3f s; "
                "simulated in %.2f s, %.0f MiB\n",
                static_cast<unsigned long long>(o.run.count), o.run.handle_opts.max_lag, o.run.handle_opts.sync_every,
                o.run.handle_opts.late == PCOLL_LATE_CARRY ? "carry" : "drop", lower_bound_s, sim_runtime_s, rss);
    std::printf("%-12s %9s %9s %9s %11s %8s %9s %10s %13s %12s %11s %10s %s\n", "mode", "wall(s)", "steps/s", "speedup",
                "efficiency", "fresh", "max_late", "call_p50", "activation", "exchange", "blocked", "reduce", "plan");
    std::printf("%-12s %9s %9s %9s %11s %8s %9s %10s %13s %12s %11s %10s\n", "", "", "", "", "", "", "", "(us)",
                "(us/round)", "(us/round)", "(us/round)", "(us/round)");
  }
  std::optional<double> sync_wall;
  for (const sim::ModeOutcome& r : outcomes) {
    if (r.mode.mode == perf::Mode::sync) sync_wall = r.wall_s;
    const double efficiency = lower_bound_s / r.wall_s;
    char speedup[32] = "-";
    char speedup_json[32] = "null";
    if (sync_wall) {
      std::snprintf(speedup, sizeof speedup, "%.3f", *sync_wall / r.wall_s);
      std::snprintf(speedup_json, sizeof speedup_json, "%.4f", *sync_wall / r.wall_s);
    }
    if (o.run.json) {
      std::printf("{\"tool\":\"pcoll_sim\",\"mode\":\"%s\",\"P\":%d,\"steps\":%llu,\"model\":\"%s\","
                  "\"compute_ms\":%g,\"delay_ms\":%g,\"count\":%llu,\"compute\":\"simulated\",\"provider\":\"%s\","
                  "\"wall_s\":%.6f,\"steps_per_s\":%.3f,\"speedup_vs_sync\":%s,\"lower_bound_s\":%.4f,"
                  "\"efficiency\":%.4f,\"fresh_fraction\":%.4f,\"max_late_run\":%llu,\"cpu_s\":%.4f,"
                  "\"platform\":\"%s\",\"ranks_per_node\":%d,\"plan\":\"%s\",\"call_us_p50\":%.3f,"
                  "\"activation_us\":%.3f,\"exchange_us\":%.3f,\"blocked_us\":%.3f,\"reduce_us\":%.3f,"
                  "\"messages_per_round\":%.2f,\"bytes_per_round\":%.0f,\"sim_runtime_s\":%.3f,\"sim_rss_mib\":%.1f}\n",
                  r.mode.name().c_str(), o.ranks, static_cast<unsigned long long>(o.run.steps),
                  o.run.model.name().c_str(), o.run.model.compute_ms, o.run.model.delay_ms,
                  static_cast<unsigned long long>(o.run.count), spec.platform.name.c_str(), r.wall_s,
                  static_cast<double>(o.run.steps) / r.wall_s, speedup_json, lower_bound_s, efficiency,
                  r.fresh_fraction, static_cast<unsigned long long>(r.max_late_run), r.engine_cpu_s,
                  spec.platform.name.c_str(), spec.platform.ranks_per_node, r.plan.c_str(), r.call_us_p50,
                  r.activation_us, r.exchange_us, r.blocked_us, r.reduce_us, r.messages_per_round, r.bytes_per_round,
                  sim_runtime_s, rss);
    } else {
      std::printf("%-12s %9.3f %9.2f %9s %11.3f %8.3f %9llu %10.1f %13.1f %12.1f %11.1f %10.1f %s\n",
                  r.mode.name().c_str(), r.wall_s, static_cast<double>(o.run.steps) / r.wall_s, speedup, efficiency,
                  r.fresh_fraction, static_cast<unsigned long long>(r.max_late_run), r.call_us_p50, r.activation_us,
                  r.exchange_us, r.blocked_us, r.reduce_us, r.plan.c_str());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc > 1 && std::string(argv[1]) == "calibrate") return sim::calibrate(argc - 1, argv + 1);
    return simulate(argc, argv);
  } catch (const perf::Error& e) {
    std::fprintf(stderr, "%s: %s\n", kTool, e.what());
    return e.status() == PCOLL_ERR_INVALID_ARGUMENT ? perf::kUsageExit : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", kTool, e.what());
    return 1;
  }
}
