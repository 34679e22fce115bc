// Bootstrap over the C callbacks of pcoll_private_bootstrap_t.
#include <api/foreign_bootstrap.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include <support/error.hpp>

namespace pcoll::bootstrap {
namespace {

class ForeignBootstrap final : public Bootstrap {
 public:
  explicit ForeignBootstrap(const pcoll_private_bootstrap_t& callbacks) : c_(callbacks) {}
  ~ForeignBootstrap() override {
    if (c_.destroy != nullptr) c_.destroy(c_.context);
  }
  ForeignBootstrap(const ForeignBootstrap&) = delete;
  ForeignBootstrap& operator=(const ForeignBootstrap&) = delete;

  int rank() const override { return c_.rank; }
  int size() const override { return c_.size; }
  std::string name() const override { return c_.name != nullptr ? c_.name : "foreign"; }

  std::vector<Blob> allgather(std::span<const std::byte> mine) override {
    std::vector<size_t> sizes(static_cast<size_t>(c_.size));
    void* data = nullptr;
    char error[512] = {};
    const int status = c_.allgather(c_.context, mine.data(), mine.size(), sizes.data(), &data, error, sizeof error);
    std::unique_ptr<void, decltype(&std::free)> owned(data, &std::free);
    if (status != 0) fail(static_cast<Errc>(status), name() + " bootstrap: " + error);
    std::vector<Blob> out(sizes.size());
    const auto* bytes = static_cast<const std::byte*>(data);
    size_t offset = 0;
    for (size_t r = 0; r < out.size(); ++r) {
      out[r].assign(bytes + offset, bytes + offset + sizes[r]);
      offset += sizes[r];
    }
    return out;
  }

  void barrier() override {
    char error[512] = {};
    if (const int status = c_.barrier(c_.context, error, sizeof error); status != 0)
      fail(static_cast<Errc>(status), name() + " bootstrap: " + error);
  }

 private:
  pcoll_private_bootstrap_t c_;
};

}  // namespace

std::unique_ptr<Bootstrap> make_foreign(const pcoll_private_bootstrap_t& callbacks) {
  if (callbacks.allgather == nullptr || callbacks.barrier == nullptr)
    invalid_argument("pcoll_private_init_with_bootstrap: allgather and barrier callbacks are required");
  if (callbacks.size < 1 || callbacks.rank < 0 || callbacks.rank >= callbacks.size)
    invalid_argument("pcoll_private_init_with_bootstrap: rank " + std::to_string(callbacks.rank) + " of size " +
                     std::to_string(callbacks.size) + " is not a rank of the job");
  return std::make_unique<ForeignBootstrap>(callbacks);
}

}  // namespace pcoll::bootstrap
