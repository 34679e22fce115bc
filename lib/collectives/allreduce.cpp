// The partial allreduce handle: creation and the round engine (allreduce.hpp).
//
// Round t's contribution of this rank is carry + sendbuf_t when the application posted
// round t before the engine joined it, else the carry alone (the late sendbuf_t is folded
// into the carry when it arrives). Each contribution is followed by the round's flag
// words (round_flags.hpp: a fresh bitmap, the lowest initiator, the flush words), combined
// where the plan reduces the data, so every rank learns who was fresh and who initiated
// from the result itself, and all ranks agree on it without another message.
#include <collectives/allreduce.hpp>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstring>

#include <collectives/activation.hpp>
#include <collectives/comm.hpp>
#include <collectives/dtype.hpp>
#include <collectives/enum_names.hpp>
#include <collectives/executor_choice.hpp>
#include <collectives/join_rule.hpp>
#include <collectives/mode_table.hpp>
#include <collectives/reduce_kernels.hpp>
#include <support/copy.hpp>
#include <support/error.hpp>
#include <support/host_memory.hpp>
#include <support/log.hpp>

namespace pcoll {

void Allreduce::MemoryRelease::operator()(HandleMemory* memory) const {
  std::unique_ptr<HandleMemory> owned(memory);
  if (comm != nullptr && owned) comm->release_region(owned->release_region());
}

Allreduce::Allreduce(Comm& comm, const HandleSpec& spec, const std::string& invalid_argument_here)
    : Allreduce(comm, spec, invalid_argument_here, ForResume{}) {
  std::lock_guard lock(comm.engine_mutex());
  ready_ = true;
}

Allreduce::Allreduce(Comm& comm, const HandleSpec& spec, const std::string& invalid_argument_here, ForResume)
    : comm_(comm), transport_(comm.transport()), codec_(comm.codec()), spec_(spec),
      rank_(comm.rank()), size_(comm.size()), timeout_(spec.timeout()), memory_(nullptr, MemoryRelease{&comm}),
      stats_(comm.size()) {
  observers_.push_back(&stats_);
  {
    // Ids agree on every rank: every rank creates and destroys the same handles in order.
    std::lock_guard lock(comm.engine_mutex());
    id_ = comm.add_handle(this);
  }
  // Everything that can fail on one rank alone is settled before the collective part and
  // its outcome travels with this rank's description: a bad argument or a failed
  // allocation on any rank becomes the same error on every rank, never a rank that returns
  // while the others wait for it.
  CreationOffer offer;
  offer.problem = invalid_argument_here;
  if (!offer.problem.empty()) {
    offer.status = static_cast<int>(Errc::invalid_argument);
  } else {
    try {
      prepare();
    } catch (const Error& e) {
      offer.status = static_cast<int>(e.code());
      offer.problem = e.what();
    } catch (const std::bad_alloc&) {
      offer.status = static_cast<int>(Errc::out_of_memory);
      offer.problem = "out of memory for a handle of " + std::to_string(spec.count) + " elements";
    }
  }
  offer.signature = signature_of(spec_, id_);
  // Ranks that would run different plans (one maps its peers' memory, another does not)
  // fail creation as a mismatch instead of waiting for each other's notices.
  offer.signature.direct = direct_ ? 1 : 0;
  if (offer.status == 0) offer.key = key_;
  // Collective part: the outcome, the arguments and the registration keys in one
  // agreement (over the transport: a straggler keeps the others waiting while its engine
  // answers, a dead rank is named within the timeout).
  std::vector<transport::Bytes> keys;
  try {
    keys = agree_creation(comm, offer, timeout_);
  } catch (...) {
    std::lock_guard lock(comm.engine_mutex());
    comm.remove_handle(id_);
    throw;
  }
  import_peers(keys);
  {
    std::lock_guard lock(comm.engine_mutex());
    ++epoch_;
  }
  if (trace_) estimate_clock_offset();
  log::debug("allreduce handle " + std::to_string(id_) + ": " + describe(offer.signature) + ", " +
             executor_->algorithm() + ", " + std::to_string(executor_->step_count()) + " steps");
}

// The part of construction that involves this rank only: plan, policy, memory.
void Allreduce::prepare() {
  check_dtype(spec_.dtype);
  check_op(spec_.op);
  const transport::Capabilities& caps = transport_.capabilities();
  ExecutorInputs inputs;
  inputs.ranks = size_;
  inputs.rank = rank_;
  inputs.handle = id_;
  inputs.count = spec_.count;
  inputs.acc_elem_bytes = wire_element_bytes(spec_.dtype);
  inputs.chunk_bytes = spec_.chunk_bytes;
  inputs.pool_bytes = spec_.pool_bytes;
  inputs.plan_rules = spec_.plan_rules;
  inputs.flat_plan = spec_.flat_plan;
  inputs.peers_mapped = peers_mapped();
  inputs.node_of = comm_.node_of();
  inputs.max_chunks = codec_.max_chunks();
  inputs.max_tags = codec_.max_tags();
  inputs.codec = codec_.describe();
  inputs.inject_bytes = caps.inject_bytes;
  ChosenExecutor chosen = choose_executor(inputs);
  trees_ = activation::activation_trees(comm_.node_of(), size_, spec_.flat_plan);
  direct_ = chosen.direct;
  const ModeRow& mode = *find_mode(spec_.mode);
  if (mode.needs_remote_atomics && !caps.remote_atomics)
    fail(Errc::unsupported, std::string(name_of(mode_names(), mode.mode)) + " handles count arrivals with 64-bit "
                            "remote atomics, which provider " + caps.name + " does not have; use solo or majority "
                            "here, or a provider with atomics (pcoll_info: atomics)");
  policy_ = mode.make_policy(PolicyContext{rank_, size_, id_, spec_.opts});
  check_host_memory(HandleMemory::footprint(spec_, size_, chosen.landing_elems, policy_->counter_words()));
  memory_.reset(new HandleMemory(transport_, spec_, rank_, size_, chosen.landing_elems, policy_->counter_words(), *this));
  executor_ = std::move(chosen.executor);
  start_plan_ = activation::start_plan(policy_->spread(), rank_, trees_,
                                       [this](int peer) { return executor_->announces_start_to(peer); });
  if (!spec_.trace_dir.empty()) {
    trace_ = std::make_unique<TraceObserver>(
        spec_.trace_dir, spec_.trace_clock_skew_ns,
        RoundTrace::Header{rank_, size_, id_, name_of(mode_names(), spec_.mode), 0});
    observers_.push_back(trace_.get());
  }
  key_ = memory_->region().remote_key();
}

// Every rank of this host allocates the same: refused here, before any of it is allocated,
// when the host cannot hold them all (a provider's shared-memory fallback would otherwise
// grow a /dev/shm file until the OOM killer ends the job).
void Allreduce::check_host_memory(uint64_t per_rank) const {
  const auto ranks = static_cast<uint64_t>(comm_.local_ranks());
  const uint64_t needed = per_rank > UINT64_MAX / ranks ? UINT64_MAX : per_rank * ranks;
  const host_memory::Available available = host_memory::available();
  if (needed <= available.bytes) return;
  fail(Errc::out_of_memory,
       "a handle of " + std::to_string(spec_.count) + " " + std::string(name_of(dtype_names(), spec_.dtype)) +
           " elements needs " + host_memory::describe_bytes(per_rank) + " on each of the " + std::to_string(ranks) +
           " ranks on this host (" + host_memory::describe_bytes(needed) + "), and this host has " +
           host_memory::describe_bytes(available.bytes) + " available (" + available.source +
           "): use a smaller count, or fewer ranks per host");
}

void Allreduce::import_peers(const std::vector<transport::Bytes>& keys) {
  try {
    peers_.resize(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      // A failure known here may be a peer that has left, its memory gone: UCX 1.13 crashes
      // unpacking the key of shared memory that no longer exists (docs/reliability.md). A
      // leaving rank waits until every survivor has heard of the failure, so checking before
      // each import leaves no key of a departed rank to unpack but in a window of
      // microseconds.
      comm_.check_failed();
      peers_[static_cast<size_t>(r)] = transport_.import_region(r, keys[static_cast<size_t>(r)]);
    }
    if (direct_) {
      peer_work_.assign(static_cast<size_t>(size_), nullptr);
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        const std::span<std::byte> mapped = peers_[static_cast<size_t>(r)]->mapped();
        if (mapped.size() < memory_->work_bytes())
          fail(Errc::transport, "the direct plan of handle " + std::to_string(id_) + " reads rank " + std::to_string(r) +
                                    "'s memory, which provider " + transport_.capabilities().name +
                                    " said it maps here but did not (" + std::to_string(mapped.size()) + " of " +
                                    std::to_string(memory_->work_bytes()) + " bytes mapped)");
        peer_work_[static_cast<size_t>(r)] = mapped.data();
      }
    }
  } catch (const Error& e) {
    // The peers go on with a handle this rank cannot serve: fail the communicator so that
    // they hear of it instead of waiting for this rank's data.
    std::lock_guard lock(comm_.engine_mutex());
    comm_.remove_handle(id_);
    comm_.mark_failed(e.rank(), e.what());
    throw;
  }
}

