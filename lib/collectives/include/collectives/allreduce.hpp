// A persistent partial allreduce handle (docs/design.md, "Semantics"): rounds, activation, late
// contributions carried forward, bounded lag, sync rounds, flush and the round info.
//
// Two sides share the state under the communicator's engine lock:
//  - the application side (start / test / wait / flush), one outstanding round at a time;
//  - the engine side (on_notice / advance_locked), driven by whichever thread holds the
//    lock: the progress thread while the application computes, or the application itself
//    while it waits (so a sync round pays no thread hand-off).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <collectives/notification.hpp>
#include <collectives/reduce_plan.hpp>
#include <collectives/round_trace.hpp>
#include <pcoll/pcoll.h>
#include <transport/transport.hpp>

namespace pcoll {

class Comm;

struct RoundInfo {
  uint64_t round = 0;
  int initiator = -1;       // -1: a synchronous round nobody activated
  int fresh = 0;
  bool caller_late = false;
  std::vector<uint64_t> fresh_mask;  // ceil(P/64) words
};

// Counters of one handle since creation (pcoll_allreduce_stats_t, docs/observability.md),
// kept under the engine lock by whoever drives the engine: a few additions per round.
struct AllreduceStats {
  uint64_t rounds = 0;
  uint64_t flushes = 0;
  uint64_t flushes_carried = 0;
  uint64_t rounds_initiated = 0;
  uint64_t rounds_while_computing = 0;
  uint64_t blocked_ns = 0;
  uint64_t bytes_written = 0;
  uint64_t memory_bytes = 0;
  uint64_t registered_bytes = 0;
  std::vector<uint64_t> fresh_rounds;      // [rank], flush rounds excluded
  std::vector<uint64_t> late_rounds;       // [rank], flush rounds excluded
  std::vector<uint64_t> longest_late_run;  // [rank]
  std::vector<uint64_t> fresh_histogram;   // [fresh count 0..P], flush rounds excluded
};

struct AllreduceConfig {
  size_t count = 0;
  pcoll_dtype_t dtype = PCOLL_FLOAT32;
  pcoll_op_t op = PCOLL_OP_SUM;
  pcoll_mode_t mode = PCOLL_MODE_SYNC;
  pcoll_allreduce_opts_t opts{};
  size_t chunk_bytes = 0;         // pipelining chunk of large steps
  size_t pool_bytes = 0;          // landing pool per incoming exchange (PCOLL_POOL_BYTES)
  size_t rd_max_bytes = 0;        // recursive doubling up to this many bytes, then Rabenseifner
  std::string trace_dir;          // PCOLL_TRACE; empty: no round trace
  int64_t trace_clock_skew_ns = 0;  // PCOLL_TEST_CLOCK_SKEW_MS
};

class Allreduce {
 public:
  // Collective over the communicator: checks that every rank passed the same
  // configuration (Errc::mismatch on every rank otherwise), registers memory once. A
  // non-empty `invalid_argument_here` (an argument this rank's caller got wrong) and any
  // local failure (plan, memory) are reported on every rank, naming this rank.
  Allreduce(Comm& comm, const AllreduceConfig& config, const std::string& invalid_argument_here = {});
  ~Allreduce();
  Allreduce(const Allreduce&) = delete;
  Allreduce& operator=(const Allreduce&) = delete;

  // Application side.
  void start(const void* sendbuf, void* recvbuf);
  bool test(RoundInfo* info);
  void wait(RoundInfo* info);
  // wait() that gives up at `deadline`: true once the round is delivered, false when the
  // deadline passed first (the round stays outstanding).
  bool wait_until(RoundInfo* info, std::chrono::steady_clock::time_point deadline);
  void flush(void* recvbuf, RoundInfo* info);
  // Collective: waits for an outstanding round, then until every rank is done with the
  // handle, so no peer writes into its memory any more. Returns at once on a failed
  // communicator. The caller frees the handle whatever this throws.
  void destroy();
  // A copy of the counters, taken under the engine lock; `out` keeps its capacity.
  void stats(AllreduceStats& out) const;

