// The provider registry: one table of descriptors, and the selector logic on top of it.
#include "registry.hpp"

#include <array>

#include "error.hpp"
#include "fault_provider.hpp"
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

namespace {

// A selector without the fault+ prefix: the provider family's own create().
std::unique_ptr<transport::Transport> create_plain(const std::string& selector,
                                                   const transport::Options& options) {
  const auto colon = selector.find(':');
  const std::string family = selector.substr(0, colon);
  const std::string variant = colon == std::string::npos ? "" : selector.substr(colon + 1);
  if (const auto* provider = find(family)) return provider->create(variant, options);
  if (family == "ucx")
    fail(Errc::unsupported, "PCOLL_PROVIDER='" + selector +
                                "': this pcoll was built without UCX (install libucx-dev and "
                                "rebuild with -Ducx=enabled)");
  if (family == "fault")
    invalid_argument("PCOLL_PROVIDER='" + selector +
                     "': the fault-injection transport wraps another provider; write "
                     "fault+<selector> (e.g. fault+ofi:shm), or fault+ for the default");
  invalid_argument("PCOLL_PROVIDER='" + selector + "' is not a provider; use " + selector_list() +
                   " (or fault+ before any of them to inject PCOLL_FAULT's faults)");
}

// The default (the settings table's PCOLL_PROVIDER default): it must work wherever
// libfabric's shm does, so fall back rather than fail.
std::unique_ptr<transport::Transport> create_default(const transport::Options& options) {
  const std::string selector = default_selector();
  if (selector == "ofi:shm") return create_plain(selector, options);
  try {
    return create_plain(selector, options);
  } catch (const Error& e) {
    log::warn("default provider " + selector + " is unusable here (" + e.what() +
              "); using ofi:shm. Set PCOLL_PROVIDER to choose.");
    return create_plain("ofi:shm", options);
  }
}

constexpr const char* kFaultPrefix = "fault+";

}  // namespace

std::unique_ptr<transport::Transport> create(const std::string& selector_in,
                                             const transport::Options& options) {
  const bool defaulted = selector_in.empty() && !settings::raw("PCOLL_PROVIDER");
  const std::string selector = selector_in.empty() ? default_selector() : selector_in;
  const bool faulty = selector.rfind(kFaultPrefix, 0) == 0;
  // Faults asked for but nobody to inject them: a fault test would pass for nothing.
  if (!faulty && settings::raw("PCOLL_FAULT"))
    invalid_argument("PCOLL_FAULT is set but the provider is '" + selector +
                     "': only the fault-injection transport injects faults (PCOLL_PROVIDER=fault+" +
                     selector + ")");
  if (defaulted) return create_default(options);
  if (faulty) {
    const std::string inner = selector.substr(std::string(kFaultPrefix).size());
    if (inner.rfind("fault", 0) == 0)
      invalid_argument("PCOLL_PROVIDER='" + selector + "': the fault-injection transport wraps a provider, "
                       "not itself; PCOLL_FAULT takes several rules (separated by ';')");
    return transport::fault::wrap(inner.empty() ? create_default(options) : create_plain(inner, options), options);
  }
  return create_plain(selector, options);
}

}  // namespace pcoll::providers
