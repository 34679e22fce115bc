// Binomial trees, the activation flood over them, and the majority initiator hash.
#include <collectives/activation.hpp>

#include <algorithm>

#include <support/hash.hpp>

namespace pcoll::activation {

std::vector<int> tree_children(int rank, int root, int size) {
  std::vector<int> children;
  const int v = (rank - root + size) % size;
  // Start at the first power of two above v: the bits below it are v's own subtree path.
  int step = 1;
  while (step <= v) step <<= 1;
  for (; v + step < size; step <<= 1) children.push_back((v + step + root) % size);
  return children;
}

int tree_parent(int rank, int root, int size) {
  const int v = (rank - root + size) % size;
  if (v == 0) return -1;
  int high = 1;
  while ((high << 1) <= v) high <<= 1;
  return (v - high + root) % size;
}

bool is_tree_neighbour(int a, int b, int root, int size) {
  if (a == b) return false;
  return tree_parent(a, root, size) == b || tree_parent(b, root, size) == a;
}

namespace {

// The neighbours of `rank` in the tree rooted at `root`, but `except`.
std::vector<int> neighbours(int rank, int root, int size, int except) {
  std::vector<int> out = tree_children(rank, root, size);
  const int parent = tree_parent(rank, root, size);
  if (parent >= 0) out.push_back(parent);
  out.erase(std::remove(out.begin(), out.end(), except), out.end());
  return out;
}

constexpr int kFloodRoot = 0;

}  // namespace

std::vector<int> start_targets(Spread spread, int rank, int size) {
  if (spread == Spread::flood) return neighbours(rank, kFloodRoot, size, -1);
  return tree_children(rank, rank, size);
}

std::optional<Relay> relay(Spread spread, int rank, int size, uint32_t detail, bool known) {
  if (detail >= static_cast<uint32_t>(size) || static_cast<int>(detail) == rank) return std::nullopt;
  const int from = static_cast<int>(detail);
  if (spread == Spread::own_tree) return Relay{tree_children(rank, from, size), detail};
  if (!is_tree_neighbour(rank, from, kFloodRoot, size)) return std::nullopt;
  if (known) return Relay{{}, 0};
  return Relay{neighbours(rank, kFloodRoot, size, from), static_cast<uint32_t>(rank)};
}

int majority_initiator(uint64_t seed, uint32_t handle, uint64_t round, int size) {
  const uint64_t h = hash3(seed, handle, round);
  return static_cast<int>(h % static_cast<uint64_t>(size));
}

}  // namespace pcoll::activation
