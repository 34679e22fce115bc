// Test support for the store's tests (test_bootstrap.cpp, test_store_hostile.cpp): a manual
// PCOLL_ROOT job of tests/bootstrap_rank processes, and a raw client of its store.
#pragma once

#include <poll.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "subprocess.hpp"

namespace test {

inline std::string rank_program() { return program_path("PCOLL_TEST_RANK_PROGRAM"); }

// A manual-mode job: PCOLL_RANK/SIZE/ROOT/JOB_KEY set by hand, rank 0 hosting the store.
struct ManualJob {
  int size;
  int port = test::free_port();
  std::string key = "manual-test-key-" + std::to_string(::getpid());

  Env env(int rank, Env extra = {}) const {
    Env e = {{"PCOLL_RANK", std::to_string(rank)},
             {"PCOLL_SIZE", std::to_string(size)},
             {"PCOLL_ROOT", "127.0.0.1:" + std::to_string(port)},
             {"PCOLL_JOB_KEY", key},
             {"PCOLL_TIMEOUT_MS", "20000"}};
    for (const auto& [k, v] : extra) e[k] = v;
    return e;
  }
  std::unique_ptr<Process> start(int rank, const std::vector<std::string>& args, Env extra = {}) const {
    std::vector<std::string> argv = {rank_program()};
    argv.insert(argv.end(), args.begin(), args.end());
    return std::make_unique<Process>(argv, env(rank, std::move(extra)));
  }
};

// The ranks of `job` as processes of `argv` (a test program in its child mode) over
// `provider`, with the store bootstrap and tcp on loopback; `extra(rank, env)` adds settings.
inline std::vector<std::unique_ptr<Process>> start_ranks(const ManualJob& job, const std::vector<std::string>& argv,
                                                         const std::string& provider, int timeout_ms,
                                                         const std::function<void(int, Env&)>& extra = {}) {
  std::vector<std::unique_ptr<Process>> ranks;
  for (int r = 0; r < job.size; ++r) {
    Env env = job.env(r, {{"PCOLL_BOOTSTRAP", "store"},
                          {"PCOLL_PROVIDER", provider},
                          {"PCOLL_TIMEOUT_MS", std::to_string(timeout_ms)},
                          {"FI_TCP_IFACE", "lo"}});
    if (extra) extra(r, env);
    ranks.push_back(std::make_unique<Process>(argv, env));
  }
  return ranks;
}

// What follows "RESULT <rank> " on the first such line of a rank's output; nullopt if none.
inline std::optional<std::string> result_fields(const std::string& out) {
  const size_t at = out.find("RESULT ");
  if (at == std::string::npos) return std::nullopt;
  const std::string line = out.substr(at, out.find('\n', at) - at);
  return line.substr(line.find(' ', 7) + 1);
}

// Rank 0 with store debug logs, so a test can see when another rank has connected.
inline std::unique_ptr<Process> start_logged_rank0(const ManualJob& job) {
  return job.start(0, {"gather", "2"}, {{"PCOLL_LOG", "debug"}});
}

inline bool wait_for_stderr(const Process& p, const std::string& needle, milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (p.err().find(needle) != std::string::npos) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return false;
}

// Connects to the store, sends `bytes`, and reports whether the store closed the connection
// (as it must for anything it rejects) within the limit.
inline bool store_closes_after(int port, const std::string& bytes) {
  int fd = -1;
  for (int attempt = 0; attempt < 500 && fd < 0; ++attempt) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd);
      fd = -1;
      std::this_thread::sleep_for(milliseconds(10));
    }
  }
  if (fd < 0) return false;
  [[maybe_unused]] const ssize_t sent = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  bool closed = false;
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(5000);
  while (!closed && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char sink[4096];
    closed = ::recv(fd, sink, sizeof sink, 0) <= 0;
  }
  ::close(fd);
  return closed;
}

}  // namespace test