Allreduce::~Allreduce() {
  {
    std::lock_guard lock(comm_.engine_mutex());
    comm_.remove_handle(id_);
  }
  if (trace_) trace_->write();
}

// Collective, traced handles only: every rank reads its trace clock right after each of a
// few barriers; the median difference to rank 0's readings is this rank's clock offset,
// recorded in the trace file (good to about the spread of a barrier's exits).
void Allreduce::estimate_clock_offset() {
  constexpr int kSamples = 7;
  std::vector<int64_t> mine(kSamples);
  for (int k = 0; k < kSamples; ++k) {
    comm_.barrier(CallHeader{CallKind::clock_sample, 0, id_, 0}, timeout_);
    mine[static_cast<size_t>(k)] = trace_->trace().now_ns();
  }
  std::vector<std::byte> blob(sizeof(int64_t) * kSamples);
  std::memcpy(blob.data(), mine.data(), blob.size());
  const auto all = comm_.agree(CallHeader{CallKind::clock_sample, 0, id_, 0}, blob, timeout_);
  std::vector<int64_t> root(kSamples);
  if (all[0].size() != blob.size()) fail(Errc::protocol, "rank 0 sent a malformed clock sample");
  std::memcpy(root.data(), all[0].data(), blob.size());
  trace_->set_clock_offset(estimate_offset(mine, root));
}

