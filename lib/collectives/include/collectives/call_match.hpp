// Which collective call each rank is making, and whether the calls match (docs/design.md,
// "Mismatched calls"). Every agreement blob carries the call it belongs to (a CallHeader)
// and the rounds this rank has posted on each of its handles (a RoundsTable); the checks
// here turn a difference into a message naming both calls. Pure logic: the agreement
// (agreement.hpp) and the communicator call it; tests/unit/test_call_match.cpp checks it.
//
// Two rules, both from "every rank makes the same collective calls in the same order":
//  - at an agreement, every rank makes the same call (kind, handle; for a destroy, after
//    the same number of rounds) and has posted the same number of rounds on every handle;
//  - a rank whose application waits in round t of a handle while a peer is already inside
//    an agreement that this rank has not entered, and that peer posted at most t rounds of
//    the handle, waits for ever: the peer's application is blocked until this rank joins
//    the agreement, and an engine whose application is in an agreement joins no round its
//    application has not posted.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace pcoll {

enum class CallKind : uint32_t { none = 0, create, destroy, barrier, finalize, clock_sample, resume };

// What an agreement is for. `handle` is the handle's id (create, destroy, clock_sample,
// resume), `rounds` the rounds posted on it (destroy) or the step (resume).
struct CallHeader {
  CallKind kind = CallKind::none;
  uint32_t reserved = 0;
  uint64_t handle = 0;
  uint64_t rounds = 0;
};

// One entry per handle slot of the communicator: the id of the handle in it (kNoHandle
// when empty) and the low 32 bits of the rounds its application posted.
struct RoundsEntry {
  static constexpr uint32_t kNoHandle = UINT32_MAX;
  uint32_t handle = kNoHandle;
  uint32_t rounds_low = 0;
};
using RoundsTable = std::vector<RoundsEntry>;

// One rank's part of an agreement, as the checks see it.
struct CallRecord {
  CallHeader header;
  RoundsTable table;
};

// "barrier", "destroy of handle 3 after 2 rounds", "create of handle 1".
std::string describe_call(const CallHeader& header);

// The rounds posted on `handle`, as `table` says, widened next to `reference` (the reader's
// own count); nullopt when the table holds no such handle.
std::optional<uint64_t> rounds_in(const RoundsTable& table, uint32_t handle, uint64_t reference);

// At an agreement (every rank's record, in rank order): the first difference between
// `self`'s call and another rank's, as a message naming both; nullopt when they match.
std::optional<std::string> agreement_mismatch(int self, std::span<const CallRecord> records);

// A rank (`self`) whose application posted round `round` of `handle` (a run, or a flush
// when `flush`) and waits for it, while rank `peer` is inside the agreement `theirs`: the
// message when the round can never complete, nullopt when it still can.
std::optional<std::string> waiting_round_mismatch(int self, uint32_t handle, uint64_t round, bool flush, int peer,
                                                  const CallRecord& theirs);

}  // namespace pcoll
