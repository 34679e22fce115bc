// Copying bytes between buffers that are misaligned to each other.
//
// glibc 2.36's memcpy copies sizes from a few KiB up to its non-temporal threshold with
// `rep movsb`, which on some x86-64 cores (AMD EPYC here) runs about 15 times slower when
// source and destination differ in their offset within a 64-byte line: 2 GB/s instead of
// 30 for 64 KiB blocks from a page-aligned buffer into a malloc'd one (16 bytes past a
// line). An application's buffers come from malloc; a handle's work buffer is
// page-aligned; so every copy between the two hit it (docs/performance.md, "Copies").
// copy_bytes takes a 16-byte vector loop (SSE2, in every x86-64) in that case and
// memcpy otherwise.
#pragma once

#include <cstddef>

namespace pcoll {

// memcpy's contract: the ranges do not overlap.
void copy_bytes(void* dst, const void* src, std::size_t bytes);

}  // namespace pcoll
