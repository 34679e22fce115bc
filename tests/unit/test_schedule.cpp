// Unit tests of the reduction plans (src/collectives/schedule): structure rules checked on every
// plan, and an in-memory simulation of P ranks executing their plans with the real
// kernels, which must leave every rank with the exact (integer) or bitwise identical
// (float) reduction. Pure logic: no transport involved.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "dtype.hpp"
#include "error.hpp"
#include "reduce_kernels.hpp"
#include "schedule.hpp"

using namespace pcoll;

namespace {

constexpr ReduceAlgorithm kAlgorithms[] = {ReduceAlgorithm::recursive_doubling,
                                           ReduceAlgorithm::rabenseifner};
constexpr int kMaxRanks = 33;
constexpr std::size_t kBigCount = (std::size_t{1} << 20) + 3;
// Big vectors only for a few P, to keep the suite fast: powers of two and fold-ins, more
// of them for Rabenseifner, the algorithm meant for big vectors.
std::vector<int> big_ranks_for(ReduceAlgorithm algorithm) {
  if (algorithm == ReduceAlgorithm::rabenseifner) return {1, 2, 3, 8, 13};
  return {3, 4};
}

std::vector<std::size_t> counts_for(int ranks) {
  const auto p = static_cast<std::size_t>(ranks);
  std::set<std::size_t> counts = {0, 1, 2, 7, p - 1, p, p + 1, 1000};
  return {counts.begin(), counts.end()};
}

std::vector<ReducePlan> plans_for(ReduceAlgorithm algorithm, int ranks, std::size_t count) {
  std::vector<ReducePlan> plans;
  for (int r = 0; r < ranks; ++r) plans.push_back(make_plan(algorithm, ranks, r, count));
  return plans;
}

std::string describe(ReduceAlgorithm algorithm, int ranks, std::size_t count) {
  return std::string(algorithm_name(algorithm)) + " P=" + std::to_string(ranks) +
         " count=" + std::to_string(count);
}

// Calls check(algorithm, ranks, count) on every small configuration.
template <class Check>
void for_each_configuration(Check check) {
  for (const ReduceAlgorithm algorithm : kAlgorithms) {
    for (int ranks = 1; ranks <= kMaxRanks; ++ranks) {
      for (const std::size_t count : counts_for(ranks)) check(algorithm, ranks, count);
    }
  }
}

const Step* find_step(const ReducePlan& plan, int index) {
  for (const Step& s : plan.steps) {
    if (s.index == index) return &s;
  }
  return nullptr;
}

bool overlaps(std::size_t a_offset, std::size_t a_count, std::size_t b_offset, std::size_t b_count) {
  return a_count != 0 && b_count != 0 && a_offset < b_offset + b_count && b_offset < a_offset + a_count;
}

// --- simulation ------------------------------------------------------------------------------

// memcpy / memcmp that accept the null data() of empty vectors.
void copy_bytes(std::byte* destination, const std::byte* source, std::size_t bytes) {
  if (bytes != 0) std::memcpy(destination, source, bytes);
}
bool same_bytes(const void* a, const void* b, std::size_t bytes) {
  return bytes == 0 || std::memcmp(a, b, bytes) == 0;
}

// One simulated rank: its work buffer and the landing area of one round parity.
struct SimRank {
  std::vector<std::byte> work;
  std::vector<std::byte> landing;
};

// Executes the plans of all ranks step index by step index. Within a step index every
// write happens before any reduction (a rank reduces only after its own send completed,
// and the peer's data has arrived); writes go rank by rank without snapshots, so a plan
// that wrote into a range its receiver still sends in the same step would corrupt data.
// Transfers are cut into chunks of max_chunk_elems to check that both ends agree on them.
void simulate(const std::vector<ReducePlan>& plans, pcoll_dtype_t dtype, pcoll_op_t op,
              std::vector<SimRank>& sim, std::size_t max_chunk_elems) {
  const std::size_t esize = wire_element_bytes(dtype);
  const int step_indices = plans.at(0).step_index_count;
  for (int index = 0; index < step_indices; ++index) {
    for (std::size_t r = 0; r < plans.size(); ++r) {
      const Step* step = find_step(plans[r], index);
      if (step == nullptr || !step->sends()) continue;
      const auto q = static_cast<std::size_t>(step->peer);
      const Step* theirs = find_step(plans[q], index);
      REQUIRE(theirs != nullptr);
      const std::vector<Chunk> sent = send_chunks(*step, max_chunk_elems);
      REQUIRE(sent.size() == recv_chunks(*theirs, max_chunk_elems).size());
      for (const Chunk& c : sent) {
        std::byte* destination =
            step->peer_lands_in_result
                ? sim[q].work.data() + c.offset * esize
                : sim[q].landing.data() + (plans[q].slot_offset(step->peer_slot) + c.slot_delta) * esize;
        copy_bytes(destination, sim[r].work.data() + c.offset * esize, c.count * esize);
      }
    }
    for (std::size_t r = 0; r < plans.size(); ++r) {
      const Step* step = find_step(plans[r], index);
      if (step == nullptr || !step->reduces()) continue;
      for (const Chunk& c : recv_chunks(*step, max_chunk_elems)) {
        const std::byte* arrived =
            sim[r].landing.data() + (plans[r].slot_offset(step->slot) + c.slot_delta) * esize;
        reduce_into(dtype, op, sim[r].work.data() + c.offset * esize, arrived, c.count);
      }
    }
  }
}

std::vector<SimRank> make_ranks(const std::vector<ReducePlan>& plans, pcoll_dtype_t dtype) {
  const std::size_t esize = wire_element_bytes(dtype);
  std::vector<SimRank> sim(plans.size());
  for (std::size_t r = 0; r < plans.size(); ++r) {
    sim[r].work.resize(plans[r].count * esize);
    // Poisoned so that a read of a slot nobody wrote shows up in the result.
    sim[r].landing.assign(plans[r].slot_total_elems() * esize, std::byte{0x5a});
  }
  return sim;
}

std::size_t chunk_size_for(std::size_t count) { return std::max<std::size_t>(1, count / 3 + 1); }

// Integers: every rank must hold exactly the wrapped sum (and min) of all contributions.
void check_integer_reduction(ReduceAlgorithm algorithm, int ranks, std::size_t count,
                             const std::vector<pcoll_op_t>& ops = {PCOLL_OP_SUM, PCOLL_OP_MIN}) {
  const std::vector<ReducePlan> plans = plans_for(algorithm, ranks, count);
  for (const pcoll_op_t op : ops) {
    std::vector<SimRank> sim = make_ranks(plans, PCOLL_INT64);
    std::vector<std::int64_t> expected(count);
    fill_identity(PCOLL_INT64, op, reinterpret_cast<std::byte*>(expected.data()), count);
    std::mt19937_64 rng(static_cast<std::uint64_t>(ranks) * 1000003u + count);
    for (auto& rank : sim) {
      auto* values = reinterpret_cast<std::int64_t*>(rank.work.data());
      for (std::size_t i = 0; i < count; ++i) {
        values[i] = static_cast<std::int64_t>(rng());
        expected[i] = op == PCOLL_OP_SUM
                          ? static_cast<std::int64_t>(static_cast<std::uint64_t>(expected[i]) +
                                                      static_cast<std::uint64_t>(values[i]))
                          : std::min(expected[i], values[i]);
      }
    }
    simulate(plans, PCOLL_INT64, op, sim, chunk_size_for(count));
    for (int r = 0; r < ranks; ++r) {
      INFO(describe(algorithm, ranks, count) << " op=" << op_name(op) << " rank " << r);
      REQUIRE(same_bytes(sim[static_cast<std::size_t>(r)].work.data(), expected.data(),
                         count * sizeof(std::int64_t)));
    }
  }
}

// Floats: every rank must hold the same bits, close to the exact sum.
void check_float_reduction(ReduceAlgorithm algorithm, int ranks, std::size_t count, pcoll_op_t op) {
  const std::vector<ReducePlan> plans = plans_for(algorithm, ranks, count);
  std::vector<SimRank> sim = make_ranks(plans, PCOLL_FLOAT32);
  std::vector<double> exact(count, 0.0);
  std::mt19937_64 rng(static_cast<std::uint64_t>(ranks) * 7919u + count);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& rank : sim) {
    auto* values = reinterpret_cast<float*>(rank.work.data());
    for (std::size_t i = 0; i < count; ++i) {
      values[i] = dist(rng);
      // Sprinkle signed zeros and NaNs: the order-sensitive cases of min/max.
      if (i % 97 == 5) values[i] = (rng() % 2) ? 0.0f : -0.0f;
      if (i % 389 == 11 && rng() % 4 == 0) values[i] = std::nanf("");
      exact[i] += values[i];
    }
  }
  simulate(plans, PCOLL_FLOAT32, op, sim, chunk_size_for(count));
  for (int r = 1; r < ranks; ++r) {
    INFO(describe(algorithm, ranks, count) << " op=" << op_name(op) << " rank " << r);
    REQUIRE(sim[static_cast<std::size_t>(r)].work == sim[0].work);
  }
  if (op == PCOLL_OP_SUM) {
    const auto* result = reinterpret_cast<const float*>(sim[0].work.data());
    for (std::size_t i = 0; i < count; ++i) {
      if (std::isnan(exact[i])) {
        REQUIRE(std::isnan(result[i]));
      } else {
        REQUIRE(std::fabs(result[i] - exact[i]) <= 1e-5 * ranks + 1e-6);
      }
    }
  }
}

