// The collective rules of tests/helpers/collective_rules.hpp: one function per rule of
// docs/design.md's "Semantics", run by every rank of a job.
#include "collective_rules.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <utility>

#include <unistd.h>
#include <string>
#include <thread>
#include <vector>

#include <malloc.h>

#include <pcoll/private.h>

namespace collective_rules {
namespace {

const pcoll_mode_t kModes[] = {PCOLL_MODE_SYNC, PCOLL_MODE_SOLO, PCOLL_MODE_MAJORITY, PCOLL_MODE_QUORUM};
const pcoll_dtype_t kDtypes[] = {PCOLL_FLOAT32, PCOLL_FLOAT64, PCOLL_INT32,
                                 PCOLL_INT64, PCOLL_BFLOAT16, PCOLL_FLOAT16};
const pcoll_op_t kOps[] = {PCOLL_OP_SUM, PCOLL_OP_AVG, PCOLL_OP_MIN, PCOLL_OP_MAX};

const char* mode_name(pcoll_mode_t m) {
  return m == PCOLL_MODE_SYNC ? "sync" : m == PCOLL_MODE_SOLO ? "solo" : m == PCOLL_MODE_MAJORITY ? "majority" : "quorum";
}

// True when `value` is the same on every rank (collective).
bool all_agree(const Rank& me, uint64_t value) {
  const int64_t v = static_cast<int64_t>(value >> 2);
  int64_t send[2] = {v, -v};
  int64_t recv[2] = {0, 0};
  REQUIRE(pcoll_allreduce_run(me.agree, send, recv, nullptr) == PCOLL_SUCCESS);
  return recv[0] == v && -recv[1] == v;
}

// Over the ranks that pass a time, the earliest and the latest of them (collective; ranks
// without one pass nullopt). steady_clock is the host's CLOCK_MONOTONIC, one clock for every
// process and namespace here, so the ranks' times compare.
std::pair<std::chrono::steady_clock::time_point, std::chrono::steady_clock::time_point> time_span(
    const Rank& me, std::optional<std::chrono::steady_clock::time_point> mine) {
  using std::chrono::nanoseconds;
  const int64_t ns = mine ? std::chrono::duration_cast<nanoseconds>(mine->time_since_epoch()).count() : 0;
  int64_t send[2] = {mine ? -ns : INT64_MIN, mine ? ns : INT64_MIN};
  int64_t recv[2] = {0, 0};
  REQUIRE(pcoll_allreduce_run(me.agree, send, recv, nullptr) == PCOLL_SUCCESS);
  return {std::chrono::steady_clock::time_point(nanoseconds(-recv[0])),
          std::chrono::steady_clock::time_point(nanoseconds(recv[1]))};
}

uint64_t fnv1a(const void* data, size_t bytes, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// --- Element encoding, written independently of the library's conversions. -------------

size_t elem_bytes(pcoll_dtype_t d) {
  switch (d) {
    case PCOLL_FLOAT64: case PCOLL_INT64: return 8;
    case PCOLL_FLOAT32: case PCOLL_INT32: return 4;
    default: return 2;
  }
}

// Small integers |v| <= 2048 are exact in binary16 and bfloat16 (bfloat16: |v| <= 256).
uint16_t int_to_half(int v) {
  if (v == 0) return 0;
  const uint16_t sign = v < 0 ? 0x8000 : 0;
  unsigned a = static_cast<unsigned>(std::abs(v));
  int e = 31 - std::countl_zero(a);            // a = 1.m * 2^e
  const unsigned mant = (a << (10 - e)) & 0x3ff;  // exact for a < 2^11
  return static_cast<uint16_t>(sign | ((e + 15) << 10) | mant);
}

double half_to_double(uint16_t h) {
  const int sign = h & 0x8000 ? -1 : 1;
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  if (e == 0x1f) return m ? std::nan("") : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(m, -24);
  return sign * std::ldexp(1024 + m, e - 25);
}

uint16_t int_to_bf16(int v) {
  const float f = static_cast<float>(v);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);  // exact: small ints have <= 8 significant bits
}

double bf16_to_double(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void store(pcoll_dtype_t d, std::vector<std::byte>& buf, size_t i, int v) {
  std::byte* at = buf.data() + i * elem_bytes(d);
  switch (d) {
    case PCOLL_FLOAT32: { const float x = static_cast<float>(v); std::memcpy(at, &x, 4); break; }
    case PCOLL_FLOAT64: { const double x = v; std::memcpy(at, &x, 8); break; }
    case PCOLL_INT32: { const int32_t x = v; std::memcpy(at, &x, 4); break; }
    case PCOLL_INT64: { const int64_t x = v; std::memcpy(at, &x, 8); break; }
    case PCOLL_FLOAT16: { const uint16_t x = int_to_half(v); std::memcpy(at, &x, 2); break; }
    case PCOLL_BFLOAT16: { const uint16_t x = int_to_bf16(v); std::memcpy(at, &x, 2); break; }
  }
}

double load(pcoll_dtype_t d, const std::vector<std::byte>& buf, size_t i) {
  const std::byte* at = buf.data() + i * elem_bytes(d);
  switch (d) {
    case PCOLL_FLOAT32: { float x; std::memcpy(&x, at, 4); return x; }
    case PCOLL_FLOAT64: { double x; std::memcpy(&x, at, 8); return x; }
    case PCOLL_INT32: { int32_t x; std::memcpy(&x, at, 4); return x; }
    case PCOLL_INT64: { int64_t x; std::memcpy(&x, at, 8); return static_cast<double>(x); }
    case PCOLL_FLOAT16: { uint16_t x; std::memcpy(&x, at, 2); return half_to_double(x); }
    case PCOLL_BFLOAT16: { uint16_t x; std::memcpy(&x, at, 2); return bf16_to_double(x); }
  }
  return 0;
}

// Input of `rank` at `round`, element i: a small integer in [-8, 8].
int input(int rank, uint64_t round, size_t i) {
  return static_cast<int>((rank * 7 + round * 3 + i * 5 + (i >> 7)) % 17) - 8;
}

bool is_fresh(const pcoll_round_info_t& info, int rank) {
  return (info.fresh_mask[rank / 64] >> (rank % 64)) & 1u;
}

// Reference result of element i of a round from each rank's contributed inputs (lists
// of rounds whose input that rank contributed). Empty contributions add nothing.
double reference(pcoll_dtype_t d, pcoll_op_t op, const std::vector<std::vector<uint64_t>>& parts, size_t i) {
  const int size = static_cast<int>(parts.size());
  bool any = false;
  double acc = 0;
  for (int r = 0; r < size; ++r) {
    for (const uint64_t round : parts[r]) {
      const double v = input(r, round, i);
      if (!any) acc = v;
      else if (op == PCOLL_OP_MIN) acc = std::min(acc, v);
      else if (op == PCOLL_OP_MAX) acc = std::max(acc, v);
      else acc += v;
      any = true;
    }
  }
  if (!any) {
    if (op == PCOLL_OP_MIN) return d == PCOLL_INT32 ? INT32_MAX : d == PCOLL_INT64 ? static_cast<double>(INT64_MAX) : INFINITY;
    if (op == PCOLL_OP_MAX) return d == PCOLL_INT32 ? INT32_MIN : d == PCOLL_INT64 ? static_cast<double>(INT64_MIN) : -INFINITY;
    return 0;
  }
  if (op == PCOLL_OP_AVG) {
    if (d == PCOLL_INT32 || d == PCOLL_INT64) return std::trunc(acc / size);
    return acc / size;
  }
  return acc;
}

bool close_enough(pcoll_dtype_t d, pcoll_op_t op, double got, double want) {
  if (std::isinf(want)) return got == want;
  if (op != PCOLL_OP_AVG || d == PCOLL_INT32 || d == PCOLL_INT64) return got == want;
  const double rel = d == PCOLL_FLOAT64 ? 1e-12 : d == PCOLL_FLOAT32 ? 1e-6 : d == PCOLL_FLOAT16 ? 1e-3 : 1e-2;
  return std::fabs(got - want) <= rel * std::max(1.0, std::fabs(want));
}

// Tracks, per rank, which inputs a round contained, from the agreed fresh masks
// (max_lag = 1: a late input is in the carry before the rank joins the next round).
struct Ledger {
  explicit Ledger(int size) : pending(static_cast<size_t>(size)) {}
  bool carry = true;
  std::vector<std::vector<uint64_t>> pending;

  std::vector<std::vector<uint64_t>> round(const pcoll_round_info_t& info, bool flush) {
    const int size = static_cast<int>(pending.size());
    std::vector<std::vector<uint64_t>> parts(pending.size());
    for (int r = 0; r < size; ++r) {
      parts[r] = pending[r];
      pending[r].clear();
      if (flush) continue;
      if (is_fresh(info, r)) parts[r].push_back(info.round);
      else if (carry) pending[r].push_back(info.round);
    }
    return parts;
  }
};

// Runs `rounds` rounds (+ a flush when asked) of one handle and checks every element of
// every result against the reference. Returns the number of wrong elements.
size_t check_handle(const Rank& me, pcoll_mode_t mode, pcoll_dtype_t d, pcoll_op_t op, size_t count, int rounds,
                    bool flush, const pcoll_allreduce_opts_t* opts = nullptr,
                    const std::vector<int>& sleepy_rounds = {}, int sleeper = -1) {
  pcoll_allreduce_t* h = nullptr;
  REQUIRE_MESSAGE(pcoll_allreduce_create(me.comm, count, d, op, mode, opts, &h) == PCOLL_SUCCESS,
                  pcoll_last_error());
  Ledger ledger(me.size);
  if (opts != nullptr) ledger.carry = opts->late == PCOLL_LATE_CARRY;
  size_t wrong = 0;
  std::vector<std::byte> send(count * elem_bytes(d)), recv(count * elem_bytes(d));
  for (int t = 0; t <= rounds; ++t) {
    const bool is_flush = t == rounds;
    if (is_flush && !flush) break;
    pcoll_round_info_t info{};
    if (is_flush) {
      REQUIRE_MESSAGE(pcoll_allreduce_flush(h, recv.data(), &info) == PCOLL_SUCCESS, pcoll_last_error());
    } else {
      for (size_t i = 0; i < count; ++i) store(d, send, i, input(me.rank, t, i));
      if (me.rank == sleeper && std::find(sleepy_rounds.begin(), sleepy_rounds.end(), t) != sleepy_rounds.end())
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      REQUIRE_MESSAGE(pcoll_allreduce_run(h, send.data(), recv.data(), &info) == PCOLL_SUCCESS, pcoll_last_error());
    }
    CHECK(info.round == static_cast<uint64_t>(t));
    const auto parts = ledger.round(info, is_flush);
    for (size_t i = 0; i < count; ++i) {
      const double got = load(d, recv, i);
      const double want = reference(d, op, parts, i);
      if (!close_enough(d, op, got, want)) {
        if (wrong < 3)
          MESSAGE(mode_name(mode) << " dtype " << d << " op " << op << " count " << count << " round " << t
                  << " element " << i << ": got " << got << ", want " << want);
        ++wrong;
      }
    }
  }
  REQUIRE(pcoll_allreduce_destroy(h) == PCOLL_SUCCESS);
  return wrong;
}

// Bytes the allocator has handed out and not had back (small chunks plus mmapped ones). Not
// the RSS: providers preallocate buffer pools (the tcp provider, tens of MB) whose pages
// become resident as they are first used, so RSS rises for thousands of rounds without
// anything being allocated.
// Under the sanitizers the allocator is theirs: glibc's mallinfo2 then walks arenas nobody
// allocates from, and glibc aborts at thread exit ("a->attached_threads > 0"). Not called.
long heap_in_use_kib() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return 0;
#else
  const struct mallinfo2 m = mallinfo2();
  return static_cast<long>((m.uordblks + m.hblkhd) / 1024);
#endif
}

}  // namespace

bool open(Rank& me) {
  me.rank = pcoll_comm_rank(me.comm);
  me.size = pcoll_comm_size(me.comm);
  return pcoll_allreduce_create(me.comm, 2, PCOLL_INT64, PCOLL_OP_MAX, PCOLL_MODE_SYNC, nullptr, &me.agree) ==
         PCOLL_SUCCESS;
}

void close(Rank& me) {
  if (me.agree != nullptr) pcoll_allreduce_destroy(me.agree);
  me.agree = nullptr;
}

void every_mode_dtype_op_and_count_match_a_reference(const Rank& me) {
  for (const auto mode : kModes)
    for (const auto d : kDtypes)
      for (const auto op : kOps)
        for (const size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}}) {
          CAPTURE(mode); CAPTURE(d); CAPTURE(op); CAPTURE(count);
          CHECK(check_handle(me, mode, d, op, count, 3, false) == 0);
        }
}

