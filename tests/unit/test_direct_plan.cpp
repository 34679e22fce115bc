// Unit tests of the direct plan's executor (lib/collectives/direct_executor): simulated
// ranks in one process that read each other's work buffers as the engine reads mapped
// memory, with notices delivered in random orders and ranks running ahead into the next
// round as soon as they completed one (overwriting their work buffer with the next
// contribution, as the engine does). A rank that read a peer's buffer before the plan
// allows it, or overwrote its own while a peer still reads it, gets a wrong sum.
#include <doctest/doctest.h>

#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include <collectives/direct_executor.hpp>
#include <support/error.hpp>

using namespace pcoll;

namespace {

int64_t contribution(int rank, uint64_t round, size_t i) {
  return static_cast<int64_t>((rank + 1) * 1000003 + round * 7919 + i * 31);
}

struct Notice {
  int to;
  int from;
  uint32_t tag;
  uint64_t round;
};

struct Job;

struct RankPort final : ExecutorPort {
  Job* job = nullptr;
  int rank = 0;
  void write_chunk(const Step&, const Chunk&, uint64_t, uint32_t) override { FAIL("the direct plan wrote a chunk"); }
  void reduce_chunk(const Step&, const Chunk&, uint64_t, bool) override { FAIL("the direct plan reduced a chunk"); }
  void send_credit(const Step&, uint64_t, uint32_t) override { FAIL("the direct plan sent a credit"); }
  void settle_writes() override {}
  void signal_peer(int peer, uint32_t tag, uint64_t round) override;
  void reduce_from_peer(int peer, size_t offset, size_t count, uint64_t round) override;
  void copy_from_peer(int peer, size_t offset, size_t count, uint64_t round) override;
  void final_elements(size_t offset, size_t count, uint64_t round) override;
};

struct Job {
  int ranks;
  size_t count;
  std::vector<std::vector<int64_t>> work;
  std::vector<std::vector<int>> delivered;  // [rank][element]: final_elements calls this round
  std::vector<DirectExecutor> executors;
  std::vector<RankPort> ports;
  std::vector<uint64_t> completed;  // rounds each rank completed
  std::deque<Notice> pending;
  std::mt19937 random;

  Job(int p, size_t n, size_t block, unsigned seed) : ranks(p), count(n), random(seed) {
    for (int r = 0; r < p; ++r) {
      executors.emplace_back(p, r, n, block, 0);
      work.emplace_back(n);
      delivered.emplace_back(n, 0);
    }
    ports.resize(static_cast<size_t>(p));
    for (int r = 0; r < p; ++r) {
      ports[static_cast<size_t>(r)].job = this;
      ports[static_cast<size_t>(r)].rank = r;
    }
    completed.assign(static_cast<size_t>(p), 0);
    for (int r = 0; r < p; ++r) join(r);
  }

  // The rank that starts `round` (it initiated it), or -1: every third round nobody does.
  int starter(uint64_t round) const { return round % 3 == 2 ? -1 : static_cast<int>((round * 5) % ranks); }

  void join(int r) {
    const uint64_t round = completed[static_cast<size_t>(r)];
    for (size_t i = 0; i < count; ++i) work[static_cast<size_t>(r)][i] = contribution(r, round, i);
    std::fill(delivered[static_cast<size_t>(r)].begin(), delivered[static_cast<size_t>(r)].end(), 0);
    executors[static_cast<size_t>(r)].begin_round(starter(round) == r);
  }

  // Runs every rank to `rounds` rounds, delivering notices in random order.
  void run(uint64_t rounds) {
    uint64_t steps = 0;
    for (;;) {
      bool all_done = true;
      for (int r = 0; r < ranks; ++r) all_done = all_done && completed[static_cast<size_t>(r)] >= rounds;
      if (all_done && pending.empty()) return;
      REQUIRE(++steps < 1000000);
      const bool deliver = !pending.empty() && random() % 2 == 0;
      if (deliver) {
        const size_t pick = random() % pending.size();
        const Notice n = pending[pick];
        pending.erase(pending.begin() + static_cast<long>(pick));
        executors[static_cast<size_t>(n.to)].on_data(n.round, completed[static_cast<size_t>(n.to)], n.tag,
                                                     static_cast<uint32_t>(n.from));
        continue;
      }
      const int r = static_cast<int>(random() % static_cast<unsigned>(ranks));
      const uint64_t round = completed[static_cast<size_t>(r)];
      if (round >= rounds) continue;
      if (!executors[static_cast<size_t>(r)].run(round, ports[static_cast<size_t>(r)])) continue;
      for (size_t i = 0; i < count; ++i) {
        int64_t sum = 0;
        for (int q = 0; q < ranks; ++q) sum += contribution(q, round, i);
        REQUIRE(work[static_cast<size_t>(r)][i] == sum);
        REQUIRE(delivered[static_cast<size_t>(r)][i] == 1);
      }
      // Every peer of the rank that started the round heard it say so (itself hears nobody).
      const int started = starter(round);
      REQUIRE(executors[static_cast<size_t>(r)].started_by(round) == (started == r ? -1 : started));
      executors[static_cast<size_t>(r)].end_round(round);
      REQUIRE(executors[static_cast<size_t>(r)].started_by(round) == -1);
      ++completed[static_cast<size_t>(r)];
      if (completed[static_cast<size_t>(r)] < rounds) join(r);
    }
  }
};

void RankPort::signal_peer(int peer, uint32_t tag, uint64_t round) { job->pending.push_back({peer, rank, tag, round}); }

void RankPort::reduce_from_peer(int peer, size_t offset, size_t count, uint64_t) {
  REQUIRE(peer != rank);
  for (size_t i = offset; i < offset + count; ++i)
    job->work[static_cast<size_t>(rank)][i] += job->work[static_cast<size_t>(peer)][i];
}

void RankPort::copy_from_peer(int peer, size_t offset, size_t count, uint64_t) {
  REQUIRE(peer != rank);
  for (size_t i = offset; i < offset + count; ++i)
    job->work[static_cast<size_t>(rank)][i] = job->work[static_cast<size_t>(peer)][i];
}

void RankPort::final_elements(size_t offset, size_t count, uint64_t) {
  for (size_t i = offset; i < offset + count; ++i) ++job->delivered[static_cast<size_t>(rank)][i];
}

}  // namespace

