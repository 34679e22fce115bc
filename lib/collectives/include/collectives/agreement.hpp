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
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

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

  // Collective: every rank's blob, in rank order. Takes the engine lock itself. Throws
  // the communicator's failure (naming the rank) if a peer dies or stops answering.
  std::vector<std::vector<std::byte>> allgather(std::span<const std::byte> mine,
                                                std::chrono::milliseconds timeout);

  // Engine side (engine lock held): `sender`'s blob of agreement `sequence` (its low bits,
  // NoticeCodec::sequence_bits) has landed.
  void on_arrival(int sender, uint64_t sequence_low);

 private:
  static constexpr size_t kSlotBytes = kAgreementBlobBytes + sizeof(uint32_t);
  size_t slot_offset(uint64_t sequence, int rank) const;

  Comm& comm_;
  transport::Transport& transport_;
  int rank_;
  int size_;
  std::unique_ptr<transport::LocalRegion> region_;
  std::vector<std::unique_ptr<transport::RemoteRegion>> peers_;
  uint64_t finished_ = 0;                  // agreements this rank has completed
  // [parity][rank]: 1 + the agreement whose blob from that rank is in the slot, 0 for none.
  // Stamped with the agreement, so a duplicated or stale notification never counts twice.
  std::vector<uint64_t> arrived_[2];
  size_t arrivals(uint64_t sequence) const;
};

}  // namespace pcoll
