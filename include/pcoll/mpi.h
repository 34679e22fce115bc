/* pcoll over an MPI job: bootstrap a communicator from an MPI communicator instead of the
 * environment, for programs that already run under mpirun and use MPI themselves.
 * Link with -lpcoll_mpi (pkg-config pcoll-mpi). pcoll.h stays free of mpi.h. */
#ifndef PCOLL_MPI_H
#define PCOLL_MPI_H

#include <mpi.h>

#include "pcoll/pcoll.h"

#if defined(__GNUC__) || defined(__clang__)
#define PCOLL_MPI_API __attribute__((visibility("default")))
#else
#define PCOLL_MPI_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Collective over `mpi_comm` (MPI must be initialised). Ranks and size are those of
 * `mpi_comm`; pcoll duplicates it, so its rendezvous traffic never matches the caller's
 * messages. The duplicate is freed by pcoll_finalize(), which must come before MPI_Finalize.
 * Same status contract as pcoll_init(). */
PCOLL_MPI_API int pcoll_init_mpi(MPI_Comm mpi_comm, pcoll_comm_t **comm);

#ifdef __cplusplus
}
#endif

#endif /* PCOLL_MPI_H */
