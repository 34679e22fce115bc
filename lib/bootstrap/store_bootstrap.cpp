// make_store(): the Bootstrap over the TCP store, configured from PCOLL_RANK, PCOLL_SIZE,
// PCOLL_ROOT and PCOLL_JOB_KEY. Under pcollrun the launcher hosts the server; in manual mode
// rank 0 hosts it in a thread of its own (tcp_store.hpp).
#include <cstdint>
#include <string>
#include <utility>

#include <bootstrap/store_client.hpp>
#include <bootstrap/store_wire.hpp>
#include <bootstrap/tcp_store.hpp>
#include <support/error.hpp>
#include <support/log.hpp>
#include <support/support_settings.hpp>

namespace pcoll::bootstrap {
namespace {

class StoreBootstrap final : public Bootstrap {
 public:
  StoreBootstrap(int rank, int size, bool manual, std::unique_ptr<StoreServer> server,
                 std::unique_ptr<StoreClient> client)
      : rank_(rank), size_(size), manual_(manual), server_(std::move(server)), client_(std::move(client)) {}

  ~StoreBootstrap() override {
    if (manual_ && !abandoned_) {
      // Rank 0 hosts the store: nobody may leave (and rank 0 may not take the store down)
      // while another rank still needs it.
      try {
        client_->barrier();
      } catch (const Error& e) {
        log::warn(std::string("bootstrap: final barrier failed: ") + e.what());
      }
    }
    client_->leave();
    client_.reset();
    server_.reset();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return manual_ ? "manual" : "pcollrun"; }
  std::vector<Blob> allgather(std::span<const std::byte> mine) override { return client_->allgather(mine); }
  void barrier() override { client_->barrier(); }
  // A failed job: rank 0 may take the store down without waiting, and the others need it
  // no more (their own final barriers then end at once, the store being gone).
  void abandon() override {
    abandoned_ = true;
    if (server_) server_->abandon();
  }

 private:
  bool abandoned_ = false;
  int rank_;
  int size_;
  bool manual_;
  std::unique_ptr<StoreServer> server_;  // rank 0 in manual mode only
  std::unique_ptr<StoreClient> client_;
};

}  // namespace

std::unique_ptr<Bootstrap> make_store() {
  const auto need = [](SupportSettings::Any name) {
    auto value = SupportSettings::raw(name);
    if (!value)
      invalid_argument(std::string(name.setting().name) +
                       " is not set; the store bootstrap needs PCOLL_RANK, PCOLL_SIZE, "
                       "PCOLL_ROOT=host:port and PCOLL_JOB_KEY (or run under pcollrun)");
    return *value;
  };
  const int size = static_cast<int>(SupportSettings::parse_unsigned("PCOLL_SIZE", need("PCOLL_SIZE")));
  const std::string rank_text = need("PCOLL_RANK");
  const uint64_t rank = SupportSettings::parse_unsigned("PCOLL_RANK", rank_text);
  if (rank >= static_cast<uint64_t>(size))
    invalid_argument("PCOLL_RANK=" + rank_text + " must be below PCOLL_SIZE=" + std::to_string(size));
  const StoreAddress root = parse_store_address(need("PCOLL_ROOT"), "PCOLL_ROOT");
  const std::string key = need("PCOLL_JOB_KEY");
  if (key.size() > wire::kMaxKeyBytes)
    invalid_argument("PCOLL_JOB_KEY is longer than " + std::to_string(wire::kMaxKeyBytes) + " bytes");
  const bool manual = SupportSettings::get_choice("PCOLL_LAUNCHER") == "manual";
  const std::chrono::milliseconds timeout(SupportSettings::get_unsigned("PCOLL_TIMEOUT_MS"));
  log::set_rank(static_cast<int>(rank));

  std::unique_ptr<StoreServer> server;
  if (manual && rank == 0) {
    StoreServerConfig config;
    config.bind_host = root.host;
    config.port = root.port;
    config.job_key = key;
    config.size = size;
    config.timeout = timeout;
    server = std::make_unique<StoreServer>(config);
  }
  auto client = std::make_unique<StoreClient>(root, key, static_cast<int>(rank), size, timeout);
  return std::make_unique<StoreBootstrap>(static_cast<int>(rank), size, manual, std::move(server),
                                          std::move(client));
}

}  // namespace pcoll::bootstrap
