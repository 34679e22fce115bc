// One simulated job of pcoll_sim: every rank an application actor and a progress-engine
// actor, every node a NIC actor, all on SimGrid (S4U). The engine actor runs pcoll's own
// round logic: the join rule (join_rule.hpp), the mode's start policy (mode_table.hpp),
// the activation trees and majority draw (activation.hpp) and the round executor the
// library would choose (executor_choice.hpp: recursive doubling, Rabenseifner with its
// fold-in, or the direct plan), through an ExecutorPort whose writes are SimGrid
// communications of the engine's sizes and whose reductions cost time at the platform's
// rates.
//
// SimGrid has no one-sided operations; they are modelled so:
//   - a write with notification (a data chunk, a credit, an activation, a direct-plan
//     phase notice) is a communication of the write's bytes to a mailbox of the target's
//     node (writes with a payload and notices without have one each), which its NIC actor
//     receives at once (a permanent receiver: transfers flow without waiting for the
//     target's engine, as RDMA does) and queues for the target's engine as each lands,
//     whatever was posted before it; the engine pays the notice's handling cost when it
//     takes it;
//   - a remote fetch-add (quorum's arrival counting) is an 8-byte request to the NIC actor
//     of the counter's node, which applies it to the counter without the target's engine
//     and answers with the old value: a network round trip, no remote CPU;
//   - the local completion of a large write (ExecutorPort::settle_writes) waits for its
//     communication to end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <simgrid/s4u.hpp>

#include <collectives/activation.hpp>
#include <pcoll/pcoll.h>

#include "imbalance_options.hpp"
#include "sim_platform.hpp"

namespace pcoll::sim {

// What one mode's run produced, over every rank.
struct ModeOutcome {
  perf::ModeSpec mode;
  double wall_s = 0;             // slowest rank, flush included
  double fresh_fraction = 1;     // fresh contributions of the steps' rounds / (steps * P)
  uint64_t max_late_run = 0;     // longest streak of consecutive late rounds of one rank
  double engine_cpu_s = 0;       // simulated CPU time of every rank's engine
  double call_us_p50 = 0;        // p50 over rounds of the slowest rank's run() time
  double activation_us = 0;      // mean over rounds: last join minus first join
  double exchange_us = 0;        // mean over rounds: last completion minus last join
  double blocked_us = 0;         // mean per rank and round: time an application waited in run()
  double reduce_us = 0;          // mean per rank and round: engine time reducing and copying
  double messages_per_round = 0; // per rank: writes, notifications and atomics sent
  double bytes_per_round = 0;    // per rank: bytes written
  std::string plan;              // the executor the ranks ran (rank 0's)
};

struct JobSpec {
  int ranks = 1;
  perf::ImbalanceOptions options;
  std::vector<std::vector<double>> schedule;  // compute_ms[step][rank]
  Platform platform;
  std::string trace_dir;  // non-empty: Chrome traces of every rank's rounds
};

// `opts` with `mode`'s options applied and its defaults resolved for `ranks` (the mode
// table's checks); perf::Error(PCOLL_ERR_INVALID_ARGUMENT) naming the mode when they refuse.
pcoll_allreduce_opts_t mode_options(const perf::ModeSpec& mode, pcoll_allreduce_opts_t opts, int ranks);

class RankEngine;

// The simulated job. Build it inside a SimGrid engine whose platform is loaded, then run
// the engine: every mode of the options runs after the other, as pcoll_imbalance runs them.
class SimJob {
 public:
  explicit SimJob(JobSpec spec);
  ~SimJob();
  SimJob(const SimJob&) = delete;
  SimJob& operator=(const SimJob&) = delete;

  // Starts the actors; the caller runs the SimGrid engine, then reads outcomes().
  void start();
  const std::vector<ModeOutcome>& outcomes() const { return outcomes_; }

  // --- Shared with the actors.
  const JobSpec& spec() const { return spec_; }
  int node_of(int rank) const { return rank / spec_.platform.ranks_per_node; }
  // The activation trees every rank's engine uses for the mode running (one copy: O(P)).
  const activation::Trees& trees() const { return *trees_; }
  // The node's mailbox for writes with a payload, or for notices without one.
  simgrid::s4u::Mailbox* nic_mailbox(int node, bool payload) const {
    return nic_mailboxes_[2 * static_cast<size_t>(node) + (payload ? 1 : 0)];
  }
  RankEngine& engine(int rank) { return *engines_[static_cast<size_t>(rank)]; }
  // Quorum counters: word `word` of rank `host`'s counter region.
  uint64_t fetch_add(int host, size_t word);
  // The mode being run, by index into spec().options.modes.
  size_t mode_index() const { return mode_index_; }

 private:
  friend class RankEngine;
  void application(int rank);
  double sleep_overshoot(int rank, uint64_t step) const;
  void nic(int node);
  void begin_mode(size_t index);
  void end_mode(size_t index);

  JobSpec spec_;
  std::vector<simgrid::s4u::Host*> hosts_;              // [node]
  std::unique_ptr<activation::Trees> trees_;
  std::vector<simgrid::s4u::Mailbox*> nic_mailboxes_;   // [2 * node + payload]
  std::vector<std::unique_ptr<RankEngine>> engines_;    // [rank]
  std::vector<std::vector<uint64_t>> counters_;         // [rank][word]
  simgrid::s4u::BarrierPtr barrier_;
  size_t mode_index_ = 0;
  double mode_start_ = 0;
  std::vector<ModeOutcome> outcomes_;

  // The current mode's rounds as every rank saw them: [round].
  struct RoundRecord {
    double first_join = -1, last_join = 0, last_complete = 0, slowest_call = 0;
    uint32_t fresh = 0;
    int initiator = -1;  // the lowest rank that activated it (the trace's initiator)
  };
  std::vector<RoundRecord> rounds_;
};

}  // namespace pcoll::sim
