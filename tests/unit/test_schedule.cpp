// Unit tests of the reduction plans (lib/collectives/include/collectives/reduce_plan.hpp): structure rules
// checked on every plan, and in-memory simulations of P ranks executing their plans with
// the real kernels, which must leave every rank with the exact (integer) or bitwise
// identical (float) reduction. The simulations move data chunk by chunk with the plan's
// own Transfer::chunk, the function the engine (allreduce.cpp) writes and reduces with, so
// the chunk boundaries checked here are the ones on the wire. Pure logic: no transport
// involved.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <collectives/dtype.hpp>
#include <collectives/notification.hpp>
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

std::vector<std::size_t> counts_for(int ranks) {
  const auto p = static_cast<std::size_t>(ranks);
  std::set<std::size_t> counts = {0, 1, 2, 7, p - 1, p, p + 1, 1000};
  return {counts.begin(), counts.end()};
}

// Several chunks per transfer for most counts, so chunk boundaries are exercised.
std::size_t chunk_size_for(std::size_t count) { return std::max<std::size_t>(1, count / 3 + 1); }

std::vector<ReducePlan> plans_for(ReduceAlgorithm algorithm, int ranks, std::size_t count,
                                  std::size_t chunk_elems) {
  std::vector<ReducePlan> plans;
  for (int r = 0; r < ranks; ++r) plans.push_back(make_plan(algorithm, ranks, r, count, chunk_elems));
  return plans;
}

std::vector<ReducePlan> plans_for(ReduceAlgorithm algorithm, int ranks, std::size_t count) {
  return plans_for(algorithm, ranks, count, chunk_size_for(count));
}

std::string describe(ReduceAlgorithm algorithm, int ranks, std::size_t count) {
  return std::string(algorithm_name(algorithm)) + " P=" + std::to_string(ranks) +
         " count=" + std::to_string(count);
}

// Calls check(algorithm, ranks, count) on every small configuration.
template <class Check>
void for_each_configuration(Check check) {
  for (const ReduceAlgorithm algorithm : kAlgorithms) {
    for (int ranks = 1; ranks <= kMaxTestedRanks; ++ranks) {
      for (const std::size_t count : counts_for(ranks)) check(algorithm, ranks, count);
    }
  }
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
void check_integer_reduction(ReduceAlgorithm algorithm, int ranks, std::size_t count,
                             const std::vector<pcoll_op_t>& ops = {PCOLL_OP_SUM, PCOLL_OP_MIN}) {
  const std::vector<ReducePlan> plans = plans_for(algorithm, ranks, count);
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
      INFO(describe(algorithm, ranks, count) << " op=" << op_name(op) << " rank " << r);
      REQUIRE(same_bytes(sim[static_cast<std::size_t>(r)].work.data(), expected.data(),
                         count * sizeof(std::int64_t)));
    }
  }
}

