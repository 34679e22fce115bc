// The TCP store: wire format, server (one poll() loop on its own thread), client, and the
// Bootstrap built on them. See tcp_store.hpp for the liveness rules.
//
// Wire format: every message is a 16-byte little-endian header {magic "PCST", version,
// type, payload length} followed by the payload. Until a connection has presented the job
// key (HELLO) it may send nothing else and at most kMaxHelloBytes, so an unauthenticated
// peer can neither make the store allocate much nor learn anything about the job.
#include "tcp_store.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <optional>
#include <thread>
#include <utility>

#include "env.hpp"
#include "error.hpp"
#include "log.hpp"

namespace pcoll::bootstrap {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr uint32_t kMagic = 0x54534350;  // "PCST" in little-endian byte order
constexpr uint16_t kVersion = 1;
constexpr size_t kHeaderBytes = 16;
constexpr size_t kMaxHelloBytes = 4096;
constexpr size_t kMaxKeyBytes = 1024;
constexpr size_t kMaxGatherBytes = kMaxStoreBlobBytes + 8;
// A result carries every rank's blob; refuse jobs whose allgather would exceed this.
constexpr uint64_t kMaxResultBytes = uint64_t{1} << 32;
// Connections that have not said HELLO yet; more are closed at once (connection floods).
constexpr size_t kMaxUnauthenticated = 64;

enum class MsgType : uint16_t {
  hello = 1,    // client: rank, size, job key
  welcome = 2,  // server: hello accepted
  gather = 3,   // client: sequence number, blob
  result = 4,   // server: sequence number, every rank's blob
  error = 5,    // server: Errc, message; the client throws it
  ping = 6,     // server: still alive, still waiting for others
  bye = 7,      // client: done, closing (a clean exit, not a crash)
};

bool known_type(uint16_t type) { return type >= 1 && type <= 7; }

std::string errno_text(int err) { return std::strerror(err); }

// Owns one file descriptor.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// --- Encoding helpers (explicit little-endian so hosts of any byte order interoperate).

void put_u16(Blob& out, uint16_t v) {
  for (int i = 0; i < 2; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}
void put_u32(Blob& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}
void put_u64(Blob& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}
void put_bytes(Blob& out, std::span<const std::byte> bytes) {
  out.insert(out.end(), bytes.begin(), bytes.end());
}

uint64_t load_le(std::span<const std::byte> in, size_t pos, size_t bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(in[pos + i]) << (8 * i);
  return v;
}

// Bounds-checked reader over a payload; running off the end is Errc::protocol.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  uint32_t u32() { return static_cast<uint32_t>(take_le(4)); }
  uint64_t u64() { return take_le(8); }
  std::span<const std::byte> bytes(uint64_t n) {
    if (n > in_.size() - pos_) fail(Errc::protocol, "truncated store message");
    auto out = in_.subspan(pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return out;
  }
  std::span<const std::byte> rest() { return bytes(in_.size() - pos_); }
  bool done() const { return pos_ == in_.size(); }

 private:
  uint64_t take_le(size_t n) {
    if (n > in_.size() - pos_) fail(Errc::protocol, "truncated store message");
    const uint64_t v = load_le(in_, pos_, n);
    pos_ += n;
    return v;
  }
  std::span<const std::byte> in_;
  size_t pos_ = 0;
};

// A frame with its header; the payload is appended by the caller, then finish() sets the
// length.
Blob start_frame(MsgType type) {
  Blob out;
  put_u32(out, kMagic);
  put_u16(out, kVersion);
  put_u16(out, static_cast<uint16_t>(type));
  put_u64(out, 0);
  return out;
}
void finish_frame(Blob& frame) {
  const uint64_t length = frame.size() - kHeaderBytes;
  for (int i = 0; i < 8; ++i) frame[8 + i] = static_cast<std::byte>(length >> (8 * i));
}

Blob error_frame(Errc code, const std::string& message) {
  Blob out = start_frame(MsgType::error);
  put_u32(out, static_cast<uint32_t>(code));
  put_bytes(out, std::as_bytes(std::span(message)));
  finish_frame(out);
  return out;
}

struct Header {
  uint32_t magic;
  uint16_t version;
  uint16_t type;
  uint64_t length;
};
Header parse_header(std::span<const std::byte> in) {
  return {static_cast<uint32_t>(load_le(in, 0, 4)), static_cast<uint16_t>(load_le(in, 4, 2)),
          static_cast<uint16_t>(load_le(in, 6, 2)), load_le(in, 8, 8)};
}

// Compares in time that depends only on the lengths, so a peer cannot guess the key byte by
// byte from response times.
bool constant_time_equal(std::span<const std::byte> a, std::span<const std::byte> b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < n; ++i) {
    const auto x = i < a.size() ? static_cast<unsigned>(a[i]) : 0u;
    const auto y = i < b.size() ? static_cast<unsigned>(b[i]) : 0u;
    diff |= x ^ y;
  }
  return diff == 0;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

std::string peer_name(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  char host[NI_MAXHOST] = "?";
  char port[NI_MAXSERV] = "?";
  ::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, port, sizeof port,
                NI_NUMERICHOST | NI_NUMERICSERV);
  return std::string(host) + ":" + port;
}

void set_nodelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // best effort: latency only
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1000));
}

}  // namespace

