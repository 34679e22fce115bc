// Reduction plans (see reduce_plan.hpp): recursive doubling and Rabenseifner for any P,
// node_leader for any node map and node_rails for nodes of equal size, down to the chunks
// of every transfer.
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
//   - node_rails: each element of block i is combined once per node, by the node's rank
//     i, in the plan's fixed peer order; the rail's Rabenseifner (or recursive doubling)
//     then agrees as above, and the node allgather copies bits.
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

// The ranks that run recursive doubling or Rabenseifner, fold-in included: every rank,
// node_leader's node leaders, or one of node_rails' rails. Members are numbered
// 0..size-1; this rank is member `me`.
struct Group {
  int size = 1;
  int me = 0;
  std::span<const int> ranks;  // [member]: its rank; empty: the member index is the rank

  int rank_of(int member) const { return ranks.empty() ? member : ranks[static_cast<std::size_t>(member)]; }
};

Group all_ranks(const ReducePlan& plan) { return Group{plan.ranks, plan.rank, {}}; }

// The elements a group reduces: the whole vector, or node_rails' block.
struct Range {
  std::size_t offset = 0;
  std::size_t count = 0;
};

Range whole_vector(const ReducePlan& plan) { return Range{0, plan.count}; }

// The pre-step: the extra rank sends its whole range into its partner's fold-in slot.
void add_pre_step(ReducePlan& plan, const Group& group, Range range, std::uint32_t tag) {
  const int partner = fold_partner(group.size, group.me);
  if (partner < 0) return;
  Step step;
  step.tag = tag;
  step.peer = group.rank_of(partner);
  const Transfer whole_range = into_slot(plan, kFoldInSlot, range.offset, range.count);
  if (is_extra_rank(group.size, group.me)) {
    step.send = whole_range;
  } else {
    step.recv = whole_range;
  }
  plan.steps.push_back(step);
}

// The post-step: the partner writes the range's result straight into the extra rank's
// work buffer, which that rank no longer reads from (its only send was the pre-step).
void add_post_step(ReducePlan& plan, const Group& group, Range range, std::uint32_t tag) {
  const int partner = fold_partner(group.size, group.me);
  if (partner < 0) return;
  Step step;
  step.tag = tag;
  step.peer = group.rank_of(partner);
  const Transfer whole_result = into_result(plan, range.offset, range.count);
  if (is_extra_rank(group.size, group.me)) {
    step.recv = whole_result;
  } else {
    step.send = whole_result;
  }
  plan.steps.push_back(step);
}

ReducePlan empty_plan(ReduceAlgorithm algorithm, int ranks, int rank, std::size_t count,
                      std::size_t chunk_elems, std::size_t pool_chunks) {
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
  return plan;
}

// Slot 0 receives the fold-in pre-step of a group of `folding_ranks` (all ranks, the
// leaders, a rail) over ranges of at most `range_elems`; it is empty when no rank folds in.
void add_fold_in_slot(ReducePlan& plan, int folding_ranks, std::size_t range_elems) {
  const bool folds = folding_ranks != core_ranks(folding_ranks);
  plan.landing_slots.push_back(ring_for(plan, 0, folds ? range_elems : 0));
}

void append_slot(ReducePlan& plan, std::size_t capacity) {
  const LandingSlot& last = plan.landing_slots.back();
  plan.landing_slots.push_back(ring_for(plan, last.offset + last.elems(), capacity));
}

// Recursive doubling over `group` and `range`: the pre-step (tag first_tag), core step
// k = 1..L (tag first_tag + k, slot k), the post-step (tag first_tag + L + 1). Core step k
// pairs core members differing in bit k-1: nearest neighbours first, which are usually on
// the same node.
void add_recursive_doubling(ReducePlan& plan, const Group& group, Range range, std::uint32_t first_tag) {
  const int levels = log2_exact(core_ranks(group.size));
  add_pre_step(plan, group, range, first_tag);
  const int me = core_index(group.size, group.me);
  if (me >= 0) {
    for (int k = 1; k <= levels; ++k) {
      Step step;
      step.tag = first_tag + static_cast<std::uint32_t>(k);
      step.peer = group.rank_of(core_rank(group.size, me ^ (1 << (k - 1))));
      // Both ends send the whole range into each other's slot k and reduce it from there.
      step.send = into_slot(plan, k, range.offset, range.count);
      step.recv = step.send;
      plan.steps.push_back(step);
    }
  }
  add_post_step(plan, group, range, first_tag + static_cast<std::uint32_t>(levels + 1));
}

// --- rabenseifner --------------------------------------------------------------------------

