/* pcoll: partial collectives for distributed deep learning.
 *
 * Stable C API (ABI-stable for FFI within a soname: README.md, "ABI"). Persistent allreduce
 * handles in four modes:
 *   PCOLL_MODE_SYNC      the ordinary allreduce;
 *   PCOLL_MODE_SOLO      the first rank to arrive starts the round, the others' progress
 *                        engines join with whatever they have ready (eager-SGD "solo");
 *   PCOLL_MODE_MAJORITY  one initiator per round, drawn from a shared seed;
 *   PCOLL_MODE_QUORUM    a round starts once `quorum` ranks have posted it (counted with
 *                        remote atomics), or after `grace_us` from the first arrival.
 * Late data is carried into the next round the rank joins (PCOLL_LATE_CARRY), never lost.
 * All functions return 0 on success or a PCOLL_ERR_* code; pcoll_last_error() gives the
 * detailed message of the calling thread's last failure. See docs/design.md. */
#ifndef PCOLL_PCOLL_H
#define PCOLL_PCOLL_H

#include <stddef.h>
#include <stdint.h>

/* Symbols of the C API are the only ones libpcoll exports; everything else is hidden. */
#if defined(__GNUC__) || defined(__clang__)
#define PCOLL_API __attribute__((visibility("default")))
#else
#define PCOLL_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define PCOLL_VERSION_MAJOR 0
#define PCOLL_VERSION_MINOR 3

/* Status codes. */
#define PCOLL_SUCCESS 0
#define PCOLL_ERR_INVALID_ARGUMENT 1 /* bad argument, option or environment variable */
#define PCOLL_ERR_INVALID_STATE 2    /* call made in the wrong order */
#define PCOLL_ERR_MISMATCH 3         /* ranks made different collective calls or passed different arguments */
#define PCOLL_ERR_TIMEOUT 4          /* a peer did not answer within the timeout */
#define PCOLL_ERR_PEER_FAILED 5      /* a peer died or reported failure */
#define PCOLL_ERR_TRANSPORT 6        /* the provider (libfabric / UCX) failed */
#define PCOLL_ERR_BOOTSTRAP 7        /* rendezvous failed */
#define PCOLL_ERR_UNSUPPORTED 8      /* the provider cannot do what was asked */
#define PCOLL_ERR_NO_MEMORY 9
#define PCOLL_ERR_PROTOCOL 10        /* malformed data from a peer */
#define PCOLL_ERR_INTERNAL 11

typedef struct pcoll_comm pcoll_comm_t;
typedef struct pcoll_allreduce pcoll_allreduce_t;

typedef enum { PCOLL_MODE_SYNC, PCOLL_MODE_SOLO, PCOLL_MODE_MAJORITY, PCOLL_MODE_QUORUM } pcoll_mode_t;
typedef enum {
  PCOLL_FLOAT32,
  PCOLL_FLOAT64,
  PCOLL_INT32,
  PCOLL_INT64,
  PCOLL_BFLOAT16,
  PCOLL_FLOAT16
} pcoll_dtype_t;
typedef enum { PCOLL_OP_SUM, PCOLL_OP_AVG, PCOLL_OP_MIN, PCOLL_OP_MAX } pcoll_op_t;
typedef enum { PCOLL_LATE_CARRY, PCOLL_LATE_DROP } pcoll_late_t;

typedef struct {
  pcoll_late_t late;   /* default PCOLL_LATE_CARRY */
  uint32_t max_lag;    /* default 1 */
  uint32_t sync_every; /* default 0: never */
  uint64_t seed;       /* majority initiator seed */
  uint32_t timeout_ms; /* default: PCOLL_TIMEOUT_MS or 30000 */
  /* PCOLL_MODE_QUORUM only (0 with the other modes): */
  uint32_t quorum;     /* ranks whose arrival starts a round, 1..P; default 0: floor(P/2) + 1 */
  uint32_t grace_us;   /* default 0: wait for the quorum; else the first arrival also starts the
                          round grace_us after it posted, with fewer ranks if need be */
  uint32_t elastic;    /* default 0; 1: the handle can be resumed on the survivors of a failure
                          (pcoll_allreduce_resume). It keeps what resume needs: the last
                          round's result (count elements of dtype) and the contribution of the
                          round it runs (count accumulation elements), so up to about two
                          more vectors, and one more copy of each per round (memory_bytes in
                          pcoll_allreduce_stats counts them; docs/design.md, "Resuming a
                          handle"). Handles without it keep their memory bound, and resume
                          refuses them. */
} pcoll_allreduce_opts_t;

