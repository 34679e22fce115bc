// The simulated job (sim_engine.hpp): application, engine and NIC actors.
#include "sim_engine.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <optional>

#include <collectives/activation.hpp>
#include <collectives/collectives_settings.hpp>
#include <collectives/executor_choice.hpp>
#include <collectives/join_rule.hpp>
#include <collectives/mode_table.hpp>
#include <collectives/notification.hpp>
#include <collectives/round_trace.hpp>

#include <support/hash.hpp>

#include "perf_error.hpp"

namespace pcoll::sim {

namespace sg4 = simgrid::s4u;

namespace {

constexpr size_t kAccBytes = 4;  // float32 accumulates as float32

double now_s() { return sg4::Engine::get_clock(); }

PolicyClock::time_point policy_now() {
  return PolicyClock::time_point(
      std::chrono::duration_cast<PolicyClock::duration>(std::chrono::duration<double>(now_s())));
}

int64_t simulated_ns() { return static_cast<int64_t>(now_s() * 1e9); }

double seconds_of(PolicyClock::time_point t) { return std::chrono::duration<double>(t.time_since_epoch()).count(); }

}  // namespace

// A notification or request between simulated ranks; the payload of a SimGrid communication.
struct Message {
  enum class Kind : uint8_t { data, credit, activation, atomic_request, atomic_reply, post };
  Kind kind = Kind::data;
  size_t mode = 0;        // the mode's index: a late message of an earlier mode is dropped
  int to = 0;
  int from = 0;
  uint64_t round = 0;
  uint32_t tag = 0;
  uint32_t chunk = 0;
  uint64_t value = 0;     // activation: root; atomic request: word; atomic reply: old value
  bool flush = false;     // post, atomic: the round is a flush
};

// One rank's progress engine: pcoll's round logic over simulated time.
class RankEngine final : public ExecutorPort {
 public:
  RankEngine(SimJob& job, int rank)
      : job_(job), rank_(rank), size_(job.spec().ranks), costs_(job.spec().platform.costs),
        engine_cv_(sg4::ConditionVariable::create()), engine_mutex_(sg4::Mutex::create()),
        app_cv_(sg4::ConditionVariable::create()), app_mutex_(sg4::Mutex::create()) {}

  void begin_mode(size_t index, const ExecutorInputs& base, uint32_t handle) {
    const perf::ModeSpec& spec = job_.spec().options.modes[index];
    mode_ = index;
    const pcoll_allreduce_opts_t opts = mode_options(spec, job_.spec().options.handle_opts, size_);
    policy_ = find_mode(spec.pcoll_mode())->make_policy(PolicyContext{rank_, size_, handle, opts});
    ExecutorInputs inputs = base;
    inputs.rank = rank_;
    inputs.handle = handle;
    executor_ = choose_executor(inputs).executor;
    trees_ = &job_.trees();
    start_plan_ = activation::start_plan(policy_->spread(), rank_, *trees_,
                                         [this](int peer) { return executor_->announces_start_to(peer); });
    max_lag_ = opts.max_lag;
    // A handle whose buffers (work buffer, what it reduces from, the caller's result) fit in
    // cache reduces and copies at the cached rates. A result block handed to the application
    // leaves this core's cache; above the cache its stores go to memory.
    const bool cached = static_cast<double>(job_.spec().options.count * kAccBytes * 3) <= costs_.cache_bytes;
    reduce_rate_ = cached ? costs_.reduce_cached_bytes_per_s : costs_.reduce_bytes_per_s;
    copy_rate_ = cached ? costs_.copy_cached_bytes_per_s : costs_.copy_bytes_per_s;
    out_rate_ = cached                                  ? costs_.copy_cached_bytes_per_s
                : costs_.copy_out_bytes_per_s > 0 ? costs_.copy_out_bytes_per_s
                                                  : costs_.copy_bytes_per_s;
    carry_late_ = opts.late == PCOLL_LATE_CARRY;
    rounds_total_ = job_.spec().options.steps + 1;  // the steps, then the flush
    posted_ = joined_ = completed_ = activated_ = 0;
    flush_posted_ = carry_ = delivered_early_ = false;
    awaited_ = UINT64_MAX;
    delivered_ = 0;
    late_run_ = 0;
    max_late_run_ = 0;
    blocked_s_ = reduce_s_ = busy_s_ = 0;
    messages_ = bytes_ = 0;
    pending_writes_.clear();
    initiated_current_ = false;
    trace_.reset();
    if (!job_.spec().trace_dir.empty()) {
      trace_ = std::make_unique<TraceObserver>(job_.spec().trace_dir, 0,
                                               RoundTrace::Header{rank_, size_, handle, spec.name(), 0});
      trace_->trace().set_clock(simulated_ns);
    }
  }

