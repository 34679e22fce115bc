// Communicator: bootstrap -> transport -> progress engine, notification routing, liveness
// and failure propagation.
#include <collectives/comm.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <thread>

#include <collectives/allreduce.hpp>
#include <collectives/collectives_settings.hpp>
#include <support/error.hpp>
#include <support/interrupt.hpp>
#include <support/log.hpp>
#include <support/support_settings.hpp>
#include <support/topology.hpp>
#include <transport/rendezvous.hpp>

namespace pcoll {
namespace {

// PCOLL_NOTIFY_BITS against what the provider carries: auto takes 64 bits where they
// arrive intact, else the 32-bit layout (verbs and EFA carry 4 bytes of remote CQ data).
unsigned notification_bits(const std::string& wanted, const transport::Capabilities& caps) {
  if (caps.notify_bits < 32)
    fail(Errc::unsupported, "provider " + caps.name + " delivers " + std::to_string(caps.notify_bits) +
                                "-bit notifications; pcoll needs at least 32");
  if (wanted == "auto") return caps.notify_bits >= 64 ? 64 : 32;
  const unsigned bits = wanted == "32" ? 32 : 64;
  if (bits > caps.notify_bits)
    fail(Errc::unsupported, "PCOLL_NOTIFY_BITS=" + wanted + " but provider " + caps.name + " delivers " +
                                std::to_string(caps.notify_bits) + "-bit notifications; set PCOLL_NOTIFY_BITS=auto or 32");
  return bits;
}

// How long a failed rank spends on its failure news in all (sending it, lingering for the
// acknowledgements): half the liveness timeout (the transport's), never over 2 s.
std::chrono::steady_clock::duration news_bound(std::chrono::milliseconds timeout) {
  return std::min<std::chrono::steady_clock::duration>(std::max(std::chrono::milliseconds(1), timeout / 2),
                                                       std::chrono::seconds(2));
}

}  // namespace

// What setup learns on the way, from one step to the next.
struct Comm::Setup {
  std::string notify_bits;                  // PCOLL_NOTIFY_BITS as given
  std::string yield;                        // PCOLL_YIELD as given
  topology::ProgressPlacement placement;    // where the progress thread goes
  transport::Options options;
};

// What the survivors' agreement sends goes through the survivors' channel.
class Comm::SurvivorSink final : public SurvivorAgreement::Sink {
 public:
  explicit SurvivorSink(Comm& comm) : comm_(comm) {}
  void send(int peer, const SurvivorMessage& message) override {
    const std::vector<std::byte> bytes = encode(message);
    comm_.survivor_send(peer, kSurvivorAgreementMessage, bytes);
  }
  // The channel's message types: its first byte.
  static constexpr uint8_t kSurvivorAgreementMessage = 0;
  static constexpr uint8_t kSurvivorBlob = 1;