void large_vectors_are_reduced_correctly(const Rank& me) {
  const size_t count = me.large_count;
  for (const auto mode : kModes) {
    CHECK(check_handle(me, mode, PCOLL_FLOAT32, PCOLL_OP_SUM, count, 2, false) == 0);
    CHECK(check_handle(me, mode, PCOLL_INT64, PCOLL_OP_MAX, count, 2, false) == 0);
    CHECK(check_handle(me, mode, PCOLL_BFLOAT16, PCOLL_OP_AVG, count, 1, false) == 0);
  }
}

void float_results_are_bitwise_identical_on_every_rank(const Rank& me) {
  for (const auto mode : kModes)
    for (const auto d : {PCOLL_FLOAT32, PCOLL_FLOAT64, PCOLL_BFLOAT16})
      for (const size_t count : {size_t{1000}, size_t{70000}}) {
        pcoll_allreduce_t* h = nullptr;
        REQUIRE(pcoll_allreduce_create(me.comm, count, d, PCOLL_OP_SUM, mode, nullptr, &h) == PCOLL_SUCCESS);
        std::mt19937_64 rng(1234 + me.rank);
        std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
        std::vector<std::byte> send(count * elem_bytes(d)), recv(send.size());
        for (int t = 0; t < 10; ++t) {
          for (size_t i = 0; i < count; ++i) {
            const float f = dist(rng) * 1000.0f;
            if (d == PCOLL_FLOAT32) std::memcpy(send.data() + 4 * i, &f, 4);
            else if (d == PCOLL_FLOAT64) { const double x = f / 3.0; std::memcpy(send.data() + 8 * i, &x, 8); }
            else { uint32_t bits; std::memcpy(&bits, &f, 4); const uint16_t b = static_cast<uint16_t>(bits >> 16); std::memcpy(send.data() + 2 * i, &b, 2); }
          }
          pcoll_round_info_t info{};
          REQUIRE(pcoll_allreduce_run(h, send.data(), recv.data(), &info) == PCOLL_SUCCESS);
          CAPTURE(mode); CAPTURE(d); CAPTURE(count); CAPTURE(t);
          CHECK(all_agree(me, fnv1a(recv.data(), recv.size())));
        }
        REQUIRE(pcoll_allreduce_destroy(h) == PCOLL_SUCCESS);
      }
}

