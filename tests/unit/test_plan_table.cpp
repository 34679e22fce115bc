// Unit tests of the reduction plans' table and its rules (lib/collectives/plan_table.cpp):
// the defaults keep recursive doubling up to PCOLL_RD_MAX_BYTES and the direct plan or
// Rabenseifner above, PCOLL_PLAN_RULES's rules come first, a bad rule names itself, and
// choose_executor builds the row chosen on the bytes a round moves, flag words included.
#include <doctest/doctest.h>

#include <string>

#include <collectives/executor_choice.hpp>
#include <collectives/plan_table.hpp>
#include <collectives/round_flags.hpp>
#include <support/error.hpp>

using namespace pcoll;

namespace {

PlanKind chosen(const std::string& user, uint64_t rd_max, uint64_t bytes, bool direct_possible,
                bool nodes_possible = false) {
  return choose_plan(effective_plan_rules(user, rd_max), PlanQuery{bytes, direct_possible, nodes_possible});
}

std::string refusal(const std::string& text) {
  try {
    (void)parse_plan_rules(text);
  } catch (const Error& e) {
    CHECK(e.code() == Errc::invalid_argument);
    return e.what();
  }
  FAIL("PCOLL_PLAN_RULES='" << text << "' was accepted");
  return "";
}

}  // namespace

TEST_CASE("every plan is a row with a name and when it applies") {
  CHECK(plan_rows().size() == 5);
  for (const PlanRow& row : plan_rows()) {
    CHECK(std::string(row.name) == plan_row(row.kind).name);
    CHECK(std::string(row.applies).size() > 10);
  }
}

TEST_CASE("the defaults: recursive doubling up to PCOLL_RD_MAX_BYTES, then direct where it applies, else Rabenseifner") {
  CHECK(chosen("", 32768, 8, true) == PlanKind::recursive_doubling);
  CHECK(chosen("", 32768, 32768, true) == PlanKind::recursive_doubling);
  CHECK(chosen("", 32768, 32769, true) == PlanKind::direct);
  CHECK(chosen("", 32768, 32769, false) == PlanKind::rabenseifner);
  CHECK(chosen("", 1 << 20, 1 << 20, false) == PlanKind::recursive_doubling);
  CHECK(chosen("", 0, 1, false) == PlanKind::rabenseifner);
}

TEST_CASE("PCOLL_PLAN_RULES come before the defaults, and a direct rule that does not apply falls through") {
  const std::string rules = "rabenseifner:0-1K,recursive_doubling:1K-64K,direct:64K-inf";
  CHECK(chosen(rules, 32768, 100, true) == PlanKind::rabenseifner);
  CHECK(chosen(rules, 32768, 1024, true) == PlanKind::recursive_doubling);
  CHECK(chosen(rules, 32768, 65535, true) == PlanKind::recursive_doubling);
  CHECK(chosen(rules, 32768, 65536, true) == PlanKind::direct);
  CHECK(chosen(rules, 32768, 65536, false) == PlanKind::rabenseifner);  // the defaults' row
  CHECK(chosen("recursive_doubling:0-inf", 32768, uint64_t{1} << 40, true) == PlanKind::recursive_doubling);
}

TEST_CASE("node_leader runs only where PCOLL_PLAN_RULES names it and the job spans nodes that hold several ranks") {
  for (const uint64_t bytes : {uint64_t{8}, uint64_t{1} << 20}) {
    CHECK(chosen("", 32768, bytes, false, true) != PlanKind::node_leader);
    CHECK(chosen("node_leader:0-inf", 32768, bytes, false, true) == PlanKind::node_leader);
    CHECK(chosen("node_leader:0-inf", 32768, bytes, false, false) != PlanKind::node_leader);
  }
  CHECK(chosen("node_leader:0-64K", 32768, 65536, false, true) == PlanKind::rabenseifner);
}

