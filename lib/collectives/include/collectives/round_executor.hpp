// What a round's reduction runs on: the executor interface the engine drives and the port
// through which an executor acts. Two executors implement it: PlanExecutor
// (plan_executor.hpp: a ReducePlan's chunked exchanges through landing rings) and
// DirectExecutor (direct_executor.hpp: ranks that map each other's memory reduce from it
// where it lies). Neither owns a thread, lock, clock or transport: the engine drives them
// with its lock held and a port over its transport, work buffer and reduction kernels
// (allreduce.cpp); the schedule tests drive them with simulated ports; a simulator can
// drive them with a port that only counts bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include <collectives/reduce_plan.hpp>

namespace pcoll {

// What the executor asks of the world.
class ExecutorPort {
 public:
  virtual ~ExecutorPort() = default;
  // Write chunk `chunk` of `step`'s send for `round` to the step's peer and notify it: from
  // this rank's work buffer at chunk.offset, into the peer's work buffer (a transfer that
  // lands in the result) or its landing ring (send.landing_offset(round, chunk.index)).
  // The notice carries `tag`: the step's, or the mark that says this rank started the
  // round (PlanExecutor, announces_start_to).
  virtual void write_chunk(const Step& step, const Chunk& chunk, uint64_t round, uint32_t tag) = 0;
  // Reduce the arrived chunk `chunk` of `step`'s recv for `round` from its landing position
  // into the work buffer. `final`: its elements are now final results (the last step of
  // recursive doubling), ready to be handed to the application.
  virtual void reduce_chunk(const Step& step, const Chunk& chunk, uint64_t round, bool final) = 0;
  // Tell the step's peer that the chunks below `chunk` of round `round` of this exchange are
  // reduced (their ring positions are free again).
  virtual void send_credit(const Step& step, uint64_t round, uint32_t chunk) = 0;
  // Complete every write posted so far, locally: their source bytes may change afterwards.
  virtual void settle_writes() = 0;
  // --- The direct plan (direct_executor.hpp): peers' memory read where it lies.
  // Tell `peer` that this rank finished phase `tag` of round `round`.
  virtual void signal_peer(int peer, uint32_t tag, uint64_t round);
  // Reduce elements [offset, offset + count) of `peer`'s work buffer (mapped here) into the
  // same elements of this rank's.
  virtual void reduce_from_peer(int peer, size_t offset, size_t count, uint64_t round);
  // Copy elements [offset, offset + count) of `peer`'s work buffer into this rank's.
  virtual void copy_from_peer(int peer, size_t offset, size_t count, uint64_t round);
  // Elements [offset, offset + count) of this rank's work buffer are final results of
  // `round`, ready to be handed to the application while in cache.
  virtual void final_elements(size_t offset, size_t count, uint64_t round);
  // A step began or ended (the round trace, a simulator's breakdown).
  virtual void step_started(uint64_t /*round*/, size_t /*step*/) {}
  virtual void step_ended(uint64_t /*round*/, size_t /*step*/) {}
};

// The round check every executor's on_data makes first: a data notice is new only for the
// active round (`completed`) or the next one. One for a completed round can only be a
// duplicate of one already counted (no peer sends for a round it finished before we did):
// true, and `duplicates` counts it. One beyond the next round is Errc::protocol.
bool stale_data_round(uint64_t round, uint64_t completed, uint32_t handle, uint64_t& duplicates);

// One rank's side of the rounds of a handle, round after round.
class RoundExecutor {
 public:
  virtual ~RoundExecutor() = default;
  // The algorithm's name (the debug log, pcoll_allreduce's report) and its steps per round.
  virtual const char* algorithm() const = 0;
  virtual size_t step_count() const = 0;
  // A new round begins at step 0 (the engine joined it). `announce_start`: this rank
  // started it and sent the activation to no peer that hears its first notice (below), so
  // those notices say that it started the round.
  virtual void begin_round(bool announce_start) = 0;
  // Whether this rank's first notice of every round goes to `peer` as the rank joins it
  // and can say that the rank started the round: every peer on the direct plan; the peer
  // of the first exchange of a chunked plan whose notifications have room for the mark.
  // The engine sends no activation to a peer that hears it so and whose part of the
  // activation tree all hears it so (activation::hear_directly).
  virtual bool announces_start_to(int /*peer*/) const { return false; }
  // The rank whose notice said that it started `round` (the active round or the next),
  // or -1: none yet, or an executor that does not announce starts.
  virtual int started_by(uint64_t /*round*/) const { return -1; }
  // Runs round `round` (the engine's active round) as far as arrivals and the execution
  // rules allow. True once every step is done.
  virtual bool run(uint64_t round, ExecutorPort& port) = 0;
  // Round `round` completed: its arrivals are forgotten, so that their parity serves round + 2.
  virtual void end_round(uint64_t round) = 0;
  // A data notice (exchange or phase `tag`, `chunk`) of round `round` arrived while
  // `completed` rounds are complete. True when new; a duplicate is counted and ignored;
  // anything the executor cannot have been sent is Errc::protocol.
  virtual bool on_data(uint64_t round, uint64_t completed, uint32_t tag, uint32_t chunk) = 0;
  // A credit notice; Errc::protocol for an executor that uses none.
  virtual bool on_credit(uint64_t round, uint32_t tag, uint32_t chunk) = 0;
  // Before the work buffer is overwritten (a new contribution, a carry): settles writes
  // that may still read it.
  virtual void settle(ExecutorPort& port) = 0;
  // The peer the active step waits on, or -1 between steps and rounds.
  virtual int awaited_peer() const = 0;
  // Times the executor moved on (the engine tells a busy round from a stuck one by it).
  virtual uint64_t moves() const = 0;
  virtual uint64_t duplicates() const = 0;
};

}  // namespace pcoll
