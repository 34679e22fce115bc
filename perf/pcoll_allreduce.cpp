// pcoll_allreduce: latency and bandwidth of pcoll's allreduce over a sweep of sizes, per
// mode (sync, solo, majority), optionally interleaved per size with MPI_Allreduce run in
// the same processes (under mpirun), in the style of nccl-tests and the OSU benchmarks:
//
//   pcollrun -n N pcoll_allreduce [options]
//   mpirun.openmpi -np N pcoll_allreduce --compare-mpi [options]
//
// Every timed round is measured on each rank, then the per-round maximum over ranks is
// taken (the round as the slowest rank saw it); avg/min/max/p50/p99 summarise those maxima.
// algbw = bytes / avg time; busbw = algbw * 2(P-1)/P, the bytes each rank's links carry in
// a bandwidth-optimal allreduce, comparable across P. Each row names the reduction plan the
// handle ran (pcoll_allreduce_stats: recursive_doubling, rabenseifner, direct); JSON rows
// also carry memcpy_GBps, one core's memcpy of that size out of cache in the same run,
// mem_bytes_per_round, what the busiest rank read plus wrote in memory per round
// (pcoll_allreduce_stats' memory_traffic_bytes), and mem_floor_bytes, the least a round
// over that vector needs on one node, so a row says how close it runs to what memory allows.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "dtype_values.hpp"
#include <pcoll/pcoll.h>
#include "perf_error.hpp"
#include "perf_job.hpp"

#include <unistd.h>

#if PCOLL_PERF_MPI
#include <mpi.h>
#endif

namespace {

namespace perf = pcoll::perf;
const char kTool[] = "pcoll_allreduce";

const char kUsage[] =
    "usage: pcollrun -n N pcoll_allreduce [options]\n"
    "       mpirun.openmpi -np N pcoll_allreduce [--compare-mpi] [options]\n"
    "  --mode M       sync (default), solo, majority, quorum or all (the four)\n"
    "  --quorum K     quorum: ranks that start a round (default floor(P/2)+1)\n"
    "  --grace-us G   quorum: the first arrival starts the round after G us anyway (default 0: never)\n"
    "  -b MIN         smallest size in bytes, K/M/G suffixes (default 8)\n"
    "  -e MAX         largest size in bytes (default 4M)\n"
    "  -f FACTOR      size multiplier between steps (default 2)\n"
    "  -n ITERS       timed rounds per size (default 50)\n"
    "  -w WARMUP      untimed rounds per size first (default 5)\n"
    "  -d DTYPE       float32 (default), float64, int32, int64, bfloat16, float16\n"
    "  -o OP          sum (default), avg, min, max\n"
    "  -c             check every result against a reference (#wrong column)\n"
    "  --compare-mpi  the same sweep with MPI_Allreduce, interleaved per size (needs mpirun)\n"
    "  --json         one JSON object per (mode, size) instead of the table\n"
    "  -h, --help     this help\n";

[[noreturn]] void usage_error(const std::string& message) { perf::usage_error(kTool, message, kUsage); }

using perf::Mode;
using perf::mode_name;

using pcoll::perf::dtype_name;
using pcoll::perf::op_name;

struct Options {
  std::vector<perf::ModeSpec> modes{{Mode::sync}};
  uint32_t quorum = 0;
  uint32_t grace_us = 0;
  uint64_t min_bytes = 8;
  uint64_t max_bytes = uint64_t{4} << 20;
  uint64_t factor = 2;
  uint64_t iters = 50;
  uint64_t warmup = 5;
  pcoll_dtype_t dtype = PCOLL_FLOAT32;
  pcoll_op_t op = PCOLL_OP_SUM;
  bool check = false;
  bool compare_mpi = false;
  bool json = false;
};

Options parse_options(int argc, char** argv) {
  constexpr uint64_t kMaxBytes = uint64_t{1} << 30;
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "--mode") {
      const std::string v = value();
      if (v == "sync") o.modes = {{Mode::sync}};
      else if (v == "solo") o.modes = {{Mode::solo}};
      else if (v == "majority") o.modes = {{Mode::majority}};
      else if (v == "quorum") o.modes = {{Mode::quorum}};
      else if (v == "all") o.modes = {{Mode::sync}, {Mode::solo}, {Mode::majority}, {Mode::quorum}};
      else usage_error("--mode '" + v + "' is not one of sync, solo, majority, quorum, all");
    } else if (arg == "--quorum") {
      o.quorum = static_cast<uint32_t>(perf::parse_uint(kTool, kUsage, value(), "--quorum", 1, 1u << 20));
    } else if (arg == "--grace-us") {
      o.grace_us = static_cast<uint32_t>(perf::parse_uint(kTool, kUsage, value(), "--grace-us", 0, 60000000));
    } else if (arg == "-b") {
      o.min_bytes = perf::parse_bytes(kTool, kUsage, value(), "-b", 1, kMaxBytes);
    } else if (arg == "-e") {
      o.max_bytes = perf::parse_bytes(kTool, kUsage, value(), "-e", 1, kMaxBytes);
    } else if (arg == "-f") {
      o.factor = perf::parse_uint(kTool, kUsage, value(), "-f", 2, 1024);
    } else if (arg == "-n") {
      o.iters = perf::parse_uint(kTool, kUsage, value(), "-n", 1, 10000000);
    } else if (arg == "-w") {
      o.warmup = perf::parse_uint(kTool, kUsage, value(), "-w", 0, 10000000);
    } else if (arg == "-d") {
      const std::string v = value();
      if (pcoll_dtype_from_name(v.c_str(), &o.dtype) != PCOLL_SUCCESS) usage_error("-d: " + std::string(pcoll_last_error()));
    } else if (arg == "-o") {
      const std::string v = value();
      if (pcoll_op_from_name(v.c_str(), &o.op) != PCOLL_SUCCESS) usage_error("-o: " + std::string(pcoll_last_error()));
    } else if (arg == "-c") {
      o.check = true;
    } else if (arg == "--compare-mpi") {
      o.compare_mpi = true;
    } else if (arg == "--json") {
      o.json = true;
    } else {
      usage_error("unknown option '" + arg + "'");
    }
  }
  const bool quorum = std::find(o.modes.begin(), o.modes.end(), perf::ModeSpec{Mode::quorum}) != o.modes.end();
  if ((o.quorum != 0 || o.grace_us != 0) && !quorum)
    usage_error("--quorum and --grace-us are options of --mode quorum (or all)");
  for (perf::ModeSpec& m : o.modes)
    if (m.mode == Mode::quorum) m.quorum = o.quorum, m.grace_us = o.grace_us;
  if (o.min_bytes > o.max_bytes)
    usage_error("-b " + std::to_string(o.min_bytes) + " is larger than -e " + std::to_string(o.max_bytes));
  if (o.compare_mpi && (o.dtype == PCOLL_BFLOAT16 || o.dtype == PCOLL_FLOAT16))
    usage_error(std::string("--compare-mpi: MPI has no ") + dtype_name(o.dtype) + " type; use -d float32, float64, int32 or int64");
  return o;
}