void a_late_rank_is_reported_and_its_data_carried(const Rank& me) {
  const int sleeper = me.size - 1;
  const std::vector<int> sleepy = {3, 4, 7};
  const int rounds = 10;
  pcoll_allreduce_t* h = nullptr;
  REQUIRE(pcoll_allreduce_create(me.comm, 16, PCOLL_INT64, PCOLL_OP_SUM, PCOLL_MODE_SOLO, nullptr, &h) == PCOLL_SUCCESS);
  Ledger ledger(me.size);
  int64_t results_total = 0, inputs_total = 0;
  std::vector<int64_t> send(16), recv(16);
  for (int t = 0; t <= rounds; ++t) {
    pcoll_round_info_t info{};
    const bool flush = t == rounds;
    if (flush) {
      REQUIRE(pcoll_allreduce_flush(h, recv.data(), &info) == PCOLL_SUCCESS);
    } else {
      for (size_t i = 0; i < 16; ++i) send[i] = input(me.rank, t, i);
      if (me.rank == sleeper && std::find(sleepy.begin(), sleepy.end(), t) != sleepy.end())
        std::this_thread::sleep_for(std::chrono::milliseconds(400));
      REQUIRE_MESSAGE(pcoll_allreduce_run(h, send.data(), recv.data(), &info) == PCOLL_SUCCESS, pcoll_last_error());
    }
    CAPTURE(t);
    const bool slept = std::find(sleepy.begin(), sleepy.end(), t) != sleepy.end();
    if (me.size > 1 && slept) {
      CHECK_FALSE(is_fresh(info, sleeper));
      if (me.rank == sleeper) CHECK(info.caller_late == 1);
    }
    if (!slept && me.rank == sleeper && !flush) CHECK(info.caller_late == (is_fresh(info, sleeper) ? 0 : 1));
    int popcount = 0;
    for (int r = 0; r < me.size; ++r) popcount += is_fresh(info, r);
    CHECK(info.fresh == popcount);
    CHECK(all_agree(me, fnv1a(info.fresh_mask, sizeof(uint64_t) * ((me.size + 63) / 64), info.fresh * 31 + info.initiator)));
    const auto parts = ledger.round(info, flush);
    for (size_t i = 0; i < 16; ++i) CHECK(static_cast<double>(recv[i]) == reference(PCOLL_INT64, PCOLL_OP_SUM, parts, i));
    for (size_t i = 0; i < 16; ++i) results_total += recv[i];
    if (!flush)
      for (int r = 0; r < me.size; ++r)
        for (size_t i = 0; i < 16; ++i) inputs_total += input(r, t, i);
  }
  CHECK(results_total == inputs_total);  // carry + flush lose nothing
  REQUIRE(pcoll_allreduce_destroy(h) == PCOLL_SUCCESS);
}

void late_drop_leaves_late_data_out(const Rank& me) {
  pcoll_allreduce_opts_t opts;
  pcoll_allreduce_opts_init(&opts);
  opts.late = PCOLL_LATE_DROP;
  CHECK(check_handle(me, PCOLL_MODE_SOLO, PCOLL_INT64, PCOLL_OP_SUM, 16, 8, true, &opts, {2, 5}, me.size - 1) == 0);
  CHECK(check_handle(me, PCOLL_MODE_MAJORITY, PCOLL_INT32, PCOLL_OP_SUM, 16, 8, true, &opts, {2, 5}, me.size - 1) == 0);
}

void carried_data_arrives_later_and_flush_drains_it(const Rank& me) {
  for (const auto mode : kModes)
    for (const auto op : kOps)
      CHECK(check_handle(me, mode, PCOLL_INT64, op, 33, 8, true, nullptr, {1, 2, 6}, me.size - 1) == 0);
}

void many_rounds_complete_exactly_once(const Rank& me) {
  pcoll_allreduce_t* h = nullptr;
  REQUIRE(pcoll_allreduce_create(me.comm, 1, PCOLL_INT64, PCOLL_OP_SUM, PCOLL_MODE_SOLO, nullptr, &h) == PCOLL_SUCCESS);
  const int rounds = me.many_rounds;
  int64_t one = 1, out = 0, total = 0;
  long heap_early = 0;
  bool in_order = true;
  for (int t = 0; t < rounds; ++t) {
    pcoll_round_info_t info{};
    REQUIRE_MESSAGE(pcoll_allreduce_run(h, &one, &out, &info) == PCOLL_SUCCESS, pcoll_last_error());
    in_order = in_order && info.round == static_cast<uint64_t>(t);
    total += out;
    if (t == rounds / 10 && me.check_heap) heap_early = heap_in_use_kib();
  }
  pcoll_round_info_t info{};
  REQUIRE(pcoll_allreduce_flush(h, &out, &info) == PCOLL_SUCCESS);
  total += out;
  CHECK(in_order);
  CHECK(total == static_cast<int64_t>(rounds) * me.size);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // (The sanitizers replace the allocator, whose mallinfo2 then says nothing; LeakSanitizer
  // checks for leaks there instead.) Steady state allocates nothing: what the first tenth
  // of the rounds did not allocate, the other nine tenths must not either.
  if (me.check_heap) CHECK(heap_in_use_kib() - heap_early < 256);
#else
  (void)heap_early;
#endif
  REQUIRE(pcoll_allreduce_destroy(h) == PCOLL_SUCCESS);
}

void majority_initiator_is_the_agreed_draw(const Rank& me) {
  pcoll_allreduce_t* h = nullptr;
  pcoll_allreduce_opts_t opts;
  pcoll_allreduce_opts_init(&opts);
  opts.seed = 42;
  REQUIRE(pcoll_allreduce_create(me.comm, 4, PCOLL_FLOAT32, PCOLL_OP_SUM, PCOLL_MODE_MAJORITY, &opts, &h) == PCOLL_SUCCESS);
  std::vector<int> times(me.size, 0);
  float send[4] = {1, 2, 3, 4}, recv[4];
  const int rounds = 40 * me.size;
  uint64_t history = 0;
  for (int t = 0; t < rounds; ++t) {
    pcoll_round_info_t info{};
    REQUIRE_MESSAGE(pcoll_allreduce_run(h, send, recv, &info) == PCOLL_SUCCESS, pcoll_last_error());
    const int drawn = pcoll_allreduce_majority_initiator(h, info.round);
    CHECK(info.initiator == drawn);
    REQUIRE(drawn >= 0);
    REQUIRE(drawn < me.size);
    ++times[drawn];
    history = fnv1a(&drawn, sizeof drawn, history);
  }
  CHECK(all_agree(me, history));
  for (int r = 0; r < me.size; ++r) CHECK(times[r] > 0);
  // A different seed draws a different sequence.
  pcoll_allreduce_t* other = nullptr;
  opts.seed = 43;
  REQUIRE(pcoll_allreduce_create(me.comm, 4, PCOLL_FLOAT32, PCOLL_OP_SUM, PCOLL_MODE_MAJORITY, &opts, &other) == PCOLL_SUCCESS);
  if (me.size > 1) {
    int same = 0;
    for (int t = 0; t < 64; ++t)
      same += pcoll_allreduce_majority_initiator(h, t) == pcoll_allreduce_majority_initiator(other, t);
    CHECK(same < 64);
  }
  REQUIRE(pcoll_allreduce_destroy(other) == PCOLL_SUCCESS);
  REQUIRE(pcoll_allreduce_destroy(h) == PCOLL_SUCCESS);
}

void max_lag_bounds_how_far_others_run_ahead(const Rank& me) {
  if (me.size < 2) return;
  const int sleeper = me.size - 1;
  const int slow_ms = 100;
  // The ranks leave the barrier at different moments (by several ms on a loaded host), so
  // the sleeper's first sleep may begin before this rank's clock starts: the bound allows
  // that much, and still fails if a rank ran one round further ahead (a whole sleep less).
  const double skew_ms = 25;
  for (const uint32_t lag : {1u, 2u}) {
    pcoll_allreduce_opts_t opts;
    pcoll_allreduce_opts_init(&opts);
    opts.max_lag = lag;
    pcoll_allreduce_t* h = nullptr;
    REQUIRE(pcoll_allreduce_create(me.comm, 8, PCOLL_INT32, PCOLL_OP_SUM, PCOLL_MODE_SOLO, &opts, &h) == PCOLL_SUCCESS);
    int32_t send[8] = {1, 1, 1, 1, 1, 1, 1, 1}, recv[8];
    REQUIRE(pcoll_barrier(me.comm) == PCOLL_SUCCESS);
    const auto begin = std::chrono::steady_clock::now();
    for (int t = 0; t < 6; ++t) {
      if (me.rank == sleeper) std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
      REQUIRE(pcoll_allreduce_run(h, send, recv, nullptr) == PCOLL_SUCCESS);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
      // Round t needs the sleeper's run(t - lag), which it calls after (t - lag + 1) sleeps.
      const int sleeps = t - static_cast<int>(lag) + 1;
      CAPTURE(lag); CAPTURE(t); CAPTURE(ms);
      if (sleeps > 0) CHECK(ms >= sleeps * slow_ms - skew_ms);
    }
    pcoll_round_info_t info{};
    REQUIRE(pcoll_allreduce_flush(h, recv, &info) == PCOLL_SUCCESS);
    REQUIRE(pcoll_allreduce_destroy(h) == PCOLL_SUCCESS);
  }
}

