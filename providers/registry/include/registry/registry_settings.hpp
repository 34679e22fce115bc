// The settings the provider registry reads: which provider, and how a network provider
// reaches ranks on its own host (settings.hpp says how rows are read).
#pragma once

#include <array>
#include <string_view>

#include <support/pcoll_config.h>
#include <support/settings.hpp>

namespace pcoll {
namespace settings {

inline constexpr std::string_view kLocalPathChoices[] = {"shm", "network"};

// The one-node default provider: UCX shared memory where UCX is built in. Its puts are
// copies by the initiator into the peer's mapped segment, so a peer busy reducing does not
// hold up our data; libfabric 1.17's shm moves large writes by cma in the target's
// progress. Measured on the same host (docs/performance.md): at 64 KiB and above ucx:shm
// runs a P=2 allreduce 3-6x faster than ofi:shm.
inline constexpr std::string_view kDefaultProvider = PCOLL_HAVE_UCX ? "ucx:shm" : "ofi:shm";

inline constexpr auto kRegistryRows = std::to_array<Setting>({
    {.name = "PCOLL_PROVIDER", .kind = Kind::user, .type = Type::text, .fallback = kDefaultProvider,
     .doc = "transport provider: ofi, ofi:shm, ofi:tcp, ofi:sockets, ucx, ucx:shm, ucx:tcp "
            "(pcoll_info lists them); fault+<selector> wraps one in the fault-injection transport"},
    {.name = "PCOLL_LOCAL_PATH", .kind = Kind::user, .type = Type::choice, .fallback = "shm",
     .choices = kLocalPathChoices,
     .doc = "how a network provider (ofi, ofi:verbs, ..., the default on several hosts) reaches "
            "ranks on this host: shm (libfabric shm; UCX's own shared memory) or network (through "
            "the NIC, e.g. to measure it between two processes of one host)"},
});

}  // namespace settings

using RegistrySettings = settings::Reader<settings::kRegistryRows>;

}  // namespace pcoll
