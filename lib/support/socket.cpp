// TCP socket helpers (socket.hpp).
#include <support/socket.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace pcoll::tcp {

std::string AddressList::error_text() const { return gai_strerror(error); }

AddressList resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* found = nullptr;
  AddressList out;
  out.error = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  out.first.reset(found);
  return out;
}

namespace {

Fd open_socket(const addrinfo& ai) {
  return Fd(::socket(ai.ai_family, ai.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
}

uint16_t bound_port(int fd) {
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  return ntohs(bound.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                          : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
}

}  // namespace

Listener listen(const AddressList& addresses, int backlog) {
  Listener out;
  for (bool any_interface : {false, true}) {
    for (const addrinfo* ai = addresses.first.get(); ai != nullptr; ai = ai->ai_next) {
      Fd fd = open_socket(*ai);
      if (!fd) {
        out.error = errno;
        continue;
      }
      const int one = 1;
      ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      sockaddr_storage addr{};
      std::memcpy(&addr, ai->ai_addr, ai->ai_addrlen);
      if (any_interface) {
        if (addr.ss_family == AF_INET)
          reinterpret_cast<sockaddr_in*>(&addr)->sin_addr.s_addr = htonl(INADDR_ANY);
        else
          reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr = in6addr_any;
      }
      if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), ai->ai_addrlen) != 0 ||
          ::listen(fd.get(), backlog) != 0) {
        out.error = errno;
        continue;
      }
      out.port = bound_port(fd.get());
      out.fd = std::move(fd);
      out.any_interface = any_interface;
      return out;
    }
    if (out.error != EADDRNOTAVAIL) break;
  }
  return out;
}

Fd connect(const AddressList& addresses, std::chrono::steady_clock::time_point deadline, int& error) {
  for (const addrinfo* ai = addresses.first.get(); ai != nullptr; ai = ai->ai_next) {
    Fd fd = open_socket(*ai);
    if (!fd) {
      error = errno;
      continue;
    }
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        error = errno;
        continue;
      }
      // One wait of at most a second: the caller retries (rank 0 may start late).
      pollfd p{fd.get(), POLLOUT, 0};
      int ready = 0;
      do ready = ::poll(&p, 1, std::max(1, poll_timeout_ms(deadline)));
      while (ready < 0 && errno == EINTR);
      int err = ETIMEDOUT;
      socklen_t len = sizeof err;
      if (ready > 0) ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        error = err;
        continue;
      }
    }
    if (connected_to_itself(fd.get())) {
      error = ECONNREFUSED;
      continue;
    }
    set_nodelay(fd.get());
    return fd;
  }
  return Fd();
}

bool connected_to_itself(int fd) {
  sockaddr_storage local{};
  sockaddr_storage peer{};
  socklen_t local_len = sizeof local;
  socklen_t peer_len = sizeof peer;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0)
    return false;
  return local_len == peer_len && std::memcmp(&local, &peer, local_len) == 0;
}

Fd accept(int listen_fd, int& error) {
  for (;;) {
    Fd fd(::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (fd) return fd;
    if (errno == EINTR || errno == ECONNABORTED) continue;
    error = errno;
    return fd;
  }
}

void set_nodelay(int fd) noexcept {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
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

}  // namespace pcoll::tcp
