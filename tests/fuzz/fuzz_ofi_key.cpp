// libFuzzer target: the libfabric provider's region-key envelope (parse_key, ofi_key.hpp),
// which import_region runs on a peer's blob before libfabric sees any of it. The first input
// byte picks the peer rank and the registration mode; the rest is the blob.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include <ofi/ofi_key.hpp>
#include <support/error.hpp>

using namespace pcoll::transport::ofi;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int peer = data[0] >> 2;
  const KeyModes modes{.virt_addr = (data[0] & 1) != 0, .raw = (data[0] & 2) != 0};
  const std::span key(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  try {
    const KeyEnvelope envelope = parse_key(key, peer, modes);
    // An accepted key: its raw key is exactly the bytes after the header, present iff FI_MR_RAW.
    if (envelope.raw_key.size() + kKeyHeaderBytes != key.size() || envelope.raw_key.empty() == modes.raw)
      std::abort();
  } catch (const pcoll::Error& e) {
    if (e.code() != pcoll::Errc::protocol) std::abort();
  }
  return 0;
}
