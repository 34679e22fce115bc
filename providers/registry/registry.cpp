// The provider registry: one table of descriptors, and the selector logic on top of it.
#include <registry/registry.hpp>

#include <array>
#include <string>
#include <vector>

#include <fault/fault_provider.hpp>
#include <fault/fault_settings.hpp>
#include <inproc/inproc_provider.hpp>
#include <ofi/ofi_provider.hpp>
#include <registry/registry_settings.hpp>
#include <routed/routed_provider.hpp>
#include <support/error.hpp>
#include <support/log.hpp>
#include <support/pcoll_config.h>
#include <util/host_nics.hpp>
#if PCOLL_HAVE_UCX
#include <ucx/ucx_provider.hpp>
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
    // Layered: written "fault+<selector>".
    &transport::fault::descriptor(),
};

using Kind = transport::ProviderDescriptor::Kind;

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

// PCOLL_PROVIDER, or its default (registry_settings.hpp says why ucx:shm).
std::string default_selector() { return RegistrySettings::get_text("PCOLL_PROVIDER").value(); }

namespace {

// A variant of `provider` that names a network (its network_variants row): peers on this
// host are routed through its local variant instead (PCOLL_LOCAL_PATH=shm), peers elsewhere
// through the network.
bool names_network(const transport::ProviderDescriptor& provider, const std::string& variant) {
  for (const auto& network : provider.network_variants)
    if (network == variant) return true;
  return false;
}

std::unique_ptr<transport::Transport> create_network(const transport::ProviderDescriptor& provider,
                                                     const std::string& variant,
                                                     const transport::Options& options) {
  const transport::JobLayout& layout = options.layout;
  const std::string family = provider.family;
  const std::string local_variant = provider.local_variant;
  const std::string selector = family + (variant.empty() ? "" : ":" + variant);
  const std::string local_selector = family + ":" + local_variant;
  // Layout unknown (a tool connecting ranks itself), or every peer through the network.
  if (layout.hosts <= 0 || RegistrySettings::get_choice("PCOLL_LOCAL_PATH") == "network")
    return provider.create(variant, options);
  if (layout.hosts == 1) {
    log::info(selector + ": every rank runs on this host: " + local_selector +
              " for all (PCOLL_LOCAL_PATH=network takes the network instead)");
    return provider.create(local_variant, options);
  }
  // Several hosts: every rank routes (a rank alone on its host too, so that all speak the
  // same addresses), through shm to the ranks of its host.
  auto network = provider.create(variant, options);
  auto local = layout.ranks_on_my_host > 1 ? provider.create(local_variant, options) : nullptr;
  const std::string network_name = network->capabilities().name;
  const std::string prefix = family + ":";
  const std::string name =
      local_selector + "+" + (network_name.rfind(prefix, 0) == 0 ? network_name.substr(prefix.size()) : network_name);
  return transport::routed::route(std::move(local), std::move(network), layout.host_key, name);
}

// A core provider's selector: the provider's own create(), its network selectors routed
// by where the peers live.
std::unique_ptr<transport::Transport> create_plain(const std::string& selector,
                                                   const transport::Options& options) {
  const auto colon = selector.find(':');
  const std::string family = selector.substr(0, colon);
  const std::string variant = colon == std::string::npos ? "" : selector.substr(colon + 1);
  if (const auto* provider = find(family)) {
    if (provider->kind == Kind::layered)
      invalid_argument("PCOLL_PROVIDER='" + selector + "': " + provider->family +
                       " is layered over another provider; write " + provider->family +
                       "+<selector> (e.g. " + provider->family + "+ofi:shm), or " + provider->family +
                       "+ for the default");
    if (names_network(*provider, variant)) return create_network(*provider, variant, options);
    return provider->create(variant, options);
  }
  if (family == "ucx")
    fail(Errc::unsupported, "PCOLL_PROVIDER='" + selector +
                                "': this pcoll was built without UCX (install libucx-dev and "
                                "rebuild with -Ducx=enabled)");
  std::string layers;
  for (const auto* provider : kProviders)
    if (provider->kind == Kind::layered) layers += std::string(layers.empty() ? "" : ", ") + provider->family + "+";
  invalid_argument("PCOLL_PROVIDER='" + selector + "' is not a provider; use " + selector_list() + " (or " +
                   layers + " before any of them: fault+ injects PCOLL_FAULT's faults)");
}

// The network providers a job on several hosts tries, best first: UCX where built (it
// routes peers on one host through its own shared memory), then libfabric's best network
// provider routed with shm.
std::vector<std::string> network_candidates(const transport::JobLayout& layout) {
  std::vector<std::string> candidates;
#if PCOLL_HAVE_UCX
  // UCX takes one kernel for one machine: between hosts that share a kernel (containers,
  // namespaces with their own host names and /dev/shm) it would try shared memory and fail.
  if (!layout.hosts_share_a_kernel) candidates.emplace_back("ucx");
#else
  (void)layout;
#endif
  candidates.emplace_back("ofi");
  return candidates;
}

// The default, the one a job runs without PCOLL_PROVIDER (and the one "fault+" wraps). On
// one host (or where nobody gathered the layout), the settings table's PCOLL_PROVIDER default: it must work wherever libfabric's shm does, so it falls back
// rather than fails. On several hosts, the first network candidate that opens, each
// refusal logged.
std::unique_ptr<transport::Transport> create_default(const transport::Options& options) {
  if (options.layout.hosts > 1) {
    std::string reasons;
    for (const std::string& selector : network_candidates(options.layout)) {
      try {
        auto transport = create_plain(selector, options);
        log::info("default provider: " + transport->capabilities().name + " (" + std::to_string(options.layout.hosts) +
                  " hosts" + (options.layout.hosts_share_a_kernel ? " sharing one kernel" : "") + ")");
        return transport;
      } catch (const Error& e) {
        reasons += "; " + selector + ": " + e.what();
        log::info("default provider: skipping " + selector + ": " + e.what());
      }
    }
    fail(Errc::unsupported, "the job runs on " + std::to_string(options.layout.hosts) +
                                " hosts and no network provider is usable" + reasons +
                                ". Set PCOLL_PROVIDER to choose.");
  }
  // The table's default, not PCOLL_PROVIDER: "fault+" alone comes here for what it wraps.
  const std::string selector(RegistrySettings::entry("PCOLL_PROVIDER").fallback);
  if (selector == "ofi:shm") return create_plain(selector, options);
  try {
    return create_plain(selector, options);
  } catch (const Error& e) {
    log::warn("default provider " + selector + " is unusable here (" + e.what() +
              "); using ofi:shm. Set PCOLL_PROVIDER to choose.");
    return create_plain("ofi:shm", options);
  }
}

// The layered provider a selector starts with ("fault" of "fault+ucx:shm"), or nullptr.
const transport::ProviderDescriptor* layered_prefix(const std::string& selector) {
  const auto plus = selector.find('+');
  if (plus == std::string::npos) return nullptr;
  const auto* provider = find(selector.substr(0, plus));
  return provider != nullptr && provider->kind == Kind::layered ? provider : nullptr;
}

}  // namespace

