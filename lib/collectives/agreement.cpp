// Collective agreement over the transport with liveness probing (agreement.hpp).
#include <collectives/agreement.hpp>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>

#include <collectives/comm.hpp>
#include <collectives/notification.hpp>
#include <support/error.hpp>
#include <support/interrupt.hpp>
#include <support/log.hpp>

namespace pcoll {

Agreement::Agreement(Comm& comm)
    : comm_(comm), transport_(comm.transport()), rank_(comm.rank()), size_(comm.size()),
      table_capacity_(comm.codec().max_handles()),
      slot_bytes_((sizeof(SlotHead) + table_capacity_ * sizeof(RoundsEntry) + kAgreementBlobBytes + 7) / 8 * 8) {
  region_ = transport_.allocate(2 * static_cast<size_t>(size_) * slot_bytes_ + static_cast<size_t>(size_) * kReportBytes);
  for (auto& stamps : arrived_) stamps.assign(static_cast<size_t>(size_), 0);
  const auto keys = comm.boot().allgather(region_->remote_key());
  peers_.resize(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) peers_[static_cast<size_t>(r)] = transport_.import_region(r, keys[static_cast<size_t>(r)]);
}

Agreement::~Agreement() = default;

size_t Agreement::slot_offset(uint64_t sequence, int rank) const {
  return ((sequence & 1) * static_cast<size_t>(size_) + static_cast<size_t>(rank)) * slot_bytes_;
}

size_t Agreement::report_offset(int rank) const {
  return 2 * static_cast<size_t>(size_) * slot_bytes_ + static_cast<size_t>(rank) * kReportBytes;
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
  seen_up_to_ = std::max(seen_up_to_, sequence + 1);
}

size_t Agreement::arrivals(uint64_t sequence) const {
  const auto& stamps = arrived_[sequence & 1];
  return static_cast<size_t>(std::count(stamps.begin(), stamps.end(), sequence + 1));
}

// Our own slot holds what we send: the head, the rounds table, the blob. Returns its bytes.
size_t Agreement::write_own_slot(uint64_t sequence, const CallHeader& call, std::span<const std::byte> mine) {
  const RoundsTable table = comm_.rounds_table_locked();
  if (table.size() > table_capacity_)
    fail(Errc::internal, "rounds table of " + std::to_string(table.size()) + " handles exceeds " +
                             std::to_string(table_capacity_));
  std::byte* own = region_->bytes().data() + slot_offset(sequence, rank_);
  SlotHead head;
  head.blob_bytes = static_cast<uint32_t>(mine.size());
  head.table_entries = static_cast<uint32_t>(table.size());
  head.call = call;
  std::memcpy(own, &head, sizeof head);
  const size_t table_bytes = table.size() * sizeof(RoundsEntry);
  if (!table.empty()) std::memcpy(own + sizeof head, table.data(), table_bytes);
  if (!mine.empty()) std::memcpy(own + sizeof head + table_bytes, mine.data(), mine.size());
  return sizeof head + table_bytes + mine.size();
}

CallRecord Agreement::read_slot(uint64_t sequence, int rank, std::vector<std::byte>* blob) const {
  const std::byte* slot = region_->bytes().data() + slot_offset(sequence, rank);
  SlotHead head;
  std::memcpy(&head, slot, sizeof head);
  if (head.blob_bytes > kAgreementBlobBytes || head.table_entries > table_capacity_)
    fail(Errc::protocol, "rank " + std::to_string(rank) + " sent an agreement blob of " + std::to_string(head.blob_bytes) +
                             " bytes and " + std::to_string(head.table_entries) + " handles (at most " +
                             std::to_string(kAgreementBlobBytes) + " and " + std::to_string(table_capacity_) + ")");
  CallRecord record;
  record.header = head.call;
  record.table.resize(head.table_entries);
  const size_t table_bytes = record.table.size() * sizeof(RoundsEntry);
  if (table_bytes != 0) std::memcpy(record.table.data(), slot + sizeof head, table_bytes);
  if (blob != nullptr) blob->assign(slot + sizeof head + table_bytes, slot + sizeof head + table_bytes + head.blob_bytes);
  return record;
}

std::vector<std::pair<int, CallRecord>> Agreement::calls_ahead() const {
  std::vector<std::pair<int, CallRecord>> ahead;
  for (int r = 0; r < size_; ++r)
    if (r != rank_ && arrived_[finished_ & 1][static_cast<size_t>(r)] == finished_ + 1)
      ahead.emplace_back(r, read_slot(finished_, r, nullptr));
  return ahead;
}

std::vector<std::vector<std::byte>> Agreement::allgather(const CallHeader& call, std::span<const std::byte> mine,
                                                         std::chrono::milliseconds timeout) {
  if (mine.size() > kAgreementBlobBytes)
    fail(Errc::internal, "agreement blob of " + std::to_string(mine.size()) + " bytes exceeds " +
                             std::to_string(kAgreementBlobBytes));
  std::unique_lock lock(comm_.engine_mutex());
  comm_.check_failed();
  const uint64_t sequence = finished_;
  const size_t bytes = write_own_slot(sequence, call, mine);
  arrived_[sequence & 1][static_cast<size_t>(rank_)] = sequence + 1;
  struct InProgress {
    bool& flag;
    explicit InProgress(bool& f) : flag(f) { flag = true; }
    ~InProgress() { flag = false; }
  } in_progress{in_progress_};
  const uint64_t value = comm_.codec().control(kControlAgreement, static_cast<uint32_t>(rank_), sequence);
  try {
    for (int step = 1; step < size_; ++step) {
      const int peer = (rank_ + step) % size_;  // spread the writes: not everyone to rank 0 first
      transport_.write_notify(*region_, slot_offset(sequence, rank_), *peers_[static_cast<size_t>(peer)],
                              slot_offset(sequence, rank_), bytes, value);
    }
  } catch (const Error& error) {
    comm_.fail_locked(error);
  }
  wait_for_blobs(sequence, lock, timeout);
  settle_sends();
  std::vector<CallRecord> records(static_cast<size_t>(size_));
  std::vector<std::vector<std::byte>> all(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) records[static_cast<size_t>(r)] = read_slot(sequence, r, &all[static_cast<size_t>(r)]);
  if (const auto problem = agreement_mismatch(rank_, records)) comm_.fail_locked(Error(Errc::mismatch, *problem));
  ++finished_;
  return all;
}

void Agreement::wait_for_blobs(uint64_t sequence, std::unique_lock<std::mutex>& lock, std::chrono::milliseconds timeout) {
  const auto probe_after = FailureDetector::probe_period(timeout);
  const auto started = std::chrono::steady_clock::now();
  const auto everyone = static_cast<size_t>(size_);
  while (arrivals(sequence) < everyone) {
    comm_.drive_locked();
    if (arrivals(sequence) == everyone) break;
    // The application's interrupt (Python's Ctrl-C) ends the wait: the communicator fails
    // naming this rank, so the peers waiting in the same call stop too.
    if (interrupt::requested())
      comm_.fail_locked(Error(Errc::invalid_state,
                              "rank " + std::to_string(rank_) +
                                  " was interrupted by the application (a signal) in a collective call",
                              rank_));
    if (std::chrono::steady_clock::now() - started > probe_after) {
      // Ask every rank we still miss whether its engine is alive.
      for (int r = 0; r < size_; ++r)
        if (arrived_[sequence & 1][static_cast<size_t>(r)] != sequence + 1) comm_.watch_locked(r, timeout);
    }
    comm_.sleep_locked(lock, std::chrono::milliseconds(2));
  }
}

// Our sends read our own slot: they must be done before the next agreement of this
// parity overwrites it, and before the blobs are handed out. A send that failed is
// reported here (a completion error): the peers that miss our blob must hear of it.
// Leaving (pcoll_finalize's barrier), every blob has arrived, so every rank has entered
// the barrier; a peer may already have finished it and closed its endpoint, and a flush
// towards it then fails although it had what it needed to finish (it could not have
// finished otherwise): not a failure of the job.
void Agreement::settle_sends() {
  try {
    transport_.flush();
  } catch (const Error& error) {
    if (!comm_.is_leaving() || error.rank() < 0 || error.rank() == rank_) comm_.fail_locked(error);
    log::debug(std::string("finalize barrier: flush towards a rank that has left: ") + error.what());
  }
}

// A report: its code, its length, its text. Written once (the first failure is the one
// the communicator keeps), from our own report slot.
void Agreement::send_report(int peer, const FailureReport& report, uint64_t value) {
  std::byte* own = region_->bytes().data() + report_offset(rank_);
  if (!report_written_) {
    const auto length = static_cast<uint32_t>(std::min(report.text.size(), kReportBytes - 2 * sizeof(uint32_t)));
    const auto code = static_cast<uint32_t>(report.code);
    std::memcpy(own, &code, sizeof code);
    std::memcpy(own + sizeof code, &length, sizeof length);
    std::memcpy(own + 2 * sizeof(uint32_t), report.text.data(), length);
    report_written_ = true;
  }
  uint32_t length = 0;
  std::memcpy(&length, own + sizeof(uint32_t), sizeof length);
  transport_.write_notify(*region_, report_offset(rank_), *peers_[static_cast<size_t>(peer)], report_offset(rank_),
                          2 * sizeof(uint32_t) + length, value);
}

std::optional<FailureReport> Agreement::report_from(int sender) const {
  if (sender < 0 || sender >= size_ || sender == rank_) return std::nullopt;
  const std::byte* slot = region_->bytes().data() + report_offset(sender);
  uint32_t code = 0, length = 0;
  std::memcpy(&code, slot, sizeof code);
  std::memcpy(&length, slot + sizeof code, sizeof length);
  // Nothing written (a plain failure notice), or not a report we can read.
  if (code == 0 || code > static_cast<uint32_t>(Errc::internal) || length > kReportBytes - 2 * sizeof(uint32_t))
    return std::nullopt;
  return FailureReport{static_cast<Errc>(code),
                       std::string(reinterpret_cast<const char*>(slot) + 2 * sizeof(uint32_t), length)};
}

}  // namespace pcoll
