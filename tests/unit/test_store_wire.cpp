// The TCP store's wire format (lib/bootstrap/include/bootstrap/store_wire.hpp): what the encoders write the
// parsers read back, and malformed input -- truncated, oversized, bad magic, version or type,
// bad key lengths -- gives a clear Errc::protocol or an invalid frame, never a crash or an
// allocation sized by the peer.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <bootstrap/store_wire.hpp>
#include <support/error.hpp>

using pcoll::Errc;
using pcoll::Error;
using pcoll::bootstrap::Blob;
namespace wire = pcoll::bootstrap::wire;
using Status = wire::FrameParse::Status;

namespace {

Blob bytes_of(const std::string& text) {
  Blob out(text.size());
  std::memcpy(out.data(), text.data(), text.size());
  return out;
}

void put_u32(Blob& blob, size_t at, uint32_t v) {
  for (size_t i = 0; i < 4; ++i) blob[at + i] = static_cast<std::byte>(v >> (8 * i));
}
void put_u64(Blob& blob, size_t at, uint64_t v) {
  for (size_t i = 0; i < 8; ++i) blob[at + i] = static_cast<std::byte>(v >> (8 * i));
}

// The payload of a whole encoded message.
std::span<const std::byte> payload_of(const Blob& message) {
  return std::span<const std::byte>(message).subspan(wire::kHeaderBytes);
}

// The protocol error `parse` throws; fails the case when it throws nothing or another code.
template <class Parse>
std::string protocol_error(Parse&& parse) {
  try {
    parse();
  } catch (const Error& e) {
    CHECK(e.code() == Errc::protocol);
    return e.what();
  }
  FAIL("no error");
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("every message reads back as it was written") {
  const Blob key = bytes_of("0123456789abcdef");
  const Blob hello = wire::encode_hello(3, 8, key);
  const auto frame = wire::parse_frame(hello, wire::kMaxHelloBytes);
  REQUIRE(frame.status == Status::complete);
  CHECK(frame.frame.type == wire::MsgType::hello);
  CHECK(frame.frame.bytes == hello.size());
  const wire::Hello h = wire::parse_hello(frame.frame.payload);
  CHECK(h.rank == 3);
  CHECK(h.size == 8);
  CHECK(Blob(h.key.begin(), h.key.end()) == key);

  const Blob blob = bytes_of("address");
  const Blob gather = wire::encode_gather(42, blob);  // parse results point into it: keep it alive
  const wire::Gather g = wire::parse_gather(payload_of(gather));
  CHECK(g.seq == 42);
  CHECK(Blob(g.blob.begin(), g.blob.end()) == blob);

  const std::vector<Blob> blobs = {bytes_of("a"), Blob(), bytes_of("ccc")};
  const Blob result = wire::encode_result(7, blobs);
  CHECK(result.size() == wire::kHeaderBytes + wire::result_payload_bytes(blobs));
  const wire::Result r = wire::parse_result(payload_of(result));
  CHECK(r.seq == 7);
  CHECK(r.blobs == blobs);

  const Blob error = wire::encode_error(Errc::timeout, "rank 2 is late");
  const wire::Failure f = wire::parse_error(payload_of(error));
  CHECK(f.code == Errc::timeout);
  CHECK(f.message == "rank 2 is late");

  for (auto type : {wire::MsgType::welcome, wire::MsgType::ping, wire::MsgType::bye}) {
    const auto empty = wire::parse_frame(wire::encode_empty(type), 0);
    REQUIRE(empty.status == Status::complete);
    CHECK(empty.frame.type == type);
    CHECK(empty.frame.payload.empty());
  }
}

TEST_CASE("a frame is incomplete until its header and then its payload are all there") {
  const Blob message = wire::encode_gather(1, bytes_of("payload"));
  for (size_t n = 0; n < message.size(); ++n) {
    const auto parsed = wire::parse_frame(std::span<const std::byte>(message).first(n), wire::kMaxGatherBytes);
    CHECK(parsed.status == Status::incomplete);
    // Once the header is in, the parser already knows the message's size.
    CHECK(parsed.frame.bytes == (n >= wire::kHeaderBytes ? message.size() : 0));
  }
  // Bytes of the next message after this one are not part of it.
  Blob two = message;
  two.insert(two.end(), message.begin(), message.end());
  const auto parsed = wire::parse_frame(two, wire::kMaxGatherBytes);
  REQUIRE(parsed.status == Status::complete);
  CHECK(parsed.frame.bytes == message.size());
}

TEST_CASE("a bad magic, version or type is refused as soon as the header is complete") {
  const Blob good = wire::encode_gather(1, bytes_of("x"));
  const auto header = [&](const Blob& m) { return std::span<const std::byte>(m).first(wire::kHeaderBytes); };

  Blob bad_magic = good;
  bad_magic[0] = std::byte{'G'};  // "GET / HTTP..." and friends
  auto parsed = wire::parse_frame(header(bad_magic), wire::kMaxGatherBytes);
  CHECK(parsed.status == Status::invalid);
  CHECK(contains(parsed.error, "bad magic"));

  Blob bad_version = good;
  bad_version[4] = std::byte{2};
  parsed = wire::parse_frame(header(bad_version), wire::kMaxGatherBytes);
  CHECK(parsed.status == Status::invalid);
  CHECK(contains(parsed.error, "version 2"));

  for (uint16_t type : {0, 8, 0xffff}) {
    Blob bad_type = good;
    bad_type[6] = static_cast<std::byte>(type & 0xff);
    bad_type[7] = static_cast<std::byte>(type >> 8);
    parsed = wire::parse_frame(header(bad_type), wire::kMaxGatherBytes);
    CHECK(parsed.status == Status::invalid);
    CHECK(contains(parsed.error, "unknown message type " + std::to_string(type)));
  }
}

TEST_CASE("an oversized length is refused before its payload is read") {
  Blob message = wire::encode_hello(0, 1, bytes_of("key"));
  for (uint64_t length : {uint64_t{wire::kMaxHelloBytes} + 1, uint64_t{1} << 40,
                          std::numeric_limits<uint64_t>::max()}) {
    put_u64(message, 8, length);
    const auto parsed = wire::parse_frame(std::span<const std::byte>(message).first(wire::kHeaderBytes),
                                          wire::kMaxHelloBytes);
    CHECK(parsed.status == Status::invalid);
    CHECK(contains(parsed.error, std::to_string(length) + " bytes exceeds the limit of " +
                                     std::to_string(wire::kMaxHelloBytes)));
  }
  // A client's limit grows with the job: every rank's largest blob.
  CHECK(wire::max_result_payload(4) > 4 * pcoll::bootstrap::kMaxStoreBlobBytes);
}

TEST_CASE("a truncated payload names the message and the field that is missing") {
  const Blob hello = wire::encode_hello(1, 2, bytes_of("secret"));
  const auto hello_payload = payload_of(hello);
  for (size_t n = 0; n < hello_payload.size(); ++n) {
    const auto error = protocol_error([&] { wire::parse_hello(hello_payload.first(n)); });
    CHECK(contains(error, "truncated hello message"));
  }
  CHECK(contains(protocol_error([&] { wire::parse_hello(hello_payload.first(5)); }), "the size"));
  CHECK(contains(protocol_error([&] { wire::parse_hello(hello_payload.first(13)); }), "the job key"));

  CHECK(contains(protocol_error([] { wire::parse_gather({}); }), "truncated gather message"));
  CHECK(contains(protocol_error([] { wire::parse_error({}); }), "truncated error message"));

  const std::vector<Blob> blobs = {bytes_of("first"), bytes_of("second")};
  const Blob result = wire::encode_result(9, blobs);
  const auto result_payload = payload_of(result);
  for (size_t n = 0; n < result_payload.size(); ++n) {
    const auto error = protocol_error([&] { wire::parse_result(result_payload.first(n)); });
    CHECK(contains(error, "result message"));
  }
}

TEST_CASE("key lengths over the limit or past the payload are refused") {
  Blob hello = wire::encode_hello(0, 1, bytes_of("key"));
  Blob payload(payload_of(hello).begin(), payload_of(hello).end());
  put_u32(payload, 8, wire::kMaxKeyBytes + 1);
  CHECK(contains(protocol_error([&] { wire::parse_hello(payload); }),
                 "job key of " + std::to_string(wire::kMaxKeyBytes + 1) + " bytes"));
  put_u32(payload, 8, 4);  // one byte more than there is
  CHECK(contains(protocol_error([&] { wire::parse_hello(payload); }), "truncated hello message"));
  put_u32(payload, 8, 2);  // one byte left over
  CHECK(contains(protocol_error([&] { wire::parse_hello(payload); }), "1 trailing bytes"));
}

TEST_CASE("a result's count and blob lengths cannot make the parser allocate or overrun") {
  Blob payload(12);
  put_u64(payload, 0, 0);
  put_u32(payload, 8, 0xffffffff);  // four billion blobs in zero bytes
  CHECK(contains(protocol_error([&] { wire::parse_result(payload); }), "announces 4294967295 blobs"));

  payload.resize(20);
  put_u32(payload, 8, 1);
  put_u64(payload, 12, std::numeric_limits<uint64_t>::max());  // a blob longer than anything
  CHECK(contains(protocol_error([&] { wire::parse_result(payload); }), "truncated result message"));

  put_u64(payload, 12, 0);
  payload.push_back(std::byte{0});
  CHECK(contains(protocol_error([&] { wire::parse_result(payload); }), "trailing bytes"));
}

TEST_CASE("an error message with an unknown code reads as a bootstrap error") {
  Blob payload(4 + 3);
  put_u32(payload, 0, 999);
  std::memcpy(payload.data() + 4, "why", 3);
  const wire::Failure f = wire::parse_error(payload);
  CHECK(f.code == Errc::bootstrap);
  CHECK(f.message == "why");
  put_u32(payload, 0, 0);  // Errc::ok is not a failure either
  CHECK(wire::parse_error(payload).code == Errc::bootstrap);
}
