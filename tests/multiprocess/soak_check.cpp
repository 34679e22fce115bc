// Soak: conservation checked exactly over many rounds. Every rank sends int64 values that
// depend on (rank, round, element) and computes for a random time before some rounds, so
// ranks are late in a random pattern; after a flush, the sum of all results must equal the
// sum of all sends exactly, element by element, and every rank must have seen the same
// results (a running hash compared at the end).
//
//   pcollrun -n 4 soak_check --rounds 1000000 --mode solo [--count 16] [--seed 1]
#include <pcoll/pcoll.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "soak_check: %s\n", what.c_str());
  std::exit(1);
}

void check(int status, const char* what) {
  if (status != PCOLL_SUCCESS) die(std::string(what) + ": " + pcoll_last_error());
}

int64_t input(int rank, uint64_t round, size_t i) {
  return static_cast<int64_t>((round * 2654435761u + static_cast<uint64_t>(rank) * 40503u + i * 97u) % 1000) - 500;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t rounds = 10000, seed = 1;
  size_t count = 16;
  pcoll_mode_t mode = PCOLL_MODE_SOLO;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--rounds") rounds = std::strtoull(value.c_str(), nullptr, 10);
    else if (flag == "--count") count = std::strtoull(value.c_str(), nullptr, 10);
    else if (flag == "--seed") seed = std::strtoull(value.c_str(), nullptr, 10);
    else if (flag == "--mode") {
      if (value == "solo") mode = PCOLL_MODE_SOLO;
      else if (value == "majority") mode = PCOLL_MODE_MAJORITY;
      else if (value == "sync") mode = PCOLL_MODE_SYNC;
      else die("--mode " + value + " is not solo, majority or sync");
    } else {
      die("unknown option " + flag + " (use --rounds N --mode solo|majority|sync --count N --seed S)");
    }
  }
  if (rounds == 0 || count == 0) die("--rounds and --count must be positive");

  pcoll_comm_t* comm = nullptr;
  check(pcoll_init(&comm), "pcoll_init");
  const int rank = pcoll_comm_rank(comm), size = pcoll_comm_size(comm);
  pcoll_allreduce_t* h = nullptr;
  check(pcoll_allreduce_create(comm, count, PCOLL_INT64, PCOLL_OP_SUM, mode, nullptr, &h), "pcoll_allreduce_create");

  std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(rank));
  std::uniform_int_distribution<int> delay_us(0, 200);
  std::vector<int64_t> send(count), recv(count), results(count, 0), inputs(count, 0);
  uint64_t hash = 1469598103934665603ull, late_rounds = 0;
  const auto started = std::chrono::steady_clock::now();
  for (uint64_t t = 0; t <= rounds; ++t) {
    pcoll_round_info_t info{};
    if (t == rounds) {
      check(pcoll_allreduce_flush(h, recv.data(), &info), "pcoll_allreduce_flush");
    } else {
      for (size_t i = 0; i < count; ++i) send[i] = input(rank, t, i);
      for (int r = 0; r < size; ++r)
        for (size_t i = 0; i < count; ++i) inputs[i] += input(r, t, i);
      // One round in eight, this rank computes a little longer than the others.
      if (rng() % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
      check(pcoll_allreduce_run(h, send.data(), recv.data(), &info), "pcoll_allreduce_run");
      late_rounds += info.caller_late ? 1 : 0;
    }
    for (size_t i = 0; i < count; ++i) {
      results[i] += recv[i];
      hash = (hash ^ static_cast<uint64_t>(recv[i])) * 1099511628211ull;
    }
  }
  for (size_t i = 0; i < count; ++i)
    if (results[i] != inputs[i])
      die("rank " + std::to_string(rank) + ": element " + std::to_string(i) + " of the results adds up to " +
          std::to_string(results[i]) + ", the sends to " + std::to_string(inputs[i]));
  // Every rank saw the same results: the hashes' max and min over ranks agree.
  pcoll_allreduce_t* agree = nullptr;
  check(pcoll_allreduce_create(comm, 2, PCOLL_INT64, PCOLL_OP_MAX, PCOLL_MODE_SYNC, nullptr, &agree), "create");
  const int64_t mine[2] = {static_cast<int64_t>(hash >> 1), -static_cast<int64_t>(hash >> 1)};
  int64_t both[2];
  check(pcoll_allreduce_run(agree, mine, both, nullptr), "hash agreement");
  if (both[0] != -both[1]) die("rank " + std::to_string(rank) + ": the ranks' results differ (hashes disagree)");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  check(pcoll_allreduce_destroy(agree), "destroy");
  check(pcoll_allreduce_destroy(h), "destroy");
  check(pcoll_finalize(comm), "pcoll_finalize");
  if (rank == 0)
    std::printf("soak_check: %s, P=%d, %llu rounds of %zu int64 + flush conserved exactly, identical on every rank; "
                "rank 0 late in %llu rounds; %.1f s\n",
                mode == PCOLL_MODE_SOLO ? "solo" : mode == PCOLL_MODE_MAJORITY ? "majority" : "sync", size,
                static_cast<unsigned long long>(rounds), count, static_cast<unsigned long long>(late_rounds), seconds);
  return 0;
}
