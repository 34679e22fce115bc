// Reduction plans: what one rank does, step by step, in one allreduce round.
//
// A plan is pure data computed from (algorithm, ranks, rank, count); the engine executes
// it with RDMA writes and notifications. Offsets and counts are in accumulation elements
// (dtype.hpp: wire_element_bytes) of the rank's work buffer, which every rank lays out
// the same way, so data always moves from offset x on the sender to offset x on the
// receiver (in its work buffer, or in a landing slot at the same relative position).
//
// Algorithms (any ranks >= 1):
//   recursive_doubling  log2(p2) full-vector exchanges; latency-optimal, for small vectors.
//   rabenseifner        recursive-halving reduce-scatter then recursive-doubling allgather;
//                       moves ~2*count elements per rank whatever p2, for large vectors.
// where p2 is the largest power of two <= ranks. The extra = ranks - p2 ranks fold in
// first: the even ranks 0, 2, .., 2*extra-2 send their whole vector to rank+1 (pre-step)
// and sit out; the p2 "core" ranks run the power-of-two algorithm; each partner then sends
// the full result back (post-step). Pairs are adjacent ranks, which are usually on the
// same node, so the fold-in traffic stays on the fastest link, and every core rank absorbs
// at most one extra rank: the extra work (one reduction, one send of the vector) is
// spread over as many ranks as possible, no rank doing it twice.
//
// Step indices are the same on both ends of an exchange and across ranks:
//   0                  pre-step (fold-in)
//   1 .. L             recursive doubling steps, or reduce-scatter steps (L = log2 p2)
//   L+1 .. 2L          allgather steps (rabenseifner only)
//   last               post-step (fold-in)
// A rank's plan lists only the steps it takes part in, in execution order. Steps may
// carry zero elements (count < p2, count == 0): they still need their notification so
// that the peer's step completes (or the engine skips the whole round when count == 0,
// which every rank knows).
//
// Execution rules the engine must keep:
//   - a step starts once the previous steps of this rank are complete;
//   - in send_reduce, reduce into the work buffer only after the local completion of this
//     step's send (recursive doubling sends and reduces the same range);
//   - incoming data with lands_in_result is written by the peer straight into this rank's
//     work buffer; plans guarantee that range is disjoint from what this rank still sends.
#pragma once

#include <cstddef>
#include <vector>

namespace pcoll {

enum class ReduceAlgorithm { recursive_doubling, rabenseifner };

const char* algorithm_name(ReduceAlgorithm algorithm);

enum class StepKind {
  send_reduce,  // write my send range to the peer's slot; reduce the peer's data (my slot) into my recv range
  send_copy,    // write my send range straight into the peer's work buffer; the peer does the same to me
  send_only,    // write my send range to the peer (its slot, or its work buffer); expect nothing back
  recv_reduce,  // expect the peer's data in my slot; reduce it into my recv range
  recv_copy,    // expect the peer's data written straight into my work buffer at my recv range
};

const char* step_kind_name(StepKind kind);

inline constexpr int kNoSlot = -1;

struct Step {
  int index = 0;  // position in the round, the same on both ends; goes into the notification
  int peer = 0;   // rank
  StepKind kind = StepKind::send_reduce;
  // My work buffer elements written to the peer: into its slot peer_slot (from the slot's
  // start), or with peer_lands_in_result straight to the same offset of its work buffer.
  std::size_t send_offset = 0;
  std::size_t send_count = 0;
  // My work buffer elements the incoming data is reduced into (from my slot `slot`), or
  // with lands_in_result, the range the peer writes directly.
  std::size_t recv_offset = 0;
  std::size_t recv_count = 0;
  int slot = kNoSlot;             // my landing slot for the incoming data (kNoSlot: none)
  bool lands_in_result = false;   // the peer writes straight to my work buffer at recv_offset
  int peer_slot = kNoSlot;        // the peer's landing slot for my data (kNoSlot: none)
  bool peer_lands_in_result = false;  // my data goes to the peer's work buffer at send_offset

