// The libfabric provider's region-key blob without libfabric: its layout and the validating
// parser that import_region runs on a peer's blob before any of it reaches libfabric
// (fi_mr_map_raw). Pure functions over bytes, fuzzed on their own (tests/fuzz/fuzz_ofi_key.cpp).
//
// Key blob (little-endian, native): magic u32, owner rank i32, flags u32 (bit 0: remote
// addresses are virtual addresses), raw key length u32, base address u64, length u64, key
// u64, then the raw key bytes (FI_MR_RAW only). Under FI_MR_RAW the key field holds the base
// address FI_GET_RAW_MR gave with the raw key, which the importer's fi_mr_map_raw needs
// (the RMA addresses still follow FI_MR_VIRT_ADDR and the base address field).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace pcoll::transport::ofi {

inline constexpr uint32_t kKeyMagic = 0x50434d52;  // "PCMR"
inline constexpr uint32_t kFlagVirtAddr = 1;

struct KeyHeader {
  uint32_t magic;
  int32_t owner_rank;
  uint32_t flags;
  uint32_t raw_key_bytes;
  uint64_t base_address;
  uint64_t bytes;
  uint64_t key;
};
static_assert(sizeof(KeyHeader) == 40, "key blob header must have no padding");
inline constexpr size_t kKeyHeaderBytes = sizeof(KeyHeader);

// The registration mode this side expects of every key (from its domain's mr_mode).
struct KeyModes {
  bool virt_addr = false;  // FI_MR_VIRT_ADDR
  bool raw = false;        // FI_MR_RAW
};

// A key blob from `peer`, validated.
struct KeyEnvelope {
  uint64_t base = 0;
  uint64_t bytes = 0;
  uint64_t mr_key = 0;
  std::span<const std::byte> raw_key;  // inside the blob; empty unless FI_MR_RAW
  // FI_MR_RAW: the registration's base address for fi_mr_map_raw (carried in the key field).
  uint64_t raw_base() const { return mr_key; }
};

// Throws Error(Errc::protocol) naming `peer` and what is wrong: too short, not a pcoll key,
// a length that disagrees with the raw key's, another owner, another registration mode.
KeyEnvelope parse_key(std::span<const std::byte> key, int peer, KeyModes modes);

}  // namespace pcoll::transport::ofi
