// Choosing a libfabric provider for a pcoll selector ("ofi", "ofi:shm", "ofi:verbs", ...) with
// fi_getinfo, and the factory pcoll::transport::ofi::create(). A candidate is taken only
// when one of its entries has everything pcoll needs (ofi_requirements.hpp); otherwise the
// selector moves on to the next, saying why at info level, and the error when none fits
// lists every reason.
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <rdma/fabric.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>
#include <vector>

#include <ofi/ofi_requirements.hpp>
#include <ofi/ofi_settings.hpp>
#include <ofi/ofi_transport.hpp>
#include <support/log.hpp>
#include <support/shm_names.hpp>
#include <support/topology.hpp>

namespace pcoll::transport::ofi {

std::string fi_message(const std::string& call, ssize_t rc) {
  const int code = static_cast<int>(rc < 0 ? -rc : rc);
  return call + ": " + fi_strerror(code) + " (" + std::to_string(-code) + ")";
}

void fail_fi(const std::string& call, ssize_t rc) { fail(Errc::transport, fi_message(call, rc)); }

namespace {

// libinfinipath, which Debian's libfabric loads for its psm provider, installs SIGINT and
// SIGTERM handlers from its constructor that call exit(): a rank given SIGTERM then ran
// libfabric's destructor while fi_getinfo held the lock that destructor takes, and hung (a
// plain kill left it stuck), or exited with code 1 instead of being killed by the signal.
// Handlers of that library (found by the address of the handler) are put back to the
// default when pcoll is loaded; an application's or interpreter's own handlers stay.
void release_psm_signal(int sig) {
  struct sigaction current {};
  if (::sigaction(sig, nullptr, &current) != 0) return;
  const void* handler = (current.sa_flags & SA_SIGINFO) ? reinterpret_cast<void*>(current.sa_sigaction)
                                                        : reinterpret_cast<void*>(current.sa_handler);
  if (handler == reinterpret_cast<void*>(SIG_DFL) || handler == reinterpret_cast<void*>(SIG_IGN)) return;
  Dl_info where{};
  if (::dladdr(handler, &where) == 0 || where.dli_fname == nullptr) return;
  const std::string library = where.dli_fname;
  if (library.find("libinfinipath") == std::string::npos && library.find("libpsm") == std::string::npos) return;
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  ::sigaction(sig, &fallback, nullptr);
}

[[maybe_unused]] const bool kPsmSignalsReleased = [] {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) release_psm_signal(sig);
  return true;
}();

}  // namespace

