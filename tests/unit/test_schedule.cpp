// Unit tests of the reduction plans (collectives/reduce_plan.hpp) and of the executor that
// runs them (collectives/plan_executor.hpp): structure rules checked on every plan, and
// in-memory simulations of P ranks executing their plans with the real kernels, which must
// leave every rank with the exact (integer) or bitwise identical (float) reduction. The
// asynchronous simulations drive the engine's own PlanExecutor, chunk by chunk, under every
// order a network may deliver in, so what they check is the code the engine runs. Pure
// logic: no transport involved.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <collectives/dtype.hpp>
#include <collectives/notification.hpp>
#include <collectives/plan_executor.hpp>
#include <collectives/reduce_kernels.hpp>
#include <collectives/reduce_plan.hpp>
#include <support/error.hpp>

using namespace pcoll;

namespace {

constexpr ReduceAlgorithm kAlgorithms[] = {ReduceAlgorithm::recursive_doubling,
                                           ReduceAlgorithm::rabenseifner};
// Every P up to 33 (two powers of two and the fold-ins around them); 17 under the
// sanitizers, where the full range takes two minutes of CI.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kMaxTestedRanks = 17;
#else
constexpr int kMaxTestedRanks = 33;
#endif
constexpr std::size_t kBigCount = (std::size_t{1} << 20) + 3;
// Big vectors only for a few P, to keep the suite fast: powers of two and fold-ins, more
// of them for Rabenseifner, the algorithm meant for big vectors.
std::vector<int> big_ranks_for(ReduceAlgorithm algorithm) {
  if (algorithm == ReduceAlgorithm::rabenseifner) return {1, 2, 3, 8, 13};
  return {3, 4};
}

// node_leader's node maps (node_of[rank]): one node, block and cyclic placements, nodes of
// different sizes scattered over the ranks, one rank per node.
std::vector<std::vector<int>> node_maps() {
  std::vector<std::vector<int>> maps;
  for (int size = 1; size <= 5; ++size) maps.emplace_back(static_cast<std::size_t>(size), 0);
  maps.push_back({0, 0, 1, 1});
  maps.push_back({0, 1, 0, 1});
  maps.push_back({0, 2, 0, 1, 2, 0});  // nodes of 3, 1 and 2 ranks
  std::vector<int> block(16), cyclic(15), scattered;
  for (int r = 0; r < 16; ++r) block[static_cast<std::size_t>(r)] = r / 4;   // 4 nodes x 4
  for (int r = 0; r < 15; ++r) cyclic[static_cast<std::size_t>(r)] = r % 5;  // 5 nodes x 3
  // 7 nodes of 1..7 ranks: node labels in order, dealt out with a stride coprime to 28.
  std::vector<int> labels;
  for (int node = 0; node < 7; ++node) labels.insert(labels.end(), static_cast<std::size_t>(node + 1), node);
  for (std::size_t r = 0; r < labels.size(); ++r) scattered.push_back(labels[(r * 11) % labels.size()]);
  maps.push_back(block);
  maps.push_back(cyclic);
  maps.push_back(scattered);
  maps.push_back({3, 0, 4, 1, 2});  // one rank per node
  return maps;
}
// Big vectors for a cyclic placement and for uneven nodes.
std::vector<std::vector<int>> big_node_maps() { return {{0, 1, 0, 1}, {0, 2, 0, 1, 2, 0}}; }

// node_rails' node maps, every node holding the same number of ranks: block and cyclic
// placements, nodes scattered over the ranks, one rank per node, one node.
std::vector<int> placed(int nodes, int node_size, bool cyclic) {
  std::vector<int> node_of;
  for (int r = 0; r < nodes * node_size; ++r) node_of.push_back(cyclic ? r % nodes : r / node_size);
  return node_of;
}
std::vector<std::vector<int>> equal_node_maps() {
  std::vector<std::vector<int>> maps = {placed(2, 2, false), placed(2, 2, true), placed(3, 3, true),
                                        placed(4, 4, false)};
  // 5 nodes x 2: node labels in order, dealt out with a stride coprime to 10.
  const std::vector<int> labels = placed(5, 2, false);
  std::vector<int> scattered;
  for (std::size_t r = 0; r < labels.size(); ++r) scattered.push_back(labels[(r * 3) % labels.size()]);
  maps.push_back(scattered);
  maps.push_back({1, 2, 0});           // 3 nodes x 1
  maps.push_back(placed(1, 5, false));  // 1 node x 5
  maps.push_back(placed(6, 3, true));
  return maps;
}
// Big vectors for a cyclic placement, and for 3 nodes x 2, whose rails fold in.
std::vector<std::vector<int>> big_equal_node_maps() { return {placed(2, 2, true), placed(3, 2, true)}; }

// Makes one rank's plan of a job: (rank, count, chunk_elems, pool_chunks).
using PlanMaker = std::function<ReducePlan(int, std::size_t, std::size_t, std::size_t)>;

// A job: its ranks, the algorithm they run, and how each makes its plan.
struct Job {
  std::string name;  // algorithm and ranks, for messages
  ReduceAlgorithm algorithm = ReduceAlgorithm::recursive_doubling;
  int ranks = 1;
  PlanMaker make;
};

Job uniform_job(ReduceAlgorithm algorithm, int ranks) {
  return Job{std::string(algorithm_name(algorithm)) + " P=" + std::to_string(ranks), algorithm, ranks,
             [algorithm, ranks](int rank, std::size_t count, std::size_t chunk_elems, std::size_t pool_chunks) {
               return make_plan(algorithm, ranks, rank, count, chunk_elems, pool_chunks);
             }};
}

Job node_job(const std::vector<int>& node_of, ReduceAlgorithm algorithm = ReduceAlgorithm::node_leader) {
  std::string name = std::string(algorithm_name(algorithm)) + " nodes";
  for (std::size_t r = 0; r < node_of.size(); ++r) {
    name += r == 0 ? '=' : ',';
    name += std::to_string(node_of[r]);
  }
  return Job{name, algorithm, static_cast<int>(node_of.size()),
             [node_of, algorithm](int rank, std::size_t count, std::size_t chunk_elems, std::size_t pool_chunks) {
               return algorithm == ReduceAlgorithm::node_rails
                          ? node_rails(node_of, rank, count, chunk_elems, pool_chunks)
                          : node_leader(node_of, rank, count, chunk_elems, pool_chunks);
             }};
}

// Recursive doubling and Rabenseifner for every P up to kMaxTestedRanks.
std::vector<Job> uniform_jobs() {
  std::vector<Job> jobs;
  for (const ReduceAlgorithm algorithm : kAlgorithms) {
    for (int ranks = 1; ranks <= kMaxTestedRanks; ++ranks) jobs.push_back(uniform_job(algorithm, ranks));
  }
  return jobs;
}

std::vector<Job> node_jobs() {
  std::vector<Job> jobs;
  for (const std::vector<int>& node_of : node_maps()) jobs.push_back(node_job(node_of));
  for (const std::vector<int>& node_of : equal_node_maps()) {
    jobs.push_back(node_job(node_of, ReduceAlgorithm::node_rails));
  }
  return jobs;
}

std::vector<Job> all_jobs() {
  std::vector<Job> jobs = uniform_jobs();
  for (Job& job : node_jobs()) jobs.push_back(std::move(job));
  return jobs;
}

// The jobs that also run kBigCount.
std::vector<Job> big_jobs() {
  std::vector<Job> jobs;
  for (const ReduceAlgorithm algorithm : kAlgorithms) {
    for (const int ranks : big_ranks_for(algorithm)) jobs.push_back(uniform_job(algorithm, ranks));
  }
  for (const std::vector<int>& node_of : big_node_maps()) jobs.push_back(node_job(node_of));
  for (const std::vector<int>& node_of : big_equal_node_maps()) {
    jobs.push_back(node_job(node_of, ReduceAlgorithm::node_rails));
  }
  return jobs;
}

std::vector<std::size_t> counts_for(int ranks) {
  const auto p = static_cast<std::size_t>(ranks);
  std::set<std::size_t> counts = {0, 1, 2, 7, p - 1, p, p + 1, 1000};
  return {counts.begin(), counts.end()};
}

// Several chunks per transfer for most counts, so chunk boundaries are exercised.
std::size_t chunk_size_for(std::size_t count) { return std::max<std::size_t>(1, count / 3 + 1); }

// A node map as the tests see it, worked out apart from the plan generator.
struct NodeShape {
  int nodes = 0;
  int node_levels = 0;         // Ln: ceil(log2) of the largest node's ranks
  int leader_levels = 0;       // L: log2 of the largest power of two <= nodes
  std::vector<int> local;      // [rank]: its position among its node's ranks
  std::vector<int> node_size;  // [node]: its ranks