int Allreduce::majority_initiator(uint64_t round) const {
  return activation::majority_initiator(spec_.opts.seed, id_, round, size_);
}

// --- The conditions to join ---------------------------------------------------------------

bool Allreduce::can_join(uint64_t round) {
  JoinView view;
  view.posted = app_next_;
  view.flush_posted = posted_ && posted_->flush;
  view.activated = activated_;
  view.max_lag = spec_.opts.max_lag;
  switch (decide_join(*policy_, view, round, [] { return Clock::now(); },
                      [this] { return comm_.in_agreement_locked(); })) {
    case JoinDecision::wait: return false;
    case JoinDecision::join: return true;
    case JoinDecision::initiate:
      // The application posted a round nobody has activated yet, and the policy starts it.
      initiate(round);
      return true;
  }
  return false;
}

void Allreduce::initiate(uint64_t round) {
  // A peer that hears this rank's first notice of the round, and so does every rank it
  // would pass the activation on to, learns of the start from that notice instead.
  for (const int peer : start_plan_.notify) {
    transport_.notify(peer, codec_.activation(id_, static_cast<uint32_t>(rank_), round));
    sent(peer, 0);
  }
  activated_ = std::max(activated_, round + 1);
  initiated_current_ = true;
  observe([&](RoundObserver& o) { o.activation_sent(round, rank_); });
}