  // Writes this rank's round trace of the mode that ended (--trace).
  void write_trace() {
    if (trace_) trace_->write();
    trace_.reset();
  }

  const char* plan() const { return executor_->algorithm(); }
  uint64_t max_late_run() const { return max_late_run_; }
  double blocked_s() const { return blocked_s_; }
  double reduce_s() const { return reduce_s_; }
  double busy_s() const { return busy_s_; }
  uint64_t messages() const { return messages_; }
  uint64_t bytes() const { return bytes_; }

  // From the NIC actor or this rank's application: queued for the engine actor.
  void deliver(std::unique_ptr<Message> message) {
    inbox_.push_back(std::move(message));
    engine_cv_->notify_one();
  }

  // The application actor's side: post `round`, then wait until it is delivered.
  void run_round(uint64_t round, bool flush) {
    auto post = notice(Message::Kind::post, rank_, round, 0, 0);
    post->flush = flush;
    const double posted_at = now_s();
    deliver(std::move(post));
    std::unique_lock lock(*app_mutex_);
    while (delivered_ <= round) app_cv_->wait(lock);
    const double waited = now_s() - posted_at;
    blocked_s_ += waited;
    auto& record = job_.rounds_[round];
    record.slowest_call = std::max(record.slowest_call, waited);
  }

  // The engine actor's body: take what arrived, move the rounds, wait for more.
  [[noreturn]] void serve() {
    std::unique_lock lock(*engine_mutex_);
    // More ranks than cores on this host: a waiting engine first waits for a core.
    const double per_core = static_cast<double>(job_.spec().platform.ranks_per_node) /
                            static_cast<double>(sg4::this_actor::get_host()->get_core_count());
    const double wake_s = costs_.wake_s * std::max(0.0, per_core - 1.0);
    shares_cores_ = per_core > 1.0;
    for (;;) {
      while (!inbox_.empty()) {
        std::unique_ptr<Message> message = std::move(inbox_.front());
        inbox_.pop_front();
        handle(*message);
      }
      if (executor_) advance();
      catch_up();
      if (!inbox_.empty()) continue;
      const std::optional<PolicyClock::time_point> deadline =
          policy_ && joined_ < rounds_total_ ? policy_->deadline(joined_, activated_, policy_now()) : std::nullopt;
      if (deadline) engine_cv_->wait_until(lock, seconds_of(*deadline));
      else engine_cv_->wait(lock);
      spend(wake_s);
    }
  }

  // ExecutorPort: what the plan does, as communications and simulated CPU time.
  void write_chunk(const Step& step, const Chunk& chunk, uint64_t round, uint32_t tag) override {
    spend(costs_.post_s);
    const uint64_t bytes = chunk.count * kAccBytes;
    send(notice(Message::Kind::data, step.peer, round, tag, chunk.index), bytes, bytes > costs_.inject_bytes);
  }
  void reduce_chunk(const Step&, const Chunk& chunk, uint64_t round, bool final) override {
    reduce(chunk.count);
    if (final) final_elements(chunk.offset, chunk.count, round);
  }
  void send_credit(const Step& step, uint64_t round, uint32_t chunk) override {
    spend(costs_.post_s);
    send(notice(Message::Kind::credit, step.peer, round, step.tag, chunk), 0, false);
  }
  void settle_writes() override {
    catch_up();
    if (!pending_writes_.empty()) sg4::Comm::wait_all(pending_writes_);
    pending_writes_.clear();
  }
  void signal_peer(int peer, uint32_t tag, uint64_t round) override {
    spend(costs_.post_s);
    send(notice(Message::Kind::data, peer, round, tag, static_cast<uint32_t>(rank_)), 0, false);
  }
  // A peer's lines come from its core's cache or from memory, never this core's cache: the
  // memory rates, whatever the size.
  void reduce_from_peer(int, size_t, size_t count, uint64_t) override { work(count, costs_.reduce_bytes_per_s); }
  void copy_from_peer(int, size_t, size_t count, uint64_t) override { work(count, costs_.copy_bytes_per_s); }
  void step_started(uint64_t round, size_t step) override {
    if (trace_) trace_->step_started(round, step);
  }
  void step_ended(uint64_t round, size_t step) override {
    if (trace_) trace_->step_ended(round, step);
  }
  void final_elements(size_t, size_t count, uint64_t round) override {
    // The application waits for this round: the elements, just reduced or copied here, go
    // to it out of this core's cache (into memory, where the vector exceeds the cache).
    if (awaited_ == round) {
      work(count, out_rate_);
      delivered_early_ = true;
    }
  }