  std::uint32_t first_leader_tag() const { return static_cast<std::uint32_t>(node_levels); }
  std::uint32_t last_leader_tag() const { return static_cast<std::uint32_t>(node_levels + leader_levels + 1); }
};

NodeShape shape_of(const std::vector<int>& node_of) {
  NodeShape shape;
  shape.nodes = *std::max_element(node_of.begin(), node_of.end()) + 1;
  shape.node_size.assign(static_cast<std::size_t>(shape.nodes), 0);
  for (const int node : node_of) shape.local.push_back(shape.node_size[static_cast<std::size_t>(node)]++);
  const int largest = *std::max_element(shape.node_size.begin(), shape.node_size.end());
  while ((1 << shape.node_levels) < largest) ++shape.node_levels;
  while ((2 << shape.leader_levels) <= shape.nodes) ++shape.leader_levels;
  return shape;
}

// Every rank's plan of a job, in rank order.
std::vector<ReducePlan> plans_for(const Job& job, std::size_t count, std::size_t chunk_elems) {
  std::vector<ReducePlan> plans;
  for (int r = 0; r < job.ranks; ++r) plans.push_back(job.make(r, count, chunk_elems, kUnboundedPool));
  return plans;
}

std::vector<ReducePlan> plans_for(const Job& job, std::size_t count) {
  return plans_for(job, count, chunk_size_for(count));
}

std::string describe(const Job& job, std::size_t count) { return job.name + " count=" + std::to_string(count); }

// Calls check(job, count) on every small configuration of the given jobs.
template <class Check>
void for_each_configuration_of(const std::vector<Job>& jobs, Check check) {
  for (const Job& job : jobs) {
    for (const std::size_t count : counts_for(job.ranks)) check(job, count);
  }
}

// Every algorithm: recursive doubling and Rabenseifner over P ranks, node_leader and
// node_rails over their node maps.
template <class Check>
void for_each_configuration(Check check) {
  for_each_configuration_of(all_jobs(), check);
}

const Step* find_step(const ReducePlan& plan, std::uint32_t tag) {
  for (const Step& s : plan.steps) {
    if (s.tag == tag) return &s;
  }
  return nullptr;
}

bool overlaps(std::size_t a_offset, std::size_t a_count, std::size_t b_offset, std::size_t b_count) {
  return a_count != 0 && b_count != 0 && a_offset < b_offset + b_count && b_offset < a_offset + a_count;
}

// --- simulation ------------------------------------------------------------------------------

// memcpy / memcmp that accept the null data() of empty vectors.
void copy_bytes(std::byte* destination, const std::byte* source, std::size_t bytes) {
  if (bytes != 0) std::memcpy(destination, source, bytes);
}
bool same_bytes(const void* a, const void* b, std::size_t bytes) {
  return bytes == 0 || std::memcmp(a, b, bytes) == 0;
}

// One simulated rank: its work buffer and the landing area of one round parity.
struct SimRank {
  std::vector<std::byte> work;
  std::vector<std::byte> landing;
};

// Where one chunk of a transfer lands at the receiver in `round`, as the engine addresses it.
std::byte* landing_place(SimRank& receiver, const Transfer& transfer, const Chunk& chunk, std::size_t esize,
                         std::uint64_t round = 0) {
  return transfer.lands_in_result() ? receiver.work.data() + chunk.offset * esize
                                    : receiver.landing.data() + transfer.landing_offset(round, chunk.index) * esize;
}

// The engine's reduction of one arrived chunk: from the landing slot into the work buffer.
void reduce_chunk(SimRank& rank, const Transfer& transfer, const Chunk& chunk, pcoll_dtype_t dtype, pcoll_op_t op,
                  std::uint64_t round = 0) {
  const std::size_t esize = wire_element_bytes(dtype);
  reduce_into(dtype, op, rank.work.data() + chunk.offset * esize,
              rank.landing.data() + transfer.landing_offset(round, chunk.index) * esize, chunk.count);
}

// Executes the plans of all ranks tag by tag. Within a tag every write happens before any
// reduction (a rank reduces only after its own send completed, and the peer's data has
// arrived); writes go rank by rank without snapshots, so a plan that wrote into a range its
// receiver still sends in the same step would corrupt data.
void simulate(const std::vector<ReducePlan>& plans, pcoll_dtype_t dtype, pcoll_op_t op,
              std::vector<SimRank>& sim) {
  const std::size_t esize = wire_element_bytes(dtype);
  for (std::uint32_t tag = 0; tag < plans.at(0).tag_count; ++tag) {
    for (std::size_t r = 0; r < plans.size(); ++r) {
      const Step* step = find_step(plans[r], tag);
      if (step == nullptr || !step->sends()) continue;
      const auto q = static_cast<std::size_t>(step->peer);
      const Transfer& send = *step->send;
      for (std::size_t i = 0; i < send.chunk_count(); ++i) {
        const Chunk chunk = send.chunk(i);
        copy_bytes(landing_place(sim[q], send, chunk, esize), sim[r].work.data() + chunk.offset * esize,
                   chunk.count * esize);
      }
    }
    for (std::size_t r = 0; r < plans.size(); ++r) {
      const Step* step = find_step(plans[r], tag);
      if (step == nullptr || !step->reduces()) continue;
      for (std::size_t i = 0; i < step->recv->chunk_count(); ++i) {
        reduce_chunk(sim[r], *step->recv, step->recv->chunk(i), dtype, op);
      }
    }
  }
}

std::vector<SimRank> make_ranks(const std::vector<ReducePlan>& plans, pcoll_dtype_t dtype) {
  const std::size_t esize = wire_element_bytes(dtype);
  std::vector<SimRank> sim(plans.size());
  for (std::size_t r = 0; r < plans.size(); ++r) {
    sim[r].work.resize(plans[r].count * esize);
    // Poisoned so that a read of a slot nobody wrote shows up in the result.
    sim[r].landing.assign(plans[r].landing_elems() * esize, std::byte{0x5a});
  }
  return sim;
}

// Integers: every rank must hold exactly the wrapped sum (and min) of all contributions.
void check_integer_reduction(const Job& job, std::size_t count,
                             const std::vector<pcoll_op_t>& ops = {PCOLL_OP_SUM, PCOLL_OP_MIN}) {
  const int ranks = job.ranks;
  const std::vector<ReducePlan> plans = plans_for(job, count);
  for (const pcoll_op_t op : ops) {
    std::vector<SimRank> sim = make_ranks(plans, PCOLL_INT64);
    std::vector<std::int64_t> expected(count);
    fill_identity(PCOLL_INT64, op, reinterpret_cast<std::byte*>(expected.data()), count);
    std::mt19937_64 rng(static_cast<std::uint64_t>(ranks) * 1000003u + count);
    for (auto& rank : sim) {
      auto* values = reinterpret_cast<std::int64_t*>(rank.work.data());
      for (std::size_t i = 0; i < count; ++i) {
        values[i] = static_cast<std::int64_t>(rng());
        expected[i] = op == PCOLL_OP_SUM
                          ? static_cast<std::int64_t>(static_cast<std::uint64_t>(expected[i]) +
                                                      static_cast<std::uint64_t>(values[i]))
                          : std::min(expected[i], values[i]);
      }
    }
    simulate(plans, PCOLL_INT64, op, sim);
    for (int r = 0; r < ranks; ++r) {
      INFO(describe(job, count) << " op=" << op_name(op) << " rank " << r);
      REQUIRE(same_bytes(sim[static_cast<std::size_t>(r)].work.data(), expected.data(),
                         count * sizeof(std::int64_t)));
    }
  }
}

// Floats: every rank must hold the same bits, close to the exact sum.
void check_float_reduction(const Job& job, std::size_t count, pcoll_op_t op) {
  const int ranks = job.ranks;
  const std::vector<ReducePlan> plans = plans_for(job, count);
  std::vector<SimRank> sim = make_ranks(plans, PCOLL_FLOAT32);
  std::vector<double> exact(count, 0.0);
  std::mt19937_64 rng(static_cast<std::uint64_t>(ranks) * 7919u + count);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& rank : sim) {
    auto* values = reinterpret_cast<float*>(rank.work.data());
    for (std::size_t i = 0; i < count; ++i) {
      values[i] = dist(rng);
      // Sprinkle signed zeros and NaNs: the order-sensitive cases of min/max.
      if (i % 97 == 5) values[i] = (rng() % 2) ? 0.0f : -0.0f;
      if (i % 389 == 11 && rng() % 4 == 0) values[i] = std::nanf("");
      exact[i] += values[i];
    }
  }
  simulate(plans, PCOLL_FLOAT32, op, sim);
  for (int r = 1; r < ranks; ++r) {
    INFO(describe(job, count) << " op=" << op_name(op) << " rank " << r);
    REQUIRE(sim[static_cast<std::size_t>(r)].work == sim[0].work);
  }
  if (op == PCOLL_OP_SUM) {
    const auto* result = reinterpret_cast<const float*>(sim[0].work.data());
    for (std::size_t i = 0; i < count; ++i) {
      if (std::isnan(exact[i])) {
        REQUIRE(std::isnan(result[i]));
      } else {
        REQUIRE(std::fabs(result[i] - exact[i]) <= 1e-5 * ranks + 1e-6);
      }
    }
  }
}

