// The fault-injection transport's setting (settings.hpp says how rows are read).
#pragma once

#include <array>

#include <support/settings.hpp>

namespace pcoll {
namespace settings {

inline constexpr auto kFaultRows = std::to_array<Setting>({
    {.name = "PCOLL_FAULT", .kind = Kind::user, .type = Type::text, .fallback = "",
     .doc = "faults the fault-injection transport (PCOLL_PROVIDER=fault+<selector>) injects: "
            "docs/reliability.md gives the grammar"},
});

}  // namespace settings

using FaultSettings = settings::Reader<settings::kFaultRows>;

}  // namespace pcoll