// Floats: every rank must hold the same bits, close to the exact sum.
void check_float_reduction(ReduceAlgorithm algorithm, int ranks, std::size_t count, pcoll_op_t op) {
  const std::vector<ReducePlan> plans = plans_for(algorithm, ranks, count);
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
    INFO(describe(algorithm, ranks, count) << " op=" << op_name(op) << " rank " << r);
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

// Asynchronous execution with random timing, chunk by chunk, under the execution rules of
// reduce_plan.hpp as the engine keeps them: a rank posts every chunk of its step's send at
// the start of the step; each chunk is delivered on its own, at a random moment, reading
// the sender's work buffer and writing the receiver's buffer at delivery time (the worst
// case for both source reuse and early arrival); the receiver handles arrived chunks in
// arrival order, reducing one into a range its own send still reads only once all of that
// send's chunks were delivered; a step ends once every incoming chunk was handled,
// whether or not its own sends were delivered. Any plan that relies on more ordering than
// those rules give ends with a wrong integer sum for some seed.
void check_async_execution(ReduceAlgorithm algorithm, int ranks, std::size_t count,
                           std::size_t chunk_elems, std::uint64_t seed) {
  const std::vector<ReducePlan> plans = plans_for(algorithm, ranks, count, chunk_elems);
  std::vector<SimRank> sim = make_ranks(plans, PCOLL_INT64);
  std::vector<std::int64_t> expected(count, 0);
  std::mt19937_64 rng(seed);
  for (auto& rank : sim) {
    auto* values = reinterpret_cast<std::int64_t*>(rank.work.data());
    for (std::size_t i = 0; i < count; ++i) {
      values[i] = static_cast<std::int64_t>(rng() % 1000);
      expected[i] += values[i];
    }
  }
  constexpr std::size_t esize = sizeof(std::int64_t);
  struct Message {
    std::size_t from;
    const Step* step;  // the sender's step
    std::size_t chunk;
  };
  const auto n = static_cast<std::size_t>(ranks);
  const std::size_t tags = plans[0].tag_count;
  std::vector<std::size_t> position(n, 0);   // next step of each rank
  std::vector<bool> issued(n, false);        // current step's send issued
  std::vector<std::size_t> handled(n, 0);    // current step's arrived chunks handled
  // [rank][tag]: chunk indices in arrival order, and own send chunks not yet delivered.
  std::vector<std::vector<std::vector<std::uint32_t>>> arrivals(n, std::vector<std::vector<std::uint32_t>>(tags));
  std::vector<std::vector<std::size_t>> undelivered(n, std::vector<std::size_t>(tags, 0));
  std::vector<Message> in_flight;

  const auto current = [&](std::size_t r) -> const Step* {
    return position[r] < plans[r].steps.size() ? &plans[r].steps[position[r]] : nullptr;
  };
  const auto can_handle_arrival = [&](std::size_t r, const Step& step) {
    if (!step.receives() || handled[r] >= arrivals[r][step.tag].size()) return false;
    if (!step.reduces() || !step.sends() || !overlaps(step.send->offset, step.send->count,
                                                      step.recv->offset, step.recv->count)) {
      return true;
    }
    return undelivered[r][step.tag] == 0;  // the reduced range is still the source of our send
  };
  const auto can_finish = [&](std::size_t r, const Step& step) {
    return (!step.sends() || issued[r]) && (!step.receives() || handled[r] == step.recv->chunk_count());
  };

  for (;;) {
    // Enabled actions: 0..in_flight-1 deliver a chunk, then one per rank that can move.
    std::vector<std::size_t> movable;
    for (std::size_t r = 0; r < n; ++r) {
      const Step* step = current(r);
      if (step == nullptr) continue;
      if ((step->sends() && !issued[r]) || can_handle_arrival(r, *step) || can_finish(r, *step)) {
        movable.push_back(r);
      }
    }
    const std::size_t choices = in_flight.size() + movable.size();
    if (choices == 0) break;
    const std::size_t pick = rng() % choices;
    if (pick < in_flight.size()) {
      const Message m = in_flight[pick];
      in_flight[pick] = in_flight.back();  // deliveries are unordered anyway
      in_flight.pop_back();
      const Transfer& send = *m.step->send;
      const auto q = static_cast<std::size_t>(m.step->peer);
      const Chunk chunk = send.chunk(m.chunk);
      copy_bytes(landing_place(sim[q], send, chunk, esize), sim[m.from].work.data() + chunk.offset * esize,
                 chunk.count * esize);
      arrivals[q][m.step->tag].push_back(chunk.index);
      --undelivered[m.from][m.step->tag];
      continue;
    }
    const std::size_t r = movable[pick - in_flight.size()];
    const Step& step = *current(r);
    if (step.sends() && !issued[r]) {
      issued[r] = true;
      for (std::size_t i = 0; i < step.send->chunk_count(); ++i) in_flight.push_back(Message{r, &step, i});
      undelivered[r][step.tag] = step.send->chunk_count();
    } else if (can_handle_arrival(r, step)) {
      const std::uint32_t index = arrivals[r][step.tag][handled[r]];
      INFO(describe(algorithm, ranks, count) << " rank " << r << " tag " << step.tag);
      REQUIRE(index < step.recv->chunk_count());
      if (step.reduces()) reduce_chunk(sim[r], *step.recv, step.recv->chunk(index), PCOLL_INT64, PCOLL_OP_SUM);
      ++handled[r];
    } else {
      ++position[r];
      issued[r] = false;
      handled[r] = 0;
    }
  }
  for (std::size_t r = 0; r < n; ++r) {
    INFO("rank " << r);
    REQUIRE(position[r] == plans[r].steps.size());
    for (const Step& step : plans[r].steps) {
      // Exactly the chunks the sender cut, each once.
      if (step.receives()) CHECK(arrivals[r][step.tag].size() == step.recv->chunk_count());
    }
    REQUIRE(same_bytes(sim[r].work.data(), expected.data(), count * esize));
  }
}

// Several rounds through bounded landing pools, as the engine runs them (reduce_plan.hpp,
// Transfer): a chunk that lands in a slot is posted only while its ring position is free
// by the implicit rule (round t - 2 reduced) or the receiver's credits; a windowed receiver
// returns credits a quarter ring at a time and when a round's chunks are all reduced;
// chunks and credits are delivered in any order, each write reading the sender's work
// buffer and writing the receiver's at delivery time; a rank reduces a chunk of a range it
// sends only once its own chunk of that range was delivered, and joins the next round only
// once all its writes were delivered; data for the next round may arrive early. A write
// into a ring position that still holds an unreduced chunk fails at once; so does a state
// where nothing can move before every rank finished (a flow-control deadlock).
void check_pooled_rounds(ReduceAlgorithm algorithm, int ranks, std::size_t count, std::size_t chunk_elems,
                         std::size_t pool_chunks, int rounds, std::uint64_t seed) {
  constexpr std::size_t esize = sizeof(std::int64_t);
  const auto n = static_cast<std::size_t>(ranks);
  std::vector<ReducePlan> plans;
  for (int r = 0; r < ranks; ++r) plans.push_back(make_plan(algorithm, ranks, r, count, chunk_elems, pool_chunks));
  std::vector<SimRank> sim = make_ranks(plans, PCOLL_INT64);
  std::mt19937_64 rng(seed);
  const auto input = [&](std::size_t r, int t, std::size_t i) {
    return static_cast<std::int64_t>((r * 31 + static_cast<std::size_t>(t) * 17 + i * 7) % 1000);
  };
  const auto load_inputs = [&](std::size_t r, int t) {
    auto* values = reinterpret_cast<std::int64_t*>(sim[r].work.data());
    for (std::size_t i = 0; i < count; ++i) values[i] = input(r, t, i);
  };
  const std::size_t tags = plans[0].tag_count;
  struct RankState {
    int round = 0;
    std::size_t position = 0;  // step
    std::size_t posted = 0;    // chunks of the step's send posted
    std::vector<std::size_t> undelivered;  // [chunk] of the step's send: 1 until delivered
    std::size_t writes_in_flight = 0;
    std::vector<std::uint64_t> credit, sent;  // [tag], as the engine's credit_ / sent_
    // [parity][tag]: arrived chunks (in order), seen/done bitmaps, handled, prefix, credited
    struct Arrivals {
      std::vector<std::uint32_t> order;
      std::vector<std::uint8_t> seen, done;
      std::size_t handled = 0, prefix = 0, credited = 0;
    };
    std::vector<Arrivals> arrivals[2];
    std::vector<std::uint8_t> occupied;  // [landing element]: holds an unreduced chunk
    bool finished = false;
  };
  std::vector<RankState> state(n);
  for (std::size_t r = 0; r < n; ++r) {
    RankState& st = state[r];
    st.credit.assign(tags, 0);
    st.sent.assign(tags, 0);
    for (auto& parity : st.arrivals) {
      parity.resize(tags);
      for (const Step& step : plans[r].steps) {
        if (!step.receives()) continue;
        parity[step.tag].seen.assign(step.recv->chunk_count(), 0);
        parity[step.tag].done.assign(step.recv->chunk_count(), 0);
      }
    }
    st.occupied.assign(plans[r].landing_elems(), 0);
    load_inputs(r, 0);
    st.finished = plans[r].steps.empty() && rounds == 1;
  }
  struct Message {
    bool credit;
    std::size_t from, to;
    const Step* step;  // the sender's step (data), or the receiver's step (credit)
    int round;
    std::size_t chunk;
    std::uint64_t sequence;  // credit
  };
  std::vector<Message> in_flight;
  const auto current = [&](std::size_t r) -> const Step* {
    const RankState& st = state[r];
    return st.position < plans[r].steps.size() ? &plans[r].steps[st.position] : nullptr;
  };
  const auto can_post = [&](std::size_t r) {
    const Step* step = current(r);
    if (step == nullptr || !step->sends() || state[r].posted == step->send->chunk_count()) return false;
    const Transfer& send = *step->send;
    if (send.lands_in_result()) return true;
    const auto t = static_cast<std::uint64_t>(state[r].round);
    const std::uint64_t reduced = std::max<std::uint64_t>(t == 0 ? 0 : send.sequence(t - 1, 0), state[r].credit[step->tag]);
    return send.sequence(t, state[r].posted) < reduced + send.slot_depth;
  };
  // An arrived, unhandled chunk this rank can handle now, or -1.
  const auto handleable = [&](std::size_t r) -> long {
    const Step* step = current(r);
    if (step == nullptr || !step->receives()) return -1;
    const RankState& st = state[r];
    const auto& arrivals = st.arrivals[st.round & 1][step->tag];
    for (const std::uint32_t c : arrivals.order) {
      if (arrivals.done[c]) continue;
      if (step->reduces() && step->sends() && ranges_overlap(*step->send, *step->recv) &&
          (c >= st.posted || st.undelivered[c] != 0))
        continue;
      return static_cast<long>(c);
    }
    return -1;
  };
  const auto can_finish_step = [&](std::size_t r) {
    const Step* step = current(r);
    if (step == nullptr) return false;
    const RankState& st = state[r];
    const bool sent = !step->sends() || st.posted == step->send->chunk_count();
    const bool received = !step->receives() || st.arrivals[st.round & 1][step->tag].handled == step->recv->chunk_count();
    return sent && received;
  };
  const auto can_next_round = [&](std::size_t r) {
    const RankState& st = state[r];
    return !st.finished && current(r) == nullptr && st.writes_in_flight == 0;
  };

  for (;;) {
    std::vector<std::size_t> movable;
    for (std::size_t r = 0; r < n; ++r) {
      if (can_post(r) || handleable(r) >= 0 || can_finish_step(r) || can_next_round(r)) movable.push_back(r);
    }
    const std::size_t choices = in_flight.size() + movable.size();
    if (choices == 0) break;
    const std::size_t pick = rng() % choices;
    if (pick < in_flight.size()) {
      const Message m = in_flight[pick];
      in_flight[pick] = in_flight.back();
      in_flight.pop_back();
      if (m.credit) {
        state[m.to].credit[m.step->tag] = std::max(state[m.to].credit[m.step->tag], m.sequence);
        continue;
      }
      const Transfer& send = *m.step->send;
      const Chunk chunk = send.chunk(m.chunk);
      RankState& receiver = state[m.to];
      if (!send.lands_in_result()) {
        const std::size_t at = send.landing_offset(static_cast<std::uint64_t>(m.round), m.chunk);
        for (std::size_t e = 0; e < chunk.count; ++e) {
          INFO(describe(algorithm, ranks, count) << " pool " << pool_chunks << " round " << m.round << " tag "
                                                 << m.step->tag << " chunk " << m.chunk);
          REQUIRE_FALSE(receiver.occupied[at + e]);  // a write over an unreduced chunk
          receiver.occupied[at + e] = 1;
        }
      }
      copy_bytes(landing_place(sim[m.to], send, chunk, esize, static_cast<std::uint64_t>(m.round)),
                 sim[m.from].work.data() + chunk.offset * esize, chunk.count * esize);
      auto& arrivals = receiver.arrivals[m.round & 1][m.step->tag];
      REQUIRE((m.round == receiver.round || m.round == receiver.round + 1));
      arrivals.seen[m.chunk] = 1;
      arrivals.order.push_back(static_cast<std::uint32_t>(m.chunk));
      RankState& sender = state[m.from];
      --sender.writes_in_flight;
      if (sender.round == m.round && current(m.from) == m.step) sender.undelivered[m.chunk] = 0;
      continue;
    }
    const std::size_t r = movable[pick - in_flight.size()];
    RankState& st = state[r];
    const Step* step = current(r);
    const long arrived = handleable(r);
    if (can_post(r)) {
      if (st.posted == 0) st.undelivered.assign(step->send->chunk_count(), 1);
      in_flight.push_back(Message{false, r, static_cast<std::size_t>(step->peer), step, st.round, st.posted, 0});
      ++st.posted;
      ++st.writes_in_flight;
      if (!step->send->lands_in_result()) st.sent[step->tag] = step->send->sequence(static_cast<std::uint64_t>(st.round), st.posted);
    } else if (arrived >= 0) {
      const auto c = static_cast<std::size_t>(arrived);
      const Transfer& recv = *step->recv;
      auto& arrivals = st.arrivals[st.round & 1][step->tag];
      if (step->reduces()) {
        reduce_chunk(sim[r], recv, recv.chunk(c), PCOLL_INT64, PCOLL_OP_SUM, static_cast<std::uint64_t>(st.round));
        const std::size_t at = recv.landing_offset(static_cast<std::uint64_t>(st.round), c);
        for (std::size_t e = 0; e < recv.chunk(c).count; ++e) st.occupied[at + e] = 0;
      }
      arrivals.done[c] = 1;
      ++arrivals.handled;
      while (arrivals.prefix < recv.chunk_count() && arrivals.done[arrivals.prefix]) ++arrivals.prefix;
      const bool all = arrivals.handled == recv.chunk_count();
      if (recv.windowed() &&
          (all || arrivals.prefix - arrivals.credited >= std::max<std::size_t>(1, recv.slot_depth / 4))) {
        arrivals.credited = arrivals.prefix;
        const auto t = static_cast<std::uint64_t>(st.round);
        in_flight.push_back(Message{true, r, static_cast<std::size_t>(step->peer), step, st.round, 0,
                                    all ? recv.sequence(t + 1, 0) : recv.sequence(t, arrivals.prefix)});
      }
    } else if (can_finish_step(r)) {
      ++st.position;
      st.posted = 0;
    } else {
      // The round is complete here: exact sum of every rank's inputs of this round.
      auto* values = reinterpret_cast<const std::int64_t*>(sim[r].work.data());
      for (std::size_t i = 0; i < count; ++i) {
        std::int64_t want = 0;
        for (std::size_t q = 0; q < n; ++q) want += input(q, st.round, i);
        INFO(describe(algorithm, ranks, count) << " pool " << pool_chunks << " rank " << r << " round " << st.round
                                               << " element " << i);
        REQUIRE(values[i] == want);
      }
      for (auto& arrivals : st.arrivals[st.round & 1]) {
        for (const std::uint32_t c : arrivals.order) arrivals.seen[c] = arrivals.done[c] = 0;
        arrivals.order.clear();
        arrivals.handled = arrivals.prefix = arrivals.credited = 0;
      }
      if (st.round + 1 == rounds) {
        st.finished = true;
      } else {
        ++st.round;
        st.position = 0;
        st.posted = 0;
        load_inputs(r, st.round);
      }
    }
  }
  for (std::size_t r = 0; r < n; ++r) {
    INFO(describe(algorithm, ranks, count) << " pool " << pool_chunks << " seed " << seed << ": rank " << r
                                           << " stopped in round " << state[r].round << " at step "
                                           << state[r].position);
    REQUIRE(state[r].finished);
  }
}

}  // namespace

