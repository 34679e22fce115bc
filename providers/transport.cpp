// Transport factory: maps a PCOLL_PROVIDER selector to a provider implementation.
#include "transport.hpp"

#include "pcoll_config.h"
#include "support/env.hpp"
#include "support/error.hpp"

namespace pcoll::transport {

namespace ofi {
std::unique_ptr<Transport> create(const std::string& variant, const Options& options);
}
#if PCOLL_HAVE_UCX
namespace ucx {
std::unique_ptr<Transport> create(const std::string& variant, const Options& options);
}
#endif

std::string default_selector() { return env::get("PCOLL_PROVIDER").value_or("ofi:shm"); }

std::unique_ptr<Transport> create(const std::string& selector_in, const Options& options) {
  const std::string selector = selector_in.empty() ? default_selector() : selector_in;
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
