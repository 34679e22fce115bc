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

namespace pcoll {

enum class TraceEvent : uint8_t {
  post,                 // the application posted the round (arg: 1 if the engine had joined it already)
  post_flush,           // the application called flush for the round
  join,                 // the engine joined the round (arg: 1 fresh, 0 late)
  activation_sent,      // this rank activated the round
  activation_received,  // an activation arrived (arg: its root)
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
  std::vector<Event> events_;
  uint64_t next_ = 0;  // events added so far
};

// Median of `mine[k] - root[k]`: the clock offset of a rank against rank 0 from timestamps
// both took right after the same barriers.
int64_t estimate_offset(const std::vector<int64_t>& mine, const std::vector<int64_t>& root);

}  // namespace pcoll
