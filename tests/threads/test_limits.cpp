// The limits of docs/design.md "Limits", each where it binds, with ranks as threads: the
// first value past a limit is refused on every rank with a message naming the limit, the
// last value within it works, and the communicator stays usable after a refusal. (The rank
// limits of the notification layouts are unit tests of the codec, tests/unit.)
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <pcoll/pcoll.h>
#include "thread_ranks.hpp"

namespace {

constexpr int kRanks = 2;

// One round of a sum of ones on a handle of `count` floats: every element is the number of
// ranks whose contribution the round took, the same on every element, at least the caller's
// own and at most kRanks (a solo or quorum round may take fewer than all).
void check_one_round(pcoll_allreduce_t* h, size_t count) {
  std::vector<float> send(count, 1.0f), recv(count, 0.0f);
  pcoll_round_info_t info{};
  REQUIRE(pcoll_allreduce_run(h, send.data(), recv.data(), &info) == PCOLL_SUCCESS);
  REQUIRE(recv.front() >= 1.0f);
  REQUIRE(recv.front() <= static_cast<float>(kRanks));
  for (const float v : recv) REQUIRE(v == recv.front());
}

// Handles alive at once: `limit` of them work, the next is refused naming the limit, and
// once one is destroyed another can be created.
void check_handle_limit(const char* notify_bits, unsigned limit) {
  ::setenv("PCOLL_NOTIFY_BITS", notify_bits, 1);
  thread_ranks::run(kRanks, [&](pcoll_comm_t* comm) {
    std::vector<pcoll_allreduce_t*> handles(limit, nullptr);
    for (unsigned i = 0; i < limit; ++i)
      REQUIRE(pcoll_allreduce_create(comm, 4, PCOLL_FLOAT32, PCOLL_OP_SUM, PCOLL_MODE_SYNC, nullptr, &handles[i]) ==
              PCOLL_SUCCESS);
    pcoll_allreduce_t* extra = nullptr;
    CHECK(pcoll_allreduce_create(comm, 4, PCOLL_FLOAT32, PCOLL_OP_SUM, PCOLL_MODE_SYNC, nullptr, &extra) ==
          PCOLL_ERR_UNSUPPORTED);
    const std::string message = pcoll_last_error();
    CHECK_MESSAGE(message.find("at most " + std::to_string(limit) + " allreduce handles") != std::string::npos,
                  message);
    CHECK(extra == nullptr);
    // The last handle created and the first both still work.
    check_one_round(handles.back(), 4);
    check_one_round(handles.front(), 4);
    REQUIRE(pcoll_allreduce_destroy(handles.front()) == PCOLL_SUCCESS);
    REQUIRE(pcoll_allreduce_create(comm, 4, PCOLL_FLOAT32, PCOLL_OP_SUM, PCOLL_MODE_SYNC, nullptr, &handles.front()) ==
            PCOLL_SUCCESS);
    check_one_round(handles.front(), 4);
    for (pcoll_allreduce_t* h : handles) REQUIRE(pcoll_allreduce_destroy(h) == PCOLL_SUCCESS);
  });
  ::unsetenv("PCOLL_NOTIFY_BITS");
}

// A creation argument past its limit: refused with PCOLL_ERR_INVALID_ARGUMENT naming it; the limit
// itself is accepted (where creating it is cheap) and the communicator still works.
struct OptionLimit {
  const char* what;
  void (*set)(pcoll_allreduce_opts_t&, bool past);
  pcoll_mode_t mode;
};

}  // namespace

TEST_CASE("a communicator holds 256 handles at once with 64-bit notifications, and refuses the 257th") {
  check_handle_limit("64", 256);
}

TEST_CASE("a communicator holds 64 handles at once with 32-bit notifications, and refuses the 65th") {
  check_handle_limit("32", 64);
}

TEST_CASE("a vector above 2^40 elements is refused, naming the limit") {
  thread_ranks::run(kRanks, [&](pcoll_comm_t* comm) {
    pcoll_allreduce_t* h = nullptr;
    const size_t too_many = (size_t{1} << 40) + 1;
    CHECK(pcoll_allreduce_create(comm, too_many, PCOLL_FLOAT32, PCOLL_OP_SUM, PCOLL_MODE_SYNC, nullptr, &h) ==
          PCOLL_ERR_INVALID_ARGUMENT);
    const std::string message = pcoll_last_error();
    CHECK_MESSAGE(message.find("count 1099511627777 is above 2^40") != std::string::npos, message);
    CHECK(h == nullptr);
    REQUIRE(pcoll_allreduce_create(comm, 16, PCOLL_FLOAT32, PCOLL_OP_SUM, PCOLL_MODE_SYNC, nullptr, &h) == PCOLL_SUCCESS);
    check_one_round(h, 16);
    REQUIRE(pcoll_allreduce_destroy(h) == PCOLL_SUCCESS);
  });
}

TEST_CASE("options past their limits are refused, naming them; the limits themselves work") {
  const OptionLimit limits[] = {
      {"opts.max_lag = 65 is above 64", [](pcoll_allreduce_opts_t& o, bool past) { o.max_lag = past ? 65 : 64; },
       PCOLL_MODE_SOLO},
      {"opts.quorum = 3 is more than the job's 2 ranks", [](pcoll_allreduce_opts_t& o, bool past) { o.quorum = past ? kRanks + 1 : kRanks; },
       PCOLL_MODE_QUORUM},
      {"opts.grace_us = 60000001 is above 60 s",
       [](pcoll_allreduce_opts_t& o, bool past) { o.grace_us = past ? 60000001 : 60000000; }, PCOLL_MODE_QUORUM},
  };
  thread_ranks::run(kRanks, [&](pcoll_comm_t* comm) {
    for (const OptionLimit& limit : limits) {
      CAPTURE(limit.what);
      pcoll_allreduce_opts_t opts;
      pcoll_allreduce_opts_init(&opts);
      limit.set(opts, true);
      pcoll_allreduce_t* h = nullptr;
      CHECK(pcoll_allreduce_create(comm, 8, PCOLL_FLOAT32, PCOLL_OP_SUM, limit.mode, &opts, &h) == PCOLL_ERR_INVALID_ARGUMENT);
      const std::string message = pcoll_last_error();
      CHECK_MESSAGE(message.find(limit.what) != std::string::npos, message);
      pcoll_allreduce_opts_init(&opts);
      limit.set(opts, false);
      REQUIRE(pcoll_allreduce_create(comm, 8, PCOLL_FLOAT32, PCOLL_OP_SUM, limit.mode, &opts, &h) == PCOLL_SUCCESS);
      check_one_round(h, 8);
      REQUIRE(pcoll_allreduce_destroy(h) == PCOLL_SUCCESS);
    }
  });
}

int main(int argc, char** argv) {
  thread_ranks::use_inproc_provider();
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}
