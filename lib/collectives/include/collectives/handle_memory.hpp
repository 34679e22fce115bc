// The memory of one handle (docs/design.md, "Memory of a handle"): the registered region
// (work buffer, landing pool, the mode's counter words) and what lives beside it only while
// needed: the carry that did not fit the work buffer (spill), results the application has
// not collected while the engine needs the work buffer (the result ring), and the scratch
// of an in-place hand-over.
//
// The work buffer holds count accumulation elements and the round's flag words
// (round_flags.hpp): the contribution and, as the plan runs, the partial and final result
// and the combined flags. Between rounds it holds this rank's carry or a result not yet
// handed over (holds()). Engine lock held for every call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <collectives/round_flags.hpp>
#include <collectives/round_info.hpp>
#include <pcoll/pcoll.h>
#include <transport/transport.hpp>

namespace pcoll {

struct HandleSpec;

// Called before the work buffer is overwritten: writes still in flight may read it.
class WriteSettler {
 public:
  virtual ~WriteSettler() = default;
  virtual void settle_writes_from_work() = 0;
};

class HandleMemory {
 public:
  // What the work buffer holds between and during rounds.
  enum class Holds {
    carry,   // this rank's carry (has_carry()), or nothing
    round,   // the active round's contribution, partial and final result
    result,  // the result of the last completed round, not yet handed to the application
  };
  // A completed round's info and, once moved out of the work buffer, its result (user type).
  struct Completed {
    uint64_t round = UINT64_MAX;
    RoundInfo info;
    std::vector<std::byte> result;
  };

  // Registers work buffer, landing pool (`landing_elems` accumulation elements) and
  // `counter_words` 64-bit words, zeroed, with `transport`.
  HandleMemory(transport::Transport& transport, const HandleSpec& spec, int rank, int ranks, size_t landing_elems,
               size_t counter_words, WriteSettler& settler);

  // Bytes the constructor allocates for such a handle (registered region and scratch),
  // saturating at UINT64_MAX: what creation checks against the host's memory first.
  static uint64_t footprint(const HandleSpec& spec, int ranks, size_t landing_elems, size_t counter_words);

  transport::LocalRegion& region() const { return *region_; }
  std::unique_ptr<transport::LocalRegion> release_region() { return std::move(region_); }
  std::byte* work() const { return region_->bytes().data(); }
  std::byte* landing() const { return work() + work_bytes_; }
  size_t work_bytes() const { return work_bytes_; }
  size_t landing_bytes() const { return landing_bytes_; }
  size_t counters_offset() const { return work_bytes_ + landing_bytes_; }
  size_t acc_bytes(size_t elems) const { return elems * acc_elem_bytes_; }
  size_t total_elems() const { return total_elems_; }
  const RoundFlags& flags() const { return flags_; }
  Holds holds() const { return holds_; }
  bool has_carry() const { return carry_in_work_ || !spill_.empty(); }

  // The result ring: max_lag + 2 completed rounds.
  Completed& completed(uint64_t round) { return ring_[round % ring_.size()]; }
  size_t ring_size() const { return ring_.size(); }
  void set_late(uint64_t round, bool late) { late_by_round_[round % late_by_round_.size()] = late; }
  bool late(uint64_t round) const { return late_by_round_[round % late_by_round_.size()]; }

  // Joining a round: the work buffer becomes carry + `sendbuf` (fresh; nullptr: late, or a
  // flush), the spilled carry folded in, and this rank's flags set.
  void contribute(const void* sendbuf, bool fresh, bool initiated, bool flush = false);
  // The round completed: the work buffer holds its result (which an elastic handle keeps a
  // copy of, in the user's type: what survivors that did not complete it get on resume).
  void round_completed();
  // The flags of the completed round in the work buffer: who was fresh, the lowest and the
  // highest initiator, and a rank that flushed it with one that ran it, when both exist.
  RoundFlags::Read read_flags() const { return flags_.read(work() + acc_bytes(total_elems_ - flags_.words())); }

