// FaultTransport: a Transport that forwards to another one and injects the faults of its
// rules. Only providers/fault/*.cpp include this.
//
// Design in one paragraph: regions and addresses are the inner transport's own, passed
// through untouched. Send-side rules act before an operation is forwarded: they count
// the operations aimed at a peer (write, write_notify, notify, atomics) and may stall one
// (an EAGAIN burst: the inner transport is progressed meanwhile, and a burst longer than
// the transport's timeout fails the operation as a provider would), fail it (connection
// reset: now and for every later operation to that peer; remote access error: the
// operation is dropped and the error surfaces at the next poll() or flush(), as a
// completion-queue error does), silence the rank (everything out and in is swallowed from
// then on, the process lives on) or signal the process (kill, stop). Receive-side rules act
// in poll(): every value the inner transport delivers goes through duplicate (queued twice),
// delay (held until its release time) and reorder (held with others, released shuffled),
// then waits in a ready queue. Held values are released by time, so nothing is lost:
// each value is still returned, exactly once unless a duplicate rule says otherwise.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fault/fault_spec.hpp>
#include <support/error.hpp>
#include <transport/transport.hpp>
#include <util/forwarding_transport.hpp>

namespace pcoll::transport::fault {

class FaultTransport final : public ForwardingTransport {
 public:
  FaultTransport(std::unique_ptr<Transport> inner, std::vector<Rule> rules, const Options& options);
  ~FaultTransport() override;

  const Capabilities& capabilities() const override { return caps_; }
  void flush() override;
  void progress() override;
  size_t poll(std::span<uint64_t> out) override;
  bool wait(std::chrono::microseconds timeout, WaitFor what) override;

 protected:
  // What the faults act on; everything else passes through (ForwardingTransport).
  void do_connect(int my_rank, std::span<const Bytes> addresses) override;
  void do_write(const LocalRegion& src, size_t src_offset, const RemoteRegion& dst, size_t dst_offset,
                size_t bytes) override;
  void do_write_notify(const LocalRegion& src, size_t src_offset, const RemoteRegion& dst, size_t dst_offset,
                       size_t bytes, uint64_t value) override;
  void do_notify(int peer, uint64_t value) override;
  bool do_try_notify(int peer, uint64_t value) override;
  uint64_t do_fetch_add(const RemoteRegion& dst, size_t offset, uint64_t operand) override;
  uint64_t do_compare_swap(const RemoteRegion& dst, size_t offset, uint64_t expected, uint64_t desired) override;
  uint64_t do_swap(const RemoteRegion& dst, size_t offset, uint64_t value) override;
  uint64_t do_atomic_max(const RemoteRegion& dst, size_t offset, uint64_t value) override;

 private:
  using Clock = std::chrono::steady_clock;
  struct RuleState {
    Rule rule;
    uint64_t events = 0;   // events counted since the trigger
    uint64_t applied = 0;  // times the rule acted
  };
  struct Held {
    uint64_t value;
    Clock::time_point release;
  };

  bool mine(const Rule& rule) const;
  bool armed(const Rule& rule) const;
  // Counts one event for `state` and says whether the rule acts on it.
  bool fires_locked(RuleState& state);
  // Send side: runs the rules for an operation aimed at `peer`; false: swallow it.
  bool before_operation(int peer, const char* operation);
  uint64_t atomic(int peer, const char* operation, const std::function<uint64_t()>& forward);
  std::string injected(const RuleState& state) const;

  // Receive side, mutex_ held.
  void pump_locked(Clock::time_point now);
  void accept_locked(uint64_t value, Clock::time_point now);
  bool release_due_locked(Clock::time_point now);
  void shuffle_held_locked();
  std::optional<Clock::time_point> next_release_locked() const;

  Capabilities caps_;
  Options options_;
  int rank_ = -1;  // known from connect()
  int size_ = 0;

  std::mutex mutex_;
  std::vector<RuleState> rules_;
  bool connected_ = false;
  bool silent_ = false;
  std::vector<std::string> reset_;    // per peer: why its connection is down ("" = up)
  std::optional<Error> pending_;      // an injected completion error not yet reported
  std::deque<Held> delayed_;          // in release order
  std::vector<uint64_t> reordering_;  // held by a reorder rule
  size_t reorder_rule_ = 0;          // the rule whose window and hold time apply
  Clock::time_point reordering_since_{};
  std::deque<uint64_t> ready_;
  std::mt19937_64 shuffle_;
};

}  // namespace pcoll::transport::fault
