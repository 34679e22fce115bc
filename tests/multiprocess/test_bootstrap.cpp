// Rules of the TCP store bootstrap (lib/bootstrap), checked with real
// processes: ranks are tests/bootstrap_rank, started through pcollrun or with the manual
// PCOLL_* environment (rank 0 hosting the store). Every process runs under a deadline.
#include <doctest/doctest.h>

#include <poll.h>

#include <memory>

#include <support/pcoll_config.h>
#include "store_job.hpp"
#include "subprocess.hpp"

namespace {

using test::Env;
using test::ManualJob;
using test::Process;
using test::start_logged_rank0;
using test::store_closes_after;
using test::wait_for_stderr;
using std::chrono::milliseconds;

// bootstrap_rank exits with 10 + Errc on a pcoll::Error.
constexpr int kInvalidArgument = 11;
constexpr int kTimeout = 14;
constexpr int kBootstrap = 17;
constexpr int kUnsupported = 18;

using test::rank_program;
std::string pcollrun() { return test::program_path("PCOLL_TEST_PCOLLRUN"); }

void check_gather_job_ok(Process& p, int n, const std::string& name) {
  CHECK(p.finish() == 0);
  for (int r = 0; r < n; ++r)
    CHECK(test::count_of(p.out(), "rank " + std::to_string(r) + " of " + std::to_string(n) + " ok (" + name + ")") == 1);
}

}  // namespace

TEST_CASE("allgather and barrier return every rank's blob in rank order under pcollrun") {
  for (int n = 1; n <= 6; ++n) {
    CAPTURE(n);
    Process job({pcollrun(), "-n", std::to_string(n), "--timeout-ms", "20000", rank_program(), "gather", "7"}, {});
    check_gather_job_ok(job, n, "pcollrun");
  }
}

TEST_CASE("allgather and barrier work in manual mode with rank 0 hosting the store") {
  for (int n = 1; n <= 6; ++n) {
    CAPTURE(n);
    const ManualJob job{n};
    std::vector<std::unique_ptr<Process>> ranks;
    // Highest rank first: the others must wait for rank 0's store to come up.
    for (int r = n - 1; r >= 0; --r) ranks.push_back(job.start(r, {"gather", "7"}));
    for (int i = 0; i < n; ++i) {
      const int r = n - 1 - i;
      CAPTURE(r);
      CHECK(ranks[static_cast<size_t>(i)]->finish() == 0);
      CHECK(test::count_of(ranks[static_cast<size_t>(i)]->out(), "ok (manual)") == 1);
    }
  }
}

TEST_CASE("a connection with the wrong job key is rejected and the store keeps serving") {
  const ManualJob job{2};
  auto rank0 = start_logged_rank0(job);
  auto impostor = job.start(1, {"gather", "2"}, {{"PCOLL_JOB_KEY", "not-the-key"}});
  CHECK(impostor->finish() == kInvalidArgument);
  CHECK(impostor->err().find("PCOLL_JOB_KEY") != std::string::npos);
  auto rank1 = job.start(1, {"gather", "2"});
  CHECK(rank1->finish() == 0);
  CHECK(rank0->finish() == 0);
  CHECK(rank0->err().find("rejected connection") != std::string::npos);
}

TEST_CASE("a malformed message is rejected and the store keeps serving") {
  const ManualJob job{2};
  auto rank0 = start_logged_rank0(job);
  CHECK(store_closes_after(job.port, "GET / HTTP/1.0\r\n\r\n"));
  CHECK(wait_for_stderr(*rank0, "bad magic", milliseconds(5000)));
  auto rank1 = job.start(1, {"gather", "2"});
  CHECK(rank1->finish() == 0);
  CHECK(rank0->finish() == 0);
}

TEST_CASE("an oversized message is rejected before its payload is read") {
  const ManualJob job{2};
  auto rank0 = start_logged_rank0(job);
  // A well-formed hello header announcing a 1 TiB payload.
  std::string header = {'P', 'C', 'S', 'T', 1, 0, 1, 0};
  for (int i = 0; i < 8; ++i) header += static_cast<char>((uint64_t{1} << 40) >> (8 * i));
  CHECK(store_closes_after(job.port, header));
  CHECK(wait_for_stderr(*rank0, "exceeds the limit", milliseconds(5000)));
  auto rank1 = job.start(1, {"gather", "2"});
  CHECK(rank1->finish() == 0);
  CHECK(rank0->finish() == 0);
}

