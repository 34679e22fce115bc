// libFuzzer target: notification decoding (lib/collectives/include/collectives/notification.hpp), both widths.
// Any value may arrive from a peer; decode must yield fields in range for the width that
// encode back to the same notice, and widening must recover any round or sequence within
// half its window of the reference. The round classification Allreduce::on_data makes of
// a data notice (duplicate / current / next / too far ahead) is checked against the
// widened round; on_data itself needs a communicator.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <collectives/notification.hpp>

using namespace pcoll;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

uint64_t low_bits(uint64_t value, unsigned bits) { return bits >= 64 ? value : value & ((uint64_t{1} << bits) - 1); }

// Encodes a decoded notice again.
uint64_t encode(const NoticeCodec& codec, const Notice& n) {
  switch (n.kind) {
    case NoticeKind::data: return codec.data(n.handle, n.tag, n.chunk, n.round);
    case NoticeKind::credit: return codec.credit(n.handle, n.tag, n.chunk, n.round);
    case NoticeKind::activation: return codec.activation(n.handle, n.rank, n.round);
    case NoticeKind::control: return codec.control(n.type, n.rank, n.round);
    case NoticeKind::failure: return codec.failure(n.rank, n.sender);
  }
  std::abort();
}

bool same(const Notice& a, const Notice& b) {
  return a.kind == b.kind && a.handle == b.handle && a.tag == b.tag && a.chunk == b.chunk && a.type == b.type &&
         a.rank == b.rank && a.sender == b.sender && a.round == b.round;
}

void one_width(unsigned bits, uint64_t value, uint64_t reference) {
  const NoticeCodec codec(bits);
  // Decoding any value: fields in range, and encoding them decodes to the same notice.
  const Notice n = codec.decode(value);
  // The handle field is a slot and its generation: it spans max_handles() << kGenerationBits.
  check(n.handle < (codec.max_handles() << NoticeCodec::kGenerationBits) &&
        codec.handle_slot(n.handle) < codec.max_handles() && n.tag < codec.max_tags() && n.chunk < codec.max_chunks());
  check(n.rank < (1u << 20) && n.sender <= codec.unknown_rank() && n.type < 1024);
  const uint64_t again = encode(codec, n);
  check(codec.fits(again));
  check(same(codec.decode(again), n));

  // Widening: the result carries the same low bits and lies within half the window.
  const unsigned rb = codec.round_bits();
  const uint64_t round = codec.widen_round(n.round, reference);
  check(low_bits(round, rb) == low_bits(n.round, rb));
  if (rb < 64) {
    const auto distance = static_cast<int64_t>(round - reference);
    check(distance >= -(int64_t{1} << (rb - 1)) && distance < (int64_t{1} << (rb - 1)));
  }

  // A data notice of a round near the reference survives the trip.
  const int64_t window = int64_t{1} << (rb - 1);
  const int64_t offset = static_cast<int64_t>(value % static_cast<uint64_t>(2 * window)) - window;
  const uint64_t sent = reference + static_cast<uint64_t>(offset);
  const Notice m = codec.decode(codec.data(n.handle, n.tag, n.chunk, sent));
  check(m.kind == NoticeKind::data && m.handle == n.handle && m.tag == n.tag && m.chunk == n.chunk);
  check(codec.widen_round(m.round, reference) == sent);
  const Notice c = codec.decode(codec.credit(n.handle, n.tag, n.chunk, sent));
  check(c.kind == NoticeKind::credit && codec.widen_round(c.round, reference) == sent);

  // on_data's classification at a rank that completed `reference` rounds: a round one
  // ahead is never mistaken for a duplicate, nor an old one for new.
  if (reference < UINT64_MAX) check(codec.widen_round(low_bits(reference + 1, rb), reference) == reference + 1);
  check(codec.widen_round(low_bits(reference, rb), reference) == reference);
  if (reference > 0) check(codec.widen_round(low_bits(reference - 1, rb), reference) == reference - 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 16) return 0;
  uint64_t value = 0, reference = 0;
  std::memcpy(&value, data, 8);
  std::memcpy(&reference, data + 8, 8);
  one_width(64, value, reference);
  one_width(32, value & 0xffffffffu, reference);
  return 0;
}