// Rank r's input element i in round t: small integers, exact in every dtype. Under avg they
// are multiples of P so that the average is exact too.
double input_value(int rank, uint64_t round, size_t index, int ranks, pcoll_op_t op) {
  const int64_t v = static_cast<int64_t>((static_cast<uint64_t>(rank) * 7 + round * 3 + index * 5) % 9) - 4;
  return static_cast<double>(op == PCOLL_OP_AVG ? v * ranks : v);
}

bool bit(const std::vector<uint64_t>& mask, int rank) {
  return (mask[static_cast<size_t>(rank) / 64] >> (rank % 64)) & 1u;
}

// Checks round `round`'s result. Contribution of rank r (docs/design.md "Semantics", max_lag 1): its round-t
// input if it was fresh in t, combined with its round t-1 input if it was late in t-1
// (carried). `fresh` / `previous_fresh` are the rounds' fresh masks (all ones for sync and
// MPI). Returns the number of wrong elements.
uint64_t count_wrong(const Options& o, const std::byte* result, size_t count, int ranks, uint64_t round,
                     const std::vector<uint64_t>& fresh, const std::vector<uint64_t>* previous_fresh) {
  const double eps = perf::dtype_epsilon(o.dtype);
  uint64_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    double expected = 0.0;
    bool any = false;
    const auto combine = [&](double v) {
      if (!any) expected = v;
      else if (o.op == PCOLL_OP_MIN) expected = std::min(expected, v);
      else if (o.op == PCOLL_OP_MAX) expected = std::max(expected, v);
      else expected += v;
      any = true;
    };
    for (int r = 0; r < ranks; ++r) {
      if (bit(fresh, r)) combine(input_value(r, round, i, ranks, o.op));
      if (previous_fresh != nullptr && !bit(*previous_fresh, r)) combine(input_value(r, round - 1, i, ranks, o.op));
    }
    if (!any) continue;  // nobody contributed: the identity, nothing to compare
    if (o.op == PCOLL_OP_AVG) expected /= ranks;
    const double got = perf::load_value(o.dtype, result, i);
    if (std::fabs(got - expected) > 4 * eps * std::max(1.0, std::fabs(expected))) ++wrong;
  }
  return wrong;
}

