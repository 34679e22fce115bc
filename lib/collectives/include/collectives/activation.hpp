// Who starts a round and how the news spreads: the activation trees (binomial trees over
// the ranks, or two-level trees over nodes that cross the network once per node), the
// flood of a round's activation over them, and the majority initiator drawn from a shared
// seed.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace pcoll::activation {

// Children of `rank` in the binomial tree rooted at `root` over `size` ranks, using the
// relative rank v = (rank - root) mod size: the children of v are v + 2^k for every
// 2^k > v with v + 2^k < size. Every rank but the root has exactly one parent.
std::vector<int> tree_children(int rank, int root, int size);

// Parent of `rank` in the same tree (-1 for the root).
int tree_parent(int rank, int root, int size);

// The trees of a job, one rooted at each rank.
//   flat: every rank its own node; the binomial tree above (tree_children, tree_parent).
//   two-level: over the nodes of node_of (node_of[r] = node of rank r, numbered 0..N-1).
//     Each node has an *entry*: the root on the root's node R, the node's lowest rank (its
//     leader) on every other node. The entries form the binomial tree over node indices
//     rooted at R (relative node (n - R) mod N); inside each node, its ranks in rank order
//     form the binomial tree rooted at the node's entry (relative local index). A rank's
//     children are the entries of its node's child nodes, if it is its node's entry, then
//     its local children. A tree crosses between nodes exactly N - 1 times (once into each
//     node but R) and is at most ceil(log2 N) + ceil(log2 (largest node)) deep.
// A map of one node, or of one rank per node, gives the flat trees: the two-level trees
// are those very trees there. Memory O(P), precomputed once; children and parent O(log P).
class Trees {
 public:
  // Flat, over `size` ranks; allocates nothing.
  explicit Trees(int size);
  // Two-level where the map spans more than one node and some node holds more than one
  // rank, else flat. Throws Error(invalid_argument) on a malformed map: empty, a node
  // outside [0, P), or a node number below the largest that no rank is on.
  explicit Trees(const std::vector<int>& node_of);

  int size() const { return size_; }
  bool two_level() const { return !node_of_.empty(); }

  std::vector<int> children(int rank, int root) const;
  int parent(int rank, int root) const;  // -1 for the root
  // Whether `a` and `b` are joined by an edge of the tree rooted at `root`.
  bool neighbours(int a, int b, int root) const;

 private:
  int entry(int node, int root) const;

  int size_;
  int nodes_ = 0;
  // Two-level only (empty when flat): rank -> node, rank -> index within its node, and
  // each node's ranks in rank order, node n's at members_[node_begin_[n], node_begin_[n + 1]).
  std::vector<int> node_of_;
  std::vector<int> local_index_;
  std::vector<int> node_begin_;
  std::vector<int> members_;
};

// How a round's activations spread (docs/design.md, "A round"). Either way a round costs
// at most 2 (P - 1) messages, and the detail an initiator sends is its own rank.
//   own_tree: over each initiator's own tree, log2 P deep, P - 1 messages per initiator;
//     every rank forwards every (round, root) along root's tree, since a subtree may hear
//     of the round through one root only. For modes where at most two ranks start a round
//     (majority: the drawn one; quorum: the k-th arrival and the first's grace). The
//     detail is the root.
//   flood: over one tree, the tree rooted at rank 0. A rank that hears of a round first,
//     from neighbour n, sends it to its other neighbours; a rank that already knew drops
//     it. Any number of initiators (solo) reach every rank: along each edge, a rank that
//     knows of the round told the other end or heard it from there. The detail is the
//     sending neighbour.
// Over two-level trees a round crosses between nodes N - 1 times per initiator (own_tree)
// or at most 2 (N - 1) times (flood).
enum class Spread : uint8_t { own_tree, flood };

// A handle's trees: two-level over `node_of` (Trees(node_of)) unless `flat` (PCOLL_PLAN=flat)
// or the map does not hold `size` ranks.
Trees activation_trees(const std::vector<int>& node_of, int size, bool flat);

// Whom an initiator sends its activation to.
std::vector<int> start_targets(Spread spread, int rank, const Trees& trees);
std::vector<int> start_targets(Spread spread, int rank, int size);  // flat trees

// What a rank that heard of a round passes on: to whom, with which detail. `known`: it
// knew of the round already. nullopt: `detail` cannot come from a rank of this job under
// this spread (out of range, this rank itself, or not a tree neighbour), a protocol error.
struct Relay {
  std::vector<int> to;
  uint32_t detail = 0;
};
std::optional<Relay> relay(Spread spread, int rank, const Trees& trees, uint32_t detail, bool known);
std::optional<Relay> relay(Spread spread, int rank, int size, uint32_t detail, bool known);  // flat

// Whether initiator `rank` may leave its activation to start target `to` unsent, because
// `to` and every rank the activation would reach through `to` (relay, recursively) hear of
// the start from `rank` itself (`hears(r)`: the reduction's first notice reaches r and
// says so; RoundExecutor::announces_start_to). Those ranks then pass nothing on.
bool hear_directly(Spread spread, int rank, int to, const Trees& trees, const std::function<bool(int)>& hears);

// What initiator `rank` does whenever it starts a round, the same every round (a handle
// works it out once): the start targets it sends the activation to, and whether its first
// notices say that it started the round, for the targets that hear it directly.
struct StartPlan {
  std::vector<int> notify;
  bool announce = false;
};
StartPlan start_plan(Spread spread, int rank, const Trees& trees, const std::function<bool(int)>& hears);

// Whether `a` and `b` are joined by an edge of the binomial tree rooted at `root`.
bool is_tree_neighbour(int a, int b, int root, int size);

// Majority initiator of `round`: a 64-bit mix of (seed, handle, round) reduced mod size;
// identical on every rank and uniform over the ranks.
int majority_initiator(uint64_t seed, uint32_t handle, uint64_t round, int size);

}  // namespace pcoll::activation
