// pcoll_memory: what one allreduce handle costs in memory, measured as a training job sees
// it. Every rank allocates and touches its own send and receive buffers, reads its
// proportional set size (Pss in /proc/self/smaps_rollup: shared-memory pages mapped by
// several ranks are split among them), creates one handle, runs rounds with one rank late
// every other round (or none), and reads Pss again. The growth is what the handle costs
// beyond the application's buffers; the table puts it next to the vector and to the
// handle's own account of its memory (pcoll_allreduce_stats). Public API only.
//
//   pcollrun -n 4 pcoll_memory -n 25M --rounds 20            (100 MB of float32, rank 3 late)
//   pcollrun -n 2 pcoll_memory -n 4M --no-late --check       (exit 1 above the bound)
//
// --check holds the growth to docs/design.md's bound ("Memory of a handle"): the work
// buffer and the landing pool, plus the carry where a rank is late, plus 8 MiB for the
// providers' own buffers and the allocator.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "perf_error.hpp"
#include "perf_job.hpp"

namespace {

using pcoll::perf::check;

const char* kTool = "pcoll_memory";
const char* kUsage =
    "usage: pcoll_memory [-n COUNT] [--rounds R] [--mode sync|solo|majority] [--max-lag L]\n"
    "                    [--late-rank R | --no-late] [--late-ms MS] [--check] [--json]\n"
    "  -n COUNT       float32 elements of the handle (K/M/G suffixes; default 25M = 100 MB)\n"
    "  --rounds R     rounds to run (default 20)\n"
    "  --late-rank R  the rank that is late every other round (default: the last)\n"
    "  --no-late      nobody is late (imbalance model none)\n"
    "  --late-ms MS   how late (default 20)\n"
    "  --check        exit 1 if any rank's growth is above the bound\n";

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kSlackBytes = 8 * kMiB;

// Proportional set size of this process, bytes.
double pss_bytes() {
  std::ifstream rollup("/proc/self/smaps_rollup");
  std::string key;
  double kib = -1;
  while (rollup >> key) {
    if (key == "Pss:") {
      rollup >> kib;
      break;
    }
    rollup.ignore(4096, '\n');
  }
  if (kib < 0) pcoll::perf::fail(PCOLL_ERR_INTERNAL, "cannot read Pss from /proc/self/smaps_rollup");
  return kib * 1024.0;
}

void touch(std::vector<float>& v, float value) {
  for (size_t i = 0; i < v.size(); i += 1024) v[i] = value;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    pcoll::perf::Job job(&argc, &argv);
    uint64_t count = 25ull << 20;
    uint64_t rounds = 20;
    int late_rank = job.size() - 1;
    uint64_t late_ms = 20;
    uint64_t max_lag = 1;
    pcoll_mode_t mode = PCOLL_MODE_SOLO;
    std::string mode_text = "solo";
    bool check_bound = false, json = false;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) pcoll::perf::usage_error(kTool, arg + " needs a value", kUsage);
        return argv[++i];
      };
      if (arg == "-n" || arg == "--count") {
        count = pcoll::perf::parse_bytes(kTool, kUsage, value(), "-n", 1, uint64_t{1} << 36);
      } else if (arg == "--rounds") {
        rounds = pcoll::perf::parse_uint(kTool, kUsage, value(), "--rounds", 1, 1000000);
      } else if (arg == "--late-rank") {
        late_rank = static_cast<int>(pcoll::perf::parse_uint(kTool, kUsage, value(), "--late-rank", 0,
                                                             static_cast<uint64_t>(job.size() - 1)));
      } else if (arg == "--no-late") {
        late_rank = -1;
      } else if (arg == "--late-ms") {
        late_ms = pcoll::perf::parse_uint(kTool, kUsage, value(), "--late-ms", 0, 600000);
      } else if (arg == "--max-lag") {
        max_lag = pcoll::perf::parse_uint(kTool, kUsage, value(), "--max-lag", 1, 64);
      } else if (arg == "--mode") {
        mode_text = value();
        if (mode_text == "sync") mode = PCOLL_MODE_SYNC;
        else if (mode_text == "solo") mode = PCOLL_MODE_SOLO;
        else if (mode_text == "majority") mode = PCOLL_MODE_MAJORITY;
        else pcoll::perf::usage_error(kTool, "--mode " + mode_text + " is not sync, solo or majority", kUsage);
      } else if (arg == "--check") {
        check_bound = true;
      } else if (arg == "--json") {
        json = true;
      } else {
        pcoll::perf::usage_error(kTool, "unknown argument " + arg, kUsage);
      }
    }

    std::vector<float> send(count), recv(count);
    touch(send, 1.0f);
    touch(recv, 0.0f);
    job.barrier();
    const double before = pss_bytes();

    pcoll_allreduce_opts_t opts;
    pcoll_allreduce_opts_init(&opts);
    opts.max_lag = static_cast<uint32_t>(max_lag);
    pcoll_allreduce_t* handle = nullptr;
    check(pcoll_allreduce_create(job.comm(), count, PCOLL_FLOAT32, PCOLL_OP_SUM, mode, &opts, &handle),
          "pcoll_allreduce_create");
    const double after_create = pss_bytes();
    double peak = after_create;
    for (uint64_t t = 0; t < rounds; ++t) {
      if (job.rank() == late_rank && t % 2 == 1) std::this_thread::sleep_for(std::chrono::milliseconds(late_ms));
      touch(send, static_cast<float>(t));
      check(pcoll_allreduce_run(handle, send.data(), recv.data(), nullptr), "pcoll_allreduce_run");
      peak = std::max(peak, pss_bytes());
    }
    pcoll_allreduce_stats_t stats{};
    stats.size = sizeof stats;
    check(pcoll_allreduce_stats(handle, &stats), "pcoll_allreduce_stats");
    check(pcoll_allreduce_flush(handle, recv.data(), nullptr), "pcoll_allreduce_flush");
    check(pcoll_allreduce_destroy(handle), "pcoll_allreduce_destroy");

    const double vector = 4.0 * static_cast<double>(count);
    // The work buffer holds the vector and ceil(P / 32) + 4 flag words of float32's size
    // (design.md); the rest of what is registered is the landing pool.
    const uint64_t flag_words = (static_cast<uint64_t>(job.size()) + 31) / 32 + 4;
    const double work = 4.0 * static_cast<double>(count + flag_words);
    const double pool = static_cast<double>(stats.registered_bytes) - work;
    const bool anyone_late = late_rank >= 0 && job.size() > 1;
    const double bound = (anyone_late ? 2.0 : 1.0) * vector + pool + kSlackBytes;
    // Per rank: growth at creation, peak growth, the handle's own account; then the worst.
    std::vector<double> mine = {after_create - before, peak - before, static_cast<double>(stats.memory_bytes),
                                static_cast<double>(stats.registered_bytes), pool};
    std::vector<double> worst = mine;
    job.max_over_ranks(worst);
    const bool over = worst[1] > bound;
    if (job.rank() == 0) {
      if (json) {
        std::printf("{\"tool\":\"pcoll_memory\",\"ranks\":%d,\"provider\":\"%s\",\"mode\":\"%s\",\"max_lag\":%llu,"
                    "\"count\":%llu,\"vector_bytes\":%.0f,\"late_rank\":%d,\"rounds\":%llu,"
                    "\"pss_growth_create_bytes\":%.0f,\"pss_growth_peak_bytes\":%.0f,\"handle_memory_bytes\":%.0f,"
                    "\"registered_bytes\":%.0f,\"pool_bytes\":%.0f,\"bound_bytes\":%.0f,\"growth_over_vector\":%.3f,"
                    "\"within_bound\":%s}\n",
                    job.size(), job.provider().c_str(), mode_text.c_str(), static_cast<unsigned long long>(max_lag),
                    static_cast<unsigned long long>(count), vector, anyone_late ? late_rank : -1,
                    static_cast<unsigned long long>(rounds), worst[0], worst[1], worst[2], worst[3], worst[4], bound,
                    worst[1] / vector, over ? "false" : "true");
      } else {
        std::printf("# pcoll_memory: P=%d, provider %s, %s, max_lag %llu, %llu float32 (%.1f MiB), %s, %llu rounds\n",
                    job.size(), job.provider().c_str(), mode_text.c_str(), static_cast<unsigned long long>(max_lag),
                    static_cast<unsigned long long>(count), vector / kMiB,
                    anyone_late ? ("rank " + std::to_string(late_rank) + " late every other round").c_str()
                                : "nobody late",
                    static_cast<unsigned long long>(rounds));
        std::printf("# largest over ranks, MiB\n");
        std::printf("%-28s %10.1f\n", "Pss growth at create", worst[0] / kMiB);
        std::printf("%-28s %10.1f  (%.2fx the vector)\n", "Pss growth, peak", worst[1] / kMiB, worst[1] / vector);
        std::printf("%-28s %10.1f\n", "handle memory (stats)", worst[2] / kMiB);
        std::printf("%-28s %10.1f\n", "  registered", worst[3] / kMiB);
        std::printf("%-28s %10.1f\n", "  of which landing pool", worst[4] / kMiB);
        std::printf("%-28s %10.1f  (%s + pool + 8 MiB)  %s\n", "bound", bound / kMiB,
                    anyone_late ? "2x vector" : "1x vector", over ? "EXCEEDED" : "held");
      }
    }
    return check_bound && over ? 1 : 0;
  } catch (const pcoll::perf::Error& e) {
    std::fprintf(stderr, "%s: %s\n", kTool, e.what());
    return 1;
  }
}
