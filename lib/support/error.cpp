// Names of pcoll's status codes, shared by pcoll_strerror() and log messages.
#include <support/error.hpp>

namespace pcoll {

const char* errc_name(Errc code) noexcept {
  switch (code) {
    case Errc::ok: return "success";
    case Errc::invalid_argument: return "invalid argument";
    case Errc::invalid_state: return "invalid state (call order)";
    case Errc::mismatch: return "ranks made different collective calls or passed different arguments";
    case Errc::timeout: return "timed out waiting for a peer";
    case Errc::peer_failed: return "a peer failed";
    case Errc::transport: return "transport (provider) error";
    case Errc::bootstrap: return "bootstrap error";
    case Errc::unsupported: return "not supported by this provider";
    case Errc::out_of_memory: return "out of memory";
    case Errc::protocol: return "malformed data from a peer";
    case Errc::internal: return "internal error";
  }
  return "unknown status";
}

}  // namespace pcoll
