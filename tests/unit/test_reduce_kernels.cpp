// Unit tests of the element types and reduction kernels (lib/collectives/dtype, reduce_kernels):
// every dtype x op against a scalar reference written independently of the kernels,
// float16 / bfloat16 conversions, the bitwise commutativity the engine relies on, and
// copy_bytes (support/copy.hpp), through which conversions of same-size types copy.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <collectives/dtype.hpp>
#include <collectives/reduce_kernels.hpp>
#include <support/copy.hpp>
#include <support/error.hpp>

using namespace pcoll;

namespace {

constexpr pcoll_dtype_t kAllDtypes[] = {PCOLL_FLOAT32, PCOLL_FLOAT64,  PCOLL_INT32,
                                        PCOLL_INT64,   PCOLL_BFLOAT16, PCOLL_FLOAT16};
constexpr pcoll_op_t kAllOps[] = {PCOLL_OP_SUM, PCOLL_OP_AVG, PCOLL_OP_MIN, PCOLL_OP_MAX};
// Around the kernels' internal block length (16) and beyond, to cover the scalar tails.
constexpr std::size_t kCounts[] = {0, 1, 15, 16, 17, 33, 1000};

std::uint32_t bits_of(float f) { return std::bit_cast<std::uint32_t>(f); }
std::uint64_t bits_of(double d) { return std::bit_cast<std::uint64_t>(d); }

template <class F>
F quiet_nan() {
  if constexpr (sizeof(F) == 4) return std::bit_cast<F>(std::uint32_t{0x7fc00000u});
  else return std::bit_cast<F>(std::uint64_t{0x7ff8000000000000u});
}

// --- scalar references, written as plainly as possible ---------------------------------

template <class F>
F ref_float(pcoll_op_t op, F a, F b) {
  if (op == PCOLL_OP_SUM || op == PCOLL_OP_AVG) {
    const F sum = a + b;
    return std::isnan(sum) ? quiet_nan<F>() : sum;
  }
  if (std::isnan(a) || std::isnan(b)) return quiet_nan<F>();
  if (a == 0 && b == 0) {  // -0 < +0
    const bool pick_negative = op == PCOLL_OP_MIN;
    if (std::signbit(a) == pick_negative) return a;
    return b;
  }
  if (op == PCOLL_OP_MIN) return a < b ? a : b;
  return a > b ? a : b;
}

template <class I>
I ref_int(pcoll_op_t op, I a, I b) {
  if (op == PCOLL_OP_SUM || op == PCOLL_OP_AVG) {
    // Two's complement wrap, spelled out: add the magnitudes as unsigned modulo 2^N.
    using U = std::make_unsigned_t<I>;
    const U sum = static_cast<U>(a) + static_cast<U>(b);
    return static_cast<I>(sum);  // modular since C++20
  }
  if (op == PCOLL_OP_MIN) return std::min(a, b);
  return std::max(a, b);
}

// Values that stress the rules: signed zeros, infinities, NaNs with payloads, subnormals.
template <class F>
std::vector<F> special_floats() {
  using L = std::numeric_limits<F>;
  std::vector<F> v = {F(0),        -F(0),          F(1),           F(-1),         F(0.5),
                      L::infinity(), -L::infinity(), L::quiet_NaN(), -L::quiet_NaN(), L::denorm_min(),
                      -L::denorm_min(), L::min(),    L::max(),        L::lowest(),   F(3.25)};
  if constexpr (sizeof(F) == 4) {
    v.push_back(std::bit_cast<F>(std::uint32_t{0x7fc00123u}));  // quiet NaN with payload
    v.push_back(std::bit_cast<F>(std::uint32_t{0xff800001u}));  // signalling NaN
  } else {
    v.push_back(std::bit_cast<F>(std::uint64_t{0x7ff8000000000123u}));
    v.push_back(std::bit_cast<F>(std::uint64_t{0xfff0000000000001u}));
  }
  return v;
}

template <class F>
std::vector<F> random_floats(std::size_t count, std::mt19937_64& rng) {
  std::uniform_real_distribution<F> dist(F(-100), F(100));
  const std::vector<F> specials = special_floats<F>();
  std::vector<F> v(count);
  for (std::size_t i = 0; i < count; ++i) {
    v[i] = (rng() % 8 == 0) ? specials[rng() % specials.size()] : dist(rng);
  }
  return v;
}

template <class I>
std::vector<I> random_ints(std::size_t count, std::mt19937_64& rng) {
  std::vector<I> v(count);
  for (auto& x : v) x = static_cast<I>(rng());  // full range, so sums overflow
  return v;
}

const std::byte* bytes(const void* p) { return static_cast<const std::byte*>(p); }
std::byte* bytes(void* p) { return static_cast<std::byte*>(p); }

template <class F>
void check_float_kernel(pcoll_dtype_t dtype, pcoll_op_t op, std::size_t count, std::mt19937_64& rng) {
  std::vector<F> acc = random_floats<F>(count, rng);
  const std::vector<F> in = random_floats<F>(count, rng);
  std::vector<F> expected(count);
  for (std::size_t i = 0; i < count; ++i) expected[i] = ref_float(op, acc[i], in[i]);
  reduce_into(dtype, op, bytes(acc.data()), bytes(in.data()), count);
  for (std::size_t i = 0; i < count; ++i) {
    INFO("element " << i << " of " << count);
    CHECK(bits_of(acc[i]) == bits_of(expected[i]));
  }
}

template <class I>
void check_int_kernel(pcoll_dtype_t dtype, pcoll_op_t op, std::size_t count, std::mt19937_64& rng) {
  std::vector<I> acc = random_ints<I>(count, rng);
  const std::vector<I> in = random_ints<I>(count, rng);
  std::vector<I> expected(count);
  for (std::size_t i = 0; i < count; ++i) expected[i] = ref_int(op, acc[i], in[i]);
  reduce_into(dtype, op, bytes(acc.data()), bytes(in.data()), count);
  CHECK(acc == expected);
}

// 16-bit dtypes: user data is widened to float32, reduced there.
void check_16bit_kernel(pcoll_dtype_t dtype, pcoll_op_t op, std::size_t count, std::mt19937_64& rng) {
  const auto widen = [&](std::uint16_t h) {
    return dtype == PCOLL_FLOAT16 ? half_bits_to_float(h) : bfloat16_bits_to_float(h);
  };
  std::vector<std::uint16_t> user_a(count), user_b(count);
  for (auto& h : user_a) h = static_cast<std::uint16_t>(rng());
  for (auto& h : user_b) h = static_cast<std::uint16_t>(rng());
  std::vector<float> acc_a(count), acc_b(count);
  to_accumulator(dtype, user_a.data(), bytes(acc_a.data()), count);
  to_accumulator(dtype, user_b.data(), bytes(acc_b.data()), count);
  std::vector<float> folded = acc_a;
  reduce_into(dtype, op, bytes(acc_a.data()), bytes(acc_b.data()), count);
  reduce_user_into(dtype, op, bytes(folded.data()), user_b.data(), count);
  for (std::size_t i = 0; i < count; ++i) {
    const float expected = ref_float(op, widen(user_a[i]), widen(user_b[i]));
    INFO("element " << i << " of " << count);
    CHECK(bits_of(acc_a[i]) == bits_of(expected));
    CHECK(bits_of(folded[i]) == bits_of(expected));
  }
}

// Reference float -> 16-bit rounding: pick the nearer of the two neighbouring encodings
// by exact distance in double, ties to the even encoding. `next_value` of the largest
// finite encoding is the power of two just above it, so overflow rounds as IEEE says.
template <class Decode>
std::uint16_t ref_round(float f, std::uint16_t largest_finite, double above_largest,
                        std::uint16_t inf_bits, Decode decode) {
  const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (std::isinf(a)) return static_cast<std::uint16_t>(sign | inf_bits);
  // Largest encoding whose value is <= a (encodings of positive values are monotonic).
  std::uint32_t lo = 0, hi = largest_finite;
  if (a >= decode(largest_finite)) {
    lo = largest_finite;
  } else {
    while (lo < hi) {
      const std::uint32_t mid = (lo + hi + 1) / 2;
      if (decode(static_cast<std::uint16_t>(mid)) <= a) lo = mid;
      else hi = mid - 1;
    }
  }
  const double below = decode(static_cast<std::uint16_t>(lo));
  const double above = lo == largest_finite ? above_largest : decode(static_cast<std::uint16_t>(lo + 1));
  std::uint32_t pick;
  if (a - below < above - a) pick = lo;
  else if (a - below > above - a) pick = lo + 1;
  else pick = (lo % 2 == 0) ? lo : lo + 1;
  if (pick > largest_finite) pick = inf_bits;
  return static_cast<std::uint16_t>(sign | pick);
}

double decode_half(std::uint16_t h) { return static_cast<double>(half_bits_to_float(h)); }
double decode_bf16(std::uint16_t b) { return static_cast<double>(bfloat16_bits_to_float(b)); }

std::uint16_t ref_half(float f) { return ref_round(f, 0x7bff, 65536.0, 0x7c00, decode_half); }
std::uint16_t ref_bf16(float f) { return ref_round(f, 0x7f7f, std::ldexp(1.0, 128), 0x7f80, decode_bf16); }

// Floats next to every 16-bit encoding: the value, the midpoints to its neighbours and
// one float ulp either side of them, plus random bit patterns.
std::vector<float> rounding_probes(double (*decode)(std::uint16_t), std::uint16_t largest_finite,
                                   double above_largest) {
  std::vector<float> probes;
  for (std::uint32_t h = 0; h <= largest_finite; ++h) {
    const double v = decode(static_cast<std::uint16_t>(h));
    const double next = h == largest_finite ? above_largest : decode(static_cast<std::uint16_t>(h + 1));
    const auto mid = static_cast<float>((v + next) / 2);  // exact: float has the bits
    for (const float p : {static_cast<float>(v), mid, std::nextafter(mid, 0.0f),
                          std::nextafter(mid, std::numeric_limits<float>::infinity())}) {
      probes.push_back(p);
      probes.push_back(-p);
    }
  }
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
    if (!std::isnan(f)) probes.push_back(f);
  }
  return probes;
}

}  // namespace

