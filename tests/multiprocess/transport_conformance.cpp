// Transport conformance suite: the rules of lib/transport/include/transport/transport.hpp, checked across real
// processes. One program, every rank runs every case in the same order:
//
//   pcollrun -n 2..4 tests/transport_conformance          (PCOLL_PROVIDER picks the provider)
//
// Ranks exchange addresses and region keys through pcoll::bootstrap::from_environment(). A
// ProgressDriver runs on every rank for the whole suite, as it does under the collectives;
// checks use CHECK (not REQUIRE) inside collective phases so that a failure on one rank does
// not leave the others waiting at a barrier. PCOLL_TEST_ATOMICS scales the contention cases.
// The atomic cases run where capabilities().remote_atomics says there are atomics; where it
// does not, one case checks that every atomic is refused instead
// (PCOLL_TEST_OFI_WITHOUT_ATOMICS=1 makes that so on libfabric here).
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <api/settings_catalog.hpp>
#include <bootstrap/bootstrap.hpp>
#include <registry/registry.hpp>
#include <support/error.hpp>
#include <support/support_settings.hpp>
#include <transport/progress_driver.hpp>
#include <transport/rendezvous.hpp>
#include <transport/transport.hpp>
#if PCOLL_HAVE_UCX
#include <ucx/ucx_settings.hpp>
#endif

using namespace std::chrono_literals;
using pcoll::Errc;
using pcoll::Error;
using pcoll::transport::LocalRegion;
using pcoll::transport::RemoteRegion;
using pcoll::transport::Transport;
using Clock = std::chrono::steady_clock;

namespace {

struct World {
  std::unique_ptr<pcoll::bootstrap::Bootstrap> boot;
  std::unique_ptr<Transport> transport;
  std::unique_ptr<pcoll::transport::ProgressDriver> driver;
  int rank = 0;
  int size = 1;
  pcoll::transport::JobLayout layout;
};
World* world = nullptr;

// A second transport of the job's selector (PCOLL_PROVIDER, as the first) with `options`
// and the job's layout: a routed transport's name ("ofi:shm+tcp") is no selector.
std::unique_ptr<Transport> another_transport(pcoll::transport::Options options) {
  options.layout = world->layout;
  return pcoll::providers::create("", options);
}

Transport& tp() { return *world->transport; }
void barrier() { world->boot->barrier(); }
// Connects `transport` to every rank's through the bootstrap.
void connect(Transport& transport) {
  pcoll::transport::connect_all(transport, world->rank,
                                [](std::span<const std::byte> mine) { return world->boot->allgather(mine); });
}
int right() { return (world->rank + 1) % world->size; }
int left() { return (world->rank + world->size - 1) % world->size; }

// Every rank's key for `region`, imported: result[r] is rank r's region.
std::vector<std::unique_ptr<RemoteRegion>> exchange(const LocalRegion& region) {
  const auto key = region.remote_key();
  const auto keys = world->boot->allgather(key);
  std::vector<std::unique_ptr<RemoteRegion>> remote;
  for (int r = 0; r < world->size; ++r) remote.push_back(tp().import_region(r, keys[r]));
  return remote;
}

// Allgather of a vector of u64 (one per rank).
std::vector<std::vector<uint64_t>> allgather_u64(const std::vector<uint64_t>& mine) {
  std::vector<std::byte> blob(mine.size() * sizeof(uint64_t));
  if (!mine.empty()) std::memcpy(blob.data(), mine.data(), blob.size());
  const auto blobs = world->boot->allgather(blob);
  std::vector<std::vector<uint64_t>> out;
  for (const auto& b : blobs) {
    std::vector<uint64_t> values(b.size() / sizeof(uint64_t));
    if (!values.empty()) std::memcpy(values.data(), b.data(), values.size() * sizeof(uint64_t));
    out.push_back(std::move(values));
  }
  return out;
}

// Deterministic bytes both sides can compute: a function of (writer, round, index).
uint8_t pattern(int writer, size_t round, size_t index) {
  uint64_t x = (static_cast<uint64_t>(writer) << 48) ^ (round * 0x9E3779B97F4A7C15ull) ^ index;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return static_cast<uint8_t>(x);
}

void fill(std::span<std::byte> bytes, int writer, size_t round) {
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::byte{pattern(writer, round, i)};
}

// Index of the first byte that differs from the pattern, or SIZE_MAX.
size_t first_mismatch(std::span<const std::byte> bytes, int writer, size_t round) {
  for (size_t i = 0; i < bytes.size(); ++i)
    if (bytes[i] != std::byte{pattern(writer, round, i)}) return i;
  return SIZE_MAX;
}

std::vector<size_t> write_sizes() {
  std::vector<size_t> sizes = {0};
  for (size_t s = 1; s <= (size_t{16} << 20); s *= 2) sizes.push_back(s);
  for (size_t odd : {size_t{3}, size_t{7}, size_t{63}, size_t{65}, size_t{255}, size_t{257},
                     size_t{4095}, size_t{4097}, size_t{65537}, size_t{1000003},
                     (size_t{16} << 20) - 1})
    sizes.push_back(odd);
  return sizes;
}

constexpr size_t kSrcOffset = 3;   // unaligned on purpose
constexpr size_t kDstOffset = 5;
constexpr size_t kSlack = 64;
constexpr std::byte kGuard{0xEE};

// Waits (through the transport) for one notification; nullopt after `timeout`.
std::optional<uint64_t> next_notification(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  uint64_t value = 0;
  for (;;) {
    if (tp().poll({&value, 1}) == 1) return value;
    const auto now = Clock::now();
    if (now >= deadline) return std::nullopt;
    tp().wait(std::chrono::duration_cast<std::chrono::microseconds>(deadline - now));
  }
}

uint64_t notify_mask() {
  const unsigned bits = tp().capabilities().notify_bits;
  return bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
}

// Whether this provider has 64-bit remote atomics; the atomic cases run only where it has.
bool has_atomics() { return tp().capabilities().remote_atomics; }

size_t atomics_per_rank() {
  return pcoll::TestSettings::get_unsigned("PCOLL_TEST_ATOMICS");
}

uint64_t read_word(const LocalRegion& region, size_t offset) {
  uint64_t value = 0;
  std::memcpy(&value, region.bytes().data() + offset, sizeof value);
  return value;
}

}  // namespace

