// The UCX provider's setting, for tests that make two ranks of one host behave as if on two
// (settings.hpp says how rows are read). Read once when a context is made.
#pragma once

#include <array>
#include <cstdint>

#include <support/settings.hpp>

namespace pcoll {
namespace settings {

inline constexpr auto kUcxRows = std::to_array<Setting>({
    {.name = "PCOLL_TEST_UCX_UNMAPPED_RANK", .kind = Kind::test, .type = Type::unsigned_int, .fallback = "",
     .min = 0, .max = UINT32_MAX,
     .doc = "ucx: this rank and its peers map none of each other's memory (as if it ran on another "
            "host), so notifications between them take the network path instead of the mailbox"},
});

}  // namespace settings

using UcxSettings = settings::Reader<settings::kUcxRows>;

}  // namespace pcoll