// Asynchronous execution with random timing: each rank runs its steps in order, issuing
// its send at the start of a step and finishing the step (reducing, if it reduces) once
// its send has been delivered and the peer's data has arrived. Deliveries happen at random
// moments, reading the sender's buffer and writing the receiver's at delivery time, which
// is the worst case for both source reuse and early arrival. Any plan that relies on more
// ordering than those rules give ends with a wrong integer sum for some seed.
void check_async_execution(ReduceAlgorithm algorithm, int ranks, std::size_t count, std::uint64_t seed) {
  const std::vector<ReducePlan> plans = plans_for(algorithm, ranks, count);
  std::vector<SimRank> sim = make_ranks(plans, PCOLL_INT64);
  constexpr std::size_t esize = sizeof(std::int64_t);
  std::vector<std::int64_t> expected(count, 0);
  std::mt19937_64 rng(seed);
  for (auto& rank : sim) {
    auto* values = reinterpret_cast<std::int64_t*>(rank.work.data());
    for (std::size_t i = 0; i < count; ++i) {
      values[i] = static_cast<std::int64_t>(rng() % 1000);
      expected[i] += values[i];
    }
  }
  struct Message {
    std::size_t from;
    const Step* step;  // the sender's step
  };
  const auto n = static_cast<std::size_t>(ranks);
  std::vector<std::size_t> position(n, 0);       // next step of each rank
  std::vector<bool> issued(n, false);            // current step's send issued
  std::vector<bool> delivered(n, false);         // current step's send delivered
  std::vector<std::set<int>> arrived(n);         // step indices whose incoming data arrived
  std::vector<Message> in_flight;
  for (;;) {
    // Enabled actions: 0..in_flight-1 deliver a message, then one per rank that can move.
    std::vector<std::size_t> movable;
    for (std::size_t r = 0; r < n; ++r) {
      if (position[r] >= plans[r].steps.size()) continue;
      const Step& step = plans[r].steps[position[r]];
      const bool can_issue = step.sends() && !issued[r];
      const bool can_finish = (!step.sends() || delivered[r]) &&
                              (!step.receives() || arrived[r].count(step.index) != 0);
      if (can_issue || can_finish) movable.push_back(r);
    }
    const std::size_t choices = in_flight.size() + movable.size();
    if (choices == 0) break;
    const std::size_t pick = rng() % choices;
    if (pick < in_flight.size()) {
      const Message m = in_flight[pick];
      in_flight.erase(in_flight.begin() + static_cast<std::ptrdiff_t>(pick));
      const Step& s = *m.step;
      const auto q = static_cast<std::size_t>(s.peer);
      std::byte* destination = s.peer_lands_in_result
                                   ? sim[q].work.data() + s.send_offset * esize
                                   : sim[q].landing.data() + plans[q].slot_offset(s.peer_slot) * esize;
      copy_bytes(destination, sim[m.from].work.data() + s.send_offset * esize, s.send_count * esize);
      arrived[q].insert(s.index);
      // The sender learns of the delivery through its completion queue.
      if (position[m.from] < plans[m.from].steps.size() && &plans[m.from].steps[position[m.from]] == m.step) {
        delivered[m.from] = true;
      }
      continue;
    }
    const std::size_t r = movable[pick - in_flight.size()];
    const Step& step = plans[r].steps[position[r]];
    if (step.sends() && !issued[r]) {
      issued[r] = true;
      in_flight.push_back(Message{r, &step});
      continue;
    }
    if (step.reduces()) {
      reduce_into(PCOLL_INT64, PCOLL_OP_SUM, sim[r].work.data() + step.recv_offset * esize,
                  sim[r].landing.data() + plans[r].slot_offset(step.slot) * esize, step.recv_count);
    }
    ++position[r];
    issued[r] = false;
    delivered[r] = false;
  }
  for (std::size_t r = 0; r < n; ++r) {
    INFO("rank " << r);
    REQUIRE(position[r] == plans[r].steps.size());
    REQUIRE(same_bytes(sim[r].work.data(), expected.data(), count * esize));
  }
}

}  // namespace

