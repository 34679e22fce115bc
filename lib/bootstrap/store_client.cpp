// The TCP store's client (store_client.hpp): PCOLL_ROOT addresses, connecting with retries,
// and blocking allgathers over the wire format of store_wire.hpp.
#include <bootstrap/store_client.hpp>

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <thread>
#include <utility>

#include <bootstrap/store_wire.hpp>
#include <support/env.hpp>
#include <support/error.hpp>
#include <support/fd.hpp>
#include <support/socket.hpp>

namespace pcoll::bootstrap {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using wire::MsgType;

// ------------------------------------------------------------------------------------------
// Addresses

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

// ------------------------------------------------------------------------------------------
// Client

struct StoreClient::Impl {
  StoreAddress address;
  int rank = 0;
  int size = 1;
  milliseconds timeout;
  Fd fd;
  uint64_t seq = 0;
  std::optional<Error> broken;  // after a failure every later call reports it again
  std::string resolve_error;    // last temporary name-resolution failure while connecting

  std::string where() const { return "the store at " + address.text() + " (PCOLL_ROOT)"; }

  void connect_once(Clock::time_point deadline, int& last_err) {
    const auto addresses = tcp::resolve(address.host, address.port, false);
    if (addresses.error == EAI_AGAIN) {  // no answer from DNS yet: retry, but name PCOLL_ROOT if it persists
      resolve_error = addresses.error_text();
      return;
    }
    resolve_error.clear();
    if (addresses.error != 0)
      invalid_argument("PCOLL_ROOT='" + address.text() + "': cannot resolve host '" + address.host +
                       "': " + addresses.error_text());
    fd = tcp::connect(addresses, deadline, last_err);
  }

  // Says hello on the fresh connection. False when the store closed it without an answer:
  // it drops connections that are late with their hello, and the oldest ones when a flood
  // of them reaches its limits (store_server.cpp); the rank then connects again.
  bool hello_answered(const std::string& job_key) {
    const Blob hello = wire::encode_hello(static_cast<uint32_t>(rank), static_cast<uint32_t>(size),
                                          std::as_bytes(std::span(job_key)));
    const IoResult sent = write_full(fd.get(), hello, timeout);
    if (sent.status == IoResult::Status::closed) return false;
    if (!sent.ok()) io_failed(sent, "send to ");
    const std::optional<Message> reply = receive_unless_closed();
    if (!reply) return false;
    if (reply->type != MsgType::welcome)
      fail(Errc::protocol, where() + " answered hello with message type " +
                               std::to_string(static_cast<int>(reply->type)));
    return true;
  }

