// Model-sized vectors (hundreds of MB) through every provider: a partial allreduce of
// `--count` float32 elements at P ranks, where one rank is late every other round, must
// complete and conserve every contribution. Each rank sends rank+1 in every element, so
// each round's result is the same value in every element (a chunk that was lost, doubled
// or misplaced shows up as a differing element), and the sum of all results after a flush
// equals the sum of all sends exactly (small integers are exact in float32).
//
//   pcollrun -n 4 large_vector_check --count 50000000 --rounds 20 --mode solo
#include <pcoll/pcoll.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "large_vector_check: %s\n", what.c_str());
  std::exit(1);
}

void check(int status, const char* what) {
  if (status != PCOLL_SUCCESS) die(std::string(what) + ": " + pcoll_last_error());
}

}  // namespace

int main(int argc, char** argv) {
  size_t count = 50'000'000;
  int rounds = 20;
  pcoll_mode_t mode = PCOLL_MODE_SOLO;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--count") count = std::strtoull(value.c_str(), nullptr, 10);
    else if (flag == "--rounds") rounds = std::atoi(value.c_str());
    else if (flag == "--mode") mode = value == "sync" ? PCOLL_MODE_SYNC : value == "majority" ? PCOLL_MODE_MAJORITY : PCOLL_MODE_SOLO;
    else die("unknown option " + flag + " (use --count N --rounds R --mode solo|sync|majority)");
  }
  if (count == 0 || rounds < 1) die("--count and --rounds must be positive");

  pcoll_comm_t* comm = nullptr;
  check(pcoll_init(&comm), "pcoll_init");
  const int rank = pcoll_comm_rank(comm), size = pcoll_comm_size(comm);
  pcoll_allreduce_t* h = nullptr;
  check(pcoll_allreduce_create(comm, count, PCOLL_FLOAT32, PCOLL_OP_SUM, mode, nullptr, &h), "pcoll_allreduce_create");

  std::vector<float> send(count, static_cast<float>(rank + 1)), recv(count);
  double total = 0;  // sum over rounds of the result's (uniform) element value
  auto check_uniform = [&](const char* when, int round) {
    const float first = recv[0];
    for (size_t i = 1; i < count; ++i)
      if (recv[i] != first)
        die(std::string(when) + " " + std::to_string(round) + ": element " + std::to_string(i) + " is " +
            std::to_string(recv[i]) + " but element 0 is " + std::to_string(first) + " (rank " +
            std::to_string(rank) + ")");
    total += first;
  };
  for (int t = 0; t < rounds; ++t) {
    // One rank, rotating, computes longer every other round: its data is carried.
    if (t % 2 == 1 && rank == (t / 2) % size) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    check(pcoll_allreduce_run(h, send.data(), recv.data(), nullptr), "pcoll_allreduce_run");
    check_uniform("round", t);
  }
  check(pcoll_allreduce_flush(h, recv.data(), nullptr), "pcoll_allreduce_flush");
  check_uniform("flush after round", rounds);
  const double expected = static_cast<double>(rounds) * size * (size + 1) / 2;
  if (total != expected)
    die("conservation: the results add up to " + std::to_string(total) + " per element, the sends to " +
        std::to_string(expected) + " (rank " + std::to_string(rank) + ")");
  check(pcoll_allreduce_destroy(h), "pcoll_allreduce_destroy");
  check(pcoll_finalize(comm), "pcoll_finalize");
  if (rank == 0)
    std::printf("large_vector_check: %zu float32 (%zu MB) x %d rounds at P=%d conserved\n", count,
                count * 4 / 1000000, rounds, size);
  return 0;
}
