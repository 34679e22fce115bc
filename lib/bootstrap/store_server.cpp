// The TCP store's server (store_server.hpp), in three pieces:
//  - Connection: one client's socket, unparsed input and queued output;
//  - Job: who joined, and the pending allgather with its deadline, pings and failure. It
//    knows nothing of sockets: it sends through the Outbox interface;
//  - StoreServer::Impl: the poll() loop -- accepting, reading and framing messages,
//    sending, rejecting and closing connections, and the timers.
// Until a connection has presented the job key (hello) it may send nothing else and at most
// wire::kMaxHelloBytes, so an unauthenticated peer can neither make the store allocate much
// nor learn anything about the job. Such connections are few and short-lived: each must say
// hello within hello_deadline(), each source address may hold kMaxUnauthenticatedPerSource
// of them and all sources kMaxUnauthenticated; a new connection beyond a limit makes room by
// dropping the oldest one (after reading what it sent: a rank whose hello is already here is
// admitted). An attacker holding connections open thus only ever loses its own, a rank it
// pushes out before its hello reconnects (store_client.cpp), and the store's fds and memory
// stay bounded whatever its clients do. docs/reliability.md ("The store under hostile
// clients") has the limits and the tests.
#include <bootstrap/store_server.hpp>

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <deque>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <bootstrap/store_wire.hpp>
#include <support/error.hpp>
#include <support/fd.hpp>
#include <support/log.hpp>
#include <support/socket.hpp>

namespace pcoll::bootstrap {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using wire::MsgType;

// Connections that have not said hello yet, per source address and in all (see above).
constexpr size_t kMaxUnauthenticatedPerSource = 16;
constexpr size_t kMaxUnauthenticated = 256;
// Connections accepted per pass of the loop, so a flood cannot keep the loop from serving.
constexpr size_t kMaxAcceptsPerPass = 64;
constexpr int kListenBacklog = 512;

// How long a new connection may take to say hello. A rank sends it right after connecting,
// so this is short, and a rank dropped for being late reconnects.
milliseconds hello_deadline(milliseconds timeout) { return std::min(timeout, milliseconds(2000)); }

// How long a connection being closed gets to read what was sent to it.
milliseconds close_grace(milliseconds timeout) { return std::min(timeout, milliseconds(2000)); }

using Frame = std::shared_ptr<const Blob>;

Frame share(Blob frame) { return std::make_shared<const Blob>(std::move(frame)); }

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

// ------------------------------------------------------------------------------------------
// Connection

struct Connection {
  Fd fd;
  std::string peer;    // "host:port" for logs
  std::string source;  // the peer's address without the port: whom the limits count
  int rank = -1;       // set once hello is accepted; -1 again once the rank left
  bool admitted = false;  // its hello was accepted
  Clock::time_point hello_deadline;
  Blob in;
  size_t in_offset = 0;  // parsed prefix of `in`
  std::deque<Frame> out;
  size_t out_offset = 0;  // bytes of out.front() already sent
  bool closing = false;   // send what is queued, then half-close and wait for the peer's EOF
  bool write_shut = false;
  Clock::time_point close_deadline;
  bool dead = false;

  std::span<const std::byte> unparsed() const { return std::span<const std::byte>(in).subspan(in_offset); }

  // Frees what was parsed: all of it when everything was, or the prefix once it is large.
  void compact_input() {
    if (in_offset > 0 && in_offset == in.size()) {
      in.clear();
      in_offset = 0;
    } else if (in_offset > (size_t{1} << 20)) {
      in.erase(in.begin(), in.begin() + static_cast<ptrdiff_t>(in_offset));
      in_offset = 0;
    }
  }

  // Sends queued output until the socket would block, then half-closes if closing and all
  // is sent. Returns 0, or the errno that makes the connection unusable.
  int write_queued() {
    while (!out.empty()) {
      const Blob& front = *out.front();
      const ssize_t n = ::send(fd.get(), front.data() + out_offset, front.size() - out_offset, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
        return errno;
      }
      out_offset += static_cast<size_t>(n);
      if (out_offset == front.size()) {
        out.pop_front();
        out_offset = 0;
      }
    }
    if (closing && !write_shut) {
      ::shutdown(fd.get(), SHUT_WR);
      write_shut = true;
    }
    return 0;
  }
};

// Where the job's messages go: the server queues them on the connection and sends.
class Outbox {
 public:
  virtual void send(Connection& c, Frame frame) = 0;

