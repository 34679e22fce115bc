// The UCX provider's remote-key blob without UCX: its layout, the envelope encoder and the
// validating decoder. UCP does not validate a packed rkey it unpacks, so import_region and
// the mailbox check every blob here before any of it reaches ucp_ep_rkey_unpack; being pure
// functions over bytes, they are fuzzed alone (tests/fuzz/fuzz_ucx_key.cpp).
//
// Blob layout (little-endian host order, all ranks run on the same architecture):
//   u32 magic 'PCXK' | u16 version | u16 reserved 0 | u64 address | u64 length |
//   u64 origin (fingerprint of the owner's worker address) | u32 rkey bytes | u32 reserved 0 |
//   u64 FNV-1a of everything else | packed UCP rkey
// The checksum catches truncated or corrupted blobs; the origin catches a key imported as
// another rank's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace pcoll::transport::ucx {

// Fingerprint of a worker address, as carried in the origin field of its keys.
uint64_t address_fingerprint(std::span<const std::byte> worker_address);

// The blob for a region of `length` bytes at `address` whose packed UCP rkey is `rkey`
// (empty for an empty region).
std::vector<std::byte> encode_key(uint64_t address, uint64_t length, uint64_t origin,
                                  std::span<const std::byte> rkey);

// A region key blob, validated: lengths, checksum, no wrap-around.
struct KeyView {
  uint64_t address = 0;
  uint64_t length = 0;
  uint64_t origin = 0;  // fingerprint of the owner's worker address
  std::span<const std::byte> rkey;  // inside the blob
};
// Throws Error(Errc::protocol) naming `who` and what is wrong with the blob.
KeyView decode_key(std::span<const std::byte> key, const std::string& who);

}  // namespace pcoll::transport::ucx
