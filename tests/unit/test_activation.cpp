// Unit tests of the activation trees and how a round's activations spread over them
// (lib/collectives/activation.cpp): every tree spans every P, flat or two-level over any
// node map, and both spreads reach every rank whatever set of ranks starts the round (any
// set for the flood, one or two for each initiator's own tree) and in whatever order the
// messages arrive, at the message counts, node crossings and depths docs/design.md states.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <collectives/activation.hpp>
#include <support/error.hpp>

using namespace pcoll;

namespace {

using activation::Spread;
using activation::Trees;

struct Message {
  int from, to;
  uint32_t detail;
};

struct Outcome {
  std::vector<bool> heard;  // [rank]: learnt of the round
  std::vector<int> sends;   // [rank]: messages sent
  uint64_t sent = 0;
  uint64_t crossed = 0;     // messages between two nodes of `node_of`
  int hops = 0;             // the longest chain of messages until a rank first heard
};

int size_of(int size) { return size; }
int size_of(const Trees& trees) { return trees.size(); }

// One round's activations, started by `initiators` at once and delivered in an order `rng`
// draws, every rank doing what activation::relay tells it, as the engine does. `job` is the
// size (the flat trees) or the Trees; `node_of`, if given, counts the messages between nodes.
template <typename Job>
Outcome spread_round(Spread spread, const Job& job, const std::vector<int>& initiators, std::mt19937& rng,
                     const std::vector<int>& node_of = {}) {
  const int size = size_of(job);
  Outcome out;
  out.heard.assign(static_cast<size_t>(size), false);
  out.sends.assign(static_cast<size_t>(size), 0);
  std::vector<int> depth(static_cast<size_t>(size), 0);
  std::vector<Message> in_flight;
  auto send = [&](int rank, const std::vector<int>& to, uint32_t detail) {
    for (const int peer : to) {
      in_flight.push_back({rank, peer, detail});
      if (!node_of.empty() && node_of[static_cast<size_t>(rank)] != node_of[static_cast<size_t>(peer)]) ++out.crossed;
    }
    out.sends[static_cast<size_t>(rank)] += static_cast<int>(to.size());
    out.sent += to.size();
  };
  for (const int rank : initiators) {
    out.heard[static_cast<size_t>(rank)] = true;
    send(rank, activation::start_targets(spread, rank, job), static_cast<uint32_t>(rank));
  }
  while (!in_flight.empty()) {
    std::uniform_int_distribution<size_t> pick(0, in_flight.size() - 1);
    const size_t i = pick(rng);
    const Message m = in_flight[i];
    in_flight[i] = in_flight.back();
    in_flight.pop_back();
    const size_t to = static_cast<size_t>(m.to);
    const std::optional<activation::Relay> relay = activation::relay(spread, m.to, job, m.detail, out.heard[to]);
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

// Nodes renumbered 0..N-1 in the order of each node's lowest rank, as pcoll numbers them.
std::vector<int> renumbered(const std::vector<int>& labels) {
  std::vector<int> number_of(labels.size(), -1), node_of;
  int nodes = 0;
  for (const int label : labels) {
    int& number = number_of[static_cast<size_t>(label)];
    if (number < 0) number = nodes++;
    node_of.push_back(number);
  }
  return node_of;
}

std::vector<int> block_map(int nodes, int per_node) {
  std::vector<int> node_of;
  for (int r = 0; r < nodes * per_node; ++r) node_of.push_back(r / per_node);
  return node_of;
}

std::vector<int> cyclic_map(int nodes, int per_node) {
  std::vector<int> node_of;
  for (int r = 0; r < nodes * per_node; ++r) node_of.push_back(r % nodes);
  return node_of;
}

// Node k holds k + 1 ranks, placed at random.
std::vector<int> scattered_map(int nodes, uint32_t seed) {
  std::vector<int> labels;
  for (int node = 0; node < nodes; ++node) labels.insert(labels.end(), static_cast<size_t>(node) + 1, node);
  std::mt19937 rng(seed);
  std::shuffle(labels.begin(), labels.end(), rng);
  return renumbered(labels);
}

std::vector<int> random_map(std::mt19937& rng) {
  const int size = std::uniform_int_distribution<int>(2, 150)(rng);
  const int nodes = std::uniform_int_distribution<int>(1, size)(rng);
  std::uniform_int_distribution<int> node(0, nodes - 1);
  std::vector<int> labels;
  for (int r = 0; r < size; ++r) labels.push_back(node(rng));
  return renumbered(labels);
}

// The node maps the two-level tests run over; each names itself for CAPTURE.
struct NodeMap {
  std::string name;
  std::vector<int> node_of;
};

std::vector<NodeMap> node_maps() {
  std::vector<NodeMap> maps = {
      {"2 x 2 block", block_map(2, 2)},
      {"2 x 2 cyclic", cyclic_map(2, 2)},
      {"3 nodes of 3, 1, 2 mixed", {0, 1, 0, 2, 0, 2}},
      {"4 x 4 block", block_map(4, 4)},
      {"5 x 3 cyclic", cyclic_map(5, 3)},
      {"7 nodes of 1..7 scattered", scattered_map(7, 7)},
      {"64 x 4 block", block_map(64, 4)},
      {"64 x 4 cyclic", cyclic_map(64, 4)},
  };
  std::mt19937 rng(20260101);
  for (int i = 0; i < 12; ++i) maps.push_back({"random " + std::to_string(i), random_map(rng)});
  return maps;
}

int node_count(const std::vector<int>& node_of) { return *std::max_element(node_of.begin(), node_of.end()) + 1; }

int largest_node(const std::vector<int>& node_of) {
  std::vector<int> sizes(static_cast<size_t>(node_count(node_of)), 0);
  for (const int node : node_of) ++sizes[static_cast<size_t>(node)];
  return *std::max_element(sizes.begin(), sizes.end());
}

// The tree rooted at `root`: reached from the root along children, every rank exactly once,
// each child's parent the rank that names it, neighbours() the edges; returns its depth and
// counts its edges and the edges between two nodes.
struct TreeShape {
  int edges = 0, crossing = 0, depth = 0;
};

TreeShape check_tree(const Trees& trees, const std::vector<int>& node_of, int root) {
  const int size = trees.size();
  TreeShape shape;
  CHECK(trees.parent(root, root) == -1);
  std::vector<int> times_reached(static_cast<size_t>(size), 0), depth(static_cast<size_t>(size), 0);
  std::vector<int> frontier = {root};
  times_reached[static_cast<size_t>(root)] = 1;
  while (!frontier.empty()) {
    const int rank = frontier.back();
    frontier.pop_back();
    for (const int child : trees.children(rank, root)) {
      REQUIRE(child >= 0);
      REQUIRE(child < size);
      CHECK(trees.parent(child, root) == rank);
      CHECK(trees.neighbours(rank, child, root));
      CHECK(trees.neighbours(child, rank, root));
      ++shape.edges;
      if (node_of[static_cast<size_t>(rank)] != node_of[static_cast<size_t>(child)]) ++shape.crossing;
      // A rank reached twice would be a cycle or two parents: stop walking it.
      if (times_reached[static_cast<size_t>(child)]++ > 0) continue;
      depth[static_cast<size_t>(child)] = depth[static_cast<size_t>(rank)] + 1;
      shape.depth = std::max(shape.depth, depth[static_cast<size_t>(child)]);
      frontier.push_back(child);
    }
  }
  for (int rank = 0; rank < size; ++rank) CHECK(times_reached[static_cast<size_t>(rank)] == 1);
  return shape;
}

// neighbours() agrees with parent() both ways, over all pairs, or pairs drawn at random.
void check_neighbours(const Trees& trees, int root, std::mt19937& rng) {
  const int size = trees.size();
  auto check_pair = [&](int a, int b) {
    const bool edge = a != b && (trees.parent(a, root) == b || trees.parent(b, root) == a);
    CHECK(trees.neighbours(a, b, root) == edge);
    CHECK(trees.neighbours(b, a, root) == edge);
  };
  if (size <= 32) {
    for (int a = 0; a < size; ++a)
      for (int b = 0; b < size; ++b) check_pair(a, b);
    return;
  }
  std::uniform_int_distribution<int> any(0, size - 1);
  for (int i = 0; i < 4 * size; ++i) check_pair(any(rng), any(rng));
}

// One tree per root (or per `root_step`-th root), each checked as check_tree does, at the
// edge counts and depth the two-level trees promise.
void check_trees(const std::vector<int>& node_of, int root_step, std::mt19937& rng) {
  const Trees trees(node_of);
  const int size = trees.size(), nodes = node_count(node_of);
  const int depth_bound = log2_ceil(nodes) + log2_ceil(largest_node(node_of));
  for (int root = 0; root < size; root += root_step) {
    CAPTURE(root);
    const TreeShape shape = check_tree(trees, node_of, root);
    CHECK(shape.edges == size - 1);
    CHECK(shape.crossing == nodes - 1);
    CHECK(shape.depth <= depth_bound);
    check_neighbours(trees, root, rng);
  }
}

void check_refused(const std::vector<int>& node_of, const std::string& problem) {
  CAPTURE(problem);
  try {
    const Trees trees(node_of);
    FAIL("accepted a malformed node map");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::invalid_argument);
    CHECK(std::string(e.what()).find(problem) != std::string::npos);
  }
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

TEST_CASE("a node map of one node, or of one rank per node, gives the flat trees exactly") {
  for (const int size : {1, 2, 3, 6, 13, 64, 100}) {
    CAPTURE(size);
    std::vector<int> one_per_node(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) one_per_node[static_cast<size_t>(r)] = r;
    const std::vector<int> one_node(static_cast<size_t>(size), 0);
    for (const std::vector<int>& node_of : {one_per_node, one_node}) {
      const Trees trees(node_of);
      CHECK_FALSE(trees.two_level());
      CHECK(trees.size() == size);
      for (int root = 0; root < size; ++root)
        for (int rank = 0; rank < size; ++rank) {
          CHECK(trees.children(rank, root) == activation::tree_children(rank, root, size));
          CHECK(trees.parent(rank, root) == activation::tree_parent(rank, root, size));
        }
    }
    const Trees flat(size);
    CHECK_FALSE(flat.two_level());
    for (int root = 0; root < size; ++root)
      for (int rank = 0; rank < size; ++rank)
        CHECK(flat.children(rank, root) == activation::tree_children(rank, root, size));
  }
  CHECK(Trees(std::vector<int>{0, 1, 0, 1}).two_level());
}

TEST_CASE("every two-level tree spans its ranks, crossing between nodes N - 1 times, log2 N + log2 largest deep") {
  std::mt19937 rng(11);
  for (const NodeMap& map : node_maps()) {
    CAPTURE(map.name);
    CHECK(Trees(map.node_of).two_level() == (node_count(map.node_of) > 1 && largest_node(map.node_of) > 1));
    check_trees(map.node_of, 1, rng);
  }
  // 16384 ranks as 4096 nodes of 4, block and cyclic: a few roots.
  for (const std::vector<int>& node_of : {block_map(4096, 4), cyclic_map(4096, 4)}) {
    const Trees trees(node_of);
    CHECK(trees.two_level());
    for (const int root : {0, 1, 4097, 16383}) {
      CAPTURE(root);
      const TreeShape shape = check_tree(trees, node_of, root);
      CHECK(shape.edges == 16383);
      CHECK(shape.crossing == 4095);
      CHECK(shape.depth <= 12 + 2);
    }
  }
}

TEST_CASE("over two-level trees a flood reaches every rank at 2 (P - 1) messages, crossing nodes 2 (N - 1) times") {
  std::mt19937 rng(20261205);
  std::vector<NodeMap> maps = node_maps();
  maps.push_back({"4096 x 4 cyclic", cyclic_map(4096, 4)});
  for (const NodeMap& map : maps) {
    CAPTURE(map.name);
    const Trees trees(map.node_of);
    const int size = trees.size(), nodes = node_count(map.node_of);
    const int depth_bound = log2_ceil(nodes) + log2_ceil(largest_node(map.node_of));
    std::vector<std::vector<int>> starts;
    for (int r = 0; r < size; r += (size > 64 ? size / 16 : 1)) starts.push_back({r});  // one initiator
    std::vector<int> all(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) all[static_cast<size_t>(r)] = r;
    starts.push_back(all);
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<int> some;
      std::bernoulli_distribution take(0.3);
      for (int r = 0; r < size; ++r)
        if (take(rng)) some.push_back(r);
      if (some.empty()) some.push_back(size - 1);
      starts.push_back(some);
    }
    for (const std::vector<int>& initiators : starts) {
      CAPTURE(initiators.size());
      CAPTURE(initiators.front());
      const Outcome out = spread_round(Spread::flood, trees, initiators, rng, map.node_of);
      for (int r = 0; r < size; ++r) CHECK(out.heard[static_cast<size_t>(r)]);
      CHECK(out.sent <= 2 * static_cast<uint64_t>(size - 1));
      CHECK(out.crossed <= 2 * static_cast<uint64_t>(nodes - 1));
      if (initiators.size() == 1) {
        CHECK(out.sent == static_cast<uint64_t>(size - 1));
        CHECK(out.crossed == static_cast<uint64_t>(nodes - 1));
      }
      CHECK(out.hops <= 2 * depth_bound);  // up to the flood root, down again
    }
  }
}

TEST_CASE("over two-level trees each initiator's own tree reaches every rank, crossing nodes N - 1 times per initiator") {
  std::mt19937 rng(5);
  std::vector<NodeMap> maps = node_maps();
  maps.push_back({"4096 x 4 block", block_map(4096, 4)});
  for (const NodeMap& map : maps) {
    CAPTURE(map.name);
    const Trees trees(map.node_of);
    const int size = trees.size(), nodes = node_count(map.node_of);
    const int depth_bound = log2_ceil(nodes) + log2_ceil(largest_node(map.node_of));
    for (int first = 0; first < size; first += (size > 64 ? size / 8 : 1)) {
      const int second = (first * 7 + 3) % size;
      for (const std::vector<int>& initiators : {std::vector<int>{first}, std::vector<int>{first, second}}) {
        if (initiators.size() == 2 && second == first) continue;
        CAPTURE(initiators.size());
        CAPTURE(first);
        const Outcome out = spread_round(Spread::own_tree, trees, initiators, rng, map.node_of);
        for (int r = 0; r < size; ++r) CHECK(out.heard[static_cast<size_t>(r)]);
        CHECK(out.sent == initiators.size() * static_cast<uint64_t>(size - 1));
        CHECK(out.crossed == initiators.size() * static_cast<uint64_t>(nodes - 1));
        if (initiators.size() == 1) CHECK(out.hops <= depth_bound);
      }
    }
  }
}

TEST_CASE("over two-level trees an activation that no rank of the job could have sent is refused") {
  // 4 nodes of 4 in blocks. The flood tree (rooted at 0): node 0's leader 0 tells the
  // leaders 4 and 8, leader 4 tells leader 12; inside each node, leader i tells i + 1, i + 2
  // and i + 1 tells i + 3.
  const Trees trees(block_map(4, 4));
  REQUIRE(trees.two_level());
  for (const Spread spread : {Spread::own_tree, Spread::flood}) {
    CHECK_FALSE(activation::relay(spread, 3, trees, 16, false));
    CHECK_FALSE(activation::relay(spread, 3, trees, 0xfffff, false));
    CHECK_FALSE(activation::relay(spread, 3, trees, 3, false));
  }
  // 1 is 9's parent in the flat tree, not here: only leaders cross, and 9 hears from its
  // leader 8.
  CHECK(activation::is_tree_neighbour(1, 9, 0, 16));
  CHECK_FALSE(trees.neighbours(1, 9, 0));
  CHECK_FALSE(activation::relay(Spread::flood, 9, trees, 1, false));
  CHECK_FALSE(activation::relay(Spread::flood, 9, trees, 5, false));
  const std::optional<activation::Relay> from_8 = activation::relay(Spread::flood, 9, trees, 8, false);
  REQUIRE(from_8);
  CHECK(from_8->to == std::vector<int>{11});
  CHECK(from_8->detail == 9);
  CHECK(activation::relay(Spread::flood, 12, trees, 4, false)->to == std::vector<int>{13, 14});
  CHECK(activation::start_targets(Spread::flood, 0, trees) == std::vector<int>{4, 8, 1, 2});
  // Any rank may be a root of its own tree; it enters the other nodes at their leaders.
  CHECK(activation::relay(Spread::own_tree, 3, trees, 5, false)->to == trees.children(3, 5));
  CHECK(activation::start_targets(Spread::own_tree, 5, trees) == std::vector<int>{8, 12, 6, 7});
  CHECK(activation::relay(Spread::flood, 1, trees, 0, true)->to.empty());
}

TEST_CASE("a malformed node map is refused, naming the problem") {
  check_refused({}, "empty");
  check_refused({0, -1}, "rank 1 is on node -1");
  check_refused({0, 1, 3}, "rank 2 is on node 3");
  check_refused({0, 2, 2}, "node 1 has no rank");
}

TEST_CASE("an initiator leaves its activation unsent only where the target and all it would reach hear it directly") {
  const auto set = [](std::vector<int> ranks) {
    return [ranks](int r) { return std::find(ranks.begin(), ranks.end(), r) != ranks.end(); };
  };
  for (const Spread spread : {Spread::own_tree, Spread::flood}) {
    CAPTURE(static_cast<int>(spread));
    // P = 2: the other rank is a leaf whichever tree.
    CHECK(activation::hear_directly(spread, 0, 1, Trees(2), set({1})));
    CHECK(activation::hear_directly(spread, 1, 0, Trees(2), set({0})));
    CHECK_FALSE(activation::hear_directly(spread, 0, 1, Trees(2), set({})));
  }
  // Own tree over 4 ranks rooted at 0: 0 -> 1, 2; 1 -> 3. Rank 1 passes it on to 3.
  CHECK_FALSE(activation::hear_directly(Spread::own_tree, 0, 1, Trees(4), set({1})));
  CHECK(activation::hear_directly(Spread::own_tree, 0, 1, Trees(4), set({1, 3})));
  CHECK(activation::hear_directly(Spread::own_tree, 0, 2, Trees(4), set({2})));
  // The flood tree is the one rooted at 0 (0 - 1, 0 - 2, 1 - 3): from rank 2, rank 0
  // passes it on to 1, which passes it on to 3.
  CHECK_FALSE(activation::hear_directly(Spread::flood, 2, 0, Trees(4), set({0})));
  CHECK_FALSE(activation::hear_directly(Spread::flood, 2, 0, Trees(4), set({0, 1})));
  CHECK(activation::hear_directly(Spread::flood, 2, 0, Trees(4), set({0, 1, 3})));
  CHECK(activation::hear_directly(Spread::flood, 0, 2, Trees(4), set({2})));
  // Everyone hears (the direct plan): no activation at all, from any initiator.
  for (const Spread spread : {Spread::own_tree, Spread::flood})
    for (int size : {3, 8, 13})
      for (int rank = 0; rank < size; ++rank)
        for (const int to : activation::start_targets(spread, rank, Trees(size)))
          CHECK(activation::hear_directly(spread, rank, to, Trees(size), [](int) { return true; }));
}