namespace {

// pcoll variant -> libfabric provider name.
struct Variant {
  const char* name;
  const char* prov_name;
};
constexpr Variant kVariants[] = {
    {"shm", "shm"},        {"tcp", "tcp;ofi_rxm"}, {"sockets", "sockets"},
    {"verbs", "verbs;ofi_rxm"}, {"cxi", "cxi"},    {"efa", "efa"},
    {"psm3", "psm3"},
};

// "" picks real NICs first, then shared memory, then the TCP providers; shm only when the
// job runs on one host (create_ofi).
constexpr const char* kBestOrder[] = {"cxi", "efa", "verbs;ofi_rxm", "psm3",
                                      "shm", "tcp;ofi_rxm", "sockets"};

InfoPtr make_hints(const std::string& prov_name, bool with_atomics) {
  InfoPtr hints(fi_allocinfo());
  if (!hints) fail(Errc::out_of_memory, "fi_allocinfo failed");
  // FI_MSG carries notify(), FI_RMA the data; FI_ATOMIC only where asked (the first query),
  // since the engine's handles need no atomics and some NICs offer none.
  hints->caps = FI_MSG | FI_RMA | (with_atomics ? FI_ATOMIC : 0);
  hints->ep_attr->type = FI_EP_RDM;
  // Every mr_mode bit pcoll handles (ofi_mr.cpp); the provider clears those it does not need.
  hints->domain_attr->mr_mode = static_cast<int>(kHandledMrMode);
  // All calls are serialised by OfiTransport::mutex_, which is what FI_THREAD_DOMAIN asks.
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->domain_attr->av_type = FI_AV_TABLE;
  hints->domain_attr->resource_mgmt = FI_RM_ENABLED;
  // Remote CQ data asked for explicitly: psm2/psm3 lay out their tag bits without it. A
  // provider is refused only for offering less; more (shm's 8 bytes) is still reported.
  hints->domain_attr->cq_data_size = kMinCqDataBytes;
  // FI_CONTEXT / FI_CONTEXT2 (psm3 needs them): every context begins with an fi_context2
  // (ofi_context.hpp). The provider clears the bits it does not need.
  hints->mode = kHonouredMode;
  if (!prov_name.empty()) hints->fabric_attr->prov_name = strdup(prov_name.c_str());
  if (prov_name == "shm") {
    // shm names an endpoint after the process id unless given a name, and a process that
    // was killed leaves its name behind in /dev/shm: a later process that draws the same
    // pid fails in fi_enable with EBUSY (seen after killed-rank tests). A name with a
    // random part never collides; the files of departed processes go first.
    shm_names::remove_of_departed();
    const std::string name = "fi_shm://" + shm_names::make_name();
    hints->addr_format = FI_ADDR_STR;
    hints->src_addr = strdup(name.c_str());
    hints->src_addrlen = name.size() + 1;
  }
  return hints;
}

// Hints that refuse nothing on mode or mr_mode grounds, for saying why a provider that
// fi_getinfo left out under pcoll's hints is unusable: the bits it leaves set are the ones
// it requires.
InfoPtr diagnostic_hints(const std::string& prov_name) {
  InfoPtr hints(fi_allocinfo());
  if (!hints) fail(Errc::out_of_memory, "fi_allocinfo failed");
  hints->mode = ~uint64_t{0};
  hints->domain_attr->mr_mode = static_cast<int>(kHandledMrMode | FI_MR_MMU_NOTIFY | FI_MR_RMA_EVENT);
  hints->fabric_attr->prov_name = strdup(prov_name.c_str());
  return hints;
}

fi_info* getinfo(const fi_info* hints) {
  fi_info* list = nullptr;
  const int rc = fi_getinfo(FI_VERSION(1, 12), nullptr, nullptr, 0, hints, &list);
  return rc == 0 ? list : nullptr;
}

// Among several domains (NICs), the one hwloc finds closest to this process, or PCOLL_NIC's
// (lib/topology.cpp); else the first, libfabric's preference. Shared memory has no NIC.
size_t choose_domain(const std::string& prov_name, const std::vector<fi_info*>& entries) {
  if (prov_name == "shm") return 0;
  std::vector<topology::NicCandidate> nics;
  std::vector<size_t> entry_of_nic;
  for (size_t i = 0; i < entries.size(); ++i) {
    const char* domain = entries[i]->domain_attr->name;
    if (domain == nullptr) continue;
    if (std::any_of(nics.begin(), nics.end(), [&](const auto& n) { return n.name == domain; })) continue;
    topology::NicCandidate nic{domain, std::nullopt};
    if (const fid_nic* fi_nic = entries[i]->nic; fi_nic && fi_nic->bus_attr && fi_nic->bus_attr->bus_type == FI_BUS_PCI) {
      const auto& pci = fi_nic->bus_attr->attr.pci;
      nic.pci = topology::PciAddress{pci.domain_id, pci.bus_id, pci.device_id, pci.function_id};
    }
    nics.push_back(std::move(nic));
    entry_of_nic.push_back(i);
  }
  if (nics.empty()) return 0;
  return entry_of_nic[topology::choose_nic(nics, "ofi:" + prov_name)];
}

}  // namespace