TEST_CASE("write delivers every byte for sizes 0 B to 16 MiB at unaligned offsets") {
  const size_t max_bytes = size_t{16} << 20;
  auto src = tp().allocate(max_bytes + kSlack);
  auto dst = tp().allocate(max_bytes + kSlack);
  const auto remote = exchange(*dst);
  const auto sizes = write_sizes();
  for (size_t round = 0; round < sizes.size(); ++round) {
    const size_t bytes = sizes[round];
    CAPTURE(bytes);
    std::memset(dst->bytes().data(), static_cast<int>(kGuard), bytes + kDstOffset + 1);
    fill(src->bytes().subspan(kSrcOffset, bytes), world->rank, round);
    barrier();  // every target has reset its guard bytes
    tp().write(*src, kSrcOffset, *remote[right()], kDstOffset, bytes);
    tp().flush();
    barrier();  // every write is flushed: visible at its target
    const auto got = dst->bytes().subspan(kDstOffset, bytes);
    CHECK(first_mismatch(got, left(), round) == SIZE_MAX);
    CHECK(dst->bytes()[kDstOffset - 1] == kGuard);
    CHECK(dst->bytes()[kDstOffset + bytes] == kGuard);
  }
  barrier();
}

TEST_CASE("write_notify delivers its value only after every byte is visible") {
  const size_t max_bytes = size_t{16} << 20;
  auto src = tp().allocate(max_bytes + kSlack);
  auto dst = tp().allocate(max_bytes + kSlack);
  std::memset(dst->bytes().data(), static_cast<int>(kGuard), dst->bytes().size());
  const auto remote = exchange(*dst);
  const auto sizes = write_sizes();
  const uint64_t tag = 0x5EED0000u;
  for (size_t round = 0; round < sizes.size(); ++round) {
    const size_t bytes = sizes[round];
    CAPTURE(bytes);
    fill(src->bytes().subspan(kSrcOffset, bytes), world->rank, round);
    tp().write_notify(*src, kSrcOffset, *remote[right()], kDstOffset, bytes, tag + round);
    // No barrier between the notification and the check: the value must imply the data.
    const auto value = next_notification(20s);
    REQUIRE(value.has_value());
    CHECK(*value == ((tag + round) & notify_mask()));
    CHECK(first_mismatch(dst->bytes().subspan(kDstOffset, bytes), left(), round) == SIZE_MAX);
    CHECK(dst->bytes()[kDstOffset + bytes] == kGuard);
    std::memset(dst->bytes().data() + kDstOffset, static_cast<int>(kGuard), bytes);
    tp().flush();
    barrier();  // targets have checked and reset before the next round writes
  }
}

