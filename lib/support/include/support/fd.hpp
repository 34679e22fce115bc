// File descriptors: Fd owns one and closes it, plus the few fd operations pcoll needs in
// several places -- eventfds that wake a sleeping thread, pipes, and whole-buffer reads and
// writes that wait in poll() on a non-blocking descriptor, bounded by a timeout.
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <utility>

#include <support/error.hpp>

namespace pcoll {

// Owns one file descriptor (-1: none) and closes it on destruction or reset().
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) noexcept : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(std::exchange(other.fd_, -1));
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  // Closes the descriptor held, if any, and holds `fd` instead.
  void reset(int fd = -1) noexcept;

 private:
  int fd_ = -1;
};

// strerror(err) as a string.
std::string errno_text(int err);

// A non-blocking, close-on-exec eventfd. Failure throws Error(code, who + ": eventfd failed: ...").
Fd open_eventfd(Errc code, const std::string& who);
// Makes an eventfd readable. A full counter (EAGAIN) still leaves it readable, which is all
// a waker needs, so errors are ignored.
void signal_eventfd(int fd) noexcept;
// Resets a non-blocking eventfd to unreadable.
void drain_eventfd(int fd) noexcept;

// Both ends of a close-on-exec pipe.
struct Pipe {
  Fd read_end;
  Fd write_end;
};
// pipe2(O_CLOEXEC) into `out`; 0 or the errno.
int open_pipe(Pipe& out) noexcept;

// How a whole-buffer read or write ended.
struct IoResult {
  enum class Status {
    ok,
    closed,   // end of file, or the peer reset / closed the connection (EPIPE, ECONNRESET)
    timeout,  // nothing could move for the idle timeout
    failed,   // `call` failed with `error`
  };
  Status status = Status::ok;
  int error = 0;
  const char* call = "";  // "poll", "read", "write"
  bool ok() const { return status == Status::ok; }
};

// No idle timeout: wait in poll() as long as it takes.
inline constexpr std::chrono::milliseconds kNoTimeout{-1};

// Writes all of `bytes`. On a socket it uses send(MSG_NOSIGNAL), so a closed peer is
// Status::closed and not SIGPIPE; write() on anything else. EINTR is retried; on a
// non-blocking fd, EAGAIN waits in poll() until the fd is writable again, for at most
// `idle_timeout` each time.
IoResult write_full(int fd, std::span<const std::byte> bytes, std::chrono::milliseconds idle_timeout = kNoTimeout);
// Reads exactly bytes.size() bytes, with the same rules; end of file first is Status::closed.
IoResult read_full(int fd, std::span<std::byte> bytes, std::chrono::milliseconds idle_timeout = kNoTimeout);

// Waits until `fd` is ready for `events`, for at most `timeout` (kNoTimeout: for ever),
// re-arming poll() at least once a second, or every 20 ms where the calling thread has an
// interrupt check (interrupt.hpp). Status::ok, timeout, or failed ("poll"; EINTR once the
// check asked the wait to stop).
IoResult wait_ready(int fd, short events, std::chrono::milliseconds timeout);

// The poll() timeout in ms until `deadline`: 0 when it has passed, at most `cap`.
int poll_timeout_ms(std::chrono::steady_clock::time_point deadline,
                    std::chrono::milliseconds cap = std::chrono::milliseconds(1000));

}  // namespace pcoll
