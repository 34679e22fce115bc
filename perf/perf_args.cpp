// Command-line value parsing of the perf tools (declared in perf_job.hpp). Kept apart from
// perf_job.cpp so that pcoll_pingpong, which never starts MPI, links it without MPI.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "perf_error.hpp"
#include "perf_job.hpp"

namespace pcoll::perf {

void usage_error(const char* tool, const std::string& message, const char* usage) {
  std::fprintf(stderr, "%s: %s\n%s", tool, message.c_str(), usage);
  std::exit(kUsageExit);
}

uint64_t parse_bytes(const char* tool, const char* usage, const std::string& text, const char* flag,
                     uint64_t min, uint64_t max) {
  std::string digits = text;
  uint64_t scale = 1;
  if (!digits.empty()) {
    const char last = digits.back();
    if (last == 'k' || last == 'K') scale = uint64_t{1} << 10;
    if (last == 'm' || last == 'M') scale = uint64_t{1} << 20;
    if (last == 'g' || last == 'G') scale = uint64_t{1} << 30;
    if (scale != 1) digits.pop_back();
  }
  try {
    const uint64_t n = parse_u64(digits, flag, 0, max / scale) * scale;
    if (n >= min) return n;
  } catch (const Error&) {
  }
  usage_error(tool,
              std::string(flag) + " '" + text + "' is not a byte count from " + std::to_string(min) + " to " +
                  std::to_string(max) + " (K/M/G suffixes allowed)",
              usage);
}

uint64_t parse_uint(const char* tool, const char* usage, const std::string& text, const char* flag,
                    uint64_t min, uint64_t max) {
  try {
    return parse_u64(text, flag, min, max);
  } catch (const Error& e) {
    usage_error(tool, e.what(), usage);
  }
}

double parse_double(const char* tool, const char* usage, const std::string& text, const char* flag,
                    double min, double max) {
  char* end = nullptr;
  const double value = text.empty() ? NAN : std::strtod(text.c_str(), &end);
  if (std::isfinite(value) && end != nullptr && *end == '\0' && value >= min && value <= max) return value;
  char range[64];
  std::snprintf(range, sizeof range, "from %g to %g", min, max);
  usage_error(tool, std::string(flag) + " '" + text + "' is not a number " + range, usage);
}

}  // namespace pcoll::perf