TEST_CASE("every rank ends with the exact integer reduction") {
  for_each_configuration([](ReduceAlgorithm algorithm, int ranks, std::size_t count) {
    check_integer_reduction(algorithm, ranks, count);
  });
  for (const ReduceAlgorithm algorithm : kAlgorithms) {
    for (const int ranks : big_ranks_for(algorithm)) {
      check_integer_reduction(algorithm, ranks, kBigCount, {PCOLL_OP_SUM});
    }
  }
}

TEST_CASE("float results are bitwise identical on all ranks") {
  for_each_configuration([](ReduceAlgorithm algorithm, int ranks, std::size_t count) {
    for (const pcoll_op_t op : {PCOLL_OP_SUM, PCOLL_OP_MIN, PCOLL_OP_MAX}) {
      check_float_reduction(algorithm, ranks, count, op);
    }
  });
  for (const ReduceAlgorithm algorithm : kAlgorithms) {
    for (const int ranks : big_ranks_for(algorithm)) {
      check_float_reduction(algorithm, ranks, kBigCount, PCOLL_OP_SUM);
    }
  }
}

TEST_CASE("every exchange is symmetric: if r sends to q at step s, q expects r at step s") {
  for_each_configuration([](ReduceAlgorithm algorithm, int ranks, std::size_t count) {
    const std::vector<ReducePlan> plans = plans_for(algorithm, ranks, count);
    for (const ReducePlan& plan : plans) {
      for (const Step& s : plan.steps) {
        INFO(describe(algorithm, ranks, count) << " rank " << plan.rank << " step " << s.index);
        REQUIRE(s.peer >= 0);
        REQUIRE(s.peer < ranks);
        REQUIRE(s.peer != plan.rank);
        const Step* t = find_step(plans[static_cast<std::size_t>(s.peer)], s.index);
        REQUIRE(t != nullptr);
        CHECK(t->peer == plan.rank);
        CHECK(s.sends() == t->receives());
        CHECK(s.receives() == t->sends());
        if (s.sends()) {
          // My data lands at the same offset of the peer's work buffer (or slot-relative).
          CHECK(s.send_offset == t->recv_offset);
          CHECK(s.send_count == t->recv_count);
          CHECK(s.peer_slot == t->slot);
          CHECK(s.peer_lands_in_result == t->lands_in_result);
          CHECK(t->reduces() != t->lands_in_result);
        }
      }
    }
  });
}

