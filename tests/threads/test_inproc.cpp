// The in-process bootstrap and provider (lib/bootstrap/inproc_store.cpp,
// providers/inproc/), checked against their contracts, and several communicators in one
// process (ranks as threads) checked for process-wide state they must not share. The
// provider's cases use a few transports driven from one thread where the order of events
// must be exact, and threads where blocking and contention are the point.
#include <doctest/doctest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <bootstrap/inproc_store.hpp>
#include <pcoll/pcoll.h>
#include <registry/registry.hpp>
#include <support/error.hpp>
#include <support/log.hpp>
#include "thread_ranks.hpp"
#include <transport/transport.hpp>

using namespace std::chrono_literals;
using pcoll::Errc;
using pcoll::Error;
using pcoll::transport::LocalRegion;
using pcoll::transport::RemoteRegion;
using pcoll::transport::Transport;
using Clock = std::chrono::steady_clock;

namespace {

// `n` in-process transports connected to each other, rank i = element i.
std::vector<std::unique_ptr<Transport>> connected(int n, const std::string& selector = "inproc") {
  pcoll::transport::Options options;
  options.timeout = 2000ms;
  std::vector<std::unique_ptr<Transport>> transports;
  std::vector<pcoll::transport::Bytes> addresses;
  for (int r = 0; r < n; ++r) {
    transports.push_back(pcoll::providers::create(selector, options));
    addresses.push_back(transports.back()->address());
  }
  for (int r = 0; r < n; ++r) transports[r]->connect(r, addresses);
  return transports;
}

void fill(std::span<std::byte> bytes, unsigned seed) {
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::byte(static_cast<unsigned char>(seed + i * 7 + (i >> 8)));
}

bool all_zero(std::span<const std::byte> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; });
}

bool same(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

// The code and message of the pcoll::Error `call` throws (Errc::ok when it throws none).
template <typename Call>
std::pair<Errc, std::string> error_of(Call&& call) {
  try {
    call();
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  return {Errc::ok, ""};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Collects what the process writes to stderr (fd 2) between construction and finish().
class StderrCapture {
 public:
  StderrCapture() : file_(std::tmpfile()) {
    std::fflush(stderr);
    saved_ = ::dup(2);
    ::dup2(::fileno(file_), 2);
  }
  ~StderrCapture() { finish(); }
  std::string finish() {
    if (saved_ < 0) return text_;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
    std::rewind(file_);
    char buffer[4096];
    for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, file_)) > 0;) text_.append(buffer, n);
    std::fclose(file_);
    return text_;
  }

 private:
  FILE* file_;
  int saved_ = -1;
  std::string text_;
};

// The CPUs a thread of this process may run on, as /proc lists them ("0-1").
std::string cpus_allowed(const std::string& status_path) {
  std::ifstream status(status_path);
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("Cpus_allowed_list:", 0) == 0) return line.substr(line.find_first_not_of(" \t", 18));
  return "";
}

}  // namespace

TEST_CASE("the in-process bootstrap gathers every rank's blob in rank order") {
  const int size = 4;
  auto store = std::make_shared<pcoll::bootstrap::InprocStore>(size, 5000ms);
  std::vector<std::vector<pcoll::bootstrap::Blob>> results(size);
  std::vector<std::thread> ranks;
  for (int r = 0; r < size; ++r)
    ranks.emplace_back([&, r] {
      auto boot = pcoll::bootstrap::make_inproc(store, r);
      for (int round = 0; round < 3; ++round) {
        std::vector<std::byte> mine(static_cast<size_t>(r + round), std::byte(r * 16 + round));
        results[r] = boot->allgather(mine);
        boot->barrier();
      }
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < size; ++r) {
    REQUIRE(results[r].size() == size_t{size});
    for (int from = 0; from < size; ++from)
      CHECK(results[r][from] == std::vector<std::byte>(static_cast<size_t>(from + 2), std::byte(from * 16 + 2)));
  }
}

TEST_CASE("a rank that does not join an in-process collective is named when the others time out") {
  auto store = std::make_shared<pcoll::bootstrap::InprocStore>(3, 200ms);
  std::vector<std::pair<Errc, std::string>> errors(2);
  std::vector<std::thread> ranks;
  const auto start = Clock::now();
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] { errors[r] = error_of([&] { pcoll::bootstrap::make_inproc(store, r)->barrier(); }); });
  for (auto& t : ranks) t.join();
  CHECK(Clock::now() - start < 5s);
  for (const auto& [code, message] : errors) {
    CHECK(code == Errc::timeout);
    CHECK(contains(message, "rank 2 did not join"));
    CHECK(contains(message, "PCOLL_TIMEOUT_MS"));
  }
  CHECK(error_of([&] { pcoll::bootstrap::make_inproc(store, 3); }).first == Errc::invalid_argument);
}

