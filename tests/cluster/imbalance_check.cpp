// Timing check for the multi-host test (tests/cluster/netns.sh): with one straggler per
// step (a different rank each step, drawn from the step number), solo rounds must finish
// sooner than sync rounds, and no data may be lost: after flush, the sum of all results
// equals the sum of all inputs. Prints one line per mode on rank 0; exit 0 when both hold.
//
//   imbalance_check [ROUNDS [COUNT [DELAY_MS]]]     defaults 40, 16384 floats, 20 ms
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <pcoll/pcoll.h>

namespace {

using Clock = std::chrono::steady_clock;

struct Result {
  double seconds = 0;
  bool sums_ok = false;
};

// Runs `rounds` steps; the step's straggler sleeps `delay` before posting. Every rank posts
// all-ones, so the results plus the flush must add up to rounds * P in every element.
Result run_mode(pcoll_comm_t* comm, pcoll_mode_t mode, int rounds, size_t count,
                std::chrono::milliseconds delay) {
  const int rank = pcoll_comm_rank(comm);
  const int size = pcoll_comm_size(comm);
  pcoll_allreduce_t* h = nullptr;
  if (pcoll_allreduce_create(comm, count, PCOLL_FLOAT32, PCOLL_OP_SUM, mode, nullptr, &h) != PCOLL_SUCCESS) {
    std::fprintf(stderr, "imbalance_check: create: %s\n", pcoll_last_error());
    std::exit(1);
  }
  std::vector<float> send(count, 1.0f), recv(count, 0.0f);
  std::vector<double> total(count, 0.0);
  pcoll_barrier(comm);
  const auto start = Clock::now();
  for (int t = 0; t < rounds; ++t) {
    const int straggler = static_cast<int>((static_cast<unsigned>(t) * 2654435761u) % static_cast<unsigned>(size));
    if (rank == straggler) std::this_thread::sleep_for(delay);
    if (pcoll_allreduce_run(h, send.data(), recv.data(), nullptr) != PCOLL_SUCCESS) {
      std::fprintf(stderr, "imbalance_check: round %d: %s\n", t, pcoll_last_error());
      std::exit(1);
    }
    for (size_t i = 0; i < count; ++i) total[i] += recv[i];
  }
  if (pcoll_allreduce_flush(h, recv.data(), nullptr) != PCOLL_SUCCESS) {
    std::fprintf(stderr, "imbalance_check: flush: %s\n", pcoll_last_error());
    std::exit(1);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  bool ok = true;
  for (size_t i = 0; i < count; ++i) ok = ok && total[i] + recv[i] == static_cast<double>(rounds) * size;
  pcoll_allreduce_destroy(h);
  return {seconds, ok};
}

// Max over ranks of `value` (a sync allreduce; int64 microseconds).
int64_t max_over_ranks(pcoll_comm_t* comm, int64_t value) {
  pcoll_allreduce_t* h = nullptr;
  int64_t out = 0;
  if (pcoll_allreduce_create(comm, 1, PCOLL_INT64, PCOLL_OP_MAX, PCOLL_MODE_SYNC, nullptr, &h) != PCOLL_SUCCESS ||
      pcoll_allreduce_run(h, &value, &out, nullptr) != PCOLL_SUCCESS) {
    std::fprintf(stderr, "imbalance_check: %s\n", pcoll_last_error());
    std::exit(1);
  }
  pcoll_allreduce_destroy(h);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 40;
  const size_t count = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 16384;
  const std::chrono::milliseconds delay(argc > 3 ? std::atoi(argv[3]) : 20);
  pcoll_comm_t* comm = nullptr;
  if (pcoll_init(&comm) != PCOLL_SUCCESS) {
    std::fprintf(stderr, "imbalance_check: pcoll_init: %s\n", pcoll_last_error());
    return 1;
  }
  const int rank = pcoll_comm_rank(comm);
  const Result sync = run_mode(comm, PCOLL_MODE_SYNC, rounds, count, delay);
  const Result solo = run_mode(comm, PCOLL_MODE_SOLO, rounds, count, delay);
  // Slowest rank's time per mode; any rank's wrong sum fails every rank.
  const double sync_s = max_over_ranks(comm, static_cast<int64_t>(sync.seconds * 1e6)) / 1e6;
  const double solo_s = max_over_ranks(comm, static_cast<int64_t>(solo.seconds * 1e6)) / 1e6;
  const bool sums_ok = max_over_ranks(comm, sync.sums_ok && solo.sums_ok ? 0 : 1) == 0;
  if (rank == 0) {
    std::printf("imbalance_check: P=%d, %d rounds of %zu floats, one %lld ms straggler per round, provider %s\n",
                pcoll_comm_size(comm), rounds, count, static_cast<long long>(delay.count()),
                pcoll_comm_provider(comm));
    std::printf("  sync  %8.3f s\n  solo  %8.3f s  (%.2fx)\n  sums after flush: %s\n", sync_s, solo_s,
                solo_s > 0 ? sync_s / solo_s : 0.0, sums_ok ? "exact" : "WRONG");
  }
  pcoll_finalize(comm);
  if (!sums_ok) return 1;
  if (solo_s >= sync_s) {
    if (rank == 0) std::fprintf(stderr, "imbalance_check: solo did not finish before sync\n");
    return 1;
  }
  return 0;
}