// Slot k (1..L) receives a half of p2 >> (k-1) consecutive blocks of a range of at most
// `range_elems`; bound it by the largest block so the layout is the same on every rank.
void append_halving_slots(ReducePlan& plan, int p2, std::size_t range_elems) {
  const std::size_t largest_block_elems = block_elems(range_elems, p2, 0);
  for (int k = 1; k <= log2_exact(p2); ++k) {
    append_slot(plan, static_cast<std::size_t>(p2 >> k) * largest_block_elems);
  }
}

// Reduce-scatter step k (1..L) of core member `me`: the blocks it keeps and those it gives
// its peer (a core member).
struct Halving {
  int peer;
  int keep_begin, keep_end;  // blocks
  int give_begin, give_end;
};

std::vector<Halving> halvings_of(const Group& group, int me) {
  const int p2 = core_ranks(group.size);
  std::vector<Halving> halvings;
  int begin = 0;
  int end = p2;
  for (int bit = 1; bit < p2; bit <<= 1) {
    const int mid = begin + (end - begin) / 2;
    const bool keep_lower = (me & bit) == 0;
    Halving h{core_rank(group.size, me ^ bit), keep_lower ? begin : mid, keep_lower ? mid : end,
              keep_lower ? mid : begin, keep_lower ? end : mid};
    halvings.push_back(h);
    begin = h.keep_begin;
    end = h.keep_end;
  }
  return halvings;
}

// Reduce-scatter step k (1..L) splits the block range this rank is responsible for in two:
// the core rank with bit k-1 clear keeps the lower half, its peer (bit set) the upper; each
// sends the other half and reduces the half it keeps. The largest exchange (half the
// range) is thus between nearest neighbours. The peer shares the same range because the
// range depends only on bits 0..k-2. After L steps this rank owns one block; the
// allgather replays the steps backwards, sending what it owns and receiving the half it
// gave away, straight into its work buffer. Tags: pre-step first_tag, reduce-scatter
// first_tag + k (slot k), allgather first_tag + L + j, post-step first_tag + 2L + 1.
void add_rabenseifner(ReducePlan& plan, const Group& group, Range range, std::uint32_t first_tag) {
  const int p2 = core_ranks(group.size);
  const int levels = log2_exact(p2);
  add_pre_step(plan, group, range, first_tag);
  const int me = core_index(group.size, group.me);
  if (me >= 0) {
    const std::vector<Halving> halvings = halvings_of(group, me);
    const auto blocks = [&](int begin, int end) {
      const std::size_t offset = block_offset(range.count, p2, begin);
      return Range{range.offset + offset, block_offset(range.count, p2, end) - offset};
    };
    for (int k = 1; k <= levels; ++k) {
      const Halving& h = halvings[static_cast<std::size_t>(k - 1)];
      const Range give = blocks(h.give_begin, h.give_end);
      const Range keep = blocks(h.keep_begin, h.keep_end);
      Step step;
      step.tag = first_tag + static_cast<std::uint32_t>(k);
      step.peer = group.rank_of(h.peer);
      step.send = into_slot(plan, k, give.offset, give.count);
      step.recv = into_slot(plan, k, keep.offset, keep.count);
      plan.steps.push_back(step);
    }
    for (int j = 1; j <= levels; ++j) {
      const Halving& h = halvings[static_cast<std::size_t>(levels - j)];
      const Range give = blocks(h.give_begin, h.give_end);
      const Range keep = blocks(h.keep_begin, h.keep_end);
      Step step;
      step.tag = first_tag + static_cast<std::uint32_t>(levels + j);
      step.peer = group.rank_of(h.peer);
      step.send = into_result(plan, keep.offset, keep.count);
      step.recv = into_result(plan, give.offset, give.count);
      plan.steps.push_back(step);
    }
  }
  add_post_step(plan, group, range, first_tag + static_cast<std::uint32_t>(2 * levels + 1));
}

// --- node_leader ---------------------------------------------------------------------------

// A node map as the node-aware plans read it: what is wrong with it ("" when nothing), and
// then its number of nodes N and the ranks of each.
struct NodeMap {
  std::string problem;
  int nodes = 0;
  std::vector<int> sizes;  // [node]: its ranks
};