TEST_CASE("inproc: a small write is visible at once, a large one only after the initiator progresses") {
  auto t = connected(2);
  auto src = t[0]->allocate(4096);
  auto dst = t[1]->allocate(4096);
  const auto remote = t[0]->import_region(1, dst->remote_key());
  fill(src->bytes(), 1);
  const size_t inject = t[0]->capabilities().inject_bytes;
  t[0]->write(*src, 0, *remote, 0, inject);
  CHECK(same(dst->bytes().first(inject), src->bytes().first(inject)));
  t[0]->write(*src, 1000, *remote, 1000, 2000);
  CHECK(all_zero(dst->bytes().subspan(1000, 2000)));  // nobody has progressed rank 0 yet
  t[1]->progress();                                    // the target's progress does not copy it
  CHECK(all_zero(dst->bytes().subspan(1000, 2000)));
  t[0]->flush();
  CHECK(same(dst->bytes().subspan(1000, 2000), src->bytes().subspan(1000, 2000)));
}

TEST_CASE("inproc: write_notify's value reaches the target only after its data") {
  auto t = connected(2);
  auto src = t[0]->allocate(1 << 20);
  auto dst = t[1]->allocate(1 << 20);
  const auto remote = t[0]->import_region(1, dst->remote_key());
  fill(src->bytes(), 2);
  uint64_t value = 0;
  t[0]->write_notify(*src, 3, *remote, 5, 100000, 42);
  CHECK(t[1]->poll({&value, 1}) == 0);  // queued at the initiator, data not copied
  CHECK(all_zero(dst->bytes().subspan(5, 100000)));
  t[0]->progress();
  REQUIRE(t[1]->poll({&value, 1}) == 1);
  CHECK(value == 42);
  CHECK(same(dst->bytes().subspan(5, 100000), src->bytes().subspan(3, 100000)));
  t[0]->write_notify(*src, 0, *remote, 0, 0, 43);  // no data: delivered at once
  REQUIRE(t[1]->poll({&value, 1}) == 1);
  CHECK(value == 43);
}

TEST_CASE("inproc: every notification arrives exactly once, reordered; inproc:fifo keeps arrival order") {
  for (const std::string selector : {"inproc", "inproc:fifo"}) {
    CAPTURE(selector);
    auto t = connected(2, selector);
    auto src = t[0]->allocate(64);
    auto dst = t[1]->allocate(64);
    const auto remote = t[0]->import_region(1, dst->remote_key());
    const uint64_t n = 1000;
    for (uint64_t i = 0; i < n; ++i) {
      if (i % 2 == 0) t[0]->notify(1, i);
      else t[0]->write_notify(*src, 0, *remote, 0, 8, i);
    }
    std::vector<uint64_t> got;
    std::vector<uint64_t> batch(64);
    while (got.size() < n) {
      const size_t k = t[1]->poll(batch);
      if (k == 0) break;
      got.insert(got.end(), batch.begin(), batch.begin() + static_cast<long>(k));
    }
    CHECK(t[1]->poll(batch) == 0);
    const bool in_order = std::is_sorted(got.begin(), got.end());
    std::sort(got.begin(), got.end());
    std::vector<uint64_t> expected(n);
    std::iota(expected.begin(), expected.end(), 0);
    CHECK(got == expected);
    CHECK(in_order == (selector == "inproc:fifo"));
  }
}

TEST_CASE("inproc: 64-bit atomics on the target's word are exact under contention") {
  const int size = 4;
  const uint64_t per_rank = 5000;
  auto t = connected(size);
  auto word = t[0]->allocate(64);
  const auto key = word->remote_key();
  std::vector<std::thread> ranks;
  std::atomic<int> broken_locks{0};
  for (int r = 0; r < size; ++r)
    ranks.emplace_back([&, r] {
      const auto home = t[r]->import_region(0, key);
      const uint64_t me = static_cast<uint64_t>(r) + 1;
      for (uint64_t i = 0; i < per_rank; ++i) {
        t[r]->fetch_add(*home, 8, 1);
        t[r]->atomic_max(*home, 16, (i * 7919 + me * 104729) % 1000003);
        if (i % 50 == 0) {  // a compare_swap lock around a plain read-modify-write of word 24
          while (t[r]->compare_swap(*home, 0, 0, me) != 0) std::this_thread::yield();
          const uint64_t counter = t[r]->swap(*home, 24, 0);
          t[r]->swap(*home, 24, counter + 1);
          if (t[r]->swap(*home, 0, 0) != me) ++broken_locks;
        }
      }
    });
  for (auto& thread : ranks) thread.join();
  uint64_t largest = 0;
  for (int r = 0; r < size; ++r)
    for (uint64_t i = 0; i < per_rank; ++i)
      largest = std::max(largest, (i * 7919 + (static_cast<uint64_t>(r) + 1) * 104729) % 1000003);
  uint64_t words[4];
  std::memcpy(words, word->bytes().data(), sizeof words);
  CHECK(words[0] == 0);
  CHECK(words[1] == per_rank * size);
  CHECK(words[2] == largest);
  CHECK(words[3] == (per_rank / 50) * size);
  CHECK(broken_locks == 0);
}

