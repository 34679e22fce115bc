// Choosing the bootstrap from the environment (PCOLL_BOOTSTRAP, else what the launcher set),
// and the single-rank bootstrap used when no launcher is present.
#include <string>

#include "bootstrap/bootstrap.hpp"
#include "bootstrap/tcp_store.hpp"
#include "pcoll_config.h"
#include "support/env.hpp"
#include "support/error.hpp"

namespace pcoll::bootstrap {

// Weak references: the build finds the PMIx / PMI2 libraries before their backends
// (pmix.cpp, pmi2.cpp) exist; until they do, libpcoll still links and reports
// Errc::unsupported instead of failing with an undefined symbol. Harmless once they exist.
#if PCOLL_HAVE_PMIX
[[gnu::weak]] std::unique_ptr<Bootstrap> make_pmix();
#endif
#if PCOLL_HAVE_PMI2
[[gnu::weak]] std::unique_ptr<Bootstrap> make_pmi2();
#endif

namespace {

class SingleBootstrap final : public Bootstrap {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "single"; }
  std::vector<Blob> allgather(std::span<const std::byte> mine) override {
    return {Blob(mine.begin(), mine.end())};
  }
  void barrier() override {}
};

std::unique_ptr<Bootstrap> pmix_or_fail([[maybe_unused]] const std::string& why) {
#if PCOLL_HAVE_PMIX
  if (&make_pmix != nullptr) return make_pmix();
  fail(Errc::unsupported, why + ", but lib/bootstrap/pmix.cpp is not part of this build yet");
#else
  fail(Errc::unsupported, why + ", but this pcoll was built without PMIx (install the PMIx "
                                "development package and rebuild with -Dpmix=enabled, or set "
                                "PCOLL_BOOTSTRAP=store with PCOLL_RANK/SIZE/ROOT/JOB_KEY)");
#endif
}

std::unique_ptr<Bootstrap> pmi2_or_fail([[maybe_unused]] const std::string& why) {
#if PCOLL_HAVE_PMI2
  if (&make_pmi2 != nullptr) return make_pmi2();
  fail(Errc::unsupported, why + ", but lib/bootstrap/pmi2.cpp is not part of this build yet");
#else
  fail(Errc::unsupported, why + ", but this pcoll was built without PMI2 (install libpmi2 "
                                "(slurm/pmi2.h) and rebuild with -Dpmi2=enabled, or set "
                                "PCOLL_BOOTSTRAP=store with PCOLL_RANK/SIZE/ROOT/JOB_KEY)");
#endif
}

}  // namespace

std::unique_ptr<Bootstrap> make_single() { return std::make_unique<SingleBootstrap>(); }

std::unique_ptr<Bootstrap> from_environment() {
  const std::string forced =
      env::get_choice("PCOLL_BOOTSTRAP", "auto", {"auto", "pmix", "pmi2", "store", "single"});
  if (forced == "pmix") return pmix_or_fail("PCOLL_BOOTSTRAP=pmix");
  if (forced == "pmi2") return pmi2_or_fail("PCOLL_BOOTSTRAP=pmi2");
  if (forced == "store") return make_store();
  if (forced == "single") return make_single();

  if (env::get("PMIX_NAMESPACE")) return pmix_or_fail("PMIX_NAMESPACE is set (a PMIx launcher)");
  if (env::get("PMI_FD")) return pmi2_or_fail("PMI_FD is set (a PMI2 launcher)");
  if (env::get("PCOLL_ROOT")) return make_store();
  // PCOLL_RANK/SIZE without PCOLL_ROOT is a half-configured manual job, not a single rank.
  for (const char* name : {"PCOLL_RANK", "PCOLL_SIZE"}) {
    if (const auto value = env::get(name); value && !(std::string(name) == "PCOLL_SIZE" && *value == "1"))
      invalid_argument(std::string(name) + "=" + *value +
                       " is set but PCOLL_ROOT is not: a manual multi-rank job needs PCOLL_ROOT=host:port "
                       "(rank 0's address) and PCOLL_JOB_KEY");
  }
  return make_single();
}

}  // namespace pcoll::bootstrap
