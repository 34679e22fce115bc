// pcoll_info: what pcoll would do on this node, like fi_info / ucx_info. Prints the build's
// features, the bootstrap the environment selects (without initialising it), the hwloc
// topology with its NICs, the progress thread's CPU, and each transport provider's
// capabilities or the reason it cannot be opened; with --config, the settings catalog instead
// (every PCOLL_* variable with the value in effect and where it came from). Human text by
// default, --json for one JSON object.
//
//   pcoll_info [--json] [-p SELECTOR]...
//   pcoll_info --config [--json]
#include <hwloc.h>
#include <rdma/fabric.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <api/settings_catalog.hpp>
#include <bootstrap/selection.hpp>
#include <collectives/plan_table.hpp>
#include <registry/registry.hpp>
#include <support/error.hpp>
#include <support/pcoll_config.h>
#include <support/settings.hpp>
#include <support/topology.hpp>
#include <transport/transport.hpp>


namespace {

// Every selector of every provider in the registry (providers/registry/registry.cpp), the
// "best of" ones (plain "ofi", "ucx") left out: they would repeat a named one.
std::vector<std::string> registry_selectors() {
  std::vector<std::string> selectors;
  for (const auto* provider : pcoll::providers::all())
    for (const auto& variant : provider->variants)
      if (!variant.empty()) selectors.push_back(std::string(provider->family) + ":" + variant);
  return selectors;
}

struct ProviderReport {
  std::string selector;
  std::optional<pcoll::transport::Capabilities> caps;
  std::string error;
};

struct Report {
  std::vector<std::pair<std::string, std::string>> build;
  pcoll::bootstrap::Selection bootstrap;
  std::string bootstrap_error;
  std::vector<std::string> bootstrap_built;
  pcoll::topology::Summary topology;
  pcoll::topology::ProgressPlacement progress;
  std::string progress_error;
  std::string default_provider;
  std::vector<ProviderReport> providers;
};

Report collect(const std::vector<std::string>& selectors) {
  Report r;
  const uint32_t fi = fi_version();
  const unsigned hw = hwloc_get_api_version();
  r.build = {{"version", PCOLL_VERSION},
             {"libfabric", std::to_string(FI_MAJOR(fi)) + "." + std::to_string(FI_MINOR(fi))},
             {"hwloc_api", std::to_string(hw >> 16) + "." + std::to_string((hw >> 8) & 0xff) + "." +
                           std::to_string(hw & 0xff)},
             {"ucx", PCOLL_HAVE_UCX ? "yes" : "no"},
             {"pmix", PCOLL_HAVE_PMIX ? "yes" : "no"},
             {"pmi2", PCOLL_HAVE_PMI2 ? "yes" : "no"},
             {"mpi", PCOLL_HAVE_MPI ? "yes" : "no"}};
  try {
    r.bootstrap = pcoll::bootstrap::select_from_environment();
  } catch (const std::exception& e) {
    r.bootstrap_error = e.what();
  }
  r.bootstrap_built = pcoll::bootstrap::built_backends();
  r.topology = pcoll::topology::summary();
  try {
    r.progress = pcoll::topology::progress_cpu();
  } catch (const std::exception& e) {
    r.progress_error = e.what();
  }
  r.default_provider = pcoll::providers::default_selector();
  pcoll::transport::Options options;
  options.timeout = std::chrono::milliseconds(5000);
  for (const auto& selector : selectors) {
    ProviderReport p{selector, std::nullopt, ""};
    try {
      const auto transport = pcoll::providers::create(selector, options);
      p.caps = transport->capabilities();
    } catch (const std::exception& e) {
      p.error = e.what();
    }
    r.providers.push_back(std::move(p));
  }
  return r;
}

const char* distance_text(int d) {
  return d == 0 ? "covers this process's CPUs" : d == 1 ? "overlaps this process's CPUs" : "far from this process's CPUs";
}

void print_text(const Report& r) {
  std::printf("pcoll %s\n", PCOLL_VERSION);
  std::printf("build:\n");
  for (const auto& [key, value] : r.build)
    if (key != "version") std::printf("    %-10s %s\n", key.c_str(), value.c_str());

  std::printf("bootstrap:\n");
  if (!r.bootstrap_error.empty()) {
    std::printf("    error      %s\n", r.bootstrap_error.c_str());
  } else {
    std::printf("    selected   %s (%s)%s\n", r.bootstrap.name.c_str(), r.bootstrap.reason.c_str(),
                r.bootstrap.built ? "" : " -- NOT BUILT: pcoll_init would fail");
  }
  std::string built;
  for (const auto& b : r.bootstrap_built) {
    if (!built.empty()) built += ", ";
    built += b;
  }
  std::printf("    built      %s\n", built.c_str());

  std::printf("topology:\n");
  if (!r.topology.error.empty()) {
    std::printf("    error      %s (placement disabled)\n", r.topology.error.c_str());
  } else {
    std::printf("    machine    %s\n", r.topology.machine.c_str());
    std::printf("    cpuset     %s (this process)\n", r.topology.process_cpuset.c_str());
    if (r.topology.nics.empty()) std::printf("    nic        none found by hwloc (virtual NICs are not listed)\n");
    for (const auto& nic : r.topology.nics)
      std::printf("    nic        %-12s %-11s pci %-12s cpus %s: %s\n", nic.name.c_str(), nic.kind.c_str(),
                  nic.pci.empty() ? "-" : nic.pci.c_str(), nic.locality.c_str(), distance_text(nic.distance));
  }
  if (!r.progress_error.empty())
    std::printf("    progress   error: %s\n", r.progress_error.c_str());
  else
    std::printf("    progress   %s\n", r.progress.reason.c_str());

  std::printf("providers (default %s):\n", r.default_provider.c_str());
  for (const auto& p : r.providers) {
    std::printf("  %s\n", p.selector.c_str());
    if (!p.caps) {
      std::printf("    error            %s\n", p.error.c_str());
      continue;
    }
    const auto& c = *p.caps;
    std::printf("    provider         %s\n", c.provider.c_str());
    std::printf("    nic/domain       %s\n", c.domain.c_str());
    std::printf("    rma              write, write_notify (%u-bit notifications), inject %zu B, max write %zu B\n",
                c.notify_bits, c.inject_bytes, c.max_write_bytes);
    if (c.remote_atomics)
      std::printf("    atomics          available: 64-bit fetch_add, compare_swap, swap, max (%s), max count %zu\n",
                  c.native_atomic_max ? "native" : "compare-swap loop", c.max_atomic_count);
    else
      std::printf("    atomics          none (no 64-bit fetch_add / compare_swap; solo, majority and sync "
                  "handles need none)\n");
    std::printf("    progress         %s; idle wait %s\n",
                c.target_progress ? "target software (RMA/atomics need the target to poll)"
                                  : "one-sided (no target polling for RMA/atomics)",
                c.wait_object ? "sleeps on a provider fd" : "spins, then backs off");
  }
}

// Appends JSON members and elements with their separators (nesting via open/close).
class JsonWriter {
 public:
  void open(char bracket) {
    separate();
    out_ += bracket;
    first_ = true;
  }
  void close(char bracket) {
    out_ += bracket;
    first_ = false;
  }
  void key(const std::string& k) {
    separate();
    string_literal(k);
    out_ += ':';
    first_ = true;  // the value follows without a comma
  }
  void value(const std::string& v) {
    separate();
    string_literal(v);
  }
  void raw(const std::string& v) {
    separate();
    out_ += v;
  }
  void member(const std::string& k, const std::string& v) { key(k), value(v); }
  void member_raw(const std::string& k, const std::string& v) { key(k), raw(v); }
  void member_bool(const std::string& k, bool v) { member_raw(k, v ? "true" : "false"); }
  const std::string& text() const { return out_; }