struct Stats {
  double avg_us = 0, min_us = 0, max_us = 0, p50_us = 0, p99_us = 0;
  uint64_t wrong = 0;
  std::string plan = "mpi";  // the reduction plan the handle ran (pcoll_allreduce_stats)
  // Per round (warm-up and flush included), the largest over nodes of what a node's ranks
  // sent to other nodes (bytes_network, messages_network); negative: not measured (mpi).
  double net_bytes_per_round = -1, net_messages_per_round = -1;
  // Per round (warm-up included, the flush not), the largest over ranks of what a rank read
  // plus wrote in memory (memory_traffic_bytes); negative: not measured (mpi).
  double mem_bytes_per_round = -1;
};

// The least a rank of P on one node reads plus writes in a round over n bytes when the
// reduction reads the application's buffers where they lie: its slice of every contribution
// (n), its reduced slice written (n / P), the other reduced slices read and written into its
// result (2 n (P - 1) / P). docs/performance.md, "Memory traffic".
double memory_floor(size_t n, int P) {
  return P > 1 ? static_cast<double>(n) * (3.0 * P - 1) / P : 0.0;
}

// A JSON number with one decimal, or null where negative (not measured).
std::string json_number(double v) {
  if (v < 0) return "null";
  char text[64];
  std::snprintf(text, sizeof text, "%.1f", v);
  return text;
}

// This rank's host name as a whole number below 2^52, which a double holds exactly: ranks
// with equal names are one node for the network counters. Under PCOLL_TEST_HOST_NAMES (hosts
// emulated on one machine) the name it gives this rank, as the library takes it.
double host_key(int rank) {
  std::string name;
  if (const char* names = std::getenv("PCOLL_TEST_HOST_NAMES"); names != nullptr) {
    std::string all = names;
    size_t begin = 0;
    for (int r = 0; r < rank && begin != std::string::npos; ++r) {
      begin = all.find(',', begin);
      if (begin != std::string::npos) ++begin;
    }
    if (begin != std::string::npos) name = all.substr(begin, all.find(',', begin) - begin);
  }
  if (name.empty()) {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) == 0) name = host;
  }
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (const char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  return static_cast<double>(h >> 12);
}

#if PCOLL_PERF_MPI
MPI_Datatype mpi_dtype(pcoll_dtype_t d) {
  switch (d) {
    case PCOLL_FLOAT32: return MPI_FLOAT;
    case PCOLL_FLOAT64: return MPI_DOUBLE;
    case PCOLL_INT32: return MPI_INT32_T;
    case PCOLL_INT64: return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL;  // refused by parse_options
  }
}

MPI_Op mpi_op(pcoll_op_t op) {
  switch (op) {
    case PCOLL_OP_MIN: return MPI_MIN;
    case PCOLL_OP_MAX: return MPI_MAX;
    default: return MPI_SUM;  // avg: MPI_SUM, then divided by P on each rank (timed)
  }
}

// MPI has no average: divide in place, as a user of MPI_Allreduce would have to.
void divide_by_ranks(pcoll_dtype_t d, std::byte* data, size_t count, int ranks) {
  switch (d) {
    case PCOLL_FLOAT32: {
      auto* v = reinterpret_cast<float*>(data);
      const float scale = 1.0f / static_cast<float>(ranks);
      for (size_t i = 0; i < count; ++i) v[i] *= scale;
      return;
    }
    case PCOLL_FLOAT64: {
      auto* v = reinterpret_cast<double*>(data);
      const double scale = 1.0 / ranks;
      for (size_t i = 0; i < count; ++i) v[i] *= scale;
      return;
    }
    case PCOLL_INT32: {
      auto* v = reinterpret_cast<int32_t*>(data);
      for (size_t i = 0; i < count; ++i) v[i] /= ranks;
      return;
    }
    case PCOLL_INT64: {
      auto* v = reinterpret_cast<int64_t*>(data);
      for (size_t i = 0; i < count; ++i) v[i] /= ranks;
      return;
    }
    default: return;
  }
}
#endif

