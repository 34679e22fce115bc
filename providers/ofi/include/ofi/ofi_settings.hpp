// The libfabric provider's settings, both for tests that make it behave as a NIC it does
// not run on (settings.hpp says how rows are read). Read once when a fabric is opened.
#pragma once

#include <array>

#include <support/settings.hpp>

namespace pcoll {
namespace settings {

inline constexpr auto kOfiRows = std::to_array<Setting>({
    {.name = "PCOLL_TEST_OFI_CQ_DATA_SIZE", .kind = Kind::test, .type = Type::unsigned_int, .fallback = "",
     .min = 4, .max = 8,
     .doc = "ofi: carry only this many bytes of remote CQ data (4: as verbs and EFA do), below what "
            "fi_getinfo reports"},
    {.name = "PCOLL_TEST_OFI_WITHOUT_ATOMICS", .kind = Kind::test, .type = Type::unsigned_int, .fallback = "0",
     .min = 0, .max = 1,
     .doc = "ofi: 1 opens the provider without FI_ATOMIC, as on a NIC that has none (remote_atomics false)"},
});

}  // namespace settings

using OfiSettings = settings::Reader<settings::kOfiRows>;

}  // namespace pcoll
