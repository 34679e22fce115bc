// Settings: the PCOLL_* environment variables, each declared once, with its type, default,
// accepted values, who sets it and one line of doc, in the rows of the component that reads
// it (UCX's components register their own config tables; this is the same idea at compile
// time). A component's rows sit in a header of its own (support_settings.hpp,
// collectives_settings.hpp, ofi_settings.hpp, ...), and it reads them through its Reader:
//
//   using OfiSettings = settings::Reader<kOfiRows>;
//   OfiSettings::get_unsigned("PCOLL_TEST_OFI_WITHOUT_ATOMICS")
//
// A name the component's rows lack, or a reader of the wrong type, does not compile, so a
// call site names the setting's owner and a default is written nowhere else. A component may
// read the rows of a layer below it (the collectives read support's PCOLL_TIMEOUT_MS), never
// above. The catalog of every component's rows is assembled at the top (api/,
// api/settings_catalog.hpp): `pcoll_info --config` prints it, pcollrun checks it before it
// starts ranks, and communicator setup warns about PCOLL_* names it does not know.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pcoll::settings {

// Who sets a variable. Only user settings belong in README's table; all three kinds are
// known names, so none of them is warned about.
enum class Kind {
  user,      // a choice or tuning knob for whoever runs the program
  launcher,  // set by pcollrun for its ranks, or by hand on each host of a manual job
  test,      // set by the test suites for the programs they start (named PCOLL_TEST_*)
};

// How a value is read.
enum class Type {
  unsigned_int,        // a decimal integer in [min, max]
  choice,              // one of `choices`
  choice_or_unsigned,  // one of `choices`, or a decimal integer in [min, max]
  text,                // free text that its reader checks (a provider selector, host:port, a path)
};

struct Setting {
  std::string_view name;
  Kind kind;
  Type type;
  // The value in effect when the variable is unset (or empty), written as a user would
  // write it. Empty when there is none: the reader then does without (the closest NIC) or
  // says that the variable is needed (PCOLL_ROOT for a manual job).
  std::string_view fallback;
  uint64_t min = 0;  // unsigned_int, choice_or_unsigned
  uint64_t max = 0;
  std::span<const std::string_view> choices = {};  // choice, choice_or_unsigned
  std::string_view doc;
};

// One component's rows, as the catalog lists them.
struct Component {
  std::string_view name;  // the layer or provider: "support", "collectives", "ofi", ...
  std::span<const Setting> rows;
};

namespace detail {

consteval uint64_t parse_constant(std::string_view digits) {
  uint64_t value = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') throw "not a decimal default";
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  return value;
}

// A component's rows are data every reader trusts: checked where they are compiled.
consteval bool rows_are_consistent(std::span<const Setting> rows) {
  for (size_t i = 0; i < rows.size(); ++i) {
    const Setting& s = rows[i];
    if (!s.name.starts_with("PCOLL_") || s.doc.empty()) return false;
    if ((s.kind == Kind::test) != s.name.starts_with("PCOLL_TEST_")) return false;
    for (size_t j = 0; j < i; ++j)
      if (rows[j].name == s.name) return false;
    const bool has_range = s.type == Type::unsigned_int || s.type == Type::choice_or_unsigned;
    const bool has_choices = s.type == Type::choice || s.type == Type::choice_or_unsigned;
    if (has_range != (s.min <= s.max && s.max != 0)) return false;
    if (has_choices == s.choices.empty()) return false;
    if (s.fallback.empty()) continue;
    const bool listed = std::find(s.choices.begin(), s.choices.end(), s.fallback) != s.choices.end();
    if (s.type == Type::choice && !listed) return false;
    if (s.type == Type::unsigned_int) {
      const uint64_t value = parse_constant(s.fallback);
      if (value < s.min || value > s.max) return false;
    }
  }
  return true;
}

// No name in two components' rows.
consteval bool names_are_unique(std::span<const Component> catalog) {
  for (size_t c = 0; c < catalog.size(); ++c)
    for (const Setting& s : catalog[c].rows)
      for (size_t d = 0; d < c; ++d)
        for (const Setting& earlier : catalog[d].rows)
          if (earlier.name == s.name) return false;
  return true;
}

template <const auto& rows>
consteval const Setting* find_constant(std::string_view name) {
  for (const Setting& s : rows)
    if (s.name == name) return &s;
  throw "this name is not among this component's settings (its *_settings.hpp)";
}

}  // namespace detail