std::optional<Allreduce::Clock::time_point> Allreduce::next_deadline_locked() const {
  if (!ready_) return std::nullopt;
  return policy_->deadline(joined_, activated_, Clock::now());
}

// Quorum mode, the application has just posted `round`: one fetch-add on the round's
// counter tells this rank how many ranks have posted it, itself included.
void Allreduce::count_arrival(std::unique_lock<std::mutex>& lock, uint64_t round) {
  const ArrivalCounter counter = *policy_->arrival_counter(round);
  const size_t offset = memory_->counters_offset() + counter.word * sizeof(uint64_t);
  lock.unlock();
  uint64_t old = 0;
  std::optional<Error> failed;
  try {
    old = transport_.fetch_add(*peers_[static_cast<size_t>(counter.host)], offset, 1);
    sent(counter.host, sizeof(uint64_t));
  } catch (const Error& e) {
    failed = e;
  }
  lock.lock();
  if (failed) comm_.fail_locked(*failed, {}, counter.host);
  const bool counts = !policy_->synchronous(round) && !(posted_ && posted_->flush);
  const uint64_t arrived = policy_->arrival_counted(round, old, counts, Clock::now());
  observe([&](RoundObserver& o) { o.arrival_counted(round, arrived); });
  if (counts) ++epoch_;
}

// --- Engine side ------------------------------------------------------------------------------

void Allreduce::on_notice(const Notice& notice) {
  if (!executor_) fail(Errc::protocol, "message for allreduce handle " + std::to_string(id_) + ", which did not prepare");
  switch (notice.kind) {
    case NoticeKind::data: {
      const uint64_t round = codec_.widen_round(notice.round, completed_);
      if (executor_->on_data(round, completed_, notice.tag, notice.chunk)) started_by_peer(round);
      return;
    }
    case NoticeKind::credit:
      executor_->on_credit(codec_.widen_round(notice.round, completed_), notice.tag, notice.chunk);
      return;
    case NoticeKind::activation: return on_activation(notice);
    default: fail(Errc::internal, "a control message was routed to allreduce handle " + std::to_string(id_));
  }
}

void Allreduce::on_activation(const Notice& notice) {
  const uint64_t round = codec_.widen_round(notice.round, joined_);
  const std::optional<activation::Relay> relay =
      activation::relay(policy_->spread(), rank_, trees_, notice.rank, round < activated_);
  if (!relay)
    fail(Errc::protocol, "activation for round " + std::to_string(round) + " of handle " + std::to_string(id_) +
                             " names rank " + std::to_string(notice.rank) + ", which cannot send it to rank " +
                             std::to_string(rank_) + " of a job of " + std::to_string(size_));
  if (round > joined_ + 1)
    fail(Errc::protocol, "activation for round " + std::to_string(round) + " of handle " + std::to_string(id_) +
                             " while this rank is at round " + std::to_string(joined_));
  for (const int peer : relay->to) {
    transport_.notify(peer, codec_.activation(id_, relay->detail, round));
    sent(peer, 0);
  }
  if (round < activated_) return;
  activated_ = round + 1;
  observe([&](RoundObserver& o) { o.activation_received(round, static_cast<int>(notice.rank)); });
}

// A data notice said that its sender started `round` (RoundExecutor::announces_start_to):
// the round is activated, as by an activation message, but nothing is passed on: the
// starter sent that notice only where every rank below this one hears it too.
void Allreduce::started_by_peer(uint64_t round) {
  const int starter = executor_->started_by(round);
  if (!notice_activates(starter, round, activated_)) return;
  activated_ = round + 1;
  observe([&](RoundObserver& o) { o.activation_received(round, starter); });
}

void Allreduce::advance_locked() {
  if (!ready_) return;
  for (;;) {
    if (joined_ > completed_) {
      if (!executor_->run(completed_, *this)) return;
      complete_round();
      continue;
    }
    if (!can_join(joined_)) return;
    join(joined_);
  }
}

