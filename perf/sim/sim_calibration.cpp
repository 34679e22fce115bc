// pcoll_sim calibrate (sim_calibration.hpp).
#include "sim_calibration.hpp"

#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <new>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <collectives/reduce_kernels.hpp>
#include <support/copy.hpp>

#include <pcoll/pcoll.h>

#include "perf_error.hpp"
#include "perf_job.hpp"
#include "sim_platform.hpp"

namespace pcoll::sim {
namespace {

const char kUsage[] =
    "usage: pcoll_sim calibrate [--out FILE] [--pingpong PATH] [--pcollrun PATH]\n"
    "  --out FILE       where the calibrated platform goes (default pcoll_sim.calibrated.xml)\n"
    "  --pingpong PATH  pcoll_pingpong (default: next to pcoll_sim)\n"
    "  --pcollrun PATH  pcollrun (default: next to pcoll_sim, or ../tools/ in a build tree)\n";

std::string sibling(const std::string& name, const std::vector<std::string>& relative) {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  for (const std::string& dir : relative) {
    const std::filesystem::path candidate = exe.parent_path() / dir / name;
    if (std::filesystem::exists(candidate)) return candidate.string();
  }
  return name;  // from PATH
}

FILE* start(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) perf::fail(PCOLL_ERR_INTERNAL, "cannot run " + command);
  return pipe;
}

std::string finish(FILE* pipe, const std::string& command) {
  std::string out;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  if (pclose(pipe) != 0) perf::fail(PCOLL_ERR_INTERNAL, "'" + command + "' failed:\n" + out);
  return out;
}

// Runs `command`, returns its output; a failure names the command.
std::string run(const std::string& command) { return finish(start(command), command); }

// What a thread that waits by yielding waits for a core held by another such thread: two
// processes on one core hand a turn back and forth, each yielding until it is its own; the
// time per hand-off. Ranks that outnumber the cores wait so (PCOLL_YIELD=auto).
double yield_handoff_seconds() {
  auto* turn = static_cast<std::atomic<int>*>(
      mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (turn == MAP_FAILED) perf::fail(PCOLL_ERR_INTERNAL, "mmap for the yield calibration failed");
  new (turn) std::atomic<int>(0);
  constexpr int kHandoffs = 20000;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(0, &one);
  const pid_t child = fork();
  if (child == 0) {
    sched_setaffinity(0, sizeof one, &one);
    for (int i = 0; i < kHandoffs; ++i) {
      while (turn->load(std::memory_order_acquire) != 2 * i + 1) sched_yield();
      turn->store(2 * i + 2, std::memory_order_release);
    }
    _exit(0);
  }
  cpu_set_t before;
  sched_getaffinity(0, sizeof before, &before);
  sched_setaffinity(0, sizeof one, &one);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kHandoffs; ++i) {
    turn->store(2 * i + 1, std::memory_order_release);
    while (turn->load(std::memory_order_acquire) != 2 * i + 2) sched_yield();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int status = 0;
  waitpid(child, &status, 0);
  sched_setaffinity(0, sizeof before, &before);
  munmap(turn, sizeof(std::atomic<int>));
  return s / (2.0 * kHandoffs);
}

// How much later than asked sleep_until wakes, as pcoll_imbalance computes: the 0, 10, ...,
// 100th percentiles of 400 sleeps of 1 ms.
std::vector<double> sleep_overshoot_percentiles() {
  std::vector<double> late;
  for (int i = 0; i < 400; ++i) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
    std::this_thread::sleep_until(until);
    late.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - until).count());
  }
  std::sort(late.begin(), late.end());
  std::vector<double> q;
  for (int k = 0; k <= 10; ++k) q.push_back(late[std::min(late.size() - 1, late.size() * static_cast<size_t>(k) / 10)]);
  return q;
}

