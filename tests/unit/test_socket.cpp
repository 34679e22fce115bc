// The TCP helpers the bootstrap store connects with (lib/support/socket): a socket connected
// to itself is recognised, so a client never takes it for the store.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <support/fd.hpp>
#include <support/socket.hpp>

namespace {

sockaddr_in loopback(uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

uint16_t local_port(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);
}

}  // namespace

TEST_CASE("a socket connected to its own address and port is recognised as connected to itself") {
  // What the kernel's simultaneous open does by chance to a client of an unused ephemeral
  // port, done on purpose: bind, then connect to the bound address.
  pcoll::Fd fd(::socket(AF_INET, SOCK_STREAM, 0));
  REQUIRE(fd);
  sockaddr_in addr = loopback(0);
  REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  addr = loopback(local_port(fd.get()));
  REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  CHECK(pcoll::tcp::connected_to_itself(fd.get()));
}

TEST_CASE("a socket connected to a listener is not connected to itself") {
  const auto addresses = pcoll::tcp::resolve("127.0.0.1", 0, true);
  REQUIRE(addresses.error == 0);
  pcoll::tcp::Listener listener = pcoll::tcp::listen(addresses, 4);
  REQUIRE(listener.fd);
  int error = 0;
  const auto target = pcoll::tcp::resolve("127.0.0.1", listener.port, false);
  pcoll::Fd client = pcoll::tcp::connect(target, std::chrono::steady_clock::now() + std::chrono::seconds(5), error);
  REQUIRE(client);
  CHECK_FALSE(pcoll::tcp::connected_to_itself(client.get()));
}

TEST_CASE("an unconnected socket is not connected to itself") {
  pcoll::Fd fd(::socket(AF_INET, SOCK_STREAM, 0));
  REQUIRE(fd);
  CHECK_FALSE(pcoll::tcp::connected_to_itself(fd.get()));
}