 protected:
  ~Outbox() = default;
};

// ------------------------------------------------------------------------------------------
// Job

enum class RankState { absent, connected, left, lost };

struct RankSlot {
  RankState state = RankState::absent;
  Connection* conn = nullptr;
  std::chrono::steady_clock::time_point connected_at{};
  bool arrived = false;  // contributed to the pending collective
  Blob blob;
};

// Why a message is refused; the server tells the peer and closes the connection.
struct Refusal {
  Errc code;
  std::string why;
};

class Job {
 public:
  // A collective failed: the job is broken (every rank is told why).
  bool failed() const { return failure_.has_value(); }
  Job(const StoreServerConfig& config, Outbox& outbox)
      : config_(config), outbox_(outbox), ranks_(static_cast<size_t>(config.size)) {}

  // A hello from an unauthenticated connection: the key first, so that nothing about the
  // job is revealed to a peer without it; then size and rank.
  std::optional<Refusal> admit(Connection& c, const wire::Hello& hello) {
    if (!constant_time_equal(hello.key, std::as_bytes(std::span(config_.job_key))))
      return Refusal{Errc::invalid_argument, "PCOLL_JOB_KEY does not match this job's key"};
    if (hello.size != static_cast<uint32_t>(config_.size))
      return Refusal{Errc::invalid_argument, "PCOLL_SIZE=" + std::to_string(hello.size) + " but the job has " +
                                                 std::to_string(config_.size) + " ranks"};
    if (hello.rank >= hello.size)
      return Refusal{Errc::invalid_argument, "PCOLL_RANK=" + std::to_string(hello.rank) +
                                                 " is not below PCOLL_SIZE=" + std::to_string(hello.size)};
    RankSlot& slot = ranks_[hello.rank];
    if (slot.state != RankState::absent)
      return Refusal{Errc::invalid_argument,
                     "PCOLL_RANK=" + std::to_string(hello.rank) +
                         (slot.state == RankState::connected
                              ? " is already taken by " + slot.conn->peer + " (two processes with the same rank?)"
                              : " already joined and left; a rank cannot join twice")};
    c.rank = static_cast<int>(hello.rank);
    c.admitted = true;
    slot.state = RankState::connected;
    slot.connected_at = std::chrono::steady_clock::now();
    slot.conn = &c;
    log::debug("store: rank " + std::to_string(hello.rank) + " connected from " + c.peer);
    outbox_.send(c, share(wire::encode_empty(MsgType::welcome)));
    return std::nullopt;
  }

  // A rank's contribution to the pending collective.
  std::optional<Refusal> contribute(Connection& c, const wire::Gather& gather) {
    if (failure_) {
      outbox_.send(c, share(wire::encode_error(failure_->first, failure_->second)));
      return std::nullopt;
    }
    RankSlot& slot = ranks_[static_cast<size_t>(c.rank)];
    if (gather.seq != seq_ || slot.arrived)
      return Refusal{Errc::protocol, "bootstrap collective #" + std::to_string(gather.seq) +
                                         " out of sequence (the job is at #" + std::to_string(seq_) +
                                         "): do all ranks make the same allgather/barrier calls?"};
    if (arrived_ == 0 && !start_collective(slot)) return std::nullopt;
    slot.blob.assign(gather.blob.begin(), gather.blob.end());
    slot.arrived = true;
    if (++arrived_ == static_cast<int>(ranks_.size())) complete();
    return std::nullopt;
  }

  // The connection of `c`'s rank ended: a bye (left) or anything else (lost). A rank that
  // disappears fails a collective that still needs it.
  void release(Connection& c, RankState how, const std::string& why) {
    if (c.rank < 0) return;
    const int r = c.rank;
    c.rank = -1;
    RankSlot& slot = ranks_[static_cast<size_t>(r)];
    if (slot.conn != &c) return;
    slot.conn = nullptr;
    slot.state = how;
    // Only an error if a collective still needs the rank (fail below logs that).
    log::debug("store: rank " + std::to_string(r) + (how == RankState::lost ? " disconnected (" + why + ")" : " left"));
    if (arrived_ > 0 && !slot.arrived)
      fail(Errc::peer_failed,
           "rank " + std::to_string(r) +
               (how == RankState::lost ? " disconnected from the store (did it exit or crash?)"
                                       : " left the job") +
               " before joining bootstrap collective #" + std::to_string(seq_));
  }

