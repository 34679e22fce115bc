// The memory this host can still give (host_memory.hpp).
#include <support/host_memory.hpp>

#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include <support/support_settings.hpp>

namespace pcoll::host_memory {
namespace {

// "MemAvailable:   12345 kB" in /proc/meminfo.
std::optional<uint64_t> meminfo_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

std::optional<uint64_t> read_number(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return std::nullopt;
  try {
    return std::stoull(text);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The cgroup v2 path of this process ("0::/some/group" in /proc/self/cgroup).
std::optional<std::string> cgroup_dir() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) return "/sys/fs/cgroup" + line.substr(3);
  return std::nullopt;
}

std::optional<uint64_t> cgroup_headroom() {
  const auto dir = cgroup_dir();
  if (!dir) return std::nullopt;
  const auto limit = read_number(*dir + "/memory.max");
  if (!limit) return std::nullopt;
  const uint64_t used = read_number(*dir + "/memory.current").value_or(0);
  return used < *limit ? *limit - used : 0;
}

}  // namespace

Available available() {
  if (const auto injected = SupportSettings::raw("PCOLL_TEST_HOST_MEMORY_BYTES"))
    return {SupportSettings::parse_unsigned("PCOLL_TEST_HOST_MEMORY_BYTES", *injected), "PCOLL_TEST_HOST_MEMORY_BYTES"};
  Available best{std::numeric_limits<uint64_t>::max(), "no memory figure on this host"};
  if (const auto bytes = meminfo_available()) best = {*bytes, "MemAvailable in /proc/meminfo"};
  if (const auto bytes = cgroup_headroom(); bytes && *bytes < best.bytes)
    best = {*bytes, "this process's cgroup memory.max less memory.current"};
  return best;
}

std::string describe_bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %s", value, kUnits[unit]);
  return text;
}

}  // namespace pcoll::host_memory
