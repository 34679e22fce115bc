// A portable, well-mixed 64-bit hash for draws that every rank must make identically
// (the majority initiator) from a shared seed. pcoll_imbalance's delay schedule draws with
// the same function from its own copy (perf/perf_hash.hpp, public API only);
// tests/unit/test_imbalance_schedule.cpp checks that the two agree.
#pragma once

#include <cstdint>

namespace pcoll {

// splitmix64's finaliser.
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Counter-based: (seed, a, b) -> bits, no state to carry between draws.
inline uint64_t hash3(uint64_t seed, uint64_t a, uint64_t b) {
  return splitmix64(splitmix64(splitmix64(seed) ^ a) ^ b);
}

}  // namespace pcoll