 private:
  void separate() {
    if (!first_) out_ += ',';
    first_ = false;
  }
  void string_literal(const std::string& s) {
    out_ += '"';
    for (const char ch : s) {
      const auto c = static_cast<unsigned char>(ch);
      if (c == '"' || c == '\\') {
        out_ += '\\';
        out_ += ch;
      } else if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out_ += buf;
      } else {
        out_ += ch;
      }
    }
    out_ += '"';
  }

  std::string out_;
  bool first_ = true;
};

void print_json(const Report& r) {
  JsonWriter j;
  j.open('{');
  j.member_raw("pcoll_info", "1");
  j.key("build");
  j.open('{');
  for (const auto& [k, v] : r.build) j.member(k, v);
  j.close('}');

  j.key("bootstrap");
  j.open('{');
  if (!r.bootstrap_error.empty()) {
    j.member("error", r.bootstrap_error);
  } else {
    j.member("name", r.bootstrap.name);
    j.member("reason", r.bootstrap.reason);
    j.member_bool("built", r.bootstrap.built);
  }
  j.key("available");
  j.open('[');
  for (const auto& b : r.bootstrap_built) j.value(b);
  j.close(']');
  j.close('}');

  j.key("topology");
  j.open('{');
  if (!r.topology.error.empty()) {
    j.member("error", r.topology.error);
  } else {
    j.member("machine", r.topology.machine);
    j.member("cpuset", r.topology.process_cpuset);
    j.key("nics");
    j.open('[');
    for (const auto& n : r.topology.nics) {
      j.open('{');
      j.member("name", n.name);
      j.member("kind", n.kind);
      j.member("pci", n.pci);
      j.member("cpus", n.locality);
      j.member_raw("distance", std::to_string(n.distance));
      j.close('}');
    }
    j.close(']');
  }
  j.close('}');

  j.key("progress");
  j.open('{');
  if (!r.progress_error.empty()) {
    j.member("error", r.progress_error);
  } else {
    j.member_raw("cpu", std::to_string(r.progress.cpu));
    j.member("reason", r.progress.reason);
  }
  j.close('}');

  j.member("default_provider", r.default_provider);
  j.key("providers");
  j.open('[');
  for (const auto& p : r.providers) {
    j.open('{');
    j.member("selector", p.selector);
    if (!p.caps) {
      j.member("error", p.error);
    } else {
      const auto& c = *p.caps;
      j.member("provider", c.provider);
      j.member("domain", c.domain);
      j.member_raw("inject_bytes", std::to_string(c.inject_bytes));
      j.member_raw("max_write_bytes", std::to_string(c.max_write_bytes));
      j.member_raw("max_atomic_count", std::to_string(c.max_atomic_count));
      j.member_raw("notify_bits", std::to_string(c.notify_bits));
      j.member_bool("remote_atomics", c.remote_atomics);
      j.member_bool("target_progress", c.target_progress);
      j.member_bool("native_atomic_max", c.native_atomic_max);
      j.member_bool("wait_object", c.wait_object);
    }
    j.close('}');
  }
  j.close(']');
  j.close('}');
  std::printf("%s\n", j.text().c_str());
}