// Ranks executing their plans with the engine's own plan executor (plan_executor.hpp), the
// code allreduce.cpp drives, over a simulated network that delivers in any order. Each
// chunk write is delivered on its own, at a random moment: a write above the inject size
// reads the sender's work buffer at delivery time (the worst case for source reuse), one
// within it was copied when posted (it completed at once, as on a NIC); settling a rank's
// writes delivers all of them at once (a flush). The receiver's data lands at delivery
// time, early or late, in its landing ring or straight in its work buffer; a write into a
// ring position that still holds an unreduced chunk fails at once. Credits travel the same
// way. Some data notifications are delivered twice, and must be recognised. A rank joins
// its next round as soon as it completed one (the engine settles its writes before it
// overwrites the work buffer, and so does this), for `rounds` rounds; a state where nothing
// can move before every rank finished is a deadlock. Every rank must end every round with
// the exact integer sum.
class SimulatedJob {
 public:
  SimulatedJob(const Job& job, std::size_t count, std::size_t chunk_elems, std::size_t pool_chunks, int rounds,
               std::size_t inject_elems, std::uint64_t seed)
      : count_(count), rounds_(rounds), inject_elems_(inject_elems), rng_(seed) {
    what_ = describe(job, count) + " chunk_elems " + std::to_string(chunk_elems) + " pool " +
            std::to_string(pool_chunks) + " inject " + std::to_string(inject_elems) + " seed " + std::to_string(seed);
    for (int r = 0; r < job.ranks; ++r) {
      ranks_.push_back(std::make_unique<Rank>(*this, static_cast<std::size_t>(r),
                                              job.make(r, count, chunk_elems, pool_chunks)));
    }
  }

  void run() {
    for (auto& rank : ranks_) rank->start();
    std::size_t idle = 0;  // rank moves in a row that changed nothing, nothing in flight
    for (;;) {
      std::vector<Rank*> active;
      for (auto& rank : ranks_)
        if (!rank->finished) active.push_back(rank.get());
      if (active.empty() && in_flight_.empty()) break;
      const std::size_t pick = rng_() % (in_flight_.size() + active.size());
      if (pick < in_flight_.size()) {
        deliver(pick);
        idle = 0;
        continue;
      }
      const bool moved = active[pick - in_flight_.size()]->step();
      idle = moved || !in_flight_.empty() ? 0 : idle + 1;
      if (idle > 4 * active.size()) {
        // Every rank had several chances and nothing is on the wire: a flow-control deadlock.
        bool any = false;
        for (Rank* rank : active) any = rank->step() || any;
        INFO(what_ << ": rank " << active[0]->rank << " stuck in round " << active[0]->round);
        REQUIRE(any);
        idle = 0;
      }
    }
    for (auto& rank : ranks_) {
      INFO(what_ << ": rank " << rank->rank);
      REQUIRE(rank->rounds_done == rounds_);
    }
  }

 private:
  static constexpr std::size_t kEsize = sizeof(std::int64_t);
  struct Message {
    bool credit = false;
    std::size_t from = 0, to = 0;
    const Step* step = nullptr;  // the sender's step (data), the receiver's (credit)
    std::uint32_t tag = 0;       // data: the notice's tag (the step's, or marked as a start)
    std::uint64_t round = 0;
    Chunk chunk;
    std::uint32_t credit_chunk = 0;
    std::vector<std::byte> copy;  // a write within the inject size: its bytes when posted
    bool copied = false;
    bool duplicate = false;  // this notification comes twice
  };

  struct Rank final : ExecutorPort {
    Rank(SimulatedJob& job_, std::size_t rank_, ReducePlan plan)
        : job(job_), rank(rank_), executor(plan, job_.inject_elems_, 0, true) {
      work.resize(plan.count * kEsize);
      landing.assign(plan.landing_elems() * kEsize, std::byte{0x5a});
      occupied.assign(plan.landing_elems(), 0);
    }
    void load_inputs() {
      auto* values = reinterpret_cast<std::int64_t*>(work.data());
      for (std::size_t i = 0; i < job.count_; ++i) values[i] = job.input(rank, round, i);
    }
    // The rank that starts round t, whose first notice says so: t mod P.
    bool starts(std::uint64_t t) const { return t % job.ranks_.size() == rank; }
    void start() {
      load_inputs();
      executor.begin_round(starts(round));
    }
    // One move: run the executor as far as it goes; true if anything happened.
    bool step() {
      moved = false;
      const std::uint64_t before = executor.moves();
      if (!executor.run(round, *this)) return moved || executor.moves() != before;
      check_round();
      // The starter's first notice reached the peer of its first exchange, marked.
      const std::size_t starter = round % job.ranks_.size();
      const bool told = starter != rank && job.ranks_[starter]->executor.announces_start_to(static_cast<int>(rank));
      INFO(job.what_ << ": rank " << rank << " round " << round << " started by " << starter);
      REQUIRE(executor.started_by(round) == (told ? static_cast<int>(starter) : -1));
      executor.end_round(round);
      if (++rounds_done == job.rounds_) {
        finished = true;
      } else {
        executor.settle(*this);  // as the engine does before a new contribution
        ++round;
        load_inputs();
        executor.begin_round(starts(round));
      }
      return true;
    }
    void check_round() {
      const auto* values = reinterpret_cast<const std::int64_t*>(work.data());
      for (std::size_t i = 0; i < job.count_; ++i) {
        std::int64_t want = 0;
        for (std::size_t q = 0; q < job.ranks_.size(); ++q) want += job.input(q, round, i);
        INFO(job.what_ << ": rank " << rank << " round " << round << " element " << i);
        REQUIRE(values[i] == want);
      }
    }
    // ExecutorPort
    void write_chunk(const Step& s, const Chunk& chunk, std::uint64_t r, std::uint32_t tag) override {
      moved = true;
      Message m;
      m.from = rank;
      m.to = static_cast<std::size_t>(s.peer);
      m.step = &s;
      m.tag = tag;
      m.round = r;
      m.chunk = chunk;
      if (chunk.count <= job.inject_elems_) {
        m.copied = true;
        m.copy.assign(work.begin() + static_cast<std::ptrdiff_t>(chunk.offset * kEsize),
                      work.begin() + static_cast<std::ptrdiff_t>((chunk.offset + chunk.count) * kEsize));
      }
      m.duplicate = job.rng_() % 8 == 0;
      job.in_flight_.push_back(std::move(m));
    }
    void reduce_chunk(const Step& s, const Chunk& chunk, std::uint64_t r, bool) override {
      moved = true;
      const std::size_t at = s.recv->landing_offset(r, chunk.index);
      for (std::size_t e = 0; e < chunk.count; ++e) {
        INFO(job.what_ << ": rank " << rank << " reduces round " << r << " tag " << s.tag << " chunk " << chunk.index);
        REQUIRE(occupied[at + e]);  // reduced only after it landed
        occupied[at + e] = 0;
      }
      reduce_into(PCOLL_INT64, PCOLL_OP_SUM, work.data() + chunk.offset * kEsize, landing.data() + at * kEsize,
                  chunk.count);
    }
    void send_credit(const Step& s, std::uint64_t r, std::uint32_t chunk) override {
      moved = true;
      Message m;
      m.credit = true;
      m.from = rank;
      m.to = static_cast<std::size_t>(s.peer);
      m.step = &s;
      m.round = r;
      m.credit_chunk = chunk;
      job.in_flight_.push_back(std::move(m));
    }
    void settle_writes() override { job.deliver_writes_of(rank); }

