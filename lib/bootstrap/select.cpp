// Choosing the bootstrap from the environment (PCOLL_BOOTSTRAP, else what the launcher set),
// and the single-rank bootstrap used when no launcher is present.
#include <bootstrap/selection.hpp>

#include <optional>
#include <string>
#include <utility>

#include <bootstrap/bootstrap.hpp>
#include <bootstrap/bootstrap_settings.hpp>
#include <bootstrap/tcp_store.hpp>
#include <support/env.hpp>
#include <support/error.hpp>
#include <support/pcoll_config.h>
#include <support/support_settings.hpp>

namespace pcoll::bootstrap {
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

constexpr bool kHavePmix = PCOLL_HAVE_PMIX;
constexpr bool kHavePmi2 = PCOLL_HAVE_PMI2;

[[noreturn]] void missing_backend(const Selection& s) {
  const std::string how =
      s.name == "pmix" ? "install the PMIx development package (libpmix-dev) and rebuild with -Dpmix=enabled"
                       : "install libpmi2-0-dev (slurm/pmi2.h) and rebuild with -Dpmi2=enabled";
  const std::string backend = s.name == "pmix" ? "PMIx" : "PMI2";
  fail(Errc::unsupported, s.reason + ", but this pcoll was built without " + backend + " support (" + how +
                              ", or set PCOLL_BOOTSTRAP=store with PCOLL_RANK/SIZE/ROOT/JOB_KEY)");
}

}  // namespace

std::vector<std::string> built_backends() {
  std::vector<std::string> out;
  if (kHavePmix) out.push_back("pmix");
  if (kHavePmi2) out.push_back("pmi2");
  out.insert(out.end(), {"pcollrun", "manual", "single"});
  return out;
}

Selection select_from_environment() {
  const std::string forced = BootstrapSettings::get_choice("PCOLL_BOOTSTRAP");
  auto store_kind = [] {
    return SupportSettings::raw("PCOLL_LAUNCHER").value_or("manual") == "pcollrun" ? "pcollrun" : "manual";
  };
  if (forced == "pmix") return {"pmix", "PCOLL_BOOTSTRAP=pmix", kHavePmix};
  if (forced == "pmi2") return {"pmi2", "PCOLL_BOOTSTRAP=pmi2", kHavePmi2};
  if (forced == "store") return {store_kind(), "PCOLL_BOOTSTRAP=store", true};
  if (forced == "single") return {"single", "PCOLL_BOOTSTRAP=single", true};

  // pcollrun sets PCOLL_LAUNCHER for its own children: a pcollrun started inside an srun or
  // mpirun job leaves the outer launcher's PMIX_NAMESPACE / PMI_FD in their environment.
  if (SupportSettings::raw("PCOLL_ROOT") && store_kind() == std::string("pcollrun"))
    return {"pcollrun", "started by pcollrun", true};
  // PMI2_Init "succeeds" as a singleton without a launcher, so PMI_FD, not its return code,
  // tells whether a PMI2 server is there.
  if (env::get("PMIX_NAMESPACE")) return {"pmix", "PMIX_NAMESPACE is set (a PMIx launcher)", kHavePmix};
  if (env::get("PMI_FD")) return {"pmi2", "PMI_FD is set (a PMI2 launcher)", kHavePmi2};
  if (SupportSettings::raw("PCOLL_ROOT")) {
    const std::string kind = store_kind();
    return {kind, kind == "pcollrun" ? "started by pcollrun" : "PCOLL_ROOT is set (manual store)", true};
  }
  // PCOLL_RANK/SIZE without PCOLL_ROOT is a half-configured manual job, not a single rank.
  const std::pair<const char*, std::optional<std::string>> manual[] = {
      {"PCOLL_RANK", SupportSettings::raw("PCOLL_RANK")}, {"PCOLL_SIZE", SupportSettings::raw("PCOLL_SIZE")}};
  for (const auto& [name, value] : manual) {
    if (value && !(std::string(name) == "PCOLL_SIZE" && *value == "1"))
      invalid_argument(std::string(name) + "=" + *value +
                       " is set but PCOLL_ROOT is not: a manual multi-rank job needs PCOLL_ROOT=host:port "
                       "(rank 0's address) and PCOLL_JOB_KEY");
  }
  return {"single", "no launcher found in the environment", true};
}

std::unique_ptr<Bootstrap> make_single() { return std::make_unique<SingleBootstrap>(); }

std::unique_ptr<Bootstrap> from_environment() {
  const Selection s = select_from_environment();
  if (!s.built) missing_backend(s);
#if PCOLL_HAVE_PMIX
  if (s.name == "pmix") return make_pmix();
#endif
#if PCOLL_HAVE_PMI2
  if (s.name == "pmi2") return make_pmi2();
#endif
  if (s.name == "single") return make_single();
  return make_store();
}

}  // namespace pcoll::bootstrap
