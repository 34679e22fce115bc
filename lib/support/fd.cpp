// Fd and the shared fd operations (fd.hpp).
#include <support/fd.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include <support/interrupt.hpp>

namespace pcoll {

using Clock = std::chrono::steady_clock;

void Fd::reset(int fd) noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string errno_text(int err) { return std::strerror(err); }

Fd open_eventfd(Errc code, const std::string& who) {
  Fd fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!fd) fail(code, who + ": eventfd failed: " + errno_text(errno));
  return fd;
}

void signal_eventfd(int fd) noexcept {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof one);
}

void drain_eventfd(int fd) noexcept {
  uint64_t count = 0;
  [[maybe_unused]] const ssize_t n = ::read(fd, &count, sizeof count);
}

int open_pipe(Pipe& out) noexcept {
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC) != 0) return errno;
  out.read_end.reset(ends[0]);
  out.write_end.reset(ends[1]);
  return 0;
}

int poll_timeout_ms(Clock::time_point deadline, std::chrono::milliseconds cap) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, cap.count()));
}

IoResult wait_ready(int fd, short events, std::chrono::milliseconds timeout) {
  const bool forever = timeout < std::chrono::milliseconds::zero();
  const auto deadline = Clock::now() + (forever ? std::chrono::milliseconds::zero() : timeout);
  // With an interrupt check installed (interrupt.hpp), in slices short enough to ask it.
  const int slice_ms = interrupt::installed() ? 20 : 1000;
  for (;;) {
    if (interrupt::requested()) return {IoResult::Status::failed, EINTR, "wait (interrupted by the application)"};
    pollfd p{fd, events, 0};
    const int ready = ::poll(&p, 1, forever ? slice_ms : std::min(slice_ms, poll_timeout_ms(deadline)));
    if (ready > 0) return {};
    if (ready < 0 && errno != EINTR) return {IoResult::Status::failed, errno, "poll"};
    if (!forever && Clock::now() >= deadline) return {IoResult::Status::timeout, 0, "poll"};
  }
}

IoResult write_full(int fd, std::span<const std::byte> bytes, std::chrono::milliseconds idle_timeout) {
  bool socket = true;  // until send() says otherwise
  size_t done = 0;
  while (done < bytes.size()) {
    const std::byte* from = bytes.data() + done;
    const size_t count = bytes.size() - done;
    ssize_t n = socket ? ::send(fd, from, count, MSG_NOSIGNAL) : ::write(fd, from, count);
    if (n < 0 && socket && errno == ENOTSOCK) {
      socket = false;
      continue;
    }
    if (n >= 0) {
      done += static_cast<size_t>(n);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (IoResult r = wait_ready(fd, POLLOUT, idle_timeout); !r.ok()) return r;
    } else if (errno == EPIPE || errno == ECONNRESET) {
      return {IoResult::Status::closed, errno, "write"};
    } else if (errno != EINTR) {
      return {IoResult::Status::failed, errno, "write"};
    }
  }
  return {};
}

IoResult read_full(int fd, std::span<std::byte> bytes, std::chrono::milliseconds idle_timeout) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n == 0) {
      return {IoResult::Status::closed, 0, "read"};
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (IoResult r = wait_ready(fd, POLLIN, idle_timeout); !r.ok()) return r;
    } else if (errno == ECONNRESET) {
      return {IoResult::Status::closed, errno, "read"};
    } else if (errno != EINTR) {
      return {IoResult::Status::failed, errno, "read"};
    }
  }
  return {};
}

}  // namespace pcoll
