// PCOLL_FAULT parsing: rules, their keys, and errors that say exactly what is wrong.
#include <fault/fault_spec.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <set>

#include <support/error.hpp>

namespace pcoll::transport::fault {
namespace {

struct ActionInfo {
  Action action;
  const char* name;
  std::vector<std::string> keys;      // accepted besides rank, on, at
  std::vector<std::string> required;
  bool on_connect;                    // on=connect makes sense for it
};

const std::vector<ActionInfo>& actions() {
  static const std::vector<ActionInfo> table = {
      {Action::delay, "delay", {"count", "every", "ms", "mask", "match"}, {"ms"}, false},
      {Action::reorder, "reorder", {"count", "every", "ms", "window", "mask", "match", "seed"}, {"window"}, false},
      {Action::duplicate, "duplicate", {"count", "every", "mask", "match"}, {}, false},
      {Action::eagain, "eagain", {"count", "every", "ms", "peer"}, {"ms"}, false},
      {Action::access, "access", {"count", "every", "peer"}, {}, false},
      {Action::reset, "reset", {"peer"}, {}, true},
      {Action::silent, "silent", {}, {}, true},
      {Action::kill, "kill", {}, {}, true},
      {Action::stop, "stop", {}, {}, true},
  };
  return table;
}

std::string action_list() {
  std::string list;
  for (const auto& a : actions()) list += (list.empty() ? "" : ", ") + std::string(a.name);
  return list;
}

std::string trim(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  const auto last = text.find_last_not_of(" \t");
  return text.substr(first, last - first + 1);
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t begin = 0;
  for (;;) {
    const size_t end = text.find(separator, begin);
    parts.push_back(trim(text.substr(begin, end == std::string::npos ? std::string::npos : end - begin)));
    if (end == std::string::npos) return parts;
    begin = end + 1;
  }
}

}  // namespace

const char* action_name(Action action) {
  for (const auto& a : actions())
    if (a.action == action) return a.name;
  return "?";
}

namespace {

// One rule's parser: every message starts with "PCOLL_FAULT rule N ('text'): ".
class RuleParser {
 public:
  RuleParser(size_t number, const std::string& text) : number_(number), text_(text) {}

  [[noreturn]] void wrong(const std::string& what) const {
    invalid_argument("PCOLL_FAULT rule " + std::to_string(number_) + " ('" + text_ + "'): " + what);
  }

  // Decimal, or hexadecimal with 0x, in [min, max].
  uint64_t number(const std::string& key, const std::string& value, uint64_t min, uint64_t max) const {
    const bool hex = value.size() > 2 && (value.compare(0, 2, "0x") == 0 || value.compare(0, 2, "0X") == 0);
    const std::string digits = hex ? value.substr(2) : value;
    const char* allowed = hex ? "0123456789abcdefABCDEF" : "0123456789";
    if (digits.empty() || digits.find_first_not_of(allowed) != std::string::npos)
      wrong(key + "='" + value + "' is not a number (decimal, or hexadecimal with 0x)");
    errno = 0;
    const unsigned long long parsed = std::strtoull(digits.c_str(), nullptr, hex ? 16 : 10);
    if (errno == ERANGE || parsed < min || parsed > max)
      wrong(key + "=" + value + " is out of range (" + std::to_string(min) + " to " + std::to_string(max) + ")");
    return parsed;
  }

