// The libfabric provider's region-key blob: its validating parser (layout in ofi_key.hpp).
#include <ofi/ofi_key.hpp>

#include <cstring>
#include <string>

#include <support/error.hpp>

namespace pcoll::transport::ofi {

namespace {

template <class T>
T get(std::span<const std::byte> in, size_t at) {
  T value{};
  std::memcpy(&value, in.data() + at, sizeof value);
  return value;
}

}  // namespace

KeyEnvelope parse_key(std::span<const std::byte> key, int peer, KeyModes modes) {
  const std::string who = "ofi: region key from rank " + std::to_string(peer);
  if (key.size() < kKeyHeaderBytes || get<uint32_t>(key, 0) != kKeyMagic)
    fail(Errc::protocol, who + " is malformed (" + std::to_string(key.size()) +
                             " bytes, not a pcoll libfabric key)");
  const auto owner = get<int32_t>(key, 4);
  const auto flags = get<uint32_t>(key, 8);
  const auto raw_bytes = get<uint32_t>(key, 12);
  KeyEnvelope envelope;
  envelope.base = get<uint64_t>(key, 16);
  envelope.bytes = get<uint64_t>(key, 24);
  envelope.mr_key = get<uint64_t>(key, 32);
  if (key.size() != kKeyHeaderBytes + raw_bytes)
    fail(Errc::protocol, who + " is malformed (length " + std::to_string(key.size()) +
                             " disagrees with its raw key length " + std::to_string(raw_bytes) + ")");
  if (owner >= 0 && owner != peer)
    fail(Errc::protocol, who + " was registered by rank " + std::to_string(owner));
  const bool virt = (flags & kFlagVirtAddr) != 0;
  if (virt != modes.virt_addr || modes.raw != (raw_bytes > 0))
    fail(Errc::protocol, who + " was made with a different memory registration mode");
  envelope.raw_key = key.subspan(kKeyHeaderBytes);
  return envelope;
}

}  // namespace pcoll::transport::ofi