 private:
  std::unique_ptr<Message> notice(Message::Kind kind, int to, uint64_t round, uint32_t tag, uint32_t chunk) const {
    auto m = std::make_unique<Message>();
    m->kind = kind;
    m->mode = mode_;
    m->to = to;
    m->from = rank_;
    m->round = round;
    m->tag = tag;
    m->chunk = chunk;
    return m;
  }

  // Sends `message` with `bytes` of payload to its rank's node, once the CPU time spent so
  // far has passed. `keep`: a write whose local completion settle_writes waits for.
  void send(std::unique_ptr<Message> message, uint64_t bytes, bool keep) {
    catch_up();
    ++messages_;
    bytes_ += bytes;
    sg4::Mailbox* mailbox = job_.nic_mailbox(job_.node_of(message->to), bytes > 0 && message->kind == Message::Kind::data);
    sg4::CommPtr comm = mailbox->put_init(message.release(), bytes);
    if (keep) {
      comm->start();
      pending_writes_.push_back(comm);
    } else {
      comm->detach([](void* payload) { delete static_cast<Message*>(payload); });
    }
  }

  void spend(double seconds) { pending_s_ += seconds; }
  // Reducing or copying `count` elements at `bytes_per_s`: time the breakdown reports apart.
  void work(size_t count, double bytes_per_s) {
    const double seconds = static_cast<double>(count * kAccBytes) / bytes_per_s;
    reduce_s_ += seconds;
    spend(seconds);
  }
  void reduce(size_t count) { work(count, reduce_rate_); }
  void copy(size_t count) { work(count, copy_rate_); }
  // The CPU time spent so far passes (the engine is busy meanwhile; arrivals queue).
  void catch_up() {
    if (pending_s_ <= 0) return;
    const double s = pending_s_;
    pending_s_ = 0;
    busy_s_ += s;
    // On a host with fewer cores than ranks the engines share its cores (SimGrid's CPU
    // model); with a core each, a sleep is the same time and far cheaper to simulate
    // (SimGrid 3.32 ends an execution in time that grows with the executions before it).
    if (shares_cores_) sg4::this_actor::execute(s * sg4::this_actor::get_host()->get_speed());
    else sg4::this_actor::sleep_for(s);
  }

  void handle(const Message& m) {
    if (m.mode != mode_ || !executor_) return;  // an earlier mode's straggling notice
    if (m.kind != Message::Kind::post) spend(costs_.notice_s);
    switch (m.kind) {
      case Message::Kind::data:
        // As the engine: a notice that says its sender started the round activates it.
        if (executor_->on_data(m.round, completed_, m.tag, m.chunk)) {
          const int starter = executor_->started_by(m.round);
          if (notice_activates(starter, m.round, activated_)) {
            activated_ = m.round + 1;
            if (trace_) trace_->activation_received(m.round, starter);
          }
        }
        return;
      case Message::Kind::credit: executor_->on_credit(m.round, m.tag, m.chunk); return;
      case Message::Kind::activation: {
        const bool known = m.round < activated_;
        const std::optional<activation::Relay> relay =
            activation::relay(policy_->spread(), rank_, *trees_, static_cast<uint32_t>(m.value), known);
        for (const int peer : relay.value().to) send_activation(peer, relay->detail, m.round);
        if (known) return;
        activated_ = m.round + 1;
        if (trace_) trace_->activation_received(m.round, static_cast<int>(m.value));
        return;
      }
      case Message::Kind::atomic_reply: {
        const bool counts = !policy_->synchronous(m.round) && !m.flush;
        const uint64_t arrived = policy_->arrival_counted(m.round, m.value, counts, policy_now());
        if (trace_) trace_->arrival_counted(m.round, arrived);
        return;
      }
      case Message::Kind::post: return on_post(m.round, m.flush);
      case Message::Kind::atomic_request: return;
    }
  }

