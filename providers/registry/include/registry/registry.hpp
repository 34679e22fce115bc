// The provider registry: every transport this build has, as a table of descriptors, and
// the PCOLL_PROVIDER selector that picks one. Above the providers (it lists them) and below
// the API that creates a communicator's transport.
#pragma once

#include <memory>
#include <span>
#include <string>

#include <transport/transport.hpp>

namespace pcoll::providers {

// Every provider built in, in the order a default choice prefers them.
std::span<const transport::ProviderDescriptor* const> all();

// The descriptor of a selector's family ("ofi" of "ofi:shm"), or nullptr.
const transport::ProviderDescriptor* find(const std::string& family);

// Makes the transport a selector names: "ofi" (best libfabric provider), "ofi:shm",
// "ofi:tcp", "ofi:sockets", ..., "ucx", "ucx:shm", "ucx:tcp"; "fault+<selector>" wraps that
// transport in the fault-injection transport (providers/fault, configured by PCOLL_FAULT;
// "fault+" alone wraps the default). An empty selector reads
// PCOLL_PROVIDER, default "ucx:shm" (falling back to "ofi:shm" where UCX is not built in
// or its shared memory is unusable). Unknown or unusable selectors throw
// Errc::invalid_argument / Errc::unsupported with the list of what is available.
std::unique_ptr<transport::Transport> create(const std::string& selector,
                                             const transport::Options& options);

// The selector create("") would use: PCOLL_PROVIDER or the default.
std::string default_selector();

// "ofi:shm, ofi:tcp, ..., ucx:tcp": every selector the built providers accept.
std::string selector_list();

}  // namespace pcoll::providers