// Receives `expected` notifications (waiting up to 20 s for each), then checks after a
// barrier that nothing more arrives (no duplicates); how often each value came.
std::map<uint64_t, int> receive_all(size_t expected) {
  std::map<uint64_t, int> seen;
  size_t received = 0;
  while (received < expected) {
    const auto value = next_notification(20s);
    if (!value) break;
    ++seen[*value];
    ++received;
  }
  CHECK(received == expected);
  barrier();
  CHECK_FALSE(next_notification(200ms).has_value());
  return seen;
}

TEST_CASE("notification values are delivered exactly once and unaltered") {
  // Every rank sends `per_peer` values to every rank (itself included), half with notify()
  // and half with 0-byte write_notify(); values carry (sender, kind, sequence) plus
  // high bits that must survive.
  const size_t per_peer = 2000;
  auto src = tp().allocate(64);
  auto dst = tp().allocate(64);
  const auto remote = exchange(*dst);
  const uint64_t mask = notify_mask();
  auto encode = [&](uint64_t sender, uint64_t kind, uint64_t seq) {
    const uint64_t low = (sender << 24) | (kind << 23) | seq;  // fits 32 bits
    return (low | (0xA5C3ull << 48)) & mask;
  };
  for (size_t seq = 0; seq < per_peer; ++seq) {
    for (int peer = 0; peer < world->size; ++peer) {
      const uint64_t kind = seq % 2;
      const uint64_t value = encode(static_cast<uint64_t>(world->rank), kind, seq);
      if (kind == 0) tp().notify(peer, value);
      else tp().write_notify(*src, 0, *remote[peer], 0, 0, value);
    }
  }
  tp().flush();

  const size_t expected = per_peer * static_cast<size_t>(world->size);
  std::map<uint64_t, int> seen = receive_all(expected);
  size_t wrong = 0;
  for (int sender = 0; sender < world->size; ++sender)
    for (size_t seq = 0; seq < per_peer; ++seq)
      if (seen[encode(static_cast<uint64_t>(sender), seq % 2, seq)] != 1) ++wrong;
  CHECK(wrong == 0);
  CHECK(seen.size() == expected);
  barrier();
}

TEST_CASE("try_notify sends each value it reports taken exactly once, and none it reports not taken") {
  // 1500 values to every rank, back to back: where a queue fills, try_notify says false and
  // the value is offered again, so a false that still sent would arrive twice.
  const size_t per_peer = 1500;
  const uint64_t mask = notify_mask();
  auto encode = [&](uint64_t sender, uint64_t seq) { return ((sender << 24) | seq | (0x5A3Cull << 48)) & mask; };
  size_t refused = 0;
  for (size_t seq = 0; seq < per_peer; ++seq) {
    for (int peer = 0; peer < world->size; ++peer) {
      const uint64_t value = encode(static_cast<uint64_t>(world->rank), seq);
      while (!tp().try_notify(peer, value)) {
        ++refused;
        tp().progress();
      }
    }
  }
  tp().flush();
  INFO("try_notify said 'not taken' " << refused << " times");
  std::map<uint64_t, int> seen = receive_all(per_peer * static_cast<size_t>(world->size));
  size_t wrong = 0;
  for (int sender = 0; sender < world->size; ++sender)
    for (size_t seq = 0; seq < per_peer; ++seq)
      if (seen[encode(static_cast<uint64_t>(sender), seq)] != 1) ++wrong;
  CHECK(wrong == 0);
  barrier();
}

