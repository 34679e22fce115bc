// Reduction plans: what one rank does, step by step and chunk by chunk, in one allreduce
// round. A plan is pure data computed from (algorithm, ranks, rank, count, chunk size);
// the engine (allreduce.cpp) executes it with RDMA writes and notifications, and the
// schedule tests (tests/unit/test_schedule.cpp) check the same data: the same steps,
// landing offsets and chunk boundaries.
//
// Offsets and counts are in accumulation elements (dtype.hpp: wire_element_bytes) of the
// rank's work buffer, which every rank lays out the same way, so data always moves from
// offset x on the sender to offset x on the receiver (in its work buffer, or in a landing
// slot at the same relative position).
//
// Algorithms (any ranks >= 1):
//   recursive_doubling  log2(p2) full-vector exchanges; latency-optimal, for small vectors.
//   rabenseifner        recursive-halving reduce-scatter then recursive-doubling allgather;
//                       moves ~2*count elements per rank whatever p2, for large vectors.
//   node_leader         for ranks on several nodes, given a node map (node_of[rank]):
//                       reduce on each node to its leader, recursive doubling among the N
//                       leaders, broadcast on each node; only leaders talk across nodes.
//   node_rails          for large vectors over nodes of equal size L: reduce-scatter on each
//                       node, an allreduce of each block among the ranks of its local index
//                       (a rail), allgather on each node; every rank's link carries a block.
// where p2 is the largest power of two <= ranks. The extra = ranks - p2 ranks fold in
// first: the even ranks 0, 2, .., 2*extra-2 send their whole vector to rank+1 (pre-step)
// and sit out; the p2 "core" ranks run the power-of-two algorithm; each partner then sends
// the full result back (post-step). Pairs are adjacent ranks, which are usually on the
// same node, so the fold-in traffic stays on the fastest link, and every core rank absorbs
// at most one extra rank: the extra work (one reduction, one send of the vector) is
// spread over as many ranks as possible, no rank doing it twice.
//
// node_leader numbers a node's ranks by rank order (local index i; i = 0 is the leader):
//   node reduce     a binomial tree: at level k = 0, 1, .. the rank whose lowest set bit of
//                   i is k sends its whole vector to i - 2^k and is done with the phase; a
//                   rank with bits 0..k of i clear reduces what i + 2^k sends, if it exists;
//   leaders         recursive doubling over the N leaders (leader j: the leader of node j),
//                   fold-in included, exactly as above with leader indices for ranks;
//   node broadcast  the node reduce's tree backwards: each parent writes the full result
//                   straight into its children's work buffers.
// With one node it is the node phases alone; with one rank per node, recursive doubling.
//
// node_rails numbers a node's ranks by rank order too (local index i = 0..L-1, every node
// holding L ranks) and cuts the vector into L blocks (block_offset/block_elems(count, L, j));
// rank i of a node owns block i:
//   node reduce-scatter  in one exchange with each local peer j, rank i sends its copy of
//                        block j into j's slot and reduces j's copy of block i from its own;
//   rails                the N ranks of local index i (one per node, member n: node n's)
//                        allreduce block i: Rabenseifner as above restricted to the block,
//                        fold-in included, or recursive doubling where p2 <= 2;
//   node allgather       in one exchange with each local peer j, rank i writes its block
//                        straight into j's work buffer and j its block into i's.
// The node exchanges run in rounds of a round-robin tournament, each rank meeting at most
// one peer a round: local indices a != b meet in round (a + b) mod L for odd L; for even
// L the others meet in round (a + b) mod (L-1), and L-1 meets b in round 2b mod (L-1).
// Rounds R = L-1 for even L, L for odd L (each rank sits one out), 0 for L = 1. With one
// rank per node it is the rails alone (Rabenseifner over the nodes); with one node, the
// node phases alone.
//
// Step tags are the same on both ends of an exchange and across ranks:
//   0                  pre-step (fold-in)
//   1 .. L             recursive doubling steps, or reduce-scatter steps (L = log2 p2)
//   L+1 .. 2L          allgather steps (rabenseifner only)
//   last               post-step (fold-in)
// node_leader, with Ln = ceil(log2 of the largest node's ranks), the same on every rank,
// and L = log2 of the largest power of two <= N:
//   0 .. Ln-1              node reduce level k: tag k
//   Ln .. Ln+L+1           the leaders' recursive doubling: pre-step, steps, post-step
//   Ln+L+2 .. 2Ln+L+1      node broadcast level k: tag 2Ln+L+1-k (the top level first)
// node_rails, with R node rounds and T = 2 log2(p2) + 2 rail tags (log2(p2) + 2 where the
// rails double, p2 <= 2; p2: the largest power of two <= N):
//   0 .. R-1               node reduce-scatter round r: tag r
//   R .. R+T-1             the rail's pre-step, steps and post-step, as above from tag R
//   R+T .. 2R+T-1          node allgather round r: tag R+T+r
// so node_rails' tags grow with the node size: 32 (32-bit notifications) hold nodes of 8
// up to 256 nodes; 128 (64-bit) nodes of 32 up to 2^20 ranks.
// A rank's plan lists only the steps it takes part in, in execution order. Steps may
// carry zero elements (count < p2, count == 0): they still need their notification so
// that the peer's step completes (or the engine skips the whole round when count == 0,
// which every rank knows).
//
// Execution rules the engine keeps (and the schedule tests simulate, chunk by chunk, in
// every order they allow):
//   - a step's chunks are written and notified each on its own, and may arrive in any
//     order, before or after the receiver reaches the step;
//   - a step starts (posts its sends) once the previous steps of this rank are complete:
//     every incoming chunk arrived and, where the step reduces, reduced; a step does not
//     wait for its own sends to complete, but it ends only once every chunk of its send
//     was posted, which a windowed() transfer does as the receiver's credits allow;
//   - a chunk is reduced into a range it also sends only after that range's send completed
//     locally (recursive doubling sends and reduces the same range); a reduced chunk's
//     landing position is free for the sender again;
//   - incoming data that lands in the result is written by the peer straight into this
//     rank's work buffer; plans guarantee that range is disjoint from what this rank still
//     sends.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace pcoll {

