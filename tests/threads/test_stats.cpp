// pcoll_allreduce_stats (docs/observability.md), rule by rule, with ranks as threads: every
// counter is checked against what the rounds' infos told the application, so the checks hold
// whatever the machine's load makes late.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <numeric>
#include <thread>
#include <vector>

#include <pcoll/pcoll.h>
#include <pcoll/pcoll.hpp>
#include "thread_ranks.hpp"

namespace {

constexpr size_t kCount = 64;

bool fresh_in(const pcoll_round_info_t& info, int rank) { return (info.fresh_mask[rank / 64] >> (rank % 64)) & 1u; }

// What the infos of the rounds a rank ran say the counters must be.
struct Expected {
  std::vector<uint64_t> fresh, late, run, longest, histogram;
  uint64_t caller_late = 0;
  explicit Expected(int size)
      : fresh(size), late(size), run(size), longest(size), histogram(static_cast<size_t>(size) + 1) {}
  void add(const pcoll_round_info_t& info, int size) {
    ++histogram[static_cast<size_t>(info.fresh)];
    caller_late += info.caller_late ? 1 : 0;
    for (int r = 0; r < size; ++r) {
      if (fresh_in(info, r)) {
        ++fresh[r];
        run[r] = 0;
      } else {
        ++late[r];
        longest[r] = std::max(longest[r], ++run[r]);
      }
    }
  }
};

pcoll_allreduce_stats_t stats_of(pcoll_allreduce_t* h) {
  pcoll_allreduce_stats_t s{};
  s.size = sizeof s;
  REQUIRE(pcoll_allreduce_stats(h, &s) == PCOLL_SUCCESS);
  REQUIRE(s.size == sizeof s);
  return s;
}

std::vector<uint64_t> as_vector(const uint64_t* values, size_t n) { return {values, values + n}; }

// Runs `rounds` rounds of a `mode` handle on P threads, rank `slow` sleeping before each
// post, then a flush, and checks every counter against the infos on every rank.
void run_and_check(int size, pcoll_mode_t mode, int rounds, int slow) {
  thread_ranks::run(size, [&](pcoll_comm_t* comm) {
    const int rank = pcoll_comm_rank(comm);
    pcoll_allreduce_t* h = nullptr;
    REQUIRE(pcoll_allreduce_create(comm, kCount, PCOLL_FLOAT32, PCOLL_OP_SUM, mode, nullptr, &h) == PCOLL_SUCCESS);
    const pcoll_allreduce_stats_t before = stats_of(h);
    // Another rank's post may already have run round 0 without this one (max_lag 1).
    CHECK(before.rounds <= (mode == PCOLL_MODE_SYNC ? 0u : 1u));
    CHECK(before.nranks == size);
    CHECK(before.registered_bytes > 0);
    CHECK(before.memory_bytes >= before.registered_bytes);
    std::vector<float> send(kCount, 1.0f), recv(kCount);
    Expected expected(size);
    bool last_late = false;
    for (int t = 0; t < rounds; ++t) {
      if (rank == slow) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      pcoll_round_info_t info{};
      REQUIRE(pcoll_allreduce_run(h, send.data(), recv.data(), &info) == PCOLL_SUCCESS);
      expected.add(info, size);
      last_late = info.caller_late != 0;
    }
    pcoll_round_info_t info{};
    REQUIRE(pcoll_allreduce_flush(h, recv.data(), &info) == PCOLL_SUCCESS);
    const pcoll_allreduce_stats_t s = stats_of(h);
    CHECK(s.rounds == static_cast<uint64_t>(rounds) + 1);
    CHECK(s.flushes == 1);
    CHECK(s.flushes_carried == (last_late ? 1u : 0u));
    CHECK(as_vector(s.fresh_rounds, size) == expected.fresh);
    CHECK(as_vector(s.late_rounds, size) == expected.late);
    CHECK(as_vector(s.longest_late_run, size) == expected.longest);
    CHECK(as_vector(s.fresh_histogram, size + 1) == expected.histogram);
    CHECK(s.late_rounds[rank] == expected.caller_late);
    CHECK(s.rounds_while_computing <= s.rounds);
    CHECK(s.bytes_written > 0);
    CHECK(s.registered_bytes == before.registered_bytes);
    if (mode == PCOLL_MODE_SYNC) {
      CHECK(expected.histogram[size] == static_cast<uint64_t>(rounds));
      CHECK(s.rounds_initiated == 0);
    }
    // Waiting for the slow rank shows as blocked time on the others.
    if (rank != slow) CHECK(s.blocked_ns > 0);
    CHECK(pcoll_allreduce_destroy(h) == PCOLL_SUCCESS);
  });
}

}  // namespace

