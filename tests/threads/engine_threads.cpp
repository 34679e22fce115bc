// The engine's collective rules with ranks as threads: every rule of
// tests/helpers/collective_rules.cpp (the ones collective_check runs under pcollrun), for
// every job size P of --ranks (default 2-8), each job P threads of this process over the
// in-process bootstrap and provider (PCOLL_PROVIDER=inproc unless set). One process, so
// a debugger sees every rank and ThreadSanitizer every access (scripts/test-tsan.sh).
//
//   engine_threads [--ranks=N | --ranks=LO-HI] [doctest options, e.g. -tc='*carry*']
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collective_rules.hpp"
#include <pcoll/pcoll.h>
#include "thread_ranks.hpp"

namespace {

int g_min_ranks = 2;
int g_max_ranks = 8;

// The long rules' sizes: P ranks share this machine's cores, and ThreadSanitizer slows every
// access by an order of magnitude.
#if defined(__SANITIZE_THREAD__)
constexpr int kManyRounds = 300;
constexpr size_t kLargeCount = (size_t{1} << 14) + 3;
#else
constexpr int kManyRounds = 2000;
constexpr size_t kLargeCount = (size_t{1} << 18) + 3;
#endif

// Runs `rule` on every rank of a job of P threads, for every P of the range.
void for_every_size(void (*rule)(const collective_rules::Rank&)) {
  for (int size = g_min_ranks; size <= g_max_ranks; ++size) {
    thread_ranks::run(size, [&](pcoll_comm_t* comm) {
      collective_rules::Rank me;
      me.comm = comm;
      me.many_rounds = kManyRounds;
      me.large_count = kLargeCount;
      me.check_heap = false;  // the process's memory is every rank's
      REQUIRE_MESSAGE(collective_rules::open(me), pcoll_last_error());
      INFO("rank " << me.rank << " of " << me.size << " (threads)");
      rule(me);
      collective_rules::close(me);
    });
  }
}

// "--ranks=N" or "--ranks=LO-HI", 1 <= LO <= HI <= 64.
bool parse_ranks(const char* text) {
  char* end = nullptr;
  const long lo = std::strtol(text, &end, 10);
  long hi = lo;
  if (*end == '-') hi = std::strtol(end + 1, &end, 10);
  if (*end != '\0' || lo < 1 || hi < lo || hi > 64) return false;
  g_min_ranks = static_cast<int>(lo);
  g_max_ranks = static_cast<int>(hi);
  return true;
}

}  // namespace

TEST_CASE("every mode, dtype, op and count matches an independent reference") { for_every_size(collective_rules::every_mode_dtype_op_and_count_match_a_reference); }

TEST_CASE("large vectors (2^20+3 elements) are reduced correctly in every mode") { for_every_size(collective_rules::large_vectors_are_reduced_correctly); }

TEST_CASE("floating-point results are bitwise identical on every rank") { for_every_size(collective_rules::float_results_are_bitwise_identical_on_every_rank); }

TEST_CASE("a late rank is reported late, its data is carried, and every rank agrees") { for_every_size(collective_rules::a_late_rank_is_reported_and_its_data_carried); }

TEST_CASE("with late=drop a late rank's data is absent from every result") { for_every_size(collective_rules::late_drop_leaves_late_data_out); }

TEST_CASE("carried data arrives in a later round and flush drains it, for every mode") { for_every_size(collective_rules::carried_data_arrives_later_and_flush_drains_it); }

TEST_CASE("all ranks arriving at once: 10000 rounds complete exactly once each, nothing grows") { for_every_size(collective_rules::many_rounds_complete_exactly_once); }

TEST_CASE("majority: the initiator is the shared hash's draw, agreed and spread over all ranks") { for_every_size(collective_rules::majority_initiator_is_the_agreed_draw); }

TEST_CASE("max_lag bounds how far the others run ahead of a slow application") { for_every_size(collective_rules::max_lag_bounds_how_far_others_run_ahead); }

TEST_CASE("sync_every rounds are synchronous: every rank fresh, nobody initiates") { for_every_size(collective_rules::sync_every_rounds_are_synchronous); }

TEST_CASE("in-place rounds (sendbuf == recvbuf) give the same results") { for_every_size(collective_rules::in_place_rounds_give_the_same_results); }
TEST_CASE("a lagging application (max_lag 3) gets every result in order and loses nothing") { for_every_size(collective_rules::a_lagging_application_gets_every_result_and_loses_nothing); }
TEST_CASE("quorum: a round starts once k ranks arrived, for k = 1, 2, P-1, P") { for_every_size(collective_rules::quorum_rounds_start_once_k_ranks_arrived); }
TEST_CASE("quorum: the grace starts a round without the quorum") { for_every_size(collective_rules::quorum_grace_starts_the_round_without_the_quorum); }

TEST_CASE("mismatched creation arguments give an error on every rank") { for_every_size(collective_rules::mismatched_creation_arguments_fail_everywhere); }

TEST_CASE("a bad argument on one rank gives every rank an error naming that rank") { for_every_size(collective_rules::a_bad_argument_on_one_rank_fails_every_rank); }
TEST_CASE("destroy with a round outstanding completes the round and frees the handle") { for_every_size(collective_rules::destroy_with_a_round_outstanding_completes_it); }
TEST_CASE("invalid arguments and call order are refused with a message") { for_every_size(collective_rules::invalid_arguments_and_call_order_are_refused); }
TEST_CASE("a timed wait returns while a peer is late, and the round stays outstanding") { for_every_size(collective_rules::a_timed_wait_returns_while_a_peer_is_late_and_keeps_the_round); }
TEST_CASE("an argument a binding refused fails every rank, naming it") { for_every_size(collective_rules::an_argument_refused_by_a_binding_fails_every_rank); }
TEST_CASE("enum names round-trip through the C API and unknown names are refused") { for_every_size(collective_rules::enum_names_round_trip_and_unknown_names_are_refused); }

int main(int argc, char** argv) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--ranks=", 8) == 0) {
      if (!parse_ranks(argv[i] + 8)) {
        std::fprintf(stderr, "engine_threads: --ranks=%s: give N or LO-HI, between 1 and 64\n", argv[i] + 8);
        return 2;
      }
      continue;
    }
    args.push_back(argv[i]);
  }
  thread_ranks::use_inproc_provider();
  std::printf("engine_threads: ranks as threads, P=%d..%d, PCOLL_PROVIDER=%s\n", g_min_ranks, g_max_ranks,
              std::getenv("PCOLL_PROVIDER"));
  doctest::Context context;
  context.applyCommandLine(static_cast<int>(args.size()), args.data());
  return context.run();
}