// ------------------------------------------------------------------------------------------
// Addresses and keys

std::string StoreAddress::text() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

StoreAddress parse_store_address(const std::string& text, const std::string& variable) {
  const std::string form = " (expected host:port or [ipv6]:port, port 1-65535)";
  std::string host;
  std::string port;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':')
      invalid_argument(variable + "='" + text + "' is not an address" + form);
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string::npos)
      invalid_argument(variable + "='" + text + "' has no port" + form);
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string::npos)
      invalid_argument(variable + "='" + text + "': write IPv6 addresses in brackets" + form);
  }
  if (host.empty()) invalid_argument(variable + "='" + text + "' has no host" + form);
  StoreAddress out;
  out.host = host;
  try {
    out.port = static_cast<uint16_t>(env::parse_u64(port, variable + " port", 1, 65535));
  } catch (const Error&) {
    invalid_argument(variable + "='" + text + "' has a bad port '" + port + "'" + form);
  }
  return out;
}

std::string make_job_key() {
  std::byte raw[32];
  size_t got = 0;
  while (got < sizeof raw) {
    const ssize_t n = ::getrandom(raw + got, sizeof raw - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(Errc::internal, "getrandom() failed: " + errno_text(errno));
    }
    got += static_cast<size_t>(n);
  }
  static const char digits[] = "0123456789abcdef";
  std::string key;
  for (std::byte b : raw) {
    key += digits[static_cast<unsigned>(b) >> 4];
    key += digits[static_cast<unsigned>(b) & 15];
  }
  return key;
}

// ------------------------------------------------------------------------------------------
// Server

namespace {

struct Connection {
  UniqueFd fd;
  std::string peer;  // "host:port" for logs
  int rank = -1;     // set once HELLO is accepted
  Clock::time_point hello_deadline;
  Blob in;
  size_t in_offset = 0;  // parsed prefix of `in`
  std::deque<std::shared_ptr<const Blob>> out;
  size_t out_offset = 0;  // bytes of out.front() already sent
  bool closing = false;   // send what is queued, then half-close and wait for the peer's EOF
  bool write_shut = false;
  Clock::time_point close_deadline;
  bool dead = false;
};

enum class RankState { absent, connected, left, lost };

struct RankSlot {
  RankState state = RankState::absent;
  Connection* conn = nullptr;
  bool arrived = false;  // contributed to the pending collective
  Blob blob;
};

}  // namespace

struct StoreServer::Impl {
  StoreServerConfig config;
  UniqueFd listen_fd;
  UniqueFd wake_fd;
  uint16_t port = 0;
  std::atomic<bool> stopping{false};
  std::thread thread;

  // Everything below is touched by the server thread only.
  std::vector<std::unique_ptr<Connection>> conns;
  std::vector<RankSlot> ranks;
  uint64_t seq = 0;    // the pending / next collective
  int arrived = 0;     // contributions to it so far
  Clock::time_point collective_deadline;
  Clock::time_point next_ping;
  std::optional<std::pair<Errc, std::string>> failure;  // the job is broken; said to everyone

  explicit Impl(const StoreServerConfig& c) : config(c), ranks(static_cast<size_t>(c.size)) {}

  milliseconds ping_interval() const {
    return std::clamp(config.timeout / 4, milliseconds(10), milliseconds(1000));
  }

