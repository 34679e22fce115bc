// Job start-up and cross-rank reductions shared by the perf tools (argument parsing:
// perf_args.cpp).
#include "perf_job.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "perf_error.hpp"

#if PCOLL_PERF_MPI
#include <pcoll/mpi.h>
#endif

namespace pcoll::perf {

void check(int status, const char* what) {
  if (status == PCOLL_SUCCESS) return;
  // The library's message already starts with the function's name; say it once.
  const std::string message = pcoll_last_error();
  throw Error(status, message.rfind(what, 0) == 0 ? message : std::string(what) + ": " + message);
}

Job::Job([[maybe_unused]] int* argc, [[maybe_unused]] char*** argv) {
#if PCOLL_PERF_MPI
  if (const char* world = std::getenv("OMPI_COMM_WORLD_SIZE"); world != nullptr && *world != '\0') {
    // Only the main thread calls MPI: pcoll's progress thread never does.
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
      fail(PCOLL_ERR_BOOTSTRAP, "MPI_Init_thread failed");
    mpi_ = true;
    check(pcoll_init_mpi(MPI_COMM_WORLD, &comm_), "pcoll_init_mpi");
  }
#endif
  if (!mpi_) check(pcoll_init(&comm_), "pcoll_init");
  rank_ = pcoll_comm_rank(comm_);
  size_ = pcoll_comm_size(comm_);
}

Job::~Job() {
  if (comm_ != nullptr && pcoll_finalize(comm_) != PCOLL_SUCCESS)
    std::fprintf(stderr, "pcoll_finalize: %s\n", pcoll_last_error());
#if PCOLL_PERF_MPI
  if (mpi_) MPI_Finalize();
#endif
}

std::string Job::launcher() const { return pcoll_comm_bootstrap(comm_); }
std::string Job::provider() const { return pcoll_comm_provider(comm_); }

void Job::reduce_over_ranks(std::span<double> values, pcoll_op_t op) {
  if (values.empty() || size_ == 1) return;
#if PCOLL_PERF_MPI
  if (mpi_) {
    if (MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE,
                      op == PCOLL_OP_MAX ? MPI_MAX : MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
      fail(PCOLL_ERR_TRANSPORT, "MPI_Allreduce of the measurements failed");
    return;
  }
#endif
  pcoll_allreduce_t* handle = nullptr;
  check(pcoll_allreduce_create(comm_, values.size(), PCOLL_FLOAT64, op, PCOLL_MODE_SYNC, nullptr, &handle),
        "pcoll_allreduce_create (measurement reduction)");
  const std::vector<double> mine(values.begin(), values.end());
  const int status = pcoll_allreduce_run(handle, mine.data(), values.data(), nullptr);
  const std::string error = status == PCOLL_SUCCESS ? "" : pcoll_last_error();
  check(pcoll_allreduce_destroy(handle), "pcoll_allreduce_destroy (measurement reduction)");
  if (status != PCOLL_SUCCESS) throw Error(status, "measurement reduction: " + error);
}

void Job::max_over_ranks(std::span<double> values) { reduce_over_ranks(values, PCOLL_OP_MAX); }

void Job::sum_over_ranks(std::span<double> values) { reduce_over_ranks(values, PCOLL_OP_SUM); }

void Job::barrier() {
#if PCOLL_PERF_MPI
  if (mpi_) {
    MPI_Barrier(MPI_COMM_WORLD);
    return;
  }
#endif
  check(pcoll_barrier(comm_), "pcoll_barrier");
}

}  // namespace pcoll::perf