void Allreduce::join(uint64_t round) {
  // A result the application has not collected yet moves out of the work buffer now.
  if (memory_->holds() == HandleMemory::Holds::result) memory_->move_result_out(completed_ - 1);
  const bool fresh = posted_ && posted_->round == round;
  const bool flush = fresh && posted_->flush;
  const bool carried = memory_->has_carry();
  // The contribution: the carry (in the work buffer already, or spilled), plus the sendbuf
  // when the application posted this round in time.
  memory_->contribute(fresh && !flush ? posted_->sendbuf : nullptr, fresh, initiated_current_, flush);
  memory_->set_late(round, !fresh);
  active_flush_ = flush;
  observe([&](RoundObserver& o) { o.joined(round, fresh, flush, carried); });
  executor_->begin_round(initiated_current_ && start_plan_.announce);
  ++joined_;
  ++epoch_;
}

void Allreduce::complete_round() {
  const uint64_t round = completed_;
  HandleMemory::Completed& slot = memory_->completed(round);
  // The ring holds max_lag + 2 rounds; bounded lag keeps the engine within max_lag + 1
  // rounds of the application, so the slot's previous round has been handed over.
  const bool still_needed = slot.round != UINT64_MAX &&
                            (slot.round >= app_next_ || (posted_ && posted_->round == slot.round));
  if (still_needed) fail(Errc::internal, "result ring overrun at round " + std::to_string(round));
  slot.round = round;
  fill_info(round, slot.info);
  observe([&](RoundObserver& o) { o.completed(slot.info, initiated_current_, active_flush_, waiters_ == 0); });
  executor_->end_round(round);
  initiated_current_ = false;
  ++completed_;
  ++epoch_;
  // The application waits for this round: the result goes straight into its buffer (and
  // a late sendbuf it posted meanwhile into the carry). Otherwise it stays in the work
  // buffer for the application to collect.
  memory_->round_completed();
  if (posted_ && posted_->round == round) {
    const void* late = pending_late_;
    pending_late_ = nullptr;
    memory_->hand_over_result(posted_->recvbuf, late);
    posted_->delivered = true;
  }
}

void Allreduce::fill_info(uint64_t round, RoundInfo& info) {
  info.round = round;
  RoundFlags::Read flags = memory_->read_flags();
  info.fresh = flags.fresh;
  info.fresh_mask = std::move(flags.fresh_mask);
  info.initiator = flags.initiator;
  // A rank the mode does not let start this round initiated it: a broken peer. The lowest
  // and the highest initiator are checked, so a mode with one initiator sees any other.
  for (const int initiator : {flags.initiator, flags.last_initiator}) {
    if (initiator < 0 || policy_->may_initiate(round, initiator)) continue;
    const int drawn = policy_->awaited_initiator(round);
    fail(Errc::protocol, "rank " + std::to_string(initiator) + " initiated round " + std::to_string(round) + " of " +
                             name_of(mode_names(), spec_.mode) + " handle " + std::to_string(id_) +
                             (drawn >= 0 ? ", but rank " + std::to_string(drawn) + " was drawn"
                                         : ", which its mode does not allow"));
  }
  info.caller_late = memory_->late(round);
  if (const auto& mixed = flags.mixed)
    fail(Errc::mismatch, "rank " + std::to_string(mixed->first) + " called flush of handle " + std::to_string(id_) +
                             " while rank " + std::to_string(mixed->second) + " called run (round " + std::to_string(round) + ")");
}

// --- The plan's chunks (ExecutorPort) -------------------------------------------------------

void Allreduce::write_chunk(const Step& step, const Chunk& chunk, uint64_t round, uint32_t tag) {
  if (spec_.kill_at_write != 0) {
    // PCOLL_TEST_KILL_AT_WRITE: a death between two writes of one round, which leaves the
    // survivors that got this rank's last writes a round ahead of those that did not.
    static std::atomic<uint64_t> writes{0};
    if (++writes == spec_.kill_at_write) ::raise(SIGKILL);
  }
  const Transfer& send = *step.send;
  const size_t target = send.lands_in_result()
                            ? memory_->acc_bytes(chunk.offset)
                            : memory_->work_bytes() + memory_->acc_bytes(send.landing_offset(round, chunk.index));
  const size_t bytes = memory_->acc_bytes(chunk.count);
  transport_.write_notify(memory_->region(), memory_->acc_bytes(chunk.offset), *peers_[static_cast<size_t>(step.peer)],
                          target, bytes, codec_.data(id_, tag, chunk.index, round));
  memory_->count_traffic(2 * bytes);  // read here, written there
  observe([&](RoundObserver& o) { o.wrote(bytes); });
  sent(step.peer, bytes);
}

