// The settings the transport layer reads (settings.hpp says how rows are read).
#pragma once

#include <array>

#include <support/settings.hpp>

namespace pcoll {
namespace settings {

inline constexpr auto kTransportRows = std::to_array<Setting>({
    {.name = "PCOLL_TEST_HOST_NAMES", .kind = Kind::test, .type = Type::text, .fallback = "",
     .doc = "comma-separated host names, rank r taking the r-th: ranks of one machine route their "
            "peers as if on those hosts"},
});

}  // namespace settings

using TransportSettings = settings::Reader<settings::kTransportRows>;

}  // namespace pcoll