  void listen() {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    const std::string port_text = std::to_string(config.port);
    const std::string where = config.bind_host + ":" + port_text;
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(config.bind_host.c_str(), port_text.c_str(), &hints, &found);
    if (rc != 0) fail(Errc::bootstrap, "store: cannot resolve '" + config.bind_host + "': " + gai_strerror(rc));
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, ::freeaddrinfo);
    int last_err = 0;
    for (bool wildcard : {false, true}) {
      for (addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
        UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        if (!fd) {
          last_err = errno;
          continue;
        }
        const int one = 1;
        ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_storage addr{};
        std::memcpy(&addr, ai->ai_addr, ai->ai_addrlen);
        if (wildcard) {
          // The host name is not an address of this machine (NAT, DNS alias): listen on all
          // interfaces at that port instead; the job key still guards the store.
          if (addr.ss_family == AF_INET)
            reinterpret_cast<sockaddr_in*>(&addr)->sin_addr.s_addr = htonl(INADDR_ANY);
          else
            reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr = in6addr_any;
        }
        if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), ai->ai_addrlen) != 0 ||
            ::listen(fd.get(), 512) != 0) {
          last_err = errno;
          continue;
        }
        sockaddr_storage bound{};
        socklen_t len = sizeof bound;
        ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len);
        port = ntohs(bound.ss_family == AF_INET
                         ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                         : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
        listen_fd = std::move(fd);
        if (wildcard)
          log::info("store: " + config.bind_host + " is not a local address; listening on all "
                    "interfaces, port " + std::to_string(port));
        return;
      }
      if (last_err != EADDRNOTAVAIL) break;
    }
    fail(Errc::bootstrap, "store: cannot listen on " + where + ": " + errno_text(last_err) +
                              (last_err == EADDRINUSE ? " (pick another port in PCOLL_ROOT)" : ""));
  }

  // --- Sending.

  void send(Connection& c, std::shared_ptr<const Blob> frame) {
    if (c.dead || c.write_shut) return;
    c.out.push_back(std::move(frame));
    flush(c);
  }
  void send(Connection& c, Blob frame) { send(c, std::make_shared<const Blob>(std::move(frame))); }

  void flush(Connection& c) {
    while (!c.dead && !c.out.empty()) {
      const Blob& front = *c.out.front();
      const ssize_t n = ::send(c.fd.get(), front.data() + c.out_offset,
                               front.size() - c.out_offset, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        drop(c, "send failed: " + errno_text(errno));
        return;
      }
      c.out_offset += static_cast<size_t>(n);
      if (c.out_offset == front.size()) {
        c.out.pop_front();
        c.out_offset = 0;
      }
    }
    if (!c.dead && c.closing && c.out.empty() && !c.write_shut) {
      ::shutdown(c.fd.get(), SHUT_WR);
      c.write_shut = true;
    }
  }

  // --- Closing.

  // The connection is gone (EOF, error). A rank that disappears without BYE is lost, which
  // fails a collective that still needs it.
  void drop(Connection& c, const std::string& why) {
    if (c.dead) return;
    c.dead = true;
    release_rank(c, RankState::lost, why);
  }

  void release_rank(Connection& c, RankState how, const std::string& why) {
    if (c.rank < 0) return;
    const int r = c.rank;
    c.rank = -1;
    RankSlot& slot = ranks[static_cast<size_t>(r)];
    if (slot.conn != &c) return;
    slot.conn = nullptr;
    slot.state = how;
    // Only an error if a collective still needs the rank (fail_job below logs that).
    log::debug("store: rank " + std::to_string(r) + (how == RankState::lost ? " disconnected (" + why + ")" : " left"));
    if (arrived > 0 && !slot.arrived)
      fail_job(Errc::peer_failed,
               "rank " + std::to_string(r) +
                   (how == RankState::lost ? " disconnected from the store (did it exit or crash?)"
                                           : " left the job") +
                   " before joining bootstrap collective #" + std::to_string(seq));
  }

  // Refuses a connection: logs, tells the peer why, then half-closes once that is sent.
  void reject(Connection& c, Errc code, const std::string& why) {
    log::warn("store: rejected connection from " + c.peer +
              (c.rank >= 0 ? " (rank " + std::to_string(c.rank) + ")" : "") + ": " + why);
    release_rank(c, RankState::lost, why);
    c.in.clear();
    c.in_offset = 0;
    send(c, error_frame(code, why));
    c.closing = true;
    c.close_deadline = Clock::now() + std::min(config.timeout, milliseconds(2000));
    flush(c);
  }

  // --- Collectives.

  void fail_job(Errc code, const std::string& why) {
    if (!failure) {
      failure.emplace(code, why);
      log::error("store: " + why);
    }
    const auto frame = std::make_shared<const Blob>(error_frame(failure->first, failure->second));
    for (auto& slot : ranks) {
      if (slot.arrived && slot.conn != nullptr) send(*slot.conn, frame);
      slot.arrived = false;
      slot.blob = Blob();
    }
    arrived = 0;
  }

  void complete() {
    uint64_t total = 16;
    for (const auto& slot : ranks) total += 8 + slot.blob.size();
    if (total > kMaxResultBytes) {
      fail_job(Errc::invalid_argument, "bootstrap allgather #" + std::to_string(seq) + " of " +
                                           std::to_string(total) + " bytes exceeds the store's limit");
      return;
    }
    Blob frame = start_frame(MsgType::result);
    frame.reserve(static_cast<size_t>(total) + kHeaderBytes);
    put_u64(frame, seq);
    put_u32(frame, static_cast<uint32_t>(ranks.size()));
    for (const auto& slot : ranks) {
      put_u64(frame, slot.blob.size());
      put_bytes(frame, slot.blob);
    }
    finish_frame(frame);
    const auto shared = std::make_shared<const Blob>(std::move(frame));
    for (auto& slot : ranks) {
      slot.arrived = false;
      slot.blob = Blob();
    }
    arrived = 0;
    ++seq;
    for (auto& slot : ranks)
      if (slot.conn != nullptr) send(*slot.conn, shared);
  }

  void on_gather(Connection& c, std::span<const std::byte> payload) {
    Reader in(payload);
    const uint64_t their_seq = in.u64();
    if (failure) {
      send(c, error_frame(failure->first, failure->second));
      return;
    }
    RankSlot& slot = ranks[static_cast<size_t>(c.rank)];
    if (their_seq != seq || slot.arrived) {
      reject(c, Errc::protocol,
             "bootstrap collective #" + std::to_string(their_seq) + " out of sequence (the job is at #" +
                 std::to_string(seq) + "): do all ranks make the same allgather/barrier calls?");
      return;
    }
    if (arrived == 0) {
      collective_deadline = Clock::now() + config.timeout;
      next_ping = Clock::now() + ping_interval();
      std::vector<int> gone;
      for (size_t r = 0; r < ranks.size(); ++r)
        if (ranks[r].state == RankState::left || ranks[r].state == RankState::lost)
          gone.push_back(static_cast<int>(r));
      if (!gone.empty()) {
        slot.arrived = true;
        arrived = 1;
        fail_job(Errc::peer_failed, rank_list(gone) + " already left the job; bootstrap collective #" +
                                        std::to_string(seq) + " cannot complete");
        return;
      }
    }
    const auto blob = in.rest();
    slot.blob.assign(blob.begin(), blob.end());
    slot.arrived = true;
    if (++arrived == static_cast<int>(ranks.size())) complete();
  }

  void on_hello(Connection& c, std::span<const std::byte> payload) {
    Reader in(payload);
    const uint32_t rank = in.u32();
    const uint32_t size = in.u32();
    const uint32_t key_bytes = in.u32();
    if (key_bytes > kMaxKeyBytes) fail(Errc::protocol, "job key too long");
    const auto key = in.bytes(key_bytes);
    if (!in.done()) fail(Errc::protocol, "trailing bytes after hello");
    // Key first: nothing about the job is revealed to a peer without it.
    if (!constant_time_equal(key, std::as_bytes(std::span(config.job_key)))) {
      reject(c, Errc::invalid_argument, "PCOLL_JOB_KEY does not match this job's key");
      return;
    }
    if (size != static_cast<uint32_t>(config.size)) {
      reject(c, Errc::invalid_argument, "PCOLL_SIZE=" + std::to_string(size) + " but the job has " +
                                            std::to_string(config.size) + " ranks");
      return;
    }
    if (rank >= size) {
      reject(c, Errc::invalid_argument, "PCOLL_RANK=" + std::to_string(rank) + " is not below PCOLL_SIZE=" +
                                            std::to_string(size));
      return;
    }
    RankSlot& slot = ranks[rank];
    if (slot.state != RankState::absent) {
      reject(c, Errc::invalid_argument,
             "PCOLL_RANK=" + std::to_string(rank) +
                 (slot.state == RankState::connected
                      ? " is already taken by " + slot.conn->peer + " (two processes with the same rank?)"
                      : " already joined and left; a rank cannot join twice"));
      return;
    }
    c.rank = static_cast<int>(rank);
    slot.state = RankState::connected;
    slot.conn = &c;
    log::debug("store: rank " + std::to_string(rank) + " connected from " + c.peer);
    Blob frame = start_frame(MsgType::welcome);
    finish_frame(frame);
    send(c, std::move(frame));
  }

  void on_message(Connection& c, MsgType type, std::span<const std::byte> payload) {
    if (c.rank < 0) {
      if (type != MsgType::hello) {
        reject(c, Errc::protocol, "message type " + std::to_string(static_cast<int>(type)) + " before hello");
        return;
      }
      on_hello(c, payload);
      return;
    }
    switch (type) {
      case MsgType::gather: on_gather(c, payload); return;
      case MsgType::bye:
        release_rank(c, RankState::left, "bye");
        c.closing = true;
        c.close_deadline = Clock::now() + std::min(config.timeout, milliseconds(2000));
        flush(c);
        return;
      default:
        reject(c, Errc::protocol, "unexpected message type " + std::to_string(static_cast<int>(type)));
    }
  }

  // Parses whole messages out of c.in; rejects bad headers as soon as they are complete, so
  // an oversized length is refused before its payload is buffered.
  void parse(Connection& c) {
    while (!c.dead && !c.closing && c.in.size() - c.in_offset >= kHeaderBytes) {
      const auto avail = std::span<const std::byte>(c.in).subspan(c.in_offset);
      const Header h = parse_header(avail);
      if (h.magic != kMagic) {
        reject(c, Errc::protocol, "not a pcoll store message (bad magic)");
        return;
      }
      if (h.version != kVersion) {
        reject(c, Errc::protocol, "store protocol version " + std::to_string(h.version) +
                                      " (this store speaks " + std::to_string(kVersion) + ")");
        return;
      }
      if (!known_type(h.type)) {
        reject(c, Errc::protocol, "unknown message type " + std::to_string(h.type));
        return;
      }
      const uint64_t limit = c.rank < 0 ? kMaxHelloBytes : kMaxGatherBytes;
      if (h.length > limit) {
        reject(c, Errc::protocol, "message of " + std::to_string(h.length) + " bytes exceeds the limit of " +
                                      std::to_string(limit));
        return;
      }
      if (avail.size() < kHeaderBytes + h.length) {
        c.in.reserve(c.in_offset + kHeaderBytes + static_cast<size_t>(h.length));
        break;
      }
      const auto payload = avail.subspan(kHeaderBytes, static_cast<size_t>(h.length));
      c.in_offset += kHeaderBytes + static_cast<size_t>(h.length);
      try {
        on_message(c, static_cast<MsgType>(h.type), payload);
      } catch (const Error& e) {
        reject(c, Errc::protocol, std::string("malformed message: ") + e.what());
        return;
      }
    }
    if (c.in_offset > 0 && c.in_offset == c.in.size()) {
      c.in.clear();
      c.in_offset = 0;
    } else if (c.in_offset > (size_t{1} << 20)) {
      c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(c.in_offset));
      c.in_offset = 0;
    }
  }

  void on_readable(Connection& c) {
    std::byte buffer[65536];
    while (!c.dead) {
      const ssize_t n = ::recv(c.fd.get(), buffer, sizeof buffer, 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        drop(c, errno_text(errno));
        return;
      }
      if (n == 0) {
        drop(c, "connection closed");
        return;
      }
      if (c.closing) continue;  // after a reject or bye: discard until the peer closes
      c.in.insert(c.in.end(), buffer, buffer + n);
      parse(c);
    }
  }

  void accept_all() {
    for (;;) {
      UniqueFd fd(::accept4(listen_fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!fd) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
          log::warn("store: accept failed: " + errno_text(errno));
        return;
      }
      const size_t pending = static_cast<size_t>(std::count_if(
          conns.begin(), conns.end(), [](const auto& c) { return c->rank < 0 && !c->closing; }));
      auto c = std::make_unique<Connection>();
      c->peer = peer_name(fd.get());
      if (pending >= kMaxUnauthenticated) {
        log::warn("store: refused connection from " + c->peer + ": too many unauthenticated connections");
        continue;  // fd closes here
      }
      set_nodelay(fd.get());
      c->fd = std::move(fd);
      c->hello_deadline = Clock::now() + config.timeout;
      conns.push_back(std::move(c));
    }
  }

  void on_timers() {
    const auto now = Clock::now();
    for (auto& c : conns) {
      if (c->dead) continue;
      if (c->closing && now >= c->close_deadline) {
        c->dead = true;
      } else if (!c->closing && c->rank < 0 && now >= c->hello_deadline) {
        reject(*c, Errc::timeout, "no hello within " + std::to_string(config.timeout.count()) + " ms");
      }
    }
    if (arrived > 0 && now >= collective_deadline) {
      std::vector<int> absent;
      std::vector<int> slow;
      std::vector<int> waiting;
      for (size_t r = 0; r < ranks.size(); ++r) {
        if (ranks[r].arrived) waiting.push_back(static_cast<int>(r));
        else if (ranks[r].state == RankState::absent) absent.push_back(static_cast<int>(r));
        else slow.push_back(static_cast<int>(r));
      }
      if (!absent.empty()) {
        fail_job(Errc::timeout, rank_list(absent) + " did not connect to the store within " +
                                    std::to_string(config.timeout.count()) +
                                    " ms (PCOLL_TIMEOUT_MS); " + rank_list(waiting) +
                                    " waited in bootstrap collective #" + std::to_string(seq));
      } else {
        // Connected ranks are alive; their application is just not there yet.
        log::warn("store: bootstrap collective #" + std::to_string(seq) + " still waits for " +
                  rank_list(slow) + " (connected, not yet called)");
        collective_deadline = now + config.timeout;
      }
    }
    if (arrived > 0 && now >= next_ping) {
      Blob ping = start_frame(MsgType::ping);
      finish_frame(ping);
      const auto frame = std::make_shared<const Blob>(std::move(ping));
      for (auto& slot : ranks)
        if (slot.arrived && slot.conn != nullptr && slot.conn->out.empty()) send(*slot.conn, frame);
      next_ping = now + ping_interval();
    }
  }

  int poll_timeout_ms() const {
    auto next = Clock::now() + milliseconds(1000);
    for (const auto& c : conns) {
      if (c->closing) next = std::min(next, c->close_deadline);
      else if (c->rank < 0) next = std::min(next, c->hello_deadline);
    }
    if (arrived > 0) next = std::min({next, collective_deadline, next_ping});
    return remaining_ms(next);
  }

  void run() {
    std::optional<Clock::time_point> drain_deadline;
    for (;;) {
      if (stopping.load() && !drain_deadline) {
        // Stop taking new connections; give the connected ones time to read their last
        // answers and close their end, so nobody sees a reset instead of a result. After a
        // failure the ranks are still answered until each leaves: one that comes to the
        // failed collective late must hear what failed, not that the store went away.
        drain_deadline = Clock::now() + std::min(config.timeout, milliseconds(5000));
        listen_fd.reset();
        for (auto& c : conns) {
          if (failure && c->rank >= 0) continue;
          c->closing = true;
          c->close_deadline = *drain_deadline;
          flush(*c);
        }
      }
      if (drain_deadline && (conns.empty() || Clock::now() >= *drain_deadline)) return;

      std::vector<pollfd> fds;
      fds.push_back({wake_fd.get(), POLLIN, 0});
      if (listen_fd) fds.push_back({listen_fd.get(), POLLIN, 0});
      const size_t first_conn = fds.size();
      for (const auto& c : conns)
        fds.push_back({c->fd.get(), static_cast<short>(POLLIN | (c->out.empty() ? 0 : POLLOUT)), 0});
      const int ready = ::poll(fds.data(), fds.size(), poll_timeout_ms());
      if (ready < 0 && errno != EINTR) {
        log::error("store: poll failed: " + errno_text(errno));
        return;
      }
      if (ready > 0) {
        if (fds[0].revents & POLLIN) {
          uint64_t count = 0;
          [[maybe_unused]] const ssize_t n = ::read(wake_fd.get(), &count, sizeof count);
        }
        if (listen_fd && (fds[1].revents & POLLIN)) accept_all();
        // accept_all() may have appended connections; they are polled next time.
        for (size_t i = first_conn; i < fds.size(); ++i) {
          Connection& c = *conns[i - first_conn];
          if (fds[i].revents & POLLOUT) flush(c);
          if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) on_readable(c);
        }
      }
      on_timers();
      std::erase_if(conns, [this](const std::unique_ptr<Connection>& c) {
        if (!c->dead) return false;
        release_rank(*c, RankState::lost, "closed");
        return true;
      });
    }
  }
};

