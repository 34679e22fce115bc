// The UCX provider's entry in the provider registry (src/providers/registry.cpp).
#pragma once

#include "transport.hpp"

namespace pcoll::transport::ucx {

const ProviderDescriptor& descriptor();

}  // namespace pcoll::transport::ucx
