// Collective correctness over real processes: run as `pcollrun -n P collective_check`
// (or under srun / mpirun). Each doctest case is one rule of docs/design.md's "Semantics",
// written once in tests/helpers/collective_rules.cpp (tests/threads runs the same rules
// with ranks as threads); every rank runs the same cases in the same order, since each
// case is collective.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "collective_rules.hpp"
#include <pcoll/pcoll.h>

namespace {

collective_rules::Rank g_me;  // this process's rank

}  // namespace

TEST_CASE("every mode, dtype, op and count matches an independent reference") { collective_rules::every_mode_dtype_op_and_count_match_a_reference(g_me); }

TEST_CASE("large vectors (2^20+3 elements) are reduced correctly in every mode") { collective_rules::large_vectors_are_reduced_correctly(g_me); }

TEST_CASE("floating-point results are bitwise identical on every rank") { collective_rules::float_results_are_bitwise_identical_on_every_rank(g_me); }

TEST_CASE("a late rank is reported late, its data is carried, and every rank agrees") { collective_rules::a_late_rank_is_reported_and_its_data_carried(g_me); }

TEST_CASE("with late=drop a late rank's data is absent from every result") { collective_rules::late_drop_leaves_late_data_out(g_me); }

TEST_CASE("carried data arrives in a later round and flush drains it, for every mode") { collective_rules::carried_data_arrives_later_and_flush_drains_it(g_me); }

TEST_CASE("all ranks arriving at once: 10000 rounds complete exactly once each, nothing grows") { collective_rules::many_rounds_complete_exactly_once(g_me); }

TEST_CASE("majority: the initiator is the shared hash's draw, agreed and spread over all ranks") { collective_rules::majority_initiator_is_the_agreed_draw(g_me); }

TEST_CASE("max_lag bounds how far the others run ahead of a slow application") { collective_rules::max_lag_bounds_how_far_others_run_ahead(g_me); }

TEST_CASE("sync_every rounds are synchronous: every rank fresh, nobody initiates") { collective_rules::sync_every_rounds_are_synchronous(g_me); }

TEST_CASE("in-place rounds (sendbuf == recvbuf) give the same results") { collective_rules::in_place_rounds_give_the_same_results(g_me); }

TEST_CASE("a lagging application (max_lag 3) gets every result in order and loses nothing") { collective_rules::a_lagging_application_gets_every_result_and_loses_nothing(g_me); }

TEST_CASE("quorum: a round starts once k ranks arrived, for k = 1, 2, P-1, P") { collective_rules::quorum_rounds_start_once_k_ranks_arrived(g_me); }

TEST_CASE("quorum: the grace starts a round without the quorum") { collective_rules::quorum_grace_starts_the_round_without_the_quorum(g_me); }

TEST_CASE("quorum is refused without remote atomics") { collective_rules::quorum_is_refused_without_remote_atomics(g_me); }

TEST_CASE("mismatched creation arguments give an error on every rank") { collective_rules::mismatched_creation_arguments_fail_everywhere(g_me); }

TEST_CASE("a bad argument on one rank gives every rank an error naming that rank") { collective_rules::a_bad_argument_on_one_rank_fails_every_rank(g_me); }
TEST_CASE("destroy with a round outstanding completes the round and frees the handle") { collective_rules::destroy_with_a_round_outstanding_completes_it(g_me); }
TEST_CASE("invalid arguments and call order are refused with a message") { collective_rules::invalid_arguments_and_call_order_are_refused(g_me); }
TEST_CASE("a timed wait returns while a peer is late, and the round stays outstanding") { collective_rules::a_timed_wait_returns_while_a_peer_is_late_and_keeps_the_round(g_me); }
TEST_CASE("an argument a binding refused fails every rank, naming it") { collective_rules::an_argument_refused_by_a_binding_fails_every_rank(g_me); }
TEST_CASE("enum names round-trip through the C API and unknown names are refused") { collective_rules::enum_names_round_trip_and_unknown_names_are_refused(g_me); }
TEST_CASE("a handle larger than the host is refused before allocating, on every rank") { collective_rules::a_handle_larger_than_the_host_is_refused_before_allocating(g_me); }
TEST_CASE("network counters count only what went to other nodes") { collective_rules::network_counters_count_only_other_nodes(g_me); }
TEST_CASE("node_rails: each node sends the floor across the network") { collective_rules::node_rails_network_bytes_stay_at_the_floor(g_me); }
TEST_CASE("memory traffic counts every pass a round makes") { collective_rules::memory_traffic_counts_every_pass(g_me); }

int main(int argc, char** argv) {
  if (pcoll_init(&g_me.comm) != PCOLL_SUCCESS) {
    std::fprintf(stderr, "collective_check: pcoll_init failed: %s\n", pcoll_last_error());
    return 1;
  }
  // A routing or default-provider test says what the communicator must have chosen.
  if (const char* expected = std::getenv("PCOLL_TEST_EXPECT_PROVIDER");
      expected != nullptr && std::string(expected) != pcoll_comm_provider(g_me.comm)) {
    std::fprintf(stderr, "collective_check: provider %s, expected %s (PCOLL_TEST_EXPECT_PROVIDER)\n",
                 pcoll_comm_provider(g_me.comm), expected);
    return 1;
  }
  if (!collective_rules::open(g_me)) {
    std::fprintf(stderr, "collective_check: %s\n", pcoll_last_error());
    return 1;
  }
  // A plan test says which plan the small handles must run (the 16-byte agreement handle).
  if (const char* expected = std::getenv("PCOLL_TEST_EXPECT_PLAN"); expected != nullptr) {
    pcoll_allreduce_stats_t stats{};
    stats.size = sizeof stats;
    if (pcoll_allreduce_stats(g_me.agree, &stats) != PCOLL_SUCCESS || stats.plan == nullptr ||
        std::string(expected) != stats.plan) {
      std::fprintf(stderr, "collective_check: plan %s, expected %s (PCOLL_TEST_EXPECT_PLAN)\n",
                   stats.plan != nullptr ? stats.plan : "?", expected);
      return 1;
    }
  }
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  context.setOption("no-intro", g_me.rank != 0);
  context.setOption("no-version", true);
  // Only rank 0 prints the summary; every rank prints its own failures.
  if (g_me.rank != 0) context.setOption("minimal", true);
  const int failed = context.run();
  collective_rules::close(g_me);
  // A job whose every check passed must also leave cleanly: ranks finish the finalize
  // barrier at different times and close their endpoints while others still flush.
  if (pcoll_finalize(g_me.comm) != PCOLL_SUCCESS) {
    std::fprintf(stderr, "collective_check: pcoll_finalize failed: %s\n", pcoll_last_error());
    return 1;
  }
  return failed;
}
