// Unit tests of the round's flag words (lib/collectives/round_flags.cpp): for every P and
// both word sizes, however the plan pairs the ranks' contributions, every rank reads the
// same fresh set, the lowest initiator and whether flushes met runs; the data before the
// flags is reduced with the op; and a word no rank could have written is a broken peer.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <collectives/round_flags.hpp>
#include <support/error.hpp>

using namespace pcoll;

namespace {

struct Call {
  bool fresh, initiated, flush;
};

std::vector<std::byte> contribution(const RoundFlags& flags, int rank, const Call& call) {
  std::vector<std::byte> words(flags.words() * flags.word_bytes());
  flags.write(words.data(), rank, call.fresh, call.initiated, call.flush);
  return words;
}

// Combines the contributions pairwise in a random order, as some plan might: the result
// must not depend on it.
std::vector<std::byte> combined(const RoundFlags& flags, std::vector<std::vector<std::byte>> parts, std::mt19937& rng) {
  while (parts.size() > 1) {
    std::shuffle(parts.begin(), parts.end(), rng);
    std::vector<std::byte> in = std::move(parts.back());
    parts.pop_back();
    // Some plans combine a range of the words at a time (Rabenseifner's halves, a slice).
    const std::size_t split = std::uniform_int_distribution<std::size_t>(0, flags.words())(rng);
    const std::size_t bytes = flags.word_bytes();
    flags.combine(parts.back().data(), in.data(), 0, split);
    flags.combine(parts.back().data() + split * bytes, in.data() + split * bytes, split, flags.words() - split);
  }
  return parts.front();
}

bool fresh_in(const std::vector<uint64_t>& mask, int r) { return ((mask[static_cast<std::size_t>(r) / 64] >> (r % 64)) & 1) != 0; }

}  // namespace

TEST_CASE("the flags take ceil(P / bits) + 4 words of the accumulation element's size") {
  CHECK(RoundFlags(1, 4).words() == 5);
  CHECK(RoundFlags(32, 4).words() == 5);
  CHECK(RoundFlags(33, 4).words() == 6);
  CHECK(RoundFlags(64, 8).words() == 5);
  CHECK(RoundFlags(65, 8).words() == 6);
  CHECK(RoundFlags(16384, 4).words() == 16384 / 32 + 4);
  CHECK(RoundFlags(16384, 8).words() == 16384 / 64 + 4);
}

TEST_CASE("every pairing of the contributions reads the fresh set, the initiators and a mixed flush") {
  std::mt19937 rng(42);
  for (const std::size_t word_bytes : {std::size_t{4}, std::size_t{8}}) {
    for (const int ranks : {1, 2, 3, 4, 31, 32, 33, 63, 64, 65, 100, 130, 1000}) {
      const RoundFlags flags(ranks, word_bytes);
      for (int trial = 0; trial < 8; ++trial) {
        CAPTURE(word_bytes);
        CAPTURE(ranks);
        CAPTURE(trial);
        std::vector<Call> calls(static_cast<std::size_t>(ranks));
        std::bernoulli_distribution coin(trial % 2 == 0 ? 0.5 : 0.05);
        // Trials 0-3: nobody flushes; 4-5: everybody; 6-7: some ranks do.
        for (auto& c : calls) c = {coin(rng), coin(rng), trial >= 6 ? coin(rng) : trial >= 4};
        std::vector<std::vector<std::byte>> parts;
        for (int r = 0; r < ranks; ++r) parts.push_back(contribution(flags, r, calls[static_cast<std::size_t>(r)]));
        const RoundFlags::Read read = flags.read(combined(flags, parts, rng).data());

        int fresh = 0, initiator = -1, last_initiator = -1, flushed = -1, ran = -1;
        for (int r = 0; r < ranks; ++r) {
          const Call& c = calls[static_cast<std::size_t>(r)];
          CHECK(fresh_in(read.fresh_mask, r) == c.fresh);
          fresh += c.fresh;
          if (c.initiated && initiator < 0) initiator = r;
          if (c.initiated) last_initiator = r;
          if (c.flush && flushed < 0) flushed = r;
          if (!c.flush && ran < 0) ran = r;
        }
        CHECK(read.fresh_mask.size() == (static_cast<std::size_t>(ranks) + 63) / 64);
        CHECK(read.fresh == fresh);
        CHECK(read.initiator == initiator);
        CHECK(read.last_initiator == last_initiator);
        CHECK(read.mixed.has_value() == (flushed >= 0 && ran >= 0));
        if (read.mixed) {
          CHECK(read.mixed->first == flushed);
          CHECK(read.mixed->second == ran);
        }
      }
    }
  }
}

