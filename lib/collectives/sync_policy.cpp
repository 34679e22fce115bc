// sync: the ordinary allreduce. Every round is synchronous: a rank joins once its own
// application posted the round, and nobody initiates.
#include <collectives/mode_table.hpp>

namespace pcoll {
namespace {

class SyncPolicy final : public StartPolicy {
 public:
  using StartPolicy::StartPolicy;
  bool starts(uint64_t, PolicyClock::time_point) override { return false; }

 protected:
  bool always_synchronous() const override { return true; }
};

}  // namespace

std::unique_ptr<StartPolicy> make_sync_policy(const PolicyContext& context) {
  return std::make_unique<SyncPolicy>(context);
}

}  // namespace pcoll
