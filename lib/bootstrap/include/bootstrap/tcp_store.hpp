// The TCP key/blob store behind pcollrun and the manual PCOLL_ROOT mode: a small server that
// authenticates ranks with the job key and runs sequence-numbered allgathers (barrier is an
// allgather of empty blobs), and the client each rank uses to reach it. It lives in:
//   store_wire.{hpp,cpp}     the message format: framing, encoders, parsers (pure functions)
//   store_server.{hpp,cpp}   the server: one poll() loop on a thread of its own
//   store_client.{hpp,cpp}   one rank's blocking connection, and PCOLL_ROOT addresses
//   store_bootstrap.cpp      make_store(): the Bootstrap over them, from the environment
//
// Used two ways:
//  - pcollrun hosts a StoreServer on 127.0.0.1 with a fresh job key and starts the ranks
//    with PCOLL_LAUNCHER=pcollrun (name() "pcollrun");
//  - manual multi-host mode: the user exports PCOLL_RANK/SIZE/ROOT/JOB_KEY on every host and
//    rank 0 hosts the StoreServer in a thread of its own process (name() "manual").
//
// Liveness: a rank that never connects fails the pending collective with Errc::timeout after
// PCOLL_TIMEOUT_MS; a rank whose connection drops fails it at once (Errc::peer_failed). A rank
// that is connected but has not yet called the collective is alive (its process still holds
// the socket), so it is waited for: a slow application is not a failure.
//
// Strangers: a connection must present the job key within 2 s; connections that have not
// are limited per source address, and a new one beyond the limit pushes out the oldest, so
// a flood cannot keep a rank out (store_server.cpp; docs/reliability.md has the limits).
#pragma once

#include <memory>

#include <bootstrap/bootstrap.hpp>
#include <bootstrap/store_server.hpp>

namespace pcoll::bootstrap {

// Bootstrap from PCOLL_RANK, PCOLL_SIZE, PCOLL_ROOT, PCOLL_JOB_KEY (and PCOLL_LAUNCHER,
// PCOLL_TIMEOUT_MS). In manual mode rank 0 also hosts the server at PCOLL_ROOT, and the
// destructor ends with a barrier so that nobody loses the store early.
std::unique_ptr<Bootstrap> make_store();

}  // namespace pcoll::bootstrap
