// Element types of an allreduce: their sizes, the accumulation type each one reduces in,
// and the scalar float16 / bfloat16 <-> float32 conversions the reduce kernels use.
//
// The engine never reduces in a 16-bit type: float16 and bfloat16 data is widened to
// float32 on entry (exact), reduced and sent in float32, and rounded back once at the end
// (round to nearest even). So work buffers, landing slots and wire data all hold the
// accumulation type; wire_element_bytes() is its size.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include <pcoll/pcoll.h>

namespace pcoll {

// Size of one element as the application passes it (sendbuf / recvbuf).
std::size_t element_bytes(pcoll_dtype_t dtype);

// The type the engine reduces and sends in: FLOAT32 for the 16-bit types, else dtype.
pcoll_dtype_t accumulation_dtype(pcoll_dtype_t dtype);

// Size of one element in work buffers, landing slots and on the wire.
std::size_t wire_element_bytes(pcoll_dtype_t dtype);

const char* dtype_name(pcoll_dtype_t dtype);  // "float32", ...; "invalid" if out of range
const char* op_name(pcoll_op_t op);           // "sum", ...; "invalid" if out of range

// Throws Error(invalid_argument) naming the bad value; the C enums arrive from FFI callers
// as plain integers, so anything outside the enumerators must be rejected, not assumed.
void check_dtype(pcoll_dtype_t dtype);
void check_op(pcoll_op_t op);

// --- float16 (IEEE binary16) -------------------------------------------------------------

namespace detail {
// condition ? if_true : if_false through a bit mask. GCC turns plain ?: chains back into
// branches before vectorising ("control flow in loop"); masks keep conversion loops SIMD.
inline std::uint32_t select_bits(bool condition, std::uint32_t if_true, std::uint32_t if_false) {
  const std::uint32_t mask = 0u - static_cast<std::uint32_t>(condition);
  return (if_true & mask) | (if_false & ~mask);
}
}  // namespace detail

// Exact: every binary16 value (subnormals, infinities, NaN payloads) is a float32 value.
// Written with mask selects rather than branches so that conversion loops vectorise.
inline float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  // inf / NaN: keep the payload in the top mantissa bits.
  const std::uint32_t special = sign | 0x7f800000u | (mantissa << 13);
  // Zero or subnormal: mantissa * 2^-24, exact in float32.
  const std::uint32_t tiny = sign | std::bit_cast<std::uint32_t>(
                                        static_cast<float>(static_cast<std::int32_t>(mantissa)) * 0x1p-24f);
  // Normal: rebias the exponent from 15 to 127.
  const std::uint32_t normal = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  return std::bit_cast<float>(detail::select_bits(
      exponent == 0, tiny, detail::select_bits(exponent == 0x1fu, special, normal)));
}

// Round to nearest, ties to even; overflow goes to inf, NaN stays NaN (quietened, payload
// kept where it fits), tiny values become binary16 subnormals or signed zero.
// Branch-free (mask selects) so that conversion loops vectorise. Assumes the default FP
// rounding mode (round to nearest), as the rest of the library does.
inline std::uint16_t float_to_half_bits(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  // NaN: set the quiet bit so that a payload living only in the low bits stays NaN.
  const std::uint32_t nan = 0x7e00u | ((magnitude >> 13) & 0x3ffu);
  // Below 2^-14 the result is a subnormal (or zero) counted in units of 2^-24, which is
  // the ulp of 0.5f: adding 0.5f lets the FPU round |value| to that grid, ties to even
  // (2^-25 -> 0, a carry to 1024 is the smallest normal), and the bits above 0.5f's
  // are the binary16 encoding.
  const float abs_value = std::bit_cast<float>(magnitude);
  const std::uint32_t tiny = std::bit_cast<std::uint32_t>(abs_value + 0.5f) - 0x3f000000u;
  // Normal: add just under half an ulp, plus one if the kept lsb is odd (ties to even);
  // a carry into the exponent is the correct rounded result. Wraps harmlessly for inputs
  // that take another branch.
  const std::uint32_t rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  const std::uint32_t normal = (rounded - 0x38000000u) >> 13;
  // 65520 = 0x477ff000 is halfway between the largest binary16 (65504, odd mantissa) and
  // 65536, so ties-to-even sends it and everything above (including inf) to inf.
  using detail::select_bits;
  const std::uint32_t result = select_bits(
      magnitude > 0x7f800000u, nan,
      select_bits(magnitude >= 0x477ff000u, 0x7c00u,
                  select_bits(magnitude < 0x38800000u, tiny, normal)));
  return static_cast<std::uint16_t>(sign | result);
}

// --- bfloat16 (top half of a float32) ----------------------------------------------------

inline float bfloat16_bits_to_float(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

// Round to nearest, ties to even. bfloat16 has float32's exponent range, so subnormals and
// overflow to inf fall out of the same integer rounding; only NaN needs care, because
// rounding a NaN whose payload lies in the low 16 bits would produce inf.
inline std::uint16_t float_to_bfloat16_bits(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t nan = (bits >> 16) | 0x0040u;
  const std::uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  return static_cast<std::uint16_t>(
      detail::select_bits((bits & 0x7fffffffu) > 0x7f800000u, nan, rounded));
}

}  // namespace pcoll
