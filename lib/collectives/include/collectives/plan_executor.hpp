// The plan executor: runs one rank's reduction plan (reduce_plan.hpp) round after round,
// chunk by chunk, under the execution rules the plan states, with the landing rings' flow
// control (credits). It decides what may happen next (which chunk to post, which arrived
// chunk to reduce, when to credit the sender); the port it is given does it.
//
// It owns no thread, lock, clock or transport. The engine drives it with its lock held and
// a port over its transport, work buffer and reduction kernels (allreduce.cpp); the
// schedule tests (tests/unit/test_schedule.cpp) drive the very same code with a port that
// delivers chunks in random orders between simulated ranks; a simulator can drive it with
// a port that only counts bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <collectives/reduce_plan.hpp>
#include <collectives/round_executor.hpp>

namespace pcoll {

class PlanExecutor final : public RoundExecutor {
 public:
  // `inject_elems`: writes of up to this many elements complete locally at once (the
  // provider's inject size); larger ones must be settled before their source is reused.
  // `handle` names the handle in protocol errors. `marks_starts`: the notifications number
  // twice the plan's tags, so a rank that started a round can say so in its first notice
  // (tag + tag_count; announces_start_to). Every rank of a handle decides it alike.
  PlanExecutor(ReducePlan plan, size_t inject_elems, uint32_t handle, bool marks_starts = false);

  const ReducePlan& plan() const { return plan_; }

  // A new round begins at step 0 (the engine joined it). `announce_start`: the first chunk
  // of the first exchange says that this rank started the round.
  void begin_round(bool announce_start) override;
  // The peer of the first exchange, when that step sends (at once: nothing precedes it)
  // and the start can be marked.
  bool announces_start_to(int peer) const override;
  int started_by(uint64_t round) const override { return started_by_[round & 1]; }
  // Runs round `round` (the engine's active round) as far as arrivals, credits and the
  // execution rules allow. True once every step is done.
  bool run(uint64_t round, ExecutorPort& port) override;
  // Round `round` completed: its arrivals are forgotten, so that its ring parity serves
  // round + 2.
  void end_round(uint64_t round) override;

  // A data notification for chunk `chunk` of exchange `tag` of round `round` arrived while
  // `completed` rounds are complete. True when it is new; a duplicate (of a chunk already
  // counted, or of a completed round) is counted and ignored; anything else (a round beyond
  // the next, an exchange or chunk the plan does not have) is Errc::protocol.
  bool on_data(uint64_t round, uint64_t completed, uint32_t tag, uint32_t chunk) override;
  // The receiver of our sends of exchange `tag` reduced the chunks below `chunk` of round
  // `round`. True when that frees positions we did not know free.
  bool on_credit(uint64_t round, uint32_t tag, uint32_t chunk) override;

  // Before the work buffer is overwritten (a new contribution, a carry): settles our
  // writes if one may still read it.
  void settle(ExecutorPort& port) override;

  // The peer the active step waits on, or -1 between steps and rounds.
  int awaited_peer() const override { return step_ < plan_.steps.size() ? plan_.steps[step_].peer : -1; }
  // Times the executor moved on (an arrival counted, a credit heard, a step ended): the
  // engine folds it into how it tells a busy round from a stuck one.
  uint64_t moves() const override { return moves_; }
  uint64_t duplicates() const override { return duplicates_; }
  const char* algorithm() const override { return algorithm_name(plan_.algorithm); }
  size_t step_count() const override { return plan_.steps.size(); }

 private:
  bool post_sends(const Step& step, uint64_t round, ExecutorPort& port);
  bool reduce_arrivals(const Step& step, uint64_t round, ExecutorPort& port);
  void credit_sender(const Step& step, uint64_t round, bool finished, ExecutorPort& port);

  ReducePlan plan_;
  size_t inject_elems_;
  uint32_t handle_;
  size_t final_step_ = SIZE_MAX;       // the step whose reductions give final values, if any
  std::vector<int> send_step_of_tag_;  // [tag]: index in plan_.steps of the step sending it, -1

  size_t step_ = SIZE_MAX;             // the active step; SIZE_MAX: no round begun
  bool step_traced_ = false;           // the active step's start was reported
  size_t posted_chunks_ = 0;           // chunks of the active step's send posted
  size_t settled_chunks_ = 0;          // of which known to be complete locally
  bool large_writes_pending_ = false;  // a write above the inject size may not be complete
  size_t processed_ = 0;               // entries of the active step's arrival order looked at
  std::vector<uint32_t> deferred_;     // arrived chunks waiting for our own send of that range

  // One exchange's chunks of one round, each counted once: a duplicated notification is
  // recognised and ignored, never reduced twice.
  struct Arrivals {
    std::vector<uint32_t> order;  // distinct chunks, as they arrived
    std::vector<uint8_t> seen;    // [chunk]: in `order` already
    std::vector<uint8_t> done;    // [chunk]: reduced (its landing position is free)
    size_t handled = 0;           // chunks reduced (or, landing in the result, counted)
    size_t prefix = 0;            // chunks below it are all reduced
    size_t credited = 0;          // the prefix our last credit told the sender
    void clear();
  };
  std::vector<Arrivals> arrivals_[2];  // [round parity][tag]
  // [tag]: for our sends into a windowed slot, the running chunk numbers the receiver
  // reported reduced (credit), and how far our sends went.
  std::vector<uint64_t> credit_;
  std::vector<uint64_t> sent_;
  std::vector<int> peer_of_tag_;      // [tag]: whom we receive that exchange from, or -1
  bool marks_starts_ = false;
  bool announce_start_ = false;       // the next write of this round carries the start mark
  int started_by_[2] = {-1, -1};      // [round parity]: the peer whose notice said it started
  uint64_t duplicates_ = 0;
  uint64_t moves_ = 0;
};

}  // namespace pcoll