  void on_post(uint64_t round, bool flush) {
    spend(costs_.call_s);
    posted_ = round + 1;
    flush_posted_ = flush;
    awaited_ = round;
    late_post_ = round < joined_;
    delivered_early_ = false;
    if (trace_) {
      if (flush) trace_->flush_posted(round);
      else trace_->posted(round, late_post_);
    }
    // A round the engine joined without this rank's data: its sendbuf goes into the carry.
    if (!flush && late_post_ && carry_late_) carry_ = true;
    if (round < completed_) hand_over(round);
    if (const std::optional<ArrivalCounter> counter = policy_->arrival_counter(round)) {
      auto request = notice(Message::Kind::atomic_request, counter->host, round, 0, 0);
      request->value = counter->word;
      request->flush = flush;
      spend(costs_.post_s);
      send(std::move(request), 8, false);
    }
  }

  void send_activation(int peer, uint32_t detail, uint64_t round) {
    spend(costs_.post_s);
    auto m = notice(Message::Kind::activation, peer, round, 0, 0);
    m->value = detail;
    send(std::move(m), 0, false);
  }

  void advance() {
    for (;;) {
      if (joined_ > completed_) {
        if (!executor_->run(completed_, *this)) return;
        complete_round();
        continue;
      }
      if (joined_ >= rounds_total_) return;
      JoinView view;
      view.posted = posted_;
      view.flush_posted = flush_posted_;
      view.activated = activated_;
      view.max_lag = max_lag_;
      switch (decide_join(*policy_, view, joined_, policy_now, [] { return false; })) {
        case JoinDecision::wait: return;
        case JoinDecision::initiate: initiate(joined_); [[fallthrough]];
        case JoinDecision::join: join(joined_); break;
      }
    }
  }

  void initiate(uint64_t round) {
    // As the engine: no activation to a part of the tree that hears the first notice.
    for (const int peer : start_plan_.notify) send_activation(peer, static_cast<uint32_t>(rank_), round);
    activated_ = std::max(activated_, round + 1);
    initiated_current_ = true;
    int& initiator = job_.rounds_[round].initiator;
    initiator = initiator < 0 ? rank_ : std::min(initiator, rank_);
    if (trace_) trace_->activation_sent(round, rank_);
  }

  void join(uint64_t round) {
    const bool fresh = posted_ == round + 1;
    const bool carried = carry_;
    // The contribution: the sendbuf (or the carry) copied into the work buffer, and a carry
    // reduced into a fresh sendbuf.
    copy(job_.spec().options.count);
    if (fresh && carry_) reduce(job_.spec().options.count);
    carry_ = false;
    auto& record = job_.rounds_[round];
    const double t = now_s();
    if (record.first_join < 0) record.first_join = t;
    record.last_join = std::max(record.last_join, t);
    if (round + 1 < rounds_total_) {
      if (fresh) ++record.fresh;
      late_run_ = fresh ? 0 : late_run_ + 1;
      max_late_run_ = std::max(max_late_run_, late_run_);
    }
    if (trace_) trace_->joined(round, fresh, fresh && flush_posted_, carried);
    executor_->begin_round(initiated_current_ && start_plan_.announce);
    ++joined_;
  }

  void complete_round() {
    const uint64_t round = completed_;
    executor_->end_round(round);
    ++completed_;
    auto& record = job_.rounds_[round];
    record.last_complete = std::max(record.last_complete, now_s());
    if (trace_) {
      RoundInfo info;
      info.round = round;
      info.initiator = record.initiator;
      info.fresh = static_cast<int>(record.fresh);
      trace_->completed(info, initiated_current_, round + 1 == rounds_total_, awaited_ != round);
    }
    initiated_current_ = false;
    if (awaited_ == round) hand_over(round);
  }

  // The application's round `round` is done: its result goes to it.
  void hand_over(uint64_t round) {
    if (!delivered_early_) copy(job_.spec().options.count);
    catch_up();
    if (trace_) trace_->delivered(round, late_post_);
    awaited_ = UINT64_MAX;
    delivered_ = round + 1;
    app_cv_->notify_one();
  }

