// The provider registry: one table of descriptors, and the selector logic on top of it.
#include <registry/registry.hpp>

#include <array>
#include <string>
#include <vector>

#include <fault/fault_provider.hpp>
#include <inproc/inproc_provider.hpp>
#include <ofi/ofi_provider.hpp>
#include <routed/routed_provider.hpp>
#include <support/error.hpp>
#include <support/log.hpp>
#include <support/pcoll_config.h>
#include <support/settings.hpp>
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

// The libfabric selectors that name a network: peers on this host are routed through
// libfabric shm instead (PCOLL_LOCAL_PATH=shm), peers elsewhere through the network.
bool names_ofi_network(const std::string& variant) {
  return variant.empty() || variant == "verbs" || variant == "efa" || variant == "cxi" || variant == "psm3";
}

std::unique_ptr<transport::Transport> create_ofi_network(const std::string& variant,
                                                         const transport::Options& options) {
  const transport::ProviderDescriptor& ofi = *find("ofi");
  const transport::JobLayout& layout = options.layout;
  const std::string selector = "ofi" + (variant.empty() ? "" : ":" + variant);
  // Layout unknown (a tool connecting ranks itself), or every peer through the network.
  if (layout.hosts <= 0 || settings::get_choice("PCOLL_LOCAL_PATH") == "network") return ofi.create(variant, options);
  if (layout.hosts == 1) {
    log::info(selector + ": every rank runs on this host: libfabric shm for all (PCOLL_LOCAL_PATH=network "
                         "takes the network instead)");
    return ofi.create("shm", options);
  }
  // Several hosts: every rank routes (a rank alone on its host too, so that all speak the
  // same addresses), through shm to the ranks of its host.
  auto network = ofi.create(variant, options);
  auto local = layout.ranks_on_my_host > 1 ? ofi.create("shm", options) : nullptr;
  const std::string network_name = network->capabilities().name;
  const std::string name = "ofi:shm+" + (network_name.rfind("ofi:", 0) == 0 ? network_name.substr(4) : network_name);
  return transport::routed::route(std::move(local), std::move(network), layout.host_key, name);
}

// A selector without the fault+ prefix: the provider family's own create(), the libfabric
// network selectors routed by where the peers live.
std::unique_ptr<transport::Transport> create_plain(const std::string& selector,
                                                   const transport::Options& options) {
  const auto colon = selector.find(':');
  const std::string family = selector.substr(0, colon);
  const std::string variant = colon == std::string::npos ? "" : selector.substr(colon + 1);
  if (family == "ofi" && names_ofi_network(variant)) return create_ofi_network(variant, options);
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
  const std::string selector(settings::entry("PCOLL_PROVIDER").fallback);
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
  // A bad value is refused even where this selector would not consult it.
  (void)settings::get_choice("PCOLL_LOCAL_PATH");
  transport::check_nic_setting();
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
