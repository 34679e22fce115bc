// Resuming a handle on the survivors (docs/design.md, "Resuming a handle"): a rank SIGKILLs
// itself in the middle of a run of an elastic int64 handle; every survivor shrinks, calls
// pcoll_allreduce_resume, settles the interrupted call as it says, runs more rounds and a
// final flush on the resumed handle, and checks:
//  - conservation: the results of all rounds it collected add up to everything the
//    survivors submitted (carried sendbufs included), plus whole multiples of the dead
//    rank's marker contribution, which no survivor's data can reach;
//  - every survivor collected each round once, and the same results (a digest);
//  - the first new round is the round after the last one any survivor completed.
// Scenarios: a plain kill in every mode; a survivor computing through it ("sleeper"); a
// survivor left a round behind ("lagging"); a second survivor that dies after the shrink, so
// that the resume fails and is made again on the survivors of the survivors ("second").
// Also the misuse resume refuses: a handle created without opts.elastic, a communicator not
// shrunk from the handle's. Ranks are launched with the manual PCOLL_ROOT bootstrap.
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
#include "store_job.hpp"

namespace {

constexpr int kRanks = 4;
constexpr int kVictim = 2;
constexpr int kTimeoutMs = 2000;
constexpr size_t kCount = 4096;
constexpr uint64_t kLastRound = 20;  // every survivor runs up to this round, then flushes
// The dead rank contributes kMarker to every element of every round it joins fresh: the
// survivors' whole submissions stay far below it, so the total modulo kMarker is theirs.
constexpr int64_t kMarker = int64_t{1} << 40;
// In "second", rank 3, which dies after the shrink, contributes kSecondMarker: what it gave
// before is in the results too, and the survivors' submissions stay far below it as well.
constexpr int64_t kSecondMarker = int64_t{1} << 30;
std::string g_self;

enum ChildExit { kResumed = 0, kWrongError = 11, kFailed = 12, kWrongResult = 13, kInitFailed = 14, kNotRefused = 15 };

int64_t contribution(int old_rank, int call, size_t i) {
  return (old_rank + 1) * 1009LL + call * 7LL + static_cast<int64_t>(i % 97);
}

struct Totals {
  std::vector<int64_t> submitted = std::vector<int64_t>(kCount, 0);  // this rank's sendbufs
  std::vector<int64_t> collected = std::vector<int64_t>(kCount, 0);  // the results it collected
  uint64_t digest = 1469598103934665603ULL;
  uint64_t next_round = 0;  // the round the next collected result must be
  void submit(const std::vector<int64_t>& send) {
    for (size_t i = 0; i < kCount; ++i) submitted[i] += send[i];
  }
  bool collect(const std::vector<int64_t>& recv, uint64_t round, int rank) {
    if (round != next_round) {
      std::fprintf(stderr, "resume_check rank %d: collected round %llu, expected %llu\n", rank,
                   static_cast<unsigned long long>(round), static_cast<unsigned long long>(next_round));
      return false;
    }
    ++next_round;
    for (size_t i = 0; i < kCount; ++i) {
      collected[i] += recv[i];
      digest = (digest ^ static_cast<uint64_t>(recv[i])) * 1099511628211ULL;
    }
    return true;
  }
};

pcoll_mode_t mode_named(const std::string& name) {
  pcoll_mode_t mode = PCOLL_MODE_SYNC;
  pcoll_mode_from_name(name.c_str(), &mode);
  return mode;
}

int run_child(const std::string& mode_name, const std::string& scenario) {
  const bool sleeper = scenario == "sleeper";
  pcoll_comm_t* comm = nullptr;
  if (pcoll_init(&comm) != PCOLL_SUCCESS) return kInitFailed;
  const int rank = pcoll_comm_rank(comm);
  pcoll_allreduce_opts_t opts;
  pcoll_allreduce_opts_init(&opts);
  opts.timeout_ms = kTimeoutMs;
  opts.elastic = 1;
  pcoll_allreduce_t* h = nullptr;
  if (pcoll_allreduce_create(comm, kCount, PCOLL_INT64, PCOLL_OP_SUM, mode_named(mode_name), &opts, &h) !=
      PCOLL_SUCCESS) {
    std::fprintf(stderr, "resume_check rank %d: create: %s\n", rank, pcoll_last_error());
    return kInitFailed;
  }
  pcoll_allreduce_opts_t plain = opts;
  plain.elastic = 0;
  pcoll_allreduce_t* not_elastic = nullptr;
  if (pcoll_allreduce_create(comm, 8, PCOLL_INT64, PCOLL_OP_SUM, PCOLL_MODE_SYNC, &plain, &not_elastic) != PCOLL_SUCCESS)
    return kInitFailed;
  Totals totals;
  std::vector<int64_t> send(kCount), recv(kCount);
  int call = 0;
  int rc = PCOLL_SUCCESS;
  pcoll_round_info_t info;
  for (; call < 100000; ++call) {
    if (call == 5 && rank == kVictim && scenario != "lagging") {
      // Computes a little, so that the others' partial rounds may run without it first.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ::raise(SIGKILL);
    }
    if (call == 5 && sleeper && rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(3 * kTimeoutMs));
    const bool second_victim = scenario == "second" && rank == 3;
    for (size_t i = 0; i < kCount; ++i)
      send[i] = rank == kVictim ? kMarker : second_victim ? kSecondMarker : contribution(rank, call, i);
    rc = pcoll_allreduce_start(h, send.data(), recv.data());
    if (rc != PCOLL_SUCCESS) break;  // posted nothing: this call's data was not submitted
    totals.submit(send);
    rc = pcoll_allreduce_wait(h, &info);
    if (rc != PCOLL_SUCCESS) break;
    if (!totals.collect(recv, info.round, rank)) return kWrongResult;
  }
  std::fprintf(stderr, "resume_check rank %d: call %d failed: %s\n", rank, call, pcoll_last_error());
  if (rc != PCOLL_ERR_PEER_FAILED && rc != PCOLL_ERR_TIMEOUT) return kWrongError;

  pcoll_comm_t* survivors = nullptr;
  const auto failed_at = std::chrono::steady_clock::now();
  for (int attempt = 0;; ++attempt) {
    const int shrunk = pcoll_comm_shrink(comm, &survivors);
    if (shrunk == PCOLL_SUCCESS) break;
    std::fprintf(stderr, "resume_check rank %d: shrink: %s\n", rank, pcoll_last_error());
    if (shrunk != PCOLL_ERR_PEER_FAILED || attempt == 2) return kFailed;
  }
  const auto shrunk_at = std::chrono::steady_clock::now();
  // Misuse first: both refused by name, and nothing collective started.
  int delivered = -1;
  pcoll_allreduce_t* wrong = nullptr;
  if (pcoll_allreduce_resume(not_elastic, survivors, recv.data(), &delivered, nullptr, &wrong) !=
          PCOLL_ERR_INVALID_ARGUMENT ||
      std::strstr(pcoll_last_error(), "elastic") == nullptr) {
    std::fprintf(stderr, "resume_check rank %d: a handle without elastic: %s\n", rank, pcoll_last_error());
    return kNotRefused;
  }
  if (pcoll_allreduce_resume(h, comm, recv.data(), &delivered, nullptr, &wrong) != PCOLL_ERR_INVALID_ARGUMENT ||
      std::strstr(pcoll_last_error(), "pcoll_comm_shrink") == nullptr) {
    std::fprintf(stderr, "resume_check rank %d: a communicator not shrunk: %s\n", rank, pcoll_last_error());
    return kNotRefused;
  }

  // "second": rank 3 dies after the shrink, so the others' resume fails; they shrink the
  // survivors' communicator that failed and resume the old handle onto that one.
  if (scenario == "second" && rank == 3) ::raise(SIGKILL);
  pcoll_allreduce_t* resumed = nullptr;
  std::vector<pcoll_comm_t*> failed_survivors;
  for (int attempt = 0;; ++attempt) {
    const int resumed_rc = pcoll_allreduce_resume(h, survivors, recv.data(), &delivered, &info, &resumed);
    if (resumed_rc == PCOLL_SUCCESS) break;
    std::fprintf(stderr, "resume_check rank %d: resume: %s\n", rank, pcoll_last_error());
    if ((resumed_rc != PCOLL_ERR_PEER_FAILED && resumed_rc != PCOLL_ERR_TIMEOUT) || attempt == 2) return kFailed;
    pcoll_comm_t* fewer = nullptr;
    if (pcoll_comm_shrink(survivors, &fewer) != PCOLL_SUCCESS) {
      std::fprintf(stderr, "resume_check rank %d: shrink after a failed resume: %s\n", rank, pcoll_last_error());
      return kFailed;
    }
    failed_survivors.push_back(survivors);
    survivors = fewer;
  }
  h = nullptr;  // freed by resume
  const auto resumed_at = std::chrono::steady_clock::now();
  if (delivered == 1 && !totals.collect(recv, info.round, rank)) return kWrongResult;
  std::fprintf(stderr, "resume_check rank %d: delivered %d; shrink %.0f ms, resume %.0f ms\n", rank, delivered,
               std::chrono::duration<double, std::milli>(shrunk_at - failed_at).count(),
               std::chrono::duration<double, std::milli>(resumed_at - shrunk_at).count());
  const int new_rank = pcoll_comm_rank(survivors);
  // Survivors may resume at different rounds of their applications (one that had no call
  // interrupted, or a round that completed where it did not): each runs to the same round.
  for (int t = 0; totals.next_round < kLastRound; ++t, ++call) {
    for (size_t i = 0; i < kCount; ++i) send[i] = contribution(rank, call, i);
    totals.submit(send);
    if (pcoll_allreduce_run(resumed, send.data(), recv.data(), &info) != PCOLL_SUCCESS) {
      std::fprintf(stderr, "resume_check rank %d: a round after resume: %s\n", rank, pcoll_last_error());
      return kFailed;
    }
    if (t == 0)
      std::fprintf(stderr, "resume_check rank %d: the first round after the failing call's return: %.0f ms\n", rank,
                   std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - failed_at).count());
    if (!totals.collect(recv, info.round, rank)) return kWrongResult;
  }
  if (pcoll_allreduce_flush(resumed, recv.data(), &info) != PCOLL_SUCCESS) {
    std::fprintf(stderr, "resume_check rank %d: flush: %s\n", rank, pcoll_last_error());
    return kFailed;
  }
  if (!totals.collect(recv, info.round, rank)) return kWrongResult;
  // What every survivor submitted, summed over the survivors in one more round.
  pcoll_allreduce_t* sum = nullptr;
  pcoll_allreduce_opts_t sync_opts;
  pcoll_allreduce_opts_init(&sync_opts);
  if (pcoll_allreduce_create(survivors, kCount, PCOLL_INT64, PCOLL_OP_SUM, PCOLL_MODE_SYNC, &sync_opts, &sum) !=
          PCOLL_SUCCESS ||
      pcoll_allreduce_run(sum, totals.submitted.data(), recv.data(), nullptr) != PCOLL_SUCCESS) {
    std::fprintf(stderr, "resume_check rank %d: the sum of submissions: %s\n", rank, pcoll_last_error());
    return kFailed;
  }
  for (size_t i = 0; i < kCount; ++i) {
    const int64_t dead_part = totals.collected[i] - recv[i];
    const int64_t unit = scenario == "second" ? kSecondMarker : kMarker;
    if (dead_part < 0 || dead_part % unit != 0) {
      std::fprintf(stderr,
                   "resume_check rank %d: element %zu: the rounds collected %lld, the survivors submitted %lld: "
                   "the difference is no whole number of the dead rank's contributions\n",
                   rank, i, static_cast<long long>(totals.collected[i]), static_cast<long long>(recv[i]));
      return kWrongResult;
    }
  }
  if (delivered == 1) std::printf("DELIVERED %d\n", new_rank);
  std::printf("RESULT %d %llx %llu\n", new_rank, static_cast<unsigned long long>(totals.digest),
              static_cast<unsigned long long>(totals.next_round));
  std::fflush(stdout);
  pcoll_allreduce_destroy(sum);
  pcoll_allreduce_destroy(resumed);
  if (pcoll_finalize(survivors) != PCOLL_SUCCESS) {
    std::fprintf(stderr, "resume_check rank %d: finalize of the survivors: %s\n", rank, pcoll_last_error());
    return kFailed;
  }
  pcoll_allreduce_destroy(not_elastic);
  for (pcoll_comm_t* gone : failed_survivors) pcoll_finalize(gone);  // return their failure
  pcoll_finalize(comm);  // returns the old failure
  return kResumed;
}