// The time of one pcoll_allreduce_run of a one-rank job in this process: what a call costs
// the engine when nothing is sent (post, join, complete, hand over).
double call_seconds() {
  pcoll_comm_t* comm = nullptr;
  if (pcoll_init(&comm) != PCOLL_SUCCESS) perf::fail(PCOLL_ERR_INTERNAL, std::string("pcoll_init: ") + pcoll_last_error());
  pcoll_allreduce_t* handle = nullptr;
  if (pcoll_allreduce_create(comm, 2, PCOLL_FLOAT32, PCOLL_OP_SUM, PCOLL_MODE_SYNC, nullptr, &handle) != PCOLL_SUCCESS)
    perf::fail(PCOLL_ERR_INTERNAL, std::string("pcoll_allreduce_create: ") + pcoll_last_error());
  float in[2] = {1, 2}, out[2] = {0, 0};
  std::vector<double> batches;
  constexpr int kCalls = 2000;
  for (int b = 0; b < 15; ++b) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) pcoll_allreduce_run(handle, in, out, nullptr);
    batches.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / kCalls);
  }
  pcoll_allreduce_destroy(handle);
  pcoll_finalize(comm);
  std::sort(batches.begin(), batches.end());
  return batches[batches.size() / 2];
}

double json_number(const std::string& text, const std::string& field, const std::string& command) {
  const std::string key = "\"" + field + "\":";
  const size_t at = text.rfind(key);
  if (at == std::string::npos) perf::fail(PCOLL_ERR_INTERNAL, "'" + command + "' printed no " + field + ":\n" + text);
  return std::strtod(text.c_str() + at + key.size(), nullptr);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Bytes per second of `kernel` over buffers of `bytes`, median of repeats.
template <typename Kernel>
double kernel_rate(size_t bytes, int repeats, Kernel kernel) {
  std::vector<std::byte> a(bytes, std::byte{1}), b(bytes, std::byte{2});
  std::vector<double> rates;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    kernel(a.data(), b.data(), bytes);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(static_cast<double>(bytes) / s);
  }
  return median(rates);
}

// Bytes per second of copying a block that stays in cache into a destination of `bytes`
// that does not, a block after the other (the direct plan's hand-over of the result), median
// of repeats. The source is a 64 KiB buffer of its own, not kernel_rate's: those two buffers
// share a line offset, which sends copy_bytes down memcpy's path (34 GB/s here against 24).
double block_out_rate(size_t block, size_t bytes, int repeats) {
  std::vector<std::byte> in(block, std::byte{1}), out(bytes, std::byte{2});
  std::vector<double> rates;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t at = 0; at + block <= bytes; at += block) copy_bytes(out.data() + at, in.data(), block);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(static_cast<double>(bytes) / s);
  }
  return median(rates);
}

}  // namespace

