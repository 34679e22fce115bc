// Shrinking to the survivors (docs/design.md, "Shrinking to the survivors"): a rank SIGKILLs
// itself in the middle of a run; every survivor gets PCOLL_ERR_PEER_FAILED, lists the dead
// rank, calls pcoll_comm_shrink, and the survivors run exact int64 rounds on the new
// communicator, ranked in the order of their old ranks, with identical results. The ranks
// are launched with the manual PCOLL_ROOT bootstrap (pcollrun would, rightly, end the job
// when a rank dies), each a process of this program.
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <pcoll/pcoll.h>
#include "subprocess.hpp"

namespace {

constexpr int kRanks = 4;
constexpr int kVictim = 2;
constexpr int kTimeoutMs = 2000;
constexpr size_t kCount = 1024;
std::string g_self;

// Exit codes of a child rank.
enum ChildExit { kShrunk = 0, kNoError = 10, kWrongError = 11, kShrinkFailed = 12, kWrongResult = 13, kInitFailed = 14 };

int64_t contribution(int old_rank, int round, size_t i) {
  return (old_rank + 1) * 1000003LL + round * 7919LL + static_cast<int64_t>(i);
}

// Runs sync rounds until the victim's death fails one; `sleeper` computes for three
// timeouts when the victim dies, and learns of the failure from the others' shrink.
int run_child(bool sleeper) {
  pcoll_comm_t* comm = nullptr;
  if (pcoll_init(&comm) != PCOLL_SUCCESS) return kInitFailed;
  const int rank = pcoll_comm_rank(comm), size = pcoll_comm_size(comm);
  pcoll_allreduce_opts_t opts;
  pcoll_allreduce_opts_init(&opts);
  opts.timeout_ms = kTimeoutMs;
  pcoll_allreduce_t* h = nullptr;
  if (pcoll_allreduce_create(comm, kCount, PCOLL_INT64, PCOLL_OP_SUM, PCOLL_MODE_SYNC, &opts, &h) != PCOLL_SUCCESS)
    return kInitFailed;
  std::vector<int64_t> send(kCount, 1), recv(kCount);
  int rc = PCOLL_SUCCESS;
  for (int t = 0; t < 100000 && rc == PCOLL_SUCCESS; ++t) {
    if (t == 5 && rank == kVictim) ::raise(SIGKILL);
    if (t == 5 && sleeper && rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(3 * kTimeoutMs));
    rc = pcoll_allreduce_run(h, send.data(), recv.data(), nullptr);
  }
  const std::string message = pcoll_last_error();
  std::fprintf(stderr, "shrink_check rank %d: the run failed: %s\n", rank, message.c_str());
  int failed[kRanks] = {-1, -1, -1, -1}, count = -1;
  if (rc != PCOLL_ERR_PEER_FAILED || pcoll_comm_failed_ranks(comm, failed, kRanks, &count) != PCOLL_SUCCESS ||
      count != 1 || failed[0] != kVictim) {
    std::fprintf(stderr, "shrink_check rank %d: rc %d, %d failed rank(s), first %d\n", rank, rc, count, failed[0]);
    return kWrongError;
  }
  const auto failed_at = std::chrono::steady_clock::now();
  pcoll_comm_t* survivors = nullptr;
  if (pcoll_comm_shrink(comm, &survivors) != PCOLL_SUCCESS) {
    std::fprintf(stderr, "shrink_check rank %d: shrink: %s\n", rank, pcoll_last_error());
    return kShrinkFailed;
  }
  const double shrink_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - failed_at).count();
  const int new_rank = pcoll_comm_rank(survivors), new_size = pcoll_comm_size(survivors);
  if (new_size != size - 1 || new_rank != (rank < kVictim ? rank : rank - 1)) {
    std::fprintf(stderr, "shrink_check rank %d: rank %d of %d after the shrink\n", rank, new_rank, new_size);
    return kWrongResult;
  }
  pcoll_allreduce_t* again = nullptr;
  if (pcoll_allreduce_create(survivors, kCount, PCOLL_INT64, PCOLL_OP_SUM, PCOLL_MODE_SYNC, &opts, &again) !=
      PCOLL_SUCCESS) {
    std::fprintf(stderr, "shrink_check rank %d: create on the survivors: %s\n", rank, pcoll_last_error());
    return kShrinkFailed;
  }
  uint64_t digest = 1469598103934665603ULL;
  for (int t = 0; t < 20; ++t) {
    for (size_t i = 0; i < kCount; ++i) send[i] = contribution(rank, t, i);
    if (pcoll_allreduce_run(again, send.data(), recv.data(), nullptr) != PCOLL_SUCCESS) {
      std::fprintf(stderr, "shrink_check rank %d: round %d on the survivors: %s\n", rank, t, pcoll_last_error());
      return kShrinkFailed;
    }
    if (t == 0)
      std::fprintf(stderr, "shrink_check rank %d: shrink took %.0f ms, the first round %.0f ms in all\n", rank, shrink_ms,
                   std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - failed_at).count());
    for (size_t i = 0; i < kCount; ++i) {
      int64_t expected = 0;
      for (int r = 0; r < size; ++r)
        if (r != kVictim) expected += contribution(r, t, i);
      if (recv[i] != expected) {
        std::fprintf(stderr, "shrink_check rank %d: round %d element %zu is %lld, not %lld\n", rank, t, i,
                     static_cast<long long>(recv[i]), static_cast<long long>(expected));
        return kWrongResult;
      }
      digest = (digest ^ static_cast<uint64_t>(recv[i])) * 1099511628211ULL;
    }
  }
  std::printf("RESULT %d %llx\n", new_rank, static_cast<unsigned long long>(digest));
  std::fflush(stdout);
  pcoll_allreduce_destroy(again);
  if (pcoll_finalize(survivors) != PCOLL_SUCCESS) {
    std::fprintf(stderr, "shrink_check rank %d: finalize of the survivors: %s\n", rank, pcoll_last_error());
    return kShrinkFailed;
  }
  pcoll_allreduce_destroy(h);
  pcoll_finalize(comm);  // returns the old failure
  return kShrunk;
}

