// Reading the environment variables of other software (UCX_*, PMIX_*, SLURM_*, ...) and
// parsing decimal numbers with errors that name their source. pcoll's own PCOLL_* variables
// are read through their component's settings rows (settings.hpp), never here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace pcoll::env {

// Raw value, or nullopt when unset. An empty value counts as unset. A PCOLL_* name is an
// internal error: those have a default and a range in their rows (settings.hpp).
std::optional<std::string> get(const char* name);

// Parses a decimal unsigned integer in [min, max]; `what` names the source in errors.
uint64_t parse_u64(const std::string& text, const std::string& what, uint64_t min, uint64_t max);

}  // namespace pcoll::env