TEST_CASE("landing slots don't overlap, hold every incoming segment, one step each") {
  for_each_configuration([](ReduceAlgorithm algorithm, int ranks, std::size_t count) {
    const std::vector<ReducePlan> plans = plans_for(algorithm, ranks, count);
    for (const ReducePlan& plan : plans) {
      INFO(describe(algorithm, ranks, count) << " rank " << plan.rank);
      // Same layout on every rank: a writer uses its own plan's offsets for the peer's slot.
      REQUIRE(plan.slots.size() == plans[0].slots.size());
      for (std::size_t i = 0; i < plan.slots.size(); ++i) {
        CHECK(plan.slots[i].offset == plans[0].slots[i].offset);
        CHECK(plan.slots[i].elems == plans[0].slots[i].elems);
        if (i > 0) CHECK(plan.slots[i].offset >= plan.slots[i - 1].offset + plan.slots[i - 1].elems);
      }
      std::set<int> used_slots;
      std::set<int> indices;
      for (const Step& s : plan.steps) {
        CHECK(indices.insert(s.index).second);
        CHECK(s.index < plan.step_index_count);
        if (s.reduces()) {
          REQUIRE(s.slot >= 0);
          REQUIRE(static_cast<std::size_t>(s.slot) < plan.slots.size());
          CHECK(used_slots.insert(s.slot).second);
          CHECK(s.recv_count <= plan.slot_elems(s.slot));
          CHECK(!s.lands_in_result);
        } else {
          CHECK(s.slot == kNoSlot);
        }
        if (s.receives() && !s.reduces()) CHECK(s.lands_in_result);
        CHECK(s.send_offset + s.send_count <= count);
        CHECK(s.recv_offset + s.recv_count <= count);
      }
      // Steps run in index order.
      CHECK(std::is_sorted(plan.steps.begin(), plan.steps.end(),
                           [](const Step& a, const Step& b) { return a.index < b.index; }));
    }
  });
}