void Allreduce::reduce_chunk(const Step& step, const Chunk& chunk, uint64_t round, bool final) {
  reduce_vector(spec_.dtype, spec_.op, memory_->flags(), spec_.count, memory_->work() + memory_->acc_bytes(chunk.offset),
                memory_->landing() + memory_->acc_bytes(step.recv->landing_offset(round, chunk.index)), chunk.offset,
                chunk.count);
  memory_->count_traffic(3 * memory_->acc_bytes(chunk.count));  // two read, one written
  if (final) final_elements(chunk.offset, chunk.count, round);
}

void Allreduce::send_credit(const Step& step, uint64_t round, uint32_t chunk) {
  transport_.notify(step.peer, codec_.credit(id_, step.tag, chunk, round));
  sent(step.peer, 0);
}

void Allreduce::settle_writes() { transport_.flush(); }

// --- The direct plan (ExecutorPort) ---------------------------------------------------------

bool Allreduce::peers_mapped() const {
  for (int r = 0; r < size_; ++r)
    if (r != rank_ && !transport_.maps_memory_of(r)) return false;
  return true;
}

void Allreduce::signal_peer(int peer, uint32_t tag, uint64_t round) {
  transport_.notify(peer, codec_.data(id_, tag, static_cast<uint32_t>(rank_), round));
  sent(peer, 0);
}

void Allreduce::sent(int peer, uint64_t bytes) {
  const std::vector<int>& node_of = comm_.node_of();
  if (node_of.size() != static_cast<size_t>(size_) ||
      node_of[static_cast<size_t>(peer)] == node_of[static_cast<size_t>(rank_)])
    return;
  observe([&](RoundObserver& o) { o.sent_to_network(bytes); });
}

void Allreduce::reduce_from_peer(int peer, size_t offset, size_t count, uint64_t /*round*/) {
  reduce_vector(spec_.dtype, spec_.op, memory_->flags(), spec_.count, memory_->work() + memory_->acc_bytes(offset),
                peer_work(peer) + memory_->acc_bytes(offset), offset, count);
  memory_->count_traffic(3 * memory_->acc_bytes(count));
  observe([&](RoundObserver& o) { o.read(memory_->acc_bytes(count)); });
}

void Allreduce::copy_from_peer(int peer, size_t offset, size_t count, uint64_t /*round*/) {
  copy_bytes(memory_->work() + memory_->acc_bytes(offset), peer_work(peer) + memory_->acc_bytes(offset),
             memory_->acc_bytes(count));
  memory_->count_traffic(2 * memory_->acc_bytes(count));
  observe([&](RoundObserver& o) { o.read(memory_->acc_bytes(count)); });
}

void Allreduce::final_elements(size_t offset, size_t count, uint64_t round) {
  if (posted_ && posted_->round == round && !posted_->delivered)
    memory_->deliver_early(posted_->recvbuf, pending_late_, offset, count);
}

void Allreduce::step_started(uint64_t round, size_t step) {
  observe([&](RoundObserver& o) { o.step_started(round, step); });
}

void Allreduce::step_ended(uint64_t round, size_t step) {
  observe([&](RoundObserver& o) { o.step_ended(round, step); });
}

void Allreduce::stats(AllreduceStats& out) const {
  std::lock_guard lock(comm_.engine_mutex());
  out = stats_.stats();
  out.memory_bytes = memory_->memory_bytes();
  out.registered_bytes = memory_->registered_bytes();
  out.memory_traffic_bytes = memory_->traffic_bytes();
}

}  // namespace pcoll
