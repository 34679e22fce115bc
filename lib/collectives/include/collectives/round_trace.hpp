// The round trace of one handle (PCOLL_TRACE=DIR, docs/observability.md): what happened to
// each round on this rank, with timestamps, kept in a fixed ring of events allocated at
// handle creation and written as Chrome trace-event JSON when the handle goes away. Adding
// an event is a clock read and a store under the engine lock: no allocation, no I/O, so a
// traced round is never blocked by the trace. A handle without a trace holds no RoundTrace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <collectives/round_observer.hpp>

namespace pcoll {

enum class TraceEvent : uint8_t {
  post,                 // the application posted the round (arg: 1 if the engine had joined it already)
  post_flush,           // the application called flush for the round
  join,                 // the engine joined the round (arg: 1 fresh, 0 late)
  activation_sent,      // this rank activated the round
  activation_received,  // this rank first heard of the round (arg: the neighbour it heard from)
  step_start,           // a plan step began (arg: step)
  step_end,             // it ended (arg: step)
  complete,             // the round's result is known (arg: initiator, arg2: fresh ranks)
  deliver,              // the result was handed to the application (arg: 1 if caller late)
  arrival,              // quorum mode: this rank counted its arrival (arg: ranks arrived, itself included)
};

class RoundTrace {
 public:
  // Events kept per handle; older ones are overwritten (the file says how many were).
  static constexpr size_t kCapacity = 65536;

  struct Header {
    int rank = 0;
    int size = 1;
    uint32_t handle = 0;
    std::string mode;
    int64_t clock_offset_ns = 0;  // this rank's clock minus rank 0's, estimated at creation
  };

  RoundTrace(std::string directory, int64_t clock_skew_ns);
  // This rank's clock, as the trace reads it (steady clock plus any injected test skew).
  int64_t now_ns() const;
  // Another clock instead of the steady clock: a simulator's (perf/sim) simulated time.
  using ClockFunction = int64_t (*)();
  void set_clock(ClockFunction clock) { clock_ = clock; }
  void add(TraceEvent kind, uint64_t round, int32_t arg = 0, int32_t arg2 = 0) {
    Event& e = events_[next_ % kCapacity];
    e = Event{now_ns(), round, arg, arg2, kind};
    ++next_;
  }
  // Writes DIR/pcoll-trace.rank<R>.handle<H>.json; returns the path. Throws Error on I/O.
  std::string write(const Header& header) const;

 private:
  struct Event {
    int64_t t_ns;
    uint64_t round;
    int32_t arg;
    int32_t arg2;
    TraceEvent kind;
  };
  std::string directory_;
  int64_t clock_skew_ns_;
  ClockFunction clock_ = nullptr;
  std::vector<Event> events_;
  uint64_t next_ = 0;  // events added so far
};

// The round trace as an observer of the handle's rounds: each event a RoundTrace entry.
class TraceObserver final : public RoundObserver {
 public:
  TraceObserver(std::string directory, int64_t clock_skew_ns, RoundTrace::Header header)
      : trace_(std::move(directory), clock_skew_ns), header_(std::move(header)) {}
  RoundTrace& trace() { return trace_; }
  void set_clock_offset(int64_t ns) { header_.clock_offset_ns = ns; }
  // Writes the file; a failure is logged, never thrown (the handle is going away).
  void write() noexcept;

  void posted(uint64_t round, bool engine_joined) override { trace_.add(TraceEvent::post, round, engine_joined ? 1 : 0); }
  void flush_posted(uint64_t round) override { trace_.add(TraceEvent::post_flush, round); }
  void arrival_counted(uint64_t round, uint64_t arrived) override {
    trace_.add(TraceEvent::arrival, round, static_cast<int32_t>(arrived));
  }
  void activation_sent(uint64_t round, int root) override { trace_.add(TraceEvent::activation_sent, round, root); }
  void activation_received(uint64_t round, int from) override {
    trace_.add(TraceEvent::activation_received, round, from);
  }
  void joined(uint64_t round, bool fresh, bool, bool) override { trace_.add(TraceEvent::join, round, fresh ? 1 : 0); }
  void step_started(uint64_t round, size_t step) override {
    trace_.add(TraceEvent::step_start, round, static_cast<int32_t>(step));
  }
  void step_ended(uint64_t round, size_t step) override {
    trace_.add(TraceEvent::step_end, round, static_cast<int32_t>(step));
  }
  void completed(const RoundInfo& info, bool, bool, bool) override {
    trace_.add(TraceEvent::complete, info.round, info.initiator, info.fresh);
  }
  void delivered(uint64_t round, bool caller_late) override {
    trace_.add(TraceEvent::deliver, round, caller_late ? 1 : 0);
  }

 private:
  RoundTrace trace_;
  RoundTrace::Header header_;
};

// Median of `mine[k] - root[k]`: the clock offset of a rank against rank 0 from timestamps
// both took right after the same barriers.
int64_t estimate_offset(const std::vector<int64_t>& mine, const std::vector<int64_t>& root);

}  // namespace pcoll
