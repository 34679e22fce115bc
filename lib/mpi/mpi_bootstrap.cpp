// The MPI bootstrap (name() "mpi"): rank, size, blob allgather and barrier over a duplicate
// of the caller's MPI communicator, and pcoll_init_mpi() of include/pcoll/mpi.h. Built as
// the separate libpcoll_mpi so that libpcoll itself never links MPI.
//
// MPI collectives have no timeout: a rank that never calls pcoll_init_mpi() hangs the
// others, as any MPI collective would. MPI errors are returned (MPI_ERRORS_RETURN on the
// duplicate) and reported as Errc::bootstrap with MPI's own message.
#include <mpi.h>

#include <climits>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "comm_factory.hpp"
#include "pcoll/mpi.h"
#include "support/error.hpp"

namespace pcoll::bootstrap {
namespace {

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  fail(Errc::bootstrap, std::string(what) + " failed: " + std::string(text, static_cast<size_t>(length)));
}

class MpiBootstrap final : public Bootstrap {
 public:
  explicit MpiBootstrap(MPI_Comm parent) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized)
      fail(Errc::invalid_state, "pcoll_init_mpi: MPI is not initialised (call MPI_Init first)");
    check_mpi(MPI_Comm_dup(parent, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }
  ~MpiBootstrap() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }
  MpiBootstrap(const MpiBootstrap&) = delete;
  MpiBootstrap& operator=(const MpiBootstrap&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }

  std::vector<Blob> allgather(std::span<const std::byte> mine) override {
    if (mine.size() > static_cast<size_t>(INT_MAX))
      fail(Errc::invalid_argument, "MPI bootstrap: blob of " + std::to_string(mine.size()) + " bytes exceeds INT_MAX");
    // Sizes first, then the bytes at their displacements.
    const int my_bytes = static_cast<int>(mine.size());
    std::vector<int> bytes(static_cast<size_t>(size_));
    check_mpi(MPI_Allgather(&my_bytes, 1, MPI_INT, bytes.data(), 1, MPI_INT, comm_), "MPI_Allgather");
    std::vector<int> displs(static_cast<size_t>(size_));
    long long total = 0;
    for (int r = 0; r < size_; ++r) {
      displs[static_cast<size_t>(r)] = static_cast<int>(total);
      total += bytes[static_cast<size_t>(r)];
      if (total > INT_MAX) fail(Errc::invalid_argument, "MPI bootstrap: allgather of more than INT_MAX bytes");
    }
    std::vector<std::byte> all(static_cast<size_t>(total));
    check_mpi(MPI_Allgatherv(mine.data(), my_bytes, MPI_BYTE, all.data(), bytes.data(), displs.data(), MPI_BYTE,
                             comm_),
              "MPI_Allgatherv");
    std::vector<Blob> out(static_cast<size_t>(size_));
    for (size_t r = 0; r < out.size(); ++r) {
      const auto first = all.begin() + displs[r];
      out[r].assign(first, first + bytes[r]);
    }
    return out;
  }

  void barrier() override { check_mpi(MPI_Barrier(comm_), "MPI_Barrier"); }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
};

// Stands in for an MPI bootstrap that could not start: its first use (rank(), in the
// communicator's constructor) rethrows the failure, so init_with_bootstrap() reports it
// through pcoll_last_error() like any other init failure.
class FailedBootstrap final : public Bootstrap {
 public:
  explicit FailedBootstrap(Error error) : error_(std::move(error)) {}
  int rank() const override { throw error_; }
  int size() const override { throw error_; }
  std::string name() const override { return "mpi"; }
  std::vector<Blob> allgather(std::span<const std::byte>) override { throw error_; }
  void barrier() override { throw error_; }

 private:
  Error error_;
};

}  // namespace
}  // namespace pcoll::bootstrap

extern "C" int pcoll_init_mpi(MPI_Comm mpi_comm, pcoll_comm_t** comm) {
  std::unique_ptr<pcoll::bootstrap::Bootstrap> boot;
  try {
    boot = std::make_unique<pcoll::bootstrap::MpiBootstrap>(mpi_comm);
  } catch (const pcoll::Error& e) {
    boot = std::make_unique<pcoll::bootstrap::FailedBootstrap>(e);
  }
  return pcoll::init_with_bootstrap(std::move(boot), comm);
}