NodeMap read_node_map(const std::vector<int>& node_of) {
  NodeMap map;
  if (node_of.empty()) return {"the node map is empty (it needs the node of every rank)", 0, {}};
  if (node_of.size() > static_cast<std::size_t>(INT_MAX)) {
    return {std::to_string(node_of.size()) + " ranks are more than a plan numbers", 0, {}};
  }
  const auto ranks = static_cast<int>(node_of.size());
  map.sizes.assign(node_of.size(), 0);
  for (int r = 0; r < ranks; ++r) {
    const int node = node_of[static_cast<std::size_t>(r)];
    if (node < 0 || node >= ranks) {
      return {"rank " + std::to_string(r) + " is on node " + std::to_string(node) + ", outside 0.." +
                  std::to_string(ranks - 1) + " (nodes are numbered 0..N-1)",
              0, {}};
    }
    ++map.sizes[static_cast<std::size_t>(node)];
    map.nodes = std::max(map.nodes, node + 1);
  }
  map.sizes.resize(static_cast<std::size_t>(map.nodes));
  for (int node = 0; node < map.nodes; ++node) {
    if (map.sizes[static_cast<std::size_t>(node)] == 0) {
      return {"node " + std::to_string(node) + " has no rank, but node " + std::to_string(map.nodes - 1) +
                  " has (nodes are numbered 0..N-1, every one used)",
              0, {}};
    }
  }
  return map;
}

// The node map, once it names nodes 0..N-1, every one; `plan_name` heads the error.
NodeMap check_node_map(const std::vector<int>& node_of, const char* plan_name) {
  NodeMap map = read_node_map(node_of);
  if (!map.problem.empty()) invalid_argument(std::string(plan_name) + " plan: " + map.problem);
  return map;
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

// --- node_rails ----------------------------------------------------------------------------

// This rank's place in node_rails: its node's ranks, and its rail, the ranks of its local
// index on every node.
struct Rails {
  std::vector<int> members;  // [local index]: the node's ranks in rank order
  int local = 0;             // this rank's local index: the block it reduces
  std::vector<int> rail;     // [node]: the rank of this local index on that node
};

Rails rails_of(const std::vector<int>& node_of, int rank, int nodes) {
  Rails rails;
  const int my_node = node_of[static_cast<std::size_t>(rank)];
  std::vector<int> seen(static_cast<std::size_t>(nodes), 0);  // [node]: ranks met so far
  for (int r = 0; r < static_cast<int>(node_of.size()); ++r) {
    const auto node = static_cast<std::size_t>(node_of[static_cast<std::size_t>(r)]);
    if (static_cast<int>(node) == my_node) {
      if (r == rank) rails.local = seen[node];
      rails.members.push_back(r);
    }
    ++seen[node];
  }
  rails.rail.assign(static_cast<std::size_t>(nodes), -1);
  std::fill(seen.begin(), seen.end(), 0);
  for (int r = 0; r < static_cast<int>(node_of.size()); ++r) {
    const auto node = static_cast<std::size_t>(node_of[static_cast<std::size_t>(r)]);
    if (seen[node]++ == rails.local) rails.rail[node] = r;
  }
  return rails;
}

// Throws unless every node holds the same number of ranks, naming two that differ.
void check_equal_nodes(const std::vector<int>& sizes) {
  for (std::size_t node = 1; node < sizes.size(); ++node) {
    if (sizes[node] != sizes[0]) {
      invalid_argument("node_rails plan: node " + std::to_string(node) + " holds " + std::to_string(sizes[node]) +
                       " ranks but node 0 holds " + std::to_string(sizes[0]) +
                       "; node_rails needs the same number of ranks on every node (node_leader takes any)");
    }
  }
}

// The node exchanges pair every two local indices once, in rounds where each index meets
// at most one peer (a round-robin tournament: a 1-factorisation of the complete graph, so
// no rank waits on a peer busy with another): size - 1 rounds for an even size, size for
// an odd one, where each index sits out one round.
int pairing_rounds(int size) {
  if (size == 1) return 0;
  return size % 2 == 0 ? size - 1 : size;
}

// The round in which local indices a != b meet: (a + b) mod size for an odd size; for an
// even one, the odd size - 1 others play that way, and the last meets whoever sits out.
int pairing_round(int size, int a, int b) {
  const auto sum = [](std::int64_t x, std::int64_t y, std::int64_t m) { return static_cast<int>((x + y) % m); };
  if (size % 2 == 1) return sum(a, b, size);
  const int last = size - 1;
  if (a == last) return sum(b, b, last);
  if (b == last) return sum(a, a, last);
  return sum(a, b, last);
}

// This rank's node peers, by local index, in the order of their rounds.
std::vector<int> peers_by_round(const Rails& rails) {
  const auto size = static_cast<int>(rails.members.size());
  std::vector<int> peers;
  for (int j = 0; j < size; ++j) {
    if (j != rails.local) peers.push_back(j);
  }
  std::sort(peers.begin(), peers.end(), [&](int a, int b) {
    return pairing_round(size, rails.local, a) < pairing_round(size, rails.local, b);
  });
  return peers;
}

// Node reduce-scatter: in its round with local peer j, this rank sends its copy of block j
// into j's slot for this rank and reduces j's copy of its own block from its slot for j.
// Local index i receives from i + d (mod size) in slot first_slot + d - 1, d = 1..size-1.
void add_node_reduce_scatter(ReducePlan& plan, const Rails& rails, int first_slot) {
  const auto size = static_cast<int>(rails.members.size());
  const int i = rails.local;
  const auto slot_at = [&](int receiver, int sender) { return first_slot + (sender - receiver + size) % size - 1; };
  for (const int j : peers_by_round(rails)) {
    Step step;
    step.tag = static_cast<std::uint32_t>(pairing_round(size, i, j));
    step.peer = rails.members[static_cast<std::size_t>(j)];
    step.send = into_slot(plan, slot_at(j, i), block_offset(plan.count, size, j), block_elems(plan.count, size, j));
    step.recv = into_slot(plan, slot_at(i, j), block_offset(plan.count, size, i), block_elems(plan.count, size, i));
    plan.steps.push_back(step);
  }
}

// Node allgather: in its round with local peer j (tag first_tag + round), this rank writes
// its reduced block straight into j's work buffer and j writes block j into its own. Each
// side's block is one the other no longer reads: it left in the reduce-scatter.
void add_node_allgather(ReducePlan& plan, const Rails& rails, std::uint32_t first_tag) {
  const auto size = static_cast<int>(rails.members.size());
  const int i = rails.local;
  for (const int j : peers_by_round(rails)) {
    Step step;
    step.tag = first_tag + static_cast<std::uint32_t>(pairing_round(size, i, j));
    step.peer = rails.members[static_cast<std::size_t>(j)];
    step.send = into_result(plan, block_offset(plan.count, size, i), block_elems(plan.count, size, i));
    step.recv = into_result(plan, block_offset(plan.count, size, j), block_elems(plan.count, size, j));
    plan.steps.push_back(step);
  }
}

// Rabenseifner over the rails, or recursive doubling where at most two ranks of a rail
// remain after the fold-in (one exchange of the block instead of two of its halves).
bool rails_halve(int nodes) { return core_ranks(nodes) > 2; }

std::uint32_t rail_tags(int nodes) {
  const int levels = log2_exact(core_ranks(nodes));
  return static_cast<std::uint32_t>((rails_halve(nodes) ? 2 * levels : levels) + 2);
}

}  // namespace