TEST_CASE("a range of the vector reduces its data with the op and combines its flag words") {
  const int ranks = 40;  // two bitmap words of 32 bits
  const RoundFlags flags(ranks, 4);
  const std::size_t count = 5, total = count + flags.words();
  auto vector_of = [&](int rank, float value, bool fresh) {
    std::vector<std::byte> v(total * 4);
    for (std::size_t i = 0; i < count; ++i) std::memcpy(v.data() + 4 * i, &value, 4);
    flags.write(v.data() + 4 * count, rank, fresh, rank == 39, false);
    return v;
  };
  // Every split of the vector into two ranges, one straddling the data and the flags.
  for (std::size_t split = 0; split <= total; ++split) {
    CAPTURE(split);
    std::vector<std::byte> acc = vector_of(3, 1.5f, true), in = vector_of(39, 2.25f, true);
    reduce_vector(PCOLL_FLOAT32, PCOLL_OP_SUM, flags, count, acc.data(), in.data(), 0, split);
    reduce_vector(PCOLL_FLOAT32, PCOLL_OP_SUM, flags, count, acc.data() + 4 * split, in.data() + 4 * split, split,
                  total - split);
    for (std::size_t i = 0; i < count; ++i) {
      float v;
      std::memcpy(&v, acc.data() + 4 * i, 4);
      CHECK(v == 3.75f);
    }
    const RoundFlags::Read read = flags.read(acc.data() + 4 * count);
    CHECK(read.fresh == 2);
    CHECK(fresh_in(read.fresh_mask, 3));
    CHECK(fresh_in(read.fresh_mask, 39));
    CHECK(read.initiator == 39);
    CHECK(read.last_initiator == 39);
    CHECK_FALSE(read.mixed.has_value());
  }
}

TEST_CASE("a flag word no rank could have written is a broken peer") {
  const RoundFlags flags(40, 4);
  auto expect_protocol = [&](const std::vector<std::byte>& words, const std::string& names) {
    try {
      (void)flags.read(words.data());
      FAIL("read accepted a broken flag word");
    } catch (const Error& e) {
      CHECK(e.code() == Errc::protocol);
      CHECK(std::string(e.what()).find(names) != std::string::npos);
    }
  };
  std::vector<std::byte> words(flags.words() * 4);
  flags.write(words.data(), 7, true, false, false);
  CHECK(flags.read(words.data()).fresh == 1);

  std::vector<std::byte> bit = words;
  const uint32_t high = uint32_t{1} << (40 - 32);  // rank 40 in the second bitmap word
  std::memcpy(bit.data() + 4, &high, 4);
  expect_protocol(bit, "fresh bitmap");

  std::vector<std::byte> initiator = words;
  const uint32_t rank40 = 40;
  std::memcpy(initiator.data() + 4 * 2, &rank40, 4);
  expect_protocol(initiator, "initiator");

  // Words: bitmap 0-1, initiator 2, last initiator 3, lowest flushing 4, lowest running 5.
  std::vector<std::byte> last = words;
  const uint32_t rank3 = 3 + 1;  // a last initiator without a lowest one
  std::memcpy(last.data() + 4 * 3, &rank3, 4);
  expect_protocol(last, "last initiator");

  std::vector<std::byte> no_call = words;
  const uint32_t none = UINT32_MAX;
  std::memcpy(no_call.data() + 4 * 5, &none, 4);  // the lowest running word: rank 7 ran
  expect_protocol(no_call, "flush words");
}
