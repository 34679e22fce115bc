// majority (eager-SGD): one initiator per round, drawn from the seed every rank shares
// (activation.hpp: majority_initiator); only it may start the round, once its application
// posted it. In expectation half of the ranks have posted by then. A rank that posted
// joins at once without starting it (joins_when_posted): the round still waits for the
// drawn rank, whose activation brings in the ranks that have not posted.
#include <collectives/activation.hpp>
#include <collectives/mode_table.hpp>

namespace pcoll {
namespace {

class MajorityPolicy final : public StartPolicy {
 public:
  using StartPolicy::StartPolicy;
  bool starts(uint64_t round, PolicyClock::time_point) override { return drawn(round) == context().rank; }
  bool joins_when_posted(uint64_t) const override { return true; }
  int awaited_initiator(uint64_t round) const override { return drawn(round); }
  bool may_initiate(uint64_t round, int rank) const override { return rank == drawn(round); }

 private:
  // The engine asks several times a round (starts, the result's check, the liveness probe).
  int drawn(uint64_t round) const {
    if (round != drawn_round_) {
      drawn_round_ = round;
      drawn_ = activation::majority_initiator(context().opts.seed, context().handle, round, context().size);
    }
    return drawn_;
  }
  mutable uint64_t drawn_round_ = UINT64_MAX;
  mutable int drawn_ = -1;
};

}  // namespace

std::unique_ptr<StartPolicy> make_majority_policy(const PolicyContext& context) {
  return std::make_unique<MajorityPolicy>(context);
}

}  // namespace pcoll
