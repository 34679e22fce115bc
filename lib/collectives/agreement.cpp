// Collective agreement over the transport with liveness probing (agreement.hpp).
#include <collectives/agreement.hpp>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>

#include <collectives/comm.hpp>
#include <collectives/notification.hpp>
#include <support/error.hpp>
#include <support/log.hpp>

namespace pcoll {

Agreement::Agreement(Comm& comm)
    : comm_(comm), transport_(comm.transport()), rank_(comm.rank()), size_(comm.size()) {
  region_ = transport_.allocate(2 * static_cast<size_t>(size_) * kSlotBytes);
  for (auto& stamps : arrived_) stamps.assign(static_cast<size_t>(size_), 0);
  const auto keys = comm.boot().allgather(region_->remote_key());
  peers_.resize(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) peers_[static_cast<size_t>(r)] = transport_.import_region(r, keys[static_cast<size_t>(r)]);
}

Agreement::~Agreement() = default;

size_t Agreement::slot_offset(uint64_t sequence, int rank) const {
  return ((sequence & 1) * static_cast<size_t>(size_) + static_cast<size_t>(rank)) * kSlotBytes;
}

void Agreement::on_arrival(int sender, uint64_t sequence_low) {
  if (sender < 0 || sender >= size_)
    fail(Errc::protocol, "agreement message from rank " + std::to_string(sender) + " of a job of " +
                             std::to_string(size_));
  // A live peer is at our current agreement (finished_) or one ahead: it cannot pass the
  // next one without our blob. Older ones are duplicates of what was already counted.
  const uint64_t sequence = comm_.codec().widen_sequence(sequence_low, finished_);
  if (sequence < finished_) return;
  if (sequence > finished_ + 1)
    fail(Errc::protocol, "rank " + std::to_string(sender) + " sent agreement " + std::to_string(sequence) +
                             " while this rank is at agreement " + std::to_string(finished_));
  arrived_[sequence & 1][static_cast<size_t>(sender)] = sequence + 1;
}

size_t Agreement::arrivals(uint64_t sequence) const {
  const auto& stamps = arrived_[sequence & 1];
  return static_cast<size_t>(std::count(stamps.begin(), stamps.end(), sequence + 1));
}

std::vector<std::vector<std::byte>> Agreement::allgather(std::span<const std::byte> mine,
                                                         std::chrono::milliseconds timeout) {
  if (mine.size() > kAgreementBlobBytes)
    fail(Errc::internal, "agreement blob of " + std::to_string(mine.size()) + " bytes exceeds " +
                             std::to_string(kAgreementBlobBytes));
  std::unique_lock lock(comm_.engine_mutex());
  comm_.check_failed();
  const uint64_t sequence = finished_;
  // Our own slot holds the blob we send: length, then bytes.
  std::byte* own = region_->bytes().data() + slot_offset(sequence, rank_);
  const auto length = static_cast<uint32_t>(mine.size());
  std::memcpy(own, &length, sizeof length);
  if (!mine.empty()) std::memcpy(own + sizeof length, mine.data(), mine.size());
  arrived_[sequence & 1][static_cast<size_t>(rank_)] = sequence + 1;
  const uint64_t value = comm_.codec().control(kControlAgreement, static_cast<uint32_t>(rank_), sequence);
  try {
    for (int step = 1; step < size_; ++step) {
      const int peer = (rank_ + step) % size_;  // spread the writes: not everyone to rank 0 first
      transport_.write_notify(*region_, slot_offset(sequence, rank_), *peers_[static_cast<size_t>(peer)],
                              slot_offset(sequence, rank_), sizeof length + mine.size(), value);
    }
  } catch (const Error& error) {
    comm_.fail_locked(error);
  }
  const auto probe_after = std::min<std::chrono::milliseconds>(timeout / 4, std::chrono::milliseconds(1000));
  const auto started = std::chrono::steady_clock::now();
  const auto everyone = static_cast<size_t>(size_);
  while (arrivals(sequence) < everyone) {
    comm_.drive_locked();
    if (arrivals(sequence) == everyone) break;
    if (std::chrono::steady_clock::now() - started > probe_after) {
      // Ask every rank we still miss whether its engine is alive.
      for (int r = 0; r < size_; ++r)
        if (arrived_[sequence & 1][static_cast<size_t>(r)] != sequence + 1) comm_.watch_locked(r, timeout);
    }
    comm_.sleep_locked(lock, std::chrono::milliseconds(2));
  }
  // Our sends read our own slot: they must be done before the next agreement of this
  // parity overwrites it, and before the blobs are handed out. A send that failed is
  // reported here (a completion error): the peers that miss our blob must hear of it.
  // Leaving (pcoll_finalize's barrier), every blob has arrived, so every rank has entered
  // the barrier; a peer may already have finished it and closed its endpoint, and a flush
  // towards it then fails although it had what it needed to finish (it could not have
  // finished otherwise): not a failure of the job.
  try {
    transport_.flush();
  } catch (const Error& error) {
    if (!comm_.is_leaving() || error.rank() < 0 || error.rank() == rank_) comm_.fail_locked(error);
    log::debug(std::string("finalize barrier: flush towards a rank that has left: ") + error.what());
  }
  std::vector<std::vector<std::byte>> all(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    const std::byte* slot = region_->bytes().data() + slot_offset(sequence, r);
    uint32_t n = 0;
    std::memcpy(&n, slot, sizeof n);
    if (n > kAgreementBlobBytes)
      fail(Errc::protocol, "rank " + std::to_string(r) + " sent an agreement blob of " + std::to_string(n) +
                               " bytes (at most " + std::to_string(kAgreementBlobBytes) + ")");
    all[static_cast<size_t>(r)].assign(slot + sizeof n, slot + sizeof n + n);
  }
  ++finished_;
  return all;
}

}  // namespace pcoll
