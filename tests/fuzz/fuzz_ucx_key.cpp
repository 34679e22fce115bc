// libFuzzer target: the UCX provider's remote-key envelope (decode_key, ucx_key.hpp). UCP does
// not validate a packed rkey, so this check is all that stands between a peer's bytes and
// ucp_ep_rkey_unpack. Besides the raw input, the target wraps the input as the rkey of a
// well-formed envelope (encode_key), so the checksum does not stop the search at the door.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include <support/error.hpp>
#include <ucx/ucx_key.hpp>

using namespace pcoll::transport::ucx;

namespace {

void decode(std::span<const std::byte> key) {
  try {
    const KeyView view = decode_key(key, "fuzzed key");
    // An accepted key: the rkey is the blob's tail, present iff the region is not empty,
    // and the region does not wrap.
    if (view.rkey.data() + view.rkey.size() != key.data() + key.size() ||
        view.rkey.empty() != (view.length == 0) || view.address + view.length < view.address)
      std::abort();
  } catch (const pcoll::Error& e) {
    if (e.code() != pcoll::Errc::protocol) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span bytes(reinterpret_cast<const std::byte*>(data), size);
  decode(bytes);
  if (size >= 16) {
    uint64_t address = 0, length = 0;
    std::memcpy(&address, data, 8);
    std::memcpy(&length, data + 8, 8);
    const auto rkey = bytes.subspan(16);
    if (rkey.empty()) length = 0;
    const auto blob = encode_key(address, length, address_fingerprint(rkey), rkey);
    decode(blob);
  }
  return 0;
}