TEST_CASE("every rank ends with the exact integer reduction") {
  for_each_configuration([](ReduceAlgorithm algorithm, int ranks, std::size_t count) {
    check_integer_reduction(algorithm, ranks, count);
  });
  for (const ReduceAlgorithm algorithm : kAlgorithms) {
    for (const int ranks : big_ranks_for(algorithm)) {
      check_integer_reduction(algorithm, ranks, kBigCount, {PCOLL_OP_SUM});
    }
  }
}

TEST_CASE("float results are bitwise identical on all ranks") {
  for_each_configuration([](ReduceAlgorithm algorithm, int ranks, std::size_t count) {
    for (const pcoll_op_t op : {PCOLL_OP_SUM, PCOLL_OP_MIN, PCOLL_OP_MAX}) {
      check_float_reduction(algorithm, ranks, count, op);
    }
  });
  for (const ReduceAlgorithm algorithm : kAlgorithms) {
    for (const int ranks : big_ranks_for(algorithm)) {
      check_float_reduction(algorithm, ranks, kBigCount, PCOLL_OP_SUM);
    }
  }
}

TEST_CASE("every exchange is symmetric: if r sends to q at step s, q expects r at step s") {
  for_each_configuration([](ReduceAlgorithm algorithm, int ranks, std::size_t count) {
    const std::vector<ReducePlan> plans = plans_for(algorithm, ranks, count);
    for (const ReducePlan& plan : plans) {
      for (const Step& s : plan.steps) {
        INFO(describe(algorithm, ranks, count) << " rank " << plan.rank << " step " << s.tag);
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
  for_each_configuration([](ReduceAlgorithm algorithm, int ranks, std::size_t count) {
    const std::vector<ReducePlan> plans = plans_for(algorithm, ranks, count);
    for (const ReducePlan& plan : plans) {
      INFO(describe(algorithm, ranks, count) << " rank " << plan.rank);
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
  for_each_configuration([](ReduceAlgorithm algorithm, int ranks, std::size_t count) {
    for (const ReducePlan& plan : plans_for(algorithm, ranks, count)) {
      for (const Step& s : plan.steps) {
        if (!s.receives() || !s.recv->lands_in_result() || !s.sends()) continue;
        INFO(describe(algorithm, ranks, count) << " rank " << plan.rank << " step " << s.tag);
        CHECK_FALSE(overlaps(s.recv->offset, s.recv->count, s.send->offset, s.send->count));
      }
    }
  });
}

TEST_CASE("plans give the exact result under any interleaving the execution rules allow") {
  for (const ReduceAlgorithm algorithm : kAlgorithms) {
    for (int ranks = 1; ranks <= kMaxTestedRanks; ++ranks) {
      for (const std::size_t count : {std::size_t{1}, static_cast<std::size_t>(ranks) + 1, std::size_t{100}}) {
        // One element per chunk, a few, and one chunk per transfer.
        for (const std::size_t chunk_elems : {std::size_t{1}, std::size_t{3}, std::size_t{1000}}) {
          for (std::uint64_t seed = 1; seed <= 3; ++seed) {
            INFO(describe(algorithm, ranks, count) << " chunk_elems " << chunk_elems << " seed " << seed);
            check_async_execution(algorithm, ranks, count, chunk_elems, seed);
          }
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
  for_each_configuration([](ReduceAlgorithm algorithm, int ranks, std::size_t count) {
    for (const ReducePlan& plan : plans_for(algorithm, ranks, count)) {
      const auto last_tag = plan.tag_count - 1;
      for (const Step& s : plan.steps) {
        INFO(describe(algorithm, ranks, count) << " rank " << plan.rank << " step " << s.tag);
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
  // in either width (P up to what the 32-bit layout addresses).
  for (const unsigned bits : {64u, 32u}) {
    const NoticeCodec codec(bits);
    for (const ReduceAlgorithm algorithm : kAlgorithms) {
      for (const int ranks : {1, 2, 3, 8, 13, 1000, 32767}) {
        for (const std::size_t count : {std::size_t{0}, std::size_t{1000}, huge}) {
          const ReducePlan plan =
              make_plan(algorithm, ranks, ranks - 1, count, chunk_elems_for(count, 4096, 4, codec.max_chunks()));
          INFO(bits << "-bit " << describe(algorithm, ranks, count));
          CHECK(plan.tag_count <= codec.max_tags());
          for (const Step& s : plan.steps) {
            for (const auto& transfer : {s.send, s.recv}) {
              if (transfer) CHECK(transfer->chunk_count() <= codec.max_chunks());
            }
          }
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

TEST_CASE("a single rank has nothing to exchange") {
  for (const ReduceAlgorithm algorithm : kAlgorithms) {
    const ReducePlan plan = make_plan(algorithm, 1, 0, 1000, 64);
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

TEST_CASE("small vectors use recursive doubling, large ones rabenseifner") {
  CHECK(choose_algorithm(16, 1024) == ReduceAlgorithm::recursive_doubling);
  CHECK(choose_algorithm(16, kRecursiveDoublingMaxBytes) == ReduceAlgorithm::recursive_doubling);
  CHECK(choose_algorithm(16, kRecursiveDoublingMaxBytes + 1) == ReduceAlgorithm::rabenseifner);
  CHECK(choose_algorithm(16, 1 << 20) == ReduceAlgorithm::rabenseifner);
  CHECK(choose_algorithm(2, 1 << 20) == ReduceAlgorithm::recursive_doubling);
  CHECK(choose_algorithm(3, 1 << 20) == ReduceAlgorithm::recursive_doubling);
  CHECK(choose_algorithm(5, 1 << 20) == ReduceAlgorithm::rabenseifner);
  CHECK(choose_algorithm(16, 1 << 20, 1 << 20) == ReduceAlgorithm::recursive_doubling);
}

TEST_CASE("bounded landing pools: rounds stay exact, no ring position is overwritten, no deadlock") {
  for (const ReduceAlgorithm algorithm : kAlgorithms) {
    for (const int ranks : {2, 3, 4, 5, 6, 8}) {
      for (const std::size_t count : {std::size_t{1}, std::size_t{40}, std::size_t{97}}) {
        // One chunk per ring position up to rings far larger than a round.
        for (const std::size_t pool_chunks : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{5}, std::size_t{64}}) {
          for (std::uint64_t seed = 1; seed <= 3; ++seed) {
            CAPTURE(seed);
            check_pooled_rounds(algorithm, ranks, count, 4, pool_chunks, 4, seed);
          }
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