  // Final values of elements [first, first + elems) are in the work buffer: converted into
  // `recvbuf` now, while in cache, unless `recvbuf` is the late sendbuf still to be carried.
  void deliver_early(void* recvbuf, const void* pending_late, size_t first, size_t elems);
  // The work buffer holds the last completed round's result: converted into `recvbuf` (what
  // deliver_early has not written yet), and the work buffer becomes the carry, with
  // `late_sendbuf` in it if the application posted that round late. recvbuf may be
  // late_sendbuf: each piece of the sendbuf is then read before its result is written.
  void hand_over_result(void* recvbuf, const void* late_sendbuf);
  // The engine needs the work buffer while the application has not collected the result of
  // `round` (max_lag >= 2 allows it): that result moves into its ring slot.
  void move_result_out(uint64_t round);
  // A result moved out earlier is handed to the application: `late_sendbuf` goes into the
  // carry first (recvbuf may be it), then the result into `recvbuf`, and its buffer goes.
  void hand_over_moved(uint64_t round, void* recvbuf, const void* late_sendbuf);
  // A late sendbuf whose round is over: into the carry, in the work buffer when that holds
  // the carry, else spilled until the next join.
  void add_to_carry(const void* late_sendbuf);

  // --- Elastic handles (opts.elastic; docs/design.md, "Resuming a handle").
  // The last completed round's result as round_completed() kept it (empty: not elastic).
  const std::vector<std::byte>& last_result() const { return last_result_; }
  // The carry as it would go into the next round, in the accumulation type: the work
  // buffer's when it holds a carry, the spilled carry, and, with `active_round`, the
  // contribution of the round joined and not completed (kept at the join). Empty: none.
  std::vector<std::byte> carry_for_resume(bool active_round) const;
  // Folds `sendbuf` (count elements of the user's type) into `carry` (accumulation type;
  // empty: none yet), as a late sendbuf goes into the carry. Nothing with late = drop.
  void fold_into(std::vector<std::byte>& carry, const void* sendbuf) const;
  // A resumed handle, before its first round: the carry (accumulation type, or empty) into
  // the work buffer, and a result the application has not collected into its ring slot.
  void install_carry(const std::vector<std::byte>& carry);
  void install_result(uint64_t round, const RoundInfo& info, std::vector<std::byte> result);
  // And the last round's result and info (what round_completed keeps), for a later resume.
  void install_last_result(uint64_t round, std::vector<std::byte> result, const RoundInfo& info);

  // Bytes held now: registered, scratch, spilled carry, moved results, what an elastic
  // handle keeps.
  uint64_t memory_bytes() const;
  uint64_t registered_bytes() const { return region_ ? region_->bytes().size() : 0; }

  // Memory traffic (docs/design.md, "Memory traffic of a round"): bytes this rank's rounds
  // read plus wrote, counted where the handle and its plan touch memory: the join, carry and
  // hand-over here, the plan's writes, reductions and copies through count_traffic.
  void count_traffic(uint64_t bytes) { traffic_ += bytes; }
  uint64_t traffic_bytes() const { return traffic_; }

 private:
  const HandleSpec& spec_;
  int rank_;
  int ranks_;
  WriteSettler& settler_;
  size_t acc_elem_bytes_ = 0;
  size_t user_elem_bytes_ = 0;
  RoundFlags flags_;
  size_t total_elems_ = 0;  // count + the flag words
  size_t work_bytes_ = 0;
  size_t landing_bytes_ = 0;
  std::unique_ptr<transport::LocalRegion> region_;
  Holds holds_ = Holds::carry;
  bool carry_in_work_ = false;      // the work buffer holds a carry that is not empty
  std::vector<std::byte> spill_;    // carry that arrived while the work buffer was busy (accumulation type)
  std::vector<std::byte> scratch_;  // a few chunks, for handing over a result in place
  size_t early_delivered_ = 0;      // elements already in the posted recvbuf this round
  std::vector<Completed> ring_;
  std::vector<bool> late_by_round_;
  std::vector<std::byte> joined_contribution_;  // elastic: the active round's contribution (acc)
  std::vector<std::byte> last_result_;      // elastic: the last completed round's result (user type)
  uint64_t traffic_ = 0;
  // Traffic of converting n elements into the accumulation type (read user, write acc), out of
  // it (read acc, write user), and of folding n user elements into n accumulated ones.
  uint64_t into_acc(size_t n) const { return n * (user_elem_bytes_ + acc_elem_bytes_); }
  uint64_t out_of_acc(size_t n) const { return into_acc(n); }
  uint64_t folded_into_acc(size_t n) const { return n * (user_elem_bytes_ + 2 * acc_elem_bytes_); }
};

}  // namespace pcoll