  SimJob& job_;
  int rank_;
  int size_;
  EngineCosts costs_;
  // Bytes per second for this handle's sizes: its own buffers, the hand-over to the caller.
  double reduce_rate_ = 1, copy_rate_ = 1, out_rate_ = 1;
  sg4::ConditionVariablePtr engine_cv_;
  sg4::MutexPtr engine_mutex_;
  sg4::ConditionVariablePtr app_cv_;
  sg4::MutexPtr app_mutex_;
  std::deque<std::unique_ptr<Message>> inbox_;

  size_t mode_ = 0;
  std::unique_ptr<StartPolicy> policy_;
  std::unique_ptr<RoundExecutor> executor_;
  const activation::Trees* trees_ = nullptr;  // the job's (SimJob::trees)
  uint32_t max_lag_ = 1;
  bool carry_late_ = true;
  uint64_t rounds_total_ = 0;
  uint64_t posted_ = 0, joined_ = 0, completed_ = 0, activated_ = 0;
  bool flush_posted_ = false;
  bool late_post_ = false;         // the round posted last was joined before its post
  bool initiated_current_ = false; // this rank activated the active round
  activation::StartPlan start_plan_;  // what initiate() does (activation::start_plan)
  std::unique_ptr<TraceObserver> trace_;
  bool carry_ = false;             // a late sendbuf waits in the carry
  uint64_t awaited_ = UINT64_MAX;  // the round the application waits for
  bool delivered_early_ = false;   // its result went out during the final reductions
  uint64_t delivered_ = 0;         // rounds delivered to the application
  uint64_t late_run_ = 0, max_late_run_ = 0;
  double pending_s_ = 0;           // CPU time spent and not yet passed
  bool shares_cores_ = false;      // more ranks than cores on this rank's host
  double blocked_s_ = 0, reduce_s_ = 0, busy_s_ = 0;
  uint64_t messages_ = 0, bytes_ = 0;
  std::vector<sg4::CommPtr> pending_writes_;
};

pcoll_allreduce_opts_t mode_options(const perf::ModeSpec& mode, pcoll_allreduce_opts_t opts, int ranks) {
  mode.apply(opts);
  if (const std::string problem = find_mode(mode.pcoll_mode())->check_options(opts, ranks); !problem.empty())
    perf::invalid_argument("--modes " + mode.name() + ": " + problem);
  return opts;
}

SimJob::SimJob(JobSpec spec) : spec_(std::move(spec)) {}

SimJob::~SimJob() = default;

uint64_t SimJob::fetch_add(int host, size_t word) {
  std::vector<uint64_t>& words = counters_[static_cast<size_t>(host)];
  if (word >= words.size()) words.resize(word + 1, 0);
  return words[word]++;
}

void SimJob::start() {
  std::vector<sg4::Host*> all = sg4::Engine::get_instance()->get_all_hosts();
  // Hosts in name order, numbers by value (node-2 before node-10).
  std::sort(all.begin(), all.end(), [](const sg4::Host* a, const sg4::Host* b) {
    const std::string& x = a->get_name();
    const std::string& y = b->get_name();
    return x.size() != y.size() ? x.size() < y.size() : x < y;
  });
  const int nodes = spec_.platform.nodes;
  if (static_cast<int>(all.size()) < nodes)
    perf::invalid_argument("platform " + spec_.platform.name + " has " + std::to_string(all.size()) + " hosts; " +
                           std::to_string(spec_.ranks) + " ranks at " + std::to_string(spec_.platform.ranks_per_node) +
                           " per node need " + std::to_string(nodes));
  hosts_.assign(all.begin(), all.begin() + nodes);
  for (int n = 0; n < nodes; ++n) {
    nic_mailboxes_.push_back(sg4::Mailbox::by_name("nic-" + std::to_string(n) + "-notices"));
    nic_mailboxes_.push_back(sg4::Mailbox::by_name("nic-" + std::to_string(n) + "-writes"));
  }
  counters_.assign(static_cast<size_t>(spec_.ranks), {});
  for (int r = 0; r < spec_.ranks; ++r) engines_.push_back(std::make_unique<RankEngine>(*this, r));
  barrier_ = sg4::Barrier::create(static_cast<unsigned>(spec_.ranks));
  // What an actor throws (a protocol error the engine's own checks found) ends the run with
  // its message: SimGrid cannot unwind the other actors.
  const auto guarded = [](std::string name, auto body) {
    return [name = std::move(name), body] {
      try {
        body();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "pcoll_sim: %s at %.9f s: %s\n", name.c_str(), now_s(), e.what());
        std::_Exit(1);
      }
    };
  };
  for (int n = 0; n < nodes; ++n) {
    const std::string name = "nic-" + std::to_string(n);
    sg4::Actor::create(name, hosts_[static_cast<size_t>(n)], guarded(name, [this, n] { nic(n); }))->daemonize();
  }
  for (int r = 0; r < spec_.ranks; ++r) {
    sg4::Host* host = hosts_[static_cast<size_t>(node_of(r))];
    const std::string engine_name = "engine of rank " + std::to_string(r);
    const std::string app_name = "application of rank " + std::to_string(r);
    sg4::Actor::create(engine_name, host, guarded(engine_name, [this, r] { engine(r).serve(); }))->daemonize();
    sg4::Actor::create(app_name, host, guarded(app_name, [this, r] { application(r); }));
  }
}

