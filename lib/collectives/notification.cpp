// Notification layouts of both widths (notification.hpp).
#include <collectives/notification.hpp>

#include <support/error.hpp>

namespace pcoll {
namespace {

// The two bits at the top of every value.
enum Wire : uint64_t { kWireData = 0, kWireActivation = 1, kWireControl = 2, kWireFailure = 3 };

constexpr uint64_t mask(unsigned bits) { return bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1; }

}  // namespace

NoticeCodec::NoticeCodec(unsigned bits) : bits_(bits) {
  if (bits == 64) {
    handle_bits_ = 10, tag_bits_ = 7, chunk_bits_ = 12, rank_bits_ = 20, round_bits_ = 32, sequence_bits_ = 32;
  } else if (bits == 32) {
    handle_bits_ = 8, tag_bits_ = 5, chunk_bits_ = 10, rank_bits_ = 15, round_bits_ = 6, sequence_bits_ = 12;
  } else {
    fail(Errc::internal, "no notification layout of " + std::to_string(bits) + " bits");
  }
  unknown_rank_ = static_cast<uint32_t>(mask(rank_bits_));
}

// --- 64 bits: kind:2 | handle:10 | detail:20 | round:32 ------------------------------------
// data/credit detail: credit:1 | tag:7 | chunk:12; activation: sender; control: the handle
// field is the type, detail the sender, round the sequence; failure: detail the culprit,
// round the sender.
// --- 32 bits (notification.hpp) --------------------------------------------------------------

uint64_t NoticeCodec::data(uint32_t handle, uint32_t tag, uint32_t chunk, uint64_t round) const {
  if (bits_ == 64)
    return (kWireData << 62) | (uint64_t{handle & 0x3ff} << 52) | (uint64_t{tag & 0x7f} << 44) |
           (uint64_t{chunk & 0xfff} << 32) | (round & 0xffffffffu);
  return (kWireData << 30) | (uint64_t{handle & 0xff} << 22) | (uint64_t{tag & 0x1f} << 16) |
         (uint64_t{chunk & 0x3ff} << 6) | (round & 0x3f);
}

uint64_t NoticeCodec::credit(uint32_t handle, uint32_t tag, uint32_t chunk, uint64_t round) const {
  return data(handle, tag, chunk, round) | (bits_ == 64 ? uint64_t{1} << 51 : uint64_t{1} << 21);
}

uint64_t NoticeCodec::activation(uint32_t handle, uint32_t sender, uint64_t round) const {
  if (bits_ == 64)
    return (kWireActivation << 62) | (uint64_t{handle & 0x3ff} << 52) | (uint64_t{sender & 0xfffff} << 32) |
           (round & 0xffffffffu);
  return (kWireActivation << 30) | (uint64_t{handle & 0xff} << 22) | (uint64_t{sender & 0xffff} << 6) | (round & 0x3f);
}

uint64_t NoticeCodec::control(uint32_t type, uint32_t sender, uint64_t sequence) const {
  if (bits_ == 64)
    return (kWireControl << 62) | (uint64_t{type & 0x3ff} << 52) | (uint64_t{sender & 0xfffff} << 32) |
           (sequence & 0xffffffffu);
  return (kWireControl << 30) | (uint64_t{type & 0x7} << 27) | (uint64_t{sender & 0x7fff} << 12) |
         (sequence & 0xfff);
}

uint64_t NoticeCodec::failure(uint32_t culprit, uint32_t sender) const {
  if (bits_ == 64) return (kWireFailure << 62) | (uint64_t{culprit & 0xfffff} << 32) | (sender & 0xfffff);
  return (kWireFailure << 30) | (uint64_t{culprit & 0x7fff} << 15) | (sender & 0x7fff);
}

Notice NoticeCodec::decode(uint64_t value) const {
  Notice n;
  if (bits_ == 64) {
    const auto handle = static_cast<uint32_t>((value >> 52) & 0x3ff);
    const auto detail = static_cast<uint32_t>((value >> 32) & 0xfffff);
    const uint64_t low = value & 0xffffffffu;
    switch (value >> 62) {
      case kWireData:
        n.kind = (detail >> 19) != 0 ? NoticeKind::credit : NoticeKind::data;
        n.handle = handle, n.tag = (detail >> 12) & 0x7f, n.chunk = detail & 0xfff, n.round = low;
        break;
      case kWireActivation:
        n.kind = NoticeKind::activation, n.handle = handle, n.rank = detail, n.round = low;
        break;
      case kWireControl:
        n.kind = NoticeKind::control, n.type = handle, n.rank = detail, n.round = low;
        break;
      default:
        n.kind = NoticeKind::failure, n.rank = detail, n.sender = static_cast<uint32_t>(low & 0xfffff);
        break;
    }
    return n;
  }
  const uint64_t v = value & 0xffffffffu;
  switch (v >> 30) {
    case kWireData:
      n.kind = ((v >> 21) & 1) != 0 ? NoticeKind::credit : NoticeKind::data;
      n.handle = static_cast<uint32_t>((v >> 22) & 0xff), n.tag = static_cast<uint32_t>((v >> 16) & 0x1f);
      n.chunk = static_cast<uint32_t>((v >> 6) & 0x3ff), n.round = v & 0x3f;
      break;
    case kWireActivation:
      n.kind = NoticeKind::activation, n.handle = static_cast<uint32_t>((v >> 22) & 0xff);
      n.rank = static_cast<uint32_t>((v >> 6) & 0xffff), n.round = v & 0x3f;
      break;
    case kWireControl:
      n.kind = NoticeKind::control, n.type = static_cast<uint32_t>((v >> 27) & 0x7);
      n.rank = static_cast<uint32_t>((v >> 12) & 0x7fff), n.round = v & 0xfff;
      break;
    default:
      n.kind = NoticeKind::failure, n.rank = static_cast<uint32_t>((v >> 15) & 0x7fff);
      n.sender = static_cast<uint32_t>(v & 0x7fff);
      break;
  }
  return n;
}

uint64_t NoticeCodec::widen(uint64_t low, unsigned bits, uint64_t reference) {
  const uint64_t m = mask(bits);
  // The signed distance from the reference's low bits, in [-2^(bits-1), 2^(bits-1)).
  uint64_t delta = (low - reference) & m;
  if (bits < 64 && delta > (m >> 1)) delta |= ~m;  // negative: sign-extend
  return reference + delta;
}

std::string NoticeCodec::describe() const {
  return std::to_string(bits_) + "-bit notifications (at most " + std::to_string(max_handles()) +
         " handles alive per communicator, " + std::to_string(max_ranks()) + " ranks, " +
         std::to_string(max_chunks()) + " chunks per exchange)";
}

}  // namespace pcoll