    SimulatedJob& job;
    std::size_t rank;
    PlanExecutor executor;
    std::vector<std::byte> work, landing;
    std::vector<std::uint8_t> occupied;  // [landing element]: holds an unreduced chunk
    std::uint64_t round = 0;
    int rounds_done = 0;
    bool finished = false;
    bool moved = false;
  };

  std::int64_t input(std::size_t r, std::uint64_t t, std::size_t i) const {
    return static_cast<std::int64_t>((r * 31 + t * 17 + i * 7) % 1000);
  }

  void deliver(std::size_t index) {
    Message m = std::move(in_flight_[index]);
    in_flight_[index] = std::move(in_flight_.back());
    in_flight_.pop_back();
    Rank& to = *ranks_[m.to];
    if (m.credit) {
      to.executor.on_credit(m.round, m.step->tag, m.credit_chunk);
      return;
    }
    const Transfer& send = *m.step->send;
    const Chunk& chunk = m.chunk;
    std::byte* place = nullptr;
    if (send.lands_in_result()) {
      place = to.work.data() + chunk.offset * kEsize;
    } else {
      const std::size_t at = send.landing_offset(m.round, chunk.index);
      for (std::size_t e = 0; e < chunk.count; ++e) {
        INFO(what_ << ": round " << m.round << " tag " << m.step->tag << " chunk " << chunk.index << " from rank "
                   << m.from);
        REQUIRE_FALSE(to.occupied[at + e]);  // a write over a chunk not reduced yet
        to.occupied[at + e] = 1;
      }
      place = to.landing.data() + at * kEsize;
    }
    const std::byte* source = m.copied ? m.copy.data() : ranks_[m.from]->work.data() + chunk.offset * kEsize;
    copy_bytes(place, source, chunk.count * kEsize);
    {
      INFO(what_ << ": data of round " << m.round << " at rank " << m.to << " in round " << to.round);
      REQUIRE((m.round == to.round || m.round == to.round + 1));
      CHECK(to.executor.on_data(m.round, to.round, m.tag, chunk.index));
      if (m.tag != m.step->tag) CHECK(to.executor.started_by(m.round) == static_cast<int>(m.from));
      if (m.duplicate) CHECK_FALSE(to.executor.on_data(m.round, to.round, m.tag, chunk.index));
    }
  }

  // A flush: every data write this rank posted is delivered now.
  void deliver_writes_of(std::size_t rank) {
    for (std::size_t i = in_flight_.size(); i-- > 0;)
      if (!in_flight_[i].credit && in_flight_[i].from == rank) deliver(i);
  }

  std::size_t count_;
  int rounds_;
  std::size_t inject_elems_;
  std::mt19937_64 rng_;
  std::string what_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::vector<Message> in_flight_;
};

void check_async_execution(const Job& job, std::size_t count, std::size_t chunk_elems, std::uint64_t seed) {
  // Writes that read their source at delivery, and writes copied when posted.
  for (const std::size_t inject : {std::size_t{0}, std::size_t{1} << 30})
    SimulatedJob(job, count, chunk_elems, kUnboundedPool, 1, inject, seed).run();
}

void check_pooled_rounds(const Job& job, std::size_t count, std::size_t chunk_elems, std::size_t pool_chunks,
                         int rounds, std::uint64_t seed) {
  for (const std::size_t inject : {std::size_t{0}, std::size_t{2}})
    SimulatedJob(job, count, chunk_elems, pool_chunks, rounds, inject, seed).run();
}

}  // namespace

TEST_CASE("every rank ends with the exact integer reduction") {
  for_each_configuration([](const Job& job, std::size_t count) { check_integer_reduction(job, count); });
  for (const Job& job : big_jobs()) check_integer_reduction(job, kBigCount, {PCOLL_OP_SUM});
}

TEST_CASE("float results are bitwise identical on all ranks") {
  for_each_configuration([](const Job& job, std::size_t count) {
    for (const pcoll_op_t op : {PCOLL_OP_SUM, PCOLL_OP_MIN, PCOLL_OP_MAX}) check_float_reduction(job, count, op);
  });
  for (const Job& job : big_jobs()) check_float_reduction(job, kBigCount, PCOLL_OP_SUM);
}

TEST_CASE("every exchange is symmetric: if r sends to q at step s, q expects r at step s") {
  for_each_configuration([](const Job& job, std::size_t count) {
    const int ranks = job.ranks;
    const std::vector<ReducePlan> plans = plans_for(job, count);
    for (const ReducePlan& plan : plans) {
      for (const Step& s : plan.steps) {
        INFO(describe(job, count) << " rank " << plan.rank << " step " << s.tag);
        REQUIRE(s.peer >= 0);
        REQUIRE(s.peer < ranks);
        REQUIRE(s.peer != plan.rank);
        REQUIRE((s.sends() || s.receives()));
        const Step* t = find_step(plans[static_cast<std::size_t>(s.peer)], s.tag);
        REQUIRE(t != nullptr);
        CHECK(t->peer == plan.rank);
        CHECK(s.sends() == t->receives());
        CHECK(s.receives() == t->sends());
        if (s.sends() && t->receives()) {
          // My data lands at the same offset of the peer's work buffer (or slot-relative),
          // cut into the same chunks on both ends.
          CHECK(*s.send == *t->recv);
          CHECK(s.send->chunk_elems == plan.chunk_elems);
        }
      }
    }
  });
}

TEST_CASE("landing slots don't overlap, hold every incoming segment, one step each") {
  for_each_configuration([](const Job& job, std::size_t count) {
    const std::vector<ReducePlan> plans = plans_for(job, count);
    for (const ReducePlan& plan : plans) {
      INFO(describe(job, count) << " rank " << plan.rank);
      // Same layout on every rank: a writer uses its own plan's offsets for the peer's slot.
      REQUIRE(plan.landing_slots.size() == plans[0].landing_slots.size());
      for (std::size_t i = 0; i < plan.landing_slots.size(); ++i) {
        CHECK(plan.landing_slots[i].offset == plans[0].landing_slots[i].offset);
        CHECK(plan.landing_slots[i].depth == plans[0].landing_slots[i].depth);
        CHECK(plan.landing_slots[i].stride == plans[0].landing_slots[i].stride);
        if (i > 0) {
          CHECK(plan.landing_slots[i].offset >= plan.landing_slots[i - 1].offset + plan.landing_slots[i - 1].elems());
        }
      }
      std::set<int> used_slots;
      std::set<std::uint32_t> tags;
      for (const Step& s : plan.steps) {
        CHECK(tags.insert(s.tag).second);
        CHECK(s.tag < plan.tag_count);
        for (const auto& transfer : {s.send, s.recv}) {
          if (!transfer) continue;
          CHECK(transfer->offset + transfer->count <= count);
          if (transfer->lands_in_result()) continue;
          REQUIRE(transfer->slot >= 0);
          REQUIRE(static_cast<std::size_t>(transfer->slot) < plan.landing_slots.size());
          const LandingSlot& slot = plan.landing_slots[static_cast<std::size_t>(transfer->slot)];
          CHECK(transfer->slot_offset == slot.offset);
          CHECK(transfer->slot_depth == slot.depth);
          CHECK(transfer->slot_stride == slot.stride);
          // Every chunk fits its ring position; with an unbounded pool, two rounds fit the
          // ring (no credits needed).
          for (std::size_t i = 0; i < transfer->chunk_count(); ++i) CHECK(transfer->chunk(i).count <= slot.stride);
          CHECK_FALSE(transfer->windowed());
        }
        if (s.reduces()) CHECK(used_slots.insert(s.recv->slot).second);
      }
      // Steps run in tag order.
      CHECK(std::is_sorted(plan.steps.begin(), plan.steps.end(),
                           [](const Step& a, const Step& b) { return a.tag < b.tag; }));
    }
  });
}

