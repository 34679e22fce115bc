// The flags of a round as words after the data (round_flags.hpp).
#include <collectives/round_flags.hpp>

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

#include <collectives/reduce_kernels.hpp>
#include <support/error.hpp>

namespace pcoll {

RoundFlags::RoundFlags(int ranks, std::size_t word_bytes)
    : ranks_(ranks), word_bytes_(word_bytes), bits_(8 * word_bytes) {
  if (ranks < 1) fail(Errc::internal, "round flags for " + std::to_string(ranks) + " ranks");
  if (word_bytes != 4 && word_bytes != 8)
    fail(Errc::internal, "round flags in words of " + std::to_string(word_bytes) + " bytes");
  bitmap_words_ = (static_cast<std::size_t>(ranks) + bits_ - 1) / bits_;
}

uint64_t RoundFlags::load(const std::byte* flags, std::size_t word) const {
  if (word_bytes_ == 8) {
    uint64_t v;
    std::memcpy(&v, flags + 8 * word, 8);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, flags + 4 * word, 4);
  return v;
}

void RoundFlags::store(std::byte* flags, std::size_t word, uint64_t value) const {
  if (word_bytes_ == 8) {
    std::memcpy(flags + 8 * word, &value, 8);
    return;
  }
  const auto v = static_cast<uint32_t>(value);
  std::memcpy(flags + 4 * word, &v, 4);
}

void RoundFlags::write(std::byte* flags, int rank, bool fresh, bool initiated, bool flush) const {
  std::memset(flags, 0, bitmap_words_ * word_bytes_);
  const auto r = static_cast<std::size_t>(rank);
  if (fresh) store(flags, r / bits_, uint64_t{1} << (r % bits_));
  store(flags, bitmap_words_, initiated ? r : none());
  store(flags, bitmap_words_ + 1, initiated ? r + 1 : 0);
  store(flags, bitmap_words_ + 2, flush ? r : none());
  store(flags, bitmap_words_ + 3, flush ? none() : r);
}

void RoundFlags::combine(std::byte* acc, const std::byte* in, std::size_t first, std::size_t n) const {
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t word = first + i;
    const uint64_t a = load(acc, i), b = load(in, i);
    store(acc, i, word < bitmap_words_ ? (a | b) : word == bitmap_words_ + 1 ? std::max(a, b) : std::min(a, b));
  }
}

int RoundFlags::min_word(const std::byte* flags, std::size_t word, const char* what) const {
  const uint64_t v = load(flags, word);
  if (v == none()) return -1;
  if (v >= static_cast<uint64_t>(ranks_))
    fail(Errc::protocol, std::string("the round's ") + what + " word names rank " + std::to_string(v) + " of a job of " +
                             std::to_string(ranks_) + " ranks: a peer wrote a broken flag word");
  return static_cast<int>(v);
}

RoundFlags::Read RoundFlags::read(const std::byte* flags) const {
  Read out;
  out.fresh_mask.assign((static_cast<std::size_t>(ranks_) + 63) / 64, 0);
  for (std::size_t w = 0; w < bitmap_words_; ++w) {
    const uint64_t bits = load(flags, w);
    if (bits == 0) continue;
    const std::size_t base = w * bits_;
    const std::size_t valid = std::min(bits_, static_cast<std::size_t>(ranks_) - base);
    if (valid < 64 && (bits >> valid) != 0)
      fail(Errc::protocol, "the round's fresh bitmap sets a bit at or above rank " + std::to_string(ranks_) +
                               ", the job's size: a peer wrote a broken flag word");
    out.fresh += std::popcount(bits);
    // bits_ is 32 or 64, so a word never straddles two 64-bit mask words.
    out.fresh_mask[base / 64] |= bits << (base % 64);
  }
  out.initiator = min_word(flags, bitmap_words_, "initiator");
  const uint64_t last = load(flags, bitmap_words_ + 1);
  if (last > static_cast<uint64_t>(ranks_) || (last == 0) != (out.initiator < 0) ||
      (last != 0 && static_cast<int>(last) - 1 < out.initiator))
    fail(Errc::protocol, "the round's last initiator word holds " + std::to_string(last) + " (initiator " +
                             std::to_string(out.initiator) + ", job of " + std::to_string(ranks_) +
                             " ranks): a peer wrote a broken flag word");
  out.last_initiator = static_cast<int>(last) - 1;
  const int flushed = min_word(flags, bitmap_words_ + 2, "lowest flushing rank");
  const int ran = min_word(flags, bitmap_words_ + 3, "lowest running rank");
  if (flushed < 0 && ran < 0)
    fail(Errc::protocol, "the round's flush words name no rank: a peer wrote a broken flag word");
  if (flushed >= 0 && ran >= 0) out.mixed = std::make_pair(flushed, ran);
  return out;
}

void reduce_vector(pcoll_dtype_t dtype, pcoll_op_t op, const RoundFlags& flags, std::size_t count, std::byte* acc,
                   const std::byte* in, std::size_t first, std::size_t n) {
  const std::size_t data = first < count ? std::min(n, count - first) : 0;
  if (data > 0) reduce_into(dtype, op, acc, in, data);
  if (data < n) {
    const std::size_t offset = data * flags.word_bytes();
    flags.combine(acc + offset, in + offset, first + data - count, n - data);
  }
}

}  // namespace pcoll
