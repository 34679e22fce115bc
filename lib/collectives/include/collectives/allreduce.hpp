// A persistent partial allreduce handle (docs/design.md, "Semantics"): the application API
// (start / test / wait / flush / destroy) and the engine that runs its rounds.
//
// The handle is put together from parts that each do one job: its spec (handle_spec.hpp:
// arguments, agreement), its start policy (start_policy.hpp: who may start a round, one
// per mode), its round executor (round_executor.hpp: a plan's chunks and credits, or the
// direct plan's reads of peers' memory on one host), its
// memory (handle_memory.hpp: work buffer, landing pool, carry, results) and its observers
// (statistics, round trace). What is left here is the round itself: join, complete, hand
// over, and the application's calls.
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
#include <utility>
#include <vector>

#include <collectives/activation.hpp>
#include <collectives/allreduce_stats.hpp>
#include <collectives/handle_memory.hpp>
#include <collectives/handle_spec.hpp>
#include <collectives/notification.hpp>
#include <collectives/direct_executor.hpp>
#include <collectives/plan_executor.hpp>
#include <collectives/round_info.hpp>
#include <collectives/round_trace.hpp>
#include <collectives/start_policy.hpp>
#include <transport/transport.hpp>

namespace pcoll {

class Comm;

class Allreduce final : private ExecutorPort, private WriteSettler {
 public:
  using Clock = std::chrono::steady_clock;

  // Collective over the communicator: checks that every rank passed the same spec
  // (Errc::mismatch on every rank otherwise), registers memory once. A non-empty
  // `invalid_argument_here` (an argument this rank's caller got wrong) and any local
  // failure (plan, memory) are reported on every rank, naming this rank.
  Allreduce(Comm& comm, const HandleSpec& spec, const std::string& invalid_argument_here = {});

  // Collective over `survivors`, made by shrink from the failed communicator of `old`
  // (allreduce_resume.cpp; pcoll_allreduce_resume says what it does). `old` is left as it
  // was; the caller frees it once this returns. Throws Errc::invalid_argument on every
  // survivor for a handle without opts.elastic or a communicator not shrunk from old's.
  struct Resumed {
    std::unique_ptr<Allreduce> handle;
    bool delivered = false;  // the interrupted call's round happened: recvbuf holds its result
    RoundInfo info;          // that round's info (delivered)
  };
  static Resumed resume(Allreduce& old, Comm& survivors, void* recvbuf);
  ~Allreduce() override;
  Allreduce(const Allreduce&) = delete;
  Allreduce& operator=(const Allreduce&) = delete;

  // Application side.
  void start(const void* sendbuf, void* recvbuf);
  bool test(RoundInfo* info);
  void wait(RoundInfo* info);
  // wait() that gives up at `deadline`: true once the round is delivered, false when the
  // deadline passed first (the round stays outstanding).
  bool wait_until(RoundInfo* info, Clock::time_point deadline);
  void flush(void* recvbuf, RoundInfo* info);
  // Collective: waits for an outstanding round, then until every rank is done with the
  // handle, so no peer writes into its memory any more. Returns at once on a failed
  // communicator. The caller frees the handle whatever this throws.
  void destroy();
  // A copy of the counters, taken under the engine lock; `out` keeps its capacity.
  void stats(AllreduceStats& out) const;
  // The reduction plan: "recursive_doubling", "rabenseifner" or "direct" (static storage).
  const char* plan_name() const { return executor_->algorithm(); }
  // hash(seed, handle, round) mod P, whatever the mode (pcoll_allreduce_majority_initiator).
  int majority_initiator(uint64_t round) const;

  // Engine side, engine lock held.
  void on_notice(const Notice& notice);
  void advance_locked();
  // Liveness, from whichever thread drives the engine (the progress thread included): when
  // the active round has not moved for a while, pings the peer it waits on, so a dead peer
  // is found whatever this rank's application is doing (computing, polling with test).
  void probe_locked(Clock::time_point now);
  // When the engine must look again although nothing arrives (a quorum round's grace);
  // nullopt: no such time.
  std::optional<Clock::time_point> next_deadline_locked() const;
  uint32_t id() const { return id_; }
  // The rounds the application has posted (start and flush calls), and the round it posted
  // and has not been handed yet, with whether it is a flush (Comm's mismatch checks).
  uint64_t rounds_posted_locked() const { return app_next_; }
  std::optional<std::pair<uint64_t, bool>> awaited_round_locked() const {
    if (!posted_ || posted_->delivered) return std::nullopt;
    return std::make_pair(posted_->round, posted_->flush);
  }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  struct Posted {
    uint64_t round;
    const void* sendbuf;
    void* recvbuf;
    bool late;       // the engine joined this round before the application posted it
    bool flush;
    bool delivered;  // result already written into recvbuf
  };

  // Creation (this rank alone, then with the others). A handle made for resume stays not
  // ready_ until resume has set its rounds.
  struct ForResume {};
  Allreduce(Comm& comm, const HandleSpec& spec, const std::string& invalid_argument_here, ForResume);
  void prepare();
  void check_host_memory(uint64_t per_rank) const;
  void import_peers(const std::vector<transport::Bytes>& keys);
  void estimate_clock_offset();

