// The provider registry: one table of descriptors, and the selector logic on top of it.
#include "registry.hpp"

#include <array>

#include "error.hpp"
#include "inproc_provider.hpp"
#include "log.hpp"
#include "ofi_provider.hpp"
#include "pcoll_config.h"
#include "settings.hpp"
#if PCOLL_HAVE_UCX
#include "ucx_provider.hpp"
#endif

namespace pcoll::providers {
namespace {

const std::array kProviders = {
#if PCOLL_HAVE_UCX
    &transport::ucx::descriptor(),
#endif
    &transport::ofi::descriptor(),
    // Ranks that are threads of one process only (tests/threads): never a default.
    &transport::inproc::descriptor(),
};

}  // namespace

std::span<const transport::ProviderDescriptor* const> all() { return kProviders; }

const transport::ProviderDescriptor* find(const std::string& family) {
  for (const auto* provider : kProviders)
    if (family == provider->family) return provider;
  return nullptr;
}

std::string selector_list() {
  std::string list;
  for (const auto* provider : kProviders)
    for (const auto& variant : provider->variants)
      list += (list.empty() ? "" : ", ") + std::string(provider->family) + (variant.empty() ? "" : ":" + variant);
  return list;
}

// PCOLL_PROVIDER, or its default (settings.hpp says why ucx:shm).
std::string default_selector() { return settings::get_text("PCOLL_PROVIDER").value(); }

std::unique_ptr<transport::Transport> create(const std::string& selector_in,
                                             const transport::Options& options) {
  const bool defaulted = selector_in.empty() && !settings::raw("PCOLL_PROVIDER");
  const std::string selector = selector_in.empty() ? default_selector() : selector_in;
  if (defaulted && selector != "ofi:shm") {
    // The default must work wherever libfabric's shm does: fall back rather than fail.
    try {
      return create(selector, options);
    } catch (const Error& e) {
      log::warn("default provider " + selector + " is unusable here (" + e.what() +
                "); using ofi:shm. Set PCOLL_PROVIDER to choose.");
      return create("ofi:shm", options);
    }
  }
  const auto colon = selector.find(':');
  const std::string family = selector.substr(0, colon);
  const std::string variant = colon == std::string::npos ? "" : selector.substr(colon + 1);
  if (const auto* provider = find(family)) return provider->create(variant, options);
  if (family == "ucx")
    fail(Errc::unsupported, "PCOLL_PROVIDER='" + selector +
                                "': this pcoll was built without UCX (install libucx-dev and "
                                "rebuild with -Ducx=enabled)");
  invalid_argument("PCOLL_PROVIDER='" + selector + "' is not a provider; use " + selector_list());
}

}  // namespace pcoll::providers
