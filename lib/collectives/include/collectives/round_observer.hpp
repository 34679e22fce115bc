// What happens to a handle's rounds, as the engine reports it to whoever watches: the
// statistics (allreduce_stats.hpp, always on) and the round trace (round_trace.hpp, with
// PCOLL_TRACE). Called by whoever drives the engine, with the engine lock held; an observer
// must be quick (a few additions, a clock read) and must not call back into the engine.
#pragma once

#include <cstddef>
#include <cstdint>

#include <collectives/round_info.hpp>

namespace pcoll {

class RoundObserver {
 public:
  virtual ~RoundObserver() = default;
  // The application posted `round` (`engine_joined`: the engine had joined it already).
  virtual void posted(uint64_t /*round*/, bool /*engine_joined*/) {}
  virtual void flush_posted(uint64_t /*round*/) {}
  // Quorum: this rank counted its arrival, the `arrived`-th.
  virtual void arrival_counted(uint64_t /*round*/, uint64_t /*arrived*/) {}
  virtual void activation_sent(uint64_t /*round*/, int /*root*/) {}
  virtual void activation_received(uint64_t /*round*/, int /*from*/) {}
  // The engine joined `round`; `carried`: a carry went into the contribution.
  virtual void joined(uint64_t /*round*/, bool /*fresh*/, bool /*flush*/, bool /*carried*/) {}
  virtual void step_started(uint64_t /*round*/, size_t /*step*/) {}
  virtual void step_ended(uint64_t /*round*/, size_t /*step*/) {}
  // `initiated`: this rank activated it; `while_computing`: no caller waited for it.
  virtual void completed(const RoundInfo& /*info*/, bool /*initiated*/, bool /*flush*/, bool /*while_computing*/) {}
  // The result went to the application.
  virtual void delivered(uint64_t /*round*/, bool /*caller_late*/) {}
  virtual void wrote(uint64_t /*bytes*/) {}
  // This rank sent a message (a write with its notification, a notice alone, an atomic) of
  // `bytes` payload to a rank on another node (Comm::node_of).
  virtual void sent_to_network(uint64_t /*bytes*/) {}
  // This rank read `bytes` of a peer's memory mapped here (the direct plan).
  virtual void read(uint64_t /*bytes*/) {}
  // A caller waited this long in run/wait/flush.
  virtual void blocked(uint64_t /*ns*/) {}
};

}  // namespace pcoll
