// Reduction plans (see reduce_plan.hpp): recursive doubling and Rabenseifner for any P,
// and node_leader for any node map, down to the chunks of every transfer.
//
// Why every rank ends with a bitwise identical result (given bitwise commutative ops,
// reduce_kernels.hpp):
//   - pre-step: only the partner combines, once: op(partner, extra).
//   - recursive doubling: by induction over steps, after step k all 2^k core ranks of an
//     aligned group hold the same bits X; the peer group holds Y. This rank computes
//     op(X, Y) and its peer op(Y, X), which are equal bit for bit by commutativity, so the
//     merged group of 2^(k+1) ranks again agrees. (Associativity is not needed: the
//     bracketing is fixed by the plan, the same on every rank.)
//   - Rabenseifner: each element is combined by exactly one rank per reduce-scatter step
//     and ends owned by exactly one core rank; the allgather only copies bits, so there is
//     a single computed value per element to agree on.
//   - post-step: the extra rank receives a copy of its partner's bits.
//   - node_leader: each node's tree combines its ranks once, in a bracketing fixed by the
//     plan, at one rank per combination; the leaders then agree as recursive doubling's
//     core ranks do (each starting from its node's bits), and the broadcast copies bits.
#include <collectives/reduce_plan.hpp>

#include <algorithm>
#include <bit>
#include <climits>
#include <span>
#include <string>

#include <support/error.hpp>

namespace pcoll {

namespace {

constexpr std::uint32_t kPreStepTag = 0;
constexpr int kFoldInSlot = 0;

void check_ranks(int ranks, int rank) {
  if (ranks < 1) invalid_argument("reduction plan: ranks must be >= 1 (got " + std::to_string(ranks) + ")");
  if (rank < 0 || rank >= ranks) {
    invalid_argument("reduction plan: rank " + std::to_string(rank) + " is outside 0.." +
                     std::to_string(ranks - 1));
  }
}

int log2_exact(int power_of_two) { return std::countr_zero(static_cast<unsigned>(power_of_two)); }

// A transfer into the receiver's landing slot `slot`, reduced from there.
Transfer into_slot(const ReducePlan& plan, int slot, std::size_t offset, std::size_t count) {
  const LandingSlot& ring = plan.landing_slots.at(static_cast<std::size_t>(slot));
  return Transfer{offset, count, slot, ring.offset, plan.chunk_elems, ring.depth, ring.stride};
}

// A transfer written straight into the receiver's work buffer (a copy of final values).
Transfer into_result(const ReducePlan& plan, std::size_t offset, std::size_t count) {
  return Transfer{offset, count, kNoSlot, 0, plan.chunk_elems, 1, 0};
}

// The ring of a slot whose transfers carry at most `capacity` elements: room for two
// rounds of its largest transfer, or the pool's bound if that is less.
LandingSlot ring_for(const ReducePlan& plan, std::size_t offset, std::size_t capacity) {
  const std::size_t max_chunks = capacity == 0 ? 1 : (capacity + plan.chunk_elems - 1) / plan.chunk_elems;
  const std::size_t depth = max_chunks > plan.pool_chunks / 2 ? plan.pool_chunks : 2 * max_chunks;
  return LandingSlot{offset, depth, std::min(plan.chunk_elems, capacity)};
}

// The ranks that run recursive doubling, fold-in included: every rank, or node_leader's
// node leaders. Members are numbered 0..size-1; this rank is member `me`.
struct Group {
  int size = 1;
  int me = 0;
  std::span<const int> ranks;  // [member]: its rank; empty: the member index is the rank

