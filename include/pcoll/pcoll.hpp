// C++ API of pcoll: RAII owners over the C API (pcoll.h), typed handles with std::span,
// and exceptions. Every failing call throws pcoll::error carrying the C status code and
// the detailed message (what failed and what to do); nothing is returned half-done.
// Header-only, so it adds no C++ ABI to the library.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "pcoll/pcoll.h"

namespace pcoll {

class error : public std::runtime_error {
 public:
  error(int status, const std::string& message) : std::runtime_error(message), status_(status) {}
  int status() const noexcept { return status_; }

 private:
  int status_;
};

namespace detail {
inline void check(int status) {
  if (status != PCOLL_SUCCESS) throw error(status, pcoll_last_error());
}
}  // namespace detail

enum class mode {
  sync = PCOLL_MODE_SYNC,
  solo = PCOLL_MODE_SOLO,
  majority = PCOLL_MODE_MAJORITY,
  quorum = PCOLL_MODE_QUORUM
};
enum class op { sum = PCOLL_OP_SUM, avg = PCOLL_OP_AVG, min = PCOLL_OP_MIN, max = PCOLL_OP_MAX };
enum class late { carry = PCOLL_LATE_CARRY, drop = PCOLL_LATE_DROP };

// Element types with a pcoll dtype. 16-bit types are passed as their raw bits.
struct float16_bits { std::uint16_t bits; };
struct bfloat16_bits { std::uint16_t bits; };

template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr pcoll_dtype_t value = PCOLL_FLOAT32; };
template <> struct dtype_of<double> { static constexpr pcoll_dtype_t value = PCOLL_FLOAT64; };
template <> struct dtype_of<std::int32_t> { static constexpr pcoll_dtype_t value = PCOLL_INT32; };
template <> struct dtype_of<std::int64_t> { static constexpr pcoll_dtype_t value = PCOLL_INT64; };
template <> struct dtype_of<float16_bits> { static constexpr pcoll_dtype_t value = PCOLL_FLOAT16; };
template <> struct dtype_of<bfloat16_bits> { static constexpr pcoll_dtype_t value = PCOLL_BFLOAT16; };

struct options {
  late late_policy = late::carry;
  std::uint32_t max_lag = 1;
  std::uint32_t sync_every = 0;
  std::uint64_t seed = 0x70636f6c6cULL;
  std::uint32_t timeout_ms = 0;  // 0: PCOLL_TIMEOUT_MS or 30000
  std::uint32_t quorum = 0;      // mode::quorum: ranks that start a round; 0: floor(P/2) + 1
  std::uint32_t grace_us = 0;    // mode::quorum: 0 waits for the quorum
  bool elastic = false;          // the handle can be resumed after a failure (allreduce::resume)

  pcoll_allreduce_opts_t to_c() const {
    pcoll_allreduce_opts_t c;
    pcoll_allreduce_opts_init(&c);
    c.late = static_cast<pcoll_late_t>(late_policy);
    c.max_lag = max_lag;
    c.sync_every = sync_every;
    c.seed = seed;
    c.timeout_ms = timeout_ms;
    c.quorum = quorum;
    c.grace_us = grace_us;
    c.elastic = elastic ? 1u : 0u;
    return c;
  }
};

struct round_info {
  std::uint64_t round = 0;
  int initiator = -1;
  int fresh = 0;
  bool caller_late = false;
  std::vector<std::uint64_t> fresh_mask;

  bool was_fresh(int rank) const {
    return (fresh_mask.at(static_cast<std::size_t>(rank) / 64) >> (rank % 64)) & 1u;
  }
};

// pcoll_allreduce_stats_t with its per-rank arrays copied (docs/observability.md).
struct allreduce_stats {
  std::uint64_t rounds = 0, flushes = 0, flushes_carried = 0, rounds_initiated = 0;
  std::uint64_t rounds_while_computing = 0, blocked_ns = 0, bytes_written = 0;
  std::uint64_t memory_bytes = 0, registered_bytes = 0;
  std::vector<std::uint64_t> fresh_rounds, late_rounds, longest_late_run;  // [rank]
  std::vector<std::uint64_t> fresh_histogram;                              // [0..P]
  std::string plan;             // "recursive_doubling", "rabenseifner", "direct", "node_leader", "node_rails"
  std::uint64_t bytes_read = 0;  // from peers' memory mapped here (the direct plan)
  std::uint64_t bytes_network = 0, messages_network = 0;  // to ranks on other nodes
  std::uint64_t memory_traffic_bytes = 0;  // read plus written in memory by this rank's rounds
};