void check_shrink(const char* provider, const char* scenario) {
  CAPTURE(provider);
  CAPTURE(scenario);
  const int port = test::free_port();
  std::vector<std::unique_ptr<test::Process>> ranks;
  for (int r = 0; r < kRanks; ++r) {
    test::Env env = {{"PCOLL_RANK", std::to_string(r)},
                     {"PCOLL_SIZE", std::to_string(kRanks)},
                     {"PCOLL_ROOT", "127.0.0.1:" + std::to_string(port)},
                     {"PCOLL_JOB_KEY", "shrink-check-" + std::to_string(port)},
                     {"PCOLL_BOOTSTRAP", "store"},
                     {"PCOLL_PROVIDER", provider},
                     {"PCOLL_TIMEOUT_MS", std::to_string(kTimeoutMs)},
                     {"FI_TCP_IFACE", "lo"}};
    ranks.push_back(std::make_unique<test::Process>(std::vector<std::string>{g_self, "--child", scenario}, env));
  }
  std::string digest;
  for (int r = 0; r < kRanks; ++r) {
    CAPTURE(r);
    const int code = ranks[static_cast<size_t>(r)]->finish(std::chrono::milliseconds(40000));
    const std::string out = ranks[static_cast<size_t>(r)]->out();
    INFO(ranks[static_cast<size_t>(r)]->err());
    if (r == kVictim) {
      CHECK(code == 128 + SIGKILL);
      continue;
    }
    CHECK(code == kShrunk);
    const size_t at = out.find("RESULT ");
    REQUIRE(at != std::string::npos);
    const std::string line = out.substr(at, out.find('\n', at) - at);
    const std::string hash = line.substr(line.rfind(' ') + 1);
    if (digest.empty()) digest = hash;
    CHECK(hash == digest);  // replicas identical
  }
}

}  // namespace

TEST_CASE("the survivors of a killed rank shrink and run exact rounds (ofi:shm)") { check_shrink("ofi:shm", "run"); }

#if !defined(__SANITIZE_ADDRESS__)
TEST_CASE("the survivors of a killed rank shrink and run exact rounds (ucx:shm)") { check_shrink("ucx:shm", "run"); }
#endif

TEST_CASE("the survivors of a killed rank shrink and run exact rounds (ofi:tcp)") { check_shrink("ofi:tcp", "run"); }

TEST_CASE("a survivor computing when the rank died is not excluded, and shrinks with the others (ofi:shm)") {
  check_shrink("ofi:shm", "sleeper");
}

int main(int argc, char** argv) {
  g_self = argv[0];
  if (argc >= 3 && std::strcmp(argv[1], "--child") == 0) return run_child(std::strcmp(argv[2], "sleeper") == 0);
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}