// UCX (docs/transport.md): under every selector but ucx:tcp, notifications to a peer whose
// memory UCX maps here (same host, same IPC namespace) are stores into its mailbox, and to
// any other peer messages. The expectation is computed independently of the provider's
// decision: host names (emulated hosts have their own, tests/cluster/netns.sh), and
// PCOLL_TEST_UCX_UNMAPPED_RANK, which makes one rank act as if it were elsewhere.
TEST_CASE("ucx notifications take the mailbox exactly to the peers whose memory is mapped here") {
  const std::string selector = tp().capabilities().name;
  if (selector.rfind("ucx", 0) != 0) return;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const auto hosts = world->boot->allgather(std::as_bytes(std::span(host, std::strlen(host))));
  int unmapped = -1;
#if PCOLL_HAVE_UCX
  if (const auto rank = pcoll::UcxSettings::raw("PCOLL_TEST_UCX_UNMAPPED_RANK"))
    unmapped = static_cast<int>(pcoll::UcxSettings::parse_unsigned("PCOLL_TEST_UCX_UNMAPPED_RANK", *rank));
#endif
  auto src = tp().allocate(64);
  auto dst = tp().allocate(64 * static_cast<size_t>(world->size));
  const auto remote = exchange(*dst);
  tp().flush();  // plain writes still in flight would send write_notify the message way
  barrier();     // every earlier notification is consumed: the rings have room

  // Half below the slot's inline bytes, half above (copied into the mapped region).
  const size_t per_peer = 16;
  std::vector<pcoll::transport::NotificationPaths> before;
  for (int peer = 0; peer < world->size; ++peer) before.push_back(tp().notification_paths(peer));
  for (size_t i = 0; i < per_peer; ++i)
    for (int peer = 0; peer < world->size; ++peer) {
      if (peer == world->rank) continue;
      if (i % 2 == 0) tp().notify(peer, i);
      else tp().write_notify(*src, 0, *remote[peer], 64 * static_cast<size_t>(world->rank), i % 4 == 1 ? 8 : 64, i);
    }
  tp().flush();
  size_t received = 0;
  const size_t expected = per_peer * static_cast<size_t>(world->size - 1);
  while (received < expected && next_notification(20s)) ++received;
  CHECK(received == expected);
  for (int peer = 0; peer < world->size; ++peer) {
    if (peer == world->rank) continue;
    const bool mapped = selector != "ucx:tcp" && hosts[peer] == hosts[world->rank] &&
                        peer != unmapped && world->rank != unmapped;
    const auto now = tp().notification_paths(peer);
    CAPTURE(peer);
    CAPTURE(mapped);
    CHECK(now.by_memory - before[peer].by_memory == (mapped ? per_peer : 0));
    CHECK(now.by_message - before[peer].by_message == (mapped ? 0 : per_peer));
  }
  barrier();
}

TEST_CASE("fetch_add under contention gives the exact total") {
  if (!has_atomics()) return;
  const size_t count = atomics_per_rank();
  auto word = tp().allocate(64);
  const auto remote = exchange(*word);
  barrier();
  uint64_t previous = 0;
  bool increasing = true;
  for (size_t i = 0; i < count; ++i) {
    const uint64_t old_value = tp().fetch_add(*remote[0], 8, 1);
    if (i > 0 && old_value <= previous) increasing = false;
    previous = old_value;
  }
  CHECK(increasing);
  barrier();
  if (world->rank == 0) CHECK(read_word(*word, 8) == count * static_cast<size_t>(world->size));
  barrier();
}

TEST_CASE("compare_swap lock protects a plain counter") {
  if (!has_atomics()) return;
  // A spin lock taken with compare_swap(0 -> rank+1) guards a counter read with an atomic
  // read and written back with a plain RMA write + flush; lost updates mean a broken lock
  // or a write that became visible after the release.
  const size_t rounds = std::max<size_t>(1, atomics_per_rank() / 50);
  auto memory = tp().allocate(64);
  auto value_src = tp().allocate(64);
  const auto remote = exchange(*memory);
  const RemoteRegion& home = *remote[0];
  const uint64_t me = static_cast<uint64_t>(world->rank) + 1;
  barrier();
  bool exclusive = true;
  for (size_t i = 0; i < rounds; ++i) {
    while (tp().compare_swap(home, 0, 0, me) != 0) {
    }
    const uint64_t counter = tp().compare_swap(home, 8, ~uint64_t{0}, 0);  // atomic read
    const uint64_t next = counter + 1;
    std::memcpy(value_src->bytes().data(), &next, sizeof next);
    tp().write(*value_src, 0, home, 8, sizeof next);
    tp().flush();
    if (tp().swap(home, 0, 0) != me) exclusive = false;
  }
  CHECK(exclusive);
  barrier();
  if (world->rank == 0) {
    CHECK(read_word(*memory, 8) == rounds * static_cast<size_t>(world->size));
    CHECK(read_word(*memory, 0) == 0);
  }
  barrier();
}

