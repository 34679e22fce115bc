// solo (eager-SGD): the first rank whose application posts a round starts it; every other
// rank's engine joins at once with what it has ready. Any number of ranks may start a
// round at once, so its activations flood over one tree (activation.hpp): each rank joins
// a round once and passes the news on once, however many start it.
#include <collectives/mode_table.hpp>

namespace pcoll {
namespace {

class SoloPolicy final : public StartPolicy {
 public:
  using StartPolicy::StartPolicy;
  bool starts(uint64_t, PolicyClock::time_point) override { return true; }
  activation::Spread spread() const override { return activation::Spread::flood; }
};

}  // namespace

std::unique_ptr<StartPolicy> make_solo_policy(const PolicyContext& context) {
  return std::make_unique<SoloPolicy>(context);
}

}  // namespace pcoll
