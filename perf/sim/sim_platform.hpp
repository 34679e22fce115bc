// The platforms pcoll_sim runs on: SimGrid XML written from a few figures (one host
// calibrated to the machine at hand, a two-level fat tree, a dragonfly) or a user's own
// file, plus the costs SimGrid does not model for pcoll (a reduction's and a copy's rate,
// the CPU time of posting a message and of handling one), kept with the platform as
// <prop> rows of its root zone so that a platform file is the whole model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pcoll::sim {

// What a rank's progress engine spends, beyond what the network model charges.
struct EngineCosts {
  // Accumulation bytes reduced, and bytes copied, per second by one core: from memory
  // (a handle whose buffers exceed cache_bytes) and from cache (the others).
  double reduce_bytes_per_s = 5e9;
  double copy_bytes_per_s = 7e9;
  double reduce_cached_bytes_per_s = 15e9;
  double copy_cached_bytes_per_s = 25e9;
  // Bytes per second of a block in this core's cache copied into memory that is not (the
  // result handed to the application a block at a time, when its vector exceeds the cache):
  // the stores go to memory. A platform file without it uses copy_bytes_per_s.
  double copy_out_bytes_per_s = 0;
  double cache_bytes = 16e6;
  double post_s = 0.3e-6;    // CPU time to post one write or notification
  double notice_s = 0.2e-6;  // CPU time to handle one arrived notification
  double call_s = 0.3e-6;    // CPU time of one application call (run: post, join, complete, hand over)
  // A waiting engine that must react on a host with twice as many ranks as cores waits
  // this long for one (scaled by ranks / cores - 1 on other hosts; 0 below one rank per core).
  double wake_s = 0;
  size_t inject_bytes = 64;  // writes up to this size complete locally at once
  // How much later than asked a sleeping application wakes (pcoll_imbalance computes by
  // sleeping): the 0, 10, ..., 100th percentiles, seconds; empty: on time. Each step's
  // overshoot is drawn from them by a hash of (seed, rank, step), the same in every mode.
  std::vector<double> sleep_overshoot_s;
};

// The figures a generated platform is written from.
struct LinkFigures {
  double bandwidth_bytes_per_s = 0;
  double latency_s = 0;
};

enum class PlatformKind { calibrated, fat_tree, dragonfly, ideal, file };

struct PlatformChoice {
  PlatformKind kind = PlatformKind::calibrated;
  std::string file;         // kind file: the user's XML; calibrated: the calibration file
  int ranks_per_node = 0;   // 0: the platform's default (calibrated: every rank on its host; others 1)
};

// A platform to load: the XML text and how ranks map onto its hosts.
struct Platform {
  std::string name;          // "calibrated", "fat-tree", "dragonfly", or the file's path
  std::string xml;           // empty for kind file (SimGrid loads the file itself)
  std::string file;          // the path to load
  int nodes = 1;             // hosts that ranks use: rank r on host "node-<r / ranks_per_node>"
  int ranks_per_node = 1;
  bool maps_node_peers = true;  // ranks of one host map each other's memory (ucx:shm: the direct plan)
  EngineCosts costs;
  LinkFigures network;          // between hosts (generated platforms)
  LinkFigures node;             // within a host (the loopback of generated platforms)
  std::string description;      // figures and their sources, in a line
};

// The calibration file's name when --calibration is not given.
inline constexpr const char kDefaultCalibration[] = "pcoll_sim.calibrated.xml";

// The platform for `ranks` ranks. Throws perf::Error(PCOLL_ERR_INVALID_ARGUMENT) naming the
// problem (a missing calibration, ranks per node the platform cannot hold).
Platform make_platform(const PlatformChoice& choice, int ranks);

// After SimGrid loaded the platform: a user file's <prop id="pcoll.*"> rows override the
// default costs; its hosts must be at least `nodes`. Call inside the loaded engine.
void read_file_properties(Platform& platform);

// The calibration file: a one-host platform of `cores` cores whose loopback has the
// measured latency and bandwidth, and whose root zone holds the measured engine costs.
// Every rank's engine computes on the host's cores (SimGrid shares them among the ranks).
std::string calibrated_xml(const LinkFigures& node, const EngineCosts& costs, int cores, const std::string& source);

}  // namespace pcoll::sim
