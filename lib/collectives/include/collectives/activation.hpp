// Who starts a round and how the news spreads: the binomial activation tree rooted at
// any rank (correct for every P), and the majority initiator drawn from a shared seed.
#pragma once

#include <cstdint>
#include <vector>

namespace pcoll::activation {

// Children of `rank` in the binomial tree rooted at `root` over `size` ranks, using the
// relative rank v = (rank - root) mod size: the children of v are v + 2^k for every
// 2^k > v with v + 2^k < size. Every rank but the root has exactly one parent.
std::vector<int> tree_children(int rank, int root, int size);

// Parent of `rank` in the same tree (-1 for the root).
int tree_parent(int rank, int root, int size);

// Majority initiator of `round`: a 64-bit mix of (seed, handle, round) reduced mod size;
// identical on every rank and uniform over the ranks.
int majority_initiator(uint64_t seed, uint32_t handle, uint64_t round, int size);

}  // namespace pcoll::activation
