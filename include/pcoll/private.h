/* pcoll's private entry point for bootstraps that live outside libpcoll (libpcoll_mpi's
 * pcoll_init_mpi). Not part of the stable API: it may change with any release, and only
 * libraries built from the same pcoll source tree should call it. A bootstrap is rank,
 * size, and an allgather of byte blobs plus a barrier, given as C callbacks so that no
 * C++ type crosses the library boundary. */
#ifndef PCOLL_PRIVATE_BOOTSTRAP_H
#define PCOLL_PRIVATE_BOOTSTRAP_H

#include <stddef.h>

#include <pcoll/pcoll.h>

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

#ifdef __cplusplus
}
#endif

#endif /* PCOLL_PRIVATE_BOOTSTRAP_H */