typedef struct {
  uint64_t round;             /* 0-based round this result belongs to */
  int initiator;              /* rank that activated the round */
  int fresh;                  /* ranks whose data for this round was fresh */
  int caller_late;            /* 1 if the caller's sendbuf missed this round (carried) */
  const uint64_t *fresh_mask; /* ceil(P/64) words, bit r = rank r fresh; valid until the
                                 next call on the handle */
} pcoll_round_info_t;

PCOLL_API void pcoll_allreduce_opts_init(pcoll_allreduce_opts_t *opts);

/* Collective calls (create, destroy, pcoll_barrier, pcoll_finalize, and each handle's
 * start/run and flush) must be made by every rank in the same order. Calls that differ give
 * PCOLL_ERR_MISMATCH on every rank, naming both calls, and fail the communicator
 * (docs/design.md, "Mismatched calls"). */
PCOLL_API int pcoll_init(pcoll_comm_t **comm); /* bootstrap from the environment */
PCOLL_API int pcoll_comm_rank(const pcoll_comm_t *comm);
PCOLL_API int pcoll_comm_size(const pcoll_comm_t *comm);
PCOLL_API int pcoll_finalize(pcoll_comm_t *comm);

/* Collective. A bad argument, or a failure to prepare the handle, on any rank gives every
 * rank the same error naming that rank; differing arguments give PCOLL_ERR_MISMATCH. */
PCOLL_API int pcoll_allreduce_create(pcoll_comm_t *comm, size_t count, pcoll_dtype_t dtype, pcoll_op_t op,
                           pcoll_mode_t mode, const pcoll_allreduce_opts_t *opts /* NULL: defaults */,
                           pcoll_allreduce_t **handle);
PCOLL_API int pcoll_allreduce_start(pcoll_allreduce_t *h, const void *sendbuf, void *recvbuf);
PCOLL_API int pcoll_allreduce_test(pcoll_allreduce_t *h, int *done, pcoll_round_info_t *info);
PCOLL_API int pcoll_allreduce_wait(pcoll_allreduce_t *h, pcoll_round_info_t *info);
PCOLL_API int pcoll_allreduce_run(pcoll_allreduce_t *h, const void *sendbuf, void *recvbuf,
                        pcoll_round_info_t *info); /* start + wait */
PCOLL_API int pcoll_allreduce_flush(pcoll_allreduce_t *h, void *recvbuf, pcoll_round_info_t *info);
/* pcoll_allreduce_test() that first waits up to `timeout_us` microseconds for the round
 * (0: returns at once, as test does). *done = 1 and *info filled once the round is
 * complete; *done = 0 when the time passed first: the round stays outstanding, to be
 * waited for again (a binding loops over short timed waits to look for signals between
 * them). Returns 0 either way; a failure is an error as from wait. */
PCOLL_API int pcoll_allreduce_timedwait(pcoll_allreduce_t *h, uint64_t timeout_us, int *done,
                                        pcoll_round_info_t *info);
/* Collective. Always frees the handle, whatever it returns: an outstanding round is waited
 * for first, then every rank's writes into the handle's memory are fenced before it is
 * released. On a failed communicator nothing is waited for (the error is returned) and the
 * memory stays registered until pcoll_finalize, for peers that have not yet heard of the
 * failure. */
PCOLL_API int pcoll_allreduce_destroy(pcoll_allreduce_t *h);

PCOLL_API const char *pcoll_strerror(int status); /* 0 is success; errors are non-zero */
PCOLL_API const char *pcoll_last_error(void);     /* detailed message, per thread */

/* Additions beyond the core set. */
PCOLL_API const char *pcoll_comm_provider(const pcoll_comm_t *comm); /* e.g. "ucx:shm" */
PCOLL_API const char *pcoll_comm_bootstrap(const pcoll_comm_t *comm); /* e.g. "pcollrun", "pmix" */
PCOLL_API int pcoll_barrier(pcoll_comm_t *comm);
/* Ranks of `comm` known to have failed, ascending: fills up to `max` of them into `ranks`
 * (which may be NULL when max is 0) and sets *n to how many there are. Known here: named
 * as the culprit of a failure this rank detected or another rank reported to it, the
 * first failure and any later one (docs/reliability.md); this rank itself when another rank
 * reported it failed. Empty on a communicator that has not failed, and after a failure
 * that names nobody (a mismatch). Not collective; any thread, also after the failure. */