  // Rounds, engine lock held.
  bool can_join(uint64_t round);
  void initiate(uint64_t round);
  void join(uint64_t round);
  void complete_round();
  void fill_info(uint64_t round, RoundInfo& info);
  void on_activation(const Notice& notice);
  void started_by_peer(uint64_t round);
  // Quorum: counts this rank's arrival at `round` (the lock is released while the remote
  // atomic is in flight).
  void count_arrival(std::unique_lock<std::mutex>& lock, uint64_t round);

  // Application side (allreduce_wait.cpp for the waiting).
  void post(uint64_t round, const void* sendbuf, void* recvbuf, bool flush, std::unique_lock<std::mutex>& lock);
  bool deliver_if_ready_locked(RoundInfo* info);
  // Takes the engine lock itself; false when `deadline` passed before the round was delivered.
  bool wait_for_round(RoundInfo* info, std::optional<Clock::time_point> deadline = std::nullopt);
  struct ProgressHold;
  void pause_waiting(std::unique_lock<std::mutex>& lock, bool spinning, ProgressHold& holding,
                     std::optional<Clock::time_point> deadline);
  int awaited_peer() const;
  // Changes whenever the engine moves: arrivals, steps, rounds.
  uint64_t epoch() const { return epoch_ + (executor_ ? executor_->moves() : 0); }

  // ExecutorPort: the plan's chunks over the transport, into this handle's memory.
  void write_chunk(const Step& step, const Chunk& chunk, uint64_t round, uint32_t tag) override;
  void reduce_chunk(const Step& step, const Chunk& chunk, uint64_t round, bool final) override;
  void send_credit(const Step& step, uint64_t round, uint32_t chunk) override;
  void settle_writes() override;
  // Counts a message of `bytes` payload to `peer` when it lives on another node.
  void sent(int peer, uint64_t bytes);
  // The direct plan: peers' work buffers mapped here.
  void signal_peer(int peer, uint32_t tag, uint64_t round) override;
  void reduce_from_peer(int peer, size_t offset, size_t count, uint64_t round) override;
  void copy_from_peer(int peer, size_t offset, size_t count, uint64_t round) override;
  void final_elements(size_t offset, size_t count, uint64_t round) override;
  const std::byte* peer_work(int peer) const { return peer_work_[static_cast<size_t>(peer)]; }
  // Whether every peer's memory maps here, so that the direct plan can run.
  bool peers_mapped() const;
  void step_started(uint64_t round, size_t step) override;
  void step_ended(uint64_t round, size_t step) override;
  // WriteSettler: before the work buffer is overwritten.
  void settle_writes_from_work() override { executor_->settle(*this); }

  template <typename Event>
  void observe(Event&& event) {
    for (RoundObserver* observer : observers_) event(*observer);
  }

  Comm& comm_;
  transport::Transport& transport_;
  const NoticeCodec& codec_;
  HandleSpec spec_;
  uint32_t id_ = 0;
  int rank_ = 0;
  int size_ = 1;
  std::chrono::milliseconds timeout_{30000};

  std::unique_ptr<StartPolicy> policy_;
  std::unique_ptr<RoundExecutor> executor_;
  bool direct_ = false;  // the direct plan (its executor reads peer_work_)
  // Handed to Comm::release_region when it goes, also when the constructor throws.
  struct MemoryRelease {
    Comm* comm = nullptr;
    void operator()(HandleMemory* memory) const;
  };
  std::unique_ptr<HandleMemory, MemoryRelease> memory_;
  std::vector<std::unique_ptr<transport::RemoteRegion>> peers_;
  std::vector<const std::byte*> peer_work_;  // [rank]: its work buffer mapped here (direct plan)
  transport::Bytes key_;  // this rank's registration key, for the creation agreement

  StatsObserver stats_;
  std::unique_ptr<TraceObserver> trace_;
  std::vector<RoundObserver*> observers_;

  // Application side.
  uint64_t app_next_ = 0;  // rounds posted so far (start + flush calls)
  std::optional<Posted> posted_;
  // The late sendbuf of the active round: the application posted it after the engine
  // joined, and keeps it until the round completes, which is when it goes into the carry.
  const void* pending_late_ = nullptr;
  int waiters_ = 0;        // calls waiting in wait_for_round or polling in test

  // Engine side.
  bool ready_ = false;     // constructed: peers' regions known; until then the engine waits
  uint64_t joined_ = 0;    // rounds joined
  uint64_t completed_ = 0; // rounds completed
  uint64_t activated_ = 0; // rounds < activated_ have been activated
  uint64_t first_round_ = 0;  // the first round on this communicator (a resumed handle's R + 1)
  // The activation trees: over the nodes where the job spans several (activation.hpp),
  // flat under PCOLL_PLAN=flat.
  activation::Trees trees_{1};
  activation::StartPlan start_plan_;  // what initiate() does (activation::start_plan)
  bool initiated_current_ = false;  // this rank activated the active round
  bool active_flush_ = false;       // the active round is a flush
  uint64_t epoch_ = 0;              // the engine's own moves (epoch() adds the executor's)
  uint64_t probe_epoch_ = 0;        // epoch() when probe_locked last saw it change
  Clock::time_point probe_moved_at_{};
};

}  // namespace pcoll
