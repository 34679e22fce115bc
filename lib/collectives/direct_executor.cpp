// The direct plan's executor (direct_executor.hpp), the port's direct operations'
// defaults (a port that serves only chunked plans refuses them), and the round check both
// executors share (round_executor.hpp).
#include <collectives/direct_executor.hpp>

#include <algorithm>
#include <string>

#include <support/error.hpp>

namespace pcoll {

void ExecutorPort::signal_peer(int, uint32_t, uint64_t) { fail(Errc::internal, "this port runs no direct plan"); }
void ExecutorPort::reduce_from_peer(int, size_t, size_t, uint64_t) {
  fail(Errc::internal, "this port runs no direct plan");
}
void ExecutorPort::copy_from_peer(int, size_t, size_t, uint64_t) { fail(Errc::internal, "this port runs no direct plan"); }
void ExecutorPort::final_elements(size_t, size_t, uint64_t) {}

bool stale_data_round(uint64_t round, uint64_t completed, uint32_t handle, uint64_t& duplicates) {
  if (round < completed) {
    ++duplicates;
    return true;
  }
  if (round > completed + 1)
    fail(Errc::protocol, "data for round " + std::to_string(round) + " of handle " + std::to_string(handle) +
                             " while this rank is at round " + std::to_string(completed));
  return false;
}

DirectExecutor::DirectExecutor(int ranks, int rank, size_t count, size_t block_elems, uint32_t handle)
    : ranks_(ranks), rank_(rank), count_(count), block_elems_(std::max<size_t>(1, block_elems)), handle_(handle) {
  if (ranks < 2 || rank < 0 || rank >= ranks)
    fail(Errc::invalid_argument, "a direct plan needs 2 or more ranks and a rank among them (ranks " +
                                     std::to_string(ranks) + ", rank " + std::to_string(rank) + ")");
  for (auto& parity : heard_)
    for (Heard& phase : parity) phase.from.assign(static_cast<size_t>(ranks), 0);
}

size_t DirectExecutor::slice_offset(int rank) const { return block_offset(count_, ranks_, rank); }
size_t DirectExecutor::slice_elems(int rank) const { return block_elems(count_, ranks_, rank); }

void DirectExecutor::begin_round(bool announce_start) {
  phase_ = 0;
  phase_done_ = false;
  announce_start_ = announce_start;
}

void DirectExecutor::end_round(uint64_t round) {
  for (Heard& phase : heard_[round & 1]) {
    std::fill(phase.from.begin(), phase.from.end(), 0);
    phase.count = 0;
  }
  started_by_[round & 1] = -1;
  phase_ = kPhases;
}

void DirectExecutor::work(uint32_t phase, uint64_t round, ExecutorPort& port) const {
  if (phase == 1) {
    // Slice r, a block at a time: the block stays in cache while every peer's is added.
    const size_t first = slice_offset(rank_);
    const size_t elems = slice_elems(rank_);
    for (size_t done = 0; done < elems; done += block_elems_) {
      const size_t n = std::min(block_elems_, elems - done);
      for (int peer = 0; peer < ranks_; ++peer)
        if (peer != rank_) port.reduce_from_peer(peer, first + done, n, round);
      port.final_elements(first + done, n, round);
    }
  } else if (phase == 2) {
    for (int peer = 0; peer < ranks_; ++peer) {
      if (peer == rank_) continue;
      const size_t first = slice_offset(peer);
      const size_t elems = slice_elems(peer);
      for (size_t done = 0; done < elems; done += block_elems_) {
        const size_t n = std::min(block_elems_, elems - done);
        port.copy_from_peer(peer, first + done, n, round);
        port.final_elements(first + done, n, round);
      }
    }
  }
}

bool DirectExecutor::run(uint64_t round, ExecutorPort& port) {
  round_ = round;
  while (phase_ < kPhases) {
    if (!phase_done_) {
      port.step_started(round, phase_);
      work(phase_, round, port);
      const uint32_t tag = phase_ == 0 && announce_start_ ? kStartedReady : phase_;
      for (int peer = 0; peer < ranks_; ++peer)
        if (peer != rank_) port.signal_peer(peer, tag, round);
      phase_done_ = true;
    }
    if (heard_[round & 1][phase_].count < ranks_ - 1) return false;
    port.step_ended(round, phase_);
    ++phase_;
    phase_done_ = false;
    ++moves_;
  }
  return true;
}

bool DirectExecutor::on_data(uint64_t round, uint64_t completed, uint32_t tag, uint32_t chunk) {
  if (stale_data_round(round, completed, handle_, duplicates_)) return false;
  if (tag >= kTags)
    fail(Errc::protocol, "direct-plan notice for handle " + std::to_string(handle_) + " with tag " +
                             std::to_string(tag) + " (the plan uses " + std::to_string(kTags) + ")");
  if (chunk >= static_cast<uint32_t>(ranks_) || chunk == static_cast<uint32_t>(rank_))
    fail(Errc::protocol, "direct-plan notice for handle " + std::to_string(handle_) + " names rank " +
                             std::to_string(chunk) + " as its sender (this is rank " + std::to_string(rank_) +
                             " of " + std::to_string(ranks_) + ")");
  const bool started = tag == kStartedReady;
  Heard& heard = heard_[round & 1][started ? 0 : tag];
  if (heard.from[chunk]) {
    ++duplicates_;
    return false;
  }
  if (started) started_by_[round & 1] = static_cast<int>(chunk);
  heard.from[chunk] = 1;
  ++heard.count;
  ++moves_;
  return true;
}

bool DirectExecutor::on_credit(uint64_t, uint32_t tag, uint32_t) {
  fail(Errc::protocol, "credit for exchange " + std::to_string(tag) + " of handle " + std::to_string(handle_) +
                           ", whose direct plan uses no credits");
}

int DirectExecutor::awaited_peer() const {
  if (phase_ >= kPhases) return -1;
  const Heard& heard = heard_[round_ & 1][phase_];
  for (int peer = 0; peer < ranks_; ++peer)
    if (peer != rank_ && !heard.from[static_cast<size_t>(peer)]) return peer;
  return -1;
}

}  // namespace pcoll