PCOLL_API int pcoll_comm_failed_ranks(const pcoll_comm_t *comm, int *ranks, int max, int *n);
/* Collective over the live ranks of a communicator on which a failure was reported: the
 * survivors agree on the failed set (also when more ranks fail meanwhile; a rank silent for
 * the timeout is named failed) and get a new communicator, ranked 0..n-1 in the order of
 * their old ranks, with transport endpoints of its own. The old communicator stays failed;
 * pcoll_finalize releases it (either may be finalized first). A rank that the others named
 * failed gets PCOLL_ERR_PEER_FAILED naming its exclusion; PCOLL_ERR_INVALID_STATE where no
 * failure was reported. If a survivor fails while the new communicator is set up, the call
 * returns PCOLL_ERR_PEER_FAILED naming it, and may be made again on `comm`. Handles of
 * `comm` move to the new communicator with pcoll_allreduce_resume (elastic handles), or are
 * created again on it.
 * docs/design.md, "Shrinking to the survivors". */
PCOLL_API int pcoll_comm_shrink(pcoll_comm_t *comm, pcoll_comm_t **survivors);
/* Collective over `survivors` (made by pcoll_comm_shrink from the communicator of
 * `old_handle`, or from survivors of it), for a handle created with opts.elastic = 1: the same handle (count, dtype,
 * op, mode, options; a quorum larger than the new size is capped at it) on `survivors`,
 * with every survivor's carry moved into it, so nothing a survivor contributed is lost.
 * The survivors agree on R, the last round any of them completed. The call the failure
 * interrupted (run, start/test/wait, timedwait or flush; its sendbuf must stay valid until
 * resume returns) is settled: if its round is <= R, `recvbuf` gets that round's result
 * (the one every survivor that has it got), *delivered = 1 and *info (may be NULL) is that
 * round's info, whose fresh_mask is over the old ranks; otherwise that round did not happen
 * on this handle: its sendbuf is carried as a late caller's would be, *delivered = 0, and
 * the application's next call is that round number again, with its next data. A survivor
 * with no call interrupted (a start that returned the failure posted nothing) gets
 * *delivered = 0 and nothing carried. Rounds <= R it has not collected come back at once
 * from its next calls, as for any late caller; the first new round on every survivor is
 * R + 1. What the failed ranks contributed to rounds <= R is in those rounds' results; what
 * they had not contributed is lost. On success the old handle is freed and *resumed is
 * the new one; on failure (a survivor died during the call: PCOLL_ERR_PEER_FAILED) the old
 * handle stays as it was, for another shrink and resume (shrink `survivors`, which then
 * failed, and resume the old handle onto what that shrink returns), or
 * pcoll_allreduce_destroy. PCOLL_ERR_INVALID_ARGUMENT on every survivor for a handle
 * without opts.elastic or a communicator that does not descend by shrinks from the
 * handle's; PCOLL_ERR_MISMATCH when survivors
 * resume different handles. docs/design.md, "Resuming a handle". */
PCOLL_API int pcoll_allreduce_resume(pcoll_allreduce_t *old_handle, pcoll_comm_t *survivors, void *recvbuf,
                                     int *delivered, pcoll_round_info_t *info, pcoll_allreduce_t **resumed);
/* Admits the processes waiting to join `comm` (elastic jobs, docs/reliability.md). Not built
 * yet: returns PCOLL_ERR_UNSUPPORTED with a message saying so and sets *grown to NULL, at
 * once, on every rank (it waits for nobody). */
PCOLL_API int pcoll_comm_grow(pcoll_comm_t *comm, pcoll_comm_t **grown);
/* The rank that may initiate `round` of a PCOLL_MODE_MAJORITY handle: hash(seed, handle,
 * round) mod P, the same on every rank. -1 with pcoll_last_error() set on bad input. */
PCOLL_API int pcoll_allreduce_majority_initiator(const pcoll_allreduce_t *h, uint64_t round);