TEST_CASE("a rank that is already taken is rejected and the store keeps serving") {
  const ManualJob job{3};
  auto rank0 = start_logged_rank0(job);
  auto rank1 = job.start(1, {"gather", "2"});
  REQUIRE(wait_for_stderr(*rank0, "store: rank 1 connected", milliseconds(10000)));
  auto duplicate = job.start(1, {"gather", "2"});
  CHECK(duplicate->finish() == kInvalidArgument);
  CHECK(duplicate->err().find("PCOLL_RANK=1 is already taken") != std::string::npos);
  auto rank2 = job.start(2, {"gather", "2"});
  CHECK(rank2->finish() == 0);
  CHECK(rank1->finish() == 0);
  CHECK(rank0->finish() == 0);
  CHECK(rank0->err().find("rejected connection") != std::string::npos);
}

TEST_CASE("an invalid PCOLL_LOG in the store's process does not stop the store") {
  // The store's thread logs each rank it admits; a log level it cannot read must not kill it.
  const ManualJob job{2};
  auto rank0 = job.start(0, {"gather", "2"}, {{"PCOLL_LOG", "verbose"}});
  auto rank1 = job.start(1, {"gather", "2"}, {{"PCOLL_LOG", "verbose"}});
  CHECK(rank1->finish(milliseconds(10000)) == 0);
  CHECK(rank0->finish(milliseconds(10000)) == 0);
  CHECK(rank0->err().find("server stopped") == std::string::npos);
}

TEST_CASE("a second rank 0 at the same PCOLL_ROOT is told that rank 0 and its store are taken") {
  const ManualJob job{2};
  auto rank0 = start_logged_rank0(job);
  REQUIRE(store_closes_after(job.port, "GET / HTTP/1.0\r\n\r\n"));  // rank 0's store is listening
  auto second = job.start(0, {"gather", "2"});
  CHECK(second->finish(milliseconds(10000)) == kBootstrap);
  CHECK(second->err().find("already taken") != std::string::npos);
  CHECK(second->err().find("another rank 0") != std::string::npos);
  auto rank1 = job.start(1, {"gather", "2"});
  CHECK(rank1->finish() == 0);
  CHECK(rank0->finish() == 0);
}

TEST_CASE("a rank whose connection is closed before its hello is answered connects again") {
  // The store drops connections late with their hello, and the oldest ones in a flood; a
  // rank it drops so must try again rather than fail. Here the test plays the store for
  // rank 1's first connection, then rank 0's real store takes the port.
  const ManualJob job{2};
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);  // not the ranks'
  const int one = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(job.port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(listener, 4) == 0);
  auto rank1 = job.start(1, {"gather", "2"});
  const int first = ::accept(listener, nullptr, nullptr);
  REQUIRE(first >= 0);
  char hello[16];
  CHECK(::recv(first, hello, sizeof hello, MSG_WAITALL) == static_cast<ssize_t>(sizeof hello));
  ::close(first);
  ::close(listener);
  auto rank0 = job.start(0, {"gather", "2"});
  CHECK(rank1->finish() == 0);
  CHECK(rank0->finish() == 0);
}

TEST_CASE("a rank that never shows up gives every waiting rank a timeout naming it") {
  SUBCASE("manual mode") {
    ManualJob job{3};
    const Env quick = {{"PCOLL_TIMEOUT_MS", "500"}};
    auto rank0 = job.start(0, {"gather", "1"}, quick);
    auto rank1 = job.start(1, {"gather", "1"}, quick);
    for (Process* p : {rank0.get(), rank1.get()}) {
      CHECK(p->finish(milliseconds(10000)) == kTimeout);
      CHECK(p->err().find("rank 2 did not connect") != std::string::npos);
    }
  }
  SUBCASE("under pcollrun") {
    Process job({pcollrun(), "-n", "3", "--timeout-ms", "500", rank_program(), "gather", "1"},
                {{"PCOLL_TEST_ABSENT_RANK", "2"}});
    CHECK(job.finish(milliseconds(10000)) == kTimeout);
    CHECK(job.err().find("rank 2 did not connect") != std::string::npos);
  }
}

TEST_CASE("a rank whose store is gone gets an error instead of hanging") {
  const ManualJob job{3};
  auto rank0 = start_logged_rank0(job);
  auto rank1 = job.start(1, {"gather", "2"});
  REQUIRE(wait_for_stderr(*rank0, "store: rank 1 connected", milliseconds(10000)));
  rank0->signal(SIGKILL);
  const auto started = std::chrono::steady_clock::now();
  CHECK(rank1->finish(milliseconds(10000)) == kBootstrap);
  CHECK(std::chrono::steady_clock::now() - started < milliseconds(5000));  // not the 20 s timeout
  CHECK(rank1->err().find("closed the connection") != std::string::npos);
}