  bool sends() const { return kind != StepKind::recv_reduce && kind != StepKind::recv_copy; }
  bool receives() const { return kind != StepKind::send_only; }
  bool reduces() const { return kind == StepKind::send_reduce || kind == StepKind::recv_reduce; }
};

struct SlotRange {
  std::size_t offset = 0;  // elements from the start of the landing area of one round parity
  std::size_t elems = 0;   // capacity
};

struct ReducePlan {
  ReduceAlgorithm algorithm = ReduceAlgorithm::recursive_doubling;
  int ranks = 1;
  int rank = 0;
  std::size_t count = 0;
  std::vector<Step> steps;  // this rank's steps in execution order
  // Landing slots of one round parity. The layout depends only on (algorithm, ranks,
  // count), not on rank, so a writer addresses the peer's slot with its own plan's numbers.
  std::vector<SlotRange> slots;
  int step_index_count = 0;  // step indices used by the algorithm: 0 .. step_index_count-1

  std::size_t slot_offset(int slot) const { return slots.at(static_cast<std::size_t>(slot)).offset; }
  std::size_t slot_elems(int slot) const { return slots.at(static_cast<std::size_t>(slot)).elems; }
  std::size_t slot_total_elems() const;  // landing area elements per round parity
};

// Throw Error(invalid_argument) unless ranks >= 1 and 0 <= rank < ranks.
ReducePlan recursive_doubling(int ranks, int rank, std::size_t count);
ReducePlan rabenseifner(int ranks, int rank, std::size_t count);
ReducePlan make_plan(ReduceAlgorithm algorithm, int ranks, int rank, std::size_t count);

// Recursive doubling below rabenseifner_min_bytes of accumulation data, else Rabenseifner
// (which only pays off once its 2*log2(p2) latencies are hidden by bandwidth). The default
// (PCOLL_RD_MAX_BYTES, the largest vector kept on recursive doubling) is 32 KiB: at P=4 on
// ucx:shm Rabenseifner's smaller copies and reductions win from 64 KiB (docs/performance.md).
inline constexpr std::size_t kRabenseifnerMinBytes = 32 * 1024;
ReduceAlgorithm choose_algorithm(int ranks, std::size_t bytes,
                                 std::size_t rabenseifner_min_bytes = kRabenseifnerMinBytes);

// --- fold-in mapping ---------------------------------------------------------------------

int core_ranks(int ranks);                 // p2: largest power of two <= ranks
bool is_extra_rank(int ranks, int rank);   // sits out the core after the pre-step
int fold_partner(int ranks, int rank);     // the other rank of its pre/post pair, or -1
int core_index(int ranks, int rank);       // 0 .. p2-1 for core ranks, -1 for extra ranks
int core_rank(int ranks, int core_index);  // inverse of core_index

// Elements of block `block` when count elements are split into `blocks` contiguous
// blocks whose sizes differ by at most one (the first count % blocks get one more).
std::size_t block_offset(std::size_t count, int blocks, int block);
std::size_t block_elems(std::size_t count, int blocks, int block);

// --- pipelining ----------------------------------------------------------------------------

// One piece of a step's transfer, sent and notified on its own so that the receiver can
// reduce it while later pieces are on the wire. Both ends cut a transfer the same way
// (same count, same max_chunk_elems), so chunk i means the same elements on both.
struct Chunk {
  int index = 0;            // 0-based, goes into the notification
  std::size_t offset = 0;   // work buffer offset (elements)
  std::size_t count = 0;
  std::size_t slot_delta = 0;  // offset inside the landing slot (elements): offset - first offset
};

// At least one chunk, even for a zero count, so that an empty transfer is still notified.
std::size_t chunk_count(std::size_t count, std::size_t max_chunk_elems);
std::vector<Chunk> chunks(std::size_t offset, std::size_t count, std::size_t max_chunk_elems);
std::vector<Chunk> send_chunks(const Step& step, std::size_t max_chunk_elems);
std::vector<Chunk> recv_chunks(const Step& step, std::size_t max_chunk_elems);

}  // namespace pcoll
