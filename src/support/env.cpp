// PCOLL_* environment parsing with errors that say what was wrong.
#include "env.hpp"

#include <cerrno>
#include <cstdlib>

#include "error.hpp"

namespace pcoll::env {

std::optional<std::string> get(const char* name) {
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

uint64_t get_u64(const char* name, uint64_t fallback, uint64_t min, uint64_t max) {
  const auto value = get(name);
  if (!value) return fallback;
  return parse_u64(*value, name, min, max);
}

std::string get_choice(const char* name, const std::string& fallback,
                       const std::vector<std::string>& choices) {
  const auto value = get(name);
  if (!value) return fallback;
  for (const auto& choice : choices)
    if (*value == choice) return *value;
  std::string list;
  for (const auto& choice : choices) list += (list.empty() ? "" : ", ") + choice;
  invalid_argument(std::string(name) + "='" + *value + "' is not one of: " + list);
}

uint32_t default_timeout_ms() {
  return static_cast<uint32_t>(get_u64("PCOLL_TIMEOUT_MS", 30000, 1, 86400000));
}

}  // namespace pcoll::env
