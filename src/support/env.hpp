// Reading PCOLL_* environment variables. Unknown or malformed values are errors that name
// the variable and the accepted values; nothing is silently replaced by a default.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pcoll::env {

// Raw value, or nullopt when unset. An empty value counts as unset.
std::optional<std::string> get(const char* name);

// Unsigned integer in [min, max]; `fallback` when unset; Error(invalid_argument) otherwise.
uint64_t get_u64(const char* name, uint64_t fallback, uint64_t min, uint64_t max);

// One of `choices`; `fallback` when unset.
std::string get_choice(const char* name, const std::string& fallback,
                       const std::vector<std::string>& choices);

// Parses a decimal unsigned integer in [min, max]; `what` names the source in errors.
uint64_t parse_u64(const std::string& text, const std::string& what, uint64_t min, uint64_t max);

// Timeout used when no per-handle timeout is given: PCOLL_TIMEOUT_MS, default 30000.
uint32_t default_timeout_ms();

}  // namespace pcoll::env
