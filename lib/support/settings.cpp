// Reading settings (settings.hpp): values checked against their declared type, defaults
// taken from their rows, and the check for PCOLL_* names the catalog does not know.
#include <support/settings.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>

#include <support/env.hpp>
#include <support/error.hpp>
#include <support/log.hpp>

extern char** environ;

namespace pcoll::settings {
namespace {

constexpr std::string_view kPrefix = "PCOLL_";

std::string joined(std::span<const std::string_view> words, const char* separator) {
  std::string out;
  for (const auto word : words) out.append(out.empty() ? "" : separator).append(word);
  return out;
}

bool is_digits(const std::string& text) {
  return !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
}

// `text` as `setting` accepts it, or Error(invalid_argument) naming the variable.
std::string checked(const Setting& s, const std::string& text) {
  const std::string name(s.name);
  switch (s.type) {
    case Type::unsigned_int:
      return std::to_string(env::parse_u64(text, name, s.min, s.max));
    case Type::choice:
      if (std::find(s.choices.begin(), s.choices.end(), text) != s.choices.end()) return text;
      invalid_argument(name + "='" + text + "' is not one of: " + joined(s.choices, ", "));
    case Type::choice_or_unsigned: {
      if (std::find(s.choices.begin(), s.choices.end(), text) != s.choices.end()) return text;
      const std::string accepted = joined(s.choices, ", ") + " or an integer from " + std::to_string(s.min) +
                                   " to " + std::to_string(s.max);
      if (!is_digits(text)) invalid_argument(name + "='" + text + "' is not " + accepted);
      try {
        return std::to_string(env::parse_u64(text, name, s.min, s.max));
      } catch (const Error&) {
        invalid_argument(name + "=" + text + " is out of range (expected " + accepted + ")");
      }
    }
    case Type::text:
      return text;
  }
  fail(Errc::internal, "setting " + name + " has an unknown type");
}

// The one place that reads a PCOLL_* variable. An empty value counts as unset.
std::optional<std::string> environment_text(const Setting& s) {
  const char* value = std::getenv(std::string(s.name).c_str());
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

// Levenshtein distance, for "did you mean".
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::optional<std::string> raw(const Setting& s) { return environment_text(s); }

uint64_t get_unsigned(const Setting& s) {
  if (const auto value = environment_text(s)) return parse_unsigned(s, *value);
  if (s.fallback.empty()) invalid_argument(std::string(s.name) + " is not set (" + std::string(s.doc) + ")");
  return parse_unsigned(s, std::string(s.fallback));
}

uint64_t parse_unsigned(const Setting& s, const std::string& text) {
  return env::parse_u64(text, std::string(s.name), s.min, s.max);
}

std::string get_choice(const Setting& s) {
  const auto value = environment_text(s);
  return value ? checked(s, *value) : std::string(s.fallback);
}

std::optional<std::string> get_text(const Setting& s) {
  if (auto value = environment_text(s)) return value;
  if (s.fallback.empty()) return std::nullopt;
  return std::string(s.fallback);
}

const Setting* find(std::span<const Component> catalog, std::string_view name) {
  for (const Component& component : catalog)
    for (const Setting& s : component.rows)
      if (s.name == name) return &s;
  return nullptr;
}

std::vector<Listed> listed(std::span<const Component> catalog) {
  std::vector<Listed> out;
  for (const Kind kind : {Kind::user, Kind::launcher, Kind::test})
    for (const Component& component : catalog)
      for (const Setting& s : component.rows)
        if (s.kind == kind) out.push_back({component.name, &s});
  return out;
}

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::user: return "user";
    case Kind::launcher: return "launcher";
    case Kind::test: return "test";
  }
  return "?";
}

std::string type_text(const Setting& s) {
  const std::string range = "integer " + std::to_string(s.min) + ".." + std::to_string(s.max);
  switch (s.type) {
    case Type::unsigned_int: return range;
    case Type::choice: return joined(s.choices, "|");
    case Type::choice_or_unsigned: return joined(s.choices, "|") + "|" + range;
    case Type::text: return "text";
  }
  return "?";
}

Effective effective(const Setting& s) {
  const auto value = environment_text(s);
  if (!value) return {std::string(s.fallback), false, ""};
  try {
    return {checked(s, *value), true, ""};
  } catch (const Error& e) {
    return {*value, true, e.what()};
  }
}

std::vector<Unknown> unknown_variables(std::span<const Component> catalog) {
  std::vector<Unknown> out;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const std::string_view name = text.substr(0, text.find('='));
    if (!name.starts_with(kPrefix) || find(catalog, name) != nullptr) continue;
    std::string_view closest;
    size_t best = SIZE_MAX;
    for (const Component& component : catalog)
      for (const Setting& s : component.rows)
        if (const size_t d = edit_distance(name, s.name); d < best) best = d, closest = s.name;
    out.push_back({std::string(name), std::string(closest), best});
  }
  return out;
}

void warn_unknown_variables(std::span<const Component> catalog) {
  static std::once_flag once;
  std::call_once(once, [catalog] {
    for (const auto& unknown : unknown_variables(catalog)) {
      // A few edits away is a typo; further away, the name is still worth showing.
      const std::string hint = unknown.distance <= 3 ? "did you mean " + unknown.closest + "?"
                                                     : "the closest known name is " + unknown.closest;
      log::warn(unknown.name + " is not a pcoll setting and is ignored; " + hint +
                " (pcoll_info --config lists them all)");
    }
  });
}

}  // namespace pcoll::settings