  // The collective's deadline and pings.
  void on_timers(Clock::time_point now) {
    if (arrived_ > 0 && now >= collective_deadline_) on_collective_deadline(now);
    if (arrived_ > 0 && now >= next_ping_) {
      const Frame ping = share(wire::encode_empty(MsgType::ping));
      for (auto& slot : ranks_)
        if (slot.arrived && slot.conn != nullptr && slot.conn->out.empty()) outbox_.send(*slot.conn, ping);
      next_ping_ = now + ping_interval();
    }
  }

  // When on_timers() next has something to do, if a collective is pending.
  std::optional<Clock::time_point> next_deadline() const {
    if (arrived_ == 0) return std::nullopt;
    return std::min(collective_deadline_, next_ping_);
  }

 private:
  milliseconds ping_interval() const {
    return std::clamp(config_.timeout / 4, milliseconds(10), milliseconds(1000));
  }

  // The first contribution: starts the deadline, or fails at once when a rank already left.
  bool start_collective(RankSlot& first) {
    collective_deadline_ = Clock::now() + config_.timeout;
    next_ping_ = Clock::now() + ping_interval();
    std::vector<int> gone;
    for (size_t r = 0; r < ranks_.size(); ++r)
      if (ranks_[r].state == RankState::left || ranks_[r].state == RankState::lost)
        gone.push_back(static_cast<int>(r));
    if (gone.empty()) return true;
    first.arrived = true;
    arrived_ = 1;
    fail(Errc::peer_failed, rank_list(gone) + " already left the job; bootstrap collective #" +
                                std::to_string(seq_) + " cannot complete");
    return false;
  }

  void complete() {
    std::vector<Blob> blobs;
    blobs.reserve(ranks_.size());
    for (auto& slot : ranks_) blobs.push_back(std::move(slot.blob));
    const uint64_t total = wire::result_payload_bytes(blobs);
    if (total > wire::kMaxResultBytes) {
      fail(Errc::invalid_argument, "bootstrap allgather #" + std::to_string(seq_) + " of " +
                                       std::to_string(total) + " bytes exceeds the store's limit");
      return;
    }
    const Frame result = share(wire::encode_result(seq_, blobs));
    for (auto& slot : ranks_) {
      slot.arrived = false;
      slot.blob = Blob();
    }
    arrived_ = 0;
    ++seq_;
    for (auto& slot : ranks_)
      if (slot.conn != nullptr) outbox_.send(*slot.conn, result);
  }

  // The job is broken: every rank waiting in the collective hears why, and so does every
  // later contribution.
  void fail(Errc code, const std::string& why) {
    if (!failure_) {
      failure_.emplace(code, why);
      log::error("store: " + why);
    }
    const Frame frame = share(wire::encode_error(failure_->first, failure_->second));
    for (auto& slot : ranks_) {
      if (slot.arrived && slot.conn != nullptr) outbox_.send(*slot.conn, frame);
      slot.arrived = false;
      slot.blob = Blob();
    }
    arrived_ = 0;
  }

  void on_collective_deadline(Clock::time_point now) {
    std::vector<int> absent;
    std::vector<int> slow;
    std::vector<int> waiting;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      if (ranks_[r].arrived) waiting.push_back(static_cast<int>(r));
      else if (ranks_[r].state == RankState::absent) absent.push_back(static_cast<int>(r));
      else slow.push_back(static_cast<int>(r));
    }
    if (!absent.empty()) {
      fail(Errc::timeout, rank_list(absent) + " did not connect to the store within " +
                              std::to_string(config_.timeout.count()) + " ms (PCOLL_TIMEOUT_MS); " +
                              rank_list(waiting) + " waited in bootstrap collective #" + std::to_string(seq_));
      return;
    }
    // A connected rank is inside pcoll_init (or finalize), which runs its bootstrap
    // collectives back to back with no application code between them: one that has not
    // come for the whole timeout while others waited, and has been connected that long, is
    // stopped or stuck, not slow.
    auto latest = Clock::time_point::min();
    for (const int r : slow) latest = std::max(latest, ranks_[static_cast<size_t>(r)].connected_at);
    if (latest + config_.timeout > now) {
      collective_deadline_ = latest + config_.timeout;
      return;
    }
    fail(Errc::timeout, rank_list(slow) + " did not take part in bootstrap collective #" + std::to_string(seq_) +
                            " within " + std::to_string(config_.timeout.count()) +
                            " ms (PCOLL_TIMEOUT_MS) although connected to the store: pcoll_init runs its "
                            "collectives back to back, so the process is stopped or stuck; " +
                            rank_list(waiting) + " waited");
  }

