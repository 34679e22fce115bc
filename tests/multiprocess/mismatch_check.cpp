// Collective calls that do not match (docs/design.md, "Mismatched calls"): each rank makes
// the call it is given (`--rank0 destroy --rank1 run`), on a communicator with one handle
// created by every rank beforehand. Calls that differ must fail with PCOLL_ERR_MISMATCH on
// every rank, naming both calls, within the timeout; equal calls must succeed. A rank
// that gets anything else exits non-zero (pcollrun then stops the job); an alarm turns a
// hang into a failure of its own.
//
//   pcollrun -n 2 mismatch_check --rank0 barrier --rank1 create [--mode solo] [--delay-ms 300]
//
// The calls: create (a second handle), destroy (the handle), barrier, finalize, flush and
// run (a round of the handle). --delay-ms holds back `run` and `flush` that long, so that
// in solo mode the other ranks are inside their calls when the round starts; with
// --late-rank R it holds back rank R's call instead, whatever it is (a rank that makes its
// call after the others found the mismatch must get it too).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <pcoll/pcoll.h>

namespace {

constexpr size_t kCount = 16;
constexpr unsigned kAlarmSeconds = 30;

const char* const kCalls[] = {"create", "destroy", "barrier", "finalize", "flush", "run"};

struct Options {
  std::vector<std::string> calls;  // by rank
  pcoll_mode_t mode = PCOLL_MODE_SYNC;
  int delay_ms = 0;
  int late_rank = -1;  // the rank held back; -1: every run and flush
};

bool known_call(const std::string& call) {
  for (const char* known : kCalls)
    if (call == known) return true;
  return false;
}

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "mismatch_check: %s\nusage: mismatch_check --rank0 CALL --rank1 CALL [--rankN CALL ...] "
               "[--mode sync|solo|majority] [--delay-ms MS]\n  CALL: create destroy barrier finalize flush run\n",
               problem.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) usage("option " + arg + " needs a value");
    const std::string value = argv[++i];
    if (arg.rfind("--rank", 0) == 0) {
      const int rank = std::atoi(arg.c_str() + 6);
      if (rank < 0 || rank > 64 || arg.size() == 6) usage("bad option " + arg);
      if (!known_call(value)) usage("unknown call " + value);
      if (options.calls.size() <= static_cast<size_t>(rank)) options.calls.resize(static_cast<size_t>(rank) + 1);
      options.calls[static_cast<size_t>(rank)] = value;
    } else if (arg == "--mode") {
      if (value == "sync") options.mode = PCOLL_MODE_SYNC;
      else if (value == "solo") options.mode = PCOLL_MODE_SOLO;
      else if (value == "majority") options.mode = PCOLL_MODE_MAJORITY;
      else usage("unknown mode " + value);
    } else if (arg == "--late-rank") {
      options.late_rank = std::atoi(value.c_str());
    } else if (arg == "--delay-ms") {
      options.delay_ms = std::atoi(value.c_str());
    } else {
      usage("unknown option " + arg);
    }
  }
  return options;
}

// Makes `call`; the communicator is gone afterwards when it was finalize.
int make_call(const std::string& call, pcoll_comm_t*& comm, pcoll_allreduce_t*& handle, const Options& options) {
  std::vector<float> send(kCount, 1.0f), recv(kCount);
  const bool round = call == "flush" || call == "run";
  if (options.late_rank >= 0 ? options.late_rank == pcoll_comm_rank(comm) : round)
    std::this_thread::sleep_for(std::chrono::milliseconds(options.delay_ms));
  if (call == "create") {
    pcoll_allreduce_t* second = nullptr;
    const int rc = pcoll_allreduce_create(comm, kCount, PCOLL_FLOAT32, PCOLL_OP_SUM, options.mode, nullptr, &second);
    if (rc == PCOLL_SUCCESS) pcoll_allreduce_destroy(second);
    return rc;
  }
  if (call == "destroy") {
    const int rc = pcoll_allreduce_destroy(handle);
    handle = nullptr;
    return rc;
  }
  if (call == "barrier") return pcoll_barrier(comm);
  if (call == "finalize") {
    const int rc = pcoll_finalize(comm);
    comm = nullptr;
    return rc;
  }
  if (call == "flush") return pcoll_allreduce_flush(handle, recv.data(), nullptr);
  return pcoll_allreduce_run(handle, send.data(), recv.data(), nullptr);
}

