// Typed access to the perf tools' byte buffers for every pcoll dtype: store small integers
// (exact in every type, bfloat16 and float16 included) and read elements back as double.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <pcoll/pcoll.h>

namespace pcoll::perf {

// The C API's names (pcoll_dtype_name, pcoll_op_name), "invalid" for a value it has none for.
inline const char* dtype_name(pcoll_dtype_t dtype) {
  const char* name = pcoll_dtype_name(dtype);
  return name != nullptr ? name : "invalid";
}

inline const char* op_name(pcoll_op_t op) {
  const char* name = pcoll_op_name(op);
  return name != nullptr ? name : "invalid";
}

inline size_t dtype_bytes(pcoll_dtype_t dtype) {
  switch (dtype) {
    case PCOLL_FLOAT64:
    case PCOLL_INT64: return 8;
    case PCOLL_FLOAT32:
    case PCOLL_INT32: return 4;
    case PCOLL_BFLOAT16:
    case PCOLL_FLOAT16: return 2;
  }
  return 1;
}

// Relative precision of the type (0 for integers): the tolerance unit of checks.
inline double dtype_epsilon(pcoll_dtype_t dtype) {
  switch (dtype) {
    case PCOLL_FLOAT64: return 0x1p-52;
    case PCOLL_FLOAT32: return 0x1p-23;
    case PCOLL_BFLOAT16: return 0x1p-8;
    case PCOLL_FLOAT16: return 0x1p-11;
    default: return 0.0;
  }
}

// IEEE half from a float (round to nearest even; values here are small and normal).
inline uint16_t half_from_float(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const float magnitude = std::fabs(value);
  if (magnitude == 0.0f) return sign;
  if (magnitude >= 65520.0f) return static_cast<uint16_t>(sign | 0x7c00u);
  if (magnitude < 0x1p-14f) {  // subnormal: units of 2^-24
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(magnitude * 0x1p24f)));
  }
  const int32_t exponent = static_cast<int32_t>((bits >> 23) & 0xff) - 127 + 15;
  uint32_t mantissa = bits & 0x7fffffu;
  uint32_t rounded = mantissa >> 13;
  const uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (rounded & 1u))) ++rounded;
  const uint32_t half = (static_cast<uint32_t>(exponent) << 10) + rounded;  // carry may bump the exponent
  return static_cast<uint16_t>(sign | half);
}

inline float float_from_half(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  const uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0) {
    const float value = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -value : value;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

inline void store_value(pcoll_dtype_t dtype, std::byte* buffer, size_t index, double value) {
  switch (dtype) {
    case PCOLL_FLOAT64: {
      std::memcpy(buffer + index * 8, &value, 8);
      return;
    }
    case PCOLL_FLOAT32: {
      const float v = static_cast<float>(value);
      std::memcpy(buffer + index * 4, &v, 4);
      return;
    }
    case PCOLL_INT32: {
      const int32_t v = static_cast<int32_t>(value);
      std::memcpy(buffer + index * 4, &v, 4);
      return;
    }
    case PCOLL_INT64: {
      const int64_t v = static_cast<int64_t>(value);
      std::memcpy(buffer + index * 8, &v, 8);
      return;
    }
    case PCOLL_BFLOAT16: {  // small integers: truncating float32 is exact
      const uint16_t v = static_cast<uint16_t>(std::bit_cast<uint32_t>(static_cast<float>(value)) >> 16);
      std::memcpy(buffer + index * 2, &v, 2);
      return;
    }
    case PCOLL_FLOAT16: {
      const uint16_t v = half_from_float(static_cast<float>(value));
      std::memcpy(buffer + index * 2, &v, 2);
      return;
    }
  }
}

inline double load_value(pcoll_dtype_t dtype, const std::byte* buffer, size_t index) {
  switch (dtype) {
    case PCOLL_FLOAT64: {
      double v;
      std::memcpy(&v, buffer + index * 8, 8);
      return v;
    }
    case PCOLL_FLOAT32: {
      float v;
      std::memcpy(&v, buffer + index * 4, 4);
      return v;
    }
    case PCOLL_INT32: {
      int32_t v;
      std::memcpy(&v, buffer + index * 4, 4);
      return v;
    }
    case PCOLL_INT64: {
      int64_t v;
      std::memcpy(&v, buffer + index * 8, 8);
      return static_cast<double>(v);
    }
    case PCOLL_BFLOAT16: {
      uint16_t v;
      std::memcpy(&v, buffer + index * 2, 2);
      return std::bit_cast<float>(static_cast<uint32_t>(v) << 16);
    }
    case PCOLL_FLOAT16: {
      uint16_t v;
      std::memcpy(&v, buffer + index * 2, 2);
      return float_from_half(v);
    }
  }
  return 0.0;
}

}  // namespace pcoll::perf