void sync_every_rounds_are_synchronous(const Rank& me) {
  pcoll_allreduce_opts_t opts;
  pcoll_allreduce_opts_init(&opts);
  opts.sync_every = 3;
  for (const auto mode : {PCOLL_MODE_SOLO, PCOLL_MODE_MAJORITY}) {
    pcoll_allreduce_t* h = nullptr;
    REQUIRE(pcoll_allreduce_create(me.comm, 4, PCOLL_INT64, PCOLL_OP_SUM, mode, &opts, &h) == PCOLL_SUCCESS);
    int64_t send[4] = {1, 2, 3, 4}, recv[4];
    for (int t = 0; t < 9; ++t) {
      if (me.rank == me.size - 1 && t % 3 == 1) std::this_thread::sleep_for(std::chrono::milliseconds(30));
      pcoll_round_info_t info{};
      REQUIRE(pcoll_allreduce_run(h, send, recv, &info) == PCOLL_SUCCESS);
      CAPTURE(t);
      if ((t + 1) % 3 == 0) {
        CHECK(info.fresh == me.size);
        CHECK(info.initiator == -1);
        CHECK(info.caller_late == 0);
      } else {
        CHECK(info.initiator >= 0);
      }
    }
    pcoll_round_info_t info{};
    REQUIRE(pcoll_allreduce_flush(h, recv, &info) == PCOLL_SUCCESS);
    REQUIRE(pcoll_allreduce_destroy(h) == PCOLL_SUCCESS);
  }
}

void in_place_rounds_give_the_same_results(const Rank& me) {
  for (const auto mode : kModes) {
    pcoll_allreduce_t* h = nullptr;
    REQUIRE(pcoll_allreduce_create(me.comm, 100, PCOLL_INT64, PCOLL_OP_SUM, mode, nullptr, &h) == PCOLL_SUCCESS);
    Ledger ledger(me.size);
    std::vector<int64_t> buf(100);
    for (int t = 0; t < 4; ++t) {
      for (size_t i = 0; i < 100; ++i) buf[i] = input(me.rank, t, i);
      pcoll_round_info_t info{};
      REQUIRE(pcoll_allreduce_run(h, buf.data(), buf.data(), &info) == PCOLL_SUCCESS);
      const auto parts = ledger.round(info, false);
      for (size_t i = 0; i < 100; ++i) CHECK(static_cast<double>(buf[i]) == reference(PCOLL_INT64, PCOLL_OP_SUM, parts, i));
    }
    pcoll_round_info_t info{};
    REQUIRE(pcoll_allreduce_flush(h, buf.data(), &info) == PCOLL_SUCCESS);
    REQUIRE(pcoll_allreduce_destroy(h) == PCOLL_SUCCESS);
  }
}

// max_lag 3 lets the others run up to three rounds ahead of a slow application: results it
// has not collected move out of the work buffer, late sendbufs wait in a spilled carry,
// and in-place buffers are handed over a piece at a time. Every result still arrives in
// order, every input is in exactly one result (conservation, per element, after flush),
// and once the application has caught up the handle holds no more memory than at creation.
void a_lagging_application_gets_every_result_and_loses_nothing(const Rank& me) {
  const int sleeper = me.size - 1;
  const size_t count = 40000;  // above two pieces of the in-place hand-over
  const int rounds = 12;
  for (const auto mode : {PCOLL_MODE_SOLO, PCOLL_MODE_MAJORITY}) {
    pcoll_allreduce_opts_t opts;
    pcoll_allreduce_opts_init(&opts);
    opts.max_lag = 3;
    pcoll_allreduce_t* h = nullptr;
    REQUIRE(pcoll_allreduce_create(me.comm, count, PCOLL_INT64, PCOLL_OP_SUM, mode, &opts, &h) == PCOLL_SUCCESS);
    pcoll_allreduce_stats_t stats{};
    stats.size = sizeof stats;
    REQUIRE(pcoll_allreduce_stats(h, &stats) == PCOLL_SUCCESS);
    const uint64_t memory_at_creation = stats.memory_bytes;
    const bool in_place = (me.rank + me.size) % 2 == 1;  // the sleeper and every other rank
    std::vector<int64_t> send(count), recv(count), got(count, 0), want(count, 0);
    for (int t = 0; t <= rounds; ++t) {
      pcoll_round_info_t info{};
      if (t == rounds) {
        REQUIRE_MESSAGE(pcoll_allreduce_flush(h, recv.data(), &info) == PCOLL_SUCCESS, pcoll_last_error());
      } else {
        for (size_t i = 0; i < count; ++i) send[i] = input(me.rank, t, i);
        for (int r = 0; r < me.size; ++r)
          for (size_t i = 0; i < count; ++i) want[i] += input(r, t, i);
        if (me.rank == sleeper && t >= 2 && t <= 5) std::this_thread::sleep_for(std::chrono::milliseconds(60));
        int64_t* out = in_place ? send.data() : recv.data();
        REQUIRE_MESSAGE(pcoll_allreduce_run(h, send.data(), out, &info) == PCOLL_SUCCESS, pcoll_last_error());
        if (in_place) recv = send;
      }
      CAPTURE(mode); CAPTURE(t);
      CHECK(info.round == static_cast<uint64_t>(t));
      for (size_t i = 0; i < count; ++i) got[i] += recv[i];
    }
    size_t lost = 0;
    for (size_t i = 0; i < count; ++i) lost += got[i] != want[i];
    CAPTURE(mode);
    CHECK(lost == 0);
    REQUIRE(pcoll_allreduce_stats(h, &stats) == PCOLL_SUCCESS);
    // Caught up: no result or spilled carry held any more, only the registered areas and
    // the hand-over scratch (less than a vector). (The reading at creation may already
    // include a result: the others start at once, and max_lag 3 lets this engine run ahead.)
    CHECK(stats.memory_bytes <= memory_at_creation);
    CHECK(stats.memory_bytes - stats.registered_bytes < count * sizeof(int64_t));
    REQUIRE(pcoll_allreduce_destroy(h) == PCOLL_SUCCESS);
  }
}

// Quorum k of P: a round starts once k ranks have posted it. The first k ranks post at once,
// the others after a nap (with k = P, the last rank naps): the first k are fresh in every
// round, the round does not wait for the nappers unless k = P, and the result is exact
// (carry, flush). For each distinct k among 1, 2, P-1, P.
void quorum_rounds_start_once_k_ranks_arrived(const Rank& me) {
  std::vector<uint32_t> ks;
  for (const int k : {1, 2, me.size - 1, me.size})
    if (k >= 1 && k <= me.size && std::find(ks.begin(), ks.end(), static_cast<uint32_t>(k)) == ks.end())
      ks.push_back(static_cast<uint32_t>(k));
  const auto nap = std::chrono::milliseconds(200);
  const int rounds = 4;
  for (const uint32_t k : ks) {
    pcoll_allreduce_opts_t opts;
    pcoll_allreduce_opts_init(&opts);
    opts.quorum = k;
    pcoll_allreduce_t* h = nullptr;
    REQUIRE_MESSAGE(pcoll_allreduce_create(me.comm, 16, PCOLL_INT64, PCOLL_OP_SUM, PCOLL_MODE_QUORUM, &opts, &h) ==
                        PCOLL_SUCCESS,
                    pcoll_last_error());
    Ledger ledger(me.size);
    std::vector<int64_t> send(16), recv(16);
    // The ranks from k on nap; with k = P the last one does, which the round must wait for.
    const bool on_time = static_cast<uint32_t>(me.rank) < std::min(k, static_cast<uint32_t>(me.size - 1)) ||
                         me.size == 1;
    for (int t = 0; t <= rounds; ++t) {
      pcoll_round_info_t info{};
      const bool flush = t == rounds;
      REQUIRE(pcoll_barrier(me.comm) == PCOLL_SUCCESS);
      const auto begin = std::chrono::steady_clock::now();
      if (flush) {
        REQUIRE(pcoll_allreduce_flush(h, recv.data(), &info) == PCOLL_SUCCESS);
      } else {
        for (size_t i = 0; i < 16; ++i) send[i] = input(me.rank, t, i);
        if (!on_time) std::this_thread::sleep_for(nap);
        REQUIRE_MESSAGE(pcoll_allreduce_run(h, send.data(), recv.data(), &info) == PCOLL_SUCCESS, pcoll_last_error());
      }
      const auto end = std::chrono::steady_clock::now();
      const auto waited = end - begin;
      // The last napper's start: its data cannot be in before it plus the nap.
      const auto since_napper = end - time_span(me, on_time ? std::nullopt : std::optional(begin)).second;
      CAPTURE(k); CAPTURE(t);
      CAPTURE(std::chrono::duration_cast<std::chrono::microseconds>(waited).count());
      if (!flush) {
        CHECK(info.fresh >= static_cast<int>(k));
        for (int r = 0; r < static_cast<int>(k); ++r) CHECK(is_fresh(info, r));
        CHECK(info.initiator >= 0);
        CHECK(info.initiator < static_cast<int>(k));  // one of the ranks that arrived
        // The round started without the nappers: the on-time ranks had it long before. (The
        // ranks leave the barrier several ms apart on a loaded host, hence the margin.)
        if (on_time && k < static_cast<uint32_t>(me.size)) CHECK(waited < nap / 2);
        // With k = P the round waited for the napper: it ended after the napper's start plus
        // the nap. (Timed from this rank's own start instead, a rank that leaves the barrier
        // late on a loaded host would see less than the nap.)
        if (on_time && k == static_cast<uint32_t>(me.size) && me.size > 1) CHECK(since_napper >= nap);
      }
      const auto parts = ledger.round(info, flush);
      for (size_t i = 0; i < 16; ++i) CHECK(static_cast<double>(recv[i]) == reference(PCOLL_INT64, PCOLL_OP_SUM, parts, i));
    }
    REQUIRE(pcoll_allreduce_destroy(h) == PCOLL_SUCCESS);
  }
}

