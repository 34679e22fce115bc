// How much memory this host can still give a process: what a handle's allocation is checked
// against before it is made (docs/design.md, "Memory of a handle"), so that a vector the
// node cannot hold is refused by name instead of filling memory and /dev/shm until the
// kernel's OOM killer ends the job.
#pragma once

#include <cstdint>
#include <string>

namespace pcoll::host_memory {

struct Available {
  uint64_t bytes = 0;
  std::string source;  // where the figure comes from, for error messages
};

// The smaller of the kernel's MemAvailable (/proc/meminfo) and, inside a cgroup v2 with a
// memory limit (as Slurm jobs are), that limit less what the group uses. The test setting
// PCOLL_TEST_HOST_MEMORY_BYTES replaces both. Without any figure, UINT64_MAX.
Available available();

// `bytes` in the unit a reader takes in at a glance: "512 B", "3.0 MiB", "256.0 GiB".
std::string describe_bytes(uint64_t bytes);

}  // namespace pcoll::host_memory
