// The TCP store under hostile and careless clients (docs/reliability.md, "The store under
// hostile clients"): floods of idle connections, slow clients, garbage, wrong keys,
// duplicate and out-of-range ranks, a socket held open at exit. In each, the real job (a
// manual PCOLL_ROOT job, or pcollrun) must start and finish, and the process that hosts the
// store must stay within bounded file descriptors and memory while the attack goes on.
// scripts/test-store-hostile.sh runs the same cases with bigger floods (PCOLL_TEST_FLOOD).
#include <doctest/doctest.h>

#include <dirent.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>

#include <bootstrap/store_wire.hpp>
#include "store_job.hpp"
#include "subprocess.hpp"

namespace {

using test::ManualJob;
using test::Process;
using std::chrono::milliseconds;
namespace wire = pcoll::bootstrap::wire;
using Clock = std::chrono::steady_clock;

// The store keeps at most 16 connections without hello per source address (store_server.cpp).
constexpr size_t kPerSourceLimit = 16;
constexpr size_t kRssSlackKib = 32 * 1024;

std::string pcollrun() { return test::program_path("PCOLL_TEST_PCOLLRUN"); }

// How many connections a flood opens: PCOLL_TEST_FLOOD, else `quick` (the CI size).
size_t flood_size(size_t quick) {
  const char* text = std::getenv("PCOLL_TEST_FLOOD");
  return text != nullptr && *text != '\0' ? std::strtoul(text, nullptr, 10) : quick;
}

// --- The hosting process's footprint.

struct Footprint {
  size_t fds = 0;
  size_t rss_kib = 0;
};

Footprint footprint(pid_t pid) {
  Footprint f;
  const std::string proc = "/proc/" + std::to_string(pid);
  if (DIR* dir = ::opendir((proc + "/fd").c_str())) {
    while (const dirent* e = ::readdir(dir))
      if (e->d_name[0] != '.') ++f.fds;
    ::closedir(dir);
  }
  std::ifstream status(proc + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) f.rss_kib = std::strtoul(line.c_str() + 6, nullptr, 10);
  return f;
}

// Checks that `now` stays within what `sources` flooding addresses may make the store hold.
void check_bounded(const Footprint& before, const Footprint& now, size_t sources) {
  MESSAGE("store's process: " << before.fds << " -> " << now.fds << " fds, VmRSS " << before.rss_kib << " -> "
                              << now.rss_kib << " KiB");
  CHECK(now.fds <= before.fds + sources * kPerSourceLimit + 4);
  CHECK(now.rss_kib <= before.rss_kib + kRssSlackKib);
}

// --- A raw client of the store.

class RawClient {
 public:
  // Connects from `source` (any 127.0.0.0/8 address is this host's), retrying while the
  // store is not up yet.
  explicit RawClient(int port, const std::string& source = "127.0.0.1") {
    for (int attempt = 0; attempt < 500 && fd_ < 0; ++attempt) {
      fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in from{};
      from.sin_family = AF_INET;
      ::inet_pton(AF_INET, source.c_str(), &from.sin_addr);
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_port = htons(static_cast<uint16_t>(port));
      to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
          ::connect(fd_, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
        ::close(fd_);
        fd_ = -1;
        std::this_thread::sleep_for(milliseconds(10));
      }
    }
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return fd_ >= 0; }

  void send(std::span<const std::byte> bytes) const {
    [[maybe_unused]] const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  }
  void send(const std::string& text) const { send(std::as_bytes(std::span(text))); }

  // Reads until the store closes the connection; false if it is still open after `limit`
  // (0: only what is there now).
  bool closed_within(milliseconds limit) {
    if (closed_) return true;
    const auto deadline = Clock::now() + limit;
    do {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, limit.count() == 0 ? 0 : 50) <= 0) continue;
      char sink[4096];
      const ssize_t n = ::recv(fd_, sink, sizeof sink, 0);
      if (n <= 0) return closed_ = true;
      received_.append(sink, static_cast<size_t>(n));
    } while (Clock::now() < deadline);
    return false;
  }
  const std::string& received() const { return received_; }

 private:
  int fd_ = -1;
  bool closed_ = false;
  std::string received_;
};

std::vector<std::unique_ptr<RawClient>> open_idle(int port, size_t count, const std::string& source = "127.0.0.1") {
  std::vector<std::unique_ptr<RawClient>> clients;
  for (size_t i = 0; i < count; ++i) clients.push_back(std::make_unique<RawClient>(port, source));
  return clients;
}

