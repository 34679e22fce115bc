// copy_bytes (copy.hpp).
#include <support/copy.hpp>

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace pcoll {

void copy_bytes(void* dst, const void* src, std::size_t bytes) {
#if defined(__x86_64__)
  constexpr std::size_t kLine = 64;
  // Small copies do not take the slow path; copies of the same line offset are memcpy's best case.
  const auto gap = (reinterpret_cast<std::uintptr_t>(dst) - reinterpret_cast<std::uintptr_t>(src)) % kLine;
  if (bytes >= 1024 && gap != 0) {
    auto* out = static_cast<unsigned char*>(dst);
    const auto* in = static_cast<const unsigned char*>(src);
    std::size_t i = 0;
    for (; i + kLine <= bytes; i += kLine) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 32));
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 48));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), a);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i + 16), b);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i + 32), c);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i + 48), d);
    }
    if (i < bytes) std::memcpy(out + i, in + i, bytes - i);
    return;
  }
#endif
  if (bytes != 0) std::memcpy(dst, src, bytes);
}

}  // namespace pcoll
