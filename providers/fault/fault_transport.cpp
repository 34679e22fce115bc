// FaultTransport (fault_transport.hpp): the decorator's operations, its receive-side queues,
// and wrap(), the registry's way in.
#include <fault/fault_transport.hpp>

#include <signal.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <thread>

#include <fault/fault_provider.hpp>
#include <fault/fault_settings.hpp>
#include <support/log.hpp>

namespace pcoll::transport::fault {
namespace {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;

// The one piece of process-wide state here: set by the SIGUSR1 handler that rules with
// on=sigusr1 install. A test raises SIGUSR1 at the phase it aims a fault at (the fault
// matrix, tests/multiprocess/fault_matrix.cpp); a signal is the only way in from outside
// the library that needs no API of its own.
std::atomic<bool> g_sigusr1_seen{false};

void on_sigusr1(int) { g_sigusr1_seen.store(true, std::memory_order_release); }

void install_sigusr1_handler() {
  struct sigaction action {};
  action.sa_handler = on_sigusr1;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  if (::sigaction(SIGUSR1, &action, nullptr) != 0)
    fail(Errc::internal, "PCOLL_FAULT: cannot install the SIGUSR1 handler that on=sigusr1 needs");
}

// A waiter for notifications looks at the ready queue at least this often: another
// thread's poll() may have moved values there without the inner transport noticing.
constexpr auto kLookAgain = milliseconds(5);
// An EAGAIN burst progresses the inner transport between retries, as a provider would.
constexpr auto kRetryPause = microseconds(100);

}  // namespace

FaultTransport::FaultTransport(std::unique_ptr<Transport> inner, std::vector<Rule> rules, const Options& options)
    : ForwardingTransport(std::move(inner)), caps_(this->inner().capabilities()), options_(options) {
  caps_.name = "fault+" + caps_.name;
  bool needs_signal = false;
  for (auto& rule : rules) {
    needs_signal = needs_signal || rule.on == Trigger::sigusr1;
    rules_.push_back(RuleState{std::move(rule)});
  }
  if (needs_signal) install_sigusr1_handler();
  if (!rules_.empty()) log::info("fault-injection transport over " + this->inner().capabilities().name + ": " +
                                 std::to_string(rules_.size()) + " rule(s) from PCOLL_FAULT");
}

FaultTransport::~FaultTransport() = default;

bool FaultTransport::mine(const Rule& rule) const { return !rule.rank || *rule.rank == rank_; }

bool FaultTransport::armed(const Rule& rule) const {
  switch (rule.on) {
    case Trigger::start: return true;
    case Trigger::connect: return connected_;
    case Trigger::sigusr1: return g_sigusr1_seen.load(std::memory_order_acquire);
  }
  return false;
}

bool FaultTransport::fires_locked(RuleState& state) {
  const Rule& rule = state.rule;
  const uint64_t event = ++state.events;
  if (event < rule.at || (event - rule.at) % rule.every != 0 || state.applied >= rule.count) return false;
  ++state.applied;
  return true;
}

std::string FaultTransport::injected(const RuleState& state) const {
  // The steady clock is the system's monotonic clock: a test compares it across processes
  // to time how long the others took to hear of the fault.
  const auto t = std::chrono::duration_cast<milliseconds>(Clock::now().time_since_epoch()).count();
  return "(injected by PCOLL_FAULT rule '" + state.rule.text + "' at rank " + std::to_string(rank_) + ", event " +
         std::to_string(state.events) + ", t=" + std::to_string(t) + " ms)";
}

void FaultTransport::do_connect(int my_rank, std::span<const Bytes> addresses) {
  inner().connect(my_rank, addresses);
  int signal = 0;
  std::optional<Error> failure;
  {
    std::lock_guard lock(mutex_);
    caps_ = inner().capabilities();
    caps_.name = "fault+" + caps_.name;
    rank_ = my_rank;
    size_ = static_cast<int>(addresses.size());
    std::vector<Rule> plain;
    for (const auto& state : rules_) plain.push_back(state.rule);
    check_ranks(plain, size_);
    reset_.assign(static_cast<size_t>(size_), "");
    for (const auto& state : rules_)
      if (state.rule.action == Action::reorder) {
        shuffle_.seed(state.rule.seed * 1000003u + static_cast<uint64_t>(rank_));
        break;
      }
    connected_ = true;
    for (auto& state : rules_) {
      const Rule& rule = state.rule;
      if (rule.on != Trigger::connect || !mine(rule)) continue;
      ++state.events;
      ++state.applied;
      if (rule.action == Action::silent) {
        silent_ = true;
        log::warn("fault: this rank's transport goes silent at connect " + injected(state));
      } else if (rule.action == Action::kill || rule.action == Action::stop) {
        signal = rule.action == Action::kill ? SIGKILL : SIGSTOP;
        log::warn(std::string("fault: ") + (signal == SIGKILL ? "SIGKILL" : "SIGSTOP") + " at connect " + injected(state));
      } else if (rule.action == Action::reset && size_ > 1) {
        const int peer = rule.peer.value_or((rank_ + 1) % size_);
        reset_[static_cast<size_t>(peer)] =
            "fault: connect to rank " + std::to_string(peer) + ": connection reset by peer " + injected(state);
        failure.emplace(Errc::peer_failed, reset_[static_cast<size_t>(peer)], peer);
      }
    }
  }
  if (signal != 0) ::raise(signal);
  if (failure) throw *failure;
}

// --- Send side ---------------------------------------------------------------------------

bool FaultTransport::before_operation(int peer, const char* operation) {
  std::optional<milliseconds> stall;
  std::string stall_cause;
  int signal = 0;
  {
    std::lock_guard lock(mutex_);
    if (!connected_) return true;  // the inner transport refuses it; rules need the rank
    if (silent_) return false;
    const std::string what = std::string("fault: ") + operation + " to rank " + std::to_string(peer);
    if (peer >= 0 && peer < size_ && !reset_[static_cast<size_t>(peer)].empty())
      fail_peer(Errc::peer_failed, peer, reset_[static_cast<size_t>(peer)]);
    for (auto& state : rules_) {
      const Rule& rule = state.rule;
      if (rule.receive_side() || rule.on == Trigger::connect || !mine(rule) || !armed(rule)) continue;
      if (rule.peer && *rule.peer != peer) continue;
      if (!fires_locked(state)) continue;
      switch (rule.action) {
        case Action::silent:
          silent_ = true;
          log::warn("fault: this rank's transport goes silent " + injected(state));
          return false;
        case Action::kill:
        case Action::stop:
          signal = rule.action == Action::kill ? SIGKILL : SIGSTOP;
          log::warn(std::string("fault: ") + (signal == SIGKILL ? "SIGKILL" : "SIGSTOP") + " before " + what + " " +
                    injected(state));
          break;
        case Action::reset:
          reset_[static_cast<size_t>(peer)] = what + ": connection reset by peer " + injected(state);
          fail_peer(Errc::peer_failed, peer, reset_[static_cast<size_t>(peer)]);
        case Action::access:
          // Dropped here; the target refused it, which the initiator learns from its
          // completion queue: at the next poll() or flush().
          if (!pending_) pending_.emplace(Errc::transport, what + " failed at the target: remote access error " +
                                                               injected(state), peer);
          return false;
        case Action::eagain:
          stall = std::max(stall.value_or(milliseconds(0)), rule.ms);
          stall_cause = injected(state);
          break;
        default: break;
      }
      if (signal != 0) break;
    }
  }
  if (signal != 0) ::raise(signal);  // SIGSTOP: the operation goes on once continued
  if (stall) {
    // The provider's retry loop: progress, pause, try again, for the burst or until the
    // transport's timeout, after which a provider gives up naming the peer.
    const auto until = Clock::now() + std::min(*stall, options_.timeout);
    while (Clock::now() < until) {
      inner().progress();
      std::this_thread::sleep_for(kRetryPause);
    }
    if (*stall >= options_.timeout)
      fail_peer(Errc::timeout, peer, std::string("fault: ") + operation + " to rank " + std::to_string(peer) +
                                         ": the transmit queue stayed full for " +
                                         std::to_string(options_.timeout.count()) + " ms (EAGAIN burst " +
                                         stall_cause + ")");
  }
  return true;
}

void FaultTransport::do_write(const LocalRegion& src, size_t src_offset, const RemoteRegion& dst, size_t dst_offset,
                              size_t bytes) {
  if (before_operation(dst.peer(), "write")) inner().write(src, src_offset, dst, dst_offset, bytes);
}

void FaultTransport::do_write_notify(const LocalRegion& src, size_t src_offset, const RemoteRegion& dst,
                                     size_t dst_offset, size_t bytes, uint64_t value) {
  if (before_operation(dst.peer(), "write_notify"))
    inner().write_notify(src, src_offset, dst, dst_offset, bytes, value);
}

void FaultTransport::do_notify(int peer, uint64_t value) {
  if (before_operation(peer, "notify")) inner().notify(peer, value);
}

// The rules apply as to notify() (a dropped message counts as taken).
bool FaultTransport::do_try_notify(int peer, uint64_t value) {
  return !before_operation(peer, "notify") || inner().try_notify(peer, value);
}

uint64_t FaultTransport::atomic(int peer, const char* operation, const std::function<uint64_t()>& forward) {
  if (before_operation(peer, operation)) return forward();
  // A silent rank's atomic never completes: the provider gives up after its timeout.
  std::this_thread::sleep_for(options_.timeout);
  fail_peer(Errc::timeout, peer, std::string("fault: ") + operation + " on rank " + std::to_string(peer) +
                                     " did not complete within " + std::to_string(options_.timeout.count()) +
                                     " ms (this rank's transport is silenced by PCOLL_FAULT)");
}

uint64_t FaultTransport::do_fetch_add(const RemoteRegion& dst, size_t offset, uint64_t operand) {
  return atomic(dst.peer(), "fetch_add", [&] { return inner().fetch_add(dst, offset, operand); });
}

uint64_t FaultTransport::do_compare_swap(const RemoteRegion& dst, size_t offset, uint64_t expected, uint64_t desired) {
  return atomic(dst.peer(), "compare_swap", [&] { return inner().compare_swap(dst, offset, expected, desired); });
}

uint64_t FaultTransport::do_swap(const RemoteRegion& dst, size_t offset, uint64_t value) {
  return atomic(dst.peer(), "swap", [&] { return inner().swap(dst, offset, value); });
}

uint64_t FaultTransport::do_atomic_max(const RemoteRegion& dst, size_t offset, uint64_t value) {
  return atomic(dst.peer(), "atomic_max", [&] { return inner().atomic_max(dst, offset, value); });
}

void FaultTransport::flush() {
  {
    std::lock_guard lock(mutex_);
    if (pending_) {
      const Error error = *pending_;
      pending_.reset();
      throw error;
    }
    if (silent_) return;  // nothing was posted since
  }
  inner().flush();
}

// --- Receive side ------------------------------------------------------------------------

void FaultTransport::accept_locked(uint64_t value, Clock::time_point now) {
  if (silent_) return;
  size_t copies = 1;
  milliseconds delay{0};
  for (auto& state : rules_) {
    const Rule& rule = state.rule;
    if ((rule.action != Action::duplicate && rule.action != Action::delay) || !mine(rule) || !armed(rule)) continue;
    if ((value & rule.mask) != rule.match || !fires_locked(state)) continue;
    if (rule.action == Action::duplicate) copies = 2;
    else delay += rule.ms;
  }
  const Held held{value, now + delay};
  // Release order; equal release times keep arrival order.
  const auto at = std::upper_bound(delayed_.begin(), delayed_.end(), held.release,
                                   [](Clock::time_point t, const Held& h) { return t < h.release; });
  delayed_.insert(at, copies, held);
}

void FaultTransport::shuffle_held_locked() {
  const std::vector<uint64_t> arrival_order = reordering_;
  std::shuffle(reordering_.begin(), reordering_.end(), shuffle_);
  // A shuffle may leave the order as it was; a reorder rule promises a different one.
  if (reordering_.size() > 1 && reordering_ == arrival_order) std::reverse(reordering_.begin(), reordering_.end());
  ready_.insert(ready_.end(), reordering_.begin(), reordering_.end());
  reordering_.clear();
}

bool FaultTransport::release_due_locked(Clock::time_point now) {
  const size_t before = ready_.size();
  while (!delayed_.empty() && delayed_.front().release <= now) {
    const uint64_t value = delayed_.front().value;
    delayed_.pop_front();
    bool held = false;
    for (size_t i = 0; i < rules_.size() && !held; ++i) {
      RuleState& state = rules_[i];
      const Rule& rule = state.rule;
      if (rule.action != Action::reorder || !mine(rule) || !armed(rule) || (value & rule.mask) != rule.match) continue;
      if (!fires_locked(state)) continue;
      if (reordering_.empty()) {
        reorder_rule_ = i;
        reordering_since_ = now;
      }
      reordering_.push_back(value);
      held = true;
      if (reordering_.size() >= rules_[reorder_rule_].rule.window) shuffle_held_locked();
    }
    if (!held) ready_.push_back(value);
  }
  if (!reordering_.empty() && now - reordering_since_ >= rules_[reorder_rule_].rule.ms) shuffle_held_locked();
  return ready_.size() != before;
}

std::optional<FaultTransport::Clock::time_point> FaultTransport::next_release_locked() const {
  std::optional<Clock::time_point> next;
  if (!delayed_.empty()) next = delayed_.front().release;
  if (!reordering_.empty()) {
    const auto due = reordering_since_ + rules_[reorder_rule_].rule.ms;
    next = next ? std::min(*next, due) : due;
  }
  return next;
}

void FaultTransport::pump_locked(Clock::time_point now) {
  if (!silent_) {
    // A silent rule from its first event on silences the rank as soon as it is armed (at
    // SIGUSR1, or from the start), not only at its next send: it stops answering at once.
    for (const auto& state : rules_)
      if (state.rule.action == Action::silent && state.rule.on != Trigger::connect && state.rule.at == 1 &&
          mine(state.rule) && armed(state.rule)) {
        silent_ = true;
        log::warn("fault: this rank's transport goes silent " + injected(state));
        break;
      }
  }
  std::array<uint64_t, 64> values{};
  for (;;) {
    const size_t n = inner().poll(values);
    for (size_t i = 0; i < n; ++i) accept_locked(values[i], now);
    if (n < values.size()) break;
  }
  release_due_locked(now);
}

void FaultTransport::progress() {
  std::lock_guard lock(mutex_);
  pump_locked(Clock::now());
}

size_t FaultTransport::poll(std::span<uint64_t> out) {
  std::lock_guard lock(mutex_);
  if (pending_) {
    const Error error = *pending_;
    pending_.reset();
    throw error;
  }
  pump_locked(Clock::now());
  size_t n = 0;
  for (; n < out.size() && !ready_.empty(); ++n) {
    out[n] = ready_.front();
    ready_.pop_front();
  }
  return n;
}

bool FaultTransport::wait(microseconds timeout, WaitFor what) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    std::optional<Clock::time_point> next;
    {
      std::lock_guard lock(mutex_);
      const size_t before = ready_.size();
      pump_locked(Clock::now());
      // activity: values newly released count, a queue nobody consumes does not (the
      // progress driver must not spin on it).
      if (what == WaitFor::notification ? !ready_.empty() : ready_.size() != before) return true;
      next = next_release_locked();
    }
    const auto now = Clock::now();
    if (now >= deadline) return false;
    auto until = deadline;
    if (next) until = std::min(until, *next);
    if (what == WaitFor::notification || next) until = std::min(until, now + kLookAgain);
    const auto slice = std::max(microseconds(1), duration_cast<microseconds>(until - now));
    if (inner().wait(slice, what) && what == WaitFor::activity) return true;
  }
}

// --- The registry's way in ---------------------------------------------------------------

std::unique_ptr<Transport> wrap(std::unique_ptr<Transport> inner, const Options& options) {
  auto rules = parse_spec(FaultSettings::get_text("PCOLL_FAULT").value_or(""));
  // The rules name ranks of the job as launched; a communicator of survivors numbers its
  // ranks afresh, so none of them applies there (docs/reliability.md).
  if (options.survivors) rules.clear();
  return std::make_unique<FaultTransport>(std::move(inner), std::move(rules), options);
}

const ProviderDescriptor& descriptor() {
  static const ProviderDescriptor fault{
      "fault", "fault injection over another provider (PCOLL_FAULT; tests only)", {}, nullptr,
      ProviderDescriptor::Kind::layered, wrap};
  return fault;
}

}  // namespace pcoll::transport::fault
