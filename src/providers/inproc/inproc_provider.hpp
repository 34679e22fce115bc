// The in-process provider's entry in the provider registry (src/providers/registry.cpp).
#pragma once

#include "transport.hpp"

namespace pcoll::transport::inproc {

const ProviderDescriptor& descriptor();

}  // namespace pcoll::transport::inproc
