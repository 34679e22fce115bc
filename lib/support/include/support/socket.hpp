// TCP sockets, as the bootstrap store uses them: name resolution, a listening socket (with a
// wildcard fallback for host names that are not local), a connect bounded by a deadline,
// accept, and peer names for logs. All sockets are non-blocking and close-on-exec; errors
// come back as errno / EAI_* codes so that the caller can say which setting to fix.
#pragma once

#include <netdb.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <support/fd.hpp>

namespace pcoll::tcp {

// getaddrinfo()'s answer for a stream socket, owned.
struct AddressList {
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> first{nullptr, ::freeaddrinfo};
  int error = 0;  // EAI_* (0: resolved)
  std::string error_text() const;
};
// `passive`: addresses to listen on (AI_PASSIVE), else to connect to.
AddressList resolve(const std::string& host, uint16_t port, bool passive);

struct Listener {
  Fd fd;                        // invalid when nothing could listen
  uint16_t port = 0;            // the bound port (the kernel's pick when port 0 was asked)
  bool any_interface = false;   // the fallback below was taken
  int error = 0;                // errno of the last failed attempt when !fd
};
// Listens on the first of `addresses` that binds (SO_REUSEADDR). When none binds because the
// host is not an address of this machine (NAT, DNS alias: EADDRNOTAVAIL), listens on all
// interfaces at the same port instead.
Listener listen(const AddressList& addresses, int backlog);

// A socket connected to the first of `addresses` that accepts before `deadline`, with
// TCP_NODELAY. Invalid, with the errno of the last attempt in `error`, when none did; a
// socket connected to itself is closed and counts as ECONNREFUSED.
Fd connect(const AddressList& addresses, std::chrono::steady_clock::time_point deadline, int& error);

// Whether the socket is connected to itself: its local and peer address and port are equal.
// With nothing listening on a port of the ephemeral range, Linux's simultaneous open can
// connect a client to itself; connect() treats that as a refused attempt.
bool connected_to_itself(int fd);

// accept4() of one pending connection; invalid with `error` set when there is none
// (EAGAIN) or accept failed. EINTR and ECONNABORTED are retried.
Fd accept(int listen_fd, int& error);

// Disables Nagle: the store's messages are small and latency-bound. Best effort.
void set_nodelay(int fd) noexcept;
// "host:port" of the connected peer, numeric; "?" when unknown.
std::string peer_name(int fd);

}  // namespace pcoll::tcp