TEST_CASE("swap returns each previous value exactly once") {
  if (!has_atomics()) return;
  const size_t count = std::max<size_t>(1, atomics_per_rank() / 10);
  auto word = tp().allocate(64);
  const auto remote = exchange(*word);
  barrier();
  std::vector<uint64_t> olds;
  olds.reserve(count);
  for (size_t i = 0; i < count; ++i)
    olds.push_back(tp().swap(*remote[0], 16, (static_cast<uint64_t>(world->rank) << 32) | (i + 1)));
  const auto all = allgather_u64(olds);
  if (world->rank == 0) {
    // Initial 0 plus every written value, each seen once: as someone's old value or final.
    std::map<uint64_t, int> seen;
    for (const auto& list : all)
      for (uint64_t v : list) ++seen[v];
    ++seen[read_word(*word, 16)];
    size_t wrong = 0;
    if (seen[0] != 1) ++wrong;
    for (int r = 0; r < world->size; ++r)
      for (size_t i = 0; i < count; ++i)
        if (seen[(static_cast<uint64_t>(r) << 32) | (i + 1)] != 1) ++wrong;
    CHECK(wrong == 0);
    CHECK(seen.size() == count * static_cast<size_t>(world->size) + 1);
  }
  barrier();
}

TEST_CASE("atomic_max keeps the largest value and returns non-decreasing old values") {
  if (!has_atomics()) return;
  const size_t count = std::max<size_t>(1, atomics_per_rank() / 10);
  auto word = tp().allocate(64);
  const auto remote = exchange(*word);
  barrier();
  uint64_t largest_sent = 0;
  uint64_t previous_old = 0;
  bool monotonic = true;
  for (size_t i = 0; i < count; ++i) {
    // Interleaved sequences: values from different ranks overtake each other.
    const uint64_t value = (i * 7919 + static_cast<uint64_t>(world->rank) * 104729) % 1000003 + 1;
    largest_sent = std::max(largest_sent, value);
    const uint64_t old_value = tp().atomic_max(*remote[0], 24, value);
    if (old_value < previous_old) monotonic = false;
    previous_old = old_value;
  }
  CHECK(monotonic);
  const auto all = allgather_u64({largest_sent});
  if (world->rank == 0) {
    uint64_t expected = 0;
    for (const auto& v : all) expected = std::max(expected, v[0]);
    CHECK(read_word(*word, 24) == expected);
  }
  barrier();
}

TEST_CASE("a sleeping target completes writes and atomics through its progress driver") {
  // Each initiator writes its own slice; the words after the slices take the atomics.
  const size_t bytes = 256 << 10;
  const size_t words_at = bytes * static_cast<size_t>(world->size);
  auto src = tp().allocate(bytes);
  auto dst = tp().allocate(words_at + 64);
  const auto remote = exchange(*dst);
  fill(src->bytes(), world->rank, 777);
  barrier();
  if (world->rank == 0) {
    std::this_thread::sleep_for(2s);  // application busy: only the driver progresses
  } else {
    const auto start = Clock::now();
    tp().write(*src, 0, *remote[0], bytes * static_cast<size_t>(world->rank), bytes);
    tp().flush();
    if (has_atomics()) {
      tp().fetch_add(*remote[0], words_at, 1);
      tp().compare_swap(*remote[0], words_at + 8, 0, 1);
    }
    const auto elapsed_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    CAPTURE(elapsed_ms);
    CHECK(elapsed_ms < 1000);
  }
  barrier();
  if (world->rank == 0) {
    if (has_atomics()) CHECK(read_word(*dst, words_at) == static_cast<uint64_t>(world->size - 1));
    for (int r = 1; r < world->size; ++r)
      CHECK(first_mismatch(dst->bytes().subspan(bytes * static_cast<size_t>(r), bytes), r, 777) ==
            SIZE_MAX);
  }
  barrier();
}

