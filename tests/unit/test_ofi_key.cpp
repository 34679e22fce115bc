// The libfabric key envelope (providers/ofi/ofi_key): what import_region reads from a
// peer's blob, and every way a blob is refused.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include <ofi/ofi_key.hpp>
#include <support/error.hpp>

using pcoll::Errc;
using pcoll::Error;
using namespace pcoll::transport::ofi;

namespace {

std::vector<std::byte> blob(const KeyHeader& header, size_t raw_bytes = 0) {
  std::vector<std::byte> out(sizeof header + raw_bytes);
  std::memcpy(out.data(), &header, sizeof header);
  for (size_t i = 0; i < raw_bytes; ++i) out[sizeof header + i] = std::byte(0xA0 + i);
  return out;
}

std::string refusal(const std::vector<std::byte>& key, int peer, KeyModes modes) {
  try {
    parse_key(key, peer, modes);
  } catch (const Error& e) {
    CHECK(e.code() == Errc::protocol);
    return e.what();
  }
  FAIL("the key was accepted");
  return {};
}

}  // namespace

TEST_CASE("a plain key gives its base, length and key") {
  const KeyHeader h{kKeyMagic, 2, kFlagVirtAddr, 0, 0x7f0000001000, 4096, 0x1234};
  const auto e = parse_key(blob(h), 2, {.virt_addr = true, .raw = false});
  CHECK(e.base == 0x7f0000001000);
  CHECK(e.bytes == 4096);
  CHECK(e.mr_key == 0x1234);
  CHECK(e.raw_key.empty());
}

TEST_CASE("an FI_MR_RAW key gives its raw bytes and the base address fi_mr_map_raw needs") {
  // The base address FI_GET_RAW_MR reports travels in the key field; the RMA base (0 with
  // offset addressing) stays apart from it.
  const KeyHeader h{kKeyMagic, 1, 0, 24, 0, 1 << 20, 0x7fff12340000};
  const auto key = blob(h, 24);
  const auto e = parse_key(key, 1, {.virt_addr = false, .raw = true});
  CHECK(e.base == 0);
  CHECK(e.raw_base() == 0x7fff12340000);
  REQUIRE(e.raw_key.size() == 24);
  CHECK(e.raw_key[0] == std::byte(0xA0));
  CHECK(e.raw_key[23] == std::byte(0xA0 + 23));
}

TEST_CASE("under FI_MR_RAW with FI_MR_VIRT_ADDR the RMA base and the raw key's base travel apart") {
  // Virtual addressing: RMA addresses start at the registration's virtual address, while
  // fi_mr_map_raw gets the base address FI_GET_RAW_MR reported, which need not be the same.
  const KeyHeader h{kKeyMagic, 0, kFlagVirtAddr, 16, 0x7f0000200000, 8192, 0x1000};
  const auto key = blob(h, 16);
  const auto e = parse_key(key, 0, {.virt_addr = true, .raw = true});
  CHECK(e.base == 0x7f0000200000);
  CHECK(e.raw_base() == 0x1000);
  CHECK(e.bytes == 8192);
  CHECK(e.raw_key.size() == 16);
}

TEST_CASE("malformed keys are refused naming the peer and the fault") {
  const KeyHeader h{kKeyMagic, 3, 0, 0, 0, 64, 7};
  auto key = blob(h);
  CHECK(refusal(std::vector<std::byte>(key.begin(), key.begin() + 39), 3, {}).find("rank 3") != std::string::npos);
  auto bad_magic = key;
  bad_magic[0] = std::byte{0};
  CHECK(refusal(bad_magic, 3, {}).find("not a pcoll libfabric key") != std::string::npos);
  auto long_key = key;
  long_key.push_back(std::byte{1});
  CHECK(refusal(long_key, 3, {}).find("disagrees") != std::string::npos);
  CHECK(refusal(key, 2, {}).find("registered by rank 3") != std::string::npos);
  CHECK(refusal(key, 3, {.virt_addr = true, .raw = false}).find("registration mode") != std::string::npos);
  CHECK(refusal(key, 3, {.virt_addr = false, .raw = true}).find("registration mode") != std::string::npos);
}
