// The counters of one handle since creation (pcoll_allreduce_stats_t,
// docs/observability.md), kept as an observer of its rounds: a few additions per round.
#pragma once

#include <cstdint>
#include <vector>

#include <collectives/round_observer.hpp>

namespace pcoll {

struct AllreduceStats {
  uint64_t rounds = 0;
  uint64_t flushes = 0;
  uint64_t flushes_carried = 0;
  uint64_t rounds_initiated = 0;
  uint64_t rounds_while_computing = 0;
  uint64_t blocked_ns = 0;
  uint64_t bytes_written = 0;
  uint64_t bytes_read = 0;         // from peers' memory mapped here (the direct plan)
  uint64_t bytes_network = 0;      // sent to ranks on other nodes
  uint64_t messages_network = 0;   // messages, notices and atomics sent to ranks on other nodes
  uint64_t memory_bytes = 0;       // filled when the stats are read (HandleMemory)
  uint64_t registered_bytes = 0;
  uint64_t memory_traffic_bytes = 0;  // filled when the stats are read (HandleMemory::traffic_bytes)
  std::vector<uint64_t> fresh_rounds;      // [rank], flush rounds excluded
  std::vector<uint64_t> late_rounds;       // [rank], flush rounds excluded
  std::vector<uint64_t> longest_late_run;  // [rank]
  std::vector<uint64_t> fresh_histogram;   // [fresh count 0..P], flush rounds excluded
};

class StatsObserver final : public RoundObserver {
 public:
  explicit StatsObserver(int ranks);
  const AllreduceStats& stats() const { return stats_; }

  void joined(uint64_t round, bool fresh, bool flush, bool carried) override;
  void completed(const RoundInfo& info, bool initiated, bool flush, bool while_computing) override;
  void wrote(uint64_t bytes) override { stats_.bytes_written += bytes; }
  void read(uint64_t bytes) override { stats_.bytes_read += bytes; }
  void sent_to_network(uint64_t bytes) override {
    stats_.bytes_network += bytes;
    ++stats_.messages_network;
  }
  void blocked(uint64_t ns) override { stats_.blocked_ns += ns; }

 private:
  AllreduceStats stats_;
  std::vector<uint64_t> late_run_;  // [rank]: consecutive late rounds up to the last one
};

}  // namespace pcoll
