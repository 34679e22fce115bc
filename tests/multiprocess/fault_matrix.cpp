// One cell of the fault matrix (docs/reliability.md): P ranks started by hand with the
// manual store bootstrap (pcollrun would stop the whole job when one rank fails), the last
// rank (the victim) suffers a fault at one phase of the API, and every survivor must get an
// error naming the culprit within timeout + 2 s, then get it again on its next call, and
// clean up without hanging or crashing.
//
//   fault_matrix --fault F --phase PH --survivors S [--provider SEL] [--ranks P] [--timeout-ms T]
//                [--count N] [--resume]
//     F   kill | stop | silent | reset | access | eagain
//         kill, stop: SIGKILL / SIGSTOP of the victim's process (at init: from inside
//         pcoll_init, by the fault-injection transport at connect); the others through the
//         fault-injection transport (PCOLL_PROVIDER=fault+SEL): an engine that stops
//         answering, a connection reset, a remote access error, an EAGAIN burst longer
//         than the transport's timeout. Armed by SIGUSR1, which the victim raises at the
//         start of the phase.
//     PH  init | create | sync | solo | majority | flush | destroy
//     S   run      survivors make the phase's blocking call
//         test     survivors drive the round with start + test polling (rounds only)
//         compute  survivors other than rank 0 compute for 2 x timeout before the call
//     SEL ofi:shm | ofi:tcp | ucx:shm | ucx:tcp | default (PCOLL_PROVIDER unset)
//     N   float32 elements of the handle (default 4096, recursive doubling); above 8192
//         the default provider's ranks run the direct plan (docs/design.md)
//     --resume  then the shrink-and-resume outcome (docs/design.md, "Resuming a handle"):
//         every rank that got its error shrinks, resumes its elastic handle on the survivors
//         (creates it again where create failed or destroy freed it on any survivor: a
//         create or destroy the failure interrupted may have completed on some ranks and
//         not on others, which the survivors settle with a MIN round), runs to round 40 and
//         flushes. Every rank but the victim and the culprit must come out of it, and all
//         that do with the same communicator size and the same results from round 30 on; a
//         rank the survivors excluded gets PCOLL_ERR_PEER_FAILED; nobody hangs.
// Prints one line (PASS / FAIL / N/A, the cell, the worst survivor's time or what went
// wrong) and exits 0, 1, or 77 for a cell that does not apply (meson's skip).
//
// The culprit: for kill, stop and silent, the victim. An injected provider error is about
// the peer the victim was talking to (X, named in the victim's own error, as a real
// provider names the peer of a failed connection): every rank but X must name X, and X,
// which nobody tells, must still fail within the bound. Except at init, where the victim's
// failed connect makes it leave the job: there every other rank must name the victim.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <pcoll/pcoll.h>
#include "subprocess.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Cell {
  std::string fault, phase, survivors, provider = "ofi:shm";
  int ranks = 4;
  int timeout_ms = 2000;
  size_t count = 4096;
  bool resume = false;

  std::string name() const {
    return fault + " " + phase + " " + survivors + " " + provider + (count != 4096 ? " count=" + std::to_string(count) : "") +
           (resume ? " resume" : "");
  }
  bool round_phase() const { return phase == "sync" || phase == "solo" || phase == "majority"; }
  bool signal_fault() const { return fault == "kill" || fault == "stop"; }
};

const std::vector<std::string> kFaults = {"kill", "stop", "silent", "reset", "access", "eagain"};
const std::vector<std::string> kPhases = {"init", "create", "sync", "solo", "majority", "flush", "destroy"};
const std::vector<std::string> kSurvivors = {"run", "test", "compute"};

bool one_of(const std::string& value, const std::vector<std::string>& choices) {
  for (const auto& c : choices)
    if (value == c) return true;
  return false;
}

// The steady clock is the system's monotonic clock, the same in every process: the victim
// says when it faulted, each survivor when it started waiting and when its error came.
long long steady_ms(Clock::time_point t = Clock::now()) {
  return std::chrono::duration_cast<milliseconds>(t.time_since_epoch()).count();
}