// The error must name this rank's call and another rank's different one.
bool names_both_calls(const std::string& message, const std::string& mine, const Options& options) {
  if (message.find(mine) == std::string::npos) return false;
  for (const std::string& theirs : options.calls)
    if (theirs != mine && message.find(theirs) != std::string::npos) return true;
  return false;
}

int setup_failed(int rank) {
  std::fprintf(stderr, "mismatch_check rank %d: setup: %s\n", rank, pcoll_last_error());
  return 3;
}

// The mismatch reached this rank before its own call: the message must name two of the
// calls the ranks make.
int told_early(int rank, const std::string& message, pcoll_comm_t* comm, pcoll_allreduce_t* handle,
               const Options& options) {
  std::printf("mismatch_check rank %d: told before its call: %s\n", rank, message.c_str());
  std::fflush(stdout);
  bool named = false;
  for (const std::string& call : options.calls)
    named = named || (message.find(call) != std::string::npos && names_both_calls(message, call, options));
  pcoll_allreduce_destroy(handle);
  pcoll_finalize(comm);
  if (!named) std::fprintf(stderr, "mismatch_check rank %d: expected a message naming two calls\n", rank);
  return named ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  ::alarm(kAlarmSeconds);  // a hang fails here too, not only under the test's timeout
  pcoll_comm_t* comm = nullptr;
  if (pcoll_init(&comm) != PCOLL_SUCCESS) {
    std::fprintf(stderr, "mismatch_check: init: %s\n", pcoll_last_error());
    return 3;
  }
  const int rank = pcoll_comm_rank(comm);
  const int size = pcoll_comm_size(comm);
  if (options.calls.size() != static_cast<size_t>(size)) usage("give one call per rank (--rank0 .. --rankN)");
  for (const std::string& call : options.calls)
    if (call.empty()) usage("give one call per rank (--rank0 .. --rankN)");
  const std::string& mine = options.calls[static_cast<size_t>(rank)];
  bool all_equal = true;
  for (const std::string& call : options.calls) all_equal = all_equal && call == mine;
  pcoll_allreduce_t* handle = nullptr;
  if (pcoll_allreduce_create(comm, kCount, PCOLL_FLOAT32, PCOLL_OP_SUM, options.mode, nullptr, &handle) != PCOLL_SUCCESS)
    return setup_failed(rank);
  // A rank still in this barrier can already hear of the mismatch: a peer that left it
  // made its call, and a third rank found the mismatch against it (P=3).
  const int setup = pcoll_barrier(comm);
  if (setup == PCOLL_ERR_MISMATCH && !all_equal) return told_early(rank, pcoll_last_error(), comm, handle, options);
  if (setup != PCOLL_SUCCESS) return setup_failed(rank);

  const auto started = std::chrono::steady_clock::now();
  const int rc = make_call(mine, comm, handle, options);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  const std::string message = rc == PCOLL_SUCCESS ? "" : pcoll_last_error();
  std::printf("mismatch_check rank %d: %s -> %s after %.0f ms%s%s\n", rank, mine.c_str(), pcoll_strerror(rc), ms,
              message.empty() ? "" : ": ", message.c_str());
  std::fflush(stdout);

  bool ok = false;
  if (all_equal) ok = rc == PCOLL_SUCCESS;
  else ok = rc == PCOLL_ERR_MISMATCH && names_both_calls(message, mine, options);
  if (handle != nullptr) pcoll_allreduce_destroy(handle);
  if (comm != nullptr) pcoll_finalize(comm);
  if (!ok)
    std::fprintf(stderr, "mismatch_check rank %d: expected %s\n", rank,
                 all_equal ? "success" : "PCOLL_ERR_MISMATCH naming both calls");
  return ok ? 0 : 1;
}