std::string hello(uint32_t rank, uint32_t size, const std::string& key) {
  const auto bytes = wire::encode_hello(rank, size, std::as_bytes(std::span(key)));
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// Rank 0 up and its store listening, with its footprint before any attack.
struct Hosted {
  std::unique_ptr<Process> rank0;
  Footprint before;
};

Hosted start_rank0(const ManualJob& job) {
  Hosted h{job.start(0, {"gather", "2"}), {}};
  RawClient probe(job.port);
  REQUIRE(probe.connected());
  std::this_thread::sleep_for(milliseconds(100));
  h.before = footprint(h.rank0->pid());
  return h;
}

// The rest of the job joins and the whole job must finish.
void finish_job(const ManualJob& job, Hosted& h) {
  std::vector<std::unique_ptr<Process>> others;
  for (int r = 1; r < job.size; ++r) others.push_back(job.start(r, {"gather", "2"}));
  for (auto& p : others) {
    CHECK(p->finish(milliseconds(20000)) == 0);
    CHECK(p->out().find("ok (manual)") != std::string::npos);
  }
  CHECK(h.rank0->finish(milliseconds(10000)) == 0);
  CHECK(h.rank0->err().find("server stopped") == std::string::npos);
}

// The listening TCP port of process `pid` (pcollrun's store), from /proc/net/tcp; 0 if none.
int listening_port(pid_t pid) {
  std::vector<std::string> inodes;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* dir = ::opendir(fd_dir.c_str())) {
    while (const dirent* e = ::readdir(dir)) {
      char target[256] = {};
      const std::string link = fd_dir + "/" + e->d_name;
      if (::readlink(link.c_str(), target, sizeof target - 1) > 0 && std::string(target).rfind("socket:[", 0) == 0)
        inodes.push_back(std::string(target).substr(8, std::string(target).size() - 9));
    }
    ::closedir(dir);
  }
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  std::getline(tcp, line);  // the header
  while (std::getline(tcp, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
    if (state != "0A") continue;  // TCP_LISTEN
    for (const auto& mine : inodes)
      if (mine == inode) return static_cast<int>(std::strtoul(local.substr(local.find(':') + 1).c_str(), nullptr, 16));
  }
  return 0;
}

}  // namespace

TEST_CASE("a connection that says nothing is dropped within the hello deadline") {
  const ManualJob job{2};
  Hosted h = start_rank0(job);
  RawClient idle(job.port);
  REQUIRE(idle.connected());
  const auto started = Clock::now();
  CHECK(idle.closed_within(milliseconds(6000)));
  const auto held = std::chrono::duration_cast<milliseconds>(Clock::now() - started);
  MESSAGE("the idle connection was closed after " << held.count() << " ms");
  CHECK(held < milliseconds(5000));  // 2 s deadline; PCOLL_TIMEOUT_MS is 20 s
  finish_job(job, h);
}

TEST_CASE("a flood of idle connections from the ranks' own address does not keep a rank out") {
  const ManualJob job{2};
  Hosted h = start_rank0(job);
  const auto flood = open_idle(job.port, flood_size(200));
  std::this_thread::sleep_for(milliseconds(300));
  check_bounded(h.before, footprint(h.rank0->pid()), 1);
  finish_job(job, h);
}

TEST_CASE("idle connections from another address do not keep ranks from this one out") {
  const ManualJob job{3};
  Hosted h = start_rank0(job);
  const auto flood = open_idle(job.port, flood_size(64), "127.0.0.2");
  const auto more = open_idle(job.port, flood_size(64), "127.0.0.3");
  std::this_thread::sleep_for(milliseconds(300));
  check_bounded(h.before, footprint(h.rank0->pid()), 2);
  finish_job(job, h);
}