// The reduction plans' table and the rules this environment gives a handle (plan_table.hpp);
// `error` gets why the rules are refused, if they are.
std::vector<pcoll::PlanRule> plan_rules_in_effect(std::string& error) {
  try {
    return pcoll::plan_rules_from_settings();
  } catch (const pcoll::Error& e) {
    error = e.what();
    return {};
  }
}

// --config: the settings catalog (api/settings_catalog.hpp) as this process's environment sets it.
void print_config_text() {
  namespace settings = pcoll::settings;
  std::printf("pcoll %s settings (PCOLL_* environment variables; --json for every field):\n", PCOLL_VERSION);
  std::printf("%-28s %-11s %-8s %-11s %s\n", "name", "source", "kind", "read by", "value");
  for (const auto& row : settings::listed(settings::catalog())) {
    const settings::Setting& s = *row.setting;
    const auto in_effect = settings::effective(s);
    const std::string name(s.name);
    std::printf("%-28s %-11s %-8s %-11s %s\n", name.c_str(), in_effect.from_environment ? "environment" : "default",
                settings::kind_name(s.kind), std::string(row.component).c_str(),
                in_effect.value.empty() ? "(unset)" : in_effect.value.c_str());
    std::printf("    %s [%s]\n", std::string(s.doc).c_str(), settings::type_text(s).c_str());
    if (!in_effect.error.empty()) std::printf("    REFUSED: %s\n", in_effect.error.c_str());
  }
  for (const auto& unknown : settings::unknown_variables(settings::catalog()))
    std::printf("%-28s UNKNOWN (ignored; the closest known name is %s)\n", unknown.name.c_str(),
                unknown.closest.c_str());
  std::printf("\nreduction plans (PCOLL_PLAN_RULES, then the defaults of PCOLL_RD_MAX_BYTES):\n");
  for (const pcoll::PlanRow& row : pcoll::plan_rows()) std::printf("%-20s %s\n", row.name, row.applies);
  std::string error;
  const auto rules = plan_rules_in_effect(error);
  if (error.empty()) std::printf("rules in effect, first match wins: %s\n", pcoll::format_plan_rules(rules).c_str());
  else std::printf("rules REFUSED: %s\n", error.c_str());
}

