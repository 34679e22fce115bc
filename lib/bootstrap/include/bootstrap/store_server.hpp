// The TCP store's server: one poll() loop on a thread of its own that authenticates ranks
// with the job key and runs sequence-numbered allgathers (a barrier is an allgather of
// empty blobs). pcollrun hosts one for its ranks; in manual mode rank 0 hosts it.
// tcp_store.hpp has the liveness rules it enforces.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace pcoll::bootstrap {

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
  // The job failed outside the store (its hosting rank abandons it): stop() then gives the
  // connected clients only kAbandonDrain to read their last answers. A rank stopped with
  // SIGSTOP keeps its connection open and would hold the hosting rank's error back for
  // the whole drain; nobody needs the store of a failed job any more.
  void abandon();
  static constexpr std::chrono::milliseconds kAbandonDrain{100};

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace pcoll::bootstrap
