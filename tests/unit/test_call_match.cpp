// Matching the ranks' collective calls (collectives/call_match.hpp): one case per rule of
// docs/design.md, "Mismatched calls".
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <collectives/call_match.hpp>

using namespace pcoll;

namespace {

CallRecord call(CallKind kind, uint64_t handle = 0, uint64_t rounds = 0, RoundsTable table = {{0, 0}}) {
  return CallRecord{CallHeader{kind, 0, handle, rounds}, std::move(table)};
}

bool names(const std::string& text, const std::vector<std::string>& words) {
  for (const auto& word : words)
    if (text.find(word) == std::string::npos) return false;
  return true;
}

}  // namespace

TEST_CASE("the same call with the same rounds on every rank matches") {
  const std::vector<CallRecord> records{call(CallKind::barrier), call(CallKind::barrier), call(CallKind::barrier)};
  CHECK_FALSE(agreement_mismatch(1, records));
  const std::vector<CallRecord> destroys{call(CallKind::destroy, 0, 5, {{0, 5}}), call(CallKind::destroy, 0, 5, {{0, 5}})};
  CHECK_FALSE(agreement_mismatch(0, destroys));
}

TEST_CASE("different calls at an agreement name both calls and both ranks") {
  const std::vector<CallRecord> records{call(CallKind::create, 1), call(CallKind::create, 1), call(CallKind::finalize)};
  const auto on_two = agreement_mismatch(2, records);
  REQUIRE(on_two);
  CHECK(*on_two == "rank 0 called create of handle 1 while rank 2 called finalize");
  const auto on_zero = agreement_mismatch(0, records);
  REQUIRE(on_zero);
  CHECK(*on_zero == "rank 2 called finalize while rank 0 called create of handle 1");
}

TEST_CASE("a destroy after different numbers of rounds is a mismatch") {
  const std::vector<CallRecord> records{call(CallKind::destroy, 0, 0, {{0, 0}}), call(CallKind::destroy, 0, 1, {{0, 1}})};
  const auto found = agreement_mismatch(0, records);
  REQUIRE(found);
  CHECK(names(*found, {"rank 1", "destroy of handle 0 after 1 round", "after 0 rounds"}));
}

TEST_CASE("an agreement after different numbers of rounds on a handle is a mismatch") {
  const std::vector<CallRecord> records{call(CallKind::barrier, 0, 0, {{0, 3}, {1, 0}}),
                                        call(CallKind::barrier, 0, 0, {{0, 2}, {1, 0}})};
  const auto found = agreement_mismatch(0, records);
  REQUIRE(found);
  CHECK(names(*found, {"rank 1 called barrier after posting 2 rounds", "handle 0", "rank 0 called it after 3 rounds"}));
}

TEST_CASE("an agreement where a rank lacks a handle the other has is a mismatch") {
  const std::vector<CallRecord> records{call(CallKind::barrier, 0, 0, {{0, 0}, {1, 0}}),
                                        call(CallKind::barrier, 0, 0, {{0, 0}})};
  const auto found = agreement_mismatch(0, records);
  REQUIRE(found);
  CHECK(names(*found, {"rank 1 called barrier without handle 1", "rank 0 has"}));
}

TEST_CASE("a round the peer in an agreement has posted can still complete") {
  CHECK_FALSE(waiting_round_mismatch(1, 0, 4, false, 0, call(CallKind::barrier, 0, 0, {{0, 5}})));
}

TEST_CASE("a round the peer in an agreement has not posted never completes") {
  const auto run = waiting_round_mismatch(1, 0, 5, false, 0, call(CallKind::destroy, 0, 5, {{0, 5}}));
  REQUIRE(run);
  CHECK(*run == "rank 0 called destroy of handle 0 after 5 rounds while rank 1 called run of handle 0 (round 5)");
  const auto flush = waiting_round_mismatch(1, 0, 0, true, 2, call(CallKind::finalize, 0, 0, {{0, 0}}));
  REQUIRE(flush);
  CHECK(names(*flush, {"rank 2 called finalize", "rank 1 called flush of handle 0 (round 0)"}));
}

TEST_CASE("a round of a handle the peer in an agreement does not have never completes") {
  const auto found = waiting_round_mismatch(0, 1, 0, false, 1, call(CallKind::barrier, 0, 0, {{0, 0}}));
  REQUIRE(found);
  CHECK(names(*found, {"rank 1 called barrier", "run of handle 1", "does not have"}));
}

TEST_CASE("rounds are compared across 32-bit wrap of the table's low bits") {
  // The peer posted 2^32 + 1 rounds; this rank waits in round 2^32.
  const uint64_t round = uint64_t{1} << 32;
  CHECK_FALSE(waiting_round_mismatch(1, 0, round, false, 0, call(CallKind::barrier, 0, 0, {{0, 1}})));
  CHECK(waiting_round_mismatch(1, 0, round, false, 0, call(CallKind::barrier, 0, 0, {{0, 0}})));
}