// Quorum P with a grace: a rank 300 ms late does not hold the round for more than the grace
// (20 ms) after the first arrival; the round's initiator is a rank that arrived, and the late
// rank's data is carried.
void quorum_grace_starts_the_round_without_the_quorum(const Rank& me) {
  if (me.size < 2) return;
  pcoll_allreduce_opts_t opts;
  pcoll_allreduce_opts_init(&opts);
  opts.quorum = static_cast<uint32_t>(me.size);
  opts.grace_us = 20000;
  pcoll_allreduce_t* h = nullptr;
  REQUIRE(pcoll_allreduce_create(me.comm, 8, PCOLL_INT64, PCOLL_OP_SUM, PCOLL_MODE_QUORUM, &opts, &h) == PCOLL_SUCCESS);
  const int sleeper = me.size - 1;
  Ledger ledger(me.size);
  std::vector<int64_t> send(8), recv(8);
  for (int t = 0; t <= 3; ++t) {
    pcoll_round_info_t info{};
    const bool flush = t == 3;
    REQUIRE(pcoll_barrier(me.comm) == PCOLL_SUCCESS);
    const auto begin = std::chrono::steady_clock::now();
    if (flush) {
      REQUIRE(pcoll_allreduce_flush(h, recv.data(), &info) == PCOLL_SUCCESS);
    } else {
      for (size_t i = 0; i < 8; ++i) send[i] = input(me.rank, t, i);
      if (me.rank == sleeper) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      REQUIRE_MESSAGE(pcoll_allreduce_run(h, send.data(), recv.data(), &info) == PCOLL_SUCCESS, pcoll_last_error());
    }
    const auto end = std::chrono::steady_clock::now();
    const auto waited = end - begin;
    // The earliest rank's start: no rank arrived before it, so no grace began earlier.
    const auto since_first = end - time_span(me, begin).first;
    CAPTURE(t);
    CAPTURE(std::chrono::duration_cast<std::chrono::microseconds>(waited).count());
    CAPTURE(std::chrono::duration_cast<std::chrono::microseconds>(since_first).count());
    if (!flush) {
      CHECK_FALSE(is_fresh(info, sleeper));
      CHECK(info.initiator >= 0);
      CHECK(info.initiator != sleeper);
      if (me.rank != sleeper) {
        // The grace (20 ms) was waited for: it runs from the first arrival, which is no
        // earlier than the first rank's start. (Timed from this rank's own start instead, a
        // rank that leaves the barrier late on a loaded host sees less than the grace.)
        CHECK(since_first >= std::chrono::milliseconds(19));
        CHECK(waited < std::chrono::milliseconds(200));   // and not the sleeper
      }
    }
    const auto parts = ledger.round(info, flush);
    for (size_t i = 0; i < 8; ++i) CHECK(static_cast<double>(recv[i]) == reference(PCOLL_INT64, PCOLL_OP_SUM, parts, i));
  }
  REQUIRE(pcoll_allreduce_destroy(h) == PCOLL_SUCCESS);
}

// Where the provider has no remote atomics (tests set PCOLL_TEST_OFI_WITHOUT_ATOMICS), a
// quorum handle is refused on every rank with a message that says why; the other modes work.
void quorum_is_refused_without_remote_atomics(const Rank& me) {
  if (std::getenv("PCOLL_TEST_OFI_WITHOUT_ATOMICS") == nullptr) return;
  pcoll_allreduce_t* h = nullptr;
  CHECK(pcoll_allreduce_create(me.comm, 8, PCOLL_FLOAT32, PCOLL_OP_SUM, PCOLL_MODE_QUORUM, nullptr, &h) ==
        PCOLL_ERR_UNSUPPORTED);
  CHECK(h == nullptr);
  CHECK(std::string(pcoll_last_error()).find("atomics") != std::string::npos);
  CHECK(check_handle(me, PCOLL_MODE_SOLO, PCOLL_INT32, PCOLL_OP_SUM, 10, 2, true) == 0);
}

void mismatched_creation_arguments_fail_everywhere(const Rank& me) {
  pcoll_allreduce_t* h = nullptr;
  const size_t count = me.rank == 0 ? 11 : 10;
  if (me.size > 1) {
    CHECK(pcoll_allreduce_create(me.comm, count, PCOLL_FLOAT32, PCOLL_OP_SUM, PCOLL_MODE_SOLO, nullptr, &h) == PCOLL_ERR_MISMATCH);
    CHECK(h == nullptr);
    CHECK(std::string(pcoll_last_error()).find("same arguments") != std::string::npos);
    const pcoll_op_t op = me.rank == me.size - 1 ? PCOLL_OP_MAX : PCOLL_OP_SUM;
    CHECK(pcoll_allreduce_create(me.comm, 10, PCOLL_FLOAT32, op, PCOLL_MODE_SOLO, nullptr, &h) == PCOLL_ERR_MISMATCH);
    pcoll_allreduce_opts_t opts;
    pcoll_allreduce_opts_init(&opts);
    opts.max_lag = me.rank == 0 ? 2 : 1;
    CHECK(pcoll_allreduce_create(me.comm, 10, PCOLL_FLOAT32, PCOLL_OP_SUM, PCOLL_MODE_SOLO, &opts, &h) == PCOLL_ERR_MISMATCH);
  }
  // The communicator stays usable.
  CHECK(check_handle(me, PCOLL_MODE_SYNC, PCOLL_INT32, PCOLL_OP_SUM, 10, 2, false) == 0);
}

void a_bad_argument_on_one_rank_fails_every_rank(const Rank& me) {
  if (me.size < 2) return;
  const int culprit = me.size - 1;
  pcoll_allreduce_t* h = nullptr;
  const auto started = std::chrono::steady_clock::now();
  const pcoll_dtype_t dtype = me.rank == culprit ? static_cast<pcoll_dtype_t>(42) : PCOLL_FLOAT32;
  CHECK(pcoll_allreduce_create(me.comm, 4, dtype, PCOLL_OP_SUM, PCOLL_MODE_SOLO, nullptr, &h) == PCOLL_ERR_INVALID_ARGUMENT);
  CHECK(h == nullptr);
  const std::string message = pcoll_last_error();
  CHECK(message.find("rank " + std::to_string(culprit)) != std::string::npos);
  CHECK(message.find("42") != std::string::npos);
  // handle == NULL on one rank is an argument error like any other.
  CHECK(pcoll_allreduce_create(me.comm, 4, PCOLL_FLOAT32, PCOLL_OP_SUM, PCOLL_MODE_SOLO, nullptr,
                               me.rank == culprit ? nullptr : &h) == PCOLL_ERR_INVALID_ARGUMENT);
  CHECK(std::string(pcoll_last_error()).find("handle is NULL") != std::string::npos);
  // Agreed at once: nobody waited for a rank that had returned alone.
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(5));
  CHECK(check_handle(me, PCOLL_MODE_SYNC, PCOLL_INT32, PCOLL_OP_SUM, 10, 2, false) == 0);
}

