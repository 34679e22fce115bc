// The TCP key/blob store behind pcollrun and the manual PCOLL_ROOT mode: a small server that
// authenticates ranks with the job key and runs sequence-numbered allgathers (barrier is an
// allgather of empty blobs), and the client each rank uses to reach it.
//
// Used two ways:
//  - pcollrun hosts a StoreServer on 127.0.0.1 with a fresh job key and starts the ranks
//    with PCOLL_LAUNCHER=pcollrun (name() "pcollrun");
//  - manual multi-host mode: the user exports PCOLL_RANK/SIZE/ROOT/JOB_KEY on every host and
//    rank 0 hosts the StoreServer in a thread of its own process (name() "manual").
//
// Liveness: a rank that never connects fails the pending collective with Errc::timeout after
// PCOLL_TIMEOUT_MS; a rank whose connection drops fails it at once (Errc::peer_failed). A rank
// that is connected but has not yet called the collective is alive (its process still holds
// the socket), so it is waited for: a slow application is not a failure.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bootstrap.hpp"

namespace pcoll::bootstrap {

// Largest blob one rank may contribute to one allgather; larger messages are rejected.
inline constexpr size_t kMaxStoreBlobBytes = size_t{64} << 20;

// "host:port" or "[v6addr]:port" as given in PCOLL_ROOT.
struct StoreAddress {
  std::string host;
  uint16_t port = 0;
  std::string text() const;
};

// Parses `text`; errors are Errc::invalid_argument naming `variable`. port 0 is refused.
StoreAddress parse_store_address(const std::string& text, const std::string& variable);

// A fresh random job key (64 hex digits from getrandom()).
std::string make_job_key();

struct StoreServerConfig {
  std::string bind_host = "127.0.0.1";  // address to listen on; unlocal names fall back to any
  uint16_t port = 0;                    // 0: the kernel picks one (see StoreServer::port())
  std::string job_key;                  // every connection must present it
  int size = 1;                         // ranks in the job
  std::chrono::milliseconds timeout{30000};
};

// Listens at once (bind errors throw Errc::bootstrap) and serves on a thread of its own
// until stop() or destruction.
class StoreServer {
 public:
  explicit StoreServer(const StoreServerConfig& config);
  ~StoreServer();  // stop()
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  uint16_t port() const;
  // Stops accepting, lets connected clients read what was sent to them (bounded by the
  // timeout; after a failed collective, keeps answering them until they leave, so a rank
  // that comes late hears what failed) and joins the thread. Idempotent.
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// One rank's connection to the store. Blocking calls; each fails with pcoll::Error, never
// hangs: a store that closes the connection or stops answering for `timeout` is an error.
class StoreClient {
 public:
  // Connects (retrying until `timeout`, so rank 0 may start late) and authenticates.
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

// Bootstrap from PCOLL_RANK, PCOLL_SIZE, PCOLL_ROOT, PCOLL_JOB_KEY (and PCOLL_LAUNCHER,
// PCOLL_TIMEOUT_MS). In manual mode rank 0 also hosts the server at PCOLL_ROOT, and the
// destructor ends with a barrier so that nobody loses the store early.
std::unique_ptr<Bootstrap> make_store();

}  // namespace pcoll::bootstrap