/* Statistics of one handle since its creation, kept by the engine at every round (always
 * on). The caller sets `size` to sizeof(pcoll_allreduce_stats_t) as it knows it; the
 * library fills that many bytes at most (fields added later go at the end) and sets `size`
 * to what it filled. Per-rank arrays have `nranks` entries (fresh_histogram nranks + 1)
 * and stay valid until the next call on the handle. See docs/observability.md. */
typedef struct {
  size_t size;                     /* in: sizeof as the caller knows it; out: bytes filled */
  int nranks;                      /* P: entries of the per-rank arrays */
  uint64_t rounds;                 /* rounds completed (flush rounds included) */
  uint64_t flushes;                /* flush rounds completed */
  uint64_t flushes_carried;        /* flush rounds that carried this rank's late data */
  uint64_t rounds_initiated;       /* rounds this rank activated */
  uint64_t rounds_while_computing; /* rounds completed while no run/wait/test/flush was in */
  uint64_t blocked_ns;             /* time the caller spent waiting in run/wait/flush */
  uint64_t bytes_written;          /* bytes this rank wrote to its peers */
  uint64_t memory_bytes;           /* memory the handle holds, registered included */
  uint64_t registered_bytes;       /* of which registered with the provider */
  const uint64_t *fresh_rounds;    /* [r]: rounds in which rank r was fresh */
  const uint64_t *late_rounds;     /* [r]: rounds in which rank r was late (flushes excluded);
                                      late_rounds[me]: rounds whose info said caller_late */
  const uint64_t *longest_late_run;/* [r]: most consecutive rounds rank r was late */
  const uint64_t *fresh_histogram; /* [k], k = 0..P: rounds in which k ranks were fresh */
  const char *plan;                /* the reduction plan this handle runs: "recursive_doubling",
                                      "rabenseifner", "direct", "node_leader", "node_rails" (docs/design.md) */
  uint64_t bytes_read;             /* bytes this rank read from peers' memory mapped here
                                      (the direct plan); bytes_written counts none of them */
  uint64_t bytes_network;          /* bytes this rank wrote to ranks on other nodes (a node:
                                      the ranks of one host name and boot id) */
  uint64_t messages_network;       /* writes, notices and atomics it sent to those ranks */
  uint64_t memory_traffic_bytes;   /* bytes this rank's rounds read plus wrote in memory: the
                                      join, the plan's writes (read here, written at the peer),
                                      reductions and copies, and the hand-over of results
                                      (docs/design.md, "Memory traffic of a round") */
} pcoll_allreduce_stats_t;

/* Local, not collective; does not wait for anything but the engine lock. */
PCOLL_API int pcoll_allreduce_stats(const pcoll_allreduce_t *h, pcoll_allreduce_stats_t *stats);

/* The names tools and bindings print and accept for the enums: "float32", "float64",
 * "int32", "int64", "bfloat16", "float16"; "sum", "avg", "min", "max"; "sync", "solo",
 * "majority", "quorum"; "carry", "drop". NULL for a value outside the enum. */
PCOLL_API const char *pcoll_dtype_name(pcoll_dtype_t dtype);
PCOLL_API const char *pcoll_op_name(pcoll_op_t op);
PCOLL_API const char *pcoll_mode_name(pcoll_mode_t mode);
PCOLL_API const char *pcoll_late_name(pcoll_late_t late);
/* The value named `name` (as above, case-sensitive) into *value: 0, or
 * PCOLL_ERR_INVALID_ARGUMENT with pcoll_last_error() naming the accepted names. */
PCOLL_API int pcoll_dtype_from_name(const char *name, pcoll_dtype_t *value);
PCOLL_API int pcoll_op_from_name(const char *name, pcoll_op_t *value);
PCOLL_API int pcoll_mode_from_name(const char *name, pcoll_mode_t *value);
PCOLL_API int pcoll_late_from_name(const char *name, pcoll_late_t *value);
/* Bytes per element of `dtype` as the caller stores it (2 for the 16-bit types); 0 for a
 * value outside the enum. */
PCOLL_API size_t pcoll_dtype_size(pcoll_dtype_t dtype);

#ifdef __cplusplus
}
#endif

#endif /* PCOLL_PCOLL_H */