namespace detail {
inline allreduce_stats copy_stats(const pcoll_allreduce_stats_t& c) {
  const auto n = static_cast<std::size_t>(c.nranks);
  allreduce_stats s{c.rounds, c.flushes, c.flushes_carried, c.rounds_initiated,
                    c.rounds_while_computing, c.blocked_ns, c.bytes_written,
                    c.memory_bytes, c.registered_bytes, {}, {}, {}, {}, c.plan ? c.plan : "", c.bytes_read,
                    c.bytes_network, c.messages_network, c.memory_traffic_bytes};
  s.fresh_rounds.assign(c.fresh_rounds, c.fresh_rounds + n);
  s.late_rounds.assign(c.late_rounds, c.late_rounds + n);
  s.longest_late_run.assign(c.longest_late_run, c.longest_late_run + n);
  s.fresh_histogram.assign(c.fresh_histogram, c.fresh_histogram + n + 1);
  return s;
}

inline round_info copy_info(const pcoll_round_info_t& c, int size) {
  round_info info{c.round, c.initiator, c.fresh, c.caller_late != 0, {}};
  const std::size_t words = (static_cast<std::size_t>(size) + 63) / 64;
  if (c.fresh_mask != nullptr) info.fresh_mask.assign(c.fresh_mask, c.fresh_mask + words);
  return info;
}
}  // namespace detail

class communicator {
 public:
  // Bootstraps from the environment (pcollrun, srun, mpirun, or PCOLL_RANK/SIZE/ROOT).
  communicator() {
    pcoll_comm_t* raw = nullptr;
    detail::check(pcoll_init(&raw));
    comm_.reset(raw);
  }
  int rank() const { return pcoll_comm_rank(comm_.get()); }
  int size() const { return pcoll_comm_size(comm_.get()); }
  std::string provider() const { return pcoll_comm_provider(comm_.get()); }
  // Ranks known to have failed, ascending (pcoll_comm_failed_ranks).
  std::vector<int> failed_ranks() const {
    // Asked again while the list grew between the calls (more ranks failed meanwhile).
    std::vector<int> ranks;
    int n = 0;
    do {
      ranks.resize(static_cast<std::size_t>(n));
      detail::check(pcoll_comm_failed_ranks(comm_.get(), ranks.data(), static_cast<int>(ranks.size()), &n));
    } while (static_cast<std::size_t>(n) > ranks.size());
    ranks.resize(static_cast<std::size_t>(n));
    return ranks;
  }
  void barrier() { detail::check(pcoll_barrier(comm_.get())); }
  // The survivors of a failure, as a new communicator (pcoll_comm_shrink). Collective over
  // the live ranks; this one stays failed.
  communicator shrink() {
    pcoll_comm_t* raw = nullptr;
    detail::check(pcoll_comm_shrink(comm_.get(), &raw));
    return communicator(raw);
  }
  pcoll_comm_t* get() const { return comm_.get(); }

 private:
  explicit communicator(pcoll_comm_t* raw) { comm_.reset(raw); }
  struct finalizer {
    void operator()(pcoll_comm_t* c) const { pcoll_finalize(c); }
  };
  std::unique_ptr<pcoll_comm_t, finalizer> comm_;
};

template <typename T>
struct resumed_allreduce;

// A persistent allreduce of `count` elements of T. Creation is collective.
template <typename T>
class allreduce {
 public:
  allreduce(communicator& comm, std::size_t count, op reduce_op, mode m, const options& opts = {})
      : size_(comm.size()), count_(count) {
    const pcoll_allreduce_opts_t c = opts.to_c();
    pcoll_allreduce_t* raw = nullptr;
    detail::check(pcoll_allreduce_create(comm.get(), count, dtype_of<T>::value,
                                         static_cast<pcoll_op_t>(reduce_op),
                                         static_cast<pcoll_mode_t>(m), &c, &raw));
    handle_.reset(raw);
  }

