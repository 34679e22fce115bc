// Binomial activation trees and the majority initiator hash.
#include "activation.hpp"

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

namespace {
// splitmix64 finaliser: a well-mixed, portable 64-bit hash step.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

int majority_initiator(uint64_t seed, uint32_t handle, uint64_t round, int size) {
  const uint64_t h = mix(mix(mix(seed) ^ handle) ^ round);
  return static_cast<int>(h % static_cast<uint64_t>(size));
}

}  // namespace pcoll::activation