TEST_CASE("every dtype x op matches the scalar reference") {
  std::mt19937_64 rng(42);
  for (const pcoll_op_t op : kAllOps) {
    for (const std::size_t count : kCounts) {
      CAPTURE(op_name(op));
      CAPTURE(count);
      check_float_kernel<float>(PCOLL_FLOAT32, op, count, rng);
      check_float_kernel<double>(PCOLL_FLOAT64, op, count, rng);
      check_int_kernel<std::int32_t>(PCOLL_INT32, op, count, rng);
      check_int_kernel<std::int64_t>(PCOLL_INT64, op, count, rng);
      check_16bit_kernel(PCOLL_FLOAT16, op, count, rng);
      check_16bit_kernel(PCOLL_BFLOAT16, op, count, rng);
    }
  }
}

TEST_CASE("16-bit types accumulate in float32, the others in themselves") {
  CHECK(wire_element_bytes(PCOLL_FLOAT16) == 4);
  CHECK(wire_element_bytes(PCOLL_BFLOAT16) == 4);
  CHECK(accumulation_dtype(PCOLL_FLOAT16) == PCOLL_FLOAT32);
  CHECK(accumulation_dtype(PCOLL_BFLOAT16) == PCOLL_FLOAT32);
  CHECK(element_bytes(PCOLL_FLOAT16) == 2);
  CHECK(element_bytes(PCOLL_BFLOAT16) == 2);
  for (const pcoll_dtype_t d : {PCOLL_FLOAT32, PCOLL_FLOAT64, PCOLL_INT32, PCOLL_INT64}) {
    CHECK(accumulation_dtype(d) == d);
    CHECK(wire_element_bytes(d) == element_bytes(d));
  }
}