void destroy_with_a_round_outstanding_completes_it(const Rank& me) {
  pcoll_allreduce_t* h = nullptr;
  REQUIRE(pcoll_allreduce_create(me.comm, 64, PCOLL_FLOAT32, PCOLL_OP_SUM, PCOLL_MODE_SOLO, nullptr, &h) == PCOLL_SUCCESS);
  std::vector<float> send(64, 1.0f), recv(64, 0.0f);
  REQUIRE(pcoll_allreduce_start(h, send.data(), recv.data()) == PCOLL_SUCCESS);
  CHECK(pcoll_allreduce_destroy(h) == PCOLL_SUCCESS);
  CHECK(check_handle(me, PCOLL_MODE_SYNC, PCOLL_INT32, PCOLL_OP_SUM, 10, 2, false) == 0);
}

void invalid_arguments_and_call_order_are_refused(const Rank& me) {
  pcoll_allreduce_t* h = nullptr;
  CHECK(pcoll_allreduce_create(me.comm, 4, static_cast<pcoll_dtype_t>(42), PCOLL_OP_SUM, PCOLL_MODE_SYNC, nullptr, &h) == PCOLL_ERR_INVALID_ARGUMENT);
  CHECK(std::string(pcoll_last_error()).find("42") != std::string::npos);
  CHECK(pcoll_allreduce_create(me.comm, 4, PCOLL_FLOAT32, static_cast<pcoll_op_t>(9), PCOLL_MODE_SYNC, nullptr, &h) == PCOLL_ERR_INVALID_ARGUMENT);
  CHECK(pcoll_allreduce_create(me.comm, 4, PCOLL_FLOAT32, PCOLL_OP_SUM, static_cast<pcoll_mode_t>(7), nullptr, &h) == PCOLL_ERR_INVALID_ARGUMENT);
  {
    pcoll_allreduce_opts_t q;
    pcoll_allreduce_opts_init(&q);
    q.quorum = static_cast<uint32_t>(me.size) + 1;
    CHECK(pcoll_allreduce_create(me.comm, 4, PCOLL_FLOAT32, PCOLL_OP_SUM, PCOLL_MODE_QUORUM, &q, &h) == PCOLL_ERR_INVALID_ARGUMENT);
    CHECK(std::string(pcoll_last_error()).find("opts.quorum") != std::string::npos);
    q.quorum = 1;
    CHECK(pcoll_allreduce_create(me.comm, 4, PCOLL_FLOAT32, PCOLL_OP_SUM, PCOLL_MODE_SOLO, &q, &h) == PCOLL_ERR_INVALID_ARGUMENT);
    CHECK(std::string(pcoll_last_error()).find("PCOLL_MODE_QUORUM only") != std::string::npos);
  }
  pcoll_allreduce_opts_t opts;
  pcoll_allreduce_opts_init(&opts);
  opts.late = static_cast<pcoll_late_t>(5);
  CHECK(pcoll_allreduce_create(me.comm, 4, PCOLL_FLOAT32, PCOLL_OP_SUM, PCOLL_MODE_SOLO, &opts, &h) == PCOLL_ERR_INVALID_ARGUMENT);
  CHECK(pcoll_allreduce_create(nullptr, 4, PCOLL_FLOAT32, PCOLL_OP_SUM, PCOLL_MODE_SOLO, nullptr, &h) == PCOLL_ERR_INVALID_ARGUMENT);
  CHECK(pcoll_allreduce_create(me.comm, 4, PCOLL_FLOAT32, PCOLL_OP_SUM, PCOLL_MODE_SOLO, nullptr, nullptr) == PCOLL_ERR_INVALID_ARGUMENT);
  CHECK(pcoll_allreduce_run(nullptr, nullptr, nullptr, nullptr) == PCOLL_ERR_INVALID_ARGUMENT);
  CHECK(pcoll_allreduce_wait(nullptr, nullptr) == PCOLL_ERR_INVALID_ARGUMENT);
  CHECK(std::string(pcoll_strerror(PCOLL_ERR_MISMATCH)).size() > 0);
  CHECK(std::string(pcoll_strerror(12345)) == "unknown pcoll status");
  {
    // A live communicator lists no failed rank; its arguments are checked by name.
    int failed[2] = {-1, -1}, n = -1;
    CHECK(pcoll_comm_failed_ranks(me.comm, failed, 2, &n) == PCOLL_SUCCESS);
    CHECK(n == 0);
    CHECK(failed[0] == -1);
    CHECK(pcoll_comm_failed_ranks(me.comm, nullptr, 0, &n) == PCOLL_SUCCESS);
    CHECK(pcoll_comm_failed_ranks(nullptr, failed, 2, &n) == PCOLL_ERR_INVALID_ARGUMENT);
    CHECK(pcoll_comm_failed_ranks(me.comm, failed, 2, nullptr) == PCOLL_ERR_INVALID_ARGUMENT);
    CHECK(std::string(pcoll_last_error()).find("n is NULL") != std::string::npos);
    CHECK(pcoll_comm_failed_ranks(me.comm, failed, -1, &n) == PCOLL_ERR_INVALID_ARGUMENT);
    CHECK(pcoll_comm_failed_ranks(me.comm, nullptr, 2, &n) == PCOLL_ERR_INVALID_ARGUMENT);
    CHECK(std::string(pcoll_last_error()).find("ranks is NULL") != std::string::npos);
  }
  {
    // Declared, not built: refused at once on every rank, naming why.
    pcoll_comm_t* grown = me.comm;
    CHECK(pcoll_comm_grow(me.comm, &grown) == PCOLL_ERR_UNSUPPORTED);
    CHECK(grown == nullptr);
    CHECK(std::string(pcoll_last_error()).find("pcoll_comm_grow: admitting new ranks") != std::string::npos);
    CHECK(pcoll_comm_grow(me.comm, nullptr) == PCOLL_ERR_INVALID_ARGUMENT);
    CHECK(pcoll_comm_grow(nullptr, &grown) == PCOLL_ERR_INVALID_ARGUMENT);
  }

  REQUIRE(pcoll_allreduce_create(me.comm, 4, PCOLL_FLOAT32, PCOLL_OP_SUM, PCOLL_MODE_SYNC, nullptr, &h) == PCOLL_SUCCESS);
  float send[4] = {1, 2, 3, 4}, recv[4];
  CHECK(pcoll_allreduce_wait(h, nullptr) == PCOLL_ERR_INVALID_STATE);
  CHECK(pcoll_allreduce_start(h, nullptr, recv) == PCOLL_ERR_INVALID_ARGUMENT);
  REQUIRE(pcoll_allreduce_start(h, send, recv) == PCOLL_SUCCESS);
  CHECK(pcoll_allreduce_start(h, send, recv) == PCOLL_ERR_INVALID_STATE);
  CHECK(pcoll_allreduce_flush(h, recv, nullptr) == PCOLL_ERR_INVALID_STATE);
  CHECK(pcoll_allreduce_destroy(nullptr) == PCOLL_ERR_INVALID_ARGUMENT);
  int done = 0;
  pcoll_round_info_t info{};
  while (!done) REQUIRE(pcoll_allreduce_test(h, &done, &info) == PCOLL_SUCCESS);
  CHECK(info.round == 0);
  CHECK(recv[0] == 1.0f * me.size);
  REQUIRE(pcoll_allreduce_destroy(h) == PCOLL_SUCCESS);
}