StoreServer::StoreServer(const StoreServerConfig& config) : impl_(std::make_unique<Impl>(config)) {
  if (config.size < 1) invalid_argument("store: job size must be at least 1");
  impl_->listen();
  impl_->wake_fd = UniqueFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!impl_->wake_fd) fail(Errc::bootstrap, "store: eventfd failed: " + errno_text(errno));
  impl_->thread = std::thread([impl = impl_.get()] {
    try {
      impl->run();
    } catch (const std::exception& e) {
      log::error(std::string("store: server stopped: ") + e.what());
    }
  });
}

StoreServer::~StoreServer() { stop(); }

uint16_t StoreServer::port() const { return impl_->port; }

void StoreServer::stop() {
  if (!impl_ || !impl_->thread.joinable()) return;
  impl_->stopping.store(true);
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(impl_->wake_fd.get(), &one, sizeof one);
  impl_->thread.join();
}

// ------------------------------------------------------------------------------------------
// Client

struct StoreClient::Impl {
  StoreAddress address;
  int rank = 0;
  int size = 1;
  milliseconds timeout;
  UniqueFd fd;
  uint64_t seq = 0;
  std::optional<Error> broken;  // after a failure every later call reports it again
  std::string resolve_error;    // last temporary name-resolution failure while connecting