TEST_CASE("out-of-bounds and misaligned accesses are refused on the initiator") {
  auto local = tp().allocate(256);
  auto region = tp().allocate(128);
  const auto remote = exchange(*region);
  const RemoteRegion& target = *remote[right()];
  auto code_of = [](auto&& call) {
    try {
      call();
    } catch (const Error& e) {
      return std::pair{e.code(), std::string(e.what())};
    }
    return std::pair{Errc::ok, std::string()};
  };
  const auto past_end = code_of([&] { tp().write(*local, 0, target, 100, 29); });
  CHECK(past_end.first == Errc::invalid_argument);
  CHECK(past_end.second.find("rank " + std::to_string(right())) != std::string::npos);
  CHECK(past_end.second.find("128") != std::string::npos);
  CHECK(code_of([&] { tp().write(*local, 0, target, 128, 1); }).first == Errc::invalid_argument);
  CHECK(code_of([&] { tp().write(*local, 0, target, SIZE_MAX, 2); }).first == Errc::invalid_argument);
  CHECK(code_of([&] { tp().write(*local, 250, target, 0, 7); }).first == Errc::invalid_argument);
  CHECK(code_of([&] { tp().write_notify(*local, 0, target, 129, 0, 1); }).first ==
        Errc::invalid_argument);
  if (has_atomics()) {
    CHECK(code_of([&] { tp().fetch_add(target, 124, 1); }).first == Errc::invalid_argument);
    CHECK(code_of([&] { tp().fetch_add(target, 128, 1); }).first == Errc::invalid_argument);
    CHECK(code_of([&] { tp().compare_swap(target, 4, 0, 1); }).first == Errc::invalid_argument);
  }
  CHECK(code_of([&] { tp().notify(world->size, 1); }).first == Errc::invalid_argument);
  CHECK(code_of([&] { tp().try_notify(-1, 1); }).first == Errc::invalid_argument);
  // In bounds, right at the end: allowed.
  CHECK(code_of([&] { tp().write(*local, 0, target, 100, 28); }).first == Errc::ok);
  if (has_atomics()) CHECK(code_of([&] { tp().fetch_add(target, 120, 0); }).first == Errc::ok);
  // Malformed and foreign keys.
  std::vector<std::byte> junk(12, std::byte{0x42});
  CHECK(code_of([&] { tp().import_region(right(), junk); }).first == Errc::protocol);
  if (world->size > 1) {
    const auto key = region->remote_key();
    CHECK(code_of([&] { tp().import_region(right(), key); }).first == Errc::protocol);
  }
  tp().flush();
  barrier();
}

TEST_CASE("without remote atomics every atomic is refused, naming the provider") {
  if (has_atomics()) return;
  auto word = tp().allocate(64);
  const auto remote = exchange(*word);
  const RemoteRegion& target = *remote[right()];
  auto refusal = [](auto&& call) {
    try {
      call();
    } catch (const Error& e) {
      CHECK(e.code() == Errc::unsupported);
      return std::string(e.what());
    }
    FAIL("an atomic ran on a provider without remote atomics");
    return std::string();
  };
  const std::string provider = tp().capabilities().provider;
  for (const std::string& message :
       {refusal([&] { tp().fetch_add(target, 0, 1); }), refusal([&] { tp().compare_swap(target, 0, 0, 1); }),
        refusal([&] { tp().swap(target, 0, 1); }), refusal([&] { tp().atomic_max(target, 0, 1); })}) {
    CAPTURE(message);
    CHECK(message.find(provider) != std::string::npos);
    CHECK(message.find("quorum") != std::string::npos);  // which handles need atomics
  }
  CHECK(read_word(*word, 0) == 0);
  barrier();
}

TEST_CASE("RDMA selectors are accepted, and where their NIC is absent refused with the reason") {
  // ofi:verbs, ofi:efa, ofi:cxi and ofi:psm3 are known selectors everywhere: on a node
  // without the NIC they are Errc::unsupported naming the libfabric provider, never an
  // unknown selector.
  const pcoll::transport::Options options;
  for (const char* variant : {"verbs", "efa", "cxi", "psm3"}) {
    CAPTURE(variant);
    const std::string selector = std::string("ofi:") + variant;
    try {
      auto other = pcoll::providers::create(selector, options);
      CHECK(other->capabilities().name == selector);
    } catch (const Error& e) {
      CHECK(e.code() == Errc::unsupported);
      CHECK(std::string(e.what()).find(variant) != std::string::npos);
      CHECK(std::string(e.what()).find("no usable libfabric provider") != std::string::npos);
    }
  }
}