void print_config_json() {
  namespace settings = pcoll::settings;
  JsonWriter j;
  j.open('{');
  j.member_raw("pcoll_info", "1");
  j.key("settings");
  j.open('[');
  for (const auto& row : settings::listed(settings::catalog())) {
    const settings::Setting& s = *row.setting;
    const auto in_effect = settings::effective(s);
    j.open('{');
    j.member("name", std::string(s.name));
    j.member("kind", settings::kind_name(s.kind));
    j.member("component", std::string(row.component));
    j.member("accepts", settings::type_text(s));
    j.member("default", std::string(s.fallback));
    j.member("value", in_effect.value);
    j.member("source", in_effect.from_environment ? "environment" : "default");
    if (!in_effect.error.empty()) j.member("error", in_effect.error);
    j.member("doc", std::string(s.doc));
    j.close('}');
  }
  j.close(']');
  j.key("unknown");
  j.open('[');
  for (const auto& unknown : settings::unknown_variables(settings::catalog())) {
    j.open('{');
    j.member("name", unknown.name);
    j.member("closest", unknown.closest);
    j.close('}');
  }
  j.close(']');
  j.key("plans");
  j.open('[');
  for (const pcoll::PlanRow& row : pcoll::plan_rows()) {
    j.open('{');
    j.member("name", std::string(row.name));
    j.member("applies", std::string(row.applies));
    j.close('}');
  }
  j.close(']');
  std::string error;
  const auto rules = plan_rules_in_effect(error);
  if (error.empty()) j.member("plan_rules", pcoll::format_plan_rules(rules));
  else j.member("plan_rules_error", error);
  j.close('}');
  std::printf("%s\n", j.text().c_str());
}

void usage(FILE* out) {
  std::fprintf(out,
               "usage: pcoll_info [--json] [-p SELECTOR]...\n"
               "       pcoll_info --config [--json]\n"
               "  Shows pcoll's build features, the bootstrap this environment selects, the hwloc\n"
               "  topology (NICs, progress CPU) and each provider's capabilities.\n"
               "  -p, --provider SEL   only this provider (repeatable): ofi, ofi:shm, ofi:tcp,\n"
               "                       ofi:sockets, ofi:verbs, ofi:cxi, ofi:efa, ucx, ucx:shm, ucx:tcp\n"
               "  --config             every PCOLL_* setting instead: its value in effect, where it\n"
               "                       came from (default or environment), who sets it, its doc\n"
               "  --json               one JSON object instead of text\n");
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  bool config = false;
  std::vector<std::string> selectors;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json") {
      json = true;
    } else if (arg == "--config") {
      config = true;
    } else if ((arg == "-p" || arg == "--provider") && i + 1 < argc) {
      selectors.push_back(argv[++i]);
    } else if (arg == "-h" || arg == "--help") {
      usage(stdout);
      return 0;
    } else {
      std::fprintf(stderr, "pcoll_info: unknown argument '%s'\n", arg.c_str());
      usage(stderr);
      return 2;
    }
  }
  if (config) {
    if (json)
      print_config_json();
    else
      print_config_text();
    return 0;
  }
  if (selectors.empty()) selectors = registry_selectors();
  const Report report = collect(selectors);
  if (json)
    print_json(report);
  else
    print_text(report);
  return 0;
}
