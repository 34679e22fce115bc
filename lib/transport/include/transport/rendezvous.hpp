// Connecting every rank's transport: each rank's address goes to all through an allgather
// that works before the network does (a bootstrap's), then Transport::connect(). Written once
// for everything that connects ranks -- the communicator, the conformance tests, the perf
// tools -- like Gloo's connectFullMesh. The allgather is a plain function, so this layer
// needs nothing of the bootstrap.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <transport/transport.hpp>

namespace pcoll::transport {

// Collective: every rank passes its blob and receives all blobs in rank order
// (bootstrap::Bootstrap::allgather).
using Allgather = std::function<std::vector<Bytes>(std::span<const std::byte>)>;

// Where a rank runs: its host name and process id.
struct PeerPlace {
  std::string host;
  uint64_t pid = 0;
};

// Exchanges `transport`'s address, this host's name and this process's id with every rank,
// connects the transport as `rank`, and returns every rank's place in rank order (so that
// a caller can count the ranks on its host, or in its process when ranks are threads). A
// malformed record is Errc::protocol naming the rank.
std::vector<PeerPlace> connect_all(Transport& transport, int rank, const Allgather& allgather);

// Collective, before any transport exists: every rank's host key through `allgather`,
// summed up as the job's layout. A malformed record is Errc::protocol naming the rank.
JobLayout gather_layout(int rank, const Allgather& allgather);

// What identifies this rank's host: its host name (PCOLL_TEST_HOST_NAMES's for `rank`
// in tests), a NUL, and the kernel's boot id. Ranks with equal keys share a host.
std::string host_key(int rank);

}  // namespace pcoll::transport
