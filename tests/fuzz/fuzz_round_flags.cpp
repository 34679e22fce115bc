// libFuzzer target: the round's flag words (lib/collectives/include/collectives/round_flags.hpp).
// The words arrive combined with every peer's: any bytes may stand there when a peer is
// broken. read() must either name the broken word (Errc::protocol) or report flags that
// could exist: fresh ranks below P and counted, initiators and flush ranks below P, the
// last initiator at or above the first. And the flags the ranks really write, combined in
// any order and over any split of the words, must read back as what they wrote.
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <collectives/round_flags.hpp>
#include <support/error.hpp>

using namespace pcoll;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

// The input as a stream of bytes, zeros once it runs out.
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t next() { return at_ < size_ ? data_[at_++] : 0; }
  uint32_t next16() { return static_cast<uint32_t>(next()) | static_cast<uint32_t>(next()) << 8; }
  bool done() const { return at_ >= size_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

// Whatever read() returns is a round some ranks could have run.
void check_read(const RoundFlags::Read& r, int ranks) {
  check(r.fresh_mask.size() == (static_cast<size_t>(ranks) + 63) / 64);
  int counted = 0;
  for (size_t w = 0; w < r.fresh_mask.size(); ++w) {
    const uint64_t bits = r.fresh_mask[w];
    counted += std::popcount(bits);
    const size_t base = 64 * w;
    if (static_cast<size_t>(ranks) - base < 64) check((bits >> (static_cast<size_t>(ranks) - base)) == 0);
  }
  check(counted == r.fresh && r.fresh <= ranks);
  check(r.initiator >= -1 && r.initiator < ranks && r.last_initiator >= -1 && r.last_initiator < ranks);
  check((r.initiator < 0) == (r.last_initiator < 0) && r.last_initiator >= r.initiator);
  if (r.mixed) check(r.mixed->first >= 0 && r.mixed->first < ranks && r.mixed->second >= 0 && r.mixed->second < ranks);
}

// Arbitrary words: a protocol error naming them, or flags that could exist.
void arbitrary(const RoundFlags& flags, int ranks, Bytes& in) {
  std::vector<std::byte> words(flags.words() * flags.word_bytes());
  for (auto& b : words) b = static_cast<std::byte>(in.next());
  try {
    check_read(flags.read(words.data()), ranks);
  } catch (const Error& e) {
    check(e.code() == Errc::protocol);
  }
}

// Up to 64 ranks' real flags, combined in the input's order over the input's splits.
void written(const RoundFlags& flags, int ranks, Bytes& in) {
  const size_t bytes = flags.words() * flags.word_bytes();
  const size_t writers = 1 + in.next() % 64;
  std::vector<std::byte> acc(bytes), mine(bytes);
  std::vector<uint64_t> fresh_mask((static_cast<size_t>(ranks) + 63) / 64, 0);
  int initiator = -1, last_initiator = -1, flushed = -1, ran = -1;
  std::vector<bool> seen(static_cast<size_t>(ranks), false);
  bool first = true;
  for (size_t i = 0; i < writers && !in.done(); ++i) {
    const int rank = static_cast<int>(in.next16() % static_cast<uint32_t>(ranks));
    if (seen[static_cast<size_t>(rank)]) continue;  // each rank contributes once
    seen[static_cast<size_t>(rank)] = true;
    const uint8_t what = in.next();
    const bool fresh = what & 1, initiated = what & 2, flush = what & 4;
    flags.write(mine.data(), rank, fresh, initiated, flush);
    if (fresh) fresh_mask[static_cast<size_t>(rank) / 64] |= uint64_t{1} << (rank % 64);
    if (initiated) {
      initiator = initiator < 0 ? rank : std::min(initiator, rank);
      last_initiator = std::max(last_initiator, rank);
    }
    int& lowest = flush ? flushed : ran;
    lowest = lowest < 0 ? rank : std::min(lowest, rank);
    if (first) {
      acc = mine;
      first = false;
      continue;
    }
    // Combined over a split of the words at a point the input chooses, as a plan's ranges do.
    const size_t cut = in.next16() % (flags.words() + 1);
    const size_t wb = flags.word_bytes();
    flags.combine(acc.data(), mine.data(), 0, cut);
    flags.combine(acc.data() + cut * wb, mine.data() + cut * wb, cut, flags.words() - cut);
  }
  if (first) return;
  const RoundFlags::Read r = flags.read(acc.data());  // real flags never read as broken
  check_read(r, ranks);
  check(r.fresh_mask == fresh_mask && r.initiator == initiator && r.last_initiator == last_initiator);
  check(r.mixed.has_value() == (flushed >= 0 && ran >= 0));
  if (r.mixed) check(r.mixed->first == flushed && r.mixed->second == ran);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  Bytes in(data, size);
  const uint8_t shape = in.next();
  const size_t word_bytes = (shape & 1) ? 8 : 4;
  // P from 1 to 4096, so that the bitmap spans from one word to many.
  const int ranks = 1 + static_cast<int>(in.next16() % 4096);
  const RoundFlags flags(ranks, word_bytes);
  if (shape & 2) arbitrary(flags, ranks, in);
  else written(flags, ranks, in);
  return 0;
}
