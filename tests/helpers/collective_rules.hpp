// The collective semantics of docs/design.md ("Semantics"), one function per rule, for
// every rank of a job to run: one rank per process under pcollrun
// (tests/multiprocess/collective_check.cpp), or ranks as threads of one process
// (tests/threads/engine_threads.cpp). Each function is collective: every rank calls the
// same ones in the same order. Checks are doctest assertions (thread-safe in doctest).
//
// Inputs are small integers so that every dtype represents every partial sum exactly: the
// reference is then computed independently here, from the inputs and the agreed fresh
// masks, and compared exactly (avg within rounding).
#pragma once

#include <cstddef>

#include <pcoll/pcoll.h>

namespace collective_rules {

// One rank of a job, as the rules see it.
struct Rank {
  pcoll_comm_t* comm = nullptr;
  int rank = 0;
  int size = 1;
  pcoll_allreduce_t* agree = nullptr;  // made by open(): sync int64 max, checks agreement
  // Sizes of the long rules: ranks as threads share one process's CPUs, so they run shorter.
  int many_rounds = 10000;
  size_t large_count = (size_t{1} << 20) + 3;
  // Whether the process's heap is this rank's alone (one rank per process).
  bool check_heap = true;
};

// Creates and destroys the rank's agreement handle (collective). open() returns false with
// pcoll_last_error() set when it cannot.
bool open(Rank& rank);
void close(Rank& rank);

void every_mode_dtype_op_and_count_match_a_reference(const Rank& rank);
void large_vectors_are_reduced_correctly(const Rank& rank);
void float_results_are_bitwise_identical_on_every_rank(const Rank& rank);
void a_late_rank_is_reported_and_its_data_carried(const Rank& rank);
void late_drop_leaves_late_data_out(const Rank& rank);
void carried_data_arrives_later_and_flush_drains_it(const Rank& rank);
void many_rounds_complete_exactly_once(const Rank& rank);
void majority_initiator_is_the_agreed_draw(const Rank& rank);
void max_lag_bounds_how_far_others_run_ahead(const Rank& rank);
void sync_every_rounds_are_synchronous(const Rank& rank);
void in_place_rounds_give_the_same_results(const Rank& rank);
void a_lagging_application_gets_every_result_and_loses_nothing(const Rank& rank);
void quorum_rounds_start_once_k_ranks_arrived(const Rank& rank);
void quorum_grace_starts_the_round_without_the_quorum(const Rank& rank);
void quorum_is_refused_without_remote_atomics(const Rank& rank);
void mismatched_creation_arguments_fail_everywhere(const Rank& rank);
void a_bad_argument_on_one_rank_fails_every_rank(const Rank& rank);
void destroy_with_a_round_outstanding_completes_it(const Rank& rank);
void invalid_arguments_and_call_order_are_refused(const Rank& rank);
void a_timed_wait_returns_while_a_peer_is_late_and_keeps_the_round(const Rank& rank);
void an_argument_refused_by_a_binding_fails_every_rank(const Rank& rank);
void enum_names_round_trip_and_unknown_names_are_refused(const Rank& rank);
void a_handle_larger_than_the_host_is_refused_before_allocating(const Rank& rank);
void network_counters_count_only_other_nodes(const Rank& rank);
void node_rails_network_bytes_stay_at_the_floor(const Rank& rank);
void memory_traffic_counts_every_pass(const Rank& rank);

}  // namespace collective_rules
