// Elementwise reduction kernels (see reduce_kernels.hpp for the semantics).
//
// Vectorisation: each loop runs over fixed blocks of kBlockElems elements plus a scalar
// tail. GCC's -O2 cost model ("very-cheap") only vectorises loops whose trip count needs
// no epilogue, so a constant-length inner loop vectorises at -O2 as well as -O3, without
// -march flags or optimize attributes. The element operations are written as selects on
// comparisons (no branches) so that the NaN / signed-zero rules vectorise too.
#include <collectives/reduce_kernels.hpp>

#include <bit>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include <collectives/dtype.hpp>
#include <support/copy.hpp>
#include <support/error.hpp>

namespace pcoll {

namespace {

// Multiple of every vector width up to AVX-512 for 4-byte elements; semantics don't depend on it.
constexpr std::size_t kBlockElems = 16;

template <class F>
using FloatBits = std::conditional_t<sizeof(F) == 4, std::uint32_t, std::uint64_t>;

template <class F>
constexpr F canonical_nan() {
  if constexpr (sizeof(F) == 4) {
    return std::bit_cast<F>(std::uint32_t{0x7fc00000u});
  } else {
    return std::bit_cast<F>(std::uint64_t{0x7ff8000000000000u});
  }
}

// --- element operations; each is commutative bit for bit --------------------------------

struct FloatSum {
  template <class F>
  F operator()(F a, F b) const {
    const F sum = a + b;
    return sum != sum ? canonical_nan<F>() : sum;
  }
};

// Written as a chain of independent selects on F, which GCC vectorises for float and
// double alike (nested ?: get turned into branches, integer masks built from double
// compares find no SSE2 pattern):
//   ordered, unequal: the smaller (min) / larger (max) operand;
//   equal operands:   identical bits, or +0/-0, where OR of the bits picks -0 for min and
//                     AND picks +0 for max;
//   unordered:        any NaN operand gives the canonical NaN.
struct FloatMin {
  template <class F>
  F operator()(F a, F b) const {
    using U = FloatBits<F>;
    const F equal = std::bit_cast<F>(static_cast<U>(std::bit_cast<U>(a) | std::bit_cast<U>(b)));
    F result = a < b ? a : b;
    result = a == b ? equal : result;
    return std::isunordered(a, b) ? canonical_nan<F>() : result;
  }
};

struct FloatMax {
  template <class F>
  F operator()(F a, F b) const {
    using U = FloatBits<F>;
    const F equal = std::bit_cast<F>(static_cast<U>(std::bit_cast<U>(a) & std::bit_cast<U>(b)));
    F result = b < a ? a : b;
    result = a == b ? equal : result;
    return std::isunordered(a, b) ? canonical_nan<F>() : result;
  }
};

// Integer sum in unsigned arithmetic: wraps modulo 2^N without signed-overflow UB.
struct IntSum {
  template <class I>
  I operator()(I a, I b) const {
    using U = std::make_unsigned_t<I>;
    return static_cast<I>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  }
};

struct IntMin {
  template <class I>
  I operator()(I a, I b) const { return b < a ? b : a; }
};

struct IntMax {
  template <class I>
  I operator()(I a, I b) const { return a < b ? b : a; }
};

// --- element conversions user dtype <-> accumulation type -------------------------------

struct Half {
  using Storage = std::uint16_t;
  static float widen(Storage h) { return half_bits_to_float(h); }
  static Storage narrow(float f) { return float_to_half_bits(f); }
};

struct BFloat16 {
  using Storage = std::uint16_t;
  static float widen(Storage b) { return bfloat16_bits_to_float(b); }
  static Storage narrow(float f) { return float_to_bfloat16_bits(f); }
};

template <class T>
void check_aligned([[maybe_unused]] const void* pointer) {
  assert(reinterpret_cast<std::uintptr_t>(pointer) % alignof(T) == 0 &&
         "reduce kernels need buffers aligned to their element type");
}

// --- loops -------------------------------------------------------------------------------

template <class T, class Op>
void combine_loop(T* __restrict acc, const T* __restrict in, std::size_t count, Op op) {
  std::size_t i = 0;
  for (; i + kBlockElems <= count; i += kBlockElems) {
    for (std::size_t j = 0; j < kBlockElems; ++j) acc[i + j] = op(acc[i + j], in[i + j]);
  }
  for (; i < count; ++i) acc[i] = op(acc[i], in[i]);
}

template <class Conv, class Op>
void combine_widened_loop(float* __restrict acc, const typename Conv::Storage* __restrict in,
                          std::size_t count, Op op) {
  std::size_t i = 0;
  for (; i + kBlockElems <= count; i += kBlockElems) {
    for (std::size_t j = 0; j < kBlockElems; ++j) {
      acc[i + j] = op(acc[i + j], Conv::widen(in[i + j]));
    }
  }
  for (; i < count; ++i) acc[i] = op(acc[i], Conv::widen(in[i]));
}

template <class Conv>
void widen_loop(const typename Conv::Storage* __restrict in, float* __restrict out,
                std::size_t count) {
  std::size_t i = 0;
  for (; i + kBlockElems <= count; i += kBlockElems) {
    for (std::size_t j = 0; j < kBlockElems; ++j) out[i + j] = Conv::widen(in[i + j]);
  }
  for (; i < count; ++i) out[i] = Conv::widen(in[i]);
}

template <class Conv>
void narrow_loop(const float* __restrict in, typename Conv::Storage* __restrict out,
                 std::size_t count) {
  std::size_t i = 0;
  for (; i + kBlockElems <= count; i += kBlockElems) {
    for (std::size_t j = 0; j < kBlockElems; ++j) out[i + j] = Conv::narrow(in[i + j]);
  }
  for (; i < count; ++i) out[i] = Conv::narrow(in[i]);
}

// out[i] = narrow(in[i] / divisor): avg divides in float32, then rounds once more.
template <class Conv>
void narrow_divided_loop(const float* __restrict in, typename Conv::Storage* __restrict out,
                         std::size_t count, float divisor) {
  std::size_t i = 0;
  for (; i + kBlockElems <= count; i += kBlockElems) {
    for (std::size_t j = 0; j < kBlockElems; ++j) out[i + j] = Conv::narrow(in[i + j] / divisor);
  }
  for (; i < count; ++i) out[i] = Conv::narrow(in[i] / divisor);
}

template <class Conv>
void narrow(const float* in, typename Conv::Storage* out, std::size_t count, bool average,
            int ranks) {
  check_aligned<float>(in);
  check_aligned<typename Conv::Storage>(out);
  if (average) narrow_divided_loop<Conv>(in, out, count, static_cast<float>(ranks));
  else narrow_loop<Conv>(in, out, count);
}

template <class T>
void divide_loop(const T* __restrict in, T* __restrict out, std::size_t count, T divisor) {
  std::size_t i = 0;
  for (; i + kBlockElems <= count; i += kBlockElems) {
    for (std::size_t j = 0; j < kBlockElems; ++j) out[i + j] = static_cast<T>(in[i + j] / divisor);
  }
  for (; i < count; ++i) out[i] = static_cast<T>(in[i] / divisor);
}

template <class T>
void fill_loop(T* __restrict out, std::size_t count, T value) {
  for (std::size_t i = 0; i < count; ++i) out[i] = value;
}

// --- dispatch ----------------------------------------------------------------------------

template <class F>
void combine_float(pcoll_op_t op, F* acc, const F* in, std::size_t count) {
  check_aligned<F>(acc);
  check_aligned<F>(in);
  switch (op) {
    case PCOLL_OP_SUM:
    case PCOLL_OP_AVG: combine_loop(acc, in, count, FloatSum{}); return;
    case PCOLL_OP_MIN: combine_loop(acc, in, count, FloatMin{}); return;
    case PCOLL_OP_MAX: combine_loop(acc, in, count, FloatMax{}); return;
  }
  check_op(op);
}

template <class I>
void combine_int(pcoll_op_t op, I* acc, const I* in, std::size_t count) {
  check_aligned<I>(acc);
  check_aligned<I>(in);
  switch (op) {
    case PCOLL_OP_SUM:
    case PCOLL_OP_AVG: combine_loop(acc, in, count, IntSum{}); return;
    case PCOLL_OP_MIN: combine_loop(acc, in, count, IntMin{}); return;
    case PCOLL_OP_MAX: combine_loop(acc, in, count, IntMax{}); return;
  }
  check_op(op);
}

template <class Conv>
void combine_widened(pcoll_op_t op, float* acc, const typename Conv::Storage* in,
                     std::size_t count) {
  check_aligned<float>(acc);
  check_aligned<typename Conv::Storage>(in);
  switch (op) {
    case PCOLL_OP_SUM:
    case PCOLL_OP_AVG: combine_widened_loop<Conv>(acc, in, count, FloatSum{}); return;
    case PCOLL_OP_MIN: combine_widened_loop<Conv>(acc, in, count, FloatMin{}); return;
    case PCOLL_OP_MAX: combine_widened_loop<Conv>(acc, in, count, FloatMax{}); return;
  }
  check_op(op);
}

template <class T>
T* as(void* pointer) { return static_cast<T*>(pointer); }
template <class T>
const T* as(const void* pointer) { return static_cast<const T*>(pointer); }

template <class T>
void fill_identity_of(pcoll_op_t op, T* out, std::size_t count) {
  using Limits = std::numeric_limits<T>;
  switch (op) {
    case PCOLL_OP_SUM:
    case PCOLL_OP_AVG: fill_loop(out, count, std::is_floating_point_v<T> ? T(-0.0) : T(0)); return;
    case PCOLL_OP_MIN: fill_loop(out, count, Limits::has_infinity ? Limits::infinity() : Limits::max()); return;
    case PCOLL_OP_MAX: fill_loop(out, count, Limits::has_infinity ? -Limits::infinity() : Limits::lowest()); return;
  }
  check_op(op);
}

}  // namespace

void to_accumulator(pcoll_dtype_t dtype, const void* user, std::byte* acc, std::size_t count) {
  switch (dtype) {
    case PCOLL_FLOAT32:
    case PCOLL_FLOAT64:
    case PCOLL_INT32:
    case PCOLL_INT64:
      copy_bytes(acc, user, count * element_bytes(dtype));
      return;
    case PCOLL_FLOAT16: widen_loop<Half>(as<std::uint16_t>(user), as<float>(acc), count); return;
    case PCOLL_BFLOAT16: widen_loop<BFloat16>(as<std::uint16_t>(user), as<float>(acc), count); return;
  }
  check_dtype(dtype);
}

void from_accumulator(pcoll_dtype_t dtype, pcoll_op_t op, int ranks, const std::byte* acc,
                      void* user, std::size_t count) {
  check_dtype(dtype);
  check_op(op);
  if (ranks < 1) {
    invalid_argument("from_accumulator: ranks must be >= 1 (got " + std::to_string(ranks) + ")");
  }
  const bool average = op == PCOLL_OP_AVG && ranks > 1;
  switch (dtype) {
    case PCOLL_FLOAT32:
      if (average) divide_loop(as<float>(acc), as<float>(user), count, static_cast<float>(ranks));
      else copy_bytes(user, acc, count * 4);
      return;
    case PCOLL_FLOAT64:
      if (average) divide_loop(as<double>(acc), as<double>(user), count, static_cast<double>(ranks));
      else copy_bytes(user, acc, count * 8);
      return;
    case PCOLL_INT32:
      if (average) divide_loop(as<std::int32_t>(acc), as<std::int32_t>(user), count, ranks);
      else copy_bytes(user, acc, count * 4);
      return;
    case PCOLL_INT64:
      if (average) {
        divide_loop(as<std::int64_t>(acc), as<std::int64_t>(user), count,
                    static_cast<std::int64_t>(ranks));
      } else {
        copy_bytes(user, acc, count * 8);
      }
      return;
    case PCOLL_FLOAT16: narrow<Half>(as<float>(acc), as<std::uint16_t>(user), count, average, ranks); return;
    case PCOLL_BFLOAT16: narrow<BFloat16>(as<float>(acc), as<std::uint16_t>(user), count, average, ranks); return;
  }
}

void reduce_into(pcoll_dtype_t dtype, pcoll_op_t op, std::byte* acc, const std::byte* in,
                 std::size_t count) {
  switch (accumulation_dtype(dtype)) {
    case PCOLL_FLOAT32: combine_float(op, as<float>(acc), as<float>(in), count); return;
    case PCOLL_FLOAT64: combine_float(op, as<double>(acc), as<double>(in), count); return;
    case PCOLL_INT32: combine_int(op, as<std::int32_t>(acc), as<std::int32_t>(in), count); return;
    case PCOLL_INT64: combine_int(op, as<std::int64_t>(acc), as<std::int64_t>(in), count); return;
    case PCOLL_FLOAT16:
    case PCOLL_BFLOAT16: break;  // never an accumulation type
  }
  fail(Errc::internal, std::string("no accumulation kernel for ") + dtype_name(dtype));
}

void reduce_user_into(pcoll_dtype_t dtype, pcoll_op_t op, std::byte* acc, const void* user,
                      std::size_t count) {
  switch (dtype) {
    case PCOLL_FLOAT16: combine_widened<Half>(op, as<float>(acc), as<std::uint16_t>(user), count); return;
    case PCOLL_BFLOAT16: combine_widened<BFloat16>(op, as<float>(acc), as<std::uint16_t>(user), count); return;
    case PCOLL_FLOAT32:
    case PCOLL_FLOAT64:
    case PCOLL_INT32:
    case PCOLL_INT64:
      reduce_into(dtype, op, acc, static_cast<const std::byte*>(user), count);
      return;
  }
  check_dtype(dtype);
}

void add_into(pcoll_dtype_t dtype, std::byte* acc, const void* user, std::size_t count) {
  reduce_user_into(dtype, PCOLL_OP_SUM, acc, user, count);
}

void fill_identity(pcoll_dtype_t dtype, pcoll_op_t op, std::byte* acc, std::size_t count) {
  switch (accumulation_dtype(dtype)) {
    case PCOLL_FLOAT32: fill_identity_of(op, as<float>(acc), count); return;
    case PCOLL_FLOAT64: fill_identity_of(op, as<double>(acc), count); return;
    case PCOLL_INT32: fill_identity_of(op, as<std::int32_t>(acc), count); return;
    case PCOLL_INT64: fill_identity_of(op, as<std::int64_t>(acc), count); return;
    case PCOLL_FLOAT16:
    case PCOLL_BFLOAT16: break;
  }
  fail(Errc::internal, std::string("no accumulation type for ") + dtype_name(dtype));
}

}  // namespace pcoll
