// The NICs this host has, by the names PCOLL_NIC may give them: network interfaces
// (/sys/class/net: "eth0", what ofi:tcp and ucx:tcp use) and RDMA devices
// (/sys/class/infiniband, /sys/class/cxi: "mlx5_0", "cxi0", what verbs, efa, cxi and
// UCX's rdma transports use).
#pragma once

#include <string>
#include <vector>

namespace pcoll::transport {

// Every NIC name of this host, sorted.
std::vector<std::string> host_nics();

// Refuses (Errc::invalid_argument, naming PCOLL_NIC, its value and the NICs there are) a
// PCOLL_NIC that names no NIC of this host, whichever provider runs: one that has no NICs
// to choose from would ignore it, and UCX would fail later without naming it. A provider's
// own form of a name counts too: "mlx5_0:1" (UCX's device:port), "rdmap0s31-rdm" (a
// libfabric domain) name mlx5_0 and rdmap0s31.
void check_nic_setting();

}  // namespace pcoll::transport