// A name of `rows`, looked up at compile time.
template <const auto& rows, Type... readable>
class Name {
 public:
  consteval Name(const char* name) : setting_(detail::find_constant<rows>(name)) {
    if (sizeof...(readable) != 0 && ((setting_->type != readable) && ...))
      throw "this reader does not read settings of this type";
  }
  constexpr const Setting& setting() const { return *setting_; }

 private:
  const Setting* setting_;
};

// --- readers of one setting. An unset or empty variable takes the row's default. A
// malformed value is an Error(invalid_argument) naming the variable and what it accepts.

// The environment's text, unchecked, without default: nullopt when unset or empty.
std::optional<std::string> raw(const Setting& setting);
// The value, or the default; a setting without default that is unset is an error naming it.
uint64_t get_unsigned(const Setting& setting);
// `text` checked against the setting's range, for readers that hold the text already.
uint64_t parse_unsigned(const Setting& setting, const std::string& text);
// One of the choices (or, for choice_or_unsigned, a number in range, as its digits).
std::string get_choice(const Setting& setting);
// The text, or the default; nullopt when neither.
std::optional<std::string> get_text(const Setting& setting);

// A component's reader: the functions above, over names checked against its rows.
template <const auto& rows>
struct Reader {
  static_assert(detail::rows_are_consistent(rows), "a name, kind, range, choice list or default is inconsistent");
  using Any = Name<rows>;
  using Unsigned = Name<rows, Type::unsigned_int>;
  using Choice = Name<rows, Type::choice, Type::choice_or_unsigned>;
  using Text = Name<rows, Type::text>;

  static const Setting& entry(Any name) { return name.setting(); }
  static std::optional<std::string> raw(Any name) { return settings::raw(name.setting()); }
  static uint64_t get_unsigned(Unsigned name) { return settings::get_unsigned(name.setting()); }
  static uint64_t parse_unsigned(Unsigned name, const std::string& text) {
    return settings::parse_unsigned(name.setting(), text);
  }
  static std::string get_choice(Choice name) { return settings::get_choice(name.setting()); }
  static std::optional<std::string> get_text(Text name) { return settings::get_text(name.setting()); }
  // The default of an unsigned setting, as a constant.
  static consteval uint64_t unsigned_default(Unsigned name) {
    if (name.setting().fallback.empty()) throw "this setting has no default";
    return detail::parse_constant(name.setting().fallback);
  }
};

// --- the catalog as data, for pcoll_info, pcollrun and the check of unknown names.

const Setting* find(std::span<const Component> catalog, std::string_view name);

// Every row of the catalog with its component: user settings first, then the launcher's,
// then the tests', each group in catalog order (how pcoll_info --config lists them).
struct Listed {
  std::string_view component;
  const Setting* setting;
};
std::vector<Listed> listed(std::span<const Component> catalog);
const char* kind_name(Kind kind);
std::string type_text(const Setting& setting);  // "integer 1..86400000", "auto|always|never", ...

// One setting as it stands in this process's environment.
struct Effective {
  std::string value;         // what the reader would use; empty when unset without default
  bool from_environment;     // else the row's default
  std::string error;         // why the environment's value would be refused; empty when valid
};
Effective effective(const Setting& setting);

// PCOLL_* names in this environment that the catalog lacks, each with the closest known
// name (edit distance).
struct Unknown {
  std::string name;
  std::string closest;
  size_t distance;  // edits from `name` to `closest`
};
std::vector<Unknown> unknown_variables(std::span<const Component> catalog);

// Logs one warning per unknown PCOLL_* name, once per process.
void warn_unknown_variables(std::span<const Component> catalog);

}  // namespace pcoll::settings
