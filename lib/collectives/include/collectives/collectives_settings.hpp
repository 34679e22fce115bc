// The settings the collectives read: the communicator's waiting and notification width, and
// a handle's chunk, pool, plan threshold and trace (settings.hpp says how rows are read).
// Each is read once, into Comm::Setup when a communicator is made (comm.cpp, read_settings) and into the
// HandleSpec when a handle is (handle_spec.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include <support/settings.hpp>

namespace pcoll {
namespace settings {

inline constexpr std::string_view kYieldChoices[] = {"auto", "always", "never"};
inline constexpr std::string_view kNotifyBitsChoices[] = {"auto", "32", "64"};
inline constexpr std::string_view kPlanChoices[] = {"auto", "flat"};

inline constexpr auto kCollectivesRows = std::to_array<Setting>({
    {.name = "PCOLL_SPIN_US", .kind = Kind::user, .type = Type::unsigned_int, .fallback = "50",
     .min = 0, .max = 1000000,
     .doc = "how long a waiting caller keeps driving progress itself after the engine last moved, "
            "before sleeping"},
    {.name = "PCOLL_YIELD", .kind = Kind::user, .type = Type::choice, .fallback = "auto", .choices = kYieldChoices,
     .doc = "whether a spinning waiter yields its CPU between polls: auto (when the node runs more "
            "ranks than CPUs), always, never"},
    {.name = "PCOLL_CHUNK_BYTES", .kind = Kind::user, .type = Type::unsigned_int, .fallback = "262144",
     .min = 4096, .max = uint64_t{1} << 30,
     .doc = "pipelining chunk of large reductions"},
    {.name = "PCOLL_POOL_BYTES", .kind = Kind::user, .type = Type::unsigned_int, .fallback = "8388608",
     .min = 8192, .max = uint64_t{1} << 40,
     .doc = "landing pool of a handle per incoming exchange (a peer whose data this rank reduces): "
            "at least two chunks of PCOLL_CHUNK_BYTES; a smaller vector takes only what two rounds need"},
    {.name = "PCOLL_NOTIFY_BITS", .kind = Kind::user, .type = Type::choice, .fallback = "auto",
     .choices = kNotifyBitsChoices,
     .doc = "notification width: auto (64 where the provider carries them, else 32), 32 (the layout "
            "of NICs with 4-byte remote CQ data, on any provider) or 64"},
    {.name = "PCOLL_TRACE", .kind = Kind::user, .type = Type::text, .fallback = "",
     .doc = "directory where every rank writes a Chrome trace of each handle's rounds "
            "(docs/observability.md); unset: no trace"},
    // The largest vector kept on recursive doubling: at P=4 on ucx:shm Rabenseifner's
    // smaller copies and reductions win from 64 KiB (docs/performance.md).
    {.name = "PCOLL_RD_MAX_BYTES", .kind = Kind::user, .type = Type::unsigned_int, .fallback = "32768",
     .min = 0, .max = uint64_t{1} << 40,
     .doc = "recursive doubling up to this many bytes a round moves (the vector in the accumulation "
            "type and its flag words), the direct plan or Rabenseifner above: the defaults of PCOLL_PLAN_RULES"},
    {.name = "PCOLL_PLAN", .kind = Kind::user, .type = Type::choice, .fallback = "auto", .choices = kPlanChoices,
     .doc = "reduction plan above PCOLL_RD_MAX_BYTES: auto (ranks that all map each other's memory, "
            "one host on ucx:shm, reduce from it where it lies; others Rabenseifner) or flat (Rabenseifner always, "
            "and flat activation trees across nodes)"},
    {.name = "PCOLL_PLAN_RULES", .kind = Kind::user, .type = Type::text, .fallback = "",
     .doc = "reduction plans by the bytes a round moves (vector and flag words), tried before the "
            "defaults: name:from-to,... with sizes in bytes, K, M or G, to may be inf (e.g. "
            "recursive_doubling:0-32K,rabenseifner:32K-inf); plans: recursive_doubling, rabenseifner, direct, "
            "node_leader and node_rails (jobs over several nodes; only where these rules name them)"},
    {.name = "PCOLL_TEST_CLOCK_SKEW_MS", .kind = Kind::test, .type = Type::unsigned_int, .fallback = "0",
     .min = 0, .max = 86400000, .doc = "added to this rank's trace clock, to test the clock offsets"},
    {.name = "PCOLL_TEST_KILL_AT_WRITE", .kind = Kind::test, .type = Type::unsigned_int, .fallback = "0",
     .min = 0, .max = UINT32_MAX,
     .doc = "this process SIGKILLs itself instead of its n-th data write of a round's plan (counted over all "
            "handles from 1; 0: never), to test survivors that one failure leaves a round apart"},
});

}  // namespace settings

using CollectivesSettings = settings::Reader<settings::kCollectivesRows>;

}  // namespace pcoll