TEST_CASE("every op is bitwise commutative, NaN and signed zeros included") {
  const auto check_pairs = [](auto zero, pcoll_dtype_t dtype) {
    using F = decltype(zero);
    const std::vector<F> values = special_floats<F>();
    for (const pcoll_op_t op : kAllOps) {
      for (const F a : values) {
        for (const F b : values) {
          F ab = a, ba = b;
          reduce_into(dtype, op, bytes(&ab), bytes(&b), 1);
          reduce_into(dtype, op, bytes(&ba), bytes(&a), 1);
          INFO(op_name(op) << " a=" << a << " b=" << b);
          CHECK(bits_of(ab) == bits_of(ba));
        }
      }
    }
  };
  check_pairs(0.0f, PCOLL_FLOAT32);
  check_pairs(0.0, PCOLL_FLOAT64);
  check_pairs(0.0f, PCOLL_FLOAT16);  // accumulates in float32
}

TEST_CASE("NaN propagates as the canonical quiet NaN and -0.0 < +0.0") {
  const float nan_payload = std::bit_cast<float>(std::uint32_t{0xffc00042u});
  for (const pcoll_op_t op : kAllOps) {
    float acc = 1.0f;
    reduce_into(PCOLL_FLOAT32, op, bytes(&acc), bytes(&nan_payload), 1);
    CHECK(bits_of(acc) == 0x7fc00000u);
  }
  float acc = 0.0f, in = -0.0f;
  reduce_into(PCOLL_FLOAT32, PCOLL_OP_MIN, bytes(&acc), bytes(&in), 1);
  CHECK(bits_of(acc) == bits_of(-0.0f));
  acc = -0.0f;
  in = 0.0f;
  reduce_into(PCOLL_FLOAT32, PCOLL_OP_MAX, bytes(&acc), bytes(&in), 1);
  CHECK(bits_of(acc) == bits_of(0.0f));
  double dacc = -0.0, din = 0.0;
  reduce_into(PCOLL_FLOAT64, PCOLL_OP_MIN, bytes(&dacc), bytes(&din), 1);
  CHECK(bits_of(dacc) == bits_of(-0.0));
  // The canonical NaN survives narrowing to the 16-bit types as their canonical NaN.
  const float canonical = std::bit_cast<float>(std::uint32_t{0x7fc00000u});
  CHECK(float_to_half_bits(canonical) == 0x7e00);
  CHECK(float_to_bfloat16_bits(canonical) == 0x7fc0);
}