void a_timed_wait_returns_while_a_peer_is_late_and_keeps_the_round(const Rank& me) {
  if (me.size < 2) return;
  const int sleeper = me.size - 1;
  pcoll_allreduce_t* h = nullptr;
  REQUIRE(pcoll_allreduce_create(me.comm, 16, PCOLL_INT32, PCOLL_OP_SUM, PCOLL_MODE_SYNC, nullptr, &h) == PCOLL_SUCCESS);
  std::vector<int32_t> send(16, me.rank + 1), recv(16, 0);
  REQUIRE(pcoll_barrier(me.comm) == PCOLL_SUCCESS);
  if (me.rank == sleeper) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  REQUIRE(pcoll_allreduce_start(h, send.data(), recv.data()) == PCOLL_SUCCESS);
  int done = 0, timed_out = 0;
  pcoll_round_info_t info{};
  while (!done) {
    const auto before = std::chrono::steady_clock::now();
    REQUIRE(pcoll_allreduce_timedwait(h, 50000, &done, &info) == PCOLL_SUCCESS);
    const auto took = std::chrono::steady_clock::now() - before;
    // Within its time (the bound allows a loaded host; a wait for the whole round would take
    // the sleeper's 1.5 s), and a round that is not done stays outstanding: starting another
    // is refused.
    CHECK(took < std::chrono::milliseconds(1000));
    if (!done) {
      ++timed_out;
      CHECK(pcoll_allreduce_start(h, send.data(), recv.data()) == PCOLL_ERR_INVALID_STATE);
    }
  }
  // Everyone but the sleeper waited about 1.5 s in 50 ms waits.
  if (me.rank != sleeper) CHECK(timed_out >= 3);
  CHECK(info.round == 0);
  CHECK(info.fresh == me.size);
  CHECK(recv[0] == me.size * (me.size + 1) / 2);
  // A zero timeout only tests; with nothing outstanding the call is refused.
  CHECK(pcoll_allreduce_timedwait(h, 0, &done, &info) == PCOLL_ERR_INVALID_STATE);
  CHECK(pcoll_allreduce_timedwait(h, 0, nullptr, &info) == PCOLL_ERR_INVALID_ARGUMENT);
  REQUIRE(pcoll_allreduce_destroy(h) == PCOLL_SUCCESS);
}

void an_argument_refused_by_a_binding_fails_every_rank(const Rank& me) {
  if (me.size < 2) return;
  const int culprit = me.size - 1;
  pcoll_allreduce_t* h = nullptr;
  const int status =
      me.rank == culprit
          ? pcoll_private_allreduce_create_refused(me.comm, 4, "dtype 'float33' is not one of float32, ...", &h)
          : pcoll_allreduce_create(me.comm, 4, PCOLL_FLOAT32, PCOLL_OP_SUM, PCOLL_MODE_SOLO, nullptr, &h);
  CHECK(status == PCOLL_ERR_INVALID_ARGUMENT);
  CHECK(h == nullptr);
  const std::string message = pcoll_last_error();
  CHECK(message.find("rank " + std::to_string(culprit)) != std::string::npos);
  CHECK(message.find("float33") != std::string::npos);
  CHECK(check_handle(me, PCOLL_MODE_SYNC, PCOLL_INT32, PCOLL_OP_SUM, 10, 2, false) == 0);
}

void enum_names_round_trip_and_unknown_names_are_refused(const Rank&) {
  for (int d = PCOLL_FLOAT32; d <= PCOLL_FLOAT16; ++d) {
    const char* name = pcoll_dtype_name(static_cast<pcoll_dtype_t>(d));
    REQUIRE(name != nullptr);
    pcoll_dtype_t back{};
    CHECK(pcoll_dtype_from_name(name, &back) == PCOLL_SUCCESS);
    CHECK(back == d);
    CHECK(pcoll_dtype_size(back) == (d == PCOLL_FLOAT64 || d == PCOLL_INT64 ? 8u : d >= PCOLL_BFLOAT16 ? 2u : 4u));
  }
  for (int o = PCOLL_OP_SUM; o <= PCOLL_OP_MAX; ++o) {
    pcoll_op_t back{};
    CHECK(pcoll_op_from_name(pcoll_op_name(static_cast<pcoll_op_t>(o)), &back) == PCOLL_SUCCESS);
    CHECK(back == o);
  }
  for (int m = PCOLL_MODE_SYNC; m <= PCOLL_MODE_QUORUM; ++m) {
    pcoll_mode_t back{};
    CHECK(pcoll_mode_from_name(pcoll_mode_name(static_cast<pcoll_mode_t>(m)), &back) == PCOLL_SUCCESS);
    CHECK(back == m);
  }
  pcoll_late_t late{};
  CHECK(pcoll_late_from_name("drop", &late) == PCOLL_SUCCESS);
  CHECK(late == PCOLL_LATE_DROP);
  CHECK(std::string(pcoll_mode_name(PCOLL_MODE_MAJORITY)) == "majority");
  CHECK(pcoll_dtype_name(static_cast<pcoll_dtype_t>(42)) == nullptr);
  CHECK(pcoll_dtype_size(static_cast<pcoll_dtype_t>(42)) == 0);
  pcoll_dtype_t dtype{};
  CHECK(pcoll_dtype_from_name("float33", &dtype) == PCOLL_ERR_INVALID_ARGUMENT);
  const std::string message = pcoll_last_error();
  CHECK(message.find("float33") != std::string::npos);
  CHECK(message.find("bfloat16") != std::string::npos);
  CHECK(pcoll_mode_from_name(nullptr, nullptr) == PCOLL_ERR_INVALID_ARGUMENT);
}

// A handle this host cannot hold is refused on every rank with PCOLL_ERR_NO_MEMORY naming
// the size and what is available, before anything is allocated: once against the host's
// real figure (8 TiB per rank, far beyond this machine), once against an injected one. The
// communicator stays usable.
void a_handle_larger_than_the_host_is_refused_before_allocating(const Rank& me) {
  const auto refused = [&](size_t count, pcoll_dtype_t dtype) {
    pcoll_allreduce_t* h = nullptr;
    CHECK(pcoll_allreduce_create(me.comm, count, dtype, PCOLL_OP_SUM, PCOLL_MODE_SOLO, nullptr, &h) ==
          PCOLL_ERR_NO_MEMORY);
    CHECK(h == nullptr);
    return std::string(pcoll_last_error());
  };
  const std::string real = refused(size_t{1} << 40, PCOLL_FLOAT64);
  INFO(real);
  CHECK(real.find("8.0 TiB") != std::string::npos);
  CHECK(real.find("available") != std::string::npos);
  // 4 MiB per rank against 1 MiB available.
  REQUIRE(setenv("PCOLL_TEST_HOST_MEMORY_BYTES", "1048576", 1) == 0);
  const std::string injected = refused(size_t{1} << 20, PCOLL_FLOAT32);
  INFO(injected);
  CHECK(injected.find("1048576 float32 elements") != std::string::npos);
  CHECK(injected.find("1.0 MiB available (PCOLL_TEST_HOST_MEMORY_BYTES)") != std::string::npos);
  // What fits is made as before.
  CHECK(check_handle(me, PCOLL_MODE_SOLO, PCOLL_FLOAT32, PCOLL_OP_SUM, 1000, 2, false) == 0);
  REQUIRE(unsetenv("PCOLL_TEST_HOST_MEMORY_BYTES") == 0);
}

// bytes_network and messages_network count what a rank sent to ranks on other nodes only:
// none on one host; on several (real, or emulated with PCOLL_TEST_HOST_NAMES, which the
// library takes for host names) some rank sent some, and no rank more bytes than it wrote.
namespace {
// This rank's host: its entry of PCOLL_TEST_HOST_NAMES (emulated hosts), else gethostname.
std::string host_of(const Rank& me) {
  std::string host;
  if (const char* names = std::getenv("PCOLL_TEST_HOST_NAMES"); names != nullptr) {
    const std::string all = names;
    size_t begin = 0;
    for (int r = 0; r < me.rank && begin != std::string::npos; ++r) {
      begin = all.find(',', begin);
      if (begin != std::string::npos) ++begin;
    }
    if (begin != std::string::npos) host = all.substr(begin, all.find(',', begin) - begin);
  }
  if (host.empty()) {
    char name[256] = {};
    REQUIRE(gethostname(name, sizeof name - 1) == 0);
    host = name;
  }
  return host;
}
}  // namespace