TEST_CASE("inproc: out-of-bounds, misaligned and foreign accesses are refused on the initiator") {
  auto t = connected(2);
  auto local = t[0]->allocate(256);
  auto region = t[1]->allocate(128);
  const auto target = t[0]->import_region(1, region->remote_key());
  const auto past_end = error_of([&] { t[0]->write(*local, 0, *target, 100, 29); });
  CHECK(past_end.first == Errc::invalid_argument);
  CHECK(contains(past_end.second, "rank 1"));
  CHECK(contains(past_end.second, "128"));
  CHECK(error_of([&] { t[0]->write(*local, 0, *target, SIZE_MAX, 2); }).first == Errc::invalid_argument);
  CHECK(error_of([&] { t[0]->write(*local, 250, *target, 0, 7); }).first == Errc::invalid_argument);
  CHECK(error_of([&] { t[0]->write_notify(*local, 0, *target, 129, 0, 1); }).first == Errc::invalid_argument);
  CHECK(error_of([&] { t[0]->fetch_add(*target, 124, 1); }).first == Errc::invalid_argument);
  CHECK(error_of([&] { t[0]->compare_swap(*target, 4, 0, 1); }).first == Errc::invalid_argument);
  CHECK(error_of([&] { t[0]->notify(2, 1); }).first == Errc::invalid_argument);
  CHECK(error_of([&] { t[0]->write(*local, 0, *target, 100, 28); }).first == Errc::ok);
  CHECK(error_of([&] { t[0]->fetch_add(*target, 120, 0); }).first == Errc::ok);
  // A source region of another rank's transport.
  CHECK(error_of([&] { t[0]->write(*region, 0, *target, 0, 8); }).first == Errc::invalid_argument);
  // Malformed keys, a key given for the wrong rank, a key of a region since deregistered.
  const std::vector<std::byte> junk(12, std::byte{0x42});
  CHECK(error_of([&] { t[0]->import_region(1, junk); }).first == Errc::protocol);
  CHECK(error_of([&] { t[0]->import_region(1, local->remote_key()); }).first == Errc::protocol);
  auto gone = t[1]->allocate(64);
  const auto gone_key = gone->remote_key();
  gone.reset();
  CHECK(error_of([&] { t[0]->import_region(1, gone_key); }).first == Errc::protocol);
  CHECK(error_of([&] { pcoll::providers::create("inproc:bogus", {}); }).first == Errc::invalid_argument);
}

TEST_CASE("inproc: wait() sleeps until a notification, a wake() or its timeout") {
  auto t = connected(2);
  auto start = Clock::now();
  CHECK_FALSE(t[1]->wait(std::chrono::microseconds(50000)));
  CHECK(Clock::now() - start >= 45ms);

  std::thread sender([&] {
    std::this_thread::sleep_for(100ms);
    t[0]->notify(1, 7);
  });
  start = Clock::now();
  CHECK(t[1]->wait(std::chrono::microseconds(5000000)));
  const auto waited = Clock::now() - start;
  CHECK(waited >= 90ms);
  CHECK(waited < 4s);
  sender.join();
  uint64_t value = 0;
  CHECK(t[1]->poll({&value, 1}) == 1);
  CHECK(value == 7);

  std::thread waker([&] {
    std::this_thread::sleep_for(100ms);
    t[1]->wake();
  });
  start = Clock::now();
  CHECK(t[1]->wait(std::chrono::microseconds(5000000)));
  CHECK(Clock::now() - start < 4s);
  waker.join();
  t[1]->wake();  // nobody waits: the next wait returns at once
  start = Clock::now();
  CHECK(t[1]->wait(std::chrono::microseconds(5000000)));
  CHECK(Clock::now() - start < 1s);

  // A progress driver (WaitFor::activity) is woken by a queued write of its own rank.
  auto src = t[0]->allocate(4096);
  auto dst = t[1]->allocate(4096);
  const auto remote = t[0]->import_region(1, dst->remote_key());
  fill(src->bytes(), 3);
  std::thread driver([&] { t[0]->wait(std::chrono::microseconds(5000000), Transport::WaitFor::activity); });
  std::this_thread::sleep_for(20ms);
  start = Clock::now();
  t[0]->write_notify(*src, 0, *remote, 0, 4096, 9);
  driver.join();
  CHECK(Clock::now() - start < 4s);
  CHECK(same(dst->bytes(), src->bytes()));  // the waiting thread copied it
}

