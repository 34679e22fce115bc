// connect_all() (rendezvous.hpp). Each rank's record: u32 address length (little-endian),
// the address, u64 process id (little-endian), then the host name (the rest).
#include "rendezvous.hpp"

#include <unistd.h>

#include <cstdint>

#include "error.hpp"

namespace pcoll::transport {
namespace {

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

}  // namespace

std::vector<PeerPlace> connect_all(Transport& transport, int rank, const Allgather& allgather) {
  const Bytes address = transport.address();
  const std::string host = host_name();
  const auto pid = static_cast<uint64_t>(::getpid());
  Bytes record;
  record.reserve(4 + address.size() + 8 + host.size());
  for (int i = 0; i < 4; ++i) record.push_back(static_cast<std::byte>(address.size() >> (8 * i)));
  record.insert(record.end(), address.begin(), address.end());
  for (int i = 0; i < 8; ++i) record.push_back(static_cast<std::byte>(pid >> (8 * i)));
  for (char c : host) record.push_back(static_cast<std::byte>(c));

  const std::vector<Bytes> records = allgather(record);
  std::vector<Bytes> addresses(records.size());
  std::vector<PeerPlace> places(records.size());
  for (size_t r = 0; r < records.size(); ++r) {
    const Bytes& b = records[r];
    uint64_t n = 0;
    for (size_t i = 0; i < 4 && i < b.size(); ++i) n |= static_cast<uint64_t>(b[i]) << (8 * i);
    if (b.size() < 4 || b.size() - 4 < n || b.size() - 4 - n < 8)
      fail(Errc::protocol, "rank " + std::to_string(r) + " sent a malformed address record (" +
                               std::to_string(b.size()) + " bytes) while connecting the transports");
    addresses[r].assign(b.begin() + 4, b.begin() + 4 + static_cast<ptrdiff_t>(n));
    for (size_t i = 0; i < 8; ++i) places[r].pid |= static_cast<uint64_t>(b[4 + n + i]) << (8 * i);
    places[r].host.assign(reinterpret_cast<const char*>(b.data()) + 4 + n + 8, b.size() - 4 - n - 8);
  }
  transport.connect(rank, addresses);
  return places;
}

}  // namespace pcoll::transport