enum class ReduceAlgorithm { recursive_doubling, rabenseifner, node_leader, node_rails };

const char* algorithm_name(ReduceAlgorithm algorithm);

inline constexpr int kNoSlot = -1;

// One piece of a transfer, written and notified on its own so that the receiver can reduce
// it while later pieces are on the wire. Both ends of an exchange hold the same Transfer,
// so chunk i means the same elements on both.
struct Chunk {
  std::uint32_t index = 0;  // 0-based; goes into the notification
  std::size_t offset = 0;   // work buffer elements: read by the sender, reduced into or
                            // landed in at the receiver
  std::size_t count = 0;
};

// What one step moves in one direction: a range of the work buffer (the same range on both
// ends), where it lands at the receiver, and how it is cut into chunks. The sender's send
// and the receiver's recv of one exchange are equal.
//
// A transfer that lands in a slot lands in a ring of `slot_depth` positions of
// `slot_stride` elements: the receiver's landing pool for that exchange, bounded whatever
// the vector (PCOLL_POOL_BYTES). Chunk i of round t is the (t * chunk_count() + i)-th chunk
// the exchange carries and takes position (t * chunk_count() + i) mod slot_depth. A
// position is free again once the receiver reduced what it held:
//   - implicitly, for every chunk of round t - 2 while the sender is in round t (the
//     sender completed round t - 1, which needed the receiver's round t - 1 data of this
//     exchange, sent only after the receiver's round t - 2 was complete);
//   - explicitly, by the receiver's credit notices ("chunks below c of round t are
//     reduced"), which only windowed() transfers need: the others fit twice in the ring,
//     so the implicit rule alone keeps the sender inside it.
struct Transfer {
  std::size_t offset = 0;       // work buffer elements
  std::size_t count = 0;
  int slot = kNoSlot;           // the receiver's landing slot, which it reduces from;
                                // kNoSlot: lands straight in its work buffer at offset
  std::size_t slot_offset = 0;  // where that slot starts in the landing area (elements)
  std::size_t chunk_elems = 1;  // the plan's chunk size, >= 1
  std::size_t slot_depth = 1;   // positions of the slot's ring (chunks)
  std::size_t slot_stride = 0;  // elements per position, >= every chunk's count

  bool lands_in_result() const { return slot == kNoSlot; }

  // At least one chunk, even for a zero count, so that an empty transfer is still notified.
  std::size_t chunk_count() const { return count == 0 ? 1 : (count + chunk_elems - 1) / chunk_elems; }
  // Chunk i < chunk_count(): chunk_elems elements, except the last, which holds the rest.
  Chunk chunk(std::size_t i) const {
    const std::size_t delta = i * chunk_elems;
    return Chunk{static_cast<std::uint32_t>(i), offset + delta, std::min(chunk_elems, count - delta)};
  }
  // The exchange's running chunk number of chunk i of round t.
  std::uint64_t sequence(std::uint64_t round, std::size_t i) const { return round * chunk_count() + i; }
  // Where chunk i of round t lands in the receiver's landing area (elements), for a
  // transfer that lands in a slot.
  std::size_t landing_offset(std::uint64_t round, std::size_t i) const {
    return slot_offset + static_cast<std::size_t>(sequence(round, i) % slot_depth) * slot_stride;
  }
  // More chunks per round than half the ring: the sender waits for credits.
  bool windowed() const { return !lands_in_result() && 2 * chunk_count() > slot_depth; }

  bool operator==(const Transfer&) const = default;
};

// True when both transfers carry elements and their work buffer ranges intersect.
inline bool ranges_overlap(const Transfer& a, const Transfer& b) {
  return a.count != 0 && b.count != 0 && a.offset < b.offset + b.count && b.offset < a.offset + a.count;
}

