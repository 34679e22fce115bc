// Who may start a round, and when: one policy per mode (sync_policy.cpp, solo_policy.cpp,
// majority_policy.cpp, quorum_policy.cpp), found through the mode table (mode_table.hpp).
//
// A policy is a state machine over round numbers and times. It owns no thread, lock, clock
// or transport: the engine asks it with the engine lock held and its own clock's reading,
// and carries out what it answers (the engine sends the activation when a policy starts a
// round, and does the remote atomic a quorum policy asks for). A test or a simulator can
// drive the same policy with a clock and a message sink of its own.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <pcoll/pcoll.h>

#include <collectives/activation.hpp>

namespace pcoll {

using PolicyClock = std::chrono::steady_clock;

// What a policy knows of its handle, fixed at creation.
struct PolicyContext {
  int rank = 0;
  int size = 1;
  uint32_t handle = 0;             // the handle's id, as its notifications carry it
  pcoll_allreduce_opts_t opts{};   // with the mode's defaults resolved (mode_table.hpp)
};

// Where a rank counts its arrival at a round: one 64-bit fetch-add of 1 on word `word` of
// the counter words in the registered region of rank `host`. `before` is what that word
// holds from the earlier rounds that used it (every rank counts every round).
struct ArrivalCounter {
  int host = 0;
  size_t word = 0;
  uint64_t before = 0;
};

class StartPolicy {
 public:
  explicit StartPolicy(const PolicyContext& context) : context_(context) {}
  virtual ~StartPolicy() = default;
  StartPolicy(const StartPolicy&) = delete;
  StartPolicy& operator=(const StartPolicy&) = delete;

  // Whether `round` is synchronous: no rank joins it before its application posted it, and
  // nobody initiates it. Every round of a sync handle; every sync_every-th of the others.
  bool synchronous(uint64_t round) const {
    const uint32_t every = context_.opts.sync_every;
    return always_synchronous() || (every != 0 && (round + 1) % every == 0);
  }

  // This rank's application posted `round`, which nobody has activated yet: whether this
  // rank starts it now (it then sends the activation).
  virtual bool starts(uint64_t round, PolicyClock::time_point now) = 0;
  // Whether starts(round, now) reads `now` (a quorum's grace): the engine reads its clock
  // for those only (a clock read costs a twentieth of a small round).
  virtual bool starts_by_time(uint64_t /*round*/) const { return false; }

  // Whether a rank whose application posted `round`, which nobody has activated yet and
  // this rank does not start, joins it at once all the same, without starting it. Its
  // contribution is fresh whenever it joins, so joining before the round starts changes
  // no result, only lets its data move sooner; the ranks that have not posted still wait
  // for the activation. Majority: at balanced load its rounds then cost sync's, not the
  // drawn initiator's activation on top. Quorum: once its counted arrival says it will
  // not start the round (the join sets the initiator flag, so a rank that may yet start
  // it waits).
  virtual bool joins_when_posted(uint64_t /*round*/) const { return false; }

  // Whom a rank waits on while it waits to join `round` (not synchronous, not activated
  // yet), for the liveness probe: the one rank that may start it, or -1 when any may.
  virtual int awaited_initiator(uint64_t /*round*/) const { return -1; }

  // How this mode's activations spread (activation.hpp): over each initiator's own tree
  // where at most two ranks start a round, flooded over one tree where any number may.
  virtual activation::Spread spread() const { return activation::Spread::own_tree; }

  // Whether `rank` may have initiated `round`; a rank that initiated otherwise is a broken
  // peer, which every rank reports.
  virtual bool may_initiate(uint64_t /*round*/, int /*rank*/) const { return true; }

  // Arrival counting (quorum): the words this policy needs in each rank's registered
  // region, and where this rank counts its arrival at `round` after its application posted
  // it (nullopt: the mode counts nothing).
  virtual size_t counter_words() const { return 0; }
  // The handle's first round is `round`, not 0 (a handle resumed on the survivors of a
  // failure, over counter words that start at zero).
  virtual void begin_at(uint64_t /*round*/) {}
  virtual std::optional<ArrivalCounter> arrival_counter(uint64_t /*round*/) const { return std::nullopt; }
  // The fetch-add of arrival_counter(round) returned `old`. `counts` is false for a round
  // nobody starts early (synchronous, or a flush): it is counted all the same, so that the
  // word holds P arrivals per round. Returns how many ranks have arrived, this one included;
  // a counter outside its round's range is a protocol error.
  virtual uint64_t arrival_counted(uint64_t /*round*/, uint64_t /*old*/, bool /*counts*/,
                                   PolicyClock::time_point /*now*/) {
    return 0;
  }

  // When the engine must look at `next_round` again although nothing arrives (a quorum's
  // grace), given that rounds below `activated` were activated; nullopt: no such time.
  virtual std::optional<PolicyClock::time_point> deadline(uint64_t /*next_round*/, uint64_t /*activated*/,
                                                          PolicyClock::time_point /*now*/) const {
    return std::nullopt;
  }

 protected:
  virtual bool always_synchronous() const { return false; }
  const PolicyContext& context() const { return context_; }

 private:
  PolicyContext context_;
};

}  // namespace pcoll
