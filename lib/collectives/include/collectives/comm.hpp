// The communicator: one bootstrap, one transport endpoint connected to every rank, one
// progress engine (a thread that blocks on the transport's wait object when idle) and the
// persistent allreduce handles created on it. It routes arriving notifications to the
// handle they belong to, and through its failure detector (failure_detector.hpp) turns a
// dead or silent peer into an error on every rank.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <bootstrap/bootstrap.hpp>
#include <collectives/agreement.hpp>
#include <collectives/failure_detector.hpp>
#include <collectives/notification.hpp>
#include <collectives/survivor_agreement.hpp>
#include <collectives/survivor_channel.hpp>
#include <support/error.hpp>
#include <transport/progress_driver.hpp>
#include <transport/transport.hpp>

namespace pcoll {

class Allreduce;

// Makes the communicator's transport; the API layer passes the provider registry's choice,
// so that the collectives never name a provider.
using TransportFactory =
    std::function<std::unique_ptr<transport::Transport>(const transport::Options& options)>;

class Comm final : private PeerNotices {
 public:
  Comm(std::unique_ptr<bootstrap::Bootstrap> boot, const TransportFactory& make_transport);
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& provider() const { return provider_; }
  // The notification layout every rank agreed on at setup (PCOLL_NOTIFY_BITS).
  const NoticeCodec& codec() const { return codec_; }
  const std::string& bootstrap_name() const { return bootstrap_name_; }
  bootstrap::Bootstrap& boot() { return *boot_; }
  transport::Transport& transport() { return *transport_; }

