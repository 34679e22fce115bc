// Environment reading for other software's variables, and decimal parsing with errors that
// say what was wrong.
#include <support/env.hpp>

#include <cerrno>
#include <cstdlib>
#include <string_view>

#include <support/error.hpp>

namespace pcoll::env {

std::optional<std::string> get(const char* name) {
  if (std::string_view(name).starts_with("PCOLL_"))
    fail(Errc::internal, std::string("env::get(") + name + "): read PCOLL_* variables through settings.hpp");
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

uint64_t parse_u64(const std::string& text, const std::string& what, uint64_t min, uint64_t max) {
  const std::string range = " (expected an integer from " + std::to_string(min) + " to " +
                            std::to_string(max) + ")";
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
    invalid_argument(what + "='" + text + "' is not an unsigned integer" + range);
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (errno == ERANGE || value < min || value > max)
    invalid_argument(what + "=" + text + " is out of range" + range);
  return value;
}

}  // namespace pcoll::env
