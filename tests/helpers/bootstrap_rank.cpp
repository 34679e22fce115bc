// A rank program for the bootstrap and pcollrun tests (test_bootstrap.cpp, test_pcollrun.cpp):
// each mode does one thing a test checks from outside, and reports through its exit code.
//
//   gather ROUNDS          allgather blobs of several sizes ROUNDS times, verify, barrier
//   gather-late MS ROUNDS  sleep MS ms before joining, then gather (a test floods the store first)
//   barrier-late MS        three barriers, rank 0 entering each MS ms late: every other rank
//                          must be held at least MS/2 ms in each (exit 3 if not)
//   exit-if-rank R CODE    rank R exits with CODE; the others sleep (must be killed)
//   signal-if-rank R SIG   rank R kills itself with SIG; the others sleep
//   wait-term              print "ready", wait for SIGTERM, print "got SIGTERM", exit 0
//   partial-lines LINES    write each line in three pieces with pauses in between
//   echo                   one line to stdout and one to stderr
//
// PCOLL_TEST_ABSENT_RANK=r makes rank r sleep instead of joining (a rank that never shows up).
// Exit codes: 0 ok, 10 + Errc on a pcoll::Error, 2 bad arguments, 3 wrong data.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <api/settings_catalog.hpp>
#include <bootstrap/bootstrap.hpp>
#include <support/error.hpp>
#include <support/support_settings.hpp>

namespace {

using pcoll::bootstrap::Blob;

// Sizes vary by rank and round so that no two blobs in one allgather need the same length.
size_t blob_bytes(int rank, int round) {
  static const size_t sizes[] = {0, 1, 7, 64, 4096, 65537, 1 << 20};
  return sizes[static_cast<size_t>(rank + round) % std::size(sizes)] + static_cast<size_t>(rank);
}

std::byte pattern(int rank, int round, size_t i) {
  return static_cast<std::byte>((static_cast<size_t>(rank) * 131 + static_cast<size_t>(round) * 31 + i * 7) & 0xff);
}

Blob make_blob(int rank, int round) {
  Blob blob(blob_bytes(rank, round));
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = pattern(rank, round, i);
  return blob;
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

int env_rank() { return std::atoi(pcoll::SupportSettings::raw("PCOLL_RANK").value_or("0").c_str()); }

int gather(int rounds) {
  if (const auto absent = pcoll::TestSettings::raw("PCOLL_TEST_ABSENT_RANK"); absent && std::atoi(absent->c_str()) == env_rank()) {
    sleep_ms(20000);  // never joins; pcollrun or the test kills it first
    return 0;
  }
  auto boot = pcoll::bootstrap::from_environment();
  const int me = boot->rank();
  const int n = boot->size();
  for (int round = 0; round < rounds; ++round) {
    const auto all = boot->allgather(make_blob(me, round));
    if (static_cast<int>(all.size()) != n) {
      std::fprintf(stderr, "rank %d: %zu blobs for %d ranks\n", me, all.size(), n);
      return 3;
    }
    for (int r = 0; r < n; ++r) {
      if (all[static_cast<size_t>(r)] != make_blob(r, round)) {
        std::fprintf(stderr, "rank %d: round %d: wrong blob from rank %d (%zu bytes)\n", me, round, r,
                     all[static_cast<size_t>(r)].size());
        return 3;
      }
    }
    boot->barrier();
  }
  std::printf("rank %d of %d ok (%s)\n", me, n, boot->name().c_str());
  std::fflush(stdout);
  return 0;
}

// A barrier must hold every rank until the last one arrives; a launcher whose fence lets
// ranks through early breaks handle destruction (memory freed while a peer still imports it).
int barrier_late(int late_ms) {
  auto boot = pcoll::bootstrap::from_environment();
  const int me = boot->rank();
  boot->barrier();  // everyone up
  for (int round = 0; round < 3; ++round) {
    if (me == 0) sleep_ms(late_ms);
    const auto start = std::chrono::steady_clock::now();
    boot->barrier();
    const auto held = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    if (me != 0 && held.count() < late_ms / 2) {
      std::fprintf(stderr, "rank %d: barrier %d returned after %lld ms although rank 0 came %d ms late (%s)\n",
                   me, round, static_cast<long long>(held.count()), late_ms, boot->name().c_str());
      return 3;
    }
  }
  std::printf("rank %d of %d: barriers held (%s)\n", me, boot->size(), boot->name().c_str());
  std::fflush(stdout);
  return 0;
}

volatile sig_atomic_t g_got_term = 0;  // set by the SIGTERM handler of wait-term

int wait_term() {
  struct sigaction sa{};
  sa.sa_handler = [](int) { g_got_term = 1; };
  sigaction(SIGTERM, &sa, nullptr);
  std::printf("rank %d ready\n", env_rank());
  std::fflush(stdout);
  for (int i = 0; i < 3000 && !g_got_term; ++i) sleep_ms(10);
  if (!g_got_term) return 4;
  std::printf("rank %d got SIGTERM\n", env_rank());
  std::fflush(stdout);
  return 0;
}

void write_piece(const std::string& text) {
  [[maybe_unused]] const ssize_t n = ::write(1, text.data(), text.size());
}

int partial_lines(int lines) {
  const std::string me = std::to_string(env_rank());
  for (int i = 0; i < lines; ++i) {
    write_piece("rank" + me + "-");
    sleep_ms(3);
    write_piece("line" + std::to_string(i) + "-");
    sleep_ms(3);
    write_piece("end\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fprintf(stderr, "usage: bootstrap_rank MODE [ARGS]\n");
    return 2;
  }
  try {
    const std::string& mode = args[0];
    if (mode == "gather" && args.size() == 2) return gather(std::atoi(args[1].c_str()));
    if (mode == "gather-late" && args.size() == 3) {
      sleep_ms(std::atoi(args[1].c_str()));
      return gather(std::atoi(args[2].c_str()));
    }
    if (mode == "barrier-late" && args.size() == 2) return barrier_late(std::atoi(args[1].c_str()));
    if (mode == "exit-if-rank" && args.size() == 3) {
      if (env_rank() == std::atoi(args[1].c_str())) {
        sleep_ms(100);
        return std::atoi(args[2].c_str());
      }
      sleep_ms(20000);
      return 0;
    }
    if (mode == "signal-if-rank" && args.size() == 3) {
      if (env_rank() == std::atoi(args[1].c_str())) {
        sleep_ms(100);
        ::raise(std::atoi(args[2].c_str()));
      }
      sleep_ms(20000);
      return 0;
    }
    if (mode == "wait-term") return wait_term();
    if (mode == "partial-lines" && args.size() == 2) return partial_lines(std::atoi(args[1].c_str()));
    if (mode == "echo") {
      std::printf("hello from rank %d\n", env_rank());
      std::fprintf(stderr, "warning from rank %d\n", env_rank());
      return 0;
    }
  } catch (const pcoll::Error& e) {
    std::fprintf(stderr, "rank %d error (%s): %s\n", env_rank(), pcoll::errc_name(e.code()), e.what());
    return 10 + static_cast<int>(e.code());
  }
  std::fprintf(stderr, "bootstrap_rank: bad arguments\n");
  return 2;
}