void check_resume(const char* provider, const std::string& mode, const std::string& scenario = "run") {
  INFO("provider " << provider << ", mode " << mode << ", scenario " << scenario);
  const auto ranks = test::start_ranks(
      test::ManualJob{kRanks}, {g_self, "--child", mode, scenario}, provider, kTimeoutMs, [&](int r, test::Env& env) {
        if (scenario != "lagging") return;
        // The victim dies instead of the last write of round 5 (two writes a round:
        // recursive doubling at P = 4): the survivor that write was for has not completed
        // round 5 when the others have.
        env["PCOLL_PLAN"] = "flat";
        env["PCOLL_PLAN_RULES"] = "recursive_doubling:0-inf";
        if (r == kVictim) env["PCOLL_TEST_KILL_AT_WRITE"] = "12";
      });
  std::string digest;
  int delivered = 0;
  for (int r = 0; r < kRanks; ++r) {
    CAPTURE(r);
    const int code = ranks[static_cast<size_t>(r)]->finish(std::chrono::milliseconds(40000));
    const std::string out = ranks[static_cast<size_t>(r)]->out();
    INFO(ranks[static_cast<size_t>(r)]->err());
    if (r == kVictim || (scenario == "second" && r == 3)) {
      CHECK(code == 128 + SIGKILL);
      continue;
    }
    CHECK(code == kResumed);
    if (out.find("DELIVERED ") != std::string::npos) ++delivered;
    const auto tail = test::result_fields(out);  // digest and rounds
    CHECK(tail.has_value());
    if (!tail) continue;
    if (digest.empty()) digest = *tail;
    CHECK(*tail == digest);  // replicas identical, every round collected once
  }
  // The survivor that lacked round 5's result got it from resume.
  if (scenario == "lagging") CHECK(delivered >= 1);
}

}  // namespace

// A sync handle: the "lagging" case below.
TEST_CASE("survivors resume a solo handle: conserved, identical (ofi:shm)") { check_resume("ofi:shm", "solo"); }
TEST_CASE("survivors resume a majority handle while one computes (ofi:tcp)") {
  check_resume("ofi:tcp", "majority", "sleeper");
}
TEST_CASE("survivors resume a quorum handle: conserved, identical (ofi:shm)") { check_resume("ofi:shm", "quorum"); }
TEST_CASE("a survivor that dies during resume: the others shrink again and resume onto that (ofi:shm)") {
  check_resume("ofi:shm", "solo", "second");
}
TEST_CASE("a survivor a round behind the others gets that round's result from resume (ofi:shm)") {
  check_resume("ofi:shm", "sync", "lagging");
}
#if !defined(__SANITIZE_ADDRESS__)
TEST_CASE("survivors resume a solo handle: conserved, identical (ucx:shm)") { check_resume("ucx:shm", "solo"); }
#endif

int main(int argc, char** argv) {
  g_self = argv[0];
  if (argc >= 4 && std::strcmp(argv[1], "--child") == 0) return run_child(argv[2], argv[3]);
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}
