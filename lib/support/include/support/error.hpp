// Errors inside pcoll: one exception type carrying a status code and a message that
// names what failed and what to do. The C API turns it into a status + pcoll_last_error().
#pragma once

#include <stdexcept>
#include <string>

namespace pcoll {

// Values match the PCOLL_ERR_* codes of include/pcoll/pcoll.h.
enum class Errc : int {
  ok = 0,
  invalid_argument = 1,   // bad argument, option or environment variable
  invalid_state = 2,      // call made in the wrong order
  mismatch = 3,           // ranks made different collective calls or passed different arguments
  timeout = 4,            // a peer did not answer within the timeout
  peer_failed = 5,        // a peer died or reported failure
  transport = 6,          // the provider (libfabric / UCX) failed
  bootstrap = 7,          // rendezvous failed (store, PMIx, PMI2, MPI)
  unsupported = 8,        // the provider cannot do what was asked
  out_of_memory = 9,
  protocol = 10,          // malformed wire data from a peer
  internal = 11,
};

const char* errc_name(Errc code) noexcept;

class Error : public std::runtime_error {
 public:
  Error(Errc code, const std::string& message, int rank = -1)
      : std::runtime_error(message), code_(code), rank_(rank) {}
  Errc code() const noexcept { return code_; }
  // The peer the failure is about, or -1 when none (or unknown).
  int rank() const noexcept { return rank_; }

 private:
  Errc code_;
  int rank_;
};

// Shorthands that read like the failure they report.
[[noreturn]] inline void fail(Errc code, const std::string& message) { throw Error(code, message); }
// A failure that is about one peer (dead, silent, unreachable): callers can tell survivors
// exactly who failed.
[[noreturn]] inline void fail_peer(Errc code, int rank, const std::string& message) {
  throw Error(code, message, rank);
}
[[noreturn]] inline void invalid_argument(const std::string& message) {
  throw Error(Errc::invalid_argument, message);
}

}  // namespace pcoll