  const StoreServerConfig& config_;
  Outbox& outbox_;
  std::vector<RankSlot> ranks_;
  uint64_t seq_ = 0;  // the pending / next collective
  int arrived_ = 0;   // contributions to it so far
  Clock::time_point collective_deadline_;
  Clock::time_point next_ping_;
  std::optional<std::pair<Errc, std::string>> failure_;  // the job is broken; said to everyone
};

}  // namespace

// ------------------------------------------------------------------------------------------
// The server loop

struct StoreServer::Impl final : Outbox {
  StoreServerConfig config;
  Fd listen_fd;
  Fd wake_fd;
  uint16_t port = 0;
  std::atomic<bool> stopping{false};
  std::atomic<bool> abandoned{false};
  std::thread thread;

  // Everything below is touched by the server thread only.
  std::vector<std::unique_ptr<Connection>> conns;  // in accept order
  size_t dropped_unauthenticated = 0;
  Job job{config, *this};

  explicit Impl(const StoreServerConfig& c) : config(c) {}

  void listen() {
    const std::string where = config.bind_host + ":" + std::to_string(config.port);
    const auto addresses = tcp::resolve(config.bind_host, config.port, true);
    if (addresses.error != 0)
      fail(Errc::bootstrap, "store: cannot resolve '" + config.bind_host + "': " + addresses.error_text());
    tcp::Listener listener = tcp::listen(addresses, kListenBacklog);
    // In use: most often a second rank 0 (this job's, started twice, or another job's at
    // the same PCOLL_ROOT) whose store already listens there.
    if (!listener.fd && listener.error == EADDRINUSE)
      fail(Errc::bootstrap, "store: the store's port " + where + " is already taken (" + errno_text(listener.error) +
                                "): another rank 0 (a second PCOLL_RANK=0 of this job, or another job's) or "
                                "another program holds it; start one rank 0 per job, or pick another port in "
                                "PCOLL_ROOT");
    if (!listener.fd)
      fail(Errc::bootstrap, "store: cannot listen on " + where + ": " + errno_text(listener.error));
    // The host name is not an address of this machine (NAT, DNS alias): the job key still
    // guards the store on all interfaces.
    if (listener.any_interface)
      log::info("store: " + config.bind_host + " is not a local address; listening on all "
                "interfaces, port " + std::to_string(listener.port));
    listen_fd = std::move(listener.fd);
    port = listener.port;
  }

  // --- Sending and closing.

  void send(Connection& c, Frame frame) override {
    if (c.dead || c.write_shut) return;
    c.out.push_back(std::move(frame));
    flush(c);
  }

  void flush(Connection& c) {
    if (c.dead) return;
    if (const int err = c.write_queued(); err != 0) drop(c, "send failed: " + errno_text(err));
  }

  // The connection is gone (EOF, error). A rank that disappears without bye is lost.
  void drop(Connection& c, const std::string& why) {
    if (c.dead) return;
    c.dead = true;
    job.release(c, RankState::lost, why);
  }

  void start_closing(Connection& c, Clock::time_point deadline) {
    c.closing = true;
    c.close_deadline = deadline;
    flush(c);
  }

  // Refuses a connection: logs, tells the peer why, then half-closes once that is sent.
  void reject(Connection& c, Errc code, const std::string& why) {
    log::warn("store: rejected connection from " + c.peer +
              (c.rank >= 0 ? " (rank " + std::to_string(c.rank) + ")" : "") + ": " + why);
    job.release(c, RankState::lost, why);
    c.in.clear();
    c.in_offset = 0;
    send(c, share(wire::encode_error(code, why)));
    start_closing(c, Clock::now() + close_grace(config.timeout));
  }

