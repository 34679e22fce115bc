// The libfabric provider's entry in the provider registry (providers/registry/registry.cpp).
#pragma once

#include <transport/transport.hpp>

namespace pcoll::transport::ofi {

const ProviderDescriptor& descriptor();

}  // namespace pcoll::transport::ofi
