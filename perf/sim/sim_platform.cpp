// Platforms of pcoll_sim (sim_platform.hpp).
#include "sim_platform.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <simgrid/s4u.hpp>

#include "perf_error.hpp"

namespace pcoll::sim {
namespace {

std::string number(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%.9g", value);
  return text;
}

std::string header() {
  return "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
         "<platform version=\"4.1\">\n";
}

std::string cost_props(const EngineCosts& costs) {
  std::ostringstream out;
  out << "  <prop id=\"pcoll.reduce_bytes_per_s\" value=\"" << number(costs.reduce_bytes_per_s) << "\"/>\n"
      << "  <prop id=\"pcoll.copy_bytes_per_s\" value=\"" << number(costs.copy_bytes_per_s) << "\"/>\n"
      << "  <prop id=\"pcoll.reduce_cached_bytes_per_s\" value=\"" << number(costs.reduce_cached_bytes_per_s) << "\"/>\n"
      << "  <prop id=\"pcoll.copy_cached_bytes_per_s\" value=\"" << number(costs.copy_cached_bytes_per_s) << "\"/>\n"
      << "  <prop id=\"pcoll.copy_out_bytes_per_s\" value=\"" << number(costs.copy_out_bytes_per_s) << "\"/>\n"
      << "  <prop id=\"pcoll.cache_bytes\" value=\"" << number(costs.cache_bytes) << "\"/>\n"
      << "  <prop id=\"pcoll.call_s\" value=\"" << number(costs.call_s) << "\"/>\n"
      << "  <prop id=\"pcoll.wake_s\" value=\"" << number(costs.wake_s) << "\"/>\n"
      << "  <prop id=\"pcoll.post_s\" value=\"" << number(costs.post_s) << "\"/>\n"
      << "  <prop id=\"pcoll.notice_s\" value=\"" << number(costs.notice_s) << "\"/>\n"
      << "  <prop id=\"pcoll.inject_bytes\" value=\"" << costs.inject_bytes << "\"/>\n";
  if (!costs.sleep_overshoot_s.empty()) {
    out << "  <prop id=\"pcoll.sleep_overshoot_s\" value=\"";
    for (size_t i = 0; i < costs.sleep_overshoot_s.size(); ++i)
      out << (i ? "," : "") << number(costs.sleep_overshoot_s[i]);
    out << "\"/>\n";
  }
  return out.str();
}

// One cluster of `hosts` hosts named node-0.. with the given topology (SimGrid's cluster
// tag: every host has a private link to the topology, and a loopback for traffic between
// ranks on the host).
std::string cluster_xml(const std::string& id, int hosts, const LinkFigures& network, const LinkFigures& node,
                        const std::string& topology, const std::string& parameters, const EngineCosts& costs,
                        int cores) {
  std::ostringstream out;
  out << header() << "<zone id=\"world\" routing=\"Full\">\n" << cost_props(costs)
      << "  <cluster id=\"" << id << "\" prefix=\"node-\" suffix=\"\" radical=\"0-" << hosts - 1
      << "\" speed=\"1Gf\" core=\"" << cores << "\" bw=\"" << number(network.bandwidth_bytes_per_s) << "Bps\" lat=\""
      << number(network.latency_s) << "s\" loopback_bw=\"" << number(node.bandwidth_bytes_per_s)
      << "Bps\" loopback_lat=\"" << number(node.latency_s) << "s\"";
  if (!topology.empty()) out << " topology=\"" << topology << "\" topo_parameters=\"" << parameters << "\"";
  out << "/>\n</zone>\n</platform>\n";
  return out.str();
}

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Within a node: shared memory between the ranks of one host. The figures are those the
// calibration measured on this machine's ucx:shm when a calibration file is present, else
// these (a few hundred nanoseconds and some 10 GB/s: a single-socket server's
// memcpy-bound shared-memory transport).
LinkFigures default_node_link() { return LinkFigures{10e9, 0.5e-6}; }

}  // namespace

std::string calibrated_xml(const LinkFigures& node, const EngineCosts& costs, int cores, const std::string& source) {
  std::ostringstream out;
  out << "<!-- pcoll_sim calibrate: " << source << " -->\n";
  std::string xml = cluster_xml("calibrated", 1, node, node, "", "", costs, cores);
  // The comment goes after the XML declaration.
  const size_t after = xml.find("\n") + 1;
  xml.insert(after, out.str());
  return xml;
}

Platform make_platform(const PlatformChoice& choice, int ranks) {
  Platform p;
  p.ranks_per_node = choice.ranks_per_node;
  switch (choice.kind) {
    case PlatformKind::calibrated: {
      p.name = "calibrated";
      p.file = choice.file.empty() ? kDefaultCalibration : choice.file;
      std::ifstream in(p.file);
      if (!in)
        perf::invalid_argument("--platform calibrated reads " + p.file +
                               ", which does not exist: run 'pcoll_sim calibrate' on this machine first "
                               "(or give --calibration FILE)");
      if (p.ranks_per_node != 0 && p.ranks_per_node != ranks)
        perf::invalid_argument("--platform calibrated is this one host: every rank runs on it, so --ranks-per-node "
                               "must be " + std::to_string(ranks) + " (or left out), not " +
                               std::to_string(p.ranks_per_node));
      p.ranks_per_node = ranks;
      p.nodes = 1;
      p.description = "calibrated on this machine (" + p.file + ")";
      return p;
    }
    case PlatformKind::ideal: {
      // No communication cost at all: what a plain replay of the schedule gives, the
      // yardstick of every mode's speedup.
      if (p.ranks_per_node == 0) p.ranks_per_node = 1;
      p.nodes = ceil_div(ranks, p.ranks_per_node);
      p.name = "ideal";
      p.network = LinkFigures{1e18, 0};
      p.node = p.network;
      p.costs = EngineCosts{1e18, 1e18, 1e18, 1e18, 1e18, 1e18, 0, 0, 0, 0, 1u << 30, {}};
      p.xml = cluster_xml("ideal", p.nodes, p.network, p.node, "", "", p.costs, p.ranks_per_node);
      p.description = "no communication cost: links of no latency and unbounded bandwidth, engines that cost nothing";
      return p;
    }
    case PlatformKind::file:
      p.name = choice.file;
      p.file = choice.file;
      if (!std::ifstream(p.file)) perf::invalid_argument("--platform " + p.file + ": no such file");
      if (p.ranks_per_node == 0) p.ranks_per_node = 1;
      p.nodes = ceil_div(ranks, p.ranks_per_node);
      p.description = "platform file " + p.file;
      return p;
    case PlatformKind::fat_tree: {
      // HDR InfiniBand: 200 Gb/s per port (25 GB/s), and about 130 ns per switch hop
      // (NVIDIA Quantum HDR switches); 0.3 us per link counts the NIC and cable too, so
      // that a message crossing two switches (four links) pays about 1.2 us, the
      // small-message latency MPI reports on such clusters. Leaves of 16 nodes with 16
      // uplinks each: non-blocking.
      if (p.ranks_per_node == 0) p.ranks_per_node = 1;
      p.nodes = ceil_div(ranks, p.ranks_per_node);
      const int leaves = ceil_div(p.nodes, 16);
      p.name = "fat-tree";
      p.network = LinkFigures{25e9, 0.3e-6};
      p.node = default_node_link();
      p.xml = cluster_xml("fat-tree", 16 * leaves, p.network, p.node, "FAT_TREE",
                          "2;16," + std::to_string(leaves) + ";1,16;1,1", p.costs, p.ranks_per_node);
      p.description = "two-level fat tree, leaves of 16 nodes, 25 GB/s and 0.3 us per link (HDR InfiniBand-like)";
      return p;
    }
    case PlatformKind::dragonfly: {
      // Slingshot-like: 64-port switches with 16 nodes each, 32 switches per group all to
      // all (512 nodes per group), groups all to all; 200 Gb/s links (25 GB/s) and about
      // 350 ns per switch (HPE Rosetta), taken as 0.35 us per link. SimGrid's dragonfly
      // allows at most as many groups as routers per chassis (32): 16384 nodes.
      if (p.ranks_per_node == 0) p.ranks_per_node = 1;
      p.nodes = ceil_div(ranks, p.ranks_per_node);
      const int groups = ceil_div(p.nodes, 512);
      if (groups > 32)
        perf::invalid_argument("--platform dragonfly holds at most 16384 nodes (32 groups of 512); " +
                               std::to_string(p.nodes) + " needed: give more --ranks-per-node");
      p.name = "dragonfly";
      p.network = LinkFigures{25e9, 0.35e-6};
      p.node = default_node_link();
      // groups,links between each pair; chassis per group,links; routers per chassis,links; nodes per router
      p.xml = cluster_xml("dragonfly", 512 * groups, p.network, p.node, "DRAGONFLY",
                          std::to_string(groups) + ",2;1,1;32,1;16", p.costs, p.ranks_per_node);
      p.description = "dragonfly, groups of 32 switches x 16 nodes, 25 GB/s and 0.35 us per link (Slingshot-like)";
      return p;
    }
  }
  return p;
}

void read_file_properties(Platform& platform) {
  const auto* root = simgrid::s4u::Engine::get_instance()->get_netzone_root();
  // The root zone of a file is its outermost <zone>; a cluster at the top is the root.
  const auto read = [&](const char* name, double& value) {
    const char* text = root->get_property(name);
    if (text == nullptr) {
      for (const auto* child : root->get_children())
        if ((text = child->get_property(name)) != nullptr) break;
    }
    if (text == nullptr) return;
    char* end = nullptr;
    const double v = std::strtod(text, &end);
    if (end == text || *end != '\0' || !(v >= 0))
      perf::invalid_argument("platform " + platform.file + ": property " + name + " = '" + text +
                             "' is not a non-negative number");
    value = v;
  };
  double inject = static_cast<double>(platform.costs.inject_bytes);
  read("pcoll.reduce_bytes_per_s", platform.costs.reduce_bytes_per_s);
  read("pcoll.copy_bytes_per_s", platform.costs.copy_bytes_per_s);
  read("pcoll.reduce_cached_bytes_per_s", platform.costs.reduce_cached_bytes_per_s);
  read("pcoll.copy_cached_bytes_per_s", platform.costs.copy_cached_bytes_per_s);
  read("pcoll.copy_out_bytes_per_s", platform.costs.copy_out_bytes_per_s);
  read("pcoll.cache_bytes", platform.costs.cache_bytes);
  read("pcoll.call_s", platform.costs.call_s);
  read("pcoll.wake_s", platform.costs.wake_s);
  read("pcoll.post_s", platform.costs.post_s);
  read("pcoll.notice_s", platform.costs.notice_s);
  read("pcoll.inject_bytes", inject);
  platform.costs.inject_bytes = static_cast<size_t>(inject);
  const char* overshoot = root->get_property("pcoll.sleep_overshoot_s");
  if (overshoot != nullptr) {
    platform.costs.sleep_overshoot_s.clear();
    std::istringstream list(overshoot);
    for (std::string item; std::getline(list, item, ',');) {
      char* end = nullptr;
      const double v = std::strtod(item.c_str(), &end);
      if (item.empty() || *end != '\0' || !(v >= 0))
        perf::invalid_argument("platform " + platform.file + ": pcoll.sleep_overshoot_s = '" + overshoot +
                               "' is not a list of non-negative seconds");
      platform.costs.sleep_overshoot_s.push_back(v);
    }
    if (platform.costs.sleep_overshoot_s.size() != 11 ||
        !std::is_sorted(platform.costs.sleep_overshoot_s.begin(), platform.costs.sleep_overshoot_s.end()))
      perf::invalid_argument("platform " + platform.file + ": pcoll.sleep_overshoot_s needs the 11 percentiles "
                             "0, 10, ..., 100 in ascending order");
  }
  if (platform.costs.reduce_bytes_per_s <= 0 || platform.costs.copy_bytes_per_s <= 0 ||
      platform.costs.reduce_cached_bytes_per_s <= 0 || platform.costs.copy_cached_bytes_per_s <= 0)
    perf::invalid_argument("platform " + platform.file + ": the pcoll.*_bytes_per_s rates must be above 0");
}

}  // namespace pcoll::sim
