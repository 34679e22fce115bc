// Binomial activation trees and the majority initiator hash.
#include <collectives/activation.hpp>

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

int majority_initiator(uint64_t seed, uint32_t handle, uint64_t round, int size) {
  const uint64_t h = hash3(seed, handle, round);
  return static_cast<int>(h % static_cast<uint64_t>(size));
}

}  // namespace pcoll::activation