TEST_CASE("stats of a sync handle: every rank fresh in every round, blocked while the slow rank sleeps") {
  run_and_check(3, PCOLL_MODE_SYNC, 8, 2);
}

TEST_CASE("stats of a solo handle agree with the rounds' infos: fresh, late, longest late run, histogram") {
  run_and_check(3, PCOLL_MODE_SOLO, 12, 1);
  run_and_check(4, PCOLL_MODE_MAJORITY, 12, 3);
}

TEST_CASE("a solo rank that sleeps before every post is late in some round, and counted so on every rank") {
  thread_ranks::run(2, [](pcoll_comm_t* comm) {
    const int rank = pcoll_comm_rank(comm);
    pcoll_allreduce_t* h = nullptr;
    REQUIRE(pcoll_allreduce_create(comm, kCount, PCOLL_FLOAT32, PCOLL_OP_SUM, PCOLL_MODE_SOLO, nullptr, &h) == PCOLL_SUCCESS);
    std::vector<float> send(kCount, 1.0f), recv(kCount);
    for (int t = 0; t < 10; ++t) {
      if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      REQUIRE(pcoll_allreduce_run(h, send.data(), recv.data(), nullptr) == PCOLL_SUCCESS);
    }
    REQUIRE(pcoll_allreduce_flush(h, recv.data(), nullptr) == PCOLL_SUCCESS);
    const pcoll_allreduce_stats_t s = stats_of(h);
    CHECK(s.late_rounds[1] >= 1);
    CHECK(s.longest_late_run[1] >= 1);
    CHECK(s.late_rounds[1] >= s.late_rounds[0]);
    CHECK(pcoll_allreduce_destroy(h) == PCOLL_SUCCESS);
  });
}

TEST_CASE("a caller that knows a shorter struct gets its fields only; a size too small or NULL is refused") {
  thread_ranks::run(2, [](pcoll_comm_t* comm) {
    pcoll_allreduce_t* h = nullptr;
    REQUIRE(pcoll_allreduce_create(comm, kCount, PCOLL_FLOAT32, PCOLL_OP_SUM, PCOLL_MODE_SYNC, nullptr, &h) == PCOLL_SUCCESS);
    std::vector<float> send(kCount, 1.0f), recv(kCount);
    REQUIRE(pcoll_allreduce_run(h, send.data(), recv.data(), nullptr) == PCOLL_SUCCESS);
    // An older caller's struct ends before the per-rank arrays: they are left as they were.
    pcoll_allreduce_stats_t old{};
    old.size = offsetof(pcoll_allreduce_stats_t, fresh_rounds);
    const uint64_t marker = 7;
    old.fresh_rounds = &marker;
    REQUIRE(pcoll_allreduce_stats(h, &old) == PCOLL_SUCCESS);
    CHECK(old.size == offsetof(pcoll_allreduce_stats_t, fresh_rounds));
    CHECK(old.rounds == 1);
    CHECK(old.fresh_rounds == &marker);
    pcoll_allreduce_stats_t tiny{};
    tiny.size = 1;
    CHECK(pcoll_allreduce_stats(h, &tiny) == PCOLL_ERR_INVALID_ARGUMENT);
    CHECK(pcoll_allreduce_stats(h, nullptr) == PCOLL_ERR_INVALID_ARGUMENT);
    CHECK(pcoll_allreduce_stats(nullptr, &tiny) == PCOLL_ERR_INVALID_ARGUMENT);
    CHECK(pcoll_allreduce_destroy(h) == PCOLL_SUCCESS);
  });
}

TEST_CASE("the C++ wrapper copies the counters and the per-rank arrays") {
  // pcoll::allreduce owns handles made by pcoll_init; here only the copy is checked.
  const uint64_t fresh[2] = {3, 1}, late[2] = {0, 2}, longest[2] = {0, 2}, histogram[3] = {0, 2, 1};
  pcoll_allreduce_stats_t c{};
  c.size = sizeof c;
  c.nranks = 2;
  c.rounds = 3;
  c.fresh_rounds = fresh;
  c.late_rounds = late;
  c.longest_late_run = longest;
  c.fresh_histogram = histogram;
  const pcoll::allreduce_stats s = pcoll::detail::copy_stats(c);
  CHECK(s.rounds == 3);
  CHECK(s.late_rounds == std::vector<uint64_t>{0, 2});
  CHECK(s.fresh_histogram == std::vector<uint64_t>{0, 2, 1});
}

int main(int argc, char** argv) {
  thread_ranks::use_inproc_provider();
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}
