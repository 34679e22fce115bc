// pcoll_sim calibrate: measures this machine for the calibrated platform (sim_platform.hpp):
// the default provider's latency, bandwidth and message rate between two ranks with
// pcoll_pingpong (under pcollrun), and the rates of the engine's own reduction and copy
// kernels, then writes them as a one-host SimGrid platform. It never runs pcoll_allreduce:
// that is what the predictions are checked against.
#pragma once

namespace pcoll::sim {

// argv[0] is "calibrate". Returns the exit status.
int calibrate(int argc, char** argv);

}  // namespace pcoll::sim
