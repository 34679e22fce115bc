// The host's NICs from sysfs (host_nics.hpp), and the PCOLL_NIC check at transport creation.
#include <util/host_nics.hpp>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include <support/error.hpp>
#include <support/support_settings.hpp>

namespace pcoll::transport {
namespace {

void add_entries(const char* folder, std::vector<std::string>& names) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec))
    names.push_back(entry.path().filename().string());
}

// "mlx5_0" of "mlx5_0:1" or "mlx5_0-rdm".
std::string base_name(const std::string& name) { return name.substr(0, name.find_first_of(":-")); }

}  // namespace

std::vector<std::string> host_nics() {
  std::vector<std::string> names;
  for (const char* folder : {"/sys/class/net", "/sys/class/infiniband", "/sys/class/cxi"})
    add_entries(folder, names);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

void check_nic_setting() {
  const auto wanted = SupportSettings::get_text("PCOLL_NIC");
  if (!wanted) return;
  const std::vector<std::string> names = host_nics();
  for (const std::string& name : names)
    if (name == *wanted || name == base_name(*wanted)) return;
  std::string list;
  for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
  invalid_argument("PCOLL_NIC=" + *wanted + " names no NIC of this host (there are: " +
                   (list.empty() ? std::string("none") : list) + ")");
}

}  // namespace pcoll::transport