TEST_CASE("inproc: a closed peer or a deregistered region fails the operation, naming the rank") {
  auto t = connected(3);
  auto src = t[0]->allocate(4096);
  auto dst = t[2]->allocate(4096);
  const auto remote = t[0]->import_region(2, dst->remote_key());
  t[0]->write(*src, 0, *remote, 0, 4096);  // queued
  dst.reset();
  const auto deregistered = error_of([&] { t[0]->flush(); });
  CHECK(deregistered.first == Errc::peer_failed);
  CHECK(contains(deregistered.second, "rank 2"));
  // The failure stays: every later call of rank 0's transport reports it.
  CHECK(error_of([&] { t[0]->progress(); }).first == Errc::peer_failed);

  t[1].reset();
  const auto closed = error_of([&] { t[2]->notify(1, 5); });
  CHECK(closed.first == Errc::peer_failed);
  CHECK(contains(closed.second, "rank 1"));
}

TEST_CASE("inproc: an address from another process is refused with a message saying why") {
  pcoll::transport::Options options;
  auto a = pcoll::providers::create("inproc", options);
  auto b = pcoll::providers::create("inproc", options);
  auto foreign = b->address();
  const uint64_t other_pid = static_cast<uint64_t>(::getpid()) + 1;
  std::memcpy(foreign.data() + 8, &other_pid, sizeof other_pid);  // the process id field
  const std::vector<pcoll::transport::Bytes> addresses = {a->address(), foreign};
  const auto refused = error_of([&] { a->connect(0, addresses); });
  CHECK(refused.first == Errc::unsupported);
  CHECK(contains(refused.second, "PCOLL_PROVIDER=inproc"));
  CHECK(contains(refused.second, "threads of one process"));
  CHECK(contains(refused.second, "rank 1"));
}

TEST_CASE("communicators of ranks as threads log under their own rank") {
  std::string text;
  {
    StderrCapture capture;
    thread_ranks::run(4, [](pcoll_comm_t* comm) {
      pcoll::log::warn("hello from rank " + std::to_string(pcoll_comm_rank(comm)));
    });
    // A thread that made no communicator prints no rank: this process holds four.
    std::thread([] { pcoll::log::warn("hello from a plain thread"); }).join();
    text = capture.finish();
  }
  for (int r = 0; r < 4; ++r) CHECK(contains(text, "pcoll[" + std::to_string(r) + "] warn: hello from rank " + std::to_string(r)));
  CHECK(contains(text, "pcoll warn: hello from a plain thread"));
}

TEST_CASE("communicators of ranks as threads leave their progress threads unpinned") {
  // PCOLL_PROGRESS_CPU=auto pins one rank's progress thread to a CPU of its own; ranks that
  // are threads of one process would all be pinned to the same one.
  cpu_set_t mine;
  REQUIRE(sched_getaffinity(0, sizeof mine, &mine) == 0);
  if (CPU_COUNT(&mine) < 2) {
    MESSAGE("this process has one CPU: nothing would be pinned");
    return;
  }
  ::setenv("PCOLL_PROGRESS_CPU", "auto", 1);
  const std::string process = cpus_allowed("/proc/self/status");
  std::string pinned;  // "tid: cpus; ..." of every thread pinned to fewer CPUs than the process
  thread_ranks::run(3, [&](pcoll_comm_t* comm) {
    REQUIRE(pcoll_barrier(comm) == PCOLL_SUCCESS);  // every rank's progress thread started
    if (pcoll_comm_rank(comm) == 0) {
      std::this_thread::sleep_for(50ms);  // and past its affinity call
      for (const auto& task : std::filesystem::directory_iterator("/proc/self/task"))
        if (const std::string cpus = cpus_allowed(task.path() / "status"); cpus != process)
          pinned += task.path().filename().string() + ": " + cpus + "; ";
    }
    REQUIRE(pcoll_barrier(comm) == PCOLL_SUCCESS);
  });
  ::unsetenv("PCOLL_PROGRESS_CPU");
  CAPTURE(process);
  CHECK(pinned == "");
}

int main(int argc, char** argv) {
  thread_ranks::use_inproc_provider();
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}