class Bench {
 public:
  Bench(const Options& o, perf::Job& job, size_t max_bytes)
      : o_(o), job_(job), send_(max_bytes), recv_(max_bytes) {}

  // The physical limit beside the rounds: one core's memcpy of `bytes` between the tool's
  // own send and receive buffers (as the application's buffers are: malloc'd, at the same
  // line offset), out of cache (a 64 MiB sweep before each copy evicts both), median of five,
  // in GB/s. Rank 0 copies while the others wait at a barrier.
  double memcpy_gbps(size_t bytes) {
    double result = 0;
    if (job_.rank() == 0 && bytes > 0) {
      std::vector<double> gbps;
      for (int k = 0; k < 5; ++k) {
        evict_.assign(64 << 20, std::byte{static_cast<unsigned char>(k)});
        const auto start = perf::Clock::now();
        std::memcpy(recv_.data(), send_.data(), bytes);
        const double ns = std::chrono::duration<double, std::nano>(perf::Clock::now() - start).count();
        gbps.push_back(static_cast<double>(bytes) / ns);
      }
      std::sort(gbps.begin(), gbps.end());
      result = gbps[2];
    }
    job_.barrier();
    return result;
  }

  Stats run(const perf::ModeSpec& mode, size_t count) {
    const int ranks = job_.size();
    std::vector<double> times_us(o_.iters);
    uint64_t wrong = 0;
    std::vector<uint64_t> all_fresh((static_cast<size_t>(ranks) + 63) / 64, 0);
    for (int r = 0; r < ranks; ++r) all_fresh[static_cast<size_t>(r) / 64] |= uint64_t{1} << (r % 64);
    std::vector<uint64_t> previous_fresh = all_fresh;
    if (!o_.check) fill(0, count);

    pcoll_allreduce_t* handle = nullptr;
    const bool handle_made = mode.mode != Mode::mpi;
    if (handle_made) {
      pcoll_allreduce_opts_t opts;
      pcoll_allreduce_opts_init(&opts);
      mode.apply(opts);
      perf::check(pcoll_allreduce_create(job_.comm(), count, o_.dtype, o_.op, mode.pcoll_mode(), &opts, &handle),
                  "pcoll_allreduce_create");
    }
    job_.barrier();
    const uint64_t rounds = o_.warmup + o_.iters;
    std::string plan = "mpi";
    std::vector<double> network(static_cast<size_t>(3 * ranks), 0.0);  // [3r]: bytes, messages, host
    for (uint64_t t = 0; t < rounds; ++t) {
      if (o_.check) fill(t, count);
      std::vector<uint64_t> fresh = all_fresh;
      const auto start = perf::Clock::now();
      if (handle != nullptr) {
        pcoll_round_info_t info;
        perf::check(pcoll_allreduce_run(handle, send_.data(), recv_.data(), &info), "pcoll_allreduce_run");
        if (o_.check) fresh.assign(info.fresh_mask, info.fresh_mask + all_fresh.size());
      } else {
        run_mpi(count);
      }
      const double us = std::chrono::duration<double, std::micro>(perf::Clock::now() - start).count();
      if (t >= o_.warmup) times_us[t - o_.warmup] = us;
      if (o_.check) {
        wrong += count_wrong(o_, recv_.data(), count, ranks, t, fresh, t > 0 ? &previous_fresh : nullptr);
        previous_fresh = fresh;
      }
    }
    std::vector<double> traffic(1, 0.0);
    if (handle != nullptr) {
      // The timed rounds' memory traffic, before the flush adds its own.
      pcoll_allreduce_stats_t before{};
      before.size = sizeof before;
      perf::check(pcoll_allreduce_stats(handle, &before), "pcoll_allreduce_stats");
      if (before.rounds > 0)
        traffic[0] = static_cast<double>(before.memory_traffic_bytes) / static_cast<double>(before.rounds);
      // Drains the carry of the last round. Its result is the last late inputs alone.
      perf::check(pcoll_allreduce_flush(handle, recv_.data(), nullptr), "pcoll_allreduce_flush");
      if (o_.check) {
        std::vector<uint64_t> none(all_fresh.size(), 0);
        wrong += count_wrong(o_, recv_.data(), count, ranks, rounds, none, &previous_fresh);
      }
      pcoll_allreduce_stats_t stats{};
      stats.size = sizeof stats;
      perf::check(pcoll_allreduce_stats(handle, &stats), "pcoll_allreduce_stats");
      plan = stats.plan != nullptr ? stats.plan : "?";
      perf::check(pcoll_allreduce_destroy(handle), "pcoll_allreduce_destroy");
      network[static_cast<size_t>(3 * job_.rank())] = static_cast<double>(stats.bytes_network);
      network[static_cast<size_t>(3 * job_.rank() + 1)] = static_cast<double>(stats.messages_network);
      network[static_cast<size_t>(3 * job_.rank() + 2)] = host_key(job_.rank());
    }
    // Every rank's counters and host, then per node the sum, and the largest node.
    job_.sum_over_ranks(network);
    job_.max_over_ranks(traffic);

    // Per round, the slowest rank's time; then the summary of those.
    job_.max_over_ranks(times_us);
    std::vector<double> wrong_total{static_cast<double>(wrong)};
    job_.sum_over_ranks(wrong_total);
    Stats s;
    std::vector<double> sorted = times_us;
    std::sort(sorted.begin(), sorted.end());
    double sum = 0;
    for (double v : sorted) sum += v;
    s.avg_us = sum / static_cast<double>(sorted.size());
    s.min_us = sorted.front();
    s.max_us = sorted.back();
    s.p50_us = percentile(sorted, 0.50);
    s.p99_us = percentile(sorted, 0.99);
    s.wrong = static_cast<uint64_t>(wrong_total[0]);
    s.plan = plan;
    if (handle_made) {
      std::map<double, std::pair<double, double>> per_node;
      for (int r = 0; r < ranks; ++r) {
        auto& node = per_node[network[static_cast<size_t>(3 * r + 2)]];
        node.first += network[static_cast<size_t>(3 * r)];
        node.second += network[static_cast<size_t>(3 * r + 1)];
      }
      s.mem_bytes_per_round = traffic[0];
      s.net_bytes_per_round = s.net_messages_per_round = 0;
      for (const auto& [host, node] : per_node) {
        s.net_bytes_per_round = std::max(s.net_bytes_per_round, node.first / static_cast<double>(rounds + 1));
        s.net_messages_per_round = std::max(s.net_messages_per_round, node.second / static_cast<double>(rounds + 1));
      }
    }
    return s;
  }