TEST_CASE("bad bootstrap environment values are invalid_argument naming the variable") {
  struct Case {
    Env env;
    std::string variable;
  };
  const Env good = {{"PCOLL_RANK", "0"}, {"PCOLL_SIZE", "2"}, {"PCOLL_ROOT", "127.0.0.1:1"}, {"PCOLL_JOB_KEY", "k"}};
  const auto with = [&](Env changes, const std::vector<std::string>& removed = {}) {
    Env e = good;
    for (const auto& name : removed) e.erase(name);
    for (const auto& [k, v] : changes) e[k] = v;
    return e;
  };
  const std::vector<Case> cases = {
      {with({{"PCOLL_RANK", "2"}}), "PCOLL_RANK"},
      {with({{"PCOLL_RANK", "one"}}), "PCOLL_RANK"},
      {with({{"PCOLL_RANK", "-1"}}), "PCOLL_RANK"},
      {with({{"PCOLL_SIZE", "0"}}), "PCOLL_SIZE"},
      {with({{"PCOLL_SIZE", "2x"}}), "PCOLL_SIZE"},
      {with({}, {"PCOLL_SIZE"}), "PCOLL_SIZE"},
      {with({{"PCOLL_ROOT", "localhost"}}), "PCOLL_ROOT"},
      {with({{"PCOLL_ROOT", "127.0.0.1:99999"}}), "PCOLL_ROOT"},
      {with({{"PCOLL_ROOT", "127.0.0.1:http"}}), "PCOLL_ROOT"},
      {with({{"PCOLL_ROOT", ":5000"}}), "PCOLL_ROOT"},
      {with({{"PCOLL_ROOT", "no-such-host.invalid:5000"}, {"PCOLL_RANK", "1"}, {"PCOLL_TIMEOUT_MS", "2000"}}),
       "PCOLL_ROOT"},
      {with({}, {"PCOLL_JOB_KEY"}), "PCOLL_JOB_KEY"},
      {with({{"PCOLL_TIMEOUT_MS", "soon"}}), "PCOLL_TIMEOUT_MS"},
      {with({{"PCOLL_LAUNCHER", "slurm"}}), "PCOLL_LAUNCHER"},
      {with({{"PCOLL_BOOTSTRAP", "magic"}}), "PCOLL_BOOTSTRAP"},
      {with({}, {"PCOLL_ROOT"}), "PCOLL_ROOT"},  // PCOLL_SIZE=2 alone is not a single-rank job
  };
  for (const auto& c : cases) {
    CAPTURE(c.variable);
    Process p({rank_program(), "gather", "1"}, c.env);
    CHECK(p.finish(milliseconds(10000)) == kInvalidArgument);
    CHECK(p.err().find(c.variable) != std::string::npos);
  }
}

TEST_CASE("the bootstrap is chosen from the environment") {
  SUBCASE("nothing set: a single-rank job") {
    Process p({rank_program(), "gather", "2"}, {});
    CHECK(p.finish() == 0);
    CHECK(p.out().find("rank 0 of 1 ok (single)") != std::string::npos);
  }
  SUBCASE("PCOLL_BOOTSTRAP=single wins over a store configuration") {
    Process p({rank_program(), "gather", "2"},
              {{"PCOLL_BOOTSTRAP", "single"}, {"PCOLL_ROOT", "127.0.0.1:1"}, {"PCOLL_SIZE", "4"}});
    CHECK(p.finish() == 0);
    CHECK(p.out().find("ok (single)") != std::string::npos);
  }
#if !PCOLL_HAVE_PMIX
  SUBCASE("PMIx requested or detected without PMIx support: unsupported") {
    for (const Env& env : {Env{{"PCOLL_BOOTSTRAP", "pmix"}}, Env{{"PMIX_NAMESPACE", "job.1"}}}) {
      Process p({rank_program(), "gather", "1"}, env);
      CHECK(p.finish() == kUnsupported);
      CHECK(p.err().find("PMIx") != std::string::npos);
    }
  }
#endif
#if !PCOLL_HAVE_PMI2
  SUBCASE("PMI2 requested or detected without PMI2 support: unsupported") {
    for (const Env& env : {Env{{"PCOLL_BOOTSTRAP", "pmi2"}}, Env{{"PMI_FD", "3"}}}) {
      Process p({rank_program(), "gather", "1"}, env);
      CHECK(p.finish() == kUnsupported);
      CHECK(p.err().find("PMI2") != std::string::npos);
    }
  }
#endif
}
