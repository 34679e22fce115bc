// Activation trees (flat binomial, or two-level over nodes), the activation flood over
// them, and the majority initiator hash.
#include <collectives/activation.hpp>

#include <algorithm>
#include <string>

#include <support/error.hpp>
#include <support/hash.hpp>

namespace pcoll::activation {

namespace {

// The binomial tree over relative indices 0..n-1 rooted at 0: the children of v are
// v + 2^k for every 2^k > v with v + 2^k < n. Start at the first power of two above v: the
// bits below it are v's own subtree path.
template <typename Emit>
void binomial_children(int v, int n, Emit emit) {
  int step = 1;
  while (step <= v) step <<= 1;
  for (; v + step < n; step <<= 1) emit(v + step);
}

// -1 for the root, else v without its highest bit.
int binomial_parent(int v) {
  if (v == 0) return -1;
  int high = 1;
  while ((high << 1) <= v) high <<= 1;
  return v - high;
}

// The number of ranks on each node of `node_of`, once the map is checked.
std::vector<int> node_sizes(const std::vector<int>& node_of) {
  if (node_of.empty()) invalid_argument("activation trees: the node map is empty; it needs one node per rank");
  const int size = static_cast<int>(node_of.size());
  std::vector<int> sizes;
  for (int rank = 0; rank < size; ++rank) {
    const int node = node_of[static_cast<size_t>(rank)];
    if (node < 0 || node >= size)
      invalid_argument("activation trees: rank " + std::to_string(rank) + " is on node " + std::to_string(node) +
                       ", outside [0, " + std::to_string(size) + ") for " + std::to_string(size) + " ranks");
    if (node >= static_cast<int>(sizes.size())) sizes.resize(static_cast<size_t>(node) + 1, 0);
    ++sizes[static_cast<size_t>(node)];
  }
  for (size_t node = 0; node < sizes.size(); ++node)
    if (sizes[node] == 0)
      invalid_argument("activation trees: node " + std::to_string(node) + " has no rank, although node " +
                       std::to_string(sizes.size() - 1) + " does; number the nodes 0..N-1 without gaps");
  return sizes;
}

}  // namespace

Trees::Trees(int size) : size_(size), nodes_(size) {}

Trees::Trees(const std::vector<int>& node_of) : size_(static_cast<int>(node_of.size())) {
  const std::vector<int> sizes = node_sizes(node_of);
  nodes_ = static_cast<int>(sizes.size());
  // One node, or one rank per node: the two-level trees are the flat ones.
  if (nodes_ == 1 || nodes_ == size_) {
    nodes_ = size_;
    return;
  }
  node_of_ = node_of;
  node_begin_.assign(static_cast<size_t>(nodes_) + 1, 0);
  for (size_t node = 0; node < sizes.size(); ++node) node_begin_[node + 1] = node_begin_[node] + sizes[node];
  members_.resize(static_cast<size_t>(size_));
  local_index_.resize(static_cast<size_t>(size_));
  std::vector<int> filled(static_cast<size_t>(nodes_), 0);
  for (int rank = 0; rank < size_; ++rank) {
    const size_t node = static_cast<size_t>(node_of[static_cast<size_t>(rank)]);
    local_index_[static_cast<size_t>(rank)] = filled[node];
    members_[static_cast<size_t>(node_begin_[node] + filled[node]++)] = rank;
  }
}

int Trees::entry(int node, int root) const {
  if (node == node_of_[static_cast<size_t>(root)]) return root;
  return members_[static_cast<size_t>(node_begin_[static_cast<size_t>(node)])];
}

std::vector<int> Trees::children(int rank, int root) const {
  std::vector<int> out;
  if (!two_level()) {
    binomial_children((rank - root + size_) % size_, size_, [&](int c) { out.push_back((c + root) % size_); });
    return out;
  }
  const int node = node_of_[static_cast<size_t>(rank)];
  const int root_node = node_of_[static_cast<size_t>(root)];
  const int begin = node_begin_[static_cast<size_t>(node)];
  const int local_size = node_begin_[static_cast<size_t>(node) + 1] - begin;
  const int entry_index = local_index_[static_cast<size_t>(entry(node, root))];
  const int v = (local_index_[static_cast<size_t>(rank)] - entry_index + local_size) % local_size;
  // Other nodes first: their subtrees are behind the slower hop.
  if (v == 0)
    binomial_children((node - root_node + nodes_) % nodes_, nodes_,
                      [&](int c) { out.push_back(entry((c + root_node) % nodes_, root)); });
  binomial_children(v, local_size, [&](int c) {
    out.push_back(members_[static_cast<size_t>(begin + (c + entry_index) % local_size)]);
  });
  return out;
}

int Trees::parent(int rank, int root) const {
  if (!two_level()) {
    const int p = binomial_parent((rank - root + size_) % size_);
    return p < 0 ? -1 : (p + root) % size_;
  }
  const int node = node_of_[static_cast<size_t>(rank)];
  const int root_node = node_of_[static_cast<size_t>(root)];
  const int begin = node_begin_[static_cast<size_t>(node)];
  const int local_size = node_begin_[static_cast<size_t>(node) + 1] - begin;
  const int entry_index = local_index_[static_cast<size_t>(entry(node, root))];
  const int v = (local_index_[static_cast<size_t>(rank)] - entry_index + local_size) % local_size;
  if (v != 0) return members_[static_cast<size_t>(begin + (binomial_parent(v) + entry_index) % local_size)];
  if (node == root_node) return -1;
  const int up = binomial_parent((node - root_node + nodes_) % nodes_);
  return entry((up + root_node) % nodes_, root);
}

bool Trees::neighbours(int a, int b, int root) const {
  if (a == b) return false;
  return parent(a, root) == b || parent(b, root) == a;
}

std::vector<int> tree_children(int rank, int root, int size) { return Trees(size).children(rank, root); }

int tree_parent(int rank, int root, int size) { return Trees(size).parent(rank, root); }

bool is_tree_neighbour(int a, int b, int root, int size) { return Trees(size).neighbours(a, b, root); }

namespace {

// The neighbours of `rank` in the tree rooted at `root`, but `except`.
std::vector<int> neighbours_but(const Trees& trees, int rank, int root, int except) {
  std::vector<int> out = trees.children(rank, root);
  const int parent = trees.parent(rank, root);
  if (parent >= 0) out.push_back(parent);
  out.erase(std::remove(out.begin(), out.end(), except), out.end());
  return out;
}

constexpr int kFloodRoot = 0;

}  // namespace

std::vector<int> start_targets(Spread spread, int rank, const Trees& trees) {
  if (spread == Spread::flood) return neighbours_but(trees, rank, kFloodRoot, -1);
  return trees.children(rank, rank);
}

std::vector<int> start_targets(Spread spread, int rank, int size) { return start_targets(spread, rank, Trees(size)); }

std::optional<Relay> relay(Spread spread, int rank, const Trees& trees, uint32_t detail, bool known) {
  if (detail >= static_cast<uint32_t>(trees.size()) || static_cast<int>(detail) == rank) return std::nullopt;
  const int from = static_cast<int>(detail);
  if (spread == Spread::own_tree) return Relay{trees.children(rank, from), detail};
  if (!trees.neighbours(rank, from, kFloodRoot)) return std::nullopt;
  if (known) return Relay{{}, 0};
  return Relay{neighbours_but(trees, rank, kFloodRoot, from), static_cast<uint32_t>(rank)};
}

std::optional<Relay> relay(Spread spread, int rank, int size, uint32_t detail, bool known) {
  return relay(spread, rank, Trees(size), detail, known);
}

bool hear_directly(Spread spread, int rank, int to, const Trees& trees, const std::function<bool(int)>& hears) {
  // `detail` is what `from` sends `at`: the root (own tree) or the sender (flood).
  const auto covered = [&](const auto& self, int at, uint32_t detail) -> bool {
    if (!hears(at)) return false;
    const std::optional<Relay> next = relay(spread, at, trees, detail, false);
    if (!next) return false;
    for (const int below : next->to)
      if (!self(self, below, next->detail)) return false;
    return true;
  };
  return covered(covered, to, static_cast<uint32_t>(rank));
}

StartPlan start_plan(Spread spread, int rank, const Trees& trees, const std::function<bool(int)>& hears) {
  StartPlan plan;
  for (const int to : start_targets(spread, rank, trees)) {
    if (hear_directly(spread, rank, to, trees, hears)) plan.announce = true;
    else plan.notify.push_back(to);
  }
  return plan;
}

Trees activation_trees(const std::vector<int>& node_of, int size, bool flat) {
  if (flat || node_of.size() != static_cast<size_t>(size)) return Trees(size);
  return Trees(node_of);
}

int majority_initiator(uint64_t seed, uint32_t handle, uint64_t round, int size) {
  const uint64_t h = hash3(seed, handle, round);
  return static_cast<int>(h % static_cast<uint64_t>(size));
}

}  // namespace pcoll::activation