void network_counters_count_only_other_nodes(const Rank& me) {
  const std::string host = host_of(me);
  const bool one_host = all_agree(me, fnv1a(host.data(), host.size()));
  pcoll_allreduce_t* h = nullptr;
  REQUIRE(pcoll_allreduce_create(me.comm, 256, PCOLL_INT32, PCOLL_OP_SUM, PCOLL_MODE_SYNC, nullptr, &h) ==
          PCOLL_SUCCESS);
  std::vector<int32_t> send(256, me.rank), recv(256);
  for (int t = 0; t < 4; ++t) REQUIRE(pcoll_allreduce_run(h, send.data(), recv.data(), nullptr) == PCOLL_SUCCESS);
  pcoll_allreduce_stats_t stats{};
  stats.size = sizeof stats;
  REQUIRE(pcoll_allreduce_stats(h, &stats) == PCOLL_SUCCESS);
  REQUIRE(pcoll_allreduce_destroy(h) == PCOLL_SUCCESS);
  INFO("host " << host << ", bytes_network " << stats.bytes_network << ", messages_network "
               << stats.messages_network << ", bytes_written " << stats.bytes_written);
  CHECK(stats.bytes_network <= stats.bytes_written);
  CHECK((stats.bytes_network == 0 || stats.messages_network > 0));
  if (one_host) {
    CHECK(stats.messages_network == 0);
  } else {
    // Some rank sent across: the largest count over ranks is not zero.
    int64_t most[2] = {static_cast<int64_t>(stats.messages_network), 0};
    int64_t out[2] = {0, 0};
    REQUIRE(pcoll_allreduce_run(me.agree, most, out, nullptr) == PCOLL_SUCCESS);
    CHECK(out[0] > 0);
  }
}

// Under PCOLL_TEST_EXPECT_PLAN=node_rails (every handle on the node_rails plan), on
// several hosts: a 1 MiB sync round sends, from each node's ranks together, at most
// 1.05 x 2n(H - 1)/H + 64 KiB across the network (n the vector's bytes, H the nodes), the
// floor of an allreduce whose nodes each hold a copy of the result, whatever the placement
// (a flat plan on cyclic hosts sends about twice that), where H is a power of two. Otherwise
// Rabenseifner along the rails folds the nodes beyond the largest power of two into their
// partners, whose whole vector crosses twice: at most 2n a node.
void node_rails_network_bytes_stay_at_the_floor(const Rank& me) {
  const char* plan = std::getenv("PCOLL_TEST_EXPECT_PLAN");
  if (plan == nullptr || std::string(plan) != "node_rails") return;
  const std::string host = host_of(me);
  if (all_agree(me, fnv1a(host.data(), host.size()))) return;  // one host: nothing to measure
  const size_t count = size_t{1} << 18;  // float32: 1 MiB
  const int rounds = 4;
  pcoll_allreduce_t* h = nullptr;
  REQUIRE(pcoll_allreduce_create(me.comm, count, PCOLL_FLOAT32, PCOLL_OP_SUM, PCOLL_MODE_SYNC, nullptr, &h) ==
          PCOLL_SUCCESS);
  std::vector<float> send(count, 1.0f), recv(count);
  for (int t = 0; t < rounds; ++t) REQUIRE(pcoll_allreduce_run(h, send.data(), recv.data(), nullptr) == PCOLL_SUCCESS);
  CHECK(recv[count - 1] == static_cast<float>(me.size));
  pcoll_allreduce_stats_t stats{};
  stats.size = sizeof stats;
  REQUIRE(pcoll_allreduce_stats(h, &stats) == PCOLL_SUCCESS);
  CHECK(std::string(stats.plan) == "node_rails");
  REQUIRE(pcoll_allreduce_destroy(h) == PCOLL_SUCCESS);
  // Every rank's bytes and host, gathered by a sum in which each rank fills its own slots.
  const auto size = static_cast<size_t>(me.size);
  pcoll_allreduce_t* gather = nullptr;
  REQUIRE(pcoll_allreduce_create(me.comm, 2 * size, PCOLL_INT64, PCOLL_OP_SUM, PCOLL_MODE_SYNC, nullptr, &gather) ==
          PCOLL_SUCCESS);
  std::vector<int64_t> mine(2 * size, 0), all(2 * size, 0);
  mine[static_cast<size_t>(me.rank)] = static_cast<int64_t>(stats.bytes_network);
  mine[size + static_cast<size_t>(me.rank)] = static_cast<int64_t>(fnv1a(host.data(), host.size()) >> 2);
  REQUIRE(pcoll_allreduce_run(gather, mine.data(), all.data(), nullptr) == PCOLL_SUCCESS);
  REQUIRE(pcoll_allreduce_destroy(gather) == PCOLL_SUCCESS);
  std::map<int64_t, int64_t> per_node;
  for (size_t r = 0; r < size; ++r) per_node[all[size + r]] += all[r];
  const double nodes = static_cast<double>(per_node.size());
  const double n = static_cast<double>(count * sizeof(float));
  const bool power_of_two = (per_node.size() & (per_node.size() - 1)) == 0;
  const double limit = power_of_two ? 1.05 * 2 * n * (nodes - 1) / nodes + 65536 : 2 * n + 65536;
  int64_t most = 0;
  for (const auto& [node, bytes] : per_node) most = std::max(most, bytes);
  const double per_round = static_cast<double>(most) / rounds;
  INFO(nodes << " nodes, most bytes a node sent per round " << per_round << ", limit " << limit);
  CHECK(per_round <= limit);
  // The counters miss nothing: no node sends much less than the bandwidth-optimal
  // allreduce's share (its ranks' flags aside).
  CHECK(per_round >= 0.95 * 2 * n * (nodes - 1) / nodes);
}

// memory_traffic_bytes counts every pass over memory a round makes: the same each sync
// round, never below the least an allreduce needs on one node, n (3P - 1) / P (n the
// vector's bytes; docs/performance.md, "Memory traffic"), and for the two plans whose passes
// are fixed, what the plan does: the join (read n, write n), the flag words written, and the
// result handed over (read n, write n), plus
// - direct: the rank's slice reduced from each of P - 1 peers (two slices read, one written)
//   and every other slice copied (read and written);
// - recursive doubling (P a power of two): at each of log2 P steps the whole vector written
//   to the partner (read here, written there) and reduced from the landing (read twice,
//   written once).
void memory_traffic_counts_every_pass(const Rank& me) {
  const double P = me.size;
  for (const size_t count : {size_t{64}, size_t{1} << 16}) {
    pcoll_allreduce_t* h = nullptr;
    REQUIRE(pcoll_allreduce_create(me.comm, count, PCOLL_FLOAT32, PCOLL_OP_SUM, PCOLL_MODE_SYNC, nullptr, &h) ==
            PCOLL_SUCCESS);
    std::vector<float> send(count, 1.0f), recv(count);
    pcoll_allreduce_stats_t first{}, second{};
    first.size = second.size = sizeof first;
    const int rounds = 3;
    for (int t = 0; t < rounds; ++t) REQUIRE(pcoll_allreduce_run(h, send.data(), recv.data(), nullptr) == PCOLL_SUCCESS);
    REQUIRE(pcoll_allreduce_stats(h, &first) == PCOLL_SUCCESS);
    const std::string plan = first.plan;
    for (int t = 0; t < rounds; ++t) REQUIRE(pcoll_allreduce_run(h, send.data(), recv.data(), nullptr) == PCOLL_SUCCESS);
    REQUIRE(pcoll_allreduce_stats(h, &second) == PCOLL_SUCCESS);
    REQUIRE(pcoll_allreduce_destroy(h) == PCOLL_SUCCESS);
    CHECK(recv[count - 1] == static_cast<float>(me.size));
    const double per_round = static_cast<double>(first.memory_traffic_bytes) / rounds;
    const double n = static_cast<double>(count * sizeof(float));
    const double flags = 4.0 * (std::ceil(P / 32) + 4);  // the flag words (design.md), float32
    const double total = n + flags;                      // what the plans move
    INFO("count " << count << ", plan " << plan << ", traffic per round " << per_round);
    CHECK(first.memory_traffic_bytes > 0);
    CHECK(second.memory_traffic_bytes == 2 * first.memory_traffic_bytes);
    if (me.size > 1) CHECK(per_round >= n * (3 * P - 1) / P);
    const double own = 4 * n + flags;  // join, flag words, hand-over
    if (plan == "direct") {
      const double expected = own + 3 * (P - 1) * total / P + 2 * (P - 1) * total / P;
      CHECK(std::fabs(per_round - expected) <= 5 * 4 * P);  // slices differ by an element at most
    } else if (plan == "recursive_doubling" && (me.size & (me.size - 1)) == 0) {
      CHECK(per_round == own + 5 * total * std::log2(P));
    }
  }
}

}  // namespace collective_rules
