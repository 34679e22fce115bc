// Transport factory: maps a PCOLL_PROVIDER selector to a provider implementation.
#include "transport.hpp"

#include "pcoll_config.h"
#include "support/env.hpp"
#include "support/error.hpp"
#include "support/log.hpp"

namespace pcoll::transport {

namespace ofi {
std::unique_ptr<Transport> create(const std::string& variant, const Options& options);
}
#if PCOLL_HAVE_UCX
namespace ucx {
std::unique_ptr<Transport> create(const std::string& variant, const Options& options);
}
#endif

namespace {

// The one-node default: UCX shared memory where UCX is built in. Its puts are copies by the
// initiator into the peer's mapped segment, so a peer busy reducing does not hold up our
// data; libfabric 1.17's shm moves large writes by cma in the target's progress. Measured
// on the same host (docs/performance.md): at 64 KiB and above ucx:shm runs a P=2
// allreduce 3-6x faster than ofi:shm.
#if PCOLL_HAVE_UCX
constexpr const char* kDefault = "ucx:shm";
#else
constexpr const char* kDefault = "ofi:shm";
#endif

}  // namespace

std::string default_selector() { return env::get("PCOLL_PROVIDER").value_or(kDefault); }

std::unique_ptr<Transport> create(const std::string& selector_in, const Options& options) {
  const bool defaulted = selector_in.empty() && !env::get("PCOLL_PROVIDER");
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
  if (family == "ofi") return ofi::create(variant, options);
  if (family == "ucx") {
#if PCOLL_HAVE_UCX
    return ucx::create(variant, options);
#else
    fail(Errc::unsupported, "PCOLL_PROVIDER='" + selector +
                                "': this pcoll was built without UCX (install libucx-dev and "
                                "rebuild with -Ducx=enabled)");
#endif
  }
  invalid_argument("PCOLL_PROVIDER='" + selector +
                   "' is not a provider; use ofi, ofi:shm, ofi:tcp, ofi:sockets, ucx, ucx:shm "
                   "or ucx:tcp");
}

}  // namespace pcoll::transport