TEST_CASE("bad selectors and udp are refused with a message") {
  const pcoll::transport::Options options;
  auto message_of = [&](const std::string& selector, Errc expected) {
    try {
      pcoll::providers::create(selector, options);
    } catch (const Error& e) {
      CHECK(e.code() == expected);
      return std::string(e.what());
    }
    FAIL("selector '" << selector << "' was accepted");
    return std::string();
  };
  const auto unknown = message_of("ofi:bogus", Errc::invalid_argument);
  CHECK(unknown.find("bogus") != std::string::npos);
  CHECK(unknown.find("ofi:shm") != std::string::npos);
  const auto udp = message_of("ofi:udp", Errc::unsupported);
  CHECK(udp.find("udp") != std::string::npos);
  CHECK(udp.find("ofi:tcp") != std::string::npos);
  CHECK(message_of("ofi:udp;ofi_rxd", Errc::unsupported).find("rxd") != std::string::npos);
  CHECK(message_of("carrier-pigeon", Errc::invalid_argument).find("carrier-pigeon") !=
        std::string::npos);
}

namespace {

// A second transport per rank whose owner never progresses it (no driver, no polls on the
// target side), with a 300 ms timeout and `memory` registered on it; on rank 0 also rank
// 1's region. The memory is the caller's, not allocate()d: under plain ucx a peer on this
// host maps allocate()d memory, and writes and atomics there need nobody's progress. It
// outlives the transport, whose last progress may still apply a timed-out operation.
struct QuietTransport {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<LocalRegion> region;
  std::unique_ptr<RemoteRegion> rank1;  // rank 0 only
};

QuietTransport quiet_transport(std::span<std::byte> memory) {
  pcoll::transport::Options options;
  options.timeout = 300ms;
  QuietTransport quiet;
  quiet.transport = another_transport(options);
  connect(*quiet.transport);
  quiet.region = quiet.transport->register_memory(memory);
  const auto keys = world->boot->allgather(quiet.region->remote_key());
  if (world->rank == 0) quiet.rank1 = quiet.transport->import_region(1, keys[1]);
  return quiet;
}

}  // namespace

TEST_CASE("an unresponsive target gives Errc::timeout naming the rank") {
  // Only meaningful where the target must progress.
  if (world->size < 2 || !tp().capabilities().target_progress || !has_atomics()) return;
  std::vector<std::byte> word(64);
  auto quiet = quiet_transport(word);
  if (world->rank == 0) {
    const auto start = Clock::now();
    try {
      quiet.transport->fetch_add(*quiet.rank1, 0, 1);
      FAIL("fetch_add on a rank that never progresses completed");
    } catch (const Error& e) {
      CHECK(e.code() == Errc::timeout);
      CHECK(std::string(e.what()).find("rank 1") != std::string::npos);
    }
    CHECK(Clock::now() - start < 5s);
  }
  barrier();
}

// The same for a write and its flush, where the provider needs the target's progress to
// complete them: the error names the one late rank as "rank 1" (a flush's read
// "rank(s) 1" before).
TEST_CASE("a flush towards an unresponsive target gives Errc::timeout naming the rank") {
  if (world->size < 2 || !tp().capabilities().target_progress) return;
  std::vector<std::byte> buffer(1 << 20);
  auto quiet = quiet_transport(buffer);
  if (world->rank == 0) {
    try {
      // The write itself may time out already (ofi:tcp: its transmit queue stays full).
      quiet.transport->write(*quiet.region, 0, *quiet.rank1, 0, buffer.size() / 2);
      quiet.transport->flush();
      MESSAGE("flush completed without the target's progress: nothing to check here");
    } catch (const Error& e) {
      CHECK(e.code() == Errc::timeout);
      const std::string message = e.what();
      CAPTURE(message);
      CHECK(message.find("rank 1 ") != std::string::npos);
    }
  }
  barrier();
}

