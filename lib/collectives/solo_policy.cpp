// solo (eager-SGD): the first rank whose application posts a round starts it; every other
// rank's engine joins at once with what it has ready. Concurrent starts are harmless: each
// rank joins a round once, however many roots activate it.
#include <collectives/mode_table.hpp>

namespace pcoll {
namespace {

class SoloPolicy final : public StartPolicy {
 public:
  using StartPolicy::StartPolicy;
  bool starts(uint64_t, PolicyClock::time_point) override { return true; }
};

}  // namespace

std::unique_ptr<StartPolicy> make_solo_policy(const PolicyContext& context) {
  return std::make_unique<SoloPolicy>(context);
}

}  // namespace pcoll
