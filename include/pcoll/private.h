/* pcoll's private entry points for the libraries built from this source tree on top of
 * libpcoll: libpcoll_mpi (pcoll_init_mpi, a bootstrap that lives outside libpcoll) and the
 * Python extension (creation arguments it could not parse). Not part of the stable API:
 * they may change with any release, and only libraries built from the same pcoll source
 * tree should call them. A bootstrap is rank, size, and an allgather of byte blobs plus a
 * barrier, given as C callbacks so that no C++ type crosses the library boundary. */
#ifndef PCOLL_PRIVATE_H
#define PCOLL_PRIVATE_H

#include <stddef.h>

#include "pcoll/pcoll.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int rank;
  int size;
  const char *name; /* for pcoll_comm_bootstrap(): "mpi" */
  void *context;    /* passed to every callback */
  /* Collective: every rank passes `bytes` bytes at `mine`; on return sizes[r] holds rank r's
   * blob size and *data (malloc'ed, freed by the caller of the callback) the blobs
   * concatenated in rank order. 0 on success, else a PCOLL_ERR_* status with a message
   * written to error (error_bytes bytes, NUL-terminated). */
  int (*allgather)(void *context, const void *mine, size_t bytes, size_t *sizes, void **data,
                   char *error, size_t error_bytes);
  int (*barrier)(void *context, char *error, size_t error_bytes);
  /* Releases the context: called once, when the communicator is finalized or init fails. */
  void (*destroy)(void *context);
} pcoll_private_bootstrap_t;

/* pcoll_init() over `boot` (copied; its context is owned by the communicator from here on,
 * even on failure). Same status contract as pcoll_init(). */
PCOLL_API int pcoll_private_init_with_bootstrap(const pcoll_private_bootstrap_t *boot,
                                                pcoll_comm_t **comm);

/* Sets the calling thread's pcoll_last_error() and returns `status`: lets an outside
 * bootstrap report its own failure the way every pcoll call does. */
PCOLL_API int pcoll_private_set_error(int status, const char *message);

/* pcoll_allreduce_create() on a rank whose caller got an argument wrong that the C
 * arguments cannot express (a Python dtype name that is not one): `invalid_here` (not NULL,
 * not empty) enters the collective creation as this rank's argument error, so that every
 * rank returns PCOLL_ERR_INVALID_ARGUMENT naming this rank, as for a bad C argument. The
 * other arguments are those the caller could parse (defaults for the rest); *handle is
 * NULL on return. */
PCOLL_API int pcoll_private_allreduce_create_refused(pcoll_comm_t *comm, size_t count, const char *invalid_here,
                                                     pcoll_allreduce_t **handle);

/* Leaves the job at once, for a program that ends without pcoll_finalize (a Python
 * interpreter exiting on an exception or Ctrl-C): fails the communicator naming this rank,
 * with `reason` (may be NULL) in this rank's log, and tells every peer, so that their
 * outstanding and later calls return PCOLL_ERR_PEER_FAILED instead of waiting for this
 * rank. The caller then destroys its handles and calls pcoll_finalize, which on a failed
 * communicator waits for nobody and releases the provider's resources (shared memory). */
PCOLL_API int pcoll_private_comm_abandon(pcoll_comm_t *comm, const char *reason);

/* Installs `check` (NULL: none) for the calling thread: pcoll's blocking waits for peers in
 * pcoll_init (the store bootstrap), collective creation, destroy, pcoll_barrier and
 * pcoll_finalize call it at most every 10 ms, and a nonzero answer ends the call with
 * PCOLL_ERR_INVALID_STATE ("interrupted by the application"); an interrupted collective
 * fails the communicator naming this rank, so its peers stop waiting too. For a binding
 * whose signal handlers run only between its own calls (Python's Ctrl-C). */
PCOLL_API void pcoll_private_set_interrupt_check(int (*check)(void));

#ifdef __cplusplus
}
#endif

#endif /* PCOLL_PRIVATE_H */
