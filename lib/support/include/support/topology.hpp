// Hardware placement from hwloc: which NIC is closest to this process's CPUs, and which CPU
// the progress thread should run on. The topology is read once per process (first use) and
// never changes afterwards, so every query here is a read of immutable data.
//
// Overrides: PCOLL_NIC names the NIC (libfabric domain or UCX device, e.g. "mlx5_0" or
// "mlx5_0:1"); PCOLL_PROGRESS_CPU is "auto" (default), a logical CPU number, or "none".
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace pcoll::topology {

// A PCI address as libfabric's fi_bus_attr reports it.
struct PciAddress {
  uint16_t domain = 0;
  uint8_t bus = 0;
  uint8_t device = 0;
  uint8_t function = 0;
};

// One NIC a provider could use: libfabric domain name / UCX device name, and its PCI
// address where the provider knows it (else hwloc is asked by name).
struct NicCandidate {
  std::string name;
  std::optional<PciAddress> pci;
};

// Index into `candidates` of the NIC to use. PCOLL_NIC picks by name (exact, or the part
// before ':' for UCX "device:port"); no match is Errc::invalid_argument listing the names.
// Otherwise the candidate strictly closest to the process's cpuset, and when locality does
// not tell them apart (one NIC, virtual NICs, equal distance) 0: the provider's own order.
size_t choose_nic(std::span<const NicCandidate> candidates, const std::string& provider_label);

// The UCX_NET_DEVICES value pcoll would set for a UCX variant ("" = UCX decides): PCOLL_NIC
// verbatim, else the closest RDMA device ("<name>:1") or, for "tcp", the closest network
// interface, when several exist and one is strictly closer. "" leaves UCX's choice.
std::string ucx_net_devices(const std::string& variant);

// The progress thread's CPU: PCOLL_PROGRESS_CPU when it is a number, -1 for "none", else
// (auto) a CPU of this process's cpuset the application is least likely to use: the last
// PU of the last core, shifted down by the local rank when ranks share an unbound cpuset.
// -1 when the process has a single CPU (pinning would gain nothing).
struct ProgressPlacement {
  int cpu = -1;
  std::string reason;  // for logs and pcoll_info
};
ProgressPlacement progress_cpu();

// Logical CPUs this node lets the job use (hwloc's allowed cpuset; the online CPU count when
// hwloc failed): with more ranks than this on the node, waiting ranks must yield.
int node_cpus();

// What hwloc found, for pcoll_info.
struct NicInfo {
  std::string name;
  std::string kind;        // "network", "openfabrics" (RDMA), "other"
  std::string pci;         // "0000:3b:00.0" or ""
  std::string locality;    // cpuset list of the nearest non-I/O ancestor, e.g. "0-23"
  int distance = 0;        // 0: covers the process's cpus, 1: overlaps them, 2: disjoint
};
struct Summary {
  std::string machine;          // "1 package, 2 NUMA nodes, 16 cores, 32 PUs"
  std::string process_cpuset;   // "0-31"
  std::vector<NicInfo> nics;
  std::string error;            // hwloc failed to load: placement is disabled
};
Summary summary();

}  // namespace pcoll::topology
