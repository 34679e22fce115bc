// Test support: start a program as a real process with its own environment, capture its
// stdout/stderr in files, wait for it with a deadline, and never leave it behind. Used by
// test_bootstrap.cpp and test_pcollrun.cpp.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace test {

using Env = std::map<std::string, std::string>;
using std::chrono::milliseconds;

// Path of a program the test needs, passed by meson in `variable`.
inline std::string program_path(const char* variable) {
  const char* path = std::getenv(variable);
  if (path == nullptr || *path == '\0')
    throw std::runtime_error(std::string(variable) + " is not set (run the tests with meson test)");
  return path;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

inline size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// A TCP port on 127.0.0.1 that was free a moment ago.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

class Process {
 public:
  // Starts argv with the parent's environment minus every PCOLL_* variable (the tests may
  // themselves run under pcollrun), plus `env`.
  Process(const std::vector<std::string>& argv, const Env& env) {
    static int counter = 0;
    const std::string base = "/tmp/pcoll-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    out_path_ = base + ".out";
    err_path_ = base + ".err";
    std::vector<std::string> entries;
    for (char** e = environ; *e != nullptr; ++e)
      if (std::string(*e).rfind("PCOLL_", 0) != 0) entries.emplace_back(*e);
    for (const auto& [name, value] : env) entries.push_back(name + "=" + value);
    std::vector<char*> envp;
    for (auto& e : entries) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = argv;
    std::vector<char*> cargv;
    for (auto& a : args) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::setpgid(0, 0);  // so that cleanup can kill whatever it started
      const int out = ::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      const int err = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(out, 1);
      ::dup2(err, 2);
      ::execve(cargv[0], cargv.data(), envp.data());
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);
  }
  ~Process() {
    if (!status_) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::unlink(out_path_.c_str());
    ::unlink(err_path_.c_str());
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  std::string out() const { return read_file(out_path_); }
  std::string err() const { return read_file(err_path_); }
  void signal(int sig) const { ::kill(pid_, sig); }

  // Exit code (128 + signal for a signal), or nullopt if still running after `limit`.
  std::optional<int> wait_for(milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!status_) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(milliseconds(5));
    }
    return status_;
  }

  // Exit code; a process still running after `limit` is killed and reported as -1, which
  // no test expects.
  int finish(milliseconds limit = milliseconds(30000)) {
    if (auto code = wait_for(limit)) return *code;
    ::kill(pid_, SIGTERM);  // pcollrun forwards it to its ranks
    if (!wait_for(milliseconds(5000))) {
      ::kill(-pid_, SIGKILL);
      wait_for(milliseconds(5000));
    }
    return -1;
  }

  // Waits until stdout contains `needle` `times` times.
  bool wait_for_output(const std::string& needle, size_t times, milliseconds limit) const {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (count_of(out(), needle) >= times) return true;
      std::this_thread::sleep_for(milliseconds(10));
    }
    return false;
  }

 private:
  pid_t pid_ = -1;
  std::string out_path_;
  std::string err_path_;
  std::optional<int> status_;
};

}  // namespace test