 private:
  // Nearest-rank percentile of sorted values.
  static double percentile(const std::vector<double>& sorted, double q) {
    const size_t n = sorted.size();
    size_t k = static_cast<size_t>(std::ceil(q * static_cast<double>(n)));
    k = std::clamp<size_t>(k, 1, n);
    return sorted[k - 1];
  }

  void fill(uint64_t round, size_t count) {
    for (size_t i = 0; i < count; ++i)
      perf::store_value(o_.dtype, send_.data(), i, input_value(job_.rank(), round, i, job_.size(), o_.op));
  }

  void run_mpi([[maybe_unused]] size_t count) {
#if PCOLL_PERF_MPI
    if (MPI_Allreduce(send_.data(), recv_.data(), static_cast<int>(count), mpi_dtype(o_.dtype), mpi_op(o_.op),
                      MPI_COMM_WORLD) != MPI_SUCCESS)
      perf::fail(PCOLL_ERR_TRANSPORT, "MPI_Allreduce failed");
    if (o_.op == PCOLL_OP_AVG) divide_by_ranks(o_.dtype, recv_.data(), count, job_.size());
#else
    perf::fail(PCOLL_ERR_UNSUPPORTED, "this pcoll_allreduce was built without MPI");
#endif
  }

  const Options& o_;
  perf::Job& job_;
  std::vector<std::byte> send_;
  std::vector<std::byte> recv_;
  std::vector<std::byte> evict_;
};

