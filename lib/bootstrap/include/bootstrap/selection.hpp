// What bootstrap::from_environment() would choose, without contacting any launcher: for
// pcoll_info and for error messages.
#pragma once

#include <string>
#include <vector>

namespace pcoll::bootstrap {

struct Selection {
  std::string name;    // "pmix", "pmi2", "pcollrun", "manual", "single"
  std::string reason;  // which variable decided: "PMIX_NAMESPACE is set (a PMIx launcher)"
  bool built = true;   // false: this build lacks the backend, from_environment() would fail
};

// Throws Errc::invalid_argument for a malformed PCOLL_BOOTSTRAP, as from_environment() does.
Selection select_from_environment();

// Backends compiled into this build, in selection order.
std::vector<std::string> built_backends();

}  // namespace pcoll::bootstrap