TEST_CASE("slow clients, a byte at a time, are dropped at the hello deadline and do not hold the job") {
  const ManualJob job{2};
  Hosted h = start_rank0(job);
  std::vector<std::unique_ptr<RawClient>> slow = open_idle(job.port, 8);
  const std::string bytes = hello(1, 2, job.key);
  auto rank1 = job.start(1, {"gather", "2"});
  // Each sends the real hello, one byte every 100 ms: 2.6 s for the 26 bytes of a 10-byte key.
  size_t closed = 0;
  for (size_t i = 0; i < bytes.size() && closed < slow.size(); ++i) {
    closed = 0;
    for (auto& c : slow) {
      c->send(bytes.substr(i, 1));
      closed += c->closed_within(milliseconds(0)) ? 1 : 0;
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  CHECK(rank1->finish(milliseconds(20000)) == 0);
  for (auto& c : slow) CHECK(c->closed_within(milliseconds(3000)));
  CHECK(h.rank0->finish(milliseconds(10000)) == 0);
}

TEST_CASE("garbage and wrong keys are refused, bounded, and the job still runs") {
  const ManualJob job{2};
  Hosted h = start_rank0(job);
  std::mt19937 random(7);
  std::vector<std::unique_ptr<RawClient>> clients;
  for (size_t i = 0; i < flood_size(100); ++i) {
    auto c = std::make_unique<RawClient>(job.port);
    if (i % 2 == 0) {
      std::string junk(1024, '\0');
      for (char& b : junk) b = static_cast<char>(random());
      c->send(junk);
    } else {
      c->send(hello(1, 2, "not-the-key-" + std::to_string(i)));
    }
    clients.push_back(std::move(c));
  }
  std::this_thread::sleep_for(milliseconds(300));
  check_bounded(h.before, footprint(h.rank0->pid()), 1);
  size_t told = 0;
  for (auto& c : clients) {
    c->closed_within(milliseconds(0));
    told += c->received().find("PCOLL_JOB_KEY") != std::string::npos ? 1 : 0;
  }
  CHECK(told > 0);  // those answered before being pushed out heard why
  finish_job(job, h);
}

TEST_CASE("duplicate, out-of-range and wrong-size ranks are refused by name and the job still runs") {
  const ManualJob job{2};
  Hosted h = start_rank0(job);
  struct Case {
    std::string hello;
    std::string why;
  };
  const std::vector<Case> cases = {{hello(0, 2, job.key), "PCOLL_RANK=0 is already taken"},
                                   {hello(5, 2, job.key), "PCOLL_RANK=5 is not below PCOLL_SIZE=2"},
                                   {hello(1, 3, job.key), "PCOLL_SIZE=3 but the job has 2 ranks"}};
  for (const auto& c : cases) {
    CAPTURE(c.why);
    RawClient client(job.port);
    client.send(c.hello);
    CHECK(client.closed_within(milliseconds(5000)));
    CHECK(client.received().find(c.why) != std::string::npos);
  }
  finish_job(job, h);
}

TEST_CASE("a socket held open does not delay rank 0's exit") {
  const ManualJob job{2};
  Hosted h = start_rank0(job);
  RawClient held(job.port);  // dropped at the hello deadline only, after the job ends
  auto rank1 = job.start(1, {"gather", "2"});
  CHECK(rank1->finish(milliseconds(20000)) == 0);
  const auto rank1_done = Clock::now();
  CHECK(h.rank0->finish(milliseconds(10000)) == 0);
  const auto lag = std::chrono::duration_cast<milliseconds>(Clock::now() - rank1_done);
  MESSAGE("rank 0 exited " << lag.count() << " ms after rank 1");
  CHECK(lag < milliseconds(3000));  // the drain used to wait 5 s for it
}

TEST_CASE("under pcollrun, a flood and a socket held open neither keep the ranks out nor delay the exit") {
  // The ranks wait 1.5 s before joining, while the test finds pcollrun's port and floods it.
  Process job({pcollrun(), "-n", "2", "--timeout-ms", "20000", test::rank_program(), "gather-late", "1500", "2"}, {});
  int port = 0;
  for (int i = 0; i < 100 && port == 0; ++i, std::this_thread::sleep_for(milliseconds(10))) port = listening_port(job.pid());
  REQUIRE(port != 0);
  const Footprint before = footprint(job.pid());
  auto flood = open_idle(port, flood_size(200));
  std::this_thread::sleep_for(milliseconds(300));
  check_bounded(before, footprint(job.pid()), 1);
  // Fresh connections until the ranks are done: one is always younger than the deadline.
  while (test::count_of(job.out(), "ok (pcollrun)") < 2 && !job.wait_for(milliseconds(200)))
    flood.push_back(std::make_unique<RawClient>(port));
  const auto ranks_done = Clock::now();
  CHECK(job.finish(milliseconds(10000)) == 0);
  const auto lag = std::chrono::duration_cast<milliseconds>(Clock::now() - ranks_done);
  MESSAGE("pcollrun exited " << lag.count() << " ms after its ranks printed ok");
  CHECK(lag < milliseconds(3000));  // the drain used to wait 5 s
  CHECK(test::count_of(job.out(), "ok (pcollrun)") == 2);
}
