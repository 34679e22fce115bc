// The flags of a round (docs/design.md, "The flags of a round"): what every rank learns
// from the round's result itself about who contributed fresh, who initiated and who
// flushed, in a few words after the data of the work buffer.
//
// A word has the accumulation element's size (4 or 8 bytes), so the flags ride in the same
// messages, slices and chunks as the data and every plan reduces them where it reduces
// the data; only the combining differs:
//   fresh bitmap      ceil(P / bits) words, bit r of the vector = rank r fresh, combined with or
//   initiator         one word, the lowest rank that initiated, combined with min
//   last initiator    one word, 1 + the highest rank that initiated, combined with max (0: none):
//                     with the lowest, a mode that allows one initiator sees any other
//   lowest flushing   one word, the lowest rank whose call was a flush, combined with min
//   lowest running    one word, the lowest rank whose call was not a flush, combined with min
// A min word that nobody set holds all ones. Or, min and max are bitwise commutative and
// associative, so every rank ends with the same words whatever order the plan combined
// them in, and no op or accumulation type can disturb them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <pcoll/pcoll.h>

namespace pcoll {

class RoundFlags {
 public:
  // word_bytes: the accumulation element's size, 4 or 8.
  RoundFlags(int ranks, std::size_t word_bytes);

  // Words after the data: ceil(P / bits) + 4.
  std::size_t words() const { return bitmap_words_ + 4; }
  std::size_t word_bytes() const { return word_bytes_; }

  // This rank's flags into `flags` (words() words): its fresh bit, and its rank in the
  // initiator word and in one of the two flush words.
  void write(std::byte* flags, int rank, bool fresh, bool initiated, bool flush) const;

  // acc[i] = combine(acc[i], in[i]) for the flag words [first, first + n).
  void combine(std::byte* acc, const std::byte* in, std::size_t first, std::size_t n) const;

  // What the combined words say. A word no rank could have written (a bit at or above P,
  // a rank at or above P in a min or max word, a flush and a run both missing) is a broken peer:
  // Error(protocol) naming the word.
  struct Read {
    std::vector<uint64_t> fresh_mask;  // ceil(P / 64) words, bit r = rank r fresh
    int fresh = 0;
    int initiator = -1;                          // the lowest rank that initiated, or -1
    int last_initiator = -1;                     // the highest rank that initiated, or -1
    std::optional<std::pair<int, int>> mixed;    // (a rank that flushed, one that ran) when both exist
  };
  Read read(const std::byte* flags) const;

 private:
  uint64_t load(const std::byte* flags, std::size_t word) const;
  void store(std::byte* flags, std::size_t word, uint64_t value) const;
  uint64_t none() const { return word_bytes_ == 8 ? UINT64_MAX : UINT32_MAX; }
  int min_word(const std::byte* flags, std::size_t word, const char* what) const;

  int ranks_;
  std::size_t word_bytes_;
  std::size_t bits_;
  std::size_t bitmap_words_;
};

// acc[i] = op(acc[i], in[i]) over elements [first, first + n) of a work vector whose first
// `count` elements are data and the rest the round's flags.
void reduce_vector(pcoll_dtype_t dtype, pcoll_op_t op, const RoundFlags& flags, std::size_t count, std::byte* acc,
                   const std::byte* in, std::size_t first, std::size_t n);

}  // namespace pcoll
