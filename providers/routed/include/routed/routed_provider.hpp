// The routed transport's entry point for the provider registry (providers/registry/registry.cpp):
// one Transport over two, a shared-memory one for the ranks on this host and a network one
// for the others, so that peers on the same host never go through the NIC's loopback.
#pragma once

#include <memory>
#include <string>

#include <transport/transport.hpp>

namespace pcoll::transport::routed {

// `local` reaches the ranks whose host key (rendezvous.hpp: host_key) equals `host_key`,
// `network` every other rank. Both must accept partial connects (Capabilities). `name` is
// the selector pcoll_comm_provider reports ("ofi:shm+tcp").
std::unique_ptr<Transport> route(std::unique_ptr<Transport> local, std::unique_ptr<Transport> network,
                                 const std::string& host_key, const std::string& name);

}  // namespace pcoll::transport::routed