int calibrate(int argc, char** argv) {
  std::string out = kDefaultCalibration;
  std::string pingpong = sibling("pcoll_pingpong", {".", ".."});
  std::string pcollrun = sibling("pcollrun", {".", "../tools", "../../tools"});
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) perf::usage_error("pcoll_sim calibrate", arg + " needs a value", kUsage);
      return argv[++i];
    };
    if (arg == "--out") out = value();
    else if (arg == "--pingpong") pingpong = value();
    else if (arg == "--pcollrun") pcollrun = value();
    else if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else perf::usage_error("pcoll_sim calibrate", "unknown option '" + arg + "'", kUsage);
  }
  const std::string launch = pcollrun + " -n 2 --timeout-ms 120000 " + pingpong;
  const std::string lat_cmd = launch + " -S 8 -I 2000 -w 200 --json";
  const std::string bw_cmd = launch + " --bw -S 1M -I 50 -w 5 --json";
  const std::string rate_cmd = launch + " --bw -S 8 -I 500 -w 50 --json";
  std::vector<double> latency, bandwidth, rate;
  std::string provider;
  for (int k = 0; k < 3; ++k) {
    const std::string lat = run(lat_cmd);
    latency.push_back(json_number(lat, "usec_per_xfer", lat_cmd) * 1e-6);
    bandwidth.push_back(json_number(run(bw_cmd), "mb_per_sec", bw_cmd) * 1e6);
    rate.push_back(json_number(run(rate_cmd), "mxfers_per_sec", rate_cmd) * 1e6);
    if (provider.empty()) {
      const size_t at = lat.find("\"provider\":\"");
      if (at != std::string::npos) provider = lat.substr(at + 12, lat.find('"', at + 12) - at - 12);
    }
  }
  const int cores = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  EngineCosts costs;
  // A streamed 8-byte write costs its sender one message time; its receiver about the same
  // to take the notification.
  const double message_s = 1.0 / median(rate);
  costs.post_s = message_s / 2;
  costs.notice_s = message_s / 2;
  costs.call_s = call_seconds();
  costs.sleep_overshoot_s = sleep_overshoot_percentiles();
  // Two ranks per core: a reacting rank waits for the other to yield the core.
  costs.wake_s = yield_handoff_seconds();
  const auto reduce = [](std::byte* acc, const std::byte* in, size_t bytes) {
    reduce_into(PCOLL_FLOAT32, PCOLL_OP_SUM, acc, in, bytes / 4);
  };
  const auto copy = [](std::byte* dst, const std::byte* src, size_t bytes) { copy_bytes(dst, src, bytes); };
  // From memory: 64 MiB buffers, beyond any cache here; from cache: 256 KiB.
  costs.reduce_bytes_per_s = kernel_rate(size_t{64} << 20, 7, reduce);
  costs.copy_bytes_per_s = kernel_rate(size_t{64} << 20, 7, copy);
  costs.reduce_cached_bytes_per_s = kernel_rate(size_t{256} << 10, 301, reduce);
  costs.copy_cached_bytes_per_s = kernel_rate(size_t{256} << 10, 301, copy);
  // The engine's cache block (64 KiB) into 64 MiB.
  costs.copy_out_bytes_per_s = block_out_rate(size_t{64} << 10, size_t{64} << 20, 7);
  // A core's own cache: what one rank's reductions keep hot (the last level is shared by
  // every rank of the host, and by their peers' buffers).
  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  costs.cache_bytes = l2 > 0 ? static_cast<double>(l2) : 512e3;
  LinkFigures node;
  // The one-way latency of the notification's path, less the CPU times the engine model
  // charges on both ends.
  node.latency_s = std::max(0.0, median(latency) - costs.post_s - costs.notice_s);
  node.bandwidth_bytes_per_s = median(bandwidth);
  char source[1024];
  std::snprintf(source, sizeof source,
                "provider %s, %d cores; pcoll_pingpong 8 B latency %.3f us, yield hand-off %.3f us, 1 MiB "
                "stream %.0f MB/s, 8 B stream %.3f Mmsg/s; a one-rank run() %.3f us; reduce_into float32 sum %.2f "
                "GB/s (%.2f cached), copy_bytes %.2f GB/s (%.2f cached, %.2f from cache into memory), cache %.0f KiB; a 1 ms sleep wakes %.0f us "
                "late (median); medians",
                provider.c_str(), cores, median(latency) * 1e6, costs.wake_s * 1e6,
                median(bandwidth) / 1e6, median(rate) / 1e6, costs.call_s * 1e6, costs.reduce_bytes_per_s / 1e9,
                costs.reduce_cached_bytes_per_s / 1e9, costs.copy_bytes_per_s / 1e9,
                costs.copy_cached_bytes_per_s / 1e9, costs.copy_out_bytes_per_s / 1e9, costs.cache_bytes / 1024, costs.sleep_overshoot_s[5] * 1e6);
  std::ofstream file(out);
  file << calibrated_xml(node, costs, cores, source);
  if (!file) perf::fail(PCOLL_ERR_INTERNAL, "cannot write " + out);
  std::printf("pcoll_sim calibrate: %s\nwrote %s\n", source, out.c_str());
  return 0;
}

}  // namespace pcoll::sim