TEST_CASE("data landing in the result never overwrites what the receiver sends in that step") {
  for_each_configuration([](ReduceAlgorithm algorithm, int ranks, std::size_t count) {
    for (const ReducePlan& plan : plans_for(algorithm, ranks, count)) {
      for (const Step& s : plan.steps) {
        if (!s.lands_in_result || !s.sends()) continue;
        INFO(describe(algorithm, ranks, count) << " rank " << plan.rank << " step " << s.index);
        CHECK_FALSE(overlaps(s.recv_offset, s.recv_count, s.send_offset, s.send_count));
      }
    }
  });
}

TEST_CASE("plans give the exact result under any interleaving the execution rules allow") {
  for (const ReduceAlgorithm algorithm : kAlgorithms) {
    for (int ranks = 1; ranks <= kMaxRanks; ++ranks) {
      for (const std::size_t count : {std::size_t{1}, static_cast<std::size_t>(ranks) + 1, std::size_t{100}}) {
        for (std::uint64_t seed = 1; seed <= 3; ++seed) {
          INFO(describe(algorithm, ranks, count) << " seed " << seed);
          check_async_execution(algorithm, ranks, count, seed);
        }
      }
    }
  }
}

TEST_CASE("rabenseifner moves about 2*count elements per core rank") {
  for (int ranks = 2; ranks <= kMaxRanks; ++ranks) {
    const std::size_t count = 1000 * static_cast<std::size_t>(ranks);
    for (int r = 0; r < ranks; ++r) {
      const ReducePlan plan = rabenseifner(ranks, r, count);
      if (core_index(ranks, r) < 0) continue;
      std::size_t core_sent = 0;
      for (const Step& s : plan.steps) {
        if (s.kind == StepKind::send_reduce || s.kind == StepKind::send_copy) core_sent += s.send_count;
      }
      const int p2 = core_ranks(ranks);
      INFO("P=" << ranks << " rank " << r);
      // 2 * (p2-1)/p2 * count, to within one element per block boundary.
      const double ideal = 2.0 * (p2 - 1) / p2 * static_cast<double>(count);
      CHECK(std::fabs(static_cast<double>(core_sent) - ideal) <= 2.0 * p2);
    }
  }
}