  std::string where() const { return "the store at " + address.text() + " (PCOLL_ROOT)"; }

  void connect_once(Clock::time_point deadline, int& last_err) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const std::string port = std::to_string(address.port);
    const int rc = ::getaddrinfo(address.host.c_str(), port.c_str(), &hints, &found);
    if (rc == EAI_AGAIN) {  // no answer from DNS yet: retry, but name PCOLL_ROOT if it persists
      resolve_error = gai_strerror(rc);
      return;
    }
    resolve_error.clear();
    if (rc != 0)
      invalid_argument("PCOLL_ROOT='" + address.text() + "': cannot resolve host '" + address.host +
                       "': " + gai_strerror(rc));
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, ::freeaddrinfo);
    for (addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
      UniqueFd s(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      if (!s) {
        last_err = errno;
        continue;
      }
      if (::connect(s.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
          last_err = errno;
          continue;
        }
        pollfd p{s.get(), POLLOUT, 0};
        int ready = 0;
        do ready = ::poll(&p, 1, std::max(1, remaining_ms(deadline)));
        while (ready < 0 && errno == EINTR);
        int err = ETIMEDOUT;
        socklen_t len = sizeof err;
        if (ready > 0) ::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          last_err = err;
          continue;
        }
      }
      set_nodelay(s.get());
      fd = std::move(s);
      return;
    }
  }

  void connect(const std::string& job_key) {
    const auto deadline = Clock::now() + timeout;
    int last_err = 0;
    auto backoff = milliseconds(5);
    for (;;) {
      connect_once(deadline, last_err);
      if (fd) break;
      if (Clock::now() >= deadline && !resolve_error.empty())
        invalid_argument("PCOLL_ROOT='" + address.text() + "': cannot resolve host '" + address.host +
                         "' within " + std::to_string(timeout.count()) + " ms: " + resolve_error);
      if (Clock::now() >= deadline)
        fail(Errc::timeout, "rank " + std::to_string(rank) + " could not reach " + where() + " within " +
                                std::to_string(timeout.count()) + " ms (PCOLL_TIMEOUT_MS): " +
                                errno_text(last_err) +
                                "; it is hosted by pcollrun, or in manual mode by rank 0: did rank 0 start?");
      std::this_thread::sleep_for(std::min(backoff, std::chrono::duration_cast<milliseconds>(
                                                        deadline - Clock::now() + milliseconds(1))));
      backoff = std::min(backoff * 2, milliseconds(200));
    }
    Blob hello = start_frame(MsgType::hello);
    put_u32(hello, static_cast<uint32_t>(rank));
    put_u32(hello, static_cast<uint32_t>(size));
    put_u32(hello, static_cast<uint32_t>(job_key.size()));
    put_bytes(hello, std::as_bytes(std::span(job_key)));
    finish_frame(hello);
    send_all(hello);
    const auto [type, payload] = receive();
    if (type != MsgType::welcome) fail(Errc::protocol, where() + " answered hello with message type " +
                                                            std::to_string(static_cast<int>(type)));
  }

  [[noreturn]] void closed() {
    fail(Errc::bootstrap, where() + " closed the connection (did pcollrun or rank 0 exit?)");
  }

  // Waits until fd is ready for `events`; a store that stays silent for `timeout` is dead.
  void wait_ready(short events) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      pollfd p{fd.get(), events, 0};
      const int ready = ::poll(&p, 1, remaining_ms(deadline));
      if (ready > 0) return;
      if (ready < 0 && errno != EINTR) fail(Errc::bootstrap, "poll on the store socket: " + errno_text(errno));
      if (Clock::now() >= deadline)
        fail(Errc::timeout, where() + " did not answer within " + std::to_string(timeout.count()) +
                                " ms (PCOLL_TIMEOUT_MS)");
    }
  }

  void send_all(std::span<const std::byte> bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd.get(), bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n >= 0) {
        sent += static_cast<size_t>(n);
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        wait_ready(POLLOUT);
      } else if (errno == EPIPE || errno == ECONNRESET) {
        closed();
      } else if (errno != EINTR) {
        fail(Errc::bootstrap, "send to " + where() + ": " + errno_text(errno));
      }
    }
  }

  void receive_exact(std::byte* out, size_t bytes) {
    size_t got = 0;
    while (got < bytes) {
      const ssize_t n = ::recv(fd.get(), out + got, bytes - got, 0);
      if (n > 0) {
        got += static_cast<size_t>(n);
      } else if (n == 0) {
        closed();
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        wait_ready(POLLIN);
      } else if (errno == ECONNRESET) {
        closed();
      } else if (errno != EINTR) {
        fail(Errc::bootstrap, "receive from " + where() + ": " + errno_text(errno));
      }
    }
  }

  // Next message other than ping; an error message is thrown as the store's Error.
  std::pair<MsgType, Blob> receive() {
    for (;;) {
      std::byte raw[kHeaderBytes];
      receive_exact(raw, sizeof raw);
      const Header h = parse_header(raw);
      const uint64_t limit = 16 + uint64_t(size) * (8 + kMaxStoreBlobBytes);
      if (h.magic != kMagic || h.version != kVersion || !known_type(h.type) || h.length > limit)
        fail(Errc::protocol, where() + " sent a malformed message (is PCOLL_ROOT a pcoll store?)");
      Blob payload(static_cast<size_t>(h.length));
      receive_exact(payload.data(), payload.size());
      const auto type = static_cast<MsgType>(h.type);
      if (type == MsgType::ping) continue;
      if (type == MsgType::error) {
        Reader in(payload);
        const uint32_t code = in.u32();
        const auto text = in.rest();
        const auto errc = code >= 1 && code <= static_cast<uint32_t>(Errc::internal)
                              ? static_cast<Errc>(code) : Errc::bootstrap;
        fail(errc, "bootstrap store: " + std::string(reinterpret_cast<const char*>(text.data()), text.size()));
      }
      return {type, std::move(payload)};
    }
  }

  std::vector<Blob> allgather(std::span<const std::byte> mine) {
    if (mine.size() > kMaxStoreBlobBytes)
      invalid_argument("bootstrap allgather of " + std::to_string(mine.size()) +
                       " bytes exceeds the store's limit of " + std::to_string(kMaxStoreBlobBytes));
    Blob frame = start_frame(MsgType::gather);
    frame.reserve(kHeaderBytes + 8 + mine.size());
    put_u64(frame, seq);
    put_bytes(frame, mine);
    finish_frame(frame);
    send_all(frame);
    const auto [type, payload] = receive();
    Reader in(payload);
    if (type != MsgType::result || in.u64() != seq)
      fail(Errc::protocol, where() + " answered bootstrap collective #" + std::to_string(seq) +
                               " out of order");
    const uint32_t count = in.u32();
    if (count != static_cast<uint32_t>(size))
      fail(Errc::protocol, where() + " returned " + std::to_string(count) + " blobs for " +
                               std::to_string(size) + " ranks");
    std::vector<Blob> out(count);
    for (auto& blob : out) {
      const auto bytes = in.bytes(in.u64());
      blob.assign(bytes.begin(), bytes.end());
    }
    ++seq;
    return out;
  }

  // Runs `op`; after any failure the connection is unusable and every later call repeats the
  // first error instead of misreading a half-received stream.
  template <class Op>
  auto guarded(Op&& op) {
    if (broken) throw *broken;
    try {
      return op();
    } catch (const Error& e) {
      broken.emplace(e);
      throw;
    }
  }
};

