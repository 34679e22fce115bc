// Collective agreement over the transport: an allgather of small blobs (up to
// kAgreementBlobBytes) that handle creation, handle destruction and barriers use instead
// of the bootstrap's. The bootstrap's collectives time out after a fixed time (the TCP
// store) or never (PMIx, PMI2, MPI), so a straggler computing a long step made fast ranks
// time out in create or destroy, and a dead rank hung them. Here a rank waiting for a
// peer's blob pings the peer's progress engine instead: a live peer (even one whose
// application computes for minutes) keeps it waiting, a dead or silent one fails the
// communicator within the timeout, naming it.
//
// Each rank owns a registered region of two parities x P slots. Agreement k writes the
// caller's blob into slot [k & 1][my rank] of every peer and notifies it; a rank finishes
// agreement k when all P blobs of k arrived. No peer can be two agreements ahead (it needs
// our blob of k+1 first), so two parities suffice, and a blob of k+1 that arrives early
// lands in the other parity and is kept for later.
//
// A slot holds the call the agreement is for and the rounds posted on every handle besides
// the blob (call_match.hpp): ranks that make different calls fail with Errc::mismatch,
// naming both calls, instead of reading each other's blobs as their own. Behind the slots,
// P report slots: a rank that found a mismatch writes its message into every peer's (with
// the failure notice as the write's notification), so that every rank reports it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <span>
#include <vector>

#include <collectives/call_match.hpp>
#include <collectives/failure_detector.hpp>
#include <transport/transport.hpp>

namespace pcoll {

class Comm;

inline constexpr size_t kAgreementBlobBytes = 1024 - sizeof(uint32_t);

class Agreement {
 public:
  // Collective over the bootstrap (communicator setup): allocates and exchanges the region.
  explicit Agreement(Comm& comm);
  ~Agreement();
  Agreement(const Agreement&) = delete;
  Agreement& operator=(const Agreement&) = delete;

  // Collective: every rank's blob, in rank order, once every rank made the same `call`
  // (Errc::mismatch, failing the communicator, otherwise). Takes the engine lock itself.
  // Throws the communicator's failure (naming the rank) if a peer dies or stops answering.
  std::vector<std::vector<std::byte>> allgather(const CallHeader& call, std::span<const std::byte> mine,
                                                std::chrono::milliseconds timeout);

  // Engine side (engine lock held): `sender`'s blob of agreement `sequence` (its low bits,
  // NoticeCodec::sequence_bits) has landed.
  void on_arrival(int sender, uint64_t sequence_low);
  // This rank's application is inside an agreement: its engine joins no round the
  // application has not posted (the peers' waits then see the mismatch, call_match.hpp).
  bool in_progress() const { return in_progress_; }
  // Some peer is inside an agreement this rank has not entered yet.
  bool peers_ahead() const { return !in_progress_ && seen_up_to_ > finished_; }
  // Those peers and their calls (engine lock held).
  std::vector<std::pair<int, CallRecord>> calls_ahead() const;

  // Failure reports (engine lock held): writes `report` to `peer`, notified with `value`
  // (the failure notice); and the report `sender` wrote here, if it wrote one.
  void send_report(int peer, const FailureReport& report, uint64_t value);
  std::optional<FailureReport> report_from(int sender) const;

 private:
  // A slot: this head, the rounds table (at most max_handles entries), then the blob.
  struct SlotHead {
    uint32_t blob_bytes = 0;
    uint32_t table_entries = 0;
    CallHeader call;
  };
  static constexpr size_t kReportBytes = 512;
  size_t slot_offset(uint64_t sequence, int rank) const;
  size_t report_offset(int rank) const;
  size_t write_own_slot(uint64_t sequence, const CallHeader& call, std::span<const std::byte> mine);
  void wait_for_blobs(uint64_t sequence, std::unique_lock<std::mutex>& lock, std::chrono::milliseconds timeout);
  void settle_sends();
  // Rank `rank`'s slot of `sequence`: its call, and its blob into `blob` when given.
  CallRecord read_slot(uint64_t sequence, int rank, std::vector<std::byte>* blob) const;

  Comm& comm_;
  transport::Transport& transport_;
  int rank_;
  int size_;
  size_t table_capacity_;  // rounds entries a slot has room for: the handles alive at most
  size_t slot_bytes_;
  std::unique_ptr<transport::LocalRegion> region_;
  std::vector<std::unique_ptr<transport::RemoteRegion>> peers_;
  uint64_t finished_ = 0;                  // agreements this rank has completed
  uint64_t seen_up_to_ = 0;                // 1 + the latest agreement a peer's blob arrived for
  bool in_progress_ = false;               // this rank waits in agreement finished_
  bool report_written_ = false;            // our report slot holds our report
  // [parity][rank]: 1 + the agreement whose blob from that rank is in the slot, 0 for none.
  // Stamped with the agreement, so a duplicated or stale notification never counts twice.
  std::vector<uint64_t> arrived_[2];
  size_t arrivals(uint64_t sequence) const;
};

}  // namespace pcoll
