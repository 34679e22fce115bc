// Remote atomics a provider lacks, built from its compare-swap (libfabric's prov/util does
// the same for its providers). Each returns the word's old value, like the native atomic,
// and is linearizable: its effect happens at the compare-swap that succeeded or, when none
// had to write, at the one that read the deciding value.
#pragma once

#include <cstddef>
#include <cstdint>

#include <transport/transport.hpp>

namespace pcoll::transport {

// Unsigned max: afterwards the word is >= value. Guesses 0 first, so a word that is 0 or
// already >= value costs one round trip; each failed compare-swap teaches the real word.
uint64_t max_by_compare_swap(Transport& transport, const RemoteRegion& dst, size_t offset, uint64_t value);

// Swap: stores value, whatever the word held. Guesses 0 first, like max.
uint64_t swap_by_compare_swap(Transport& transport, const RemoteRegion& dst, size_t offset, uint64_t value);

}  // namespace pcoll::transport