std::unique_ptr<transport::Transport> create(const std::string& selector_in,
                                             const transport::Options& options) {
  // A bad value is refused even where this selector would not consult it.
  (void)RegistrySettings::get_choice("PCOLL_LOCAL_PATH");
  transport::check_nic_setting();
  const bool defaulted = selector_in.empty() && !RegistrySettings::raw("PCOLL_PROVIDER");
  const std::string selector = selector_in.empty() ? default_selector() : selector_in;
  const auto* layer = layered_prefix(selector);
  // Faults asked for but nobody to inject them: a fault test would pass for nothing.
  if (layer == nullptr && FaultSettings::raw("PCOLL_FAULT"))
    invalid_argument("PCOLL_FAULT is set but the provider is '" + selector +
                     "': only the fault-injection transport injects faults (PCOLL_PROVIDER=fault+" +
                     selector + ")");
  if (defaulted) return create_default(options);
  if (layer == nullptr) return create_plain(selector, options);
  const std::string inner = selector.substr(std::string(layer->family).size() + 1);
  if (layered_prefix(inner) != nullptr || inner == layer->family)
    invalid_argument("PCOLL_PROVIDER='" + selector + "': " + layer->family + " is layered over a core provider, "
                     "not over itself; PCOLL_FAULT takes several rules (separated by ';')");
  return layer->wrap(inner.empty() ? create_default(options) : create_plain(inner, options), options);
}

}  // namespace pcoll::providers
