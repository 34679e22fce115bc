// The in-process provider's endpoint: addresses, connect() and notification delivery.
#include <unistd.h>

#include <cstring>

#include <inproc/inproc_transport.hpp>

namespace pcoll::transport::inproc {
namespace {

constexpr uint64_t kAddressMagic = 0x70636f6c6c697031ull;  // "pcollip1"

struct AddressWire {
  uint64_t magic;
  uint64_t pid;
  uint64_t endpoint;
};

// Rank seeds differ, so that two ranks do not reorder alike.
uint64_t order_seed(int rank) {
  uint64_t x = 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(rank) + 1);
  x ^= x >> 31;
  return x * 0xBF58476D1CE4E5B9ull;
}

}  // namespace

Bytes InprocTransport::address() const {
  const AddressWire wire{kAddressMagic, static_cast<uint64_t>(::getpid()), self_->id};
  Bytes out(sizeof wire);
  std::memcpy(out.data(), &wire, sizeof wire);
  return out;
}

void InprocTransport::do_connect(int my_rank, std::span<const Bytes> addresses) {
  if (my_rank < 0 || static_cast<size_t>(my_rank) >= addresses.size())
    invalid_argument("inproc connect: rank " + std::to_string(my_rank) + " is not in a job of " +
                     std::to_string(addresses.size()));
  const auto pid = static_cast<uint64_t>(::getpid());
  std::vector<std::shared_ptr<Endpoint>> peers(addresses.size());
  for (size_t r = 0; r < addresses.size(); ++r) {
    AddressWire wire{};
    if (addresses[r].size() != sizeof wire ||
        (std::memcpy(&wire, addresses[r].data(), sizeof wire), wire.magic != kAddressMagic))
      fail_peer(Errc::protocol, static_cast<int>(r),
                "inproc connect: rank " + std::to_string(r) + " sent an address (" +
                    std::to_string(addresses[r].size()) +
                    " bytes) that is not an in-process one; every rank must use PCOLL_PROVIDER=inproc");
    if (wire.pid != pid)
      fail(Errc::unsupported, "PCOLL_PROVIDER=" + caps_.name + ": rank " + std::to_string(r) + " is process " +
                                  std::to_string(wire.pid) + ", not this process (" + std::to_string(pid) +
                                  "): the in-process provider connects only ranks that are threads of one "
                                  "process (tests/threads); for ranks in separate processes use ucx:shm or ofi:shm");
    peers[r] = Fabric::instance().find_endpoint(wire.endpoint);
    if (!peers[r])
      fail_peer(Errc::peer_failed, static_cast<int>(r),
                "inproc connect: rank " + std::to_string(r) + "'s endpoint is already closed");
  }
  if (peers[static_cast<size_t>(my_rank)] != self_)
    invalid_argument("inproc connect: address " + std::to_string(my_rank) + " is not this transport's own");
  {
    std::lock_guard lock(self_->mutex);
    self_->rank = my_rank;
    self_->order.seed(order_seed(my_rank));
  }
  rank_ = my_rank;
  peers_ = std::move(peers);
}

Endpoint& InprocTransport::peer_endpoint(int peer, const char* op) const {
  if (peers_.empty()) fail(Errc::invalid_state, std::string("inproc ") + op + ": connect() was not called");
  if (peer < 0 || static_cast<size_t>(peer) >= peers_.size())
    invalid_argument(std::string("inproc ") + op + ": rank " + std::to_string(peer) + " is not in a job of " +
                     std::to_string(peers_.size()));
  return *peers_[static_cast<size_t>(peer)];
}

void deliver(Endpoint& target, uint64_t value) {
  std::lock_guard lock(target.mutex);
  if (target.closed)
    fail_peer(Errc::peer_failed, target.rank,
              "rank " + std::to_string(target.rank) + " closed its in-process endpoint (its communicator is gone)");
  target.inbox.push_back(value);
  ++target.activity;
  target.changed.notify_all();
}

void InprocTransport::do_notify(int peer, uint64_t value) {
  check_error();
  deliver(peer_endpoint(peer, "notify"), value);
}

}  // namespace pcoll::transport::inproc