StoreClient::StoreClient(const StoreAddress& address, const std::string& job_key, int rank,
                         int size, milliseconds timeout)
    : impl_(std::make_unique<Impl>()) {
  impl_->address = address;
  impl_->rank = rank;
  impl_->size = size;
  impl_->timeout = timeout;
  impl_->connect(job_key);
}

StoreClient::~StoreClient() { leave(); }

std::vector<Blob> StoreClient::allgather(std::span<const std::byte> mine) {
  return impl_->guarded([&] { return impl_->allgather(mine); });
}

void StoreClient::barrier() {
  impl_->guarded([&] { impl_->allgather({}); });
}

void StoreClient::leave() noexcept {
  if (!impl_ || !impl_->fd) return;
  if (!impl_->broken) {
    try {
      Blob bye = start_frame(MsgType::bye);
      finish_frame(bye);
      impl_->send_all(bye);
      // Wait for the store's close so it reads our bye before our socket goes away.
      ::shutdown(impl_->fd.get(), SHUT_WR);
      const auto deadline = Clock::now() + std::min(impl_->timeout, milliseconds(2000));
      std::byte sink[256];
      while (Clock::now() < deadline) {
        pollfd p{impl_->fd.get(), POLLIN, 0};
        if (::poll(&p, 1, remaining_ms(deadline)) <= 0) continue;
        const ssize_t n = ::recv(impl_->fd.get(), sink, sizeof sink, 0);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break;
      }
    } catch (const Error&) {
      // The store is gone already: nothing to tell it.
    }
  }
  impl_->fd.reset();
}

