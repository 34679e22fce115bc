// Files of pcoll's in /dev/shm (shm_names.hpp).
#include <support/shm_names.hpp>

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <random>

namespace pcoll::shm_names {
namespace {

constexpr const char* kDir = "/dev/shm";

// The inode of this process's pid namespace ("pid:[4026531836]"), or "0" where unknown.
std::string pid_namespace() {
  char link[64] = {};
  const ssize_t n = ::readlink("/proc/self/ns/pid", link, sizeof link - 1);
  if (n <= 0) return "0";
  std::string text(link, static_cast<size_t>(n));
  const size_t open = text.find('['), close = text.find(']');
  return open == std::string::npos || close == std::string::npos ? "0" : text.substr(open + 1, close - open - 1);
}

std::string prefix() { return "pcoll_" + pid_namespace() + "_"; }

// The pid in "<prefix><pid>_...", or -1.
pid_t pid_in(const std::string& name, const std::string& ours) {
  if (name.rfind(ours, 0) != 0) return -1;
  const size_t end = name.find('_', ours.size());
  if (end == std::string::npos || end == ours.size()) return -1;
  pid_t pid = 0;
  for (size_t i = ours.size(); i < end; ++i) {
    if (name[i] < '0' || name[i] > '9' || pid > 100000000) return -1;
    pid = pid * 10 + (name[i] - '0');
  }
  return pid;
}

// Removes our user's files whose process `doomed` says is gone.
template <typename Doomed>
int remove_where(Doomed&& doomed) {
  DIR* dir = ::opendir(kDir);
  if (dir == nullptr) return 0;
  const std::string ours = prefix();
  int removed = 0;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    const pid_t pid = pid_in(name, ours);
    if (pid <= 0 || !doomed(pid)) continue;
    const std::string path = std::string(kDir) + "/" + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || st.st_uid != ::getuid() || !S_ISREG(st.st_mode)) continue;
    if (::unlink(path.c_str()) == 0) ++removed;
  }
  ::closedir(dir);
  return removed;
}

}  // namespace

std::string make_name() {
  std::random_device random;
  return prefix() + std::to_string(::getpid()) + "_" + std::to_string((uint64_t{random()} << 32) | random());
}

int remove_of_process(pid_t pid) {
  return remove_where([pid](pid_t owner) { return owner == pid; });
}

int remove_of_departed() {
  return remove_where([](pid_t owner) { return ::kill(owner, 0) != 0 && errno == ESRCH; });
}

}  // namespace pcoll::shm_names