void SimJob::nic(int node) {
  for (const bool payload : {false, true}) nic_mailbox(node, payload)->set_receiver(sg4::Actor::self());
  // A NIC hands over each write when it has landed: a notice is never held behind another
  // sender's large write. A SimGrid receive matches the oldest transfer not yet matched,
  // so notices (no payload: credits, activations, phase notices, atomics) come through a
  // mailbox of their own, and each mailbox has a few receives open per rank of the node.
  constexpr size_t kOpenPerRank = 4;
  const size_t open = static_cast<size_t>(spec_.platform.ranks_per_node) * kOpenPerRank;
  sg4::Mailbox* const mailboxes[2] = {nic_mailbox(node, false), nic_mailbox(node, true)};
  std::vector<Message*> slots(2 * open, nullptr);
  std::vector<sg4::CommPtr> receives;
  for (size_t i = 0; i < 2 * open; ++i) receives.push_back(mailboxes[i / open]->get_async<Message>(&slots[i]));
  for (;;) {
    const auto i = static_cast<size_t>(sg4::Comm::wait_any(receives));
    std::unique_ptr<Message> message(slots[i]);
    receives[i] = mailboxes[i / open]->get_async<Message>(&slots[i]);
    if (message->kind == Message::Kind::atomic_request) {
      // The NIC of the counter's node applies the fetch-add; its engine does nothing.
      auto reply = std::make_unique<Message>(*message);
      reply->kind = Message::Kind::atomic_reply;
      reply->to = message->from;
      reply->from = message->to;
      reply->value = fetch_add(message->to, static_cast<size_t>(message->value));
      sg4::CommPtr comm = nic_mailbox(node_of(reply->to), false)->put_init(reply.release(), 8);
      comm->detach([](void* payload) { delete static_cast<Message*>(payload); });
      continue;
    }
    const int to = message->to;
    engine(to).deliver(std::move(message));
  }
}

void SimJob::begin_mode(size_t index) {
  mode_index_ = index;
  rounds_.assign(spec_.options.steps + 1, RoundRecord{});
  // Every mode is a new handle, with counters of its own.
  for (auto& words : counters_) std::fill(words.begin(), words.end(), 0);
  ExecutorInputs base;
  base.ranks = spec_.ranks;
  base.count = spec_.options.count;
  base.acc_elem_bytes = kAccBytes;
  base.chunk_bytes = CollectivesSettings::get_unsigned("PCOLL_CHUNK_BYTES");
  base.pool_bytes = CollectivesSettings::get_unsigned("PCOLL_POOL_BYTES");
  base.plan_rules = plan_rules_from_settings();
  base.flat_plan = CollectivesSettings::get_choice("PCOLL_PLAN") == "flat";
  base.peers_mapped = spec_.platform.nodes == 1 && spec_.platform.maps_node_peers;
  for (int r = 0; r < spec_.ranks; ++r) base.node_of.push_back(node_of(r));
  trees_ = std::make_unique<activation::Trees>(activation::activation_trees(base.node_of, spec_.ranks, base.flat_plan));
  const NoticeCodec codec(CollectivesSettings::get_choice("PCOLL_NOTIFY_BITS") == "32" ? 32 : 64);
  base.max_chunks = codec.max_chunks();
  base.max_tags = codec.max_tags();
  base.codec = codec.describe();
  base.inject_bytes = spec_.platform.costs.inject_bytes;
  // pcoll_imbalance under pcollrun creates three handles per mode (the mode's, then the
  // two measurement reductions), each in slot 0 with the next generation: the mode's
  // handle id, which the majority draw hashes, is the same here.
  const uint32_t handle = codec.handle_field(0, static_cast<uint32_t>(3 * index));
  for (auto& e : engines_) e->begin_mode(index, base, handle);
  mode_start_ = now_s();
}

