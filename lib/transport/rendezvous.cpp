// connect_all() (rendezvous.hpp). Each rank's record: u32 address length (little-endian),
// the address, u64 process id (little-endian), then the host name (the rest).
#include <transport/rendezvous.hpp>

#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <set>
#include <utility>

#include <support/error.hpp>
#include <transport/transport_settings.hpp>

namespace pcoll::transport {
namespace {

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

// The running kernel's boot id: the same for every container and namespace on one machine.
std::string kernel_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id.empty() ? "?" : id;
}

// PCOLL_TEST_HOST_NAMES ("a,a,b,b"): the host name rank r pretends to run on, so that tests
// on one machine can route peers as if they lived on several.
std::string test_host_name(int rank) {
  const auto names = TransportSettings::raw("PCOLL_TEST_HOST_NAMES");
  if (!names) return {};
  size_t begin = 0;
  for (int r = 0;; ++r) {
    const size_t end = names->find(',', begin);
    if (r == rank) {
      const std::string name = names->substr(begin, end == std::string::npos ? std::string::npos : end - begin);
      if (name.empty())
        invalid_argument("PCOLL_TEST_HOST_NAMES=" + *names + " gives rank " + std::to_string(rank) + " an empty name");
      return name;
    }
    if (end == std::string::npos)
      invalid_argument("PCOLL_TEST_HOST_NAMES=" + *names + " names no host for rank " + std::to_string(rank));
    begin = end + 1;
  }
}

}  // namespace

std::string host_key(int rank) {
  const std::string test = test_host_name(rank);
  return (test.empty() ? host_name() : test) + '\0' + kernel_id();
}

// Record: the host key (host name, a NUL, the boot id).
JobLayout gather_layout(int rank, const Allgather& allgather) {
  const std::string mine = host_key(rank);
  const std::vector<Bytes> records =
      allgather(std::span<const std::byte>(reinterpret_cast<const std::byte*>(mine.data()), mine.size()));
  std::set<std::string> hosts;
  std::set<std::pair<std::string, std::string>> kernels;  // (boot id, host name)
  JobLayout layout;
  layout.host_key = mine;
  std::map<std::string, int> node_numbers;
  for (size_t r = 0; r < records.size(); ++r) {
    const std::string text(reinterpret_cast<const char*>(records[r].data()), records[r].size());
    const size_t nul = text.find('\0');
    if (nul == std::string::npos || nul == 0 || nul + 1 == text.size())
      fail(Errc::protocol, "rank " + std::to_string(r) + " sent a malformed host record (" +
                               std::to_string(text.size()) + " bytes) while the job's layout was gathered");
    hosts.insert(text.substr(0, nul));
    kernels.emplace(text.substr(nul + 1), text.substr(0, nul));
    if (text == mine) ++layout.ranks_on_my_host;
    layout.node_of.push_back(node_numbers.emplace(text, static_cast<int>(node_numbers.size())).first->second);
  }
  layout.hosts = static_cast<int>(hosts.size());
  std::set<std::string> boot_ids;
  for (const auto& [boot_id, host] : kernels)
    if (!boot_ids.insert(boot_id).second) layout.hosts_share_a_kernel = true;
  return layout;
}

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
