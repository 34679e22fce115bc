// The in-process bootstrap: the ranks of one job are threads of this process, and their
// allgathers and barriers meet in a store in memory (one mutex, one condition variable).
// What tests/threads/ runs the engine on, so that a whole job can be stepped through in one
// debugger and checked by ThreadSanitizer. Never chosen from the environment: the program
// that starts the threads makes the store and hands each thread its rank's bootstrap.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include <bootstrap/bootstrap.hpp>

namespace pcoll::bootstrap {

// One job's meeting point, shared by its ranks. The k-th collective of every rank meets the
// k-th collective of the others, as on the TCP store.
class InprocStore {
 public:
  // A rank that does not join a collective within `timeout` gives the ranks waiting in it
  // Errc::timeout naming the missing rank(s).
  InprocStore(int size, std::chrono::milliseconds timeout);

  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // Collective: rank `rank` contributes `mine` and receives every rank's blob in rank order.
  std::vector<Blob> allgather(int rank, std::span<const std::byte> mine);

 private:
  struct Exchange {
    std::vector<Blob> blobs;
    std::vector<bool> joined;  // per rank
    int arrived = 0;
    int collected = 0;  // ranks that took the result; the last one erases the exchange
  };

  const int size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable all_arrived_;
  std::vector<uint64_t> next_sequence_;  // per rank: its next collective's number
  std::map<uint64_t, Exchange> exchanges_;  // by collective number, until all collected
};

// Rank `rank` of the job `store` holds (name "inproc").
std::unique_ptr<Bootstrap> make_inproc(std::shared_ptr<InprocStore> store, int rank);

}  // namespace pcoll::bootstrap
