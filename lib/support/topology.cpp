// hwloc placement: NIC locality for the providers' device choice and the progress thread's
// CPU. One immutable snapshot per process (machine topology with I/O devices, and this
// process's cpuset at first use); hwloc failing to load disables placement, never the job.
#include <support/topology.hpp>

#include <unistd.h>

#include <hwloc.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>

#include <support/env.hpp>
#include <support/error.hpp>
#include <support/log.hpp>
#include <support/support_settings.hpp>

namespace pcoll::topology {
namespace {

struct BitmapDeleter {
  void operator()(hwloc_bitmap_s* b) const noexcept { hwloc_bitmap_free(b); }
};
using Bitmap = std::unique_ptr<hwloc_bitmap_s, BitmapDeleter>;

Bitmap make_bitmap() {
  Bitmap b(hwloc_bitmap_alloc());
  if (!b) fail(Errc::out_of_memory, "hwloc_bitmap_alloc failed");
  return b;
}

std::string cpu_list(hwloc_const_bitmap_t set) {
  char* text = nullptr;
  if (set == nullptr || hwloc_bitmap_list_asprintf(&text, set) < 0 || text == nullptr) return "?";
  std::string out(text);
  std::free(text);
  return out;
}

// A name without its UCX port (":1") or libfabric endpoint-type suffix ("-dgram", "-rdm").
std::string base_name(const std::string& name) {
  return name.substr(0, name.find_first_of(":-"));
}

constexpr long kUnknown = std::numeric_limits<long>::max();

class Snapshot {
 public:
  Snapshot() {
    if (hwloc_topology_init(&topology_) != 0) {
      error_ = "hwloc_topology_init failed";
      topology_ = nullptr;
      return;
    }
    // NICs are I/O objects, which hwloc leaves out unless asked.
    hwloc_topology_set_io_types_filter(topology_, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(topology_) != 0) {
      error_ = "hwloc_topology_load failed";
      hwloc_topology_destroy(topology_);
      topology_ = nullptr;
      return;
    }
    process_ = make_bitmap();
    if (hwloc_get_cpubind(topology_, process_.get(), HWLOC_CPUBIND_PROCESS) != 0 ||
        hwloc_bitmap_iszero(process_.get())) {
      // Some containers refuse the per-thread query; the allowed set is the honest fallback.
      hwloc_bitmap_copy(process_.get(), hwloc_topology_get_allowed_cpuset(topology_));
    }
  }
  ~Snapshot() {
    process_.reset();
    if (topology_ != nullptr) hwloc_topology_destroy(topology_);
  }
  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;

  bool loaded() const { return topology_ != nullptr; }
  const std::string& error() const { return error_; }
  hwloc_topology_t get() const { return topology_; }
  hwloc_const_bitmap_t process() const { return process_.get(); }

  // Smaller is closer: 0 covers the process's cpus, 1 overlaps them, 2 is disjoint; the
  // ancestor's size breaks ties (a NIC under this NUMA node beats one under the machine).
  long score(hwloc_obj_t io_object) const {
    hwloc_obj_t ancestor = hwloc_get_non_io_ancestor_obj(topology_, io_object);
    if (ancestor == nullptr || ancestor->cpuset == nullptr) return kUnknown;
    const long weight = hwloc_bitmap_weight(ancestor->cpuset);
    return distance(ancestor->cpuset) * 1000000L + weight;
  }

  int distance(hwloc_const_bitmap_t locality) const {
    if (hwloc_bitmap_isincluded(process(), locality)) return 0;
    return hwloc_bitmap_intersects(process(), locality) ? 1 : 2;
  }

  hwloc_obj_t find_nic(const NicCandidate& candidate) const {
    if (candidate.pci) {
      const auto& p = *candidate.pci;
      if (hwloc_obj_t pci = hwloc_get_pcidev_by_busid(topology_, p.domain, p.bus, p.device, p.function))
        return pci;
    }
    hwloc_obj_t by_base = nullptr;
    for (hwloc_obj_t os = hwloc_get_next_osdev(topology_, nullptr); os != nullptr;
         os = hwloc_get_next_osdev(topology_, os)) {
      if (os->name == nullptr) continue;
      if (candidate.name == os->name) return os;
      if (by_base == nullptr && base_name(candidate.name) == os->name) by_base = os;
    }
    return by_base;
  }

