// Unit tests of the notification codec (lib/collectives/include/collectives/notification.hpp): both layouts
// carry every field they promise, within the limits they state, and widen rounds and
// agreement sequences around the receiver's own.
#include <doctest/doctest.h>

#include <cstdint>

#include <collectives/notification.hpp>
#include <support/error.hpp>

using namespace pcoll;

TEST_CASE("each kind round-trips its fields at the limits of both widths") {
  for (const unsigned bits : {64u, 32u}) {
    const NoticeCodec codec(bits);
    CAPTURE(bits);
    const uint32_t handle = codec.handle_field(codec.max_handles() - 1, 3);
    const uint32_t tag = codec.max_tags() - 1, chunk = codec.max_chunks() - 1;
    const uint32_t rank = codec.max_ranks() - 1;
    const uint64_t round = (uint64_t{1} << 40) + 12345;  // only the low round_bits travel
    for (const bool is_credit : {false, true}) {
      const uint64_t v = is_credit ? codec.credit(handle, tag, chunk, round) : codec.data(handle, tag, chunk, round);
      CHECK(codec.fits(v));
      const Notice n = codec.decode(v);
      CHECK(n.kind == (is_credit ? NoticeKind::credit : NoticeKind::data));
      CHECK(n.handle == handle);
      CHECK(n.tag == tag);
      CHECK(n.chunk == chunk);
      CHECK(codec.widen_round(n.round, round - 1) == round);
    }
    const Notice a = codec.decode(codec.activation(handle, rank, round));
    CHECK(a.kind == NoticeKind::activation);
    CHECK(a.handle == handle);
    CHECK(a.rank == rank);
    CHECK(codec.widen_round(a.round, round + 1) == round);
    for (uint32_t type = 0; type < kControlTypes; ++type) {
      const Notice c = codec.decode(codec.control(type, rank, 777));
      CHECK(c.kind == NoticeKind::control);
      CHECK(c.type == type);
      CHECK(c.rank == rank);
      CHECK(codec.widen_sequence(c.round, 776) == 777);
    }
    const Notice f = codec.decode(codec.failure(codec.unknown_rank(), rank));
    CHECK(f.kind == NoticeKind::failure);
    CHECK(f.rank == codec.unknown_rank());
    CHECK(f.sender == rank);
    const Notice g = codec.decode(codec.failure(0, rank));
    CHECK(g.rank == 0);
  }
}

TEST_CASE("a handle id is a slot and a generation, the generation telling reuses apart") {
  for (const unsigned bits : {64u, 32u}) {
    const NoticeCodec codec(bits);
    for (const uint32_t slot : {0u, 1u, codec.max_handles() - 1}) {
      for (uint32_t generation = 0; generation < 4; ++generation) {
        const uint32_t field = codec.handle_field(slot, generation);
        CHECK(codec.handle_slot(field) == slot);
        CHECK(codec.decode(codec.data(field, 0, 0, 0)).handle == field);
        if (generation > 0) CHECK(field != codec.handle_field(slot, generation - 1));
      }
      CHECK(codec.handle_field(slot, 4) == codec.handle_field(slot, 0));  // generations wrap
    }
  }
}

TEST_CASE("the 32-bit layout fits 32 bits and states its limits") {
  const NoticeCodec codec(32);
  CHECK(codec.max_handles() == 64);
  CHECK(codec.max_chunks() == 1024);
  CHECK(codec.max_tags() == 32);
  CHECK(codec.max_ranks() == 32767);
  CHECK(codec.round_bits() == 6);
  CHECK((codec.data(255, 31, 1023, ~uint64_t{0}) >> 32) == 0);
  CHECK((codec.failure(codec.unknown_rank(), 32766) >> 32) == 0);
  CHECK_FALSE(codec.fits(uint64_t{1} << 32));
  CHECK(NoticeCodec(64).fits(~uint64_t{0}));
}

TEST_CASE("a round is recovered within half its window, on both sides of the reference") {
  for (const unsigned bits : {64u, 32u}) {
    const NoticeCodec codec(bits);
    const unsigned rb = codec.round_bits();
    const int64_t half = int64_t{1} << (rb - 1);
    for (const uint64_t reference : {uint64_t{0}, uint64_t{5}, uint64_t{63}, uint64_t{64}, uint64_t{1} << 33}) {
      for (const int64_t delta : {-half, -half + 1, int64_t{-2}, int64_t{-1}, int64_t{0}, int64_t{1}, int64_t{2}, half - 1}) {
        const uint64_t round = reference + static_cast<uint64_t>(delta);
        const Notice n = codec.decode(codec.data(1, 1, 1, round));
        CAPTURE(bits); CAPTURE(reference); CAPTURE(delta);
        CHECK(codec.widen_round(n.round, reference) == round);
      }
    }
  }
}

TEST_CASE("widths other than 32 and 64 are refused") {
  CHECK_THROWS_AS(NoticeCodec(16), Error);
  CHECK_THROWS_AS(NoticeCodec(48), Error);
}