void SimJob::end_mode(size_t index) {
  for (auto& e : engines_) e->write_trace();
  ModeOutcome out;
  out.mode = spec_.options.modes[index];
  out.wall_s = now_s() - mode_start_;
  out.plan = engines_[0]->plan();
  const double steps = static_cast<double>(spec_.options.steps);
  const double P = static_cast<double>(spec_.ranks);
  uint64_t fresh = 0;
  std::vector<double> calls;
  double activation = 0, exchange = 0;
  for (uint64_t t = 0; t < spec_.options.steps; ++t) {
    const RoundRecord& r = rounds_[t];
    fresh += r.fresh;
    calls.push_back(r.slowest_call);
    activation += r.last_join - r.first_join;
    exchange += std::max(0.0, r.last_complete - r.last_join);
  }
  std::sort(calls.begin(), calls.end());
  out.call_us_p50 = calls.empty() ? 0 : calls[(calls.size() - 1) / 2] * 1e6;
  out.fresh_fraction = static_cast<double>(fresh) / (steps * P);
  out.activation_us = activation / steps * 1e6;
  out.exchange_us = exchange / steps * 1e6;
  double blocked = 0, reduce = 0, busy = 0, messages = 0, bytes = 0;
  for (const auto& e : engines_) {
    out.max_late_run = std::max(out.max_late_run, e->max_late_run());
    blocked += e->blocked_s();
    reduce += e->reduce_s();
    busy += e->busy_s();
    messages += static_cast<double>(e->messages());
    bytes += static_cast<double>(e->bytes());
  }
  const double per = P * (steps + 1);
  out.blocked_us = blocked / per * 1e6;
  out.reduce_us = reduce / per * 1e6;
  out.engine_cpu_s = busy;
  out.messages_per_round = messages / per;
  out.bytes_per_round = bytes / per;
  outcomes_.push_back(out);
}

// A sleep's overshoot on the platform (EngineCosts::sleep_overshoot_s), interpolated in
// its percentiles at a point drawn from (seed, rank, step).
double SimJob::sleep_overshoot(int rank, uint64_t step) const {
  const std::vector<double>& q = spec_.platform.costs.sleep_overshoot_s;
  if (q.empty()) return 0;
  const uint64_t h = hash3(spec_.options.model.seed ^ 0x736c656570ULL, static_cast<uint64_t>(rank), step);
  const double u = static_cast<double>(h >> 11) * 0x1.0p-53 * static_cast<double>(q.size() - 1);
  const auto i = static_cast<size_t>(u);
  if (i + 1 >= q.size()) return q.back();
  return q[i] + (q[i + 1] - q[i]) * (u - static_cast<double>(i));
}

void SimJob::application(int rank) {
  const auto& schedule = spec_.schedule;
  const uint64_t steps = spec_.options.steps;
  for (size_t m = 0; m < spec_.options.modes.size(); ++m) {
    // Rank 0 sets the mode up while the others wait (SimGrid 3.32's Barrier::wait returns 0
    // to every actor, so the barrier cannot pick one).
    barrier_->wait();
    if (rank == 0) begin_mode(m);  // one rank sets the mode up while the others wait
    barrier_->wait();
    RankEngine& e = engine(rank);
    for (uint64_t t = 0; t < steps; ++t) {
      const double ms = schedule[t][static_cast<size_t>(rank)];
      if (ms > 0) sg4::this_actor::sleep_for(ms / 1e3 + sleep_overshoot(rank, t));
      e.run_round(t, false);
    }
    e.run_round(steps, true);
    barrier_->wait();
    if (rank == 0) end_mode(m);
  }
}

}  // namespace pcoll::sim