double ms_since(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

// The first rank a message names ("rank N", "ranks N, M"; "rank(s) N" as older messages had it), or -1.
int named_rank(const std::string& message) {
  static const std::regex pattern("\\brank(?:s|\\(s\\))? (\\d+)");
  std::smatch m;
  if (!std::regex_search(message, m, pattern)) return -1;
  return std::stoi(m[1]);
}

// --- A rank ------------------------------------------------------------------------------

class Rank {
 public:
  explicit Rank(const Cell& cell) : cell_(cell), send_(cell.count, 1.0f), recv_(cell.count) {
    rank_ = std::atoi(std::getenv("PCOLL_RANK"));
    victim_ = cell.ranks - 1;
  }

  int run() {
    const bool init_phase = cell_.phase == "init";
    since_ = Clock::now();
    if (const int rc = pcoll_init(&comm_); rc != PCOLL_SUCCESS) return failed("pcoll_init", rc);
    if (init_phase) enter();
    mode_ = cell_.phase == "sync"       ? PCOLL_MODE_SYNC
            : cell_.phase == "majority" ? PCOLL_MODE_MAJORITY
                                        : PCOLL_MODE_SOLO;
    pcoll_allreduce_opts_init(&opts_);
    opts_.timeout_ms = static_cast<uint32_t>(cell_.timeout_ms);
    opts_.elastic = cell_.resume ? 1 : 0;
    if (cell_.phase == "create") enter();
    if (const int rc = pcoll_allreduce_create(comm_, cell_.count, PCOLL_FLOAT32, PCOLL_OP_SUM, mode_, &opts_, &handle_);
        rc != PCOLL_SUCCESS)
      return failed("pcoll_allreduce_create", rc);
    // Warm-up: every rank well inside the job before the fault.
    for (int t = 0; t < 3 && !init_phase && cell_.phase != "create"; ++t)
      if (const int rc = round(); rc != PCOLL_SUCCESS) return failed(round_call(), rc);
    if (cell_.round_phase()) enter();
    if (cell_.phase == "flush") {
      enter();
      if (const int rc = pcoll_allreduce_flush(handle_, recv_.data(), nullptr); rc != PCOLL_SUCCESS)
        return failed("pcoll_allreduce_flush", rc);
    }
    if (cell_.phase == "destroy") {
      enter();
      pcoll_allreduce_t* h = handle_;
      handle_ = nullptr;  // freed whatever destroy returns
      if (const int rc = pcoll_allreduce_destroy(h); rc != PCOLL_SUCCESS) return failed("pcoll_allreduce_destroy", rc);
      for (;;)
        if (const int rc = pcoll_barrier(comm_); rc != PCOLL_SUCCESS) return failed("pcoll_barrier", rc);
    }
    // Rounds until the failure reaches this rank (a cap, in case it never does).
    const auto give_up = Clock::now() + milliseconds(6 * cell_.timeout_ms + 10000);
    while (Clock::now() < give_up) {
      if (const int rc = round(); rc != PCOLL_SUCCESS) return failed(round_call(), rc);
      std::this_thread::sleep_for(milliseconds(1));
    }
    std::printf("RESULT rank=%d call=none rc=0 named=-1 ms=%.0f since=%lld at=%lld later=0 msg=no error\n", rank_,
                ms_since(since_), steady_ms(since_), steady_ms());
    std::fflush(stdout);
    cleanup();
    return 0;
  }

 private:

  // The start of the phase under test: the victim faults, the busy survivors compute.
  void enter() {
    if (rank_ == victim_ && cell_.phase == "init") {
      // The fault happened inside pcoll_init, at connect (PCOLL_FAULT on=connect).
    } else if (rank_ == victim_) {
      std::printf("FAULT t=%lld ms\n", steady_ms());
      std::fflush(stdout);
      if (cell_.fault == "kill") ::raise(SIGKILL);
      else if (cell_.fault == "stop") ::raise(SIGSTOP);
      else ::raise(SIGUSR1);  // arms the fault-injection transport's rule
      // Come to the call last: the others already wait in it, and the victim's engine has
      // heard from them before its own first operation fails (errors found after the
      // waiting is over take another path than errors found while waiting).
      std::this_thread::sleep_for(milliseconds(100));
    } else if (cell_.survivors == "compute" && rank_ != 0) {
      std::this_thread::sleep_for(milliseconds(2 * cell_.timeout_ms));
    }
    since_ = Clock::now();
  }

  bool polling() const { return cell_.survivors == "test" && cell_.round_phase(); }
  const char* round_call() const { return polling() ? "pcoll_allreduce_test" : "pcoll_allreduce_run"; }

  // One round, driven as the cell says; the status of the call that failed, if any.
  int round() {
    if (polling()) {
      if (const int rc = pcoll_allreduce_start(handle_, send_.data(), recv_.data()); rc != PCOLL_SUCCESS) return rc;
      for (int done = 0; !done;)
        if (const int rc = pcoll_allreduce_test(handle_, &done, nullptr); rc != PCOLL_SUCCESS) return rc;
      return PCOLL_SUCCESS;
    }
    return pcoll_allreduce_run(handle_, send_.data(), recv_.data(), nullptr);
  }

  // Reports the first error, checks that the next call fails too, cleans up.
  int failed(const char* call, int rc) {
    const double ms = ms_since(since_);
    const long long at = steady_ms();
    std::string message = pcoll_last_error();
    for (auto& c : message)
      if (c == '\n') c = ' ';
    int later = -1;  // no communicator to ask
    std::string failed = "-";  // the ranks the communicator lists as failed, after the next call
    if (comm_ != nullptr) {
      const auto asked = Clock::now();
      later = pcoll_barrier(comm_);
      if (later != PCOLL_SUCCESS && ms_since(asked) > 1000) later = -2;  // an error, but not at once
      std::vector<int> ranks(static_cast<size_t>(cell_.ranks));
      int n = 0;
      if (pcoll_comm_failed_ranks(comm_, ranks.data(), cell_.ranks, &n) != PCOLL_SUCCESS) n = 0;
      failed.clear();
      for (int i = 0; i < n; ++i) {
        if (i > 0) failed += ',';
        failed += std::to_string(ranks[static_cast<size_t>(i)]);
      }
    }
    std::printf("RESULT rank=%d call=%s rc=%d named=%d ms=%.0f since=%lld at=%lld later=%d failed=%s msg=%s\n", rank_,
                call, rc, named_rank(message), ms, steady_ms(since_), at, later, failed.c_str(), message.c_str());
    std::fflush(stdout);
    if (cell_.resume && comm_ != nullptr) shrink_and_resume();
    cleanup();
    return 0;
  }

  // --resume: shrink, resume (or create again), run to kLastRound, flush; one SHRUNK line.
  static constexpr uint64_t kLastRound = 40;
  static constexpr uint64_t kDigestFrom = 30;  // rounds every survivor collects
  void shrink_and_resume() {
    const auto began = Clock::now();
    pcoll_comm_t* survivors = nullptr;
    int rc = PCOLL_ERR_PEER_FAILED;
    const char* call = "pcoll_comm_shrink";
    // A shrink that a second failure interrupts may be made again (pcoll.h).
    for (int attempt = 0; attempt < 3 && rc == PCOLL_ERR_PEER_FAILED; ++attempt) rc = pcoll_comm_shrink(comm_, &survivors);
    const double shrink_ms = ms_since(began);
    pcoll_allreduce_t* resumed = nullptr;
    // A create or destroy that the failure interrupted may have completed on some ranks and
    // not on others: the survivors find out (a MIN round) and, unless every one holds the
    // handle, create it again.
    if (rc == PCOLL_SUCCESS) {
      call = "the survivors' vote on the handle";
      int32_t have = handle_ != nullptr ? 1 : 0, all = 0;
      pcoll_allreduce_t* vote = nullptr;
      rc = pcoll_allreduce_create(survivors, 1, PCOLL_INT32, PCOLL_OP_MIN, PCOLL_MODE_SYNC, nullptr, &vote);
      if (rc == PCOLL_SUCCESS) rc = pcoll_allreduce_run(vote, &have, &all, nullptr);
      if (vote != nullptr) pcoll_allreduce_destroy(vote);
      if (rc == PCOLL_SUCCESS && all == 0 && handle_ != nullptr) {
        pcoll_allreduce_destroy(handle_);  // on the failed communicator: freed, its error returned
        handle_ = nullptr;
      }
    }
    if (rc == PCOLL_SUCCESS && handle_ != nullptr) {
      int delivered = 0;
      call = "pcoll_allreduce_resume";
      rc = pcoll_allreduce_resume(handle_, survivors, recv_.data(), &delivered, nullptr, &resumed);
      if (rc == PCOLL_SUCCESS) handle_ = nullptr;  // freed by resume
    } else if (rc == PCOLL_SUCCESS) {
      // Create failed, or destroy freed the handle: created again on the survivors.
      call = "pcoll_allreduce_create";
      rc = pcoll_allreduce_create(survivors, cell_.count, PCOLL_FLOAT32, PCOLL_OP_SUM, mode_, &opts_, &resumed);
    }
    double first_ms = -1;
    uint64_t digest = 1469598103934665603ULL;
    for (bool done = false; rc == PCOLL_SUCCESS && !done;) {
      pcoll_round_info_t info;
      call = "pcoll_allreduce_run";
      rc = pcoll_allreduce_run(resumed, send_.data(), recv_.data(), &info);
      if (rc != PCOLL_SUCCESS) break;
      if (first_ms < 0) first_ms = ms_since(began);
      done = info.round + 1 >= kLastRound;
      if (done) {
        call = "pcoll_allreduce_flush";
        rc = pcoll_allreduce_flush(resumed, recv_.data(), &info);
      }
      if (info.round < kDigestFrom) continue;
      for (const float x : recv_) {
        uint32_t bits = 0;
        std::memcpy(&bits, &x, sizeof bits);
        digest = (digest ^ bits) * 1099511628211ULL;
      }
    }
    std::string message = rc == PCOLL_SUCCESS ? "ok" : pcoll_last_error();
    for (auto& c : message)
      if (c == '\n') c = ' ';
    std::printf("SHRUNK rank=%d size=%d rc=%d shrink_ms=%.0f first_ms=%.0f digest=%llx call=%s msg=%s\n", rank_,
                survivors != nullptr ? pcoll_comm_size(survivors) : 0, rc, shrink_ms, first_ms,
                static_cast<unsigned long long>(digest), call, message.c_str());
    std::fflush(stdout);
    if (resumed != nullptr) pcoll_allreduce_destroy(resumed);
    if (survivors != nullptr) pcoll_finalize(survivors);
  }

  void cleanup() {
    const auto started = Clock::now();
    if (handle_ != nullptr) pcoll_allreduce_destroy(handle_);
    handle_ = nullptr;
    if (comm_ != nullptr) pcoll_finalize(comm_);
    comm_ = nullptr;
    std::printf("CLEANUP rank=%d ms=%.0f\n", rank_, ms_since(started));
    std::fflush(stdout);
  }

  const Cell& cell_;
  int rank_ = 0;
  int victim_ = 0;
  pcoll_comm_t* comm_ = nullptr;
  pcoll_allreduce_t* handle_ = nullptr;
  pcoll_mode_t mode_ = PCOLL_MODE_SOLO;
  pcoll_allreduce_opts_t opts_{};
  std::vector<float> send_;
  std::vector<float> recv_;
  Clock::time_point since_;
};

// --- The cell: launch, collect, judge ----------------------------------------------------

std::optional<std::string> not_applicable(const Cell& cell) {
  if (cell.survivors == "test" && !cell.round_phase())
    return "the API has no polling form of " + cell.phase + " (test covers the rounds)";
  if (cell.phase == "init" && (cell.fault == "access" || cell.fault == "eagain"))
    return "no transport operation happens during init (the first is create's agreement: see the create cell)";
#if defined(__SANITIZE_ADDRESS__)
  if (cell.provider.rfind("ucx", 0) == 0 || cell.provider == "default")
    return "UCX is kept out of AddressSanitizer runs (its memory hooks and ASan do not mix)";
#endif
  return std::nullopt;
}

// PCOLL_FAULT for the victim, or "" when the fault needs no fault-injection transport.
std::string fault_spec(const Cell& cell) {
  const std::string victim = std::to_string(cell.ranks - 1);
  if (cell.phase == "init") return cell.fault + ",rank=" + victim + ",on=connect";
  if (cell.signal_fault()) return "";
  std::string spec = cell.fault + ",rank=" + victim + ",on=sigusr1";
  if (cell.fault == "eagain") spec += ",ms=" + std::to_string(10 * cell.timeout_ms);
  return spec;
}

struct Report {
  std::optional<int> exit;  // nullopt: still running at the deadline (a hang)
  bool has_result = false;
  std::string call, msg;
  int rc = 0, named = -1, later = 0;
  std::string failed;  // pcoll_comm_failed_ranks after the error, comma-separated; "-": no communicator
  double ms = 0;
  long long since = 0, at = 0;  // steady ms: started waiting, got the error
  std::optional<long long> fault_at;  // the victim's: when it faulted
  bool cleaned = false;
  double cleanup_ms = 0;
  // --resume: the SHRUNK line.
  bool shrunk_line = false;
  int shrink_rc = -1, shrunk_size = 0;
  double shrink_ms = 0, first_ms = 0;
  std::string shrunk_digest, shrink_call, shrink_msg;
  std::string err_tail;
};

// Where a hung rank's stacks go (--stacks DIR): gdb's backtrace of every thread.
std::string g_stacks_dir;

void dump_stacks(const test::Process& process, const std::string& label, int rank) {
  if (g_stacks_dir.empty()) return;
  std::string file = g_stacks_dir + "/" + label + " rank" + std::to_string(rank) + ".txt";
  for (auto& c : file)
    if (c == ' ' || c == ':') c = '_';
  const std::string command = "gdb -p " + std::to_string(process.pid()) +
                              " -batch -ex 'thread apply all bt' > '" + file + "' 2>&1";
  if (std::system(command.c_str()) == 0) std::printf("        stacks of rank %d: %s\n", rank, file.c_str());
}

// libfabric's shm names a rank's shared memory after its pid (/dev/shm/<pid>:...) and a
// killed rank cannot remove it: a later process that gets the same pid then fails in
// fi_enable (EBUSY). Remove what the killed ranks of a cell left.
void remove_shm_of(pid_t pid) {
  const std::string prefix = std::to_string(pid) + ":";
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", error))
    if (entry.path().filename().string().rfind(prefix, 0) == 0) std::filesystem::remove(entry.path(), error);
}

Report parse(test::Process& process, std::optional<int> exit) {
  Report r;
  r.exit = exit;
  std::istringstream out(process.out());
  for (std::string line; std::getline(out, line);) {
    if (line.rfind("RESULT ", 0) == 0) {
      r.has_result = true;
      std::smatch m;
      if (std::regex_search(line, m, std::regex("call=(\\S+) rc=(-?\\d+) named=(-?\\d+) ms=(\\d+) since=(\\d+) "
                                                "at=(\\d+) later=(-?\\d+) failed=(\\S*) msg=(.*)"))) {
        r.call = m[1];
        r.rc = std::stoi(m[2]);
        r.named = std::stoi(m[3]);
        r.ms = std::stod(m[4]);
        r.since = std::stoll(m[5]);
        r.at = std::stoll(m[6]);
        r.later = std::stoi(m[7]);
        r.failed = m[8];
        r.msg = m[9];
      }
    } else if (line.rfind("SHRUNK ", 0) == 0) {
      r.shrunk_line = true;
      std::smatch m;
      if (std::regex_search(line, m, std::regex("size=(\\d+) rc=(-?\\d+) shrink_ms=(\\d+) first_ms=(-?\\d+) "
                                                "digest=(\\S+) call=(\\S+) msg=(.*)"))) {
        r.shrunk_size = std::stoi(m[1]);
        r.shrink_rc = std::stoi(m[2]);
        r.shrink_ms = std::stod(m[3]);
        r.first_ms = std::stod(m[4]);
        r.shrunk_digest = m[5];
        r.shrink_call = m[6];
        r.shrink_msg = m[7];
      }
    } else if (line.rfind("FAULT t=", 0) == 0) {
      r.fault_at = std::stoll(line.substr(8));
    } else if (line.rfind("CLEANUP ", 0) == 0) {
      r.cleaned = true;
      std::smatch m;
      if (std::regex_search(line, m, std::regex("ms=(\\d+)"))) r.cleanup_ms = std::stod(m[1]);
    }
  }
  const std::string err = process.err();
  // A fault the transport injected by itself (at connect) says when in its log line.
  std::smatch when;
  if (!r.fault_at && std::regex_search(err, when, std::regex("injected by PCOLL_FAULT[^\\n]*t=(\\d+) ms")))
    r.fault_at = std::stoll(when[1]);
  // What a reader needs: the messages, not the backtraces UCX prints after a signal.
  std::string messages;
  std::istringstream lines(err);
  static const std::regex frame("^\\s*(\\d+\\s+)?/|^=+|^\\s*$");
  for (std::string line; std::getline(lines, line);)
    if (!std::regex_search(line, frame)) messages += line + "\n";
  r.err_tail = messages.size() > 1500 ? messages.substr(messages.size() - 1500) : messages;
  return r;
}

int run_cell(const Cell& cell, const std::string& self, bool verbose) {
  const std::string label = cell.name();
  if (const auto reason = not_applicable(cell)) {
    std::printf("N/A   %-40s %s\n", label.c_str(), reason->c_str());
    return 77;
  }
  const std::string spec = fault_spec(cell);
  std::string provider = cell.provider == "default" ? "" : cell.provider;
  if (!spec.empty()) provider = "fault+" + provider;
  const std::string root = "127.0.0.1:" + std::to_string(test::free_port());
  std::vector<std::unique_ptr<test::Process>> ranks;
  for (int r = 0; r < cell.ranks; ++r) {
    test::Env env = {{"PCOLL_RANK", std::to_string(r)},
                     {"PCOLL_SIZE", std::to_string(cell.ranks)},
                     {"PCOLL_ROOT", root},
                     {"PCOLL_JOB_KEY", "fault-matrix-key"},
                     {"PCOLL_BOOTSTRAP", "store"},
                     {"PCOLL_TIMEOUT_MS", std::to_string(cell.timeout_ms)},
                     {"FI_TCP_IFACE", "lo"},
                     {"UCX_NET_DEVICES", "lo"}};
    if (!provider.empty()) env["PCOLL_PROVIDER"] = provider;
    if (!spec.empty()) env["PCOLL_FAULT"] = spec;
    ranks.push_back(std::make_unique<test::Process>(
        std::vector<std::string>{self, "--child", cell.fault, cell.phase, cell.survivors, cell.provider,
                                 std::to_string(cell.ranks), std::to_string(cell.timeout_ms),
                                 std::to_string(cell.count), cell.resume ? "resume" : "-"},
        env));
  }
  const int victim = cell.ranks - 1;
  // Every survivor must be done (error reported, cleaned up, exited) by then: setup, the
  // warm-up, the computing survivors' 2 x timeout, the bound, and cleanup.
  // --resume adds the shrink (up to twice the timeout per silent rank, three tries) and 40 rounds.
  const auto deadline = Clock::now() + milliseconds(5 * cell.timeout_ms + 20000 + (cell.resume ? 6 * cell.timeout_ms + 10000 : 0));
  std::vector<Report> reports(static_cast<size_t>(cell.ranks));
  for (int r = 0; r < cell.ranks; ++r) {
    if (r == victim && cell.signal_fault()) continue;
    const auto left = std::max<Clock::duration>(Clock::duration::zero(), deadline - Clock::now());
    const auto exit = ranks[static_cast<size_t>(r)]->wait_for(std::chrono::duration_cast<milliseconds>(left));
    if (!exit) dump_stacks(*ranks[static_cast<size_t>(r)], label, r);
    reports[static_cast<size_t>(r)] = parse(*ranks[static_cast<size_t>(r)], exit);
  }
  {
    // The victim: killed, still stopped, or (engine faults) exited on its own.
    auto& process = *ranks[static_cast<size_t>(victim)];
    const auto exit = process.wait_for(cell.fault == "stop" ? milliseconds(0) : milliseconds(2000));
    reports[static_cast<size_t>(victim)] = parse(process, exit);
  }

  std::vector<std::string> problems;
  const auto limit = static_cast<double>(cell.timeout_ms + 2000);
  const Report& v = reports[static_cast<size_t>(victim)];
  if (cell.fault == "kill" && v.exit != 128 + SIGKILL)
    problems.push_back("victim was not killed (exit " + (v.exit ? std::to_string(*v.exit) : "none") + ")");
  if (cell.fault == "stop" && v.exit)
    problems.push_back("stopped victim exited (" + std::to_string(*v.exit) + ")");
  int culprit = victim;
  if (!cell.signal_fault() && cell.fault != "silent" && cell.phase == "init") {
    // A connection reset at connect fails the victim's pcoll_init: it leaves the job, and
    // the others' setup fails naming it.
    if (!v.exit || *v.exit != 0) problems.push_back("victim hung or crashed (exit " + (v.exit ? std::to_string(*v.exit) : "none: hang") + ")");
    if (v.call != "pcoll_init") problems.push_back("victim's pcoll_init did not fail: '" + v.msg + "'");
  } else if (!cell.signal_fault() && cell.fault != "silent") {
    // An injected provider error names the peer of the failed operation.
    if (!v.exit || *v.exit != 0) problems.push_back("victim hung or crashed (exit " + (v.exit ? std::to_string(*v.exit) : "none: hang") + ")");
    if (!v.has_result || v.named < 0 || v.named == victim)
      problems.push_back("victim's error does not name the peer of the failed operation: '" + v.msg + "'");
    else
      culprit = v.named;
  } else if (cell.fault == "silent" && (!v.exit || *v.exit != 0)) {
    problems.push_back("silent victim hung or crashed (exit " + (v.exit ? std::to_string(*v.exit) : "none: hang") + ")");
  }
  double worst = 0;
  for (int r = 0; r < cell.ranks; ++r) {
    if (r == victim) continue;
    const Report& s = reports[static_cast<size_t>(r)];
    const std::string who = "rank " + std::to_string(r) + ": ";
    if (!s.has_result) {
      problems.push_back(who + (s.exit ? "exited " + std::to_string(*s.exit) + " without an error"
                                       : "no error before the deadline (hang)"));
      continue;
    }
    // Waiting time: from the fault, or from the moment this survivor came to wait (a
    // survivor that computed until after the fault must hear of it at once then).
    const double waited = v.fault_at ? static_cast<double>(s.at - std::max(s.since, *v.fault_at)) : s.ms;
    worst = std::max(worst, waited);
    if (s.call == "none") problems.push_back(who + "never got an error");
    else if (s.rc != PCOLL_ERR_PEER_FAILED && s.rc != PCOLL_ERR_TIMEOUT && s.rc != PCOLL_ERR_TRANSPORT &&
             s.rc != PCOLL_ERR_BOOTSTRAP)
      problems.push_back(who + s.call + " failed with " + pcoll_strerror(s.rc) + ", not a peer failure: '" + s.msg + "'");
    if (s.named != culprit && !(r == culprit && s.named >= 0))
      problems.push_back(who + s.call + " names " + (s.named < 0 ? "no rank" : "rank " + std::to_string(s.named)) +
                         ", expected rank " + std::to_string(culprit) + ": '" + s.msg + "'");
    if (waited > limit)
      problems.push_back(who + s.call + " failed " + std::to_string(static_cast<int>(waited)) + " ms after the fault (limit " +
                         std::to_string(static_cast<int>(limit)) + ")");
    if (s.failed != "-" && r != culprit && ("," + s.failed + ",").find("," + std::to_string(culprit) + ",") == std::string::npos)
      problems.push_back(who + "pcoll_comm_failed_ranks lists '" + s.failed + "', without rank " + std::to_string(culprit));
    if (s.later == PCOLL_SUCCESS) problems.push_back(who + "the call after the error succeeded");
    if (s.later == -2) problems.push_back(who + "the call after the error took more than 1 s");
    if (!s.exit) problems.push_back(who + "hung in cleanup (destroy / finalize) after its error");
    else if (*s.exit != 0) problems.push_back(who + "crashed or failed in cleanup (exit " + std::to_string(*s.exit) + ")");
  }
  double worst_resume = 0;
  if (cell.resume && cell.phase != "init") {
    // Every rank but the victim and the culprit comes out of shrink and resume; the victim or
    // the culprit of a broken link may too, or be excluded (PCOLL_ERR_PEER_FAILED). All that
    // come out agree on the size and on the results.
    int members = 0, size = -1;
    std::string digest;
    for (int r = 0; r < cell.ranks; ++r) {
      const Report& s = reports[static_cast<size_t>(r)];
      const std::string who = "rank " + std::to_string(r) + ": ";
      const bool must = r != victim && r != culprit;
      if (!s.has_result || (!must && (cell.signal_fault() || cell.fault == "silent"))) continue;
      if (!s.shrunk_line) {
        problems.push_back(who + "no shrink-and-resume outcome");
        continue;
      }
      if (s.shrink_rc != PCOLL_SUCCESS) {
        if (must || s.shrink_rc != PCOLL_ERR_PEER_FAILED)
          problems.push_back(who + s.shrink_call + " failed with " + pcoll_strerror(s.shrink_rc) + ": '" + s.shrink_msg + "'");
        continue;
      }
      ++members;
      worst_resume = std::max(worst_resume, s.first_ms);
      if (size < 0) size = s.shrunk_size;
      if (digest.empty()) digest = s.shrunk_digest;
      if (s.shrunk_size != size) problems.push_back(who + "shrank to " + std::to_string(s.shrunk_size) + " ranks, another to " + std::to_string(size));
      if (s.shrunk_digest != digest) problems.push_back(who + "results after resume differ from another survivor's");
    }
    if (members > 0 && members != size)
      problems.push_back(std::to_string(members) + " ranks came out of shrink and resume, on a communicator of " + std::to_string(size));
  }
  // Every rank is gone now (a stopped or hung one is killed); tidy after the killed ones.
  std::vector<pid_t> killed;
  for (int r = 0; r < cell.ranks; ++r)
    if (const auto& rep = reports[static_cast<size_t>(r)]; !rep.exit || *rep.exit >= 128)
      killed.push_back(ranks[static_cast<size_t>(r)]->pid());
  ranks.clear();
  for (const pid_t pid : killed) remove_shm_of(pid);

  if (problems.empty()) {
    if (cell.resume && cell.phase != "init")
      std::printf("PASS  %-40s worst %5.0f ms (limit %.0f), resumed %5.0f ms after\n", label.c_str(), worst, limit,
                  worst_resume);
    else
      std::printf("PASS  %-40s worst %5.0f ms (limit %.0f)\n", label.c_str(), worst, limit);
    return 0;
  }
  std::printf("FAIL  %-40s %s\n", label.c_str(), problems.front().c_str());
  for (size_t i = 1; i < problems.size(); ++i) std::printf("        %s\n", problems[i].c_str());
  for (int r = 0; verbose && r < cell.ranks; ++r)
    if (const auto& rep = reports[static_cast<size_t>(r)]; !rep.err_tail.empty())
      std::printf("        --- rank %d stderr (end) ---\n%s\n", r, rep.err_tail.c_str());
  return 1;
}

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "fault_matrix: %s\n"
               "usage: fault_matrix --fault kill|stop|silent|reset|access|eagain\n"
               "                    --phase init|create|sync|solo|majority|flush|destroy\n"
               "                    --survivors run|test|compute\n"
               "                    [--provider ofi:shm|ofi:tcp|ucx:shm|ucx:tcp|default] [--ranks P]\n"
               "                    [--timeout-ms T] [--count N] [--resume] [--repeat N] [--verbose] [--stacks DIR]\n",
               problem.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 10 && std::strcmp(argv[1], "--child") == 0) {
    Cell cell{argv[2], argv[3], argv[4], argv[5], std::atoi(argv[6]), std::atoi(argv[7]),
              static_cast<size_t>(std::strtoull(argv[8], nullptr, 10)), std::strcmp(argv[9], "resume") == 0};
    return Rank(cell).run();
  }
  Cell cell;
  bool verbose = false;
  int repeat = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--fault") cell.fault = value();
    else if (arg == "--phase") cell.phase = value();
    else if (arg == "--survivors") cell.survivors = value();
    else if (arg == "--provider") cell.provider = value();
    else if (arg == "--ranks") cell.ranks = std::atoi(value().c_str());
    else if (arg == "--timeout-ms") cell.timeout_ms = std::atoi(value().c_str());
    else if (arg == "--count") cell.count = static_cast<size_t>(std::strtoull(value().c_str(), nullptr, 10));
    else if (arg == "--repeat") repeat = std::atoi(value().c_str());
    else if (arg == "--verbose") verbose = true;
    else if (arg == "--resume") cell.resume = true;
    else if (arg == "--stacks") g_stacks_dir = value();
    else usage("unknown argument '" + arg + "'");
  }
  if (!one_of(cell.fault, kFaults)) usage("--fault '" + cell.fault + "' is not one of the faults");
  if (!one_of(cell.phase, kPhases)) usage("--phase '" + cell.phase + "' is not one of the phases");
  if (!one_of(cell.survivors, kSurvivors)) usage("--survivors '" + cell.survivors + "' is not run, test or compute");
  if (!one_of(cell.provider, {"ofi:shm", "ofi:tcp", "ucx:shm", "ucx:tcp", "default"}))
    usage("--provider '" + cell.provider + "' is not one the matrix covers");
  if (cell.ranks < 3 || cell.ranks > 16) usage("--ranks must be 3 to 16 (a victim and two survivors at least)");
  if (cell.timeout_ms < 200 || cell.timeout_ms > 60000) usage("--timeout-ms must be 200 to 60000");
  if (repeat < 1 || repeat > 1000) usage("--repeat must be 1 to 1000");
  if (cell.count < 1 || cell.count > (size_t{1} << 26)) usage("--count must be 1 to 2^26 elements");
  // A cell that fails intermittently (a race with the victim's death) is run several times:
  // the first failed run decides.
  for (int run = 1; run <= repeat; ++run) {
    const int status = run_cell(cell, argv[0], verbose);
    if (status != 0) {
      if (repeat > 1) std::fprintf(stderr, "fault_matrix: run %d of %d failed\n", run, repeat);
      return status;
    }
  }
  return 0;
}
