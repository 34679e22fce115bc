// The settings the bootstrap reads besides the launcher's variables (support_settings.hpp)
// (settings.hpp says how rows are read).
#pragma once

#include <array>
#include <string_view>

#include <support/settings.hpp>

namespace pcoll {
namespace settings {

inline constexpr std::string_view kBootstrapChoices[] = {"auto", "pmix", "pmi2", "store", "single"};

inline constexpr auto kBootstrapRows = std::to_array<Setting>({
    {.name = "PCOLL_BOOTSTRAP", .kind = Kind::user, .type = Type::choice, .fallback = "auto",
     .choices = kBootstrapChoices,
     .doc = "pmix, pmi2, store or single instead of what the launcher's environment says (auto)"},
});

}  // namespace settings

using BootstrapSettings = settings::Reader<settings::kBootstrapRows>;

}  // namespace pcoll
