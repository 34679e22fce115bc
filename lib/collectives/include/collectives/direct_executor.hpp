// The direct plan: ranks that map each other's memory (one host, a provider that maps a
// peer's regions: Transport::maps_memory_of) reduce by reading each other's contributions
// where they lie, instead of writing them through landing rings (docs/design.md, "The
// direct plan"). The vector (count accumulation elements, the flag words included) is
// cut into P slices (block_offset/block_elems: the first count % P slices one element
// longer); rank r owns slice r. One round is three phases, each ending when every peer
// said it finished that phase (a data notice: tag = phase, chunk = the sender's rank):
//
//   0 ready     the work buffer holds this rank's contribution; nothing to do but say so.
//               A rank that started the round (it initiated it) says so with tag
//               kStartedReady instead of 0: every peer hears it as it joins, so that notice
//               is the round's activation and the engine sends none (announces_start).
//   1 reduced   slice r of every peer's work buffer is reduced into slice r of this
//               rank's, in rank order, a cache block at a time (every source of one block
//               before the next block): slice r is final here.
//   2 gathered  every peer's final slice is copied into this rank's work buffer.
//
// Why this is safe, with one work buffer and no copy of anything a peer reads:
//   - a peer reads my contribution (phase 1) only after my phase-0 notice, and I change
//     slices other than mine (phase 2) only after every peer's phase-1 notice, that is
//     once every peer has read what it needs of my contribution;
//   - a peer reads my final slice (phase 2) only after my phase-1 notice, and I overwrite
//     the work buffer (the next round's contribution, a carry, a result moved out) only
//     after the round, which ends with every peer's phase-2 notice: every peer read it;
//   - a peer's notices of round t + 1 may arrive while I am in round t (it completed round
//     t, which needed my phase-2 notice, so it reads nothing of mine of round t); they are
//     counted by the round's parity. Nothing of round t + 2 can arrive before I end round
//     t + 1, which it needs.
// Every slice is reduced once, by its owner, so every rank holds bitwise the same result.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <collectives/round_executor.hpp>

namespace pcoll {

class DirectExecutor final : public RoundExecutor {
 public:
  static constexpr uint32_t kPhases = 3;       // ready, reduced, gathered: tags 0..2
  static constexpr uint32_t kStartedReady = 3;  // phase 0 of a rank that started the round
  static constexpr uint32_t kTags = 4;          // the tags it uses

  // `block_elems`: the cache block of the reduction and the copies (>= 1). `handle` names
  // the handle in protocol errors.
  DirectExecutor(int ranks, int rank, size_t count, size_t block_elems, uint32_t handle);

  const char* algorithm() const override { return "direct"; }
  size_t step_count() const override { return kPhases; }
  void begin_round(bool announce_start) override;
  bool announces_start_to(int peer) const override { return peer != rank_; }
  int started_by(uint64_t round) const override { return started_by_[round & 1]; }
  bool run(uint64_t round, ExecutorPort& port) override;
  void end_round(uint64_t round) override;
  bool on_data(uint64_t round, uint64_t completed, uint32_t tag, uint32_t chunk) override;
  bool on_credit(uint64_t round, uint32_t tag, uint32_t chunk) override;
  void settle(ExecutorPort& /*port*/) override {}  // it posts no writes
  int awaited_peer() const override;
  uint64_t moves() const override { return moves_; }
  uint64_t duplicates() const override { return duplicates_; }

  // Rank `rank`'s slice.
  size_t slice_offset(int rank) const;
  size_t slice_elems(int rank) const;

 private:
  void work(uint32_t phase, uint64_t round, ExecutorPort& port) const;

  int ranks_;
  int rank_;
  size_t count_;
  size_t block_elems_;
  uint32_t handle_;
  uint32_t phase_ = kPhases;  // the active phase; kPhases: no round active
  bool phase_done_ = false;   // this rank did the active phase's work and said so
  bool announce_start_ = false;  // this round's ready notices say this rank started it
  uint64_t round_ = 0;        // the active round (for awaited_peer)
  // [round parity][phase]: which peers said they finished it, and how many.
  struct Heard {
    std::vector<uint8_t> from;
    int count = 0;
  };
  Heard heard_[2][kPhases];
  int started_by_[2] = {-1, -1};  // [round parity]: the rank that said it started the round
  uint64_t moves_ = 0;
  uint64_t duplicates_ = 0;
};

}  // namespace pcoll