 private:
  Comm& comm_;
};

Comm::Comm(std::unique_ptr<bootstrap::Bootstrap> boot, const TransportFactory& make_transport)
    : boot_(std::move(boot)), make_transport_(make_transport) {
  static std::atomic<uint64_t> made{0};
  serial_ = ++made;
  // A setup that fails leaves the job broken: the bootstrap must not then wait in a final
  // barrier of its own, which would join the other ranks' setup collectives. Nor may the
  // transport, torn down with it, progress towards a peer that died during setup (UCX
  // faults there).
  struct AbandonUnlessSetUp {
    bootstrap::Bootstrap& boot;
    std::unique_ptr<transport::Transport>& transport;
    bool set_up = false;
    ~AbandonUnlessSetUp() {
      if (set_up) return;
      boot.abandon();
      if (transport) transport->abandon();
    }
  } guard{*boot_, transport_};
  Setup setup;
  read_settings(setup);
  open_transport(setup, make_transport);
  agree_notification_width(setup);
  connect_ranks(setup);
  start_engine(setup);
  guard.set_up = true;
}

// Every setting the communicator needs, read (and a bad value refused) before anything is
// connected.
void Comm::read_settings(Setup& setup) {
  log::threshold();  // reject a bad PCOLL_LOG now rather than at the first message
  rank_ = boot_->rank();
  size_ = boot_->size();
  bootstrap_name_ = boot_->name();
  log::set_rank(rank_);
  detector_ = std::make_unique<FailureDetector>(rank_, size_, static_cast<PeerNotices&>(*this), Clock::now());
  setup.notify_bits = CollectivesSettings::get_choice("PCOLL_NOTIFY_BITS");
  setup.yield = CollectivesSettings::get_choice("PCOLL_YIELD");
  spin_budget_ = std::chrono::microseconds(CollectivesSettings::get_unsigned("PCOLL_SPIN_US"));
  // PCOLL_PROGRESS_CPU: a CPU number, "none", or "auto" (hwloc: lib/support/topology.cpp).
  setup.placement = topology::progress_cpu();
  timeout_ = std::chrono::milliseconds(SupportSettings::get_unsigned("PCOLL_TIMEOUT_MS"));
  // A blocking transport operation (a notify into a full queue, an atomic) gives up after
  // half the liveness timeout: a rank stuck sending to a dead peer then names that peer
  // before its own peers, pinging it meanwhile in vain (its engine is inside the call),
  // give up on it and blame the wrong rank.
  setup.options.timeout = std::max(std::chrono::milliseconds(1), timeout_ / 2);
}

// The provider the registry picks for this job's layout, and its notification layout.
void Comm::open_transport(Setup& setup, const TransportFactory& make_transport) {
  // Every rank takes part whatever its PCOLL_PROVIDER (a collective cannot be skipped by
  // some): the default provider follows the job's layout.
  setup.options.layout =
      transport::gather_layout(rank_, [this](std::span<const std::byte> mine) { return boot_->allgather(mine); });
  node_of_ = setup.options.layout.node_of;
  setup.options.survivors = boot_->of_survivors();
  transport_ = make_transport(setup.options);
  provider_ = transport_->capabilities().name;
  codec_ = NoticeCodec(notification_bits(setup.notify_bits, transport_->capabilities()));
  if (static_cast<uint32_t>(size_) > codec_.max_ranks())
    fail(Errc::unsupported, "a job of " + std::to_string(size_) + " ranks is more than " + codec_.describe() +
                                " can address (provider " + provider_ + ", PCOLL_NOTIFY_BITS=" + setup.notify_bits + ")");
}

// Every rank must speak the same layout: a rank with another PCOLL_NOTIFY_BITS, or a
// provider of another width, would be misread by everyone else.
void Comm::agree_notification_width(const Setup&) {
  const auto bits_byte = static_cast<std::byte>(codec_.bits());
  const auto everyones = boot_->allgather(std::span<const std::byte>(&bits_byte, 1));
  for (size_t r = 0; r < everyones.size(); ++r) {
    if (everyones[r].size() != 1)
      fail(Errc::protocol, "rank " + std::to_string(r) + " sent a malformed notification width at setup");
    if (everyones[r][0] != bits_byte)
      fail(Errc::mismatch, "rank " + std::to_string(r) + " uses " + std::to_string(static_cast<int>(everyones[r][0])) +
                               "-bit notifications and rank " + std::to_string(rank_) + " " +
                               std::to_string(codec_.bits()) +
                               "-bit: set the same PCOLL_NOTIFY_BITS (and provider) on every rank");
  }
}

// Connects every rank. Every rank's host and process come back: the ranks sharing our host
// decide whether waiting ranks must yield their CPU, the ranks sharing our process (ranks
// as threads) whether the progress thread may be pinned.
void Comm::connect_ranks(Setup& setup) {
  const std::vector<transport::PeerPlace> places = transport::connect_all(
      *transport_, rank_, [this](std::span<const std::byte> mine) { return boot_->allgather(mine); });
  int local_ranks = 0;    // ranks on this host, this one included
  int process_ranks = 0;  // ranks in this process (threads of it), this one included
  for (const auto& place : places) {
    if (place.host != places[rank_].host) continue;
    ++local_ranks;
    if (place.pid == places[rank_].pid) ++process_ranks;
  }
  local_ranks_ = local_ranks;
  // Ranks that are threads of one process share its cpuset: "auto" would put all their
  // progress threads on the same CPU, and a CPU number would too.
  if (process_ranks > 1 && setup.placement.cpu >= 0)
    setup.placement = {-1, "unpinned (" + std::to_string(process_ranks) +
                               " ranks are threads of this process; pinning would put all their progress threads on CPU " +
                               std::to_string(setup.placement.cpu) + ")"};
  log::debug("progress thread: " + setup.placement.reason);
  // PCOLL_YIELD: a spinning waiter gives its CPU away between polls when the node runs more
  // ranks than it has CPUs (auto), always, or never. Without it, an oversubscribed waiter
  // spins through the time slice that the rank it waits for needs.
  const std::string& yield = setup.yield;
  const int cpus = topology::node_cpus();
  yield_ = yield == "always" || (yield == "auto" && local_ranks > cpus);
  log::debug("waiters " + std::string(yield_ ? "yield" : "do not yield") + ": " + std::to_string(local_ranks) +
             " ranks on this node, " + std::to_string(cpus) + " CPUs (PCOLL_YIELD=" + yield + ")");
}

// The agreement's region, the progress thread and the heartbeat, then a barrier: everyone
// connected and progressing before the first handle's traffic.
void Comm::start_engine(const Setup& setup) {
  agreement_ = std::make_unique<Agreement>(*this);
  channel_ = std::make_unique<SurvivorChannel>(*transport_, codec_, rank_, size_);
  channel_->connect(boot_->allgather(channel_->remote_key()));
  survivor_sink_ = std::make_unique<SurvivorSink>(*this);
  told_failed_.assign(static_cast<size_t>(size_), 0);
  driver_ = std::make_unique<transport::ProgressDriver>(*transport_, [this] { return progress_hook(); },
                                                        setup.placement.cpu);
  boot_->barrier();
  log::info("communicator up: rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ", provider " +
            provider_ + ", bootstrap " + bootstrap_name_ + ", " + codec_.describe());
  detector_->start_heartbeat();
}

Comm::~Comm() {
  if (failed()) {
    linger_after_failure();
    // Nobody waits for the others on the way out: a stopped peer would never come.
    boot_->abandon();
  }
  if (driver_) driver_->stop();
  driver_.reset();
}

uint32_t Comm::add_handle(Allreduce* handle) {
  uint32_t slot = 0;
  if (!free_slots_.empty()) {
    slot = free_slots_.front();
    free_slots_.pop_front();
    ++slots_[slot].generation;
  } else {
    if (slots_.size() >= codec_.max_handles())
      fail(Errc::unsupported, "a communicator can have at most " + std::to_string(codec_.max_handles()) +
                                  " allreduce handles at once with " + codec_.describe() +
                                  "; destroy handles it no longer uses");
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  slots_[slot].handle = handle;
  return codec_.handle_field(slot, slots_[slot].generation);
}

void Comm::remove_handle(uint32_t id) {
  const uint32_t slot = codec_.handle_slot(id);
  if (slot >= slots_.size() || slots_[slot].handle == nullptr ||
      codec_.handle_field(slot, slots_[slot].generation) != id)
    return;
  slots_[slot].handle = nullptr;
  free_slots_.push_back(slot);
}

void Comm::dispatch_locked(uint64_t value) {
  if (!codec_.fits(value))
    fail(Errc::protocol, "a notification value with bits above the " + std::to_string(codec_.bits()) +
                             " this job uses arrived");
  const Notice notice = codec_.decode(value);
  switch (notice.kind) {
    case NoticeKind::control: return dispatch_control_locked(notice);
    case NoticeKind::failure: return dispatch_failure_locked(notice);
    case NoticeKind::activation:
    case NoticeKind::data:
    case NoticeKind::credit: {
      const uint32_t slot = codec_.handle_slot(notice.handle);
      if (slot >= slots_.size())
        fail(Errc::protocol, "message for allreduce handle " + std::to_string(notice.handle) +
                                 ", which this rank has not created (create handles in the same order on every rank)");
      Allreduce* handle = slots_[slot].handle;
      if (handle == nullptr || handle->id() != notice.handle) {
        // A forwarded activation or a credit can trail a handle that every rank already
        // destroyed.
        log::debug("dropping a stale message for destroyed handle " + std::to_string(notice.handle));
        return;
      }
      handle->on_notice(notice);
      return;
    }
  }
}

void Comm::dispatch_control_locked(const Notice& notice) {
  const int peer = static_cast<int>(notice.rank);
  if (peer >= size_) fail(Errc::protocol, "control message from rank " + std::to_string(peer) + " of " + std::to_string(size_));
  switch (notice.type) {
    case kControlPing: return detector_->on_ping(peer);  // the engine answers, whatever the application does
    case kControlFailureAck: return detector_->on_failure_ack(peer);
    case kControlSurvivor:
    case kControlSurvivorAck:
      if (channel_ == nullptr)
        fail(Errc::protocol, "survivors' message from rank " + std::to_string(peer) + " before setup ended");
      if (notice.type == kControlSurvivor) channel_->on_message(peer, notice.round);
      else channel_->on_ack(peer, notice.round);
      return detector_->heard_from(peer, Clock::now());
    case kControlAgreement:
      if (failed()) return detector_->heard_from(peer, Clock::now());  // nothing agrees any more
      if (agreement_ == nullptr)
        fail(Errc::protocol, "agreement message from rank " + std::to_string(peer) + " before setup ended");
      agreement_->on_arrival(peer, notice.round);
      // Hearing from the peer is as good as a pong.
      return detector_->heard_from(peer, Clock::now());
    default: return detector_->heard_from(peer, Clock::now());  // a pong
  }
}

void Comm::dispatch_failure_locked(const Notice& notice) {
  const uint32_t culprit = notice.rank;
  const uint32_t unknown = codec_.unknown_rank();
  if (notice.sender >= static_cast<uint32_t>(size_) || notice.sender == static_cast<uint32_t>(rank_))
    fail(Errc::protocol, "failure notice from rank " + std::to_string(notice.sender) + " of " + std::to_string(size_));
  if (culprit != unknown && culprit >= static_cast<uint32_t>(size_))
    fail(Errc::protocol, "failure notice naming rank " + std::to_string(culprit) + " of " + std::to_string(size_));
  const int sender = static_cast<int>(notice.sender);
  const std::optional<FailureReport> report = agreement_ ? agreement_->report_from(sender) : std::nullopt;
  detector_->on_failure_notice(sender, culprit == unknown ? -1 : static_cast<int>(culprit), report ? &*report : nullptr);
}

void Comm::check_waits_against_agreement_locked() {
  bool waiting = false;
  for (const HandleSlot& slot : slots_) waiting = waiting || (slot.handle != nullptr && slot.handle->awaited_round_locked());
  if (!waiting) return;
  for (const auto& [peer, call] : agreement_->calls_ahead()) {
    for (const HandleSlot& slot : slots_) {
      if (slot.handle == nullptr) continue;
      const auto awaited = slot.handle->awaited_round_locked();
      if (!awaited) continue;
      if (const auto problem = waiting_round_mismatch(rank_, slot.handle->id(), awaited->first, awaited->second, peer, call))
        fail(Errc::mismatch, *problem);
    }
  }
}

RoundsTable Comm::rounds_table_locked() const {
  RoundsTable table(slots_.size());
  for (size_t slot = 0; slot < slots_.size(); ++slot) {
    const Allreduce* handle = slots_[slot].handle;
    if (handle != nullptr) table[slot] = RoundsEntry{handle->id(), static_cast<uint32_t>(handle->rounds_posted_locked())};
  }
  return table;
}

void Comm::drive_locked() {
  check_failed();
  std::array<uint64_t, 64> values{};
  size_t n = 0, next = 0;  // values[next, n) are not dispatched yet
  try {
    for (;;) {
      n = transport_->poll(values);
      for (next = 0; next < n;) {
        const uint64_t value = values[next++];
        try {
          dispatch_locked(value);
        } catch (const Error& error) {
          if (!is_leaving() || error.rank() < 0 || error.rank() == rank_) throw;
          log::debug(std::string("while leaving, passed over: ") + error.what());
        }
      }
      if (n < values.size()) break;
    }
    // A failure notice in that batch failed the communicator: no round goes on, and no
    // post to a peer that may have left since gets the chance to fail in its own name.
    check_failed();
    if (agreement_ && agreement_->peers_ahead()) check_waits_against_agreement_locked();
    for (const HandleSlot& slot : slots_)
      if (slot.handle != nullptr) slot.handle->advance_locked();
  } catch (const Error& error) {
    if (failed()) check_failed();  // the recorded failure, not what followed from it
    fail_locked(error, std::span<const uint64_t>(values.data() + next, n - next));
  }
}

void Comm::fail_locked(const Error& error, std::span<const uint64_t> undelivered,
                       std::optional<int> culprit) {
  // Evidence that came in before this error: failure notices (the values of the batch
  // being dispatched, then whatever the transport holds) and, where this error is only a
  // post that timed out on a full queue (the weakest evidence: the peer may merely have
  // left after an earlier failure), a delivery error the transport found meanwhile. Nothing
  // else is delivered any more (the communicator is failing), so the rest is dropped.
  std::optional<Error> found;  // the first delivery error poll() threw
  if (!failed()) {
    take_failure_news_locked(undelivered);
    std::array<uint64_t, 64> values{};
    // poll() throws each delivery error once: a few tries get past them to the values.
    for (int tries = 0; tries < 8 && !failed(); ++tries) {
      try {
        const size_t n = transport_->poll(values);
        take_failure_news_locked(std::span<const uint64_t>(values.data(), n));
        if (n < values.size()) break;
      } catch (const Error& other) {
        if (!found) found = other;
      }
    }
    if (failed()) {
      log::debug(std::string("superseded by a failure another rank reported: ") + error.what());
      check_failed();
    }
    if (found && error.code() == Errc::timeout && found->rank() >= 0 && found->rank() != error.rank()) {
      log::debug(std::string("superseded by an earlier delivery error: ") + error.what());
      mark_failed(found->rank(), found->what(), found->code() == Errc::mismatch ? Errc::mismatch : Errc::ok);
      throw *found;
    }
  } else {
    // Already failed (a notice dispatched by this very call, another thread): this error
    // follows from that failure, typically a post to a survivor that has left since.
    log::debug(std::string("after the recorded failure: ") + error.what());
    check_failed();
  }
  // A mismatch keeps its code on every rank; other errors become a peer's or the
  // transport's failure.
  mark_failed(culprit.value_or(error.rank()), error.what(), error.code() == Errc::mismatch ? Errc::mismatch : Errc::ok);
  throw error;
}

std::chrono::microseconds Comm::progress_hook() {
  auto wait = std::chrono::microseconds::max();
  {
    std::lock_guard lock(engine_mutex_);
    if (failed()) {
      // Pings still get answers and the survivors' messages their way, so that a shrink
      // does not take this rank for dead while its application computes.
      drive_failed_locked();
    } else {
      try {
        drive_locked();
        // Whoever waits on a peer asks whether it is alive, even while this rank's
        // application computes or only polls.
        const auto now = Clock::now();
        for (const HandleSlot& slot : slots_) {
          if (slot.handle == nullptr) continue;
          slot.handle->probe_locked(now);
          if (const auto due = slot.handle->next_deadline_locked())
            wait = std::min(wait, std::chrono::duration_cast<std::chrono::microseconds>(*due - now));
        }
        heartbeat_locked(now);
      } catch (const Error&) {
        // Recorded by mark_failed(); the application sees it at its next call.
      }
    }
  }
  engine_moved_.notify_all();
  return wait;
}

// Whoever waits on a peer probes it (Allreduce::probe_locked, the agreement), but a dead
// rank can be waited on by nobody who is probing: in a sync round whose other ranks
// compute, the one rank already waiting waits on a live partner, and the dead rank's
// partners have not joined. So every engine also asks its ring successor whether it is
// alive (FailureDetector::heartbeat), never more strictly than any handle allows.
void Comm::heartbeat_locked(Clock::time_point now) {
  std::chrono::milliseconds timeout = timeout_;
  for (const HandleSlot& slot : slots_)
    if (slot.handle != nullptr) timeout = std::max(timeout, slot.handle->timeout());
  detector_->heartbeat(now, timeout);
}

void Comm::watch_locked(int peer, std::chrono::milliseconds timeout) { detector_->watch(peer, timeout, Clock::now()); }

// --- PeerNotices: what the failure detector sends. -------------------------------------------

// Engine lock held (a watch): a ping that cannot be sent fails the communicator at once,
// naming the peer.
void Comm::send_ping(int peer) {
  try {
    transport_->notify(peer, codec_.control(kControlPing, static_cast<uint32_t>(rank_)));
  } catch (const Error& error) {
    fail_locked(error, {}, error.rank() >= 0 ? error.rank() : peer);
  }
}

void Comm::send_pong(int peer) { transport_->notify(peer, codec_.control(kControlPong, static_cast<uint32_t>(rank_))); }

void Comm::send_failure(int peer, int culprit) {
  const uint32_t detail = culprit >= 0 ? static_cast<uint32_t>(culprit) : codec_.unknown_rank();
  send_news(peer, codec_.failure(detail, static_cast<uint32_t>(rank_)));
}

// A mismatch's notice travels with its message: written into the peer's report slot, with
// the notice as the write's notification (it arrives once the message is visible).
void Comm::send_report(int peer, int culprit, const FailureReport& report) {
  if (agreement_ == nullptr) return send_failure(peer, culprit);
  const uint32_t detail = culprit >= 0 ? static_cast<uint32_t>(culprit) : codec_.unknown_rank();
  agreement_->send_report(peer, report, codec_.failure(detail, static_cast<uint32_t>(rank_)));
}

void Comm::send_failure_ack(int peer) {
  send_news(peer, codec_.control(kControlFailureAck, static_cast<uint32_t>(rank_)));
}

// News goes to every peer, some of which may have left already, and a provider may keep
// its queue to a departed peer full (libfabric's rxm over tcp answers EAGAIN while it
// cannot connect): with notify() each such peer would cost the transport's timeout, one
// after another (a rank told of a failure acknowledges, then tells the others). So all of
// this communicator's news shares one deadline.
void Comm::send_news(int peer, uint64_t value) {
  if (!news_deadline_) news_deadline_ = Clock::now() + news_bound(timeout_);
  while (!transport_->try_notify(peer, value)) {
    if (Clock::now() >= *news_deadline_)
      fail_peer(Errc::timeout, peer,
                "failure news to rank " + std::to_string(peer) + " not sent: its transmit queue stayed full");
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void Comm::wake_waiters() {
  if (transport_) transport_->wake();
  engine_moved_.notify_all();
}

void Comm::take_failure_news_locked(std::span<const uint64_t> values) {
  for (const uint64_t value : values) {
    const Notice notice = codec_.decode(value);
    // Every control message too (the survivors' channel, pings and pongs): a peer already
    // shrinking must not lose a message, nor take this rank for dead for a ping dropped
    // here. An agreement blob only once the communicator has failed, when it counts as
    // word from its sender and nothing else (dispatch_control_locked).
    const bool news = notice.kind == NoticeKind::failure ||
                      (notice.kind == NoticeKind::control && (notice.type != kControlAgreement || failed()));
    if (!news) continue;
    try {
      dispatch_locked(value);
    } catch (const Error& error) {
      log::debug(std::string("dropped a malformed message: ") + error.what());
    }
  }
}

// A failed rank whose application leaves at once (pcoll_finalize, exit) could take its
// failure notices with it: a provider may still hold them (libfabric's rxm buffers a message
// to a peer it has not connected to yet). Survivors that miss them time out on this rank
// instead and name it, not the culprit. So the notices are acknowledged, and this rank
// progresses until every peer but the culprit acknowledged or sent a notice of its own
// (it knows), for at most half the timeout (the transport's) and never over 2 s.
void Comm::linger_after_failure() {
  const auto until = Clock::now() + news_bound(timeout_);
  std::array<uint64_t, 64> values{};
  for (;;) {
    {
      std::lock_guard lock(engine_mutex_);
      try {
        for (size_t n = values.size(); n == values.size();) {
          n = transport_->poll(values);
          take_failure_news_locked(std::span<const uint64_t>(values.data(), n));
        }
      } catch (const Error&) {
        // Errors about the failed peer are expected here; keep delivering to the others.
      }
      if (detector_->everyone_knows() || Clock::now() >= until) return;
    }
    transport_->wait(std::chrono::milliseconds(1), transport::Transport::WaitFor::notification);
  }
}

void Comm::release_region(std::unique_ptr<transport::LocalRegion> region) {
  if (!region || !failed()) return;
  std::lock_guard lock(engine_mutex_);
  kept_regions_.push_back(std::move(region));
}

void Comm::sleep_locked(std::unique_lock<std::mutex>& lock, std::chrono::microseconds timeout) {
  engine_moved_.wait_for(lock, timeout);
}

// --- Shrinking -------------------------------------------------------------------------------

void Comm::drive_failed_locked() {
  std::array<uint64_t, 64> values{};
  for (int batches = 0; batches < 16; ++batches) {
    size_t n = 0;
    try {
      n = transport_->poll(values);
    } catch (const Error& error) {
      log::debug(std::string("after the failure, passed over: ") + error.what());
      continue;
    }
    take_failure_news_locked(std::span<const uint64_t>(values.data(), n));
    if (n < values.size()) break;
  }
  serve_survivors_locked();
}

void Comm::survivor_send(int peer, uint8_t type, std::span<const std::byte> body) {
  std::vector<std::byte> message(1 + body.size());
  message[0] = static_cast<std::byte>(type);
  if (!body.empty()) std::memcpy(message.data() + 1, body.data(), body.size());
  channel_->send(peer, message);
}

SurvivorAgreement& Comm::survivor_agreement_locked(uint32_t epoch) {
  auto& agreement = survivor_agreements_[epoch];
  if (!agreement) {
    agreement = std::make_unique<SurvivorAgreement>(rank_, size_, epoch, *survivor_sink_);
    for (int r = 0; r < size_; ++r)
      if (told_failed_[static_cast<size_t>(r)] != 0) agreement->on_failed(r);
    if (const auto later = later_messages_.find(epoch); later != later_messages_.end()) {
      for (const auto& [from, message] : later->second) agreement->on_message(from, message);
      later_messages_.erase(later);
    }
  }
  return *agreement;
}

void Comm::serve_survivors_locked() {
  if (!channel_) return;
  for (const int r : detector_->failed_ranks()) {
    if (told_failed_[static_cast<size_t>(r)] != 0) continue;
    told_failed_[static_cast<size_t>(r)] = 1;
    for (auto& [epoch, agreement] : survivor_agreements_) agreement->on_failed(r);
  }
  for (auto& [sender, bytes] : channel_->take()) {
    try {
      if (bytes.empty()) fail(Errc::protocol, "rank " + std::to_string(sender) + " sent an empty survivors' message");
      const auto type = static_cast<uint8_t>(bytes[0]);
      const std::span<const std::byte> body(bytes.data() + 1, bytes.size() - 1);
      if (type == SurvivorSink::kSurvivorAgreementMessage) {
        const SurvivorMessage message = decode_survivor_message(body, size_, sender);
        if (survivor_agreements_.count(message.epoch) != 0 || message.epoch < shrink_epoch_)
          survivor_agreement_locked(message.epoch).on_message(sender, message);
        else
          later_messages_[message.epoch].emplace_back(sender, message);
      } else if (type == SurvivorSink::kSurvivorBlob && body.size() >= 8) {
        uint32_t epoch = 0, step = 0;
        std::memcpy(&epoch, body.data(), 4);
        std::memcpy(&step, body.data() + 4, 4);
        survivor_blobs_[{epoch, step, sender}].assign(body.begin() + 8, body.end());
      } else {
        fail(Errc::protocol, "rank " + std::to_string(sender) + " sent a survivors' message of type " +
                                 std::to_string(type) + " and " + std::to_string(bytes.size()) + " bytes");
      }
    } catch (const Error& error) {
      log::warn(std::string("survivors' channel: dropped a message: ") + error.what());
    }
  }
}

Comm::Survivors Comm::agree_on_survivors() {
  std::unique_lock lock(engine_mutex_);
  if (!failed())
    fail(Errc::invalid_state, "no failure was reported on this communicator (rank " + std::to_string(rank_) +
                                  "); shrink is for the survivors of one");
  const uint32_t epoch = shrink_epoch_++;
  SurvivorAgreement& agreement = survivor_agreement_locked(epoch);
  agreement.start(detector_->failed_ranks());
  const auto settled = [&] {
    if (agreement.excluded())
      fail_peer(Errc::peer_failed, rank_,
                "rank " + std::to_string(rank_) +
                    " (this rank) is not among the survivors: other ranks named it failed (it was silent, or its "
                    "connection to them broke)");
    return agreement.decided().has_value();
  };
  shrink_wait_locked(lock, settled, [&] { return agreement.awaited(); }, "while the survivors agreed on the failed set",
                     false);
  return Survivors{*agreement.decided(), epoch};
}

void Comm::shrink_wait_locked(std::unique_lock<std::mutex>& lock, const std::function<bool()>& ready,
                              const std::function<std::vector<int>()>& awaited, const std::string& during,
                              bool silence_fails) {
  const auto patience = shrink_patience();
  for (;;) {
    drive_failed_locked();
    if (ready()) return;
    const auto now = Clock::now();
    for (const int r : awaited()) {
      const bool named = told_failed_[static_cast<size_t>(r)] != 0;
      if (!(named && silence_fails) && !detector_->unanswered(r, patience, now)) continue;
      const std::string reason =
          "rank " + std::to_string(r) +
          (named ? " failed " : " did not answer within " + std::to_string(patience.count()) + " ms ") + during;
      detector_->name_later(r, reason);
      if (silence_fails) fail_peer(Errc::peer_failed, r, reason + "; shrink again");
    }
    if (interrupt::requested())
      fail(Errc::invalid_state, "rank " + std::to_string(rank_) + " was interrupted by the application (a signal) in a shrink");
    sleep_locked(lock, std::chrono::milliseconds(1));
  }
}

// A star: every member sends its blob to the leader (the lowest member), which sends every
// blob back to each in one bundle. Only links to the leader carry it, links the agreement
// used already; on libfabric's tcp links first opened now between other survivors broke in
// some runs here, and a star needs none.
std::vector<std::vector<std::byte>> Comm::survivors_allgather(uint32_t epoch, uint32_t step,
                                                              const std::vector<int>& members,
                                                              std::span<const std::byte> mine) {
  constexpr uint32_t kBundle = 0x80000000u;
  std::unique_lock lock(engine_mutex_);
  const int leader = members.front();
  const char* during = "while the survivors set up their communicator";
  const auto frame = [&](uint32_t tag, std::span<const std::byte> payload) {
    std::vector<std::byte> body(8 + payload.size());
    std::memcpy(body.data(), &epoch, 4);
    std::memcpy(body.data() + 4, &tag, 4);
    if (!payload.empty()) std::memcpy(body.data() + 8, payload.data(), payload.size());
    return body;
  };
  std::vector<std::vector<std::byte>> all;
  if (rank_ != leader) {
    survivor_send(leader, SurvivorSink::kSurvivorBlob, frame(step, mine));
    const std::tuple<uint32_t, uint32_t, int> key{epoch, step | kBundle, leader};
    shrink_wait_locked(lock, [&] { return survivor_blobs_.count(key) != 0; }, [&] { return std::vector<int>{leader}; },
                       during, true);
    const std::vector<std::byte> bundle = std::move(survivor_blobs_[key]);
    survivor_blobs_.erase(key);
    size_t at = 0;
    for (size_t m = 0; m < members.size(); ++m) {
      uint32_t bytes = 0;
      if (at + 4 > bundle.size()) fail(Errc::protocol, "rank " + std::to_string(leader) + " sent a truncated survivors' bundle");
      std::memcpy(&bytes, bundle.data() + at, 4);
      at += 4;
      if (bytes > bundle.size() - at)
        fail(Errc::protocol, "rank " + std::to_string(leader) + " sent a truncated survivors' bundle");
      all.emplace_back(bundle.begin() + static_cast<std::ptrdiff_t>(at), bundle.begin() + static_cast<std::ptrdiff_t>(at + bytes));
      at += bytes;
    }
    return all;
  }
  survivor_blobs_[{epoch, step, rank_}].assign(mine.begin(), mine.end());
  const auto missing = [&] {
    std::vector<int> ranks;
    for (const int m : members)
      if (survivor_blobs_.count({epoch, step, m}) == 0) ranks.push_back(m);
    return ranks;
  };
  shrink_wait_locked(lock, [&] { return missing().empty(); }, missing, during, true);
  std::vector<std::byte> bundle;
  for (const int m : members) {
    auto found = survivor_blobs_.find({epoch, step, m});
    const auto bytes = static_cast<uint32_t>(found->second.size());
    const size_t at = bundle.size();
    bundle.resize(at + 4);
    std::memcpy(bundle.data() + at, &bytes, 4);
    bundle.insert(bundle.end(), found->second.begin(), found->second.end());
    all.push_back(std::move(found->second));
    survivor_blobs_.erase(found);
  }
  const std::vector<std::byte> framed = frame(step | kBundle, bundle);
  for (const int m : members)
    if (m != rank_) survivor_send(m, SurvivorSink::kSurvivorBlob, framed);
  return all;
}

}  // namespace pcoll