TEST_CASE("data landing in the result never overwrites what the receiver sends in that step") {
  for_each_configuration([](const Job& job, std::size_t count) {
    for (const ReducePlan& plan : plans_for(job, count)) {
      for (const Step& s : plan.steps) {
        if (!s.receives() || !s.recv->lands_in_result() || !s.sends()) continue;
        INFO(describe(job, count) << " rank " << plan.rank << " step " << s.tag);
        CHECK_FALSE(overlaps(s.recv->offset, s.recv->count, s.send->offset, s.send->count));
      }
    }
  });
}

TEST_CASE("plans give the exact result under any interleaving the execution rules allow") {
  for (const Job& job : all_jobs()) {
    for (const std::size_t count : {std::size_t{1}, static_cast<std::size_t>(job.ranks) + 1, std::size_t{100}}) {
      // One element per chunk, a few, and one chunk per transfer.
      for (const std::size_t chunk_elems : {std::size_t{1}, std::size_t{3}, std::size_t{1000}}) {
        for (std::uint64_t seed = 1; seed <= 3; ++seed) {
          INFO(describe(job, count) << " chunk_elems " << chunk_elems << " seed " << seed);
          check_async_execution(job, count, chunk_elems, seed);
        }
      }
    }
  }
}

TEST_CASE("rabenseifner moves about 2*count elements per core rank") {
  for (int ranks = 2; ranks <= kMaxTestedRanks; ++ranks) {
    const std::size_t count = 1000 * static_cast<std::size_t>(ranks);
    for (int r = 0; r < ranks; ++r) {
      const ReducePlan plan = rabenseifner(ranks, r, count, chunk_size_for(count));
      if (core_index(ranks, r) < 0) continue;
      std::size_t core_sent = 0;
      for (const Step& s : plan.steps) {
        if (s.kind() == StepKind::send_reduce || s.kind() == StepKind::send_copy) core_sent += s.send->count;
      }
      const int p2 = core_ranks(ranks);
      INFO("P=" << ranks << " rank " << r);
      // 2 * (p2-1)/p2 * count, to within one element per block boundary.
      const double ideal = 2.0 * (p2 - 1) / p2 * static_cast<double>(count);
      CHECK(std::fabs(static_cast<double>(core_sent) - ideal) <= 2.0 * p2);
    }
  }
}

TEST_CASE("steps are of the kinds their algorithm names, and fold-in steps carry the whole vector") {
  for_each_configuration_of(uniform_jobs(), [](const Job& job, std::size_t count) {
    const ReduceAlgorithm algorithm = job.algorithm;
    const int ranks = job.ranks;
    for (const ReducePlan& plan : plans_for(job, count)) {
      const auto last_tag = plan.tag_count - 1;
      for (const Step& s : plan.steps) {
        INFO(describe(job, count) << " rank " << plan.rank << " step " << s.tag);
        const bool extra = is_extra_rank(ranks, plan.rank);
        if (s.tag == 0) {
          CHECK(s.kind() == (extra ? StepKind::send_only : StepKind::recv_reduce));
          CHECK((extra ? *s.send : *s.recv).count == count);
        } else if (s.tag == last_tag) {
          CHECK(s.kind() == (extra ? StepKind::recv_copy : StepKind::send_only));
          CHECK((extra ? *s.recv : *s.send).count == count);
        } else if (algorithm == ReduceAlgorithm::recursive_doubling || s.tag <= last_tag / 2) {
          CHECK(s.kind() == StepKind::send_reduce);
        } else {
          CHECK(s.kind() == StepKind::send_copy);
        }
      }
    }
  });
}

TEST_CASE("node_leader: only leaders talk across nodes, in their recursive doubling, at most log2(N)+2 times") {
  for (const std::vector<int>& node_of : node_maps()) {
    const NodeShape shape = shape_of(node_of);
    const auto ranks = static_cast<int>(node_of.size());
    for (const std::size_t count : {std::size_t{0}, std::size_t{1000}}) {
      for (int r = 0; r < ranks; ++r) {
        const ReducePlan plan = node_leader(node_of, r, count, chunk_size_for(count));
        const bool leader = shape.local[static_cast<std::size_t>(r)] == 0;
        int across = 0;
        for (const Step& s : plan.steps) {
          INFO(describe(node_job(node_of), count) << " rank " << r << " step " << s.tag);
          const bool leaders_step = s.tag >= shape.first_leader_tag() && s.tag <= shape.last_leader_tag();
          // The leaders' steps are exactly those between nodes.
          const bool other_node = node_of[static_cast<std::size_t>(s.peer)] != node_of[static_cast<std::size_t>(r)];
          CHECK(other_node == leaders_step);
          if (!other_node) continue;
          ++across;
          CHECK(leader);
          CHECK(shape.local[static_cast<std::size_t>(s.peer)] == 0);
        }
        INFO(describe(node_job(node_of), count) << " rank " << r);
        CHECK(across <= shape.leader_levels + 2);
        if (!leader || shape.nodes == 1) CHECK(across == 0);
        if (leader && shape.nodes > 1) CHECK(across >= 1);
      }
    }
  }
}

TEST_CASE("node_leader: the node reduce sends whole vectors up a binomial tree, the broadcast copies them down") {
  for (const std::vector<int>& node_of : node_maps()) {
    const NodeShape shape = shape_of(node_of);
    const auto ranks = static_cast<int>(node_of.size());
    for (const std::size_t count : counts_for(ranks)) {
      for (int r = 0; r < ranks; ++r) {
        const ReducePlan plan = node_leader(node_of, r, count, chunk_size_for(count));
        CHECK(plan.algorithm == ReduceAlgorithm::node_leader);
        CHECK(plan.tag_count == static_cast<std::uint32_t>(2 * shape.node_levels + shape.leader_levels + 2));
        const int local = shape.local[static_cast<std::size_t>(r)];
        int to_parent = 0, from_parent = 0;
        for (const Step& s : plan.steps) {
          INFO(describe(node_job(node_of), count) << " rank " << r << " step " << s.tag);
          if (s.tag >= shape.first_leader_tag() && s.tag <= shape.last_leader_tag()) continue;
          const int peer_local = shape.local[static_cast<std::size_t>(s.peer)];
          CHECK(node_of[static_cast<std::size_t>(s.peer)] == node_of[static_cast<std::size_t>(r)]);
          const bool reduce = s.tag < shape.first_leader_tag();
          // Level k of the tree joins local indices i and i + 2^k, i with bits 0..k clear.
          const int level = reduce ? static_cast<int>(s.tag) : static_cast<int>(plan.tag_count - 1 - s.tag);
          const int parent = std::min(local, peer_local);
          const int child = std::max(local, peer_local);
          CHECK(child - parent == 1 << level);
          CHECK(parent % (2 << level) == 0);
          const bool is_child = local == child;
          const Transfer& moved = s.sends() ? *s.send : *s.recv;
          CHECK(moved.offset == 0);
          CHECK(moved.count == count);
          if (reduce) {
            CHECK(s.kind() == (is_child ? StepKind::send_only : StepKind::recv_reduce));
            to_parent += is_child ? 1 : 0;
          } else {
            CHECK(s.kind() == (is_child ? StepKind::recv_copy : StepKind::send_only));
            CHECK(moved.lands_in_result());
            from_parent += is_child ? 1 : 0;
          }
        }
        INFO(describe(node_job(node_of), count) << " rank " << r);
        // Every rank but the leader hangs below exactly one parent.
        CHECK(to_parent == (local == 0 ? 0 : 1));
        CHECK(from_parent == to_parent);
      }
    }
  }
}

TEST_CASE("node_leader with one rank per node is recursive doubling over the nodes") {
  for (int nodes = 1; nodes <= 9; ++nodes) {
    // Node j on rank j, then node j on rank nodes-1-j: the leaders' order is the nodes'.
    for (const bool reversed : {false, true}) {
      std::vector<int> node_of(static_cast<std::size_t>(nodes));
      for (int r = 0; r < nodes; ++r) node_of[static_cast<std::size_t>(r)] = reversed ? nodes - 1 - r : r;
      for (int r = 0; r < nodes; ++r) {
        INFO("nodes " << nodes << (reversed ? " reversed" : "") << " rank " << r);
        const int node = node_of[static_cast<std::size_t>(r)];
        const ReducePlan plan = node_leader(node_of, r, 100, 7);
        const ReducePlan doubling = recursive_doubling(nodes, node, 100, 7);
        CHECK(plan.tag_count == doubling.tag_count);
        CHECK(plan.landing_elems() == doubling.landing_elems());
        REQUIRE(plan.steps.size() == doubling.steps.size());
        for (std::size_t i = 0; i < plan.steps.size(); ++i) {
          const Step& s = plan.steps[i];
          const Step& d = doubling.steps[i];
          CHECK(s.tag == d.tag);
          CHECK(node_of[static_cast<std::size_t>(s.peer)] == d.peer);
          CHECK(s.send == d.send);
          CHECK(s.recv == d.recv);
        }
      }
    }
  }
}

