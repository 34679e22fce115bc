// The UCX provider's remote-key blob: encoder and validating decoder (layout in ucx_key.hpp).
#include <ucx/ucx_key.hpp>

#include <cstring>

#include <support/error.hpp>

namespace pcoll::transport::ucx {

namespace {

constexpr uint32_t kKeyMagic = 0x4b584350;  // "PCXK"
constexpr uint16_t kKeyVersion = 1;

struct KeyHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved0;
  uint64_t address;
  uint64_t length;
  uint64_t origin;
  uint32_t rkey_bytes;
  uint32_t reserved1;
  uint64_t checksum;
};
static_assert(sizeof(KeyHeader) == 48);

uint64_t fnv1a(std::span<const std::byte> bytes, uint64_t hash = 0xcbf29ce484222325ull) {
  for (std::byte b : bytes) {
    hash ^= static_cast<uint64_t>(b);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

uint64_t key_checksum(KeyHeader header, std::span<const std::byte> rkey) {
  header.checksum = 0;
  const uint64_t hash = fnv1a(std::as_bytes(std::span(&header, 1)));
  return fnv1a(rkey, hash);
}

}  // namespace

uint64_t address_fingerprint(std::span<const std::byte> worker_address) {
  return fnv1a(worker_address);
}

std::vector<std::byte> encode_key(uint64_t address, uint64_t length, uint64_t origin,
                                  std::span<const std::byte> rkey) {
  KeyHeader header{kKeyMagic, kKeyVersion, 0, address, length, origin,
                   static_cast<uint32_t>(rkey.size()), 0, 0};
  header.checksum = key_checksum(header, rkey);
  std::vector<std::byte> blob(sizeof header + rkey.size());
  std::memcpy(blob.data(), &header, sizeof header);
  if (!rkey.empty()) std::memcpy(blob.data() + sizeof header, rkey.data(), rkey.size());
  return blob;
}

KeyView decode_key(std::span<const std::byte> key, const std::string& who) {
  KeyHeader header{};
  if (key.size() < sizeof header)
    fail(Errc::protocol, "ucx: " + who + " is " + std::to_string(key.size()) +
                             " bytes, shorter than its " + std::to_string(sizeof header) +
                             "-byte header");
  std::memcpy(&header, key.data(), sizeof header);
  if (header.magic != kKeyMagic || header.version != kKeyVersion)
    fail(Errc::protocol, "ucx: " + who + " is not a UCX provider key (magic/version mismatch; "
                         "do all ranks use the same PCOLL_PROVIDER and pcoll version?)");
  const auto rkey = key.subspan(sizeof header);
  if (rkey.size() != header.rkey_bytes || header.reserved0 != 0 || header.reserved1 != 0 ||
      (header.length > 0) != (header.rkey_bytes > 0))
    fail(Errc::protocol, "ucx: " + who + " has inconsistent lengths (" +
                             std::to_string(key.size()) + " bytes, rkey " +
                             std::to_string(header.rkey_bytes) + " bytes)");
  if (header.checksum != key_checksum(header, rkey))
    fail(Errc::protocol, "ucx: " + who + " is corrupted (checksum mismatch)");
  if (header.address + header.length < header.address)
    fail(Errc::protocol, "ucx: " + who + " describes a region that wraps the address space");
  return KeyView{header.address, header.length, header.origin, rkey};
}

}  // namespace pcoll::transport::ucx
