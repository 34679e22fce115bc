// The notification values the collectives send through Transport::notify and write_notify,
// in one of two widths: 64 bits where the provider carries them (libfabric shm and tcp,
// UCX), 32 bits where its remote CQ data is 4 bytes (verbs, EFA) or PCOLL_NOTIFY_BITS=32
// asks for it. One logical notice, two bit layouts (docs/design.md, "Notifications", has the
// budget of both):
//
//   64:  kind:2 | handle:10 | detail:20 | round:32
//   32:  kind:2 | handle:8  | detail:16 | round:6      (data, credit, activation)
//        kind:2 | type:3    | rank:15   | seq:12       (control)
//        kind:2 | culprit:15 | sender:15               (failure)
//
// detail is a data write's or a credit's (credit flag, exchange tag, chunk) and an
// activation's sender rank. Only the low bits of a round travel: a rank is never more than
// one round away from any value still in flight for its handle (a round cannot end
// without every rank), so the full round is recovered relative to the receiver's own, and
// a duplicate delayed by fewer than half the round window is still recognised as old.
//
// Every notice is idempotent (design.md's table): a second delivery, or one out of order,
// changes nothing. Values decode from any bits a peer may send: decode() never fails,
// its fields are in range for the width, and the receiver checks them against its job.
#pragma once

#include <cstdint>
#include <string>

namespace pcoll {

enum class NoticeKind : uint8_t {
  data,        // a write_notify of a reduction chunk landed
  credit,      // the receiver of an exchange freed landing slots: chunks below `chunk`
               // of round `round` are consumed (flow control of the landing pool)
  activation,  // round `round` was activated; `rank` is the tree neighbour that sent it
  control,     // ping, pong, agreement blob landed, failure acknowledged: `type`, sender `rank`
  failure,     // `rank` (or nobody known) failed, reported by `sender`
};

// Control messages (NoticeKind::control, field `type`).
inline constexpr uint32_t kControlPing = 0;
inline constexpr uint32_t kControlPong = 1;
inline constexpr uint32_t kControlAgreement = 2;   // an agreement blob landed (agreement.hpp)
inline constexpr uint32_t kControlFailureAck = 3;  // a failure notice was received (comm.cpp)
// The survivors' channel after a failure (survivor_channel.hpp): a message landed in its
// slot `sequence`; the receiver consumed the sender's messages below `sequence`.
inline constexpr uint32_t kControlSurvivor = 4;
inline constexpr uint32_t kControlSurvivorAck = 5;
inline constexpr uint32_t kControlTypes = 6;

struct Notice {
  NoticeKind kind = NoticeKind::data;
  uint32_t handle = 0;    // data, credit, activation
  uint32_t tag = 0;       // data, credit: exchange tag of the reduction plan
  uint32_t chunk = 0;     // data: chunk index; credit: chunks below it are consumed
  uint32_t type = 0;      // control
  uint32_t rank = 0;      // activation, control: sender; failure: culprit
  uint32_t sender = 0;    // failure
  uint64_t round = 0;     // low round_bits() bits: data, credit, activation; control: sequence
};

class NoticeCodec {
 public:
  // 64 or 32; anything else is Errc::internal (the communicator validates PCOLL_NOTIFY_BITS).
  explicit NoticeCodec(unsigned bits = 64);

  unsigned bits() const { return bits_; }
  // Limits the width sets, checked where they apply (handle creation, plans, setup).
  // The handle field is a slot and its generation (kGenerationBits): a slot is reused
  // after its handle is destroyed, and the generation tells a stale message for the
  // previous handle of the slot from one for the current.
  static constexpr unsigned kGenerationBits = 2;
  uint32_t max_handles() const { return 1u << (handle_bits_ - kGenerationBits); }  // alive at once
  uint32_t handle_field(uint32_t slot, uint32_t generation) const {
    return slot | ((generation & ((1u << kGenerationBits) - 1)) << (handle_bits_ - kGenerationBits));
  }
  uint32_t handle_slot(uint32_t field) const { return field & (max_handles() - 1); }
  uint32_t max_tags() const { return 1u << tag_bits_; }
  uint32_t max_chunks() const { return 1u << chunk_bits_; }
  // Ranks are 0 .. max_ranks() - 1; the all-ones value of the failure field is "unknown".
  uint32_t max_ranks() const { return unknown_rank_; }
  uint32_t unknown_rank() const { return unknown_rank_; }
  unsigned round_bits() const { return round_bits_; }
  unsigned sequence_bits() const { return sequence_bits_; }

  uint64_t data(uint32_t handle, uint32_t tag, uint32_t chunk, uint64_t round) const;
  uint64_t credit(uint32_t handle, uint32_t tag, uint32_t chunk, uint64_t round) const;
  uint64_t activation(uint32_t handle, uint32_t sender, uint64_t round) const;
  uint64_t control(uint32_t type, uint32_t sender, uint64_t sequence = 0) const;
  uint64_t failure(uint32_t culprit, uint32_t sender) const;  // culprit may be unknown_rank()

  Notice decode(uint64_t value) const;
  // Bits above the width are not ours: a provider may set them, a peer must not.
  bool fits(uint64_t value) const { return bits_ == 64 || (value >> bits_) == 0; }

  // The full round (or agreement sequence) whose low bits are `low`, nearest `reference`.
  uint64_t widen_round(uint64_t low, uint64_t reference) const { return widen(low, round_bits_, reference); }
  uint64_t widen_sequence(uint64_t low, uint64_t reference) const { return widen(low, sequence_bits_, reference); }
  static uint64_t widen(uint64_t low, unsigned bits, uint64_t reference);

  // "64-bit notifications (at most 1024 handles, ...)": for error messages and pcoll_info.
  std::string describe() const;

 private:
  unsigned bits_;
  unsigned handle_bits_, tag_bits_, chunk_bits_, rank_bits_, round_bits_, sequence_bits_;
  uint32_t unknown_rank_;
};

}  // namespace pcoll