  // --- Receiving.

  void on_message(Connection& c, const wire::Frame& frame) {
    std::optional<Refusal> refusal;
    if (c.rank < 0) {
      if (frame.type != MsgType::hello)
        refusal = Refusal{Errc::protocol, "message type " + std::to_string(static_cast<int>(frame.type)) + " before hello"};
      else
        refusal = job.admit(c, wire::parse_hello(frame.payload));
    } else if (frame.type == MsgType::gather) {
      refusal = job.contribute(c, wire::parse_gather(frame.payload));
    } else if (frame.type == MsgType::bye) {
      job.release(c, RankState::left, "bye");
      start_closing(c, Clock::now() + close_grace(config.timeout));
    } else {
      refusal = Refusal{Errc::protocol, "unexpected message type " + std::to_string(static_cast<int>(frame.type))};
    }
    if (refusal) reject(c, refusal->code, refusal->why);
  }

  // Handles the whole messages in c.in; a bad header is rejected as soon as it is complete,
  // so an oversized length is refused before its payload is buffered.
  void parse(Connection& c) {
    while (!c.dead && !c.closing) {
      const uint64_t limit = c.rank < 0 ? wire::kMaxHelloBytes : wire::kMaxGatherBytes;
      const wire::FrameParse parsed = wire::parse_frame(c.unparsed(), limit);
      if (parsed.status == wire::FrameParse::Status::invalid) {
        reject(c, Errc::protocol, parsed.error);
        return;
      }
      if (parsed.status == wire::FrameParse::Status::incomplete) {
        // Once the header is good, make room for the whole message at once.
        if (parsed.frame.bytes > 0) c.in.reserve(c.in_offset + parsed.frame.bytes);
        break;
      }
      c.in_offset += parsed.frame.bytes;
      try {
        on_message(c, parsed.frame);
      } catch (const Error& e) {
        reject(c, Errc::protocol, std::string("malformed message: ") + e.what());
        return;
      }
    }
    c.compact_input();
  }