TEST_CASE("integer sum wraps in two's complement") {
  std::int32_t a32 = std::numeric_limits<std::int32_t>::max(), b32 = 1;
  reduce_into(PCOLL_INT32, PCOLL_OP_SUM, bytes(&a32), bytes(&b32), 1);
  CHECK(a32 == std::numeric_limits<std::int32_t>::min());
  std::int64_t a64 = std::numeric_limits<std::int64_t>::min(), b64 = -1;
  reduce_into(PCOLL_INT64, PCOLL_OP_SUM, bytes(&a64), bytes(&b64), 1);
  CHECK(a64 == std::numeric_limits<std::int64_t>::max());
}

TEST_CASE("avg reduces like sum and divides by P once, at the end") {
  const int ranks = 3;
  {
    const std::vector<float> acc = {3.0f, 1.0f, -7.5f, std::numeric_limits<float>::infinity()};
    std::vector<float> out(acc.size());
    from_accumulator(PCOLL_FLOAT32, PCOLL_OP_AVG, ranks, bytes(acc.data()), out.data(), acc.size());
    for (std::size_t i = 0; i < acc.size(); ++i) CHECK(bits_of(out[i]) == bits_of(acc[i] / 3.0f));
  }
  {
    const std::vector<double> acc = {3.0, 1.0, -7.5};
    std::vector<double> out(acc.size());
    from_accumulator(PCOLL_FLOAT64, PCOLL_OP_AVG, ranks, bytes(acc.data()), out.data(), acc.size());
    for (std::size_t i = 0; i < acc.size(); ++i) CHECK(bits_of(out[i]) == bits_of(acc[i] / 3.0));
  }
  {
    const std::vector<std::int32_t> acc = {7, -7, 3, 0};
    std::vector<std::int32_t> out(acc.size());
    from_accumulator(PCOLL_INT32, PCOLL_OP_AVG, ranks, bytes(acc.data()), out.data(), acc.size());
    CHECK(out == std::vector<std::int32_t>{2, -2, 1, 0});  // truncating division
  }
  {
    const std::vector<std::int64_t> acc = {7, -7, std::numeric_limits<std::int64_t>::min()};
    std::vector<std::int64_t> out(acc.size());
    from_accumulator(PCOLL_INT64, PCOLL_OP_AVG, ranks, bytes(acc.data()), out.data(), acc.size());
    CHECK(out == std::vector<std::int64_t>{2, -2, std::numeric_limits<std::int64_t>::min() / 3});
  }
  for (const pcoll_dtype_t d : {PCOLL_FLOAT16, PCOLL_BFLOAT16}) {
    const std::vector<float> acc = {3.0f, 1.0f, -7.5f};
    std::vector<std::uint16_t> out(acc.size());
    from_accumulator(d, PCOLL_OP_AVG, ranks, bytes(acc.data()), out.data(), acc.size());
    for (std::size_t i = 0; i < acc.size(); ++i) {
      const float q = acc[i] / 3.0f;
      CHECK(out[i] == (d == PCOLL_FLOAT16 ? float_to_half_bits(q) : float_to_bfloat16_bits(q)));
    }
  }
  // Every other op ignores P.
  const std::vector<float> acc = {3.0f};
  float out = 0;
  from_accumulator(PCOLL_FLOAT32, PCOLL_OP_SUM, ranks, bytes(acc.data()), &out, 1);
  CHECK(out == 3.0f);
  CHECK_THROWS_AS(from_accumulator(PCOLL_FLOAT32, PCOLL_OP_AVG, 0, bytes(acc.data()), &out, 1), Error);
}

