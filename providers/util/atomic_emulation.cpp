// Atomics emulated with compare-swap (atomic_emulation.hpp).
#include <util/atomic_emulation.hpp>

#include <algorithm>

namespace pcoll::transport {

uint64_t max_by_compare_swap(Transport& transport, const RemoteRegion& dst, size_t offset, uint64_t value) {
  uint64_t expected = 0;
  for (;;) {
    const uint64_t old_value = transport.compare_swap(dst, offset, expected, std::max(expected, value));
    // Either our compare-swap wrote (the word was `expected`), or the word already was >= value.
    if (old_value == expected || old_value >= value) return old_value;
    expected = old_value;
  }
}

uint64_t swap_by_compare_swap(Transport& transport, const RemoteRegion& dst, size_t offset, uint64_t value) {
  uint64_t expected = 0;
  for (;;) {
    const uint64_t old_value = transport.compare_swap(dst, offset, expected, value);
    if (old_value == expected) return old_value;
    expected = old_value;
  }
}

}  // namespace pcoll::transport