TEST_CASE("segments split count unevenly by at most one element, for any count") {
  for (int blocks = 1; blocks <= 32; ++blocks) {
    for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{31},
                                    std::size_t{32}, std::size_t{33}, std::size_t{1000}}) {
      std::size_t next = 0;
      for (int b = 0; b < blocks; ++b) {
        CHECK(block_offset(count, blocks, b) == next);
        const std::size_t elems = block_elems(count, blocks, b);
        CHECK(elems >= count / static_cast<std::size_t>(blocks));
        CHECK(elems <= count / static_cast<std::size_t>(blocks) + 1);
        next += elems;
      }
      CHECK(next == count);
      CHECK(block_offset(count, blocks, blocks) == count);
    }
  }
}

TEST_CASE("extra ranks fold into distinct adjacent partners, one per core rank at most") {
  for (int ranks = 1; ranks <= 100; ++ranks) {
    const int p2 = core_ranks(ranks);
    CHECK((p2 & (p2 - 1)) == 0);
    CHECK(p2 <= ranks);
    CHECK(2 * p2 > ranks);
    std::set<int> partners;
    std::set<int> core;
    int extra = 0;
    for (int r = 0; r < ranks; ++r) {
      INFO("P=" << ranks << " rank " << r);
      if (is_extra_rank(ranks, r)) {
        ++extra;
        const int partner = fold_partner(ranks, r);
        CHECK(partner == r + 1);
        CHECK_FALSE(is_extra_rank(ranks, partner));
        CHECK(fold_partner(ranks, partner) == r);
        CHECK(partners.insert(partner).second);
        CHECK(core_index(ranks, r) == -1);
      } else {
        const int c = core_index(ranks, r);
        CHECK(core_rank(ranks, c) == r);
        CHECK(core.insert(c).second);
      }
    }
    CHECK(extra == ranks - p2);
    CHECK(static_cast<int>(core.size()) == p2);
  }
}

TEST_CASE("chunks cover a transfer exactly, and an empty transfer is one empty chunk") {
  for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{9}, std::size_t{10}, std::size_t{1001}}) {
    for (const std::size_t max_elems : {std::size_t{1}, std::size_t{3}, std::size_t{10}, std::size_t{4096}}) {
      const std::vector<Chunk> cs = chunks(100, count, max_elems);
      REQUIRE(cs.size() == chunk_count(count, max_elems));
      std::size_t next = 100;
      for (std::size_t i = 0; i < cs.size(); ++i) {
        CHECK(cs[i].index == static_cast<int>(i));
        CHECK(cs[i].offset == next);
        CHECK(cs[i].slot_delta == next - 100);
        CHECK(cs[i].count <= max_elems);
        if (count != 0) CHECK(cs[i].count > 0);
        next += cs[i].count;
      }
      CHECK(next == 100 + count);
    }
  }
  CHECK(chunk_count(0, 7) == 1);
  CHECK_THROWS_AS(chunk_count(5, 0), Error);
}

TEST_CASE("a single rank has nothing to exchange") {
  for (const ReduceAlgorithm algorithm : kAlgorithms) {
    const ReducePlan plan = make_plan(algorithm, 1, 0, 1000);
    CHECK(plan.steps.empty());
    CHECK(plan.slot_total_elems() == 0);
  }
}

TEST_CASE("invalid ranks are rejected with an error") {
  CHECK_THROWS_AS(recursive_doubling(0, 0, 10), Error);
  CHECK_THROWS_AS(rabenseifner(4, 4, 10), Error);
  CHECK_THROWS_AS(rabenseifner(4, -1, 10), Error);
  CHECK_THROWS_AS(core_rank(5, 4), Error);
}

TEST_CASE("small vectors use recursive doubling, large ones rabenseifner") {
  CHECK(choose_algorithm(16, 1024) == ReduceAlgorithm::recursive_doubling);
  CHECK(choose_algorithm(16, 1 << 20) == ReduceAlgorithm::rabenseifner);
  CHECK(choose_algorithm(2, 1 << 20) == ReduceAlgorithm::recursive_doubling);
  CHECK(choose_algorithm(3, 1 << 20) == ReduceAlgorithm::recursive_doubling);
  CHECK(choose_algorithm(5, 1 << 20) == ReduceAlgorithm::rabenseifner);
}
