// The in-process bootstrap (inproc_store.hpp): allgather and barrier between threads.
#include <bootstrap/inproc_store.hpp>

#include <string>
#include <utility>

#include <support/error.hpp>

namespace pcoll::bootstrap {
namespace {

// "rank 3", "ranks 1, 4 and 6"
std::string rank_list(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += i + 1 == ranks.size() ? " and " : ", ";
    out += std::to_string(ranks[i]);
  }
  return out;
}

class InprocBootstrap final : public Bootstrap {
 public:
  InprocBootstrap(std::shared_ptr<InprocStore> store, int rank) : store_(std::move(store)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return store_->size(); }
  std::string name() const override { return "inproc"; }
  std::vector<Blob> allgather(std::span<const std::byte> mine) override { return store_->allgather(rank_, mine); }
  void barrier() override { store_->allgather(rank_, {}); }

 private:
  std::shared_ptr<InprocStore> store_;
  int rank_;
};

}  // namespace

InprocStore::InprocStore(int size, std::chrono::milliseconds timeout)
    : size_(size), timeout_(timeout), next_sequence_(size > 0 ? static_cast<size_t>(size) : 0, 0) {
  if (size < 1) invalid_argument("in-process bootstrap: a job needs at least one rank, not " + std::to_string(size));
}

std::vector<Blob> InprocStore::allgather(int rank, std::span<const std::byte> mine) {
  if (rank < 0 || rank >= size_)
    invalid_argument("in-process bootstrap: rank " + std::to_string(rank) + " is not in a job of " +
                     std::to_string(size_));
  std::unique_lock lock(mutex_);
  const uint64_t sequence = next_sequence_[rank]++;
  Exchange& exchange = exchanges_[sequence];  // std::map: stays put while others are added
  if (exchange.blobs.empty()) {
    exchange.blobs.resize(size_);
    exchange.joined.assign(size_, false);
  }
  exchange.blobs[rank].assign(mine.begin(), mine.end());
  exchange.joined[rank] = true;
  if (++exchange.arrived == size_) all_arrived_.notify_all();
  if (!all_arrived_.wait_for(lock, timeout_, [&] { return exchange.arrived == size_; })) {
    // The exchange stays (never fully collected): a late rank finds its slot and times out
    // or completes on its own, instead of meeting the next collective by mistake.
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r)
      if (!exchange.joined[r]) missing.push_back(r);
    fail(Errc::timeout, rank_list(missing) + " did not join collective #" + std::to_string(sequence) +
                            " of the in-process job within " + std::to_string(timeout_.count()) +
                            " ms (PCOLL_TIMEOUT_MS); rank " + std::to_string(rank) + " waited for " +
                            (missing.size() == 1 ? "it" : "them"));
  }
  std::vector<Blob> result = exchange.blobs;
  if (++exchange.collected == size_) exchanges_.erase(sequence);
  return result;
}

std::unique_ptr<Bootstrap> make_inproc(std::shared_ptr<InprocStore> store, int rank) {
  if (!store) invalid_argument("in-process bootstrap: no store");
  if (rank < 0 || rank >= store->size())
    invalid_argument("in-process bootstrap: rank " + std::to_string(rank) + " is not in a job of " +
                     std::to_string(store->size()));
  return std::make_unique<InprocBootstrap>(std::move(store), rank);
}

}  // namespace pcoll::bootstrap