  int rank_of(int member) const { return ranks.empty() ? member : ranks[static_cast<std::size_t>(member)]; }
};

Group all_ranks(const ReducePlan& plan) { return Group{plan.ranks, plan.rank, {}}; }

// The pre-step: the extra rank sends its whole vector into its partner's fold-in slot.
void add_pre_step(ReducePlan& plan, const Group& group, std::uint32_t tag) {
  const int partner = fold_partner(group.size, group.me);
  if (partner < 0) return;
  Step step;
  step.tag = tag;
  step.peer = group.rank_of(partner);
  const Transfer whole_vector = into_slot(plan, kFoldInSlot, 0, plan.count);
  if (is_extra_rank(group.size, group.me)) {
    step.send = whole_vector;
  } else {
    step.recv = whole_vector;
  }
  plan.steps.push_back(step);
}

// The post-step: the partner writes the full result straight into the extra rank's work
// buffer, which that rank no longer reads from (its only send was the pre-step).
void add_post_step(ReducePlan& plan, const Group& group, std::uint32_t tag) {
  const int partner = fold_partner(group.size, group.me);
  if (partner < 0) return;
  Step step;
  step.tag = tag;
  step.peer = group.rank_of(partner);
  const Transfer whole_result = into_result(plan, 0, plan.count);
  if (is_extra_rank(group.size, group.me)) {
    step.recv = whole_result;
  } else {
    step.send = whole_result;
  }
  plan.steps.push_back(step);
}

// `folding_ranks`: how many ranks the fold-in pairs up (all, or node_leader's leaders).
ReducePlan empty_plan(ReduceAlgorithm algorithm, int ranks, int rank, std::size_t count,
                      std::size_t chunk_elems, std::size_t pool_chunks, int folding_ranks) {
  check_ranks(ranks, rank);
  if (chunk_elems == 0) invalid_argument("reduction plan: chunk_elems must be >= 1");
  if (pool_chunks == 0) invalid_argument("reduction plan: pool_chunks must be >= 1");
  ReducePlan plan;
  plan.algorithm = algorithm;
  plan.ranks = ranks;
  plan.rank = rank;
  plan.count = count;
  plan.chunk_elems = chunk_elems;
  plan.pool_chunks = pool_chunks;
  // Slot 0 receives the fold-in pre-step; it is empty when no rank folds in.
  const bool folds = folding_ranks != core_ranks(folding_ranks);
  plan.landing_slots.push_back(ring_for(plan, 0, folds ? count : 0));
  return plan;
}

void append_slot(ReducePlan& plan, std::size_t capacity) {
  const LandingSlot& last = plan.landing_slots.back();
  plan.landing_slots.push_back(ring_for(plan, last.offset + last.elems(), capacity));
}

// Recursive doubling over `group`: the pre-step (tag first_tag), core step k = 1..L (tag
// first_tag + k, slot k), the post-step (tag first_tag + L + 1). Core step k pairs core
// members differing in bit k-1: nearest neighbours first, which are usually on the same
// node.
void add_recursive_doubling(ReducePlan& plan, const Group& group, std::uint32_t first_tag) {
  const int levels = log2_exact(core_ranks(group.size));
  add_pre_step(plan, group, first_tag);
  const int me = core_index(group.size, group.me);
  if (me >= 0) {
    for (int k = 1; k <= levels; ++k) {
      Step step;
      step.tag = first_tag + static_cast<std::uint32_t>(k);
      step.peer = group.rank_of(core_rank(group.size, me ^ (1 << (k - 1))));
      // Both ends send the whole vector into each other's slot k and reduce it from there.
      step.send = into_slot(plan, k, 0, plan.count);
      step.recv = step.send;
      plan.steps.push_back(step);
    }
  }
  add_post_step(plan, group, first_tag + static_cast<std::uint32_t>(levels + 1));
}

// --- node_leader ---------------------------------------------------------------------------

// Returns the number of nodes N, once node_of names nodes 0..N-1, every one.
int check_node_map(const std::vector<int>& node_of) {
  if (node_of.empty()) invalid_argument("node_leader plan: the node map is empty (it needs the node of every rank)");
  if (node_of.size() > static_cast<std::size_t>(INT_MAX)) {
    invalid_argument("node_leader plan: " + std::to_string(node_of.size()) + " ranks are more than a plan numbers");
  }
  const auto ranks = static_cast<int>(node_of.size());
  std::vector<bool> used(node_of.size(), false);
  int nodes = 0;
  for (int r = 0; r < ranks; ++r) {
    const int node = node_of[static_cast<std::size_t>(r)];
    if (node < 0 || node >= ranks) {
      invalid_argument("node_leader plan: rank " + std::to_string(r) + " is on node " + std::to_string(node) +
                       ", outside 0.." + std::to_string(ranks - 1) + " (nodes are numbered 0..N-1)");
    }
    used[static_cast<std::size_t>(node)] = true;
    nodes = std::max(nodes, node + 1);
  }
  for (int node = 0; node < nodes; ++node) {
    if (!used[static_cast<std::size_t>(node)]) {
      invalid_argument("node_leader plan: node " + std::to_string(node) + " has no rank, but node " +
                       std::to_string(nodes - 1) + " has (nodes are numbered 0..N-1, every one used)");
    }
  }
  return nodes;
}

// This rank's node as node_leader sees it.
struct NodeTree {
  std::vector<int> members;  // [local index]: the node's ranks in rank order
  int local = 0;             // this rank's local index; 0: the node's leader
  int levels = 0;            // Ln: levels of the largest node's tree, the same on every rank
  std::vector<int> leaders;  // [node]: the node's lowest rank
};

NodeTree node_tree(const std::vector<int>& node_of, int rank, int nodes) {
  NodeTree tree;
  const int my_node = node_of[static_cast<std::size_t>(rank)];
  std::vector<int> sizes(static_cast<std::size_t>(nodes), 0);
  tree.leaders.assign(static_cast<std::size_t>(nodes), -1);
  for (int r = 0; r < static_cast<int>(node_of.size()); ++r) {
    const auto node = static_cast<std::size_t>(node_of[static_cast<std::size_t>(r)]);
    if (sizes[node]++ == 0) tree.leaders[node] = r;
    if (r == rank) tree.local = static_cast<int>(tree.members.size());
    if (static_cast<int>(node) == my_node) tree.members.push_back(r);
  }
  const int largest = *std::max_element(sizes.begin(), sizes.end());
  tree.levels = std::bit_width(static_cast<unsigned>(largest - 1));
  return tree;
}

// One edge of this rank's node tree: at `level`, the child local + 2^level it reduces
// from, or the parent local - 2^level it sends to.
struct TreeLink {
  int level = 0;
  int peer = 0;  // rank
  bool to_parent = false;
};

// A rank receives from its children at levels 0, 1, .. while bits 0..level of its local
// index are clear, then sends to its parent at the level of the lowest bit set.
std::vector<TreeLink> tree_links(const NodeTree& tree) {
  std::vector<TreeLink> links;
  const auto size = static_cast<std::int64_t>(tree.members.size());
  const std::int64_t local = tree.local;
  for (int k = 0; (std::int64_t{1} << k) < size; ++k) {
    const std::int64_t bit = std::int64_t{1} << k;
    if ((local & bit) != 0) {
      links.push_back(TreeLink{k, tree.members[static_cast<std::size_t>(local - bit)], true});
      break;
    }
    if (local + bit < size) links.push_back(TreeLink{k, tree.members[static_cast<std::size_t>(local + bit)], false});
  }
  return links;
}

// Node reduce: level k has tag k and lands in slot first_slot + k.
void add_node_reduce(ReducePlan& plan, const std::vector<TreeLink>& links, int first_slot) {
  for (const TreeLink& link : links) {
    Step step;
    step.tag = static_cast<std::uint32_t>(link.level);
    step.peer = link.peer;
    const Transfer whole_vector = into_slot(plan, first_slot + link.level, 0, plan.count);
    if (link.to_parent) {
      step.send = whole_vector;
    } else {
      step.recv = whole_vector;
    }
    plan.steps.push_back(step);
  }
}

// Node broadcast: the node reduce backwards, level k with tag first_tag + levels-1 - k. A
// parent writes straight into its child's work buffer, which the child no longer reads
// from (its last send was to this parent).
void add_node_broadcast(ReducePlan& plan, const std::vector<TreeLink>& links, int levels, std::uint32_t first_tag) {
  for (auto link = links.rbegin(); link != links.rend(); ++link) {
    Step step;
    step.tag = first_tag + static_cast<std::uint32_t>(levels - 1 - link->level);
    step.peer = link->peer;
    const Transfer whole_result = into_result(plan, 0, plan.count);
    if (link->to_parent) {
      step.recv = whole_result;
    } else {
      step.send = whole_result;
    }
    plan.steps.push_back(step);
  }
}

}  // namespace

const char* algorithm_name(ReduceAlgorithm algorithm) {
  switch (algorithm) {
    case ReduceAlgorithm::recursive_doubling: return "recursive_doubling";
    case ReduceAlgorithm::rabenseifner: return "rabenseifner";
    case ReduceAlgorithm::node_leader: return "node_leader";
  }
  return "invalid";
}

const char* step_kind_name(StepKind kind) {
  switch (kind) {
    case StepKind::send_reduce: return "send_reduce";
    case StepKind::send_copy: return "send_copy";
    case StepKind::send_only: return "send_only";
    case StepKind::recv_reduce: return "recv_reduce";
    case StepKind::recv_copy: return "recv_copy";
  }
  return "invalid";
}

StepKind Step::kind() const {
  if (!recv) return StepKind::send_only;
  if (!send) return reduces() ? StepKind::recv_reduce : StepKind::recv_copy;
  return reduces() ? StepKind::send_reduce : StepKind::send_copy;
}

std::size_t ReducePlan::landing_elems() const {
  return landing_slots.empty() ? 0 : landing_slots.back().offset + landing_slots.back().elems();
}

// --- fold-in mapping ---------------------------------------------------------------------

int core_ranks(int ranks) {
  if (ranks < 1) invalid_argument("core_ranks: ranks must be >= 1 (got " + std::to_string(ranks) + ")");
  return static_cast<int>(std::bit_floor(static_cast<unsigned>(ranks)));
}

bool is_extra_rank(int ranks, int rank) {
  check_ranks(ranks, rank);
  const int extra = ranks - core_ranks(ranks);
  return rank < 2 * extra && rank % 2 == 0;
}

int fold_partner(int ranks, int rank) {
  check_ranks(ranks, rank);
  const int extra = ranks - core_ranks(ranks);
  if (rank >= 2 * extra) return -1;
  return rank % 2 == 0 ? rank + 1 : rank - 1;
}

int core_index(int ranks, int rank) {
  check_ranks(ranks, rank);
  const int extra = ranks - core_ranks(ranks);
  if (rank < 2 * extra) return rank % 2 == 0 ? -1 : rank / 2;
  return rank - extra;
}

int core_rank(int ranks, int index) {
  const int p2 = core_ranks(ranks);
  if (index < 0 || index >= p2) {
    invalid_argument("core_rank: core index " + std::to_string(index) + " is outside 0.." +
                     std::to_string(p2 - 1));
  }
  const int extra = ranks - p2;
  return index < extra ? 2 * index + 1 : index + extra;
}

std::size_t block_offset(std::size_t count, int blocks, int block) {
  const auto n = static_cast<std::size_t>(blocks);
  const auto b = static_cast<std::size_t>(block);
  return b * (count / n) + std::min(b, count % n);
}

std::size_t block_elems(std::size_t count, int blocks, int block) {
  const auto n = static_cast<std::size_t>(blocks);
  return count / n + (static_cast<std::size_t>(block) < count % n ? 1 : 0);
}

// --- algorithms ------------------------------------------------------------------------------

ReducePlan recursive_doubling(int ranks, int rank, std::size_t count, std::size_t chunk_elems,
                              std::size_t pool_chunks) {
  ReducePlan plan =
      empty_plan(ReduceAlgorithm::recursive_doubling, ranks, rank, count, chunk_elems, pool_chunks, ranks);
  const int levels = log2_exact(core_ranks(ranks));
  for (int k = 1; k <= levels; ++k) append_slot(plan, count);
  plan.tag_count = static_cast<std::uint32_t>(levels + 2);
  add_recursive_doubling(plan, all_ranks(plan), kPreStepTag);
  return plan;
}

// Reduce-scatter step k (1..L) splits the block range this rank is responsible for in two:
// the core rank with bit k-1 clear keeps the lower half, its peer (bit set) the upper; each
// sends the other half and reduces the half it keeps. The largest exchange (half the
// vector) is thus between nearest neighbours. The peer shares the same range because the
// range depends only on bits 0..k-2. After L steps this rank owns one block; the
// allgather replays the steps backwards, sending what it owns and receiving the half it
// gave away, straight into its work buffer.
ReducePlan rabenseifner(int ranks, int rank, std::size_t count, std::size_t chunk_elems,
                        std::size_t pool_chunks) {
  ReducePlan plan = empty_plan(ReduceAlgorithm::rabenseifner, ranks, rank, count, chunk_elems, pool_chunks, ranks);
  const int p2 = core_ranks(ranks);
  const int levels = log2_exact(p2);
  // Slot k receives a half of p2 >> k consecutive blocks; bound it by the largest block
  // so the layout is the same on every rank.
  const std::size_t largest_block_elems = block_elems(count, p2, 0);
  for (int k = 1; k <= levels; ++k) {
    append_slot(plan, static_cast<std::size_t>(p2 >> k) * largest_block_elems);
  }
  plan.tag_count = static_cast<std::uint32_t>(2 * levels + 2);

  add_pre_step(plan, all_ranks(plan), kPreStepTag);
  const int me = core_index(ranks, rank);
  if (me >= 0) {
    struct Halving {
      int peer;
      int keep_begin, keep_end;  // blocks
      int give_begin, give_end;
    };
    std::vector<Halving> halvings;
    int begin = 0;
    int end = p2;
    for (int k = 1; k <= levels; ++k) {
      const int bit = 1 << (k - 1);
      const int mid = begin + (end - begin) / 2;
      const bool keep_lower = (me & bit) == 0;
      Halving h{core_rank(ranks, me ^ bit), keep_lower ? begin : mid, keep_lower ? mid : end,
                keep_lower ? mid : begin, keep_lower ? end : mid};
      halvings.push_back(h);
      begin = h.keep_begin;
      end = h.keep_end;
    }
    const auto range_offset = [&](int block_begin) { return block_offset(count, p2, block_begin); };
    const auto range_elems = [&](int block_begin, int block_end) {
      return block_offset(count, p2, block_end) - block_offset(count, p2, block_begin);
    };
    for (int k = 1; k <= levels; ++k) {
      const Halving& h = halvings[static_cast<std::size_t>(k - 1)];
      Step step;
      step.tag = static_cast<std::uint32_t>(k);
      step.peer = h.peer;
      step.send = into_slot(plan, k, range_offset(h.give_begin), range_elems(h.give_begin, h.give_end));
      step.recv = into_slot(plan, k, range_offset(h.keep_begin), range_elems(h.keep_begin, h.keep_end));
      plan.steps.push_back(step);
    }
    for (int j = 1; j <= levels; ++j) {
      const Halving& h = halvings[static_cast<std::size_t>(levels - j)];
      Step step;
      step.tag = static_cast<std::uint32_t>(levels + j);
      step.peer = h.peer;
      step.send = into_result(plan, range_offset(h.keep_begin), range_elems(h.keep_begin, h.keep_end));
      step.recv = into_result(plan, range_offset(h.give_begin), range_elems(h.give_begin, h.give_end));
      plan.steps.push_back(step);
    }
  }
  add_post_step(plan, all_ranks(plan), static_cast<std::uint32_t>(2 * levels + 1));
  return plan;
}

// Slots: 0 the leaders' fold-in, 1..L their recursive doubling steps, L+1..L+Ln the node
// reduce levels. Only leaders send across nodes, and only in recursive doubling.
ReducePlan node_leader(const std::vector<int>& node_of, int rank, std::size_t count, std::size_t chunk_elems,
                       std::size_t pool_chunks) {
  const int nodes = check_node_map(node_of);
  const auto ranks = static_cast<int>(node_of.size());
  ReducePlan plan = empty_plan(ReduceAlgorithm::node_leader, ranks, rank, count, chunk_elems, pool_chunks, nodes);
  const NodeTree tree = node_tree(node_of, rank, nodes);
  const int leader_levels = log2_exact(core_ranks(nodes));
  for (int k = 1; k <= leader_levels + tree.levels; ++k) append_slot(plan, count);
  plan.tag_count = static_cast<std::uint32_t>(2 * tree.levels + leader_levels + 2);

  const std::vector<TreeLink> links = tree_links(tree);
  add_node_reduce(plan, links, leader_levels + 1);
  if (tree.local == 0) {
    const Group leaders{nodes, node_of[static_cast<std::size_t>(rank)], tree.leaders};
    add_recursive_doubling(plan, leaders, static_cast<std::uint32_t>(tree.levels));
  }
  add_node_broadcast(plan, links, tree.levels, static_cast<std::uint32_t>(tree.levels + leader_levels + 2));
  return plan;
}

ReducePlan make_plan(ReduceAlgorithm algorithm, int ranks, int rank, std::size_t count,
                     std::size_t chunk_elems, std::size_t pool_chunks) {
  switch (algorithm) {
    case ReduceAlgorithm::recursive_doubling: return recursive_doubling(ranks, rank, count, chunk_elems, pool_chunks);
    case ReduceAlgorithm::rabenseifner: return rabenseifner(ranks, rank, count, chunk_elems, pool_chunks);
    case ReduceAlgorithm::node_leader:
      invalid_argument("reduction plan: node_leader needs the node map of the ranks; call node_leader(node_of, ...)");
  }
  invalid_argument("unknown reduction algorithm " + std::to_string(static_cast<int>(algorithm)));
}

std::size_t chunk_elems_for(std::size_t count, std::size_t chunk_bytes, std::size_t element_bytes,
                            std::size_t max_chunks) {
  if (element_bytes == 0) invalid_argument("chunk_elems_for: element_bytes must be >= 1");
  if (max_chunks == 0) invalid_argument("chunk_elems_for: max_chunks must be >= 1");
  const std::size_t from_bytes = std::max<std::size_t>(1, chunk_bytes / element_bytes);
  // A transfer is at most the whole vector: max_chunks chunks of this size cover it.
  return std::max(from_bytes, (count + max_chunks - 1) / max_chunks);
}

}  // namespace pcoll
