// Transport's checked calls (transport.hpp): the connect bookkeeping they check against
// and their errors, in one format for every provider.
#include <transport/transport.hpp>

#include <support/error.hpp>

namespace pcoll::transport {

void Transport::connect(int my_rank, std::span<const Bytes> addresses) {
  const bool partial = capabilities().partial_connect;
  unreachable_.assign(addresses.size(), false);
  for (size_t r = 0; r < addresses.size(); ++r)
    unreachable_[r] = partial && addresses[r].empty() && static_cast<int>(r) != my_rank;
  // Before the provider's connect, which may already send to its peers.
  peer_count_ = static_cast<int>(addresses.size());
  do_connect(my_rank, addresses);
}

void Transport::refuse_peer(const char* operation, int peer) const {
  const std::string head = capabilities().name + ": " + operation + " to rank " + std::to_string(peer) + ": ";
  if (peer_count_ == 0) fail(Errc::invalid_state, head + "the transport is not connected yet");
  if (peer < 0 || peer >= peer_count_)
    invalid_argument(head + "the job has ranks 0.." + std::to_string(peer_count_ - 1));
  invalid_argument(head + "not reached by " + capabilities().name + " (connected without its address)");
}

void Transport::refuse_range(const char* operation, int peer, const char* side, size_t offset, size_t bytes,
                             size_t size) const {
  invalid_argument(capabilities().name + ": " + operation + " to rank " + std::to_string(peer) + ": " + side +
                   " range [offset " + std::to_string(offset) + ", length " + std::to_string(bytes) +
                   "] exceeds the " + std::to_string(size) + "-byte region");
}

void Transport::refuse_word(const char* operation, int peer, size_t offset, size_t size) const {
  invalid_argument(capabilities().name + ": " + operation + " to rank " + std::to_string(peer) + ": offset " +
                   std::to_string(offset) + " is not an 8-byte-aligned word inside the " + std::to_string(size) +
                   "-byte region");
}

}  // namespace pcoll::transport