 private:
  hwloc_topology_t topology_ = nullptr;
  Bitmap process_;
  std::string error_;
};

const Snapshot& snapshot() {
  static const Snapshot instance;  // read once; immutable afterwards
  return instance;
}

bool is_nic(hwloc_obj_t os) {
  return os->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK ||
         os->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS;
}

// Local rank from whichever launcher started us; -1 when none says.
int local_rank() {
  if (SupportSettings::raw("PCOLL_LAUNCHER").value_or("") == "pcollrun") {
    if (const auto r = SupportSettings::raw("PCOLL_RANK")) return std::atoi(r->c_str());
  }
  for (const char* name : {"SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                           "PMI_LOCAL_RANK", "PMIX_LOCAL_RANK"}) {
    if (const auto r = env::get(name)) {
      char* end = nullptr;
      const long v = std::strtol(r->c_str(), &end, 10);
      if (end != r->c_str() && *end == '\0' && v >= 0) return static_cast<int>(v);
    }
  }
  return -1;
}

// The closest NIC of one hwloc OS-device type among several, or "" when none is strictly
// closer than the others.
std::string closest_osdev(hwloc_obj_osdev_type_t type) {
  const Snapshot& snap = snapshot();
  if (!snap.loaded()) return "";
  std::vector<std::pair<long, std::string>> scored;
  for (hwloc_obj_t os = hwloc_get_next_osdev(snap.get(), nullptr); os != nullptr;
       os = hwloc_get_next_osdev(snap.get(), os)) {
    if (os->attr->osdev.type == type && os->name != nullptr) scored.emplace_back(snap.score(os), os->name);
  }
  if (scored.size() < 2) return "";
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  if (scored[0].first == kUnknown || scored[0].first == scored[1].first) return "";
  return scored[0].second;
}

}  // namespace

size_t choose_nic(std::span<const NicCandidate> candidates, const std::string& provider_label) {
  if (candidates.empty()) return 0;
  if (const auto wanted = SupportSettings::get_text("PCOLL_NIC")) {
    for (size_t i = 0; i < candidates.size(); ++i)
      if (candidates[i].name == *wanted) return i;
    for (size_t i = 0; i < candidates.size(); ++i)
      if (base_name(candidates[i].name) == base_name(*wanted)) return i;
    std::string names;
    for (const auto& c : candidates) names += (names.empty() ? "" : ", ") + c.name;
    invalid_argument("PCOLL_NIC=" + *wanted + " is none of the NICs " + provider_label +
                     " offers here (" + names + ")");
  }
  if (candidates.size() == 1) return 0;
  const Snapshot& snap = snapshot();
  if (!snap.loaded()) return 0;
  std::vector<long> scores;
  for (const auto& c : candidates) {
    hwloc_obj_t obj = snap.find_nic(c);
    scores.push_back(obj ? snap.score(obj) : kUnknown);
  }
  const auto best = std::min_element(scores.begin(), scores.end());
  // Keep the provider's own order unless hwloc shows a strictly closer NIC.
  if (*best == kUnknown || *best == scores[0]) return 0;
  const size_t index = static_cast<size_t>(best - scores.begin());
  log::info(provider_label + ": using NIC " + candidates[index].name +
            ", the closest to this process's CPUs (PCOLL_NIC overrides)");
  return index;
}

std::string ucx_net_devices(const std::string& variant) {
  if (variant == "shm") return "";
  if (const auto wanted = SupportSettings::get_text("PCOLL_NIC")) return *wanted;
  if (variant == "tcp") return closest_osdev(HWLOC_OBJ_OSDEV_NETWORK);
  const std::string rdma = closest_osdev(HWLOC_OBJ_OSDEV_OPENFABRICS);
  return rdma.empty() ? "" : rdma + ":1";
}

ProgressPlacement progress_cpu() {
  const std::string value = SupportSettings::get_choice("PCOLL_PROGRESS_CPU");  // auto, none or a CPU number
  if (value == "none") return {-1, "unpinned (PCOLL_PROGRESS_CPU=none)"};
  if (value != "auto") return {std::stoi(value), "CPU " + value + " (PCOLL_PROGRESS_CPU)"};
  const Snapshot& snap = snapshot();
  if (!snap.loaded()) return {-1, "unpinned (" + snap.error() + ")"};
  hwloc_topology_t topo = snap.get();
  hwloc_const_bitmap_t mine = snap.process();
  if (hwloc_bitmap_weight(mine) <= 1) return {-1, "unpinned (the process has one CPU: " + cpu_list(mine) + ")"};

  // Cores (PUs where hwloc reports no cores) that hold a CPU of this process.
  const hwloc_obj_type_t unit = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
  std::vector<hwloc_obj_t> cores;
  for (hwloc_obj_t obj = hwloc_get_next_obj_by_type(topo, unit, nullptr); obj != nullptr;
       obj = hwloc_get_next_obj_by_type(topo, unit, obj))
    if (obj->cpuset && hwloc_bitmap_intersects(obj->cpuset, mine)) cores.push_back(obj);
  if (cores.empty()) return {-1, "unpinned (no core of the cpuset " + cpu_list(mine) + " in the topology)"};

  // Applications fill cores from the first; the last core is the least likely to be busy.
  // Unbound ranks of one node share the whole machine: give each its own core from the end.
  size_t pick = cores.size() - 1;
  std::string why = "last core of the process's cpuset " + cpu_list(mine);
  const int local = local_rank();
  if (local > 0 && hwloc_bitmap_isequal(mine, hwloc_topology_get_allowed_cpuset(topo))) {
    pick = cores.size() - 1 - static_cast<size_t>(local) % cores.size();
    why = "core L#" + std::to_string(cores[pick]->logical_index) + ", counted from the last by local rank " +
          std::to_string(local) + " (the node's ranks share the unbound cpuset " + cpu_list(mine) + ")";
  }
  Bitmap pus = make_bitmap();
  hwloc_bitmap_and(pus.get(), cores[pick]->cpuset, mine);
  // The core's last hardware thread: an SMT sibling the application's thread does not hold.
  const int cpu = hwloc_bitmap_last(pus.get());
  return {cpu, "CPU " + std::to_string(cpu) + ": " + why};
}

int node_cpus() {
  const Snapshot& snap = snapshot();
  if (snap.loaded()) {
    const int n = hwloc_bitmap_weight(hwloc_topology_get_allowed_cpuset(snap.get()));
    if (n > 0) return n;
  }
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

Summary summary() {
  Summary out;
  const Snapshot& snap = snapshot();
  if (!snap.loaded()) {
    out.error = snap.error();
    return out;
  }
  hwloc_topology_t topo = snap.get();
  auto count = [&](hwloc_obj_type_t type, const char* noun) {
    const int n = hwloc_get_nbobjs_by_type(topo, type);
    return std::to_string(n < 0 ? 0 : n) + " " + noun + (n == 1 ? "" : "s");
  };
  out.machine = count(HWLOC_OBJ_PACKAGE, "package") + ", " + count(HWLOC_OBJ_NUMANODE, "NUMA node") +
                ", " + count(HWLOC_OBJ_CORE, "core") + ", " + count(HWLOC_OBJ_PU, "PU");
  out.process_cpuset = cpu_list(snap.process());
  for (hwloc_obj_t os = hwloc_get_next_osdev(topo, nullptr); os != nullptr;
       os = hwloc_get_next_osdev(topo, os)) {
    if (!is_nic(os) || os->name == nullptr) continue;
    NicInfo nic;
    nic.name = os->name;
    nic.kind = os->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS ? "openfabrics" : "network";
    if (os->parent && os->parent->type == HWLOC_OBJ_PCI_DEVICE) {
      const auto& p = os->parent->attr->pcidev;
      char text[32];
      std::snprintf(text, sizeof text, "%04x:%02x:%02x.%x", static_cast<unsigned>(p.domain),
                    static_cast<unsigned>(p.bus), static_cast<unsigned>(p.dev),
                    static_cast<unsigned>(p.func));
      nic.pci = text;
    }
    hwloc_obj_t ancestor = hwloc_get_non_io_ancestor_obj(topo, os);
    nic.locality = ancestor && ancestor->cpuset ? cpu_list(ancestor->cpuset) : "?";
    nic.distance = ancestor && ancestor->cpuset ? snap.distance(ancestor->cpuset) : 2;
    out.nics.push_back(std::move(nic));
  }
  return out;
}

}  // namespace pcoll::topology