TEST_CASE("node_rails runs only where PCOLL_PLAN_RULES names it and every node holds the same ranks") {
  const auto rules = effective_plan_rules("node_rails:64K-inf", 32768);
  PlanQuery query{uint64_t{1} << 20, false, true};
  CHECK(choose_plan(rules, query) == PlanKind::rabenseifner);  // unequal nodes: the defaults
  query.rails_possible = true;
  CHECK(choose_plan(rules, query) == PlanKind::node_rails);
  query.bytes = 8;
  CHECK(choose_plan(rules, query) == PlanKind::recursive_doubling);
  CHECK(choose_plan(effective_plan_rules("", 32768), PlanQuery{uint64_t{1} << 20, false, true, true}) !=
        PlanKind::node_rails);
}

TEST_CASE("rules read back as written, and their digest tells different rules apart") {
  const auto rules = parse_plan_rules("recursive_doubling:0-32K,rabenseifner:32k-1G,direct:1M-inf");
  REQUIRE(rules.size() == 3);
  CHECK(rules[1].from_bytes == 32768);
  CHECK(rules[1].to_bytes == uint64_t{1} << 30);
  CHECK(rules[2].to_bytes == UINT64_MAX);
  CHECK(format_plan_rules(rules) == "recursive_doubling:0-32768,rabenseifner:32768-1073741824,direct:1048576-inf");
  CHECK(format_plan_rules(parse_plan_rules(format_plan_rules(rules))) == format_plan_rules(rules));
  CHECK(parse_plan_rules("").empty());
  CHECK(plan_rules_digest(effective_plan_rules("", 32768)) == plan_rules_digest(effective_plan_rules("", 32768)));
  CHECK(plan_rules_digest(effective_plan_rules("", 32768)) != plan_rules_digest(effective_plan_rules("", 65536)));
  CHECK(plan_rules_digest(effective_plan_rules("rabenseifner:0-inf", 32768)) !=
        plan_rules_digest(effective_plan_rules("", 32768)));
}

TEST_CASE("a bad rule is refused naming the rule and what is wrong") {
  CHECK(refusal("ring:0-inf").find("'ring:0-inf' names no plan") != std::string::npos);
  CHECK(refusal("ring:0-inf").find("recursive_doubling, rabenseifner, direct") != std::string::npos);
  CHECK(refusal("rabenseifner").find("is not name:from-to") != std::string::npos);
  CHECK(refusal("rabenseifner:0").find("is not name:from-to") != std::string::npos);
  CHECK(refusal("rabenseifner:x-inf").find("'x' is not a size") != std::string::npos);
  CHECK(refusal("rabenseifner:4K-1K").find("empty range") != std::string::npos);
  CHECK(refusal("rabenseifner:1K-1K").find("empty range") != std::string::npos);
  CHECK(refusal("rabenseifner:inf-inf").find("empty range") != std::string::npos);
  CHECK(refusal("rabenseifner:0-1T").find("is not a size") != std::string::npos);
  CHECK(refusal("rabenseifner:0-1K,").find("is not name:from-to") != std::string::npos);
}

TEST_CASE("choose_executor counts the flag words in the bytes it decides on") {
  ExecutorInputs in;
  in.ranks = 16;
  in.rank = 3;
  in.acc_elem_bytes = 4;
  in.chunk_bytes = 65536;
  in.pool_bytes = 1 << 20;
  in.max_chunks = 4096;
  in.max_tags = 128;
  in.plan_rules = effective_plan_rules("", 32768);
  const uint64_t flag_bytes = RoundFlags(in.ranks, 4).words() * 4;
  in.count = (32768 - flag_bytes) / 4;  // vector and flags: exactly 32 KiB
  CHECK(std::string(choose_executor(in).executor->algorithm()) == "recursive_doubling");
  in.count += 1;
  CHECK(std::string(choose_executor(in).executor->algorithm()) == "rabenseifner");
  in.peers_mapped = true;
  CHECK(choose_executor(in).direct);
  in.flat_plan = true;
  CHECK_FALSE(choose_executor(in).direct);
  in.plan_rules = effective_plan_rules("recursive_doubling:0-inf", 32768);
  CHECK(std::string(choose_executor(in).executor->algorithm()) == "recursive_doubling");
  in.ranks = 3;  // two ranks after the fold-in: Rabenseifner is recursive doubling
  in.rank = 0;
  in.plan_rules = effective_plan_rules("rabenseifner:0-inf", 32768);
  CHECK(std::string(choose_executor(in).executor->algorithm()) == "recursive_doubling");
}