  void on_readable(Connection& c) {
    std::byte buffer[65536];
    while (!c.dead) {
      // Before hello, no more than a hello at a time: what such a peer makes the store hold
      // stays within a few kMaxHelloBytes.
      const size_t want = c.admitted ? sizeof buffer : wire::kMaxHelloBytes;
      const ssize_t n = ::recv(c.fd.get(), buffer, want, 0);
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

  // --- Connections that have not said hello (connection floods; see the top of the file).

  // Those from `source` (all when null), the answered ones (rejected, closing) first, then
  // oldest first: the order in which they make room.
  std::vector<Connection*> unauthenticated(const std::string* source) const {
    std::vector<Connection*> out;
    for (const auto& c : conns)
      if (!c->dead && !c->admitted && (source == nullptr || c->source == *source)) out.push_back(c.get());
    std::stable_partition(out.begin(), out.end(), [](const Connection* c) { return c->closing; });
    return out;
  }

  // Leaves fewer than `limit` unauthenticated connections from `source` (or in all): first
  // reads what they sent, so that a rank whose hello has arrived is admitted, then drops
  // the first of the rest without a word.
  void make_room(const std::string* source, size_t limit) {
    if (unauthenticated(source).size() < limit) return;
    for (Connection* c : unauthenticated(source))
      if (!c->closing) on_readable(*c);
    const std::vector<Connection*> waiting = unauthenticated(source);
    for (size_t i = 0; i + limit <= waiting.size(); ++i) {
      if (dropped_unauthenticated++ == 0)
        log::warn("store: more than " + std::to_string(limit) + " connections without hello" +
                  (source ? " from " + *source : "") + "; dropping the oldest (a flood? the store keeps serving)");
      log::debug("store: dropped connection from " + waiting[i]->peer + " to make room");
      waiting[i]->dead = true;
    }
  }

  void accept_all() {
    for (size_t accepted = 0; accepted < kMaxAcceptsPerPass; ++accepted) {
      int err = 0;
      Fd fd = tcp::accept(listen_fd.get(), err);
      if (!fd) {
        if (err != EAGAIN && err != EWOULDBLOCK) log::warn("store: accept failed: " + errno_text(err));
        return;
      }
      auto c = std::make_unique<Connection>();
      c->peer = tcp::peer_name(fd.get());
      c->source = c->peer.substr(0, c->peer.rfind(':'));
      make_room(&c->source, kMaxUnauthenticatedPerSource);
      make_room(nullptr, kMaxUnauthenticated);
      tcp::set_nodelay(fd.get());
      c->fd = std::move(fd);
      c->hello_deadline = Clock::now() + hello_deadline(config.timeout);
      conns.push_back(std::move(c));
    }
  }

  // --- Timers and the loop.

  void on_timers() {
    const auto now = Clock::now();
    for (auto& c : conns) {
      if (c->dead) continue;
      if (c->closing && now >= c->close_deadline) {
        c->dead = true;
      } else if (!c->closing && !c->admitted && now >= c->hello_deadline) {
        // Without a word: a rank that was this late reconnects, anyone else needs no answer.
        log::debug("store: dropped connection from " + c->peer + ": no hello within " +
                   std::to_string(hello_deadline(config.timeout).count()) + " ms");
        c->dead = true;
      }
    }
    job.on_timers(now);
  }

  int poll_timeout_ms() const {
    auto next = Clock::now() + milliseconds(1000);
    for (const auto& c : conns) {
      if (c->closing) next = std::min(next, c->close_deadline);
      else if (!c->admitted) next = std::min(next, c->hello_deadline);
    }
    if (const auto job_next = job.next_deadline()) next = std::min(next, *job_next);
    return pcoll::poll_timeout_ms(next);
  }

  // Stop taking new connections; give the ranks' connections time to read their last
  // answers and close their end, so nobody sees a reset instead of a result. After a
  // failure the ranks are still answered until each leaves: one that comes to the failed
  // collective late must hear what failed, not that the store went away. Nobody else is
  // waited for: a socket some other program holds open must not hold up the exit.
  Clock::time_point start_draining() {
    const auto deadline = Clock::now() + (abandoned.load() ? StoreServer::kAbandonDrain
                                                           : std::min(config.timeout, milliseconds(5000)));
    listen_fd.reset();
    for (auto& c : conns) {
      if (c->rank < 0 && !(c->admitted && !c->out.empty())) {
        c->dead = true;
        continue;
      }
      if (job.failed() && c->rank >= 0) continue;
      start_closing(*c, deadline);
    }
    return deadline;
  }

  void run() {
    std::optional<Clock::time_point> drain_deadline;
    for (;;) {
      if (stopping.load() && !drain_deadline) {
        drain_deadline = start_draining();
        erase_dead();  // so that a drain with nobody left to wait for ends now
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
        if (fds[0].revents & POLLIN) drain_eventfd(wake_fd.get());
        if (listen_fd && (fds[1].revents & POLLIN)) accept_all();
        // accept_all() may have appended connections; they are polled next time.
        for (size_t i = first_conn; i < fds.size(); ++i) {
          Connection& c = *conns[i - first_conn];
          if (fds[i].revents & POLLOUT) flush(c);
          if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) on_readable(c);
        }
      }
      on_timers();
      erase_dead();
    }
  }

  void erase_dead() {
    std::erase_if(conns, [this](const std::unique_ptr<Connection>& c) {
      if (!c->dead) return false;
      job.release(*c, RankState::lost, "closed");
      return true;
    });
  }
};

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

StoreServer::StoreServer(const StoreServerConfig& config) {
  if (config.size < 1) invalid_argument("store: job size must be at least 1");
  impl_ = std::make_unique<Impl>(config);
  impl_->listen();
  impl_->wake_fd = open_eventfd(Errc::bootstrap, "store");
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

void StoreServer::abandon() {
  if (impl_) impl_->abandoned.store(true);
}

void StoreServer::stop() {
  if (!impl_ || !impl_->thread.joinable()) return;
  impl_->stopping.store(true);
  signal_eventfd(impl_->wake_fd.get());
  impl_->thread.join();
}

}  // namespace pcoll::bootstrap
