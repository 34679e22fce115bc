// The fault-injection transport's entry point for the provider registry
// (providers/registry/registry.cpp): PCOLL_PROVIDER=fault+<selector> makes the selector's
// transport and hands it to wrap(), which decorates it with the faults PCOLL_FAULT asks for
// (fault_spec.hpp; docs/reliability.md). A test tool: it breaks the transport's contract
// on purpose, only in the ways the spec names.
#pragma once

#include <memory>

#include <transport/transport.hpp>

namespace pcoll::transport::fault {

// Reads and checks PCOLL_FAULT (unset or empty: no faults, the decorator passes everything
// through); throws Errc::invalid_argument naming what is wrong.
std::unique_ptr<Transport> wrap(std::unique_ptr<Transport> inner, const Options& options);

// Its registry row: layered, family "fault", wrap() above.
const ProviderDescriptor& descriptor();

}  // namespace pcoll::transport::fault