  void connect(const std::string& job_key) {
    const auto deadline = Clock::now() + timeout;
    int last_err = 0;
    int unanswered = 0;  // connections the store closed before answering hello
    auto backoff = milliseconds(5);
    for (;;) {
      connect_once(deadline, last_err);
      if (fd && hello_answered(job_key)) return;
      if (fd) {
        fd.reset();
        ++unanswered;
        last_err = 0;
      }
      if (Clock::now() >= deadline && last_err == 0 && unanswered > 0)
        fail(Errc::bootstrap, where() + " closed the connection before answering hello, " +
                                  std::to_string(unanswered) + " times in " + std::to_string(timeout.count()) +
                                  " ms (PCOLL_TIMEOUT_MS): is it flooded with connections that never say hello?");
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
  }

  [[noreturn]] void closed() {
    fail(Errc::bootstrap, where() + " closed the connection (did pcollrun or rank 0 exit?)");
  }

  // Throws for a read or write that did not complete.
  [[noreturn]] void io_failed(const IoResult& r, const char* direction) {
    switch (r.status) {
      case IoResult::Status::closed: closed();
      case IoResult::Status::timeout:
        fail(Errc::timeout, where() + " did not answer within " + std::to_string(timeout.count()) +
                                " ms (PCOLL_TIMEOUT_MS)");
      default:
        if (std::string(r.call) == "poll")
          fail(Errc::bootstrap, "poll on the store socket: " + errno_text(r.error));
        fail(Errc::bootstrap, std::string(direction) + where() + ": " + errno_text(r.error));
    }
  }

  void send_all(std::span<const std::byte> bytes) {
    if (const IoResult r = write_full(fd.get(), bytes, timeout); !r.ok()) io_failed(r, "send to ");
  }

  void receive_exact(std::span<std::byte> bytes) {
    if (const IoResult r = read_full(fd.get(), bytes, timeout); !r.ok()) io_failed(r, "receive from ");
  }

  // Runs a payload parser; its Errc::protocol names the store.
  template <class Parse>
  auto checked(const char* message, Parse&& parse) {
    try {
      return parse();
    } catch (const Error& e) {
      fail(Errc::protocol, where() + " sent a malformed " + message + " message: " + e.what());
    }
  }

  struct Message {
    MsgType type;
    Blob payload;
  };

  // Next message other than ping; an error message is thrown as the store's Error.
  Message receive() {
    std::optional<Message> message = receive_unless_closed();
    if (!message) closed();
    return std::move(*message);
  }

  // The same, or nullopt when the store closed the connection before the next message.
  std::optional<Message> receive_unless_closed() {
    for (;;) {
      std::byte header[wire::kHeaderBytes];
      if (const IoResult r = read_full(fd.get(), header, timeout); !r.ok()) {
        if (r.status == IoResult::Status::closed) return std::nullopt;
        io_failed(r, "receive from ");
      }
      const auto parsed = wire::parse_frame(header, wire::max_result_payload(size));
      if (parsed.status == wire::FrameParse::Status::invalid)
        fail(Errc::protocol, where() + " sent a malformed message (" + parsed.error +
                                 "): is PCOLL_ROOT a pcoll store?");
      Blob payload(parsed.frame.bytes - wire::kHeaderBytes);
      receive_exact(payload);
      if (parsed.frame.type == MsgType::ping) continue;
      if (parsed.frame.type == MsgType::error) {
        const wire::Failure failure = checked("error", [&] { return wire::parse_error(payload); });
        fail(failure.code, "bootstrap store: " + failure.message);
      }
      return Message{parsed.frame.type, std::move(payload)};
    }
  }

  std::vector<Blob> allgather(std::span<const std::byte> mine) {
    if (mine.size() > kMaxStoreBlobBytes)
      invalid_argument("bootstrap allgather of " + std::to_string(mine.size()) +
                       " bytes exceeds the store's limit of " + std::to_string(kMaxStoreBlobBytes));
    send_all(wire::encode_gather(seq, mine));
    // A named struct, not a structured binding: C++20 lets a lambda capture a binding, but
    // clang implements that only from version 16 and the fuzz build (scripts/fuzz.sh) uses 14.
    const Message reply = receive();
    if (reply.type != MsgType::result)
      fail(Errc::protocol, where() + " answered bootstrap collective #" + std::to_string(seq) +
                               " with message type " + std::to_string(static_cast<int>(reply.type)));
    wire::Result result = checked("result", [&] { return wire::parse_result(reply.payload); });
    if (result.seq != seq)
      fail(Errc::protocol, where() + " answered bootstrap collective #" + std::to_string(seq) +
                               " out of order");
    if (result.blobs.size() != static_cast<size_t>(size))
      fail(Errc::protocol, where() + " returned " + std::to_string(result.blobs.size()) + " blobs for " +
                               std::to_string(size) + " ranks");
    ++seq;
    return std::move(result.blobs);
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

  // Says bye and waits for the store's close, so it reads our bye before our socket goes.
  void say_bye() {
    send_all(wire::encode_empty(MsgType::bye));
    ::shutdown(fd.get(), SHUT_WR);
    const auto deadline = Clock::now() + std::min(timeout, milliseconds(2000));
    std::byte sink[256];
    while (Clock::now() < deadline) {
      pollfd p{fd.get(), POLLIN, 0};
      if (::poll(&p, 1, poll_timeout_ms(deadline)) <= 0) continue;
      const ssize_t n = ::recv(fd.get(), sink, sizeof sink, 0);
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break;
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
      impl_->say_bye();
    } catch (const Error&) {
      // The store is gone already: nothing to tell it.
    }
  }
  impl_->fd.reset();
}

}  // namespace pcoll::bootstrap
