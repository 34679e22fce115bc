// The MPI bootstrap (name "mpi"): rank, size, blob allgather and barrier over a duplicate of
// the caller's MPI communicator, and pcoll_init_mpi() of include/pcoll/mpi.h. Built as the
// separate libpcoll_mpi so that libpcoll itself never links MPI; it reaches the library
// only through the C API and its private bootstrap entry (pcoll/private.h).
//
// MPI collectives have no timeout: a rank that never calls pcoll_init_mpi() hangs the
// others, as any MPI collective would. MPI errors are returned (MPI_ERRORS_RETURN on the
// duplicate) and reported as PCOLL_ERR_BOOTSTRAP with MPI's own message.
#include <mpi.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <pcoll/mpi.h>
#include <pcoll/private.h>

namespace {

struct MpiContext {
  MPI_Comm comm = MPI_COMM_NULL;
};

// PCOLL_SUCCESS, or PCOLL_ERR_BOOTSTRAP with "what failed: MPI's message" in `error`.
int check_mpi(int rc, const char* what, char* error, size_t error_bytes) {
  if (rc == MPI_SUCCESS) return PCOLL_SUCCESS;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(rc, text, &length);
  std::snprintf(error, error_bytes, "%s failed: %.*s", what, length, text);
  return PCOLL_ERR_BOOTSTRAP;
}

int mpi_allgather(void* context, const void* mine, size_t bytes, size_t* sizes, void** data, char* error,
                  size_t error_bytes) {
  const MPI_Comm comm = static_cast<MpiContext*>(context)->comm;
  *data = nullptr;
  if (bytes > static_cast<size_t>(INT_MAX)) {
    std::snprintf(error, error_bytes, "blob of %zu bytes exceeds INT_MAX", bytes);
    return PCOLL_ERR_INVALID_ARGUMENT;
  }
  int size = 0;
  if (int s = check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size", error, error_bytes)) return s;
  // Sizes first, then the bytes at their displacements.
  const int my_bytes = static_cast<int>(bytes);
  std::vector<int> counts(static_cast<size_t>(size));
  if (int s = check_mpi(MPI_Allgather(&my_bytes, 1, MPI_INT, counts.data(), 1, MPI_INT, comm), "MPI_Allgather",
                        error, error_bytes))
    return s;
  std::vector<int> displs(static_cast<size_t>(size));
  long long total = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    displs[r] = static_cast<int>(total);
    sizes[r] = static_cast<size_t>(counts[r]);
    total += counts[r];
    if (total > INT_MAX) {
      std::snprintf(error, error_bytes, "allgather of more than INT_MAX bytes");
      return PCOLL_ERR_INVALID_ARGUMENT;
    }
  }
  void* all = std::malloc(total > 0 ? static_cast<size_t>(total) : 1);
  if (all == nullptr) {
    std::snprintf(error, error_bytes, "out of memory for %lld bytes", total);
    return PCOLL_ERR_NO_MEMORY;
  }
  const int s = check_mpi(MPI_Allgatherv(mine, my_bytes, MPI_BYTE, all, counts.data(), displs.data(), MPI_BYTE, comm),
                          "MPI_Allgatherv", error, error_bytes);
  if (s != PCOLL_SUCCESS) {
    std::free(all);
    return s;
  }
  *data = all;
  return PCOLL_SUCCESS;
}

int mpi_barrier(void* context, char* error, size_t error_bytes) {
  return check_mpi(MPI_Barrier(static_cast<MpiContext*>(context)->comm), "MPI_Barrier", error, error_bytes);
}

void mpi_destroy(void* context) {
  auto* mpi = static_cast<MpiContext*>(context);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && mpi->comm != MPI_COMM_NULL) MPI_Comm_free(&mpi->comm);
  delete mpi;
}

int failed(int status, const std::string& message) {
  return pcoll_private_set_error(status, ("pcoll_init_mpi: " + message).c_str());
}

}  // namespace

extern "C" int pcoll_init_mpi(MPI_Comm mpi_comm, pcoll_comm_t** comm) {
  if (comm == nullptr) return failed(PCOLL_ERR_INVALID_ARGUMENT, "comm is NULL");
  *comm = nullptr;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return failed(PCOLL_ERR_INVALID_STATE, "MPI is not initialised (call MPI_Init first)");
  auto* context = new MpiContext;
  char error[512] = {};
  int status = check_mpi(MPI_Comm_dup(mpi_comm, &context->comm), "MPI_Comm_dup", error, sizeof error);
  pcoll_private_bootstrap_t boot{};
  if (status == PCOLL_SUCCESS) {
    MPI_Comm_set_errhandler(context->comm, MPI_ERRORS_RETURN);
    status = check_mpi(MPI_Comm_rank(context->comm, &boot.rank), "MPI_Comm_rank", error, sizeof error);
  }
  if (status == PCOLL_SUCCESS)
    status = check_mpi(MPI_Comm_size(context->comm, &boot.size), "MPI_Comm_size", error, sizeof error);
  if (status != PCOLL_SUCCESS) {
    mpi_destroy(context);
    return failed(status, error);
  }
  boot.name = "mpi";
  boot.context = context;
  boot.allgather = mpi_allgather;
  boot.barrier = mpi_barrier;
  boot.destroy = mpi_destroy;
  return pcoll_private_init_with_bootstrap(&boot, comm);
}