TEST_CASE("node_leader rejects a node map that is empty, negative or leaves a node out") {
  CHECK_THROWS_WITH_AS(node_leader({}, 0, 10, 1), doctest::Contains("node map is empty"), Error);
  CHECK_THROWS_WITH_AS(node_leader({0, -1}, 0, 10, 1), doctest::Contains("rank 1 is on node -1"), Error);
  CHECK_THROWS_WITH_AS(node_leader({0, 2}, 0, 10, 1), doctest::Contains("rank 1 is on node 2"), Error);
  CHECK_THROWS_WITH_AS(node_leader({0, 0, 2}, 0, 10, 1), doctest::Contains("node 1 has no rank"), Error);
  CHECK_THROWS_WITH_AS(node_leader({1, 1}, 0, 10, 1), doctest::Contains("node 0 has no rank"), Error);
  CHECK_THROWS_AS(node_leader({0, 0}, 2, 10, 1), Error);
  CHECK_THROWS_AS(node_leader({0, 0}, -1, 10, 1), Error);
  CHECK_THROWS_AS(node_leader({0, 1}, 0, 10, 0), Error);
  CHECK_THROWS_AS(node_leader({0, 1}, 0, 10, 1, 0), Error);
  CHECK_THROWS_WITH_AS(make_plan(ReduceAlgorithm::node_leader, 4, 0, 10, 1), doctest::Contains("node map"), Error);
  CHECK(std::string(algorithm_name(ReduceAlgorithm::node_leader)) == "node_leader");
}

// node_rails' phases as the tests see them: R node rounds (a round-robin tournament of L
// players), then the rails' tags, then R allgather rounds.
struct RailsShape {
  NodeShape nodes;
  int node_size = 0;    // L
  int node_rounds = 0;  // R
  int rail_tags = 0;

  bool reduce_scatter(std::uint32_t tag) const { return tag < static_cast<std::uint32_t>(node_rounds); }
  bool rail(std::uint32_t tag) const {
    return !reduce_scatter(tag) && tag < static_cast<std::uint32_t>(node_rounds + rail_tags);
  }
};

RailsShape rails_shape_of(const std::vector<int>& node_of) {
  RailsShape shape;
  shape.nodes = shape_of(node_of);
  shape.node_size = shape.nodes.node_size[0];
  shape.node_rounds = shape.node_size == 1 ? 0 : shape.node_size % 2 == 0 ? shape.node_size - 1 : shape.node_size;
  // Rabenseifner's pre-step, 2 log2(p2) steps and post-step; recursive doubling's where p2 <= 2.
  const int levels = shape.nodes.leader_levels;
  shape.rail_tags = (levels > 1 ? 2 * levels : levels) + 2;
  return shape;
}

TEST_CASE("node_rails: each rank sends across nodes only its block's rail exchanges (about 2 count / L elements), "
          "and within the node about 2 count (L-1)/L") {
  for (const std::vector<int>& node_of : equal_node_maps()) {
    const RailsShape shape = rails_shape_of(node_of);
    const int size = shape.node_size;
    const auto ranks = static_cast<int>(node_of.size());
    for (const std::size_t count : {std::size_t{0}, std::size_t{3}, std::size_t{1000}, std::size_t{1001}}) {
      for (int r = 0; r < ranks; ++r) {
        const ReducePlan plan = node_rails(node_of, r, count, chunk_size_for(count));
        CHECK(plan.algorithm == ReduceAlgorithm::node_rails);
        CHECK(plan.tag_count == static_cast<std::uint32_t>(2 * shape.node_rounds + shape.rail_tags));
        const int local = shape.nodes.local[static_cast<std::size_t>(r)];
        const std::size_t block = block_offset(count, size, local);
        const std::size_t block_count = block_elems(count, size, local);
        std::size_t across = 0, within = 0;
        std::map<int, int> met;  // [local peer]: node exchanges with it
        for (const Step& s : plan.steps) {
          INFO(describe(node_job(node_of, ReduceAlgorithm::node_rails), count) << " rank " << r << " step " << s.tag);
          const bool other_node = node_of[static_cast<std::size_t>(s.peer)] != node_of[static_cast<std::size_t>(r)];
          CHECK(other_node == shape.rail(s.tag));
          const int peer_local = shape.nodes.local[static_cast<std::size_t>(s.peer)];
          if (other_node) {
            // The rail: the ranks of my local index, moving pieces of my block only.
            CHECK(peer_local == local);
            for (const auto& transfer : {s.send, s.recv}) {
              if (!transfer) continue;
              CHECK(transfer->offset >= block);
              CHECK(transfer->offset + transfer->count <= block + block_count);
            }
            across += s.sends() ? s.send->count : 0;
            continue;
          }
          // Node phases: block j to local j, reduced there; then my block copied to each.
          ++met[peer_local];
          const bool reduce = shape.reduce_scatter(s.tag);
          CHECK(s.kind() == (reduce ? StepKind::send_reduce : StepKind::send_copy));
          const Transfer& mine = reduce ? *s.recv : *s.send;
          const Transfer& theirs = reduce ? *s.send : *s.recv;
          CHECK(mine.offset == block);
          CHECK(mine.count == block_count);
          CHECK(theirs.offset == block_offset(count, size, peer_local));
          CHECK(theirs.count == block_elems(count, size, peer_local));
          within += s.send->count;
        }
        INFO(describe(node_job(node_of, ReduceAlgorithm::node_rails), count) << " rank " << r);
        // Each local peer twice: once per node phase.
        CHECK(static_cast<int>(met.size()) == size - 1);
        for (const auto& [peer_local, times] : met) CHECK(times == 2);
        // count - block in the reduce-scatter, the block to L - 1 peers in the allgather.
        CHECK(within == count - block_count + static_cast<std::size_t>(size - 1) * block_count);
        const int p2 = 1 << shape.nodes.leader_levels;
        const int node = node_of[static_cast<std::size_t>(r)];
        const bool folds = node < 2 * (shape.nodes.nodes - p2);
        if (shape.nodes.nodes == 1) CHECK(across == 0);
        // 2 (p2-1)/p2 of the block in Rabenseifner, the block in recursive doubling or a
        // fold-in pre-step, one more block for a fold-in partner's post-step.
        CHECK(across <= 2 * block_count + (folds ? block_count : 0));
        if (shape.nodes.nodes > 1 && block_count >= 2 * static_cast<std::size_t>(p2)) CHECK(across >= block_count);
      }
    }
  }
}

TEST_CASE("node_rails with one rank per node is Rabenseifner over the nodes (recursive doubling for p2 <= 2)") {
  for (int nodes = 1; nodes <= 9; ++nodes) {
    for (const bool reversed : {false, true}) {
      std::vector<int> node_of(static_cast<std::size_t>(nodes));
      for (int r = 0; r < nodes; ++r) node_of[static_cast<std::size_t>(r)] = reversed ? nodes - 1 - r : r;
      const ReduceAlgorithm flat =
          core_ranks(nodes) > 2 ? ReduceAlgorithm::rabenseifner : ReduceAlgorithm::recursive_doubling;
      for (int r = 0; r < nodes; ++r) {
        INFO("nodes " << nodes << (reversed ? " reversed" : "") << " rank " << r);
        const int node = node_of[static_cast<std::size_t>(r)];
        const ReducePlan plan = node_rails(node_of, r, 100, 7);
        const ReducePlan reference = make_plan(flat, nodes, node, 100, 7);
        CHECK(plan.tag_count == reference.tag_count);
        CHECK(plan.landing_elems() == reference.landing_elems());
        REQUIRE(plan.steps.size() == reference.steps.size());
        for (std::size_t i = 0; i < plan.steps.size(); ++i) {
          const Step& s = plan.steps[i];
          const Step& d = reference.steps[i];
          CHECK(s.tag == d.tag);
          CHECK(node_of[static_cast<std::size_t>(s.peer)] == d.peer);
          CHECK(s.send == d.send);
          CHECK(s.recv == d.recv);
        }
      }
    }
  }
}

