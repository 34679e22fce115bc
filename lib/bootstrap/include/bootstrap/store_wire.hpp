// The TCP store's wire format: message framing, the encoders, and the parsers. Everything
// here is a pure function over bytes (no sockets, no state), so the parsers can be tested and
// fuzzed on their own; a parser never reads past its input and says what was wrong.
//
// Every message is a 16-byte little-endian header {magic "PCST", version, type, payload
// length} followed by the payload. Integers are little-endian whatever the host, so hosts of
// any byte order interoperate. Payloads:
//   hello    u32 rank, u32 size, u32 key length, key     client: join the job (first message)
//   welcome  (empty)                                     server: hello accepted
//   gather   u64 sequence number, blob (the rest)        client: contribute to a collective
//   result   u64 sequence number, u32 count,             server: every rank's blob
//            count x {u64 length, bytes}
//   error    u32 Errc, message (the rest)                server: the client throws it
//   ping     (empty)                                     server: alive, still waiting
//   bye      (empty)                                     client: clean exit, not a crash
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <bootstrap/bootstrap.hpp>
#include <support/error.hpp>

namespace pcoll::bootstrap {

// Largest blob one rank may contribute to one allgather; larger messages are rejected.
inline constexpr size_t kMaxStoreBlobBytes = size_t{64} << 20;

namespace wire {

inline constexpr uint32_t kMagic = 0x54534350;  // "PCST" in little-endian byte order
inline constexpr uint16_t kVersion = 1;
inline constexpr size_t kHeaderBytes = 16;
// Until a connection has presented the job key it may send at most this much, so an
// unauthenticated peer can neither make the store allocate much nor learn about the job.
inline constexpr size_t kMaxHelloBytes = 4096;
inline constexpr size_t kMaxKeyBytes = 1024;
inline constexpr size_t kMaxGatherBytes = kMaxStoreBlobBytes + 8;
// A result carries every rank's blob; the store refuses allgathers that would exceed this.
inline constexpr uint64_t kMaxResultBytes = uint64_t{1} << 32;

enum class MsgType : uint16_t {
  hello = 1,
  welcome = 2,
  gather = 3,
  result = 4,
  error = 5,
  ping = 6,
  bye = 7,
};

// --- Framing.

struct Frame {
  MsgType type = MsgType::hello;
  std::span<const std::byte> payload;  // inside the parsed bytes (complete frames only)
  size_t bytes = 0;                     // header + payload: where the next message starts
};

struct FrameParse {
  enum class Status {
    complete,    // `frame` is the first message
    incomplete,  // the bytes end before the message does; read more (once the header is
                 // in and valid, frame.type and frame.bytes already say what is coming)
    invalid,     // `error` says what is wrong; the stream cannot be trusted any further
  };
  Status status = Status::incomplete;
  Frame frame;
  std::string error;
};

// Looks for one message at the start of `bytes`, whose payload may be at most `max_payload`
// bytes. The header is checked as soon as its 16 bytes are there, so a bad magic, version,
// type or an oversized length is refused before any of its payload is read.
FrameParse parse_frame(std::span<const std::byte> bytes, uint64_t max_payload);

// Largest result payload a client of a job of `size` ranks accepts.
uint64_t max_result_payload(int size);

// --- Payloads. Each parser throws Error(Errc::protocol) naming what is malformed.

struct Hello {
  uint32_t rank = 0;
  uint32_t size = 0;
  std::span<const std::byte> key;
};
Hello parse_hello(std::span<const std::byte> payload);

struct Gather {
  uint64_t seq = 0;
  std::span<const std::byte> blob;
};
Gather parse_gather(std::span<const std::byte> payload);

struct Result {
  uint64_t seq = 0;
  std::vector<Blob> blobs;
};
Result parse_result(std::span<const std::byte> payload);

struct Failure {
  Errc code = Errc::bootstrap;  // an unknown code reads as Errc::bootstrap
  std::string message;
};
Failure parse_error(std::span<const std::byte> payload);

// --- Encoders: whole messages, header included.

Blob encode_hello(uint32_t rank, uint32_t size, std::span<const std::byte> key);
Blob encode_gather(uint64_t seq, std::span<const std::byte> blob);
// Bytes of the result payload for these blob sizes (checked against kMaxResultBytes).
uint64_t result_payload_bytes(std::span<const Blob> blobs);
Blob encode_result(uint64_t seq, std::span<const Blob> blobs);
Blob encode_error(Errc code, const std::string& message);
// welcome, ping, bye.
Blob encode_empty(MsgType type);

}  // namespace wire
}  // namespace pcoll::bootstrap