  Rule parse() {
    const auto fields = split(text_, ',');
    if (fields[0].empty()) wrong("the rule names no action (one of: " + action_list() + ")");
    const ActionInfo* info = nullptr;
    for (const auto& a : actions())
      if (fields[0] == a.name) info = &a;
    if (info == nullptr) wrong("'" + fields[0] + "' is not an action (one of: " + action_list() + ")");
    Rule rule;
    rule.action = info->action;
    rule.text = text_;
    // An injected error or a whole-rank action happens once unless count= says otherwise
    // (a reset connection then stays down: every later operation to that peer fails).
    if (rule.action != Action::delay && rule.action != Action::reorder && rule.action != Action::duplicate)
      rule.count = 1;
    if (rule.action == Action::reorder) rule.ms = std::chrono::milliseconds(5);
    std::set<std::string> seen;
    for (size_t i = 1; i < fields.size(); ++i) {
      const std::string& field = fields[i];
      const auto equals = field.find('=');
      if (field.empty()) wrong("an empty field (two commas, or a trailing comma)");
      if (equals == std::string::npos) wrong("'" + field + "' is not key=value");
      const std::string key = trim(field.substr(0, equals));
      const std::string value = trim(field.substr(equals + 1));
      const bool common = key == "rank" || key == "on" || key == "at";
      if (!common && std::find(info->keys.begin(), info->keys.end(), key) == info->keys.end()) {
        std::string accepted = "rank, on, at";
        for (const auto& k : info->keys) accepted += ", " + k;
        wrong("'" + key + "' is not a key of " + info->name + " (it takes: " + accepted + ")");
      }
      if (!seen.insert(key).second) wrong("'" + key + "' is given twice");
      if (value.empty()) wrong("'" + key + "' has no value");
      if (key == "rank") {
        if (value != "*") rule.rank = static_cast<int>(number(key, value, 0, (1u << 20) - 2));
      } else if (key == "on") {
        if (value == "start") rule.on = Trigger::start;
        else if (value == "connect") rule.on = Trigger::connect;
        else if (value == "sigusr1") rule.on = Trigger::sigusr1;
        else wrong("on='" + value + "' is not start, connect or sigusr1");
        if (rule.on == Trigger::connect && !info->on_connect)
          wrong(std::string("on=connect is for silent, kill, stop and reset; ") + info->name +
                " acts on notifications or operations, which start after connect");
      } else if (key == "at") {
        rule.at = number(key, value, 1, UINT64_MAX);
      } else if (key == "count") {
        rule.count = number(key, value, 1, UINT64_MAX);
      } else if (key == "every") {
        rule.every = number(key, value, 1, UINT64_MAX);
      } else if (key == "ms") {
        rule.ms = std::chrono::milliseconds(number(key, value, rule.action == Action::reorder ? 0 : 1, 3600000));
      } else if (key == "window") {
        rule.window = number(key, value, 2, 4096);
      } else if (key == "mask") {
        rule.mask = number(key, value, 1, UINT64_MAX);
      } else if (key == "match") {
        rule.match = number(key, value, 0, UINT64_MAX);
      } else if (key == "peer") {
        rule.peer = static_cast<int>(number(key, value, 0, (1u << 20) - 2));
      } else if (key == "seed") {
        rule.seed = number(key, value, 0, UINT64_MAX);
      }
    }
    for (const auto& key : info->required)
      if (!seen.count(key)) wrong(std::string(info->name) + " needs " + key + "=");
    if (seen.count("match") && !seen.count("mask")) wrong("match= needs mask= (the bits it compares)");
    if (seen.count("mask") && !seen.count("match")) wrong("mask= needs match= (the value those bits must have)");
    if ((rule.match & ~rule.mask) != 0) wrong("match= has bits outside mask=, so no value could ever match");
    if (rule.on == Trigger::connect && seen.count("at"))
      wrong("on=connect acts at connect() itself; at= does not apply");
    return rule;
  }

 private:
  size_t number_;
  std::string text_;
};

}  // namespace

std::vector<Rule> parse_spec(const std::string& spec) {
  std::vector<Rule> rules;
  if (trim(spec).empty()) return rules;
  const auto texts = split(spec, ';');
  for (size_t i = 0; i < texts.size(); ++i) {
    if (texts[i].empty()) {
      if (i + 1 == texts.size()) break;  // a trailing ';' is harmless
      invalid_argument("PCOLL_FAULT rule " + std::to_string(i + 1) + " is empty (two ';' in a row)");
    }
    rules.push_back(RuleParser(i + 1, texts[i]).parse());
  }
  return rules;
}

void check_ranks(const std::vector<Rule>& rules, int size) {
  for (size_t i = 0; i < rules.size(); ++i) {
    const Rule& rule = rules[i];
    const std::string where = "PCOLL_FAULT rule " + std::to_string(i + 1) + " ('" + rule.text + "'): ";
    if (rule.rank && *rule.rank >= size)
      invalid_argument(where + "rank=" + std::to_string(*rule.rank) + " but the job has " + std::to_string(size) +
                       " ranks");
    if (rule.peer && *rule.peer >= size)
      invalid_argument(where + "peer=" + std::to_string(*rule.peer) + " but the job has " + std::to_string(size) +
                       " ranks");
  }
}

}  // namespace pcoll::transport::fault
