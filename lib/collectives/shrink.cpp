// Shrinking a failed communicator to its survivors (shrink.hpp).
#include <collectives/shrink.hpp>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <support/error.hpp>
#include <support/log.hpp>

namespace pcoll {
namespace {

// The shrunk communicator's bootstrap: its ranks are the survivors, its collectives go
// through the old communicator's survivors' channel. Only setup uses them; after it the
// old communicator may go (detach), and a collective then is an internal error.
class SurvivorBootstrap final : public bootstrap::Bootstrap {
 public:
  SurvivorBootstrap(Comm& old, std::vector<int> members, uint32_t epoch)
      : old_(&old), members_(std::move(members)), epoch_(epoch), name_(old.bootstrap_name()) {
    rank_ = static_cast<int>(std::find(members_.begin(), members_.end(), old.rank()) - members_.begin());
  }
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  std::string name() const override { return name_; }
  bool of_survivors() const override { return true; }
  std::vector<bootstrap::Blob> allgather(std::span<const std::byte> mine) override {
    if (old_ == nullptr)
      fail(Errc::internal, "the bootstrap of a shrunk communicator was used after its setup");
    return old_->survivors_allgather(epoch_, step_++, members_, mine);
  }
  void barrier() override { allgather({}); }
  void detach() { old_ = nullptr; }

 private:
  Comm* old_;
  std::vector<int> members_;
  uint32_t epoch_;
  uint32_t step_ = 0;
  std::string name_;
  int rank_ = 0;
};

}  // namespace

std::unique_ptr<Comm> shrink(Comm& comm) {
  const Comm::Survivors agreed = comm.agree_on_survivors();
  std::vector<int> members;
  for (int r = 0; r < comm.size(); ++r)
    if (!std::binary_search(agreed.failed.begin(), agreed.failed.end(), r)) members.push_back(r);
  std::string failed_text;
  for (const int r : agreed.failed) {
    if (!failed_text.empty()) failed_text.push_back(' ');
    failed_text.append(std::to_string(r));
  }
  log::info("shrink: the survivors agreed on failed ranks [" + failed_text + "]; " + std::to_string(members.size()) +
            " of " + std::to_string(comm.size()) + " ranks go on");
  auto boot = std::make_unique<SurvivorBootstrap>(comm, members, agreed.epoch);
  SurvivorBootstrap& setup = *boot;
  auto shrunk = std::make_unique<Comm>(std::move(boot), comm.transport_factory());
  setup.detach();
  shrunk->set_shrunk_from(comm);
  return shrunk;
}

}  // namespace pcoll
