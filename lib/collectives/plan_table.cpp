// The reduction plans' table and the rules that choose among them (plan_table.hpp).
#include <collectives/plan_table.hpp>

#include <array>
#include <charconv>

#include <collectives/collectives_settings.hpp>
#include <support/error.hpp>
#include <support/hash.hpp>

namespace pcoll {
namespace {

constexpr std::array kRows = {
    PlanRow{PlanKind::recursive_doubling, "recursive_doubling",
            "always: log2 P exchanges of the whole vector (small vectors)"},
    PlanRow{PlanKind::rabenseifner, "rabenseifner",
            "always (recursive doubling where at most two ranks remain after the fold-in): "
            "reduce-scatter and allgather, 2 log2 P exchanges of shrinking halves (large vectors)"},
    PlanRow{PlanKind::direct, "direct",
            "every rank maps every other's memory (one host on ucx:shm) and PCOLL_PLAN is not flat: "
            "each rank reduces its slice from its peers' buffers where they lie"},
    PlanRow{PlanKind::node_leader, "node_leader",
            "the job spans several nodes, some node holds more than one rank, and PCOLL_PLAN is not flat: "
            "reduce on each node to its lowest rank, recursive doubling among those, broadcast on each node "
            "(only where PCOLL_PLAN_RULES names it)"},
    PlanRow{PlanKind::node_rails, "node_rails",
            "the job spans several nodes of the same number of ranks (more than one), the notifications "
            "number its exchanges, and PCOLL_PLAN is not flat: reduce-scatter on each node, Rabenseifner "
            "among the ranks of the same local index (a rail), allgather on each node (large vectors; only "
            "where PCOLL_PLAN_RULES names it)"},
};

constexpr std::string_view kRulesForm = "name:from-to[,name:from-to...], e.g. recursive_doubling:0-32K,rabenseifner:32K-inf";

uint64_t parse_size(std::string_view text, std::string_view item) {
  const auto bad = [&](const std::string& why) -> uint64_t {
    invalid_argument("PCOLL_PLAN_RULES: '" + std::string(item) + "': " + why + " (form: " + std::string(kRulesForm) +
                     ")");
  };
  if (text == "inf") return UINT64_MAX;
  uint64_t unit = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K': case 'k': unit = uint64_t{1} << 10; break;
      case 'M': case 'm': unit = uint64_t{1} << 20; break;
      case 'G': case 'g': unit = uint64_t{1} << 30; break;
      default: break;
    }
    if (unit != 1) text.remove_suffix(1);
  }
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size())
    return bad("'" + std::string(text) + "' is not a size in bytes (digits, then K, M or G, or inf)");
  if (value > UINT64_MAX / unit / 2) return bad("a size above 2^62 bytes");
  return value * unit;
}

}  // namespace

std::span<const PlanRow> plan_rows() { return kRows; }

const PlanRow& plan_row(PlanKind kind) {
  for (const PlanRow& row : kRows)
    if (row.kind == kind) return row;
  fail(Errc::internal, "no plan row for kind " + std::to_string(static_cast<int>(kind)));
}

std::vector<PlanRule> parse_plan_rules(std::string_view text) {
  std::vector<PlanRule> rules;
  if (text.empty()) return rules;
  for (bool more = true; more;) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    more = comma != std::string_view::npos;
    text = more ? text.substr(comma + 1) : std::string_view{};
    const size_t colon = item.find(':');
    const size_t dash = colon == std::string_view::npos ? colon : item.find('-', colon);
    if (colon == std::string_view::npos || dash == std::string_view::npos)
      invalid_argument("PCOLL_PLAN_RULES: '" + std::string(item) + "' is not name:from-to (form: " +
                       std::string(kRulesForm) + ")");
    const std::string_view name = item.substr(0, colon);
    const PlanRow* row = nullptr;
    for (const PlanRow& r : kRows)
      if (name == r.name) row = &r;
    if (row == nullptr) {
      std::string names;
      for (const PlanRow& r : kRows) names += std::string(names.empty() ? "" : ", ") + r.name;
      invalid_argument("PCOLL_PLAN_RULES: '" + std::string(item) + "' names no plan; the plans are " + names);
    }
    PlanRule rule{row->kind, parse_size(item.substr(colon + 1, dash - colon - 1), item),
                  parse_size(item.substr(dash + 1), item)};
    if (rule.from_bytes == UINT64_MAX || rule.from_bytes >= rule.to_bytes)
      invalid_argument("PCOLL_PLAN_RULES: '" + std::string(item) + "' is an empty range: from must be below to");
    rules.push_back(rule);
  }
  return rules;
}

std::vector<PlanRule> default_plan_rules(uint64_t rd_max_bytes) {
  const uint64_t above = rd_max_bytes == UINT64_MAX ? UINT64_MAX : rd_max_bytes + 1;
  return {PlanRule{PlanKind::recursive_doubling, 0, above}, PlanRule{PlanKind::direct, above, UINT64_MAX},
          PlanRule{PlanKind::rabenseifner, above, UINT64_MAX}};
}

std::string format_plan_rules(std::span<const PlanRule> rules) {
  std::string out;
  for (const PlanRule& r : rules) {
    if (!out.empty()) out += ',';
    out += std::string(plan_row(r.kind).name) + ":" + std::to_string(r.from_bytes) + "-" +
           (r.to_bytes == UINT64_MAX ? std::string("inf") : std::to_string(r.to_bytes));
  }
  return out;
}

std::vector<PlanRule> effective_plan_rules(std::string_view user_rules, uint64_t rd_max_bytes) {
  std::vector<PlanRule> rules = parse_plan_rules(user_rules);
  const std::vector<PlanRule> defaults = default_plan_rules(rd_max_bytes);
  rules.insert(rules.end(), defaults.begin(), defaults.end());
  return rules;
}

std::vector<PlanRule> plan_rules_from_settings() {
  return effective_plan_rules(CollectivesSettings::get_text("PCOLL_PLAN_RULES").value_or(""),
                              CollectivesSettings::get_unsigned("PCOLL_RD_MAX_BYTES"));
}

uint64_t plan_rules_digest(std::span<const PlanRule> rules) {
  uint64_t digest = splitmix64(rules.size());
  for (const PlanRule& r : rules)
    digest = hash3(digest, (static_cast<uint64_t>(r.kind) << 56) ^ r.from_bytes, r.to_bytes);
  return digest;
}

PlanKind choose_plan(std::span<const PlanRule> rules, const PlanQuery& query) {
  for (const PlanRule& r : rules) {
    if (query.bytes < r.from_bytes || query.bytes >= r.to_bytes) continue;
    if (r.kind == PlanKind::direct && !query.direct_possible) continue;
    if (r.kind == PlanKind::node_leader && !query.nodes_possible) continue;
    if (r.kind == PlanKind::node_rails && !query.rails_possible) continue;
    return r.kind;
  }
  return PlanKind::recursive_doubling;
}

}  // namespace pcoll
