// The reduction plans as rows of one table, and the rules that choose a row by the bytes a
// round moves (docs/design.md, "Reduction plan"). The rules are data: the defaults, which
// PCOLL_RD_MAX_BYTES moves, and PCOLL_PLAN_RULES, tried before them, in the form
// `recursive_doubling:0-32K,rabenseifner:32K-inf` (as UCC's score ranges read). A rule
// applies to the bytes from its lower bound up to, not including, its upper bound; the first
// rule whose range holds a round's bytes and whose plan applies to the handle wins.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pcoll {

enum class PlanKind : uint8_t { recursive_doubling, rabenseifner, direct, node_leader, node_rails };

struct PlanRow {
  PlanKind kind;
  const char* name;     // as PCOLL_PLAN_RULES, pcoll_allreduce_stats and pcoll_info name it
  const char* applies;  // when the row can run a handle
};

// Every row, in the order pcoll_info lists them.
std::span<const PlanRow> plan_rows();
const PlanRow& plan_row(PlanKind kind);

struct PlanRule {
  PlanKind kind;
  uint64_t from_bytes = 0;
  uint64_t to_bytes = UINT64_MAX;  // UINT64_MAX: no upper bound ("inf")
};

// PCOLL_PLAN_RULES: comma-separated `name:from-to`, sizes in bytes with an optional K, M or
// G (powers of 1024), `to` may be `inf`. Error(invalid_argument) naming the item at fault.
std::vector<PlanRule> parse_plan_rules(std::string_view text);
// The defaults: recursive doubling up to rd_max_bytes (PCOLL_RD_MAX_BYTES), then the direct
// plan, then Rabenseifner.
std::vector<PlanRule> default_plan_rules(uint64_t rd_max_bytes);
// The rules in PCOLL_PLAN_RULES's form (parse_plan_rules reads it back).
std::string format_plan_rules(std::span<const PlanRule> rules);
// The rules a handle follows: PCOLL_PLAN_RULES's, then the defaults of PCOLL_RD_MAX_BYTES.
std::vector<PlanRule> effective_plan_rules(std::string_view user_rules, uint64_t rd_max_bytes);
// The same, from this process's PCOLL_PLAN_RULES and PCOLL_RD_MAX_BYTES (the engine, the
// simulator and pcoll_info read them alike).
std::vector<PlanRule> plan_rules_from_settings();
// 64 bits that differ when the rules do: what ranks compare at creation.
uint64_t plan_rules_digest(std::span<const PlanRule> rules);

// What decides whether a row applies to a handle.
struct PlanQuery {
  uint64_t bytes = 0;           // what a round moves: the vector and its flag words
  bool direct_possible = false; // every peer's memory maps here, PCOLL_PLAN is not flat, and the
                                // notifications number the direct plan's phases and slices
  bool nodes_possible = false;  // the job spans several nodes, some node holds more than one
                                // rank, and PCOLL_PLAN is not flat
  bool rails_possible = false;  // as nodes_possible, every node holding the same number of ranks,
                                // and the notifications number node_rails' exchanges
};

// The first of `rules` whose range holds query.bytes and whose row applies; recursive
// doubling when none does.
PlanKind choose_plan(std::span<const PlanRule> rules, const PlanQuery& query);

}  // namespace pcoll