void print_header() {
  std::printf("%12s %10s %9s %6s %9s %10s %10s %10s %10s %10s %12s %12s %7s  %s\n", "size", "count", "type", "redop",
              "mode", "time(us)", "min", "max", "p50", "p99", "algbw(GB/s)", "busbw(GB/s)", "#wrong", "plan");
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  try {
    perf::Job job(&argc, &argv);
    if (options.compare_mpi && !job.has_mpi()) {
      if (job.rank() == 0)
        std::fprintf(stderr,
                     "pcoll_allreduce: --compare-mpi needs an MPI build run under mpirun "
                     "(mpirun.openmpi -np N pcoll_allreduce --compare-mpi); this job was started by %s\n",
                     job.launcher().c_str());
      return perf::kUsageExit;
    }
    std::vector<perf::ModeSpec> modes = options.modes;
    if (options.compare_mpi) modes.push_back({Mode::mpi});
    const size_t elem = perf::dtype_bytes(options.dtype);
    Bench bench(options, job, std::max<size_t>(options.max_bytes, elem));
    const bool reporter = job.rank() == 0;
    const int P = job.size();
    uint64_t total_wrong = 0;
    if (reporter && !options.json) {
      std::printf("# pcoll_allreduce: P=%d, provider %s, bootstrap %s, %llu rounds (+%llu warmup) per size%s\n", P,
                  job.provider().c_str(), job.launcher().c_str(), static_cast<unsigned long long>(options.iters),
                  static_cast<unsigned long long>(options.warmup), options.check ? ", checking every result" : "");
      std::printf("# times in us per round as seen by the slowest rank; busbw = algbw * 2(P-1)/P\n");
      print_header();
    }
    for (uint64_t size = options.min_bytes; size <= options.max_bytes; size *= options.factor) {
      const size_t count = std::max<size_t>(1, size / elem);
      const size_t bytes = count * elem;
      const double memcpy_gbps = bench.memcpy_gbps(bytes);
      for (const perf::ModeSpec& mode : modes) {
        const Stats s = bench.run(mode, count);
        total_wrong += s.wrong;
        if (!reporter) continue;
        const double algbw = static_cast<double>(bytes) / (s.avg_us * 1e3);  // GB/s = bytes / ns
        const double busbw = P > 1 ? algbw * 2.0 * (P - 1) / P : 0.0;
        if (options.json) {
          std::printf("{\"tool\":\"pcoll_allreduce\",\"mode\":\"%s\",\"P\":%d,\"provider\":\"%s\",\"bootstrap\":\"%s\","
                      "\"bytes\":%zu,\"count\":%zu,\"dtype\":\"%s\",\"op\":\"%s\",\"iters\":%llu,\"warmup\":%llu,"
                      "\"avg_us\":%.3f,\"min_us\":%.3f,\"max_us\":%.3f,\"p50_us\":%.3f,\"p99_us\":%.3f,"
                      "\"algbw_GBps\":%.6f,\"busbw_GBps\":%.6f,\"memcpy_GBps\":%.3f,\"wrong\":%s,\"plan\":\"%s\","
                      "\"net_bytes_per_round\":%s,\"net_messages_per_round\":%s,\"mem_bytes_per_round\":%s,"
                      "\"mem_floor_bytes\":%.1f}\n",
                      mode.name().c_str(), P, job.provider().c_str(), job.launcher().c_str(), bytes, count,
                      dtype_name(options.dtype), op_name(options.op), static_cast<unsigned long long>(options.iters),
                      static_cast<unsigned long long>(options.warmup), s.avg_us, s.min_us, s.max_us, s.p50_us,
                      s.p99_us, algbw, busbw, memcpy_gbps,
                      options.check ? std::to_string(s.wrong).c_str() : "null", s.plan.c_str(),
                      json_number(s.net_bytes_per_round).c_str(), json_number(s.net_messages_per_round).c_str(),
                      json_number(s.mem_bytes_per_round).c_str(), memory_floor(bytes, P));
        } else {
          std::printf("%12zu %10zu %9s %6s %9s %10.2f %10.2f %10.2f %10.2f %10.2f %12.4f %12.4f %7s  %s\n", bytes,
                      count, dtype_name(options.dtype), op_name(options.op), mode.name().c_str(), s.avg_us, s.min_us,
                      s.max_us, s.p50_us, s.p99_us, algbw, busbw, options.check ? std::to_string(s.wrong).c_str() : "N/A",
                      s.plan.c_str());
        }
        std::fflush(stdout);
      }
      if (size > options.max_bytes / options.factor) break;  // no overflow past -e
    }
    if (total_wrong != 0) {
      if (reporter) std::fprintf(stderr, "pcoll_allreduce: %llu wrong elements\n", static_cast<unsigned long long>(total_wrong));
      return 1;
    }
  } catch (const perf::Error& e) {
    std::fprintf(stderr, "pcoll_allreduce: %s\n", e.what());
    return 1;
  }
  return 0;
}