  // One round: contributes `send` (or carries it if the round already ran) and returns
  // the round's result in `recv`. send and recv may be the same span.
  round_info run(std::span<const T> send, std::span<T> recv) {
    check_sizes(send.size(), recv.size());
    pcoll_round_info_t info;
    detail::check(pcoll_allreduce_run(handle_.get(), send.data(), recv.data(), &info));
    return detail::copy_info(info, size_);
  }
  void start(std::span<const T> send, std::span<T> recv) {
    check_sizes(send.size(), recv.size());
    detail::check(pcoll_allreduce_start(handle_.get(), send.data(), recv.data()));
  }
  round_info wait() {
    pcoll_round_info_t info;
    detail::check(pcoll_allreduce_wait(handle_.get(), &info));
    return detail::copy_info(info, size_);
  }
  // Waits up to `timeout` for the outstanding round: its info once complete, nullopt when
  // the time passed first (the round stays outstanding). A zero timeout only tests.
  std::optional<round_info> wait_for(std::chrono::microseconds timeout) {
    pcoll_round_info_t info;
    int done = 0;
    const auto us = timeout.count() > 0 ? static_cast<std::uint64_t>(timeout.count()) : 0;
    detail::check(pcoll_allreduce_timedwait(handle_.get(), us, &done, &info));
    if (!done) return std::nullopt;
    return detail::copy_info(info, size_);
  }
  // Synchronous round that contributes every carried value and no new data.
  round_info flush(std::span<T> recv) {
    check_sizes(count_, recv.size());
    pcoll_round_info_t info;
    detail::check(pcoll_allreduce_flush(handle_.get(), recv.data(), &info));
    return detail::copy_info(info, size_);
  }
  // Counters since creation; local, not collective.
  allreduce_stats stats() const {
    pcoll_allreduce_stats_t c{};
    c.size = sizeof c;
    detail::check(pcoll_allreduce_stats(handle_.get(), &c));
    return detail::copy_stats(c);
  }
  // Collective; the destructor does the same but cannot report an error.
  void destroy() { detail::check(pcoll_allreduce_destroy(handle_.release())); }
  // This handle (options::elastic), interrupted by a failure, on `survivors` (made by
  // shrink() from its communicator): pcoll_allreduce_resume. `recv` gets the interrupted
  // call's result when its round happened (delivered). On success this object is empty
  // and the returned one goes on; on an error this one stays, to be resumed again.
  resumed_allreduce<T> resume(communicator& survivors, std::span<T> recv);

 private:
  allreduce(pcoll_allreduce_t* raw, int size, std::size_t count) : size_(size), count_(count) { handle_.reset(raw); }
  friend struct resumed_allreduce<T>;
  void check_sizes(std::size_t send, std::size_t recv) const {
    if (send != count_ || recv != count_)
      throw error(PCOLL_ERR_INVALID_ARGUMENT,
                  "allreduce of " + std::to_string(count_) + " elements got buffers of " +
                      std::to_string(send) + " and " + std::to_string(recv));
  }
  struct destroyer {
    void operator()(pcoll_allreduce_t* h) const { pcoll_allreduce_destroy(h); }
  };
  int size_;
  std::size_t count_;
  std::unique_ptr<pcoll_allreduce_t, destroyer> handle_;
};

template <typename T>
struct resumed_allreduce {
  allreduce<T> handle;
  bool delivered = false;  // the interrupted call's round happened; recv holds its result
  round_info info;         // that round's info (fresh_mask over the old ranks)
};

template <typename T>
resumed_allreduce<T> allreduce<T>::resume(communicator& survivors, std::span<T> recv) {
  check_sizes(count_, recv.size());
  pcoll_allreduce_t* raw = nullptr;
  pcoll_round_info_t c_info{};
  int delivered = 0;
  detail::check(pcoll_allreduce_resume(handle_.get(), survivors.get(), recv.data(), &delivered, &c_info, &raw));
  handle_.release();  // freed by resume
  const int old_size = size_;
  resumed_allreduce<T> out{allreduce<T>(raw, survivors.size(), count_), delivered != 0, {}};
  if (out.delivered) out.info = detail::copy_info(c_info, old_size);
  return out;
}

}  // namespace pcoll
