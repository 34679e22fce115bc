// libFuzzer target: notification decoding (src/collectives/notification.hpp). Any 64-bit value
// may arrive from a peer; decode must yield in-range fields that encode back to the value,
// and widen_round must recover any round within 2^31 of the reference. The round
// classification Allreduce::on_notice makes of a data notice (duplicate / current / next /
// too far ahead) is checked against the widened round; on_notice itself needs a communicator.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "notification.hpp"

using namespace pcoll;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 16) return 0;
  uint64_t value = 0, reference = 0;
  std::memcpy(&value, data, 8);
  std::memcpy(&reference, data + 8, 8);

  // Decoding any value: fields in range, and encode() gives back the same value.
  const Notice n = decode(value);
  check(static_cast<uint64_t>(n.kind) <= 3 && n.handle < kMaxHandles && n.detail <= kMaxRanks);
  check(n.tag() < kMaxSlots);
  check(encode(n.kind, n.handle, n.detail, n.round32) == value);
  if (n.kind == NoticeKind::data) check(encode_data(n.handle, n.tag(), n.chunk(), n.round32) == value);

  // widen_round: the result carries the same low 32 bits and lies within 2^31 of the reference.
  const uint64_t round = widen_round(n.round32, reference);
  check(static_cast<uint32_t>(round) == n.round32);
  const auto distance = static_cast<int64_t>(round - reference);
  check(distance >= -(int64_t{1} << 31) && distance < (int64_t{1} << 31));

  // Round trip of in-range fields: a round near the reference survives the 32-bit trip.
  const int32_t offset = static_cast<int32_t>(value >> 32);
  const uint64_t sent = reference + static_cast<uint64_t>(static_cast<int64_t>(offset));
  const Notice m = decode(encode_data(n.handle, n.tag(), n.chunk(), sent));
  check(m.kind == NoticeKind::data && m.handle == n.handle && m.tag() == n.tag() && m.chunk() == n.chunk());
  check(widen_round(m.round32, reference) == sent);

  // on_notice's classification of a data notice at a rank that completed `reference` rounds:
  // a round one ahead is never mistaken for a duplicate, nor an old one for new.
  if (reference < UINT64_MAX) {
    check(widen_round(static_cast<uint32_t>(reference + 1), reference) == reference + 1);
    check(widen_round(static_cast<uint32_t>(reference), reference) == reference);
  }
  if (reference > 0) check(widen_round(static_cast<uint32_t>(reference - 1), reference) == reference - 1);
  return 0;
}