TEST_CASE("node_rails refuses unequal nodes, naming them") {
  CHECK_THROWS_WITH_AS(node_rails({0, 0, 1}, 0, 10, 1), doctest::Contains("node 1 holds 1 ranks but node 0 holds 2"),
                       Error);
  CHECK_THROWS_WITH_AS(node_rails({0, 2, 0, 1, 2, 0}, 0, 10, 1),
                       doctest::Contains("node 1 holds 1 ranks but node 0 holds 3"), Error);
  CHECK_THROWS_WITH_AS(node_rails({0, 1, 1, 0, 1}, 3, 10, 1), doctest::Contains("same number of ranks on every node"),
                       Error);
  // node_leader's node map checks, under node_rails' name.
  CHECK_THROWS_WITH_AS(node_rails({}, 0, 10, 1), doctest::Contains("node_rails plan: the node map is empty"), Error);
  CHECK_THROWS_WITH_AS(node_rails({0, -1}, 0, 10, 1), doctest::Contains("rank 1 is on node -1"), Error);
  CHECK_THROWS_WITH_AS(node_rails({0, 0, 2, 2}, 0, 10, 1), doctest::Contains("node 1 has no rank"), Error);
  CHECK_THROWS_AS(node_rails({0, 1}, 2, 10, 1), Error);
  CHECK_THROWS_AS(node_rails({0, 1}, 0, 10, 0), Error);
  CHECK_THROWS_AS(node_rails({0, 1}, 0, 10, 1, 0), Error);
  CHECK_THROWS_WITH_AS(make_plan(ReduceAlgorithm::node_rails, 4, 0, 10, 1), doctest::Contains("node map"), Error);
  CHECK(std::string(algorithm_name(ReduceAlgorithm::node_rails)) == "node_rails");
}

TEST_CASE("node_rails applies to several nodes of equal size, more than one rank each") {
  for (const std::vector<int>& node_of : equal_node_maps()) {
    const RailsShape shape = rails_shape_of(node_of);
    INFO(describe(node_job(node_of, ReduceAlgorithm::node_rails), 0));
    CHECK(node_rails_applies(node_of) == (shape.nodes.nodes > 1 && shape.node_size > 1));
  }
  CHECK(node_rails_applies({0, 0, 1, 1}));
  CHECK(node_rails_applies(placed(6, 3, true)));
  CHECK_FALSE(node_rails_applies({1, 2, 0}));            // one rank per node
  CHECK_FALSE(node_rails_applies(placed(1, 5, false)));  // one node
  CHECK_FALSE(node_rails_applies({0, 0, 1}));            // unequal nodes
  CHECK_FALSE(node_rails_applies({0, 2, 0, 1, 2, 0}));
  CHECK_FALSE(node_rails_applies({}));                   // invalid maps
  CHECK_FALSE(node_rails_applies({0, 0, 2, 2}));
  CHECK_FALSE(node_rails_applies({0, -1, 0, -1}));
}

TEST_CASE("segments split count unevenly by at most one element, for any count") {
  for (int blocks = 1; blocks <= 32; ++blocks) {
    for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{31},
                                    std::size_t{32}, std::size_t{33}, std::size_t{1000}}) {
      std::size_t next = 0;
      for (int b = 0; b < blocks; ++b) {
        CHECK(block_offset(count, blocks, b) == next);
        const std::size_t elems = block_elems(count, blocks, b);
        CHECK(elems >= count / static_cast<std::size_t>(blocks));
        CHECK(elems <= count / static_cast<std::size_t>(blocks) + 1);
        next += elems;
      }
      CHECK(next == count);
      CHECK(block_offset(count, blocks, blocks) == count);
    }
  }
}

TEST_CASE("extra ranks fold into distinct adjacent partners, one per core rank at most") {
  for (int ranks = 1; ranks <= 100; ++ranks) {
    const int p2 = core_ranks(ranks);
    CHECK((p2 & (p2 - 1)) == 0);
    CHECK(p2 <= ranks);
    CHECK(2 * p2 > ranks);
    std::set<int> partners;
    std::set<int> core;
    int extra = 0;
    for (int r = 0; r < ranks; ++r) {
      INFO("P=" << ranks << " rank " << r);
      if (is_extra_rank(ranks, r)) {
        ++extra;
        const int partner = fold_partner(ranks, r);
        CHECK(partner == r + 1);
        CHECK_FALSE(is_extra_rank(ranks, partner));
        CHECK(fold_partner(ranks, partner) == r);
        CHECK(partners.insert(partner).second);
        CHECK(core_index(ranks, r) == -1);
      } else {
        const int c = core_index(ranks, r);
        CHECK(core_rank(ranks, c) == r);
        CHECK(core.insert(c).second);
      }
    }
    CHECK(extra == ranks - p2);
    CHECK(static_cast<int>(core.size()) == p2);
  }
}

TEST_CASE("chunks cover a transfer exactly, and an empty transfer is one empty chunk") {
  for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{9}, std::size_t{10}, std::size_t{1001}}) {
    for (const std::size_t chunk_elems : {std::size_t{1}, std::size_t{3}, std::size_t{10}, std::size_t{4096}}) {
      const std::size_t stride = std::min(chunk_elems, count);
      const Transfer transfer{100, count, 2, 500, chunk_elems, 7, stride};
      const std::size_t chunks = transfer.chunk_count();
      CHECK(chunks == (count == 0 ? 1 : (count + chunk_elems - 1) / chunk_elems));
      std::size_t next = 100;
      for (std::size_t i = 0; i < chunks; ++i) {
        const Chunk chunk = transfer.chunk(i);
        CHECK(chunk.index == i);
        CHECK(chunk.offset == next);
        CHECK(transfer.landing_offset(0, i) == 500 + (i % 7) * stride);
        // Round t's chunks follow round t - 1's around the ring.
        CHECK(transfer.landing_offset(3, i) == 500 + ((3 * chunks + i) % 7) * stride);
        CHECK(chunk.count <= chunk_elems);
        // Every chunk but the last is full: both ends find a chunk's place from its index.
        if (i + 1 < chunks) CHECK(chunk.count == chunk_elems);
        if (count != 0) CHECK(chunk.count > 0);
        next += chunk.count;
      }
      CHECK(next == 100 + count);
    }
  }
}

TEST_CASE("chunks hold PCOLL_CHUNK_BYTES, grown so that a notification can number them") {
  CHECK(chunk_elems_for(1000, 256 * 1024, 4, 4096) == 65536);
  CHECK(chunk_elems_for(1000, 256 * 1024, 8, 4096) == 32768);
  CHECK(chunk_elems_for(1000, 2, 4, 4096) == 1);  // at least one element
  const std::size_t huge = (std::size_t{1} << 30) + 6;
  CHECK(chunk_elems_for(huge, 4096, 4, 4096) == (huge + 4095) / 4096);
  CHECK_THROWS_AS(chunk_elems_for(1000, 4096, 0, 4096), Error);
  CHECK_THROWS_AS(chunk_elems_for(1000, 4096, 4, 0), Error);
  // Plans sized as the engine sizes them never need a chunk or tag the notification lacks,
  // in either width, up to the most ranks each layout addresses (docs/design.md, "Limits").
  for (const unsigned bits : {64u, 32u}) {
    const NoticeCodec codec(bits);
    for (const ReduceAlgorithm algorithm : kAlgorithms) {
      for (const int ranks : {1, 2, 3, 8, 13, 1000, 32767, 32768, 1048575}) {
        if (static_cast<uint32_t>(ranks) > codec.max_ranks()) continue;
        for (const std::size_t count : {std::size_t{0}, std::size_t{1000}, huge}) {
          const ReducePlan plan =
              make_plan(algorithm, ranks, ranks - 1, count, chunk_elems_for(count, 4096, 4, codec.max_chunks()));
          INFO(bits << "-bit " << algorithm_name(algorithm) << " P=" << ranks << " count=" << count);
          CHECK(plan.tag_count <= codec.max_tags());
          for (const Step& s : plan.steps) {
            for (const auto& transfer : {s.send, s.recv}) {
              if (transfer) CHECK(transfer->chunk_count() <= codec.max_chunks());
            }
          }
        }
      }
    }
    // node_leader, with nodes of one rank, of 64 ranks, and one node of all of them.
    for (const int ranks : {1, 13, 1000, 32767, 1048575}) {
      if (static_cast<uint32_t>(ranks) > codec.max_ranks()) continue;
      for (const int node_size : {1, 64, ranks}) {
        std::vector<int> node_of(static_cast<std::size_t>(ranks));
        for (int r = 0; r < ranks; ++r) node_of[static_cast<std::size_t>(r)] = r / node_size;
        const ReducePlan plan = node_leader(node_of, 0, huge, chunk_elems_for(huge, 4096, 4, codec.max_chunks()));
        INFO(bits << "-bit node_leader P=" << ranks << " nodes of " << node_size);
        CHECK(plan.tag_count <= codec.max_tags());
        for (const Step& s : plan.steps) {
          for (const auto& transfer : {s.send, s.recv}) {
            if (transfer) CHECK(transfer->chunk_count() <= codec.max_chunks());
          }
        }
      }
    }
    // node_rails needs 2 (L-1) + 2 log2(p2) + 2 tags (one more pair for odd L): nodes of 8
    // fit either width up to 256 nodes, nodes of 32 the 64-bit one up to 1024 nodes.
    for (const auto& [nodes, node_size] : {std::pair{2, 8}, std::pair{256, 8}, std::pair{1024, 32}, std::pair{3, 5}}) {
      if (bits == 32 && node_size > 8) continue;
      if (static_cast<uint32_t>(nodes * node_size) > codec.max_ranks()) continue;
      const std::vector<int> node_of = placed(nodes, node_size, false);
      const ReducePlan plan = node_rails(node_of, 0, huge, chunk_elems_for(huge, 4096, 4, codec.max_chunks()));
      INFO(bits << "-bit node_rails " << nodes << " nodes of " << node_size);
      CHECK(plan.tag_count <= codec.max_tags());
      for (const Step& s : plan.steps) {
        for (const auto& transfer : {s.send, s.recv}) {
          if (transfer) CHECK(transfer->chunk_count() <= codec.max_chunks());
        }
      }
    }
  }
}