  // Engine side, engine lock held.
  void on_notice(const Notice& notice);
  void advance_locked();
  // Liveness, from whichever thread drives the engine (the progress thread included): when
  // the active round has not moved for a while, pings the peer it waits on, so a dead peer
  // is found whatever this rank's application is doing (computing, polling with test).
  void probe_locked(std::chrono::steady_clock::time_point now);
  uint32_t id() const { return id_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  int majority_initiator(uint64_t round) const;
  // When the engine must look again although nothing arrives (a quorum round's grace),
  // engine lock held; nullopt: no such time.
  std::optional<std::chrono::steady_clock::time_point> next_deadline_locked() const;

 private:
  struct Posted {
    uint64_t round;
    const void* sendbuf;
    void* recvbuf;
    bool late;       // the engine joined this round before the application posted it
    bool flush;
    bool delivered;  // result already written into recvbuf
  };
  // A completed round's info, kept until the application has it; its result lives in the
  // work buffer until the engine needs that for a later round, and only then is copied
  // here (user dtype): memory only while the application lags.
  struct Completed {
    uint64_t round = UINT64_MAX;
    RoundInfo info;
    std::vector<std::byte> result;
  };
  // What the work buffer holds between and during rounds.
  enum class WorkHolds {
    carry,   // this rank's carry (carry_in_work_), or nothing
    round,   // the active round's contribution, partial and final result
    result,  // the result of round completed_ - 1, not yet handed to the application
  };

  void prepare();
  bool is_sync_round(uint64_t round) const;
  bool lag_allows(uint64_t round) const;
  bool can_join(uint64_t round);
  void initiate(uint64_t round);
  void count_arrival(std::unique_lock<std::mutex>& lock, uint64_t round);
  void join(uint64_t round);
  bool run_steps();       // true when the active round's plan is done
  bool post_sends(const Step& step);  // posts what the window allows; true once all are
  bool reduce_arrivals(const Step& step);  // true once every incoming chunk is handled
  void send_credit(const Step& step, bool finished);
  void on_data(const Notice& notice);
  void on_credit(const Notice& notice);
  void complete_round();
  void deliver_chunk(uint64_t round, size_t first, size_t elems);
  void fill_info(uint64_t round, RoundInfo& info);
  bool deliver_if_ready_locked(RoundInfo* info);
  // Takes the engine lock itself; false when `deadline` passed before the round was delivered.
  bool wait_for_round(RoundInfo* info,
                      std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt);
  int awaited_peer() const;

  // The carry and the results (docs/design.md, "Memory of a handle").
  void settle_sends();  // our writes no longer read the work buffer
  void hand_over_result(void* recvbuf, const void* late_sendbuf);
  void move_result_out();
  void add_to_carry(const void* late_sendbuf);
  void release(std::vector<std::byte>& buffer);

  std::byte* work() const { return region_->bytes().data(); }
  std::byte* landing() const { return region_->bytes().data() + work_bytes_; }
  size_t acc_bytes(size_t elems) const { return elems * acc_elem_bytes_; }

  Comm& comm_;
  transport::Transport& transport_;
  const NoticeCodec& codec_;
  AllreduceConfig config_;
  uint32_t id_ = 0;
  int rank_ = 0;
  int size_ = 1;
  pcoll_dtype_t acc_dtype_;
  size_t acc_elem_bytes_ = 0;
  size_t user_elem_bytes_ = 0;
  size_t total_elems_ = 0;   // count + 2P flag elements (fresh, initiator)
  std::chrono::milliseconds timeout_{30000};

  ReducePlan plan_;                 // this rank's steps and chunks, executed by run_steps
  size_t final_step_ = SIZE_MAX;    // see the constructor
  std::vector<int> send_step_of_tag_;  // [tag]: index in plan_.steps of the step sending it, -1
  size_t work_bytes_ = 0;
  size_t landing_bytes_ = 0;
  // Work buffer, then the landing pool; handed to Comm::release_region when it goes, also
  // when the constructor throws.
  struct RegionRelease {
    Comm* comm = nullptr;
    void operator()(transport::LocalRegion* region) const;
  };
  std::unique_ptr<transport::LocalRegion, RegionRelease> region_;
  std::vector<std::unique_ptr<transport::RemoteRegion>> peers_;

  WorkHolds work_holds_ = WorkHolds::carry;
  bool carry_in_work_ = false;      // the work buffer holds a carry that is not empty
  // Carry that arrived while the work buffer was busy (accumulation type): allocated only
  // then, and released once it joined a round.
  std::vector<std::byte> spill_;
  // The late sendbuf of the active round: the application posted it after the engine
  // joined, and keeps it until the round completes, which is when it goes into the carry.
  const void* pending_late_ = nullptr;
  std::vector<std::byte> scratch_;  // a few chunks, for handing over a result in place

  // Application side.
  uint64_t app_next_ = 0;           // rounds posted so far (start + flush calls)
  std::optional<Posted> posted_;

  // Engine side.
  bool ready_ = false;              // constructed: peers' regions known; until then arriving
                                    // notices are only recorded
  uint64_t joined_ = 0;             // rounds joined
  uint64_t completed_ = 0;          // rounds completed
  uint64_t activated_ = 0;          // rounds < activated_ have been activated
  bool initiated_current_ = false;  // this rank activated the active round
  size_t step_ = 0;
  size_t posted_chunks_ = 0;        // chunks of the active step's send posted
  size_t settled_chunks_ = 0;       // of which known to be complete locally (after a flush)
  bool large_writes_pending_ = false;  // a write above the inject size may not be complete
  size_t processed_ = 0;            // entries of the active step's arrival order looked at
  std::vector<uint32_t> deferred_;  // arrived chunks waiting for our own send of that range
  size_t early_delivered_ = 0;      // elements already in the posted recvbuf this round
  // One exchange's chunks of one round, each counted once: a duplicated notification (a
  // provider or network that delivers one twice) is recognised and ignored, never reduced
  // twice.
  struct Arrivals {
    std::vector<uint32_t> order;  // distinct chunks, as they arrived
    std::vector<uint8_t> seen;    // [chunk]: in `order` already
    std::vector<uint8_t> done;    // [chunk]: reduced (its landing position is free)
    size_t handled = 0;           // chunks reduced (or, landing in the result, counted)
    size_t prefix = 0;            // chunks below it are all reduced
    size_t credited = 0;          // the prefix our last credit told the sender
    void clear() {
      for (const uint32_t c : order) seen[c] = done[c] = 0;
      order.clear();
      handled = prefix = credited = 0;
    }
  };
  std::vector<Arrivals> arrivals_[2];  // [round parity][tag]
  // [tag]: for our sends into a windowed slot, the running chunk numbers the receiver
  // reported reduced (credit), and how far our sends went.
  std::vector<uint64_t> credit_;
  std::vector<uint64_t> sent_;
  uint64_t duplicates_ = 0;            // duplicated data notifications ignored
  // Quorum mode: the round this rank's arrival completed the quorum of, and the round whose
  // grace this rank runs (it arrived first) with its deadline. UINT64_MAX: none.
  size_t counter_words_ = 0;
  uint64_t quorum_reached_ = UINT64_MAX;
  uint64_t grace_round_ = UINT64_MAX;
  std::chrono::steady_clock::time_point grace_deadline_{};
  std::vector<Completed> ring_;     // results not yet handed to the application
  std::vector<bool> late_by_round_; // indexed by round % ring size

  uint64_t probe_epoch_ = 0;       // epoch_ when probe_locked last saw it change
  std::chrono::steady_clock::time_point probe_moved_at_{};
  uint64_t epoch_ = 0;             // bumped whenever the engine moves: arrivals, steps, rounds

  // Round trace (PCOLL_TRACE): null when off, so an untraced round pays one test per event.
  void trace(TraceEvent kind, uint64_t round, int32_t arg = 0, int32_t arg2 = 0) {
    if (trace_) trace_->add(kind, round, arg, arg2);
  }
  void estimate_clock_offset();
  void write_trace() noexcept;
  std::unique_ptr<RoundTrace> trace_;
  int64_t clock_offset_ns_ = 0;
  bool step_traced_ = false;  // the active step's start is in the trace

  // Statistics (stats()): plain counters, engine lock held.
  void count_round(const RoundInfo& info);
  void count_memory(std::ptrdiff_t bytes) { stats_.memory_bytes += static_cast<uint64_t>(bytes); }
  AllreduceStats stats_;
  std::vector<uint64_t> late_run_;  // [rank]: consecutive late rounds up to the last one
  bool active_flush_ = false;       // the active round is a flush
  int waiters_ = 0;                 // calls waiting in wait_for_round
};

}  // namespace pcoll
