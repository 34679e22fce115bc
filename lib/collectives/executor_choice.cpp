// The choice of a handle's round executor (executor_choice.hpp).
#include <collectives/executor_choice.hpp>

#include <algorithm>

#include <collectives/direct_executor.hpp>
#include <collectives/plan_executor.hpp>
#include <collectives/plan_table.hpp>
#include <collectives/reduce_plan.hpp>
#include <collectives/round_flags.hpp>
#include <support/error.hpp>

namespace pcoll {
namespace {

// The node map holds every rank, more than one node, and a node with more than one rank.
bool spans_shared_nodes(const std::vector<int>& node_of, int ranks) {
  if (node_of.size() != static_cast<size_t>(ranks) || ranks < 2) return false;
  std::vector<int> per_node(node_of.size(), 0);
  for (const int node : node_of) {
    if (node < 0 || static_cast<size_t>(node) >= per_node.size()) return false;
    ++per_node[static_cast<size_t>(node)];
  }
  const auto used = std::count_if(per_node.begin(), per_node.end(), [](int n) { return n > 0; });
  return used > 1 && std::any_of(per_node.begin(), per_node.end(), [](int n) { return n > 1; });
}

}  // namespace

ChosenExecutor choose_executor(const ExecutorInputs& in) {
  const size_t total_elems = in.count + RoundFlags(in.ranks, in.acc_elem_bytes).words();
  const size_t chunk_elems = chunk_elems_for(total_elems, in.chunk_bytes, in.acc_elem_bytes, in.max_chunks);
  PlanQuery query;
  query.bytes = static_cast<uint64_t>(total_elems) * in.acc_elem_bytes;
  query.direct_possible = !in.flat_plan && in.ranks > 1 && static_cast<uint32_t>(in.ranks) <= in.max_chunks &&
                          DirectExecutor::kTags <= in.max_tags && in.peers_mapped;
  query.nodes_possible = !in.flat_plan && spans_shared_nodes(in.node_of, in.ranks);
  // node_rails' tags grow with the node size (reduce_plan.hpp): where the notifications
  // cannot number them the row does not apply, and the next rule's plan runs.
  query.rails_possible = query.nodes_possible && node_rails_applies(in.node_of) &&
                         node_rails(in.node_of, in.rank, 0, 1, 2).tag_count <= in.max_tags;
  const PlanKind kind = choose_plan(in.plan_rules, query);
  ChosenExecutor chosen;
  chosen.direct = kind == PlanKind::direct;
  // With two or fewer ranks after the fold-in Rabenseifner is recursive doubling's single
  // exchange or less.
  const ReduceAlgorithm algorithm = kind == PlanKind::rabenseifner && core_ranks(in.ranks) > 2
                                        ? ReduceAlgorithm::rabenseifner
                                        : ReduceAlgorithm::recursive_doubling;
  // The landing pool of one exchange: pool_bytes worth of chunks, at least two.
  const size_t pool_chunks = std::max<size_t>(2, in.pool_bytes / (chunk_elems * in.acc_elem_bytes));
  ReducePlan plan = kind == PlanKind::node_leader ? node_leader(in.node_of, in.rank, total_elems, chunk_elems, pool_chunks)
                    : kind == PlanKind::node_rails
                        ? node_rails(in.node_of, in.rank, total_elems, chunk_elems, pool_chunks)
                        : make_plan(algorithm, in.ranks, in.rank, chosen.direct ? 0 : total_elems, chunk_elems, pool_chunks);
  if (plan.tag_count > in.max_tags)
    fail(Errc::unsupported, "a reduction plan over " + std::to_string(in.ranks) + " ranks needs " +
                                std::to_string(plan.tag_count) + " exchange tags; " + in.codec + " number at most " +
                                std::to_string(in.max_tags));
  chosen.landing_elems = plan.landing_elems();
  if (chosen.direct) {
    // The cache block of the direct plan's reductions: a chunk, at most 64 KiB, so that a
    // block and its P - 1 sources stay in a core's cache.
    const size_t block = std::min(chunk_elems, std::max<size_t>(1, 65536 / in.acc_elem_bytes));
    chosen.executor = std::make_unique<DirectExecutor>(in.ranks, in.rank, total_elems, block, in.handle);
  } else {
    // A start is marked on the exchange's tag + tag_count, where the notifications number it.
    const bool marks_starts = 2 * static_cast<uint64_t>(plan.tag_count) <= in.max_tags;
    chosen.executor =
        std::make_unique<PlanExecutor>(std::move(plan), in.inject_bytes / in.acc_elem_bytes, in.handle, marks_starts);
  }
  return chosen;
}

}  // namespace pcoll