TEST_CASE("transfers overlap only when both carry elements in a common range") {
  const auto range = [](std::size_t offset, std::size_t count) { return Transfer{offset, count, kNoSlot, 0, 1, 1, 0}; };
  CHECK(ranges_overlap(range(0, 10), range(0, 10)));
  CHECK(ranges_overlap(range(0, 10), range(9, 1)));
  CHECK_FALSE(ranges_overlap(range(0, 10), range(10, 5)));
  CHECK_FALSE(ranges_overlap(range(10, 5), range(0, 10)));
  CHECK_FALSE(ranges_overlap(range(3, 0), range(0, 10)));
}

TEST_CASE("a rank that started the round marks its first write; the peer names it, and unmarked plans refuse the mark") {
  struct Recorder final : ExecutorPort {
    std::vector<std::uint32_t> tags;
    void write_chunk(const Step&, const Chunk&, std::uint64_t, std::uint32_t tag) override { tags.push_back(tag); }
    void reduce_chunk(const Step&, const Chunk&, std::uint64_t, bool) override {}
    void send_credit(const Step&, std::uint64_t, std::uint32_t) override {}
    void settle_writes() override {}
  };
  // Two ranks, 16 elements in chunks of 4: one exchange of four chunks each way.
  const ReducePlan plan0 = make_plan(ReduceAlgorithm::recursive_doubling, 2, 0, 16, 4);
  const ReducePlan plan1 = make_plan(ReduceAlgorithm::recursive_doubling, 2, 1, 16, 4);
  const std::uint32_t tag = plan0.steps.at(0).tag;
  const std::uint32_t marked = tag + plan0.tag_count;
  PlanExecutor starter(plan0, 0, 7, true);
  CHECK(starter.announces_start_to(1));
  CHECK_FALSE(starter.announces_start_to(0));
  CHECK_FALSE(PlanExecutor(plan0, 0, 7, false).announces_start_to(1));
  Recorder port;
  starter.begin_round(true);
  CHECK_FALSE(starter.run(0, port));
  CHECK(port.tags == std::vector<std::uint32_t>{marked, tag, tag, tag});
  starter.end_round(0);
  port.tags.clear();
  starter.begin_round(false);
  CHECK_FALSE(starter.run(1, port));
  CHECK(port.tags == std::vector<std::uint32_t>{tag, tag, tag, tag});

  PlanExecutor peer(plan1, 0, 7, true);
  peer.begin_round(false);
  CHECK(peer.started_by(0) == -1);
  CHECK(peer.on_data(0, 0, marked, 0));
  CHECK(peer.started_by(0) == 0);
  CHECK(peer.started_by(1) == -1);
  CHECK_FALSE(peer.on_data(0, 0, tag, 0));  // the same chunk again, unmarked: a duplicate
  CHECK(peer.on_data(0, 0, tag, 1));
  peer.end_round(0);
  CHECK(peer.started_by(0) == -1);
  const auto refused = [](PlanExecutor& executor, std::uint32_t t) {
    try {
      executor.on_data(0, 0, t, 0);
      FAIL("tag " << t << " accepted");
    } catch (const Error& e) {
      CHECK(e.code() == Errc::protocol);
      CHECK(std::string(e.what()).find("exchange tag") != std::string::npos);
    }
  };
  PlanExecutor unmarked(plan1, 0, 7, false);
  refused(unmarked, marked);
  refused(peer, 2 * plan1.tag_count);
}

TEST_CASE("a single rank has nothing to exchange") {
  for (const Job& job : {uniform_job(ReduceAlgorithm::recursive_doubling, 1),
                         uniform_job(ReduceAlgorithm::rabenseifner, 1), node_job({0}),
                         node_job({0}, ReduceAlgorithm::node_rails)}) {
    const ReducePlan plan = job.make(0, 1000, 64, kUnboundedPool);
    CHECK(plan.steps.empty());
    CHECK(plan.landing_elems() == 0);
  }
}

TEST_CASE("invalid ranks and chunk sizes are rejected with an error") {
  CHECK_THROWS_AS(recursive_doubling(0, 0, 10, 1), Error);
  CHECK_THROWS_AS(rabenseifner(4, 4, 10, 1), Error);
  CHECK_THROWS_AS(rabenseifner(4, -1, 10, 1), Error);
  CHECK_THROWS_AS(make_plan(ReduceAlgorithm::recursive_doubling, 4, 0, 10, 0), Error);
  CHECK_THROWS_AS(make_plan(ReduceAlgorithm::recursive_doubling, 4, 0, 10, 1, 0), Error);
  CHECK_THROWS_AS(core_rank(5, 4), Error);
}

TEST_CASE("bounded landing pools: rounds stay exact, no ring position is overwritten, no deadlock") {
  std::vector<Job> jobs;
  for (const ReduceAlgorithm algorithm : kAlgorithms) {
    for (const int ranks : {2, 3, 4, 5, 6, 8}) jobs.push_back(uniform_job(algorithm, ranks));
  }
  for (Job& job : node_jobs()) jobs.push_back(std::move(job));
  for (const Job& job : jobs) {
    for (const std::size_t count : {std::size_t{1}, std::size_t{40}, std::size_t{97}}) {
      // One chunk per ring position up to rings far larger than a round.
      for (const std::size_t pool_chunks : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{5}, std::size_t{8}, std::size_t{64}}) {
        for (std::uint64_t seed = 1; seed <= 3; ++seed) {
          CAPTURE(seed);
          check_pooled_rounds(job, count, 4, pool_chunks, 4, seed);
        }
      }
    }
  }
}

TEST_CASE("a bounded pool is windowed exactly when a round's chunks exceed half its ring") {
  const ReducePlan small = make_plan(ReduceAlgorithm::recursive_doubling, 2, 0, 100, 10, 64);
  REQUIRE(small.steps.size() == 1);
  CHECK(small.steps[0].recv->slot_depth == 20);  // two rounds of 10 chunks
  CHECK_FALSE(small.steps[0].recv->windowed());
  const ReducePlan large = make_plan(ReduceAlgorithm::recursive_doubling, 2, 0, 100, 10, 8);
  CHECK(large.steps[0].recv->slot_depth == 8);
  CHECK(large.steps[0].recv->windowed());
  CHECK(large.landing_elems() == 8 * 10);  // bounded whatever the vector
  const ReducePlan huge = make_plan(ReduceAlgorithm::recursive_doubling, 2, 0, 100000, 10, 8);
  CHECK(huge.landing_elems() == 8 * 10);
}