TEST_CASE("to_accumulator then from_accumulator is exact for every dtype") {
  std::mt19937_64 rng(3);
  for (const pcoll_dtype_t d : kAllDtypes) {
    CAPTURE(dtype_name(d));
    const std::size_t count = 1000;
    std::vector<std::byte> user(count * element_bytes(d));
    for (auto& b : user) b = static_cast<std::byte>(rng());
    if (d == PCOLL_FLOAT16 || d == PCOLL_BFLOAT16) {
      // Signalling NaNs come back quietened (that is what the conversion must do); keep
      // this case to non-NaN encodings, NaNs are covered by the conversion tests.
      auto* h = reinterpret_cast<std::uint16_t*>(user.data());
      for (std::size_t i = 0; i < count; ++i) {
        const std::uint16_t exponent_mask = d == PCOLL_FLOAT16 ? 0x7c00 : 0x7f80;
        if ((h[i] & exponent_mask) == exponent_mask) h[i] = static_cast<std::uint16_t>(h[i] & 0x8000u);
      }
    }
    std::vector<std::byte> acc(count * wire_element_bytes(d));
    std::vector<std::byte> back(user.size());
    to_accumulator(d, user.data(), acc.data(), count);
    from_accumulator(d, PCOLL_OP_SUM, 4, acc.data(), back.data(), count);
    CHECK(std::memcmp(user.data(), back.data(), user.size()) == 0);
  }
}

TEST_CASE("float16 conversion round-trips every binary16 encoding") {
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    const float f = half_bits_to_float(bits);
    const bool is_nan = (bits & 0x7c00) == 0x7c00 && (bits & 0x3ff) != 0;
    CAPTURE(h);
    if (is_nan) {
      CHECK(std::isnan(f));
      CHECK(float_to_half_bits(f) == (bits | 0x0200));  // quietened, payload kept
    } else {
      CHECK(float_to_half_bits(f) == bits);
      // Independent decode: (-1)^s * 2^(e-15) * 1.m, or 2^-14 * 0.m for subnormals.
      const int e = (bits >> 10) & 0x1f;
      const int m = bits & 0x3ff;
      double v = e == 0 ? std::ldexp(m, -24) : e == 31 ? INFINITY : std::ldexp(1024 + m, e - 25);
      if (bits & 0x8000) v = -v;
      CHECK(static_cast<double>(f) == v);
      CHECK(std::signbit(f) == ((bits & 0x8000) != 0));
    }
  }
}