enum class StepKind {
  send_reduce,  // write my send range to the peer's slot; reduce the peer's data (my slot) into my recv range
  send_copy,    // write my send range straight into the peer's work buffer; the peer does the same to me
  send_only,    // write my send range to the peer (its slot, or its work buffer); expect nothing back
  recv_reduce,  // expect the peer's data in my slot; reduce it into my recv range
  recv_copy,    // expect the peer's data written straight into my work buffer at my recv range
};

const char* step_kind_name(StepKind kind);

struct Step {
  std::uint32_t tag = 0;  // exchange id: the same on both ends; goes into the notification
  int peer = 0;           // rank
  std::optional<Transfer> send;  // my work buffer elements written to the peer
  std::optional<Transfer> recv;  // what the peer writes to me; reduced from my slot into
                                 // my work buffer unless it lands there directly

  bool sends() const { return send.has_value(); }
  bool receives() const { return recv.has_value(); }
  bool reduces() const { return recv && !recv->lands_in_result(); }
  StepKind kind() const;
};

// A landing slot: the ring where one exchange's incoming chunks wait to be reduced.
struct LandingSlot {
  std::size_t offset = 0;  // elements from the start of the landing area
  std::size_t depth = 1;   // positions (chunks)
  std::size_t stride = 0;  // elements per position
  std::size_t elems() const { return depth * stride; }
};

struct ReducePlan {
  ReduceAlgorithm algorithm = ReduceAlgorithm::recursive_doubling;
  int ranks = 1;
  int rank = 0;
  std::size_t count = 0;
  std::size_t chunk_elems = 1;
  std::vector<Step> steps;  // this rank's steps in execution order
  std::size_t pool_chunks = 0;  // most positions of one slot's ring
  // Landing slots, indexed by Transfer::slot. The layout depends only on (algorithm,
  // ranks, count, chunk_elems, pool_chunks, and the node map), not on rank, so a writer
  // addresses the peer's slot with its own plan's numbers: slot 0 receives the fold-in,
  // 1..L the recursive doubling or reduce-scatter steps, node_leader's L+1..L+Ln the node
  // reduce levels 0..Ln-1, and node_rails' L+d (d = 1..node size-1) the node
  // reduce-scatter from the local index d above the receiver's (mod node size). node_rails
  // bounds every slot by the largest block, which the rails' steps never exceed.
  std::vector<LandingSlot> landing_slots;
  std::uint32_t tag_count = 0;  // tags used by the algorithm: 0 .. tag_count-1

  std::size_t landing_elems() const;  // the whole landing area
};

// A slot's ring holds min(pool_chunks, twice the chunks of its largest transfer)
// positions: small vectors get what two rounds need (no credits), large ones a bounded
// pool. Throw Error(invalid_argument) unless ranks >= 1, 0 <= rank < ranks,
// chunk_elems >= 1 and pool_chunks >= 1.
inline constexpr std::size_t kUnboundedPool = SIZE_MAX;
ReducePlan recursive_doubling(int ranks, int rank, std::size_t count, std::size_t chunk_elems,
                              std::size_t pool_chunks = kUnboundedPool);
ReducePlan rabenseifner(int ranks, int rank, std::size_t count, std::size_t chunk_elems,
                        std::size_t pool_chunks = kUnboundedPool);
// node_of[r]: the node of rank r, ranks = node_of.size(). Throws Error(invalid_argument)
// as above, and when node_of is empty or its node indices are not 0..N-1, every one used.
ReducePlan node_leader(const std::vector<int>& node_of, int rank, std::size_t count, std::size_t chunk_elems,
                       std::size_t pool_chunks = kUnboundedPool);
// node_of as for node_leader; every node must hold the same number of ranks (else
// Error(invalid_argument) naming two nodes that differ).
ReducePlan node_rails(const std::vector<int>& node_of, int rank, std::size_t count, std::size_t chunk_elems,
                      std::size_t pool_chunks = kUnboundedPool);
// True when node_of is a valid node map of more than one node, every node holding the same
// number of ranks, more than one: where node_rails is more than Rabenseifner or the node
// phases alone.
bool node_rails_applies(const std::vector<int>& node_of);
// recursive_doubling or rabenseifner; node_leader and node_rails need the node map, so
// they throw.
ReducePlan make_plan(ReduceAlgorithm algorithm, int ranks, int rank, std::size_t count,
                     std::size_t chunk_elems, std::size_t pool_chunks = kUnboundedPool);

// The chunk size, in elements, of a plan over count elements of element_bytes each:
// chunk_bytes (PCOLL_CHUNK_BYTES) worth, at least one, and large enough that no transfer
// needs more than max_chunks chunks (what a notification can number: NoticeCodec).
std::size_t chunk_elems_for(std::size_t count, std::size_t chunk_bytes, std::size_t element_bytes,
                            std::size_t max_chunks);

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

}  // namespace pcoll
