// Unit tests of the activation trees and how a round's activations spread over them
// (lib/collectives/activation.cpp): every tree spans every P, and both spreads reach every
// rank whatever set of ranks starts the round (any set for the flood, one or two for each
// initiator's own tree) and in whatever order the messages arrive, at the message counts
// and depths docs/design.md states.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include <collectives/activation.hpp>

using namespace pcoll;

namespace {

using activation::Spread;

struct Message {
  int from, to;
  uint32_t detail;
};

struct Outcome {
  std::vector<bool> heard;  // [rank]: learnt of the round
  std::vector<int> sends;   // [rank]: messages sent
  uint64_t sent = 0;
  int hops = 0;             // the longest chain of messages until a rank first heard
};

// One round's activations, started by `initiators` at once and delivered in an order `rng`
// draws, every rank doing what activation::relay tells it, as the engine does.
Outcome spread_round(Spread spread, int size, const std::vector<int>& initiators, std::mt19937& rng) {
  Outcome out;
  out.heard.assign(static_cast<size_t>(size), false);
  out.sends.assign(static_cast<size_t>(size), 0);
  std::vector<int> depth(static_cast<size_t>(size), 0);
  std::vector<Message> in_flight;
  auto send = [&](int rank, const std::vector<int>& to, uint32_t detail) {
    for (const int peer : to) in_flight.push_back({rank, peer, detail});
    out.sends[static_cast<size_t>(rank)] += static_cast<int>(to.size());
    out.sent += to.size();
  };
  for (const int rank : initiators) {
    out.heard[static_cast<size_t>(rank)] = true;
    send(rank, activation::start_targets(spread, rank, size), static_cast<uint32_t>(rank));
  }
  while (!in_flight.empty()) {
    std::uniform_int_distribution<size_t> pick(0, in_flight.size() - 1);
    const size_t i = pick(rng);
    const Message m = in_flight[i];
    in_flight[i] = in_flight.back();
    in_flight.pop_back();
    const size_t to = static_cast<size_t>(m.to);
    const std::optional<activation::Relay> relay = activation::relay(spread, m.to, size, m.detail, out.heard[to]);
    REQUIRE(relay);
    if (!out.heard[to]) {
      depth[to] = depth[static_cast<size_t>(m.from)] + 1;
      out.hops = std::max(out.hops, depth[to]);
    }
    out.heard[to] = true;
    send(m.to, relay->to, relay->detail);
  }
  return out;
}

int log2_ceil(int size) {
  int bits = 0;
  while ((1 << bits) < size) ++bits;
  return bits;
}

}  // namespace

TEST_CASE("every binomial tree spans its ranks, each rank below one parent") {
  for (int size = 1; size <= 70; ++size)
    for (int root = 0; root < size; ++root) {
      CAPTURE(size);
      CAPTURE(root);
      CHECK(activation::tree_parent(root, root, size) == -1);
      int edges = 0;
      for (int rank = 0; rank < size; ++rank) {
        for (const int child : activation::tree_children(rank, root, size)) {
          CHECK(activation::tree_parent(child, root, size) == rank);
          CHECK(activation::is_tree_neighbour(rank, child, root, size));
          CHECK(activation::is_tree_neighbour(child, rank, root, size));
          ++edges;
        }
        // Following parents from any rank ends at the root within log2(size) + 1 steps.
        int at = rank, steps = 0;
        while (at != root && steps <= 32) at = activation::tree_parent(at, root, size), ++steps;
        CHECK(at == root);
      }
      CHECK(edges == size - 1);
    }
}

TEST_CASE("a flood reaches every rank from any set of initiators, in any order, at 2 (P - 1) messages") {
  std::mt19937 rng(20261204);
  for (const int size : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 16, 31, 32, 33, 64, 100, 257, 1024, 4097}) {
    CAPTURE(size);
    std::vector<std::vector<int>> starts;
    for (int r = 0; r < size; r += (size > 64 ? size / 16 : 1)) starts.push_back({r});  // one initiator
    std::vector<int> all(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) all[static_cast<size_t>(r)] = r;
    starts.push_back(all);  // every rank starts at once (solo under balanced load)
    for (int trial = 0; trial < 8; ++trial) {
      std::vector<int> some;
      std::bernoulli_distribution take(0.3);
      for (int r = 0; r < size; ++r)
        if (take(rng)) some.push_back(r);
      if (some.empty()) some.push_back(size - 1);
      starts.push_back(some);
    }
    for (const std::vector<int>& initiators : starts) {
      CAPTURE(initiators.size());
      const Outcome out = spread_round(Spread::flood, size, initiators, rng);
      for (int r = 0; r < size; ++r) CHECK(out.heard[static_cast<size_t>(r)]);
      CHECK(out.sent <= 2 * static_cast<uint64_t>(size - 1));
      if (initiators.size() == 1) CHECK(out.sent == static_cast<uint64_t>(size - 1));
      CHECK(out.hops <= 2 * log2_ceil(size));  // a path in the tree: up to the root, down again
    }
  }
}

TEST_CASE("each initiator's own tree reaches every rank log2 P deep, at P - 1 messages per initiator") {
  std::mt19937 rng(4);
  for (const int size : {1, 2, 3, 5, 8, 13, 64, 100, 1024, 4097}) {
    CAPTURE(size);
    for (int first = 0; first < size; first += (size > 64 ? size / 8 : 1)) {
      const int second = (first * 7 + 3) % size;
      for (const std::vector<int>& initiators : {std::vector<int>{first}, std::vector<int>{first, second}}) {
        if (initiators.size() == 2 && second == first) continue;
        CAPTURE(initiators.size());
        const Outcome out = spread_round(Spread::own_tree, size, initiators, rng);
        for (int r = 0; r < size; ++r) CHECK(out.heard[static_cast<size_t>(r)]);
        CHECK(out.sent == initiators.size() * static_cast<uint64_t>(size - 1));
        if (initiators.size() == 1) CHECK(out.hops <= log2_ceil(size));
      }
    }
  }
}

TEST_CASE("an activation that no rank of the job could have sent is refused") {
  const int size = 16;
  // Out of range, or this rank itself, in either spread.
  for (const Spread spread : {Spread::own_tree, Spread::flood}) {
    CHECK_FALSE(activation::relay(spread, 3, size, 16, false));
    CHECK_FALSE(activation::relay(spread, 3, size, 0xfffff, false));
    CHECK_FALSE(activation::relay(spread, 3, size, 3, false));
  }
  // In the flood tree (rooted at 0) 3 and 5 are both children of 1: 5 cannot tell 3.
  CHECK_FALSE(activation::is_tree_neighbour(3, 5, 0, size));
  CHECK_FALSE(activation::relay(Spread::flood, 3, size, 5, false));
  CHECK(activation::relay(Spread::flood, 3, size, 1, false));
  // Any rank may be a root of its own tree.
  CHECK(activation::relay(Spread::own_tree, 3, size, 5, false));
  // A rank that knew already passes nothing on in the flood, and forwards along the
  // root's tree regardless in its own.
  CHECK(activation::relay(Spread::flood, 1, size, 0, true)->to.empty());
  CHECK(activation::relay(Spread::own_tree, 0, size, 8, true)->to == activation::tree_children(0, 8, size));
}
