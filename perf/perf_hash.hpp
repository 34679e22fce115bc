// The counter-based draw behind pcoll_imbalance's delay schedules: (seed, step, stream) ->
// 64 well-mixed bits, with no state, so every rank (and every mode of one run) computes the
// same schedule without communicating. splitmix64's finaliser, chained over the three
// inputs. This is the definition of the schedules that docs/performance.md reports: it must
// not change. It is the same function as the library's majority draw (lib/support/include/support/hash.hpp);
// tests/unit/test_imbalance_schedule.cpp checks both that and the schedules themselves.
#pragma once

#include <cstdint>

namespace pcoll::perf {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline uint64_t draw(uint64_t seed, uint64_t step, uint64_t stream) {
  return splitmix64(splitmix64(splitmix64(seed) ^ step) ^ stream);
}

}  // namespace pcoll::perf
