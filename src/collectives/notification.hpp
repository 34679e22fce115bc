// The 64-bit notification values the collectives send through Transport::notify and
// write_notify, and their decoding. Layout (most significant first):
//   kind:2 | handle:10 | detail:20 | round:32
// detail is the activation's root rank, a data write's (tag:8, chunk:12), the sender of a
// control message (liveness kind; the handle field says which: ping, pong, agreement blob),
// or a failed rank (a failure notice's round field carries its sender). Only the low 32 bits of a round travel: a rank is never
// more than one round away from any in-flight value for its handle (a round cannot end
// without every rank), so the full round is recovered relative to the receiver's own.
#pragma once

#include <cstdint>

namespace pcoll {

enum class NoticeKind : uint64_t { data = 0, activation = 1, liveness = 2, failure = 3 };

inline constexpr unsigned kHandleBits = 10;
inline constexpr unsigned kSlotBits = 8;
inline constexpr unsigned kChunkBits = 12;
inline constexpr uint32_t kMaxHandles = 1u << kHandleBits;
inline constexpr uint32_t kMaxSlots = 1u << kSlotBits;
inline constexpr uint32_t kMaxChunks = 1u << kChunkBits;
inline constexpr uint32_t kMaxRanks = (1u << 20) - 1;
inline constexpr uint32_t kUnknownRank = kMaxRanks;  // failure of no single known rank
// The handle field of a liveness notice says which control message it is.
inline constexpr uint32_t kControlPing = 0;
inline constexpr uint32_t kControlPong = 1;
inline constexpr uint32_t kControlAgreement = 2;  // an agreement blob landed (agreement.hpp)
inline constexpr uint32_t kControlFailureAck = 3;  // a failure notice was received (comm.cpp)

struct Notice {
  NoticeKind kind;
  uint32_t handle;
  uint32_t detail;  // root / (tag << 12 | chunk) / ping sender / failed rank
  uint32_t round32;

  uint32_t tag() const { return detail >> kChunkBits; }
  uint32_t chunk() const { return detail & (kMaxChunks - 1); }
};

constexpr uint64_t encode(NoticeKind kind, uint32_t handle, uint32_t detail, uint64_t round) {
  return (static_cast<uint64_t>(kind) << 62) | (static_cast<uint64_t>(handle & (kMaxHandles - 1)) << 52) |
         (static_cast<uint64_t>(detail & ((1u << 20) - 1)) << 32) | (round & 0xffffffffu);
}

constexpr uint64_t encode_data(uint32_t handle, uint32_t tag, uint32_t chunk, uint64_t round) {
  return encode(NoticeKind::data, handle, (tag << kChunkBits) | chunk, round);
}

constexpr Notice decode(uint64_t value) {
  return Notice{static_cast<NoticeKind>(value >> 62), static_cast<uint32_t>((value >> 52) & (kMaxHandles - 1)),
                static_cast<uint32_t>((value >> 32) & ((1u << 20) - 1)), static_cast<uint32_t>(value)};
}

// Full round number of a 32-bit round that lies within 2^31 of `reference`.
constexpr uint64_t widen_round(uint32_t round32, uint64_t reference) {
  const auto delta = static_cast<int32_t>(round32 - static_cast<uint32_t>(reference));
  return reference + static_cast<uint64_t>(static_cast<int64_t>(delta));
}

}  // namespace pcoll
