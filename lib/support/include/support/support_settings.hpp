// The settings the support layer reads, and the launcher's interface (the variables pcollrun
// sets for its ranks, read by the topology and the bootstrap): logging, the liveness
// timeout every layer uses, the progress thread's CPU, the NIC, and the host memory a
// handle may take (settings.hpp says how rows are read).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include <support/settings.hpp>

namespace pcoll {
namespace settings {

inline constexpr std::string_view kLogChoices[] = {"error", "warn", "info", "debug", "trace"};
inline constexpr std::string_view kProgressCpuWords[] = {"auto", "none"};
inline constexpr std::string_view kLauncherChoices[] = {"manual", "pcollrun"};

inline constexpr auto kSupportRows = std::to_array<Setting>({
    {.name = "PCOLL_TIMEOUT_MS", .kind = Kind::user, .type = Type::unsigned_int, .fallback = "30000",
     .min = 1, .max = 86400000,
     .doc = "how long a silent peer may stay silent before it is reported"},
    {.name = "PCOLL_PROGRESS_CPU", .kind = Kind::user, .type = Type::choice_or_unsigned, .fallback = "auto",
     .min = 0, .max = 65535, .choices = kProgressCpuWords,
     .doc = "CPU for the progress thread: a CPU number, auto (hwloc: a core the application is "
            "least likely to use) or none"},
    {.name = "PCOLL_NIC", .kind = Kind::user, .type = Type::text, .fallback = "",
     .doc = "NIC to use (libfabric domain or UCX device); unset: the one closest to the process"},
    {.name = "PCOLL_LOG", .kind = Kind::user, .type = Type::choice, .fallback = "warn", .choices = kLogChoices,
     .doc = "log level on stderr"},

    {.name = "PCOLL_RANK", .kind = Kind::launcher, .type = Type::unsigned_int, .fallback = "",
     .min = 0, .max = UINT32_MAX, .doc = "this process's rank, below PCOLL_SIZE"},
    {.name = "PCOLL_SIZE", .kind = Kind::launcher, .type = Type::unsigned_int, .fallback = "",
     .min = 1, .max = uint64_t{1} << 20, .doc = "number of ranks in the job"},
    {.name = "PCOLL_ROOT", .kind = Kind::launcher, .type = Type::text, .fallback = "",
     .doc = "host:port of the rendezvous store (rank 0 hosts it in a manual job)"},
    {.name = "PCOLL_JOB_KEY", .kind = Kind::launcher, .type = Type::text, .fallback = "",
     .doc = "secret every rank of the job shares; the store refuses ranks with another key"},
    {.name = "PCOLL_LAUNCHER", .kind = Kind::launcher, .type = Type::choice, .fallback = "manual",
     .choices = kLauncherChoices,
     .doc = "who hosts the store: pcollrun (set by pcollrun for its ranks) or manual (rank 0)"},
    {.name = "PCOLL_LOCAL_RANK", .kind = Kind::launcher, .type = Type::unsigned_int, .fallback = "",
     .min = 0, .max = UINT32_MAX,
     .doc = "rank among this host's ranks, for the application (pcoll does not read it)"},
    {.name = "PCOLL_LOCAL_SIZE", .kind = Kind::launcher, .type = Type::unsigned_int, .fallback = "",
     .min = 1, .max = uint64_t{1} << 20, .doc = "ranks on this host, for the application (pcoll does not read it)"},

    {.name = "PCOLL_TEST_HOST_MEMORY_BYTES", .kind = Kind::test, .type = Type::unsigned_int, .fallback = "",
     .min = 0, .max = UINT64_MAX,
     .doc = "the memory this host reports as available to a handle's allocation (instead of "
            "MemAvailable and the cgroup limit)"},
});

}  // namespace settings

using SupportSettings = settings::Reader<settings::kSupportRows>;

}  // namespace pcoll