  // Collective agreement over the transport, probing silent peers (agreement.hpp): what
  // handle creation, destruction and barriers use instead of the bootstrap's collectives.
  // Every rank must make the same `call` (Errc::mismatch on every rank otherwise, and the
  // communicator fails: docs/design.md, "Mismatched calls").
  std::vector<std::vector<std::byte>> agree(const CallHeader& call, std::span<const std::byte> mine,
                                            std::chrono::milliseconds timeout) {
    return agreement_->allgather(call, mine, timeout);
  }
  // A barrier over agree(): returns once every rank has entered it.
  void barrier(const CallHeader& call, std::chrono::milliseconds timeout) { agree(call, {}, timeout); }
  // Engine lock held: the rounds every handle's application has posted, by handle slot
  // (what an agreement carries, call_match.hpp).
  RoundsTable rounds_table_locked() const;
  // Engine lock held: whether this rank's application is inside an agreement (its engine
  // then joins no round the application has not posted).
  bool in_agreement_locked() const { return agreement_ != nullptr && agreement_->in_progress(); }
  // The communicator's default timeout (PCOLL_TIMEOUT_MS).
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Handles register themselves at creation (collective, so ids agree on every rank: every
  // rank creates and destroys the same handles in the same order). The id is what the
  // handle's notifications carry.
  uint32_t add_handle(Allreduce* handle);
  void remove_handle(uint32_t id);

  // The engine lock: guards every handle's round state. Held by whichever thread (the
  // application inside run/wait, or the progress thread) is driving the engine.
  std::mutex& engine_mutex() { return engine_mutex_; }

  // With the engine lock held: drains the transport's notifications, routes them to their
  // handles and lets every handle advance its rounds. Throws on a failed comm.
  void drive_locked();

  // Peer liveness, called by a waiter that has heard nothing useful for a while: pings
  // `peer` (its progress engine answers even while its application computes) and fails
  // the communicator, naming the peer, when a ping stays unanswered for `timeout`.
  // A slow application is not a failure; a dead process or a dead engine is.
  void watch_locked(int peer, std::chrono::milliseconds timeout);

  // pcoll_finalize calls it before its barrier, after which ranks leave one by one. Ends
  // the heartbeat (heartbeat_locked): one that has left must not look dead to a rank still
  // leaving. And an error about a peer that this rank's own engine hits from then on (an
  // answer to a ping from a rank that has since closed its endpoint) is logged (debug) and
  // passed over, the rest of the batch still dispatched, and so is a failed flush at the
  // end of the finalize barrier (Agreement::allgather): failing the communicator there
  // would fail this rank's finalize barrier or skip the bootstrap's final barrier. Failure
  // notices from other ranks and unanswered pings still fail it, so a rank that dies while
  // the others leave is still named.
  // The transport, too, reports a lost connection quietly from now on
  // (Transport::expect_departures): a peer that has finished the barrier closes its
  // endpoints while this rank may still be in it.
  void begin_leaving() {
    detector_->begin_leaving();
    transport_->expect_departures();
  }
  bool is_leaving() const { return detector_->is_leaving(); }

  // Marks the communicator failed (first reason wins), tells every peer, wakes waiters.
  void mark_failed(int culprit, const std::string& reason, Errc code = Errc::ok) {
    detector_->mark_failed(culprit, reason, code);
  }
  // With the engine lock held, for an error this rank's own operation hit (a post that
  // timed out, a failed write): fails the communicator and throws. A failure another rank
  // already reported, sitting undelivered in `undelivered` or in the transport, is the
  // root cause more often than this error (a survivor that left after hearing of it stops
  // draining its queue, and a send to it then times out): that failure is recorded and
  // thrown instead. `culprit` overrides the rank the error names.
  [[noreturn]] void fail_locked(const Error& error, std::span<const uint64_t> undelivered = {},
                                std::optional<int> culprit = std::nullopt);
  // Throws the failure, if any.
  void check_failed() const { detector_->check_failed(); }
  // A handle's registered memory, as the handle goes (engine lock not held): freed, unless
  // the communicator has failed. Then it is kept until the communicator is destroyed,
  // after linger_after_failure: peers that have not heard of the failure yet may still
  // import its key (UCX 1.13 crashes unpacking the key of shared memory that is gone) or
  // write into it.
  void release_region(std::unique_ptr<transport::LocalRegion> region);
  bool failed() const { return detector_->failed(); }
  // Ranks named failed so far, ascending (FailureDetector::failed_ranks). Any thread.
  std::vector<int> failed_ranks() const { return detector_->failed_ranks(); }

  // Sleeps (engine lock held by `lock`, released while asleep) until the progress thread
  // has moved the engine on, a failure was recorded, or `timeout` passed. Used by an
  // application waiter once its spin budget is spent; while spinning it drives the engine
  // itself, so a fast round pays no thread hand-off.
  void sleep_locked(std::unique_lock<std::mutex>& lock, std::chrono::microseconds timeout);

  // An application thread that spins in a wait drives the engine itself; meanwhile the
  // progress thread is parked, so that the two do not take turns on a shared core (an MPI
  // launcher binds each rank to one core). Counted; every hold needs its release:
  // resume_now when the caller is about to sleep and leaves progress to the thread.
  void hold_progress() { driver_->hold(); }
  void release_progress(bool resume_now) { driver_->release(resume_now); }

  // How long a waiting caller keeps driving the engine after it last moved, before it
  // sleeps (PCOLL_SPIN_US).
  std::chrono::microseconds spin_budget() const { return spin_budget_; }
  // Whether a spinning waiter yields its CPU between polls (PCOLL_YIELD; by default when
  // this node runs more ranks than it has CPUs).
  bool yield_when_spinning() const { return yield_; }
  // Ranks of this communicator on this rank's host, this one included.
  int local_ranks() const { return local_ranks_; }
  // node_of()[r]: the node of rank r (transport::JobLayout::node_of), the same on every rank.
  const std::vector<int>& node_of() const { return node_of_; }

  // --- Shrinking (docs/design.md, "Shrinking to the survivors").
  // Collective over the live ranks, on a failed communicator: blocks until the survivors
  // have agreed on the failed set (survivor_agreement.hpp, over the survivors' channel),
  // naming ranks that fall silent meanwhile, and returns it with the attempt's epoch. Throws
  // Errc::invalid_state on a communicator that has not failed, and Errc::peer_failed when
  // this rank is not a survivor (another rank named it failed).
  struct Survivors {
    std::vector<int> failed;  // ascending
    uint32_t epoch = 0;       // the attempt: 0, then 1 after a shrink that failed, ...
  };
  Survivors agree_on_survivors();
  // Collective over `members` (ranks of this communicator, ascending, this rank among
  // them): every member's blob in member order, over the survivors' channel. What a
  // shrunk communicator's setup exchanges (SurvivorBootstrap). A member that falls silent
  // is named failed (Errc::peer_failed).
  std::vector<std::vector<std::byte>> survivors_allgather(uint32_t epoch, uint32_t step, const std::vector<int>& members,
                                                          std::span<const std::byte> mine);
  // What made this communicator's transport: a shrunk one makes its own with it.
  const TransportFactory& transport_factory() const { return make_transport_; }
  // This communicator's identity in this process (never reused), and whether it descends
  // by shrinks from the communicator `serial` (its survivors, or the survivors of those
  // after another failure), so that a handle resumes only on survivors of its own.
  uint64_t serial() const { return serial_; }
  bool shrunk_from(uint64_t serial) const {
    return std::find(ancestors_.begin(), ancestors_.end(), serial) != ancestors_.end();
  }
  void set_shrunk_from(const Comm& parent) {
    ancestors_ = parent.ancestors_;
    ancestors_.push_back(parent.serial_);
  }

 private:
  using Clock = std::chrono::steady_clock;
  // Setup, in this order (the constructor).
  struct Setup;
  void read_settings(Setup& setup);
  void open_transport(Setup& setup, const TransportFactory& make_transport);
  void agree_notification_width(const Setup& setup);
  void connect_ranks(Setup& setup);
  void start_engine(const Setup& setup);

  // The progress thread's work; returns how soon a handle needs the engine again by the
  // clock alone (a quorum round's grace).
  std::chrono::microseconds progress_hook();
  void dispatch_locked(uint64_t value);
  void dispatch_control_locked(const Notice& notice);
  void dispatch_failure_locked(const Notice& notice);
  // After the failure (the progress thread, a shrink): failure news, pings and the
  // survivors' channel are served, everything else dropped; errors about peers are logged
  // and passed over.
  void drive_failed_locked();
  // The survivors' channel's whole messages, to the agreement of their epoch or to the
  // blobs of survivors_allgather; and the failed ranks named since, to every agreement.
  void serve_survivors_locked();
  SurvivorAgreement& survivor_agreement_locked(uint32_t epoch);
  // A shrink's wait (engine lock held by `lock`): drives the failed communicator until
  // `ready()`, pinging the ranks `awaited()` names. One silent for shrink_patience() is
  // named failed, every rank told ("rank R did not answer within T ms <during>"); with
  // `silence_fails` the wait then throws Errc::peer_failed naming it, as it does for an
  // awaited rank another rank named failed.
  void shrink_wait_locked(std::unique_lock<std::mutex>& lock, const std::function<bool()>& ready,
                          const std::function<std::vector<int>()>& awaited, const std::string& during,
                          bool silence_fails);
  // How long a shrink waits on a silent rank before naming it: twice the timeout. A live
  // survivor's engine may be inside sends to the dead rank for up to the timeout when the
  // failure strikes (half in the post that fails, half in the failure news), and answers
  // no ping meanwhile.
  std::chrono::milliseconds shrink_patience() const { return 2 * timeout_; }
  void survivor_send(int peer, uint8_t type, std::span<const std::byte> body);
  // A handle's application waits for a round that a peer, already inside an agreement
  // this rank has not entered, will never join: Errc::mismatch (call_match.hpp).
  void check_waits_against_agreement_locked();
  void heartbeat_locked(std::chrono::steady_clock::time_point now);
  // Engine lock held, the communicator failing or failed: dispatches the failure notices
  // and the control messages among `values` (pings, pongs, acknowledgements, the
  // survivors' channel; agreement blobs once failed; a malformed one is logged and
  // skipped) and drops the rest, which nothing reads any more.
  void take_failure_news_locked(std::span<const uint64_t> values);
  // In the destructor of a failed communicator: delivers our failure notices (answers
  // theirs) until every peer but the culprit knows, or a bounded time passed.
  void linger_after_failure();

  // PeerNotices: what the failure detector sends.
  void send_ping(int peer) override;
  void send_pong(int peer) override;
  void send_failure(int peer, int culprit) override;
  void send_report(int peer, int culprit, const FailureReport& report) override;
  void send_failure_ack(int peer) override;
  void wake_waiters() override;
  // Failure news (notices, acknowledgements) to `peer`, which may be gone: retried while
  // its transmit queue is full, up to one deadline shared by all news of this
  // communicator (news_deadline_); after it, one try. Throws Error naming `peer` when the
  // news was not sent.
  void send_news(int peer, uint64_t value);

  std::unique_ptr<bootstrap::Bootstrap> boot_;
  uint64_t serial_ = 0;
  std::vector<uint64_t> ancestors_;  // the communicators this one was shrunk from, oldest first
  int rank_ = 0;
  int size_ = 1;
  std::string provider_;
  std::string bootstrap_name_;
  std::vector<int> node_of_;
  NoticeCodec codec_;
  std::unique_ptr<transport::Transport> transport_;
  std::chrono::milliseconds timeout_{30000};
  std::chrono::microseconds spin_budget_{50};
  bool yield_ = false;
  int local_ranks_ = 1;
  std::unique_ptr<FailureDetector> detector_;
  // Set when the first failure news is sent: the end of the time the news may take in all
  // (half the timeout, at most 2 s, as linger_after_failure). Engine lock.
  std::optional<Clock::time_point> news_deadline_;

  std::mutex engine_mutex_;
  std::condition_variable engine_moved_;  // the progress thread changed the engine's state
  // Handles by slot (NoticeCodec::handle_slot of their id). A destroyed handle's slot is
  // reused, the one freed longest ago first, with its generation bumped: a message that
  // trails a destroyed handle (a forwarded activation, a credit) names the old generation
  // and is dropped instead of reaching the slot's new handle.
  struct HandleSlot {
    Allreduce* handle = nullptr;
    uint32_t generation = 0;
  };
  std::vector<HandleSlot> slots_;
  std::deque<uint32_t> free_slots_;

  std::unique_ptr<Agreement> agreement_;
  TransportFactory make_transport_;
  // Shrinking. Engine lock.
  std::unique_ptr<SurvivorChannel> channel_;
  class SurvivorSink;
  std::unique_ptr<SurvivorSink> survivor_sink_;
  // By epoch: an agreement stays to answer ranks that missed its commit.
  std::map<uint32_t, std::unique_ptr<SurvivorAgreement>> survivor_agreements_;
  std::map<uint32_t, std::vector<std::pair<int, SurvivorMessage>>> later_messages_;  // epochs not begun here
  uint32_t shrink_epoch_ = 0;       // the next attempt's
  std::vector<int> told_failed_;    // failed ranks the agreements were told of
  // survivors_allgather's blobs by (epoch, step, sender).
  std::map<std::tuple<uint32_t, uint32_t, int>, std::vector<std::byte>> survivor_blobs_;
  // Handle memory kept after its handle went, on a failed communicator (release_region);
  // destroyed before the transport. Engine lock.
  std::vector<std::unique_ptr<transport::LocalRegion>> kept_regions_;
  std::unique_ptr<transport::ProgressDriver> driver_;  // last: stops first
};

}  // namespace pcoll