// A port that records the tags of the notices it is asked to send, and does nothing else.
struct TagRecorder final : ExecutorPort {
  std::vector<uint32_t> tags;
  void write_chunk(const Step&, const Chunk&, uint64_t, uint32_t) override {}
  void reduce_chunk(const Step&, const Chunk&, uint64_t, bool) override {}
  void send_credit(const Step&, uint64_t, uint32_t) override {}
  void settle_writes() override {}
  void signal_peer(int, uint32_t tag, uint64_t) override { tags.push_back(tag); }
  void reduce_from_peer(int, size_t, size_t, uint64_t) override {}
  void copy_from_peer(int, size_t, size_t, uint64_t) override {}
};

TEST_CASE("direct plan: every rank gets every round's sum, in any notice order, ranks running ahead") {
  for (const int ranks : {2, 3, 4, 5, 8}) {
    for (const size_t count : {size_t{1}, size_t{7}, size_t{64}, size_t{1001}}) {
      for (const size_t block : {size_t{1}, size_t{16}, size_t{4096}}) {
        for (unsigned seed = 1; seed <= 3; ++seed) {
          CAPTURE(ranks);
          CAPTURE(count);
          CAPTURE(block);
          CAPTURE(seed);
          Job job(ranks, count, block, seed);
          job.run(6);
        }
      }
    }
  }
}

TEST_CASE("direct plan: slices cover the vector once, in rank order") {
  for (const int ranks : {2, 3, 7}) {
    for (const size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{100}}) {
      DirectExecutor executor(ranks, 0, count, 8, 0);
      size_t next = 0;
      for (int r = 0; r < ranks; ++r) {
        CHECK(executor.slice_offset(r) == next);
        next += executor.slice_elems(r);
      }
      CHECK(next == count);
    }
  }
}

TEST_CASE("direct plan: duplicates are ignored, impossible notices are protocol errors") {
  DirectExecutor executor(4, 1, 100, 16, 3);
  CHECK(executor.on_data(0, 0, 0, 2));
  CHECK_FALSE(executor.on_data(0, 0, 0, 2));  // the same notice twice
  CHECK(executor.duplicates() == 1);
  CHECK(executor.on_data(1, 0, 0, 2));        // the next round, from a rank ahead
  const auto protocol = [&](uint64_t round, uint32_t tag, uint32_t sender, const char* text) {
    try {
      executor.on_data(round, 0, tag, sender);
      FAIL("accepted: " << text);
    } catch (const Error& e) {
      CHECK(e.code() == Errc::protocol);
      CHECK(std::string(e.what()).find(text) != std::string::npos);
    }
  };
  protocol(2, 0, 2, "round 2");                   // beyond the next round
  protocol(0, DirectExecutor::kTags, 2, "tag 4");
  protocol(0, 0, 4, "names rank 4");               // not a rank of the job
  protocol(0, 0, 1, "names rank 1");               // this rank itself
  CHECK_THROWS_AS(executor.on_credit(0, 0, 0), Error);
  CHECK_THROWS_AS(DirectExecutor(1, 0, 10, 1, 0), Error);
}

TEST_CASE("direct plan: a rank that started the round says so in its ready notice, which counts as ready") {
  DirectExecutor executor(3, 0, 30, 8, 0);
  TagRecorder port;
  std::vector<uint32_t>& tags = port.tags;
  CHECK(executor.announces_start_to(1));
  CHECK(executor.announces_start_to(2));
  CHECK_FALSE(executor.announces_start_to(0));  // itself
  executor.begin_round(true);
  CHECK_FALSE(executor.run(0, port));
  CHECK(tags == std::vector<uint32_t>{DirectExecutor::kStartedReady, DirectExecutor::kStartedReady});
  CHECK(executor.started_by(0) == -1);
  CHECK(executor.on_data(0, 0, DirectExecutor::kStartedReady, 2));
  CHECK(executor.started_by(0) == 2);
  CHECK(executor.started_by(1) == -1);
  CHECK_FALSE(executor.on_data(0, 0, 0, 2));  // rank 2's ready notice again: a duplicate
  CHECK(executor.on_data(0, 0, 0, 1));
  CHECK(executor.awaited_peer() == -1);       // phase 0 is complete: both peers are ready
  executor.end_round(0);
  CHECK(executor.started_by(0) == -1);
  tags.clear();
  executor.begin_round(false);
  CHECK_FALSE(executor.run(2, port));
  CHECK(tags == std::vector<uint32_t>{0, 0});
}

TEST_CASE("direct plan: the awaited peer is the first one not heard from in the active phase") {
  DirectExecutor executor(3, 0, 30, 8, 0);
  TagRecorder port;
  CHECK(executor.awaited_peer() == -1);
  executor.begin_round(false);
  CHECK_FALSE(executor.run(0, port));
  CHECK(executor.awaited_peer() == 1);
  executor.on_data(0, 0, 0, 1);
  CHECK(executor.awaited_peer() == 2);
}