std::vector<std::string> candidate_providers(const std::string& variant) {
  if (variant.empty()) return {std::begin(kBestOrder), std::end(kBestOrder)};
  if (variant == "udp" || variant == "udp;ofi_rxd" || variant == "rxd" || variant == "ofi_rxd")
    fail(Errc::unsupported,
         "PCOLL_PROVIDER=ofi:" + variant +
             " is refused: udp;ofi_rxd in libfabric 1.17 hangs on inject atomics and crashes on "
             "inject_writedata. Use ofi:shm (one node) or ofi:tcp (several hosts).");
  for (const auto& v : kVariants)
    if (variant == v.name || variant == v.prov_name) return {v.prov_name};
  invalid_argument("PCOLL_PROVIDER=ofi:" + variant +
                   " is not a libfabric variant pcoll knows; use ofi, ofi:shm, ofi:tcp, "
                   "ofi:sockets, ofi:verbs, ofi:cxi, ofi:efa or ofi:psm3. " +
                   describe_available_providers());
}

namespace {

// The reasons entries were refused, each once (entries of one provider, one per interface
// or NIC, are often refused for the same reason), in the order first met.
class Reasons {
 public:
  void add(const std::string& reason) {
    if (!reason.empty() && std::find(list_.begin(), list_.end(), reason) == list_.end()) list_.push_back(reason);
  }
  bool empty() const { return list_.empty(); }
  std::string text() const {
    std::string out;
    for (const auto& r : list_) out += (out.empty() ? "" : "; ") + r;
    return out;
  }

 private:
  std::vector<std::string> list_;
};

// Why fi_getinfo gave no entry at all under pcoll's hints: absent here, or present but
// lacking something, asked again without any demand on mode, mr_mode or capabilities.
std::string diagnose(const std::string& prov_name) {
  InfoPtr hints = diagnostic_hints(prov_name);
  InfoPtr list(getinfo(hints.get()));
  if (!list)
    return "not available here (libfabric has no such provider, or it found no device: see fi_info -l "
           "and fi_info -p '" + prov_name + "')";
  Reasons reasons;
  for (fi_info* cur = list.get(); cur != nullptr; cur = cur->next) reasons.add(unusable_because(*cur));
  if (reasons.empty())
    return "fi_getinfo offers no entry under pcoll's hints (FI_EP_RDM, FI_THREAD_DOMAIN, FI_AV_TABLE, "
           "FI_RM_ENABLED, mode " + mode_names(kHonouredMode) + ", mr_mode " + mr_mode_names(kHandledMrMode) + ")";
  return reasons.text();
}

bool test_without_atomics() {
  return OfiSettings::get_unsigned("PCOLL_TEST_OFI_WITHOUT_ATOMICS") != 0;
}

// Takes FI_ATOMIC out of an entry, so that the endpoint is opened without it.
void drop_atomics(fi_info& info) {
  info.caps &= ~FI_ATOMIC;
  if (info.tx_attr) info.tx_attr->caps &= ~FI_ATOMIC;
  if (info.rx_attr) info.rx_attr->caps &= ~FI_ATOMIC;
}

}  // namespace

std::optional<ProviderInfo> query_provider(const std::string& prov_name, std::string* why_not) {
  // First with FI_ATOMIC, then, where no entry offers it along with the rest, without: the
  // engine needs no atomics, and a NIC without them must still run it.
  Reasons reasons;
  std::string no_atomics;
  bool any_entry = false;
  for (const bool with_atomics : {true, false}) {
    if (with_atomics && test_without_atomics()) {
      no_atomics = "PCOLL_TEST_OFI_WITHOUT_ATOMICS asked for none";
      continue;
    }
    InfoPtr hints = make_hints(prov_name, with_atomics);
    InfoPtr list(getinfo(hints.get()));
    // libfabric lists the preferred domain (FI_TCP_IFACE / FI_SOCKETS_IFACE honoured) first.
    std::vector<fi_info*> usable;
    for (fi_info* cur = list.get(); cur != nullptr; cur = cur->next) {
      any_entry = true;
      const std::string why = unusable_because(*cur);
      if (why.empty())
        usable.push_back(cur);
      else
        reasons.add(why);
    }
    if (usable.empty()) {
      if (with_atomics) no_atomics = "no fi_getinfo entry with FI_ATOMIC also has the rest pcoll needs";
      continue;
    }
    fi_info* chosen = usable[0];
    try {
      chosen = usable[choose_domain(prov_name, usable)];
    } catch (const Error& e) {  // PCOLL_NIC names none of this provider's domains
      if (why_not) *why_not = prov_name + ": " + e.what();
      return std::nullopt;
    }
    InfoPtr one(fi_dupinfo(chosen));
    if (!one) fail(Errc::out_of_memory, "fi_dupinfo failed");
    if (!no_atomics.empty()) drop_atomics(*one);
    return ProviderInfo{std::move(one), "", no_atomics};
  }
  if (why_not) *why_not = prov_name + ": " + (any_entry ? reasons.text() : diagnose(prov_name));
  return std::nullopt;
}