TEST_CASE("float16 rounding is to nearest even, with overflow to inf and subnormals") {
  for (const float f : rounding_probes(decode_half, 0x7bff, 65536.0)) {
    CAPTURE(f);
    REQUIRE(float_to_half_bits(f) == ref_half(f));
  }
  CHECK(float_to_half_bits(65519.996f) == 0x7bff);
  CHECK(float_to_half_bits(65520.0f) == 0x7c00);
  CHECK(float_to_half_bits(std::ldexp(1.0f, -25)) == 0x0000);             // tie to even: zero
  CHECK(float_to_half_bits(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
  CHECK(float_to_half_bits(std::ldexp(3.0f, -25)) == 0x0002);              // 1.5 ulp -> 2
  CHECK(float_to_half_bits(-std::numeric_limits<float>::denorm_min()) == 0x8000);
  CHECK(float_to_half_bits(std::bit_cast<float>(std::uint32_t{0x7f800001u})) == 0x7e00);
  CHECK(float_to_half_bits(-std::numeric_limits<float>::infinity()) == 0xfc00);
}

TEST_CASE("bfloat16 conversion round-trips every encoding and rounds to nearest even") {
  for (std::uint32_t b = 0; b <= 0xffff; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const bool is_nan = (bits & 0x7f80) == 0x7f80 && (bits & 0x7f) != 0;
    CAPTURE(b);
    CHECK(float_to_bfloat16_bits(bfloat16_bits_to_float(bits)) == (is_nan ? (bits | 0x40) : bits));
  }
  for (const float f : rounding_probes(decode_bf16, 0x7f7f, std::ldexp(1.0, 128))) {
    CAPTURE(f);
    REQUIRE(float_to_bfloat16_bits(f) == ref_bf16(f));
  }
  // A NaN whose payload is only in the low half must stay NaN, not become inf.
  CHECK(float_to_bfloat16_bits(std::bit_cast<float>(std::uint32_t{0x7f800001u})) == 0x7fc0);
  CHECK(float_to_bfloat16_bits(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(float_to_bfloat16_bits(std::numeric_limits<float>::denorm_min()) == 0x0000);
}

TEST_CASE("fill_identity leaves any value unchanged under its op") {
  std::mt19937_64 rng(5);
  for (const pcoll_op_t op : kAllOps) {
    CAPTURE(op_name(op));
    {
      std::vector<float> values = special_floats<float>();
      std::erase_if(values, [](float v) { return std::isnan(v); });  // NaN becomes canonical
      std::vector<float> acc(values.size());
      fill_identity(PCOLL_FLOAT32, op, bytes(acc.data()), acc.size());
      reduce_into(PCOLL_FLOAT32, op, bytes(acc.data()), bytes(values.data()), acc.size());
      for (std::size_t i = 0; i < acc.size(); ++i) CHECK(bits_of(acc[i]) == bits_of(values[i]));
    }
    {
      std::vector<double> values = special_floats<double>();
      std::erase_if(values, [](double v) { return std::isnan(v); });
      std::vector<double> acc(values.size());
      fill_identity(PCOLL_FLOAT64, op, bytes(acc.data()), acc.size());
      reduce_into(PCOLL_FLOAT64, op, bytes(acc.data()), bytes(values.data()), acc.size());
      for (std::size_t i = 0; i < acc.size(); ++i) CHECK(bits_of(acc[i]) == bits_of(values[i]));
    }
    {
      std::vector<std::int64_t> values = random_ints<std::int64_t>(100, rng);
      values.push_back(std::numeric_limits<std::int64_t>::min());
      values.push_back(std::numeric_limits<std::int64_t>::max());
      std::vector<std::int64_t> acc(values.size());
      fill_identity(PCOLL_INT64, op, bytes(acc.data()), acc.size());
      reduce_into(PCOLL_INT64, op, bytes(acc.data()), bytes(values.data()), acc.size());
      CHECK(acc == values);
    }
    {
      std::vector<std::int32_t> values = random_ints<std::int32_t>(100, rng);
      std::vector<std::int32_t> acc(values.size());
      fill_identity(PCOLL_INT32, op, bytes(acc.data()), acc.size());
      reduce_into(PCOLL_INT32, op, bytes(acc.data()), bytes(values.data()), acc.size());
      CHECK(acc == values);
    }
    {
      std::vector<std::uint16_t> user(100);
      for (auto& h : user) h = static_cast<std::uint16_t>(rng() & 0x7bff);  // finite halves
      std::vector<float> acc(user.size());
      std::vector<std::uint16_t> back(user.size());
      fill_identity(PCOLL_FLOAT16, op, bytes(acc.data()), acc.size());
      reduce_user_into(PCOLL_FLOAT16, op, bytes(acc.data()), user.data(), acc.size());
      from_accumulator(PCOLL_FLOAT16, op == PCOLL_OP_AVG ? PCOLL_OP_SUM : op, 1, bytes(acc.data()),
                       back.data(), acc.size());
      CHECK(back == user);
    }
  }
}

TEST_CASE("add_into folds late user data into the carry") {
  std::vector<float> carry = {1.0f, -2.0f, 0.5f};
  const std::vector<std::uint16_t> late = {float_to_half_bits(1.0f), float_to_half_bits(2.0f),
                                           float_to_half_bits(0.25f)};
  add_into(PCOLL_FLOAT16, bytes(carry.data()), late.data(), carry.size());
  CHECK(carry == std::vector<float>{2.0f, 0.0f, 0.75f});
  std::vector<std::int64_t> icarry = {std::numeric_limits<std::int64_t>::max(), 5};
  const std::vector<std::int64_t> ilate = {1, -6};
  add_into(PCOLL_INT64, bytes(icarry.data()), ilate.data(), icarry.size());
  CHECK(icarry == std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::min(), -1});
}

TEST_CASE("unknown dtype and op values are rejected with an error") {
  float a = 0, b = 0;
  const auto bad_dtype = static_cast<pcoll_dtype_t>(17);
  const auto bad_op = static_cast<pcoll_op_t>(-1);
  CHECK_THROWS_AS(reduce_into(bad_dtype, PCOLL_OP_SUM, bytes(&a), bytes(&b), 1), Error);
  CHECK_THROWS_AS(reduce_into(PCOLL_FLOAT32, bad_op, bytes(&a), bytes(&b), 1), Error);
  CHECK_THROWS_AS(to_accumulator(bad_dtype, &a, bytes(&b), 1), Error);
  CHECK_THROWS_AS(from_accumulator(PCOLL_FLOAT32, bad_op, 1, bytes(&a), &b, 1), Error);
  CHECK_THROWS_AS(wire_element_bytes(bad_dtype), Error);
  CHECK_THROWS_AS(fill_identity(PCOLL_INT32, bad_op, bytes(&a), 1), Error);
  try {
    check_dtype(bad_dtype);
  } catch (const Error& e) {
    CHECK(e.code() == Errc::invalid_argument);
    CHECK(std::string(e.what()).find("17") != std::string::npos);
  }
}

// copy_bytes (support/copy.hpp) takes its own loop when source and destination sit at
// different offsets within a cache line: every offset pair, sizes around its threshold and
// around whole lines, against the bytes themselves; nothing outside the range is touched.
TEST_CASE("copy_bytes copies exactly, at every relative alignment and length") {
  std::mt19937 random(7);
  std::vector<unsigned char> source(8192 + 128);
  for (auto& b : source) b = static_cast<unsigned char>(random());
  for (const size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{1023}, size_t{1024}, size_t{1025},
                             size_t{4096 + 17}, size_t{8192}}) {
    for (size_t from = 0; from < 64; from += 3) {
      for (size_t to = 0; to < 64; to += 5) {
        std::vector<unsigned char> target(8192 + 256, 0xa5);
        copy_bytes(target.data() + 64 + to, source.data() + from, bytes);
        CAPTURE(bytes);
        CAPTURE(from);
        CAPTURE(to);
        REQUIRE(std::memcmp(target.data() + 64 + to, source.data() + from, bytes) == 0);
        for (size_t i = 0; i < 64 + to; ++i) REQUIRE(target[i] == 0xa5);
        for (size_t i = 64 + to + bytes; i < target.size(); ++i) REQUIRE(target[i] == 0xa5);
      }
    }
  }
}