// A write the target refuses (here: a wrong memory key) is a delivery error: the next
// poll() throws it, naming the target, without waiting for a flush(), which small writes in
// the engine never call (and flush() reports it too). libfabric only: the key envelope of
// ofi_mr.cpp is ours to alter (the memory key is its u64 at byte 32), while a UCX rkey is
// opaque and UCX does not validate it. A routed transport's key is its own envelope of two.
TEST_CASE("a write refused by the target fails the initiator's next poll, naming the target") {
  const std::string& name = tp().capabilities().name;
  if (world->size < 2 || name.rfind("ofi", 0) != 0 || name.find('+') != std::string::npos) return;
  // A transport of its own with a short timeout: a target that silently drops the write
  // (shm) is found by the write not completing within it.
  pcoll::transport::Options options;
  options.timeout = 500ms;
  auto own = another_transport(options);
  connect(*own);
  pcoll::transport::ProgressDriver driver(*own);
  auto src = own->allocate(64);
  auto dst = own->allocate(64);
  const auto keys = world->boot->allgather(dst->remote_key());
  if (world->rank == 0) {
    auto bad_key = keys[1];
    REQUIRE(bad_key.size() >= 40);
    uint64_t mr_key = 0;
    std::memcpy(&mr_key, bad_key.data() + 32, sizeof mr_key);
    mr_key ^= 0x5a5a5a5a00000000ull;
    std::memcpy(bad_key.data() + 32, &mr_key, sizeof mr_key);
    auto target = own->import_region(1, bad_key);
    own->write(*src, 0, *target, 0, 64);
    std::optional<Error> seen;
    const auto deadline = Clock::now() + 5s;
    while (!seen && Clock::now() < deadline) {
      try {
        uint64_t value = 0;
        own->poll({&value, 1});
        std::this_thread::sleep_for(1ms);
      } catch (const Error& e) {
        seen = e;
      }
    }
    REQUIRE_MESSAGE(seen.has_value(), "poll() did not report the refused write within 5 s");
    CHECK(seen->rank() == 1);
    CHECK(std::string(seen->what()).find("rank 1") != std::string::npos);
    bool flush_reported = false;
    try {
      own->flush();
    } catch (const Error& e) {
      flush_reported = e.rank() == 1;
    }
    CHECK(flush_reported);
  }
  barrier();
}

int main(int argc, char** argv) {
  World w;
  try {
    w.boot = pcoll::bootstrap::from_environment();
    w.rank = w.boot->rank();
    w.size = w.boot->size();
    pcoll::transport::Options options;
    options.timeout = std::chrono::milliseconds(pcoll::SupportSettings::get_unsigned("PCOLL_TIMEOUT_MS"));
    // The layout, as a communicator gathers it: on emulated hosts (PCOLL_TEST_HOST_NAMES)
    // the registry routes the network selectors, so the routed transport is the one tested.
    w.layout = pcoll::transport::gather_layout(
        w.rank, [&w](std::span<const std::byte> mine) { return w.boot->allgather(mine); });
    options.layout = w.layout;
    w.transport = pcoll::providers::create("", options);
    world = &w;
    connect(*w.transport);
    w.driver = std::make_unique<pcoll::transport::ProgressDriver>(*w.transport);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "transport_conformance: setup failed: %s\n", e.what());
    return 2;
  }
  if (w.rank == 0)
    std::printf("transport_conformance: %s (%s, domain %s), %d ranks, %s\n",
                w.transport->capabilities().name.c_str(),
                w.transport->capabilities().provider.c_str(),
                w.transport->capabilities().domain.c_str(), w.size,
                w.transport->capabilities().remote_atomics ? "64-bit atomics" : "no atomics");
  doctest::Context context(argc, argv);
  const int rc = context.run();
  try {
    w.boot->barrier();  // nobody tears down while a peer still targets it
  } catch (const std::exception& e) {
    std::fprintf(stderr, "transport_conformance: final barrier: %s\n", e.what());
  }
  const std::string driver_error = w.driver->error();
  w.driver.reset();
  if (!driver_error.empty()) {
    std::fprintf(stderr, "transport_conformance: progress driver failed: %s\n",
                 driver_error.c_str());
    return rc != 0 ? rc : 3;
  }
  return rc;
}