std::string describe_available_providers() {
  std::set<std::string> usable;
  std::set<std::string> lacking;
  {
    InfoPtr hints = make_hints("", false);
    InfoPtr list(getinfo(hints.get()));
    for (fi_info* cur = list.get(); cur != nullptr; cur = cur->next)
      if (cur->fabric_attr->prov_name && unusable_because(*cur).empty() &&
          std::string(cur->fabric_attr->prov_name).find("ofi_rxd") == std::string::npos)  // refused above
        usable.insert(cur->fabric_attr->prov_name);
  }
  {
    InfoPtr list(getinfo(nullptr));
    for (fi_info* cur = list.get(); cur != nullptr; cur = cur->next)
      if (cur->fabric_attr->prov_name && !usable.count(cur->fabric_attr->prov_name))
        lacking.insert(cur->fabric_attr->prov_name);
  }
  auto join = [](const std::set<std::string>& names) {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
    return out.empty() ? std::string("none") : out;
  };
  return "libfabric providers with what pcoll needs (FI_EP_RDM, FI_MSG, FI_RMA, remote CQ data) here: " +
         join(usable) + "; present but unusable for pcoll: " + join(lacking) + ".";
}

namespace {

std::string selector_for(const std::string& prov_name) {
  for (const auto& v : kVariants)
    if (prov_name == v.prov_name) return std::string("ofi:") + v.name;
  return "ofi:" + prov_name;
}

}  // namespace

std::unique_ptr<Transport> create_ofi(const std::string& variant, const Options& options) {
  const auto candidates = candidate_providers(variant);
  std::string reasons;
  for (const auto& prov_name : candidates) {
    if (variant.empty() && prov_name == "shm" && options.layout.hosts > 1) {
      reasons += (reasons.empty() ? "" : "; ") + std::string("shm: the job runs on ") +
                 std::to_string(options.layout.hosts) + " hosts";
      continue;
    }
    std::string why_not;
    std::optional<ProviderInfo> provider = query_provider(prov_name, &why_not);
    if (!provider) {
      log::info("ofi: skipping " + why_not);
      reasons += (reasons.empty() ? "" : "; ") + why_not;
      continue;
    }
    provider->selector = selector_for(prov_name);
    try {
      return std::make_unique<OfiTransport>(std::move(*provider), options);
    } catch (const Error& e) {
      // "" tries the next provider; an explicit variant reports why this one failed.
      if (!variant.empty()) throw;
      reasons += (reasons.empty() ? "" : "; ") + prov_name + ": " + e.what();
      log::info("ofi: skipping " + prov_name + ": " + e.what());
    }
  }
  fail(Errc::unsupported, "PCOLL_PROVIDER=ofi" + (variant.empty() ? "" : ":" + variant) +
                              ": no usable libfabric provider (" + reasons + "). " +
                              describe_available_providers());
}

const ProviderDescriptor& descriptor() {
  static const ProviderDescriptor ofi{
      "ofi", "libfabric: shm, tcp;ofi_rxm, sockets, verbs;ofi_rxm, cxi, efa, psm3",
      {"", "shm", "tcp", "sockets", "verbs", "cxi", "efa", "psm3"}, create_ofi, ProviderDescriptor::Kind::core,
      nullptr, {"", "verbs", "efa", "cxi", "psm3"}, "shm"};
  return ofi;
}

}  // namespace pcoll::transport::ofi
