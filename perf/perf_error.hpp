// Errors of the perf tools that use only the public API (pcoll_allreduce, pcoll_imbalance):
// an exception carrying a pcoll status code (PCOLL_ERR_*) and a message, and the parsing of
// decimal option values, so that these tools need nothing of the library's internals.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include <pcoll/pcoll.h>

namespace pcoll::perf {

class Error : public std::runtime_error {
 public:
  Error(int status, const std::string& message) : std::runtime_error(message), status_(status) {}
  int status() const noexcept { return status_; }  // a PCOLL_ERR_* code

 private:
  int status_;
};

[[noreturn]] inline void fail(int status, const std::string& message) { throw Error(status, message); }
[[noreturn]] inline void invalid_argument(const std::string& message) {
  throw Error(PCOLL_ERR_INVALID_ARGUMENT, message);
}

// A decimal unsigned integer in [min, max]; `what` (the option) names the source in errors,
// worded as the library words its own ("-n='x' is not an unsigned integer (expected ...)").
inline uint64_t parse_u64(const std::string& text, const std::string& what, uint64_t min, uint64_t max) {
  const std::string range =
      " (expected an integer from " + std::to_string(min) + " to " + std::to_string(max) + ")";
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
    invalid_argument(what + "='" + text + "' is not an unsigned integer" + range);
  errno = 0;
  const unsigned long long value = std::strtoull(text.c_str(), nullptr, 10);
  if (errno == ERANGE || value < min || value > max)
    invalid_argument(what + "=" + text + " is out of range" + range);
  return value;
}

}  // namespace pcoll::perf