// ------------------------------------------------------------------------------------------
// The Bootstrap

namespace {

class StoreBootstrap final : public Bootstrap {
 public:
  StoreBootstrap(int rank, int size, bool manual, std::unique_ptr<StoreServer> server,
                 std::unique_ptr<StoreClient> client)
      : rank_(rank), size_(size), manual_(manual), server_(std::move(server)), client_(std::move(client)) {}

  ~StoreBootstrap() override {
    if (manual_ && !abandoned_) {
      // Rank 0 hosts the store: nobody may leave (and rank 0 may not take the store down)
      // while another rank still needs it.
      try {
        client_->barrier();
      } catch (const Error& e) {
        log::warn(std::string("bootstrap: final barrier failed: ") + e.what());
      }
    }
    client_->leave();
    client_.reset();
    server_.reset();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return manual_ ? "manual" : "pcollrun"; }
  std::vector<Blob> allgather(std::span<const std::byte> mine) override { return client_->allgather(mine); }
  void barrier() override { client_->barrier(); }
  // A failed job: rank 0 may take the store down without waiting, and the others need it
  // no more (their own final barriers then end at once, the store being gone).
  void abandon() override { abandoned_ = true; }

 private:
  bool abandoned_ = false;
  int rank_;
  int size_;
  bool manual_;
  std::unique_ptr<StoreServer> server_;  // rank 0 in manual mode only
  std::unique_ptr<StoreClient> client_;
};

}  // namespace

