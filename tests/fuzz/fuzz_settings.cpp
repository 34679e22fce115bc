// libFuzzer target: the settings parsers (lib/support/include/support/settings.hpp) on arbitrary text. The
// text becomes the value of every PCOLL_* variable of the catalog and each is read as its
// reader would (effective(), get_choice, parse_unsigned); a value is either accepted within
// the setting's range or choices, or refused with Error(invalid_argument).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <support/env.hpp>
#include <support/error.hpp>
#include <api/settings_catalog.hpp>
#include <collectives/collectives_settings.hpp>
#include <support/settings.hpp>
#include <support/support_settings.hpp>

using namespace pcoll;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

bool digits(const std::string& text) {
  return !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
}

// An accepted value is what its setting allows.
void check_accepted(const settings::Setting& s, const std::string& value) {
  const bool listed = std::find(s.choices.begin(), s.choices.end(), value) != s.choices.end();
  switch (s.type) {
    case settings::Type::unsigned_int:
    case settings::Type::choice_or_unsigned:
      if (listed) return;
      check(digits(value));
      check(std::stoull(value) >= s.min && std::stoull(value) <= s.max);
      return;
    case settings::Type::choice:
      check(listed);
      return;
    case settings::Type::text:
      return;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An environment value ends at its first NUL.
  std::string text(reinterpret_cast<const char*>(data), size);
  text.resize(std::min(text.size(), text.find('\0')));

  for (const settings::Listed& row : settings::listed(settings::catalog())) {
    const settings::Setting& s = *row.setting;
    const std::string name(s.name);
    setenv(name.c_str(), text.c_str(), 1);
    const settings::Effective e = settings::effective(s);
    // An empty value reads as unset: the table's default, which may be none.
    if (e.from_environment && e.error.empty()) check_accepted(s, e.value);
    unsetenv(name.c_str());
  }

  try {
    check_accepted(SupportSettings::entry("PCOLL_TIMEOUT_MS"), std::to_string(SupportSettings::parse_unsigned("PCOLL_TIMEOUT_MS", text)));
  } catch (const Error& e) {
    check(e.code() == Errc::invalid_argument);
  }
  try {
    const uint64_t v = env::parse_u64(text, "fuzzed", 3, 1000);
    check(v >= 3 && v <= 1000);
  } catch (const Error& e) {
    check(e.code() == Errc::invalid_argument);
  }
  // The choice readers, through the environment as the library reads them.
  setenv("PCOLL_YIELD", text.c_str(), 1);
  setenv("PCOLL_PROGRESS_CPU", text.c_str(), 1);
  for (const auto reader : {+[] { return CollectivesSettings::get_choice("PCOLL_YIELD"); },
                            +[] { return SupportSettings::get_choice("PCOLL_PROGRESS_CPU"); }}) {
    try {
      (void)reader();
    } catch (const Error& e) {
      check(e.code() == Errc::invalid_argument);
    }
  }
  unsetenv("PCOLL_YIELD");
  unsetenv("PCOLL_PROGRESS_CPU");
  return 0;
}
