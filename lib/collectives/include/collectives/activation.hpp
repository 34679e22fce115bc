// Who starts a round and how the news spreads: the binomial tree rooted at any rank
// (correct for every P), the flood of a round's activation over it, and the majority
// initiator drawn from a shared seed.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace pcoll::activation {

// Children of `rank` in the binomial tree rooted at `root` over `size` ranks, using the
// relative rank v = (rank - root) mod size: the children of v are v + 2^k for every
// 2^k > v with v + 2^k < size. Every rank but the root has exactly one parent.
std::vector<int> tree_children(int rank, int root, int size);

// Parent of `rank` in the same tree (-1 for the root).
int tree_parent(int rank, int root, int size);

// How a round's activations spread (docs/design.md, "A round"). Either way a round costs
// at most 2 (P - 1) messages, and the detail an initiator sends is its own rank.
//   own_tree: over each initiator's own binomial tree, log2 P deep, P - 1 messages per
//     initiator; every rank forwards every (round, root) along root's tree, since a subtree
//     may hear of the round through one root only. For modes where at most two ranks start
//     a round (majority: the drawn one; quorum: the k-th arrival and the first's grace).
//     The detail is the root.
//   flood: over one tree, the binomial tree rooted at rank 0. A rank that hears of a round
//     first, from neighbour n, sends it to its other neighbours; a rank that already knew
//     drops it. Any number of initiators (solo) reach every rank: along each edge, a rank
//     that knows of the round told the other end or heard it from there. The detail is the
//     sending neighbour.
enum class Spread : uint8_t { own_tree, flood };

// Whom an initiator sends its activation to.
std::vector<int> start_targets(Spread spread, int rank, int size);

// What a rank that heard of a round passes on: to whom, with which detail. `known`: it
// knew of the round already. nullopt: `detail` cannot come from a rank of this job under
// this spread (out of range, this rank itself, or not a tree neighbour), a protocol error.
struct Relay {
  std::vector<int> to;
  uint32_t detail = 0;
};
std::optional<Relay> relay(Spread spread, int rank, int size, uint32_t detail, bool known);

// Whether `a` and `b` are joined by an edge of the binomial tree rooted at `root`.
bool is_tree_neighbour(int a, int b, int root, int size);

// Majority initiator of `round`: a 64-bit mix of (seed, handle, round) reduced mod size;
// identical on every rank and uniform over the ranks.
int majority_initiator(uint64_t seed, uint32_t handle, uint64_t round, int size);

}  // namespace pcoll::activation