const char* algorithm_name(ReduceAlgorithm algorithm) {
  switch (algorithm) {
    case ReduceAlgorithm::recursive_doubling: return "recursive_doubling";
    case ReduceAlgorithm::rabenseifner: return "rabenseifner";
    case ReduceAlgorithm::node_leader: return "node_leader";
    case ReduceAlgorithm::node_rails: return "node_rails";
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
  ReducePlan plan = empty_plan(ReduceAlgorithm::recursive_doubling, ranks, rank, count, chunk_elems, pool_chunks);
  add_fold_in_slot(plan, ranks, count);
  const int levels = log2_exact(core_ranks(ranks));
  for (int k = 1; k <= levels; ++k) append_slot(plan, count);
  plan.tag_count = static_cast<std::uint32_t>(levels + 2);
  add_recursive_doubling(plan, all_ranks(plan), whole_vector(plan), kPreStepTag);
  return plan;
}

ReducePlan rabenseifner(int ranks, int rank, std::size_t count, std::size_t chunk_elems,
                        std::size_t pool_chunks) {
  ReducePlan plan = empty_plan(ReduceAlgorithm::rabenseifner, ranks, rank, count, chunk_elems, pool_chunks);
  add_fold_in_slot(plan, ranks, count);
  append_halving_slots(plan, core_ranks(ranks), count);
  plan.tag_count = static_cast<std::uint32_t>(2 * log2_exact(core_ranks(ranks)) + 2);
  add_rabenseifner(plan, all_ranks(plan), whole_vector(plan), kPreStepTag);
  return plan;
}

// Slots: 0 the leaders' fold-in, 1..L their recursive doubling steps, L+1..L+Ln the node
// reduce levels. Only leaders send across nodes, and only in recursive doubling.
ReducePlan node_leader(const std::vector<int>& node_of, int rank, std::size_t count, std::size_t chunk_elems,
                       std::size_t pool_chunks) {
  const int nodes = check_node_map(node_of, "node_leader").nodes;
  const auto ranks = static_cast<int>(node_of.size());
  ReducePlan plan = empty_plan(ReduceAlgorithm::node_leader, ranks, rank, count, chunk_elems, pool_chunks);
  add_fold_in_slot(plan, nodes, count);
  const NodeTree tree = node_tree(node_of, rank, nodes);
  const int leader_levels = log2_exact(core_ranks(nodes));
  for (int k = 1; k <= leader_levels + tree.levels; ++k) append_slot(plan, count);
  plan.tag_count = static_cast<std::uint32_t>(2 * tree.levels + leader_levels + 2);

  const std::vector<TreeLink> links = tree_links(tree);
  add_node_reduce(plan, links, leader_levels + 1);
  if (tree.local == 0) {
    const Group leaders{nodes, node_of[static_cast<std::size_t>(rank)], tree.leaders};
    add_recursive_doubling(plan, leaders, whole_vector(plan), static_cast<std::uint32_t>(tree.levels));
  }
  add_node_broadcast(plan, links, tree.levels, static_cast<std::uint32_t>(tree.levels + leader_levels + 2));
  return plan;
}

// Every slot is bounded by the largest block, the same on every rank: 0 the rail's fold-in,
// 1..Lr its reduce-scatter (or recursive doubling) steps, then the node reduce-scatter's
// slots by the sender's distance. Only the rails cross nodes, each carrying one block.
ReducePlan node_rails(const std::vector<int>& node_of, int rank, std::size_t count, std::size_t chunk_elems,
                      std::size_t pool_chunks) {
  const NodeMap map = check_node_map(node_of, "node_rails");
  check_equal_nodes(map.sizes);
  const int nodes = map.nodes;
  const auto ranks = static_cast<int>(node_of.size());
  ReducePlan plan = empty_plan(ReduceAlgorithm::node_rails, ranks, rank, count, chunk_elems, pool_chunks);
  const Rails rails = rails_of(node_of, rank, nodes);
  const auto node_size = static_cast<int>(rails.members.size());
  const std::size_t largest_block_elems = block_elems(count, node_size, 0);
  add_fold_in_slot(plan, nodes, largest_block_elems);
  if (rails_halve(nodes)) {
    append_halving_slots(plan, core_ranks(nodes), largest_block_elems);
  } else {
    for (int k = 1; k <= log2_exact(core_ranks(nodes)); ++k) append_slot(plan, largest_block_elems);
  }
  const auto first_node_slot = static_cast<int>(plan.landing_slots.size());
  for (int d = 1; d < node_size; ++d) append_slot(plan, largest_block_elems);
  const auto node_tags = static_cast<std::uint32_t>(pairing_rounds(node_size));
  plan.tag_count = 2 * node_tags + rail_tags(nodes);

  add_node_reduce_scatter(plan, rails, first_node_slot);
  const Group rail{nodes, node_of[static_cast<std::size_t>(rank)], rails.rail};
  const Range block{block_offset(count, node_size, rails.local), block_elems(count, node_size, rails.local)};
  if (rails_halve(nodes)) {
    add_rabenseifner(plan, rail, block, node_tags);
  } else {
    add_recursive_doubling(plan, rail, block, node_tags);
  }
  add_node_allgather(plan, rails, node_tags + rail_tags(nodes));
  return plan;
}

bool node_rails_applies(const std::vector<int>& node_of) {
  const NodeMap map = read_node_map(node_of);
  if (!map.problem.empty() || map.nodes < 2) return false;
  const bool equal = std::all_of(map.sizes.begin(), map.sizes.end(), [&](int size) { return size == map.sizes[0]; });
  return equal && map.sizes[0] > 1;
}

ReducePlan make_plan(ReduceAlgorithm algorithm, int ranks, int rank, std::size_t count,
                     std::size_t chunk_elems, std::size_t pool_chunks) {
  switch (algorithm) {
    case ReduceAlgorithm::recursive_doubling: return recursive_doubling(ranks, rank, count, chunk_elems, pool_chunks);
    case ReduceAlgorithm::rabenseifner: return rabenseifner(ranks, rank, count, chunk_elems, pool_chunks);
    case ReduceAlgorithm::node_leader:
      invalid_argument("reduction plan: node_leader needs the node map of the ranks; call node_leader(node_of, ...)");
    case ReduceAlgorithm::node_rails:
      invalid_argument("reduction plan: node_rails needs the node map of the ranks; call node_rails(node_of, ...)");
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
