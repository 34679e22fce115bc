// The TCP store's client: one rank's blocking connection to the store, and the PCOLL_ROOT
// address it connects to.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <bootstrap/bootstrap.hpp>

namespace pcoll::bootstrap {

// "host:port" or "[v6addr]:port" as given in PCOLL_ROOT.
struct StoreAddress {
  std::string host;
  uint16_t port = 0;
  std::string text() const;
};

// Parses `text`; errors are Errc::invalid_argument naming `variable`. port 0 is refused.
StoreAddress parse_store_address(const std::string& text, const std::string& variable);

// One rank's connection to the store. Blocking calls; each fails with pcoll::Error, never
// hangs: a store that closes the connection or stops answering for `timeout` is an error.
class StoreClient {
 public:
  // Connects (retrying until `timeout`, so rank 0 may start late, and when the store closes
  // the connection before answering hello, as it does to make room in a flood) and
  // authenticates.
  StoreClient(const StoreAddress& address, const std::string& job_key, int rank, int size,
              std::chrono::milliseconds timeout);
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  std::vector<Blob> allgather(std::span<const std::byte> mine);
  void barrier();
  // Tells the store this rank is done (clean exit) and closes the connection.
  void leave() noexcept;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace pcoll::bootstrap
