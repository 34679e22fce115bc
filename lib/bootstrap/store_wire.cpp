// The TCP store's wire format (store_wire.hpp): framing, encoders, parsers.
#include <bootstrap/store_wire.hpp>

#include <utility>

namespace pcoll::bootstrap::wire {
namespace {

void put_le(Blob& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}
void put_bytes(Blob& out, std::span<const std::byte> bytes) {
  out.insert(out.end(), bytes.begin(), bytes.end());
}

uint64_t load_le(std::span<const std::byte> in, size_t pos, size_t bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(in[pos + i]) << (8 * i);
  return v;
}

bool known_type(uint16_t type) {
  return type >= static_cast<uint16_t>(MsgType::hello) && type <= static_cast<uint16_t>(MsgType::bye);
}

// Bounds-checked reader over one payload; running off its end throws Errc::protocol naming
// the message and what was being read.
class Reader {
 public:
  Reader(std::span<const std::byte> in, const char* message) : in_(in), message_(message) {}
  uint32_t u32(const char* field) { return static_cast<uint32_t>(take_le(4, field)); }
  uint64_t u64(const char* field) { return take_le(8, field); }
  std::span<const std::byte> bytes(uint64_t n, const char* field) {
    if (n > left()) truncated(field, n);
    auto out = in_.subspan(pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return out;
  }
  std::span<const std::byte> rest() { return bytes(left(), "the rest"); }
  size_t left() const { return in_.size() - pos_; }
  void expect_end() {
    if (left() != 0)
      fail(Errc::protocol, std::string(message_) + " message has " + std::to_string(left()) +
                               " trailing bytes");
  }

 private:
  uint64_t take_le(size_t n, const char* field) {
    if (n > left()) truncated(field, n);
    const uint64_t v = load_le(in_, pos_, n);
    pos_ += n;
    return v;
  }
  [[noreturn]] void truncated(const char* field, uint64_t wanted) const {
    fail(Errc::protocol, "truncated " + std::string(message_) + " message: " + field + " needs " +
                             std::to_string(wanted) + " bytes at offset " + std::to_string(pos_) +
                             " of a " + std::to_string(in_.size()) + "-byte payload");
  }

  std::span<const std::byte> in_;
  const char* message_;
  size_t pos_ = 0;
};

// A message with its header; the caller appends the payload, then finish() sets the length.
Blob start(MsgType type, size_t payload_bytes = 0) {
  Blob out;
  out.reserve(kHeaderBytes + payload_bytes);
  put_le(out, kMagic, 4);
  put_le(out, kVersion, 2);
  put_le(out, static_cast<uint16_t>(type), 2);
  put_le(out, 0, 8);
  return out;
}
Blob finish(Blob frame) {
  const uint64_t length = frame.size() - kHeaderBytes;
  for (int i = 0; i < 8; ++i) frame[8 + static_cast<size_t>(i)] = static_cast<std::byte>(length >> (8 * i));
  return frame;
}

}  // namespace

FrameParse parse_frame(std::span<const std::byte> bytes, uint64_t max_payload) {
  FrameParse out;
  if (bytes.size() < kHeaderBytes) return out;  // incomplete
  const auto magic = static_cast<uint32_t>(load_le(bytes, 0, 4));
  const auto version = static_cast<uint16_t>(load_le(bytes, 4, 2));
  const auto type = static_cast<uint16_t>(load_le(bytes, 6, 2));
  const uint64_t length = load_le(bytes, 8, 8);
  out.status = FrameParse::Status::invalid;
  if (magic != kMagic) {
    out.error = "not a pcoll store message (bad magic)";
  } else if (version != kVersion) {
    out.error = "store protocol version " + std::to_string(version) + " (this store speaks " +
                std::to_string(kVersion) + ")";
  } else if (!known_type(type)) {
    out.error = "unknown message type " + std::to_string(type);
  } else if (length > max_payload) {
    out.error = "message of " + std::to_string(length) + " bytes exceeds the limit of " +
                std::to_string(max_payload);
  } else {
    out.frame.type = static_cast<MsgType>(type);
    out.frame.bytes = kHeaderBytes + static_cast<size_t>(length);
    if (bytes.size() - kHeaderBytes < length) {
      out.status = FrameParse::Status::incomplete;
    } else {
      out.status = FrameParse::Status::complete;
      out.frame.payload = bytes.subspan(kHeaderBytes, static_cast<size_t>(length));
    }
  }
  return out;
}

uint64_t max_result_payload(int size) {
  return 16 + static_cast<uint64_t>(size) * (8 + kMaxStoreBlobBytes);
}

Hello parse_hello(std::span<const std::byte> payload) {
  Reader in(payload, "hello");
  Hello out;
  out.rank = in.u32("the rank");
  out.size = in.u32("the size");
  const uint32_t key_bytes = in.u32("the key length");
  if (key_bytes > kMaxKeyBytes)
    fail(Errc::protocol, "hello message names a job key of " + std::to_string(key_bytes) +
                             " bytes (at most " + std::to_string(kMaxKeyBytes) + ")");
  out.key = in.bytes(key_bytes, "the job key");
  in.expect_end();
  return out;
}

Gather parse_gather(std::span<const std::byte> payload) {
  Reader in(payload, "gather");
  Gather out;
  out.seq = in.u64("the sequence number");
  out.blob = in.rest();
  return out;
}

Result parse_result(std::span<const std::byte> payload) {
  Reader in(payload, "result");
  Result out;
  out.seq = in.u64("the sequence number");
  const uint32_t count = in.u32("the blob count");
  // Each blob takes at least its 8-byte length: a count the payload cannot hold is refused
  // before anything is allocated for it.
  if (count > in.left() / 8)
    fail(Errc::protocol, "result message announces " + std::to_string(count) + " blobs in " +
                             std::to_string(in.left()) + " bytes");
  out.blobs.resize(count);
  for (auto& blob : out.blobs) {
    const auto bytes = in.bytes(in.u64("a blob length"), "a blob");
    blob.assign(bytes.begin(), bytes.end());
  }
  in.expect_end();
  return out;
}

Failure parse_error(std::span<const std::byte> payload) {
  Reader in(payload, "error");
  Failure out;
  const uint32_t code = in.u32("the error code");
  if (code >= 1 && code <= static_cast<uint32_t>(Errc::internal)) out.code = static_cast<Errc>(code);
  const auto text = in.rest();
  out.message.assign(reinterpret_cast<const char*>(text.data()), text.size());
  return out;
}

Blob encode_hello(uint32_t rank, uint32_t size, std::span<const std::byte> key) {
  Blob out = start(MsgType::hello, 12 + key.size());
  put_le(out, rank, 4);
  put_le(out, size, 4);
  put_le(out, key.size(), 4);
  put_bytes(out, key);
  return finish(std::move(out));
}

Blob encode_gather(uint64_t seq, std::span<const std::byte> blob) {
  Blob out = start(MsgType::gather, 8 + blob.size());
  put_le(out, seq, 8);
  put_bytes(out, blob);
  return finish(std::move(out));
}

uint64_t result_payload_bytes(std::span<const Blob> blobs) {
  uint64_t total = 8 + 4;  // sequence number, count
  for (const auto& blob : blobs) total += 8 + blob.size();
  return total;
}

Blob encode_result(uint64_t seq, std::span<const Blob> blobs) {
  Blob out = start(MsgType::result, static_cast<size_t>(result_payload_bytes(blobs)));
  put_le(out, seq, 8);
  put_le(out, blobs.size(), 4);
  for (const auto& blob : blobs) {
    put_le(out, blob.size(), 8);
    put_bytes(out, blob);
  }
  return finish(std::move(out));
}

Blob encode_error(Errc code, const std::string& message) {
  Blob out = start(MsgType::error, 4 + message.size());
  put_le(out, static_cast<uint32_t>(code), 4);
  put_bytes(out, std::as_bytes(std::span(message)));
  return finish(std::move(out));
}

Blob encode_empty(MsgType type) { return finish(start(type)); }

}  // namespace pcoll::bootstrap::wire