std::unique_ptr<Bootstrap> make_store() {
  const auto need = [](const char* name) {
    auto value = env::get(name);
    if (!value)
      invalid_argument(std::string(name) + " is not set; the store bootstrap needs PCOLL_RANK, PCOLL_SIZE, "
                                           "PCOLL_ROOT=host:port and PCOLL_JOB_KEY (or run under pcollrun)");
    return *value;
  };
  const int size = static_cast<int>(env::parse_u64(need("PCOLL_SIZE"), "PCOLL_SIZE", 1, 1 << 20));
  const std::string rank_text = need("PCOLL_RANK");
  const uint64_t rank = env::parse_u64(rank_text, "PCOLL_RANK", 0, UINT32_MAX);
  if (rank >= static_cast<uint64_t>(size))
    invalid_argument("PCOLL_RANK=" + rank_text + " must be below PCOLL_SIZE=" + std::to_string(size));
  const StoreAddress root = parse_store_address(need("PCOLL_ROOT"), "PCOLL_ROOT");
  const std::string key = need("PCOLL_JOB_KEY");
  if (key.size() > kMaxKeyBytes)
    invalid_argument("PCOLL_JOB_KEY is longer than " + std::to_string(kMaxKeyBytes) + " bytes");
  const bool manual = env::get_choice("PCOLL_LAUNCHER", "manual", {"manual", "pcollrun"}) == "manual";
  const milliseconds timeout(env::default_timeout_ms());
  log::set_rank(static_cast<int>(rank));

  std::unique_ptr<StoreServer> server;
  if (manual && rank == 0) {
    StoreServerConfig config;
    config.bind_host = root.host;
    config.port = root.port;
    config.job_key = key;
    config.size = size;
    config.timeout = timeout;
    server = std::make_unique<StoreServer>(config);
  }
  auto client = std::make_unique<StoreClient>(root, key, static_cast<int>(rank), size, timeout);
  return std::make_unique<StoreBootstrap>(static_cast<int>(rank), size, manual, std::move(server),
                                          std::move(client));
}

}  // namespace pcoll::bootstrap
