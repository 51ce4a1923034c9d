/* rv_comm.h: the communicator, one table of point-to-point and collective
 * operations with three backends behind it:
 *   - "local": the ranks are threads of one process (rv_local_run), messages move
 *     by one memcpy between the ranks' buffers; the single-machine default;
 *   - "mpi":   OpenMPI processes (mpiexec -n N), on one or many machines;
 *   - "nccl":  CUDA devices, bootstrapped over a local or MPI communicator.
 *
 * Every blocking call (wait, collectives, barrier, split) has a deadline: the
 * communicator's timeout (RINGVIT_COMM_TIMEOUT seconds, default 120, changed with
 * rv_comm_set_timeout). A peer that left, returned early or never sends gives
 * RV_ERR_TIMEOUT (or RV_ERR_COMM when the peer is known to be gone) with a message
 * naming this rank, the operation and the peer, e.g.
 *   "rank 2: irecv from rank 1 (tag 7, 1048576 bytes): no message within 2.0 s".
 * After such an error the communicator is broken: free it, and under MPI end the
 * job (rv_comm_abort); the library itself never exits or aborts on its own.
 *
 * Buffers are raw bytes for point-to-point, host memory for "local" and "mpi",
 * device memory for "nccl", and either kind on a local run with a device copy
 * or an mpi communicator staged through host memory (rv_comm.device_memory). A
 * communicator is used by one thread at a time (each local rank is its own
 * thread with its own rv_comm). */
#ifndef RV_COMM_H
#define RV_COMM_H

#include <stddef.h>

#include "rv_api.h"
#include "rv_clock.h"
#include "rv_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RV_COMM_DEFAULT_TIMEOUT_S 120.0
#define RV_COMM_TIMEOUT_ENV "RINGVIT_COMM_TIMEOUT"
/* User tags are 0..RV_COMM_TAG_MAX (the MPI standard guarantees 32767). */
#define RV_COMM_TAG_MAX 32767
/* split color of a rank that joins no sub-communicator (it gets NULL). */
#define RV_COMM_UNDEFINED (-1)

typedef enum rv_comm_dtype {
    RV_COMM_F32 = 0,
    RV_COMM_F64 = 1,
} rv_comm_dtype;

typedef struct rv_comm rv_comm;
/* A pending isend/irecv: completed and released by rv_comm_wait / rv_comm_test /
 * rv_comm_waitall, or cancelled and released by rv_comm_request_free. */
typedef struct rv_comm_request rv_comm_request;

/* The table. The rv_comm_* wrappers below validate arguments, turn the timeout
 * into a deadline and dispatch here; call them rather than the entries. Every
 * deadline is absolute, in seconds of rv_clock_s() (rv_clock.h). */
struct rv_comm {
    const char *name; /* "local", "mpi", "nccl" */
    void *ctx;        /* backend-private state */
    int rank, size;   /* this rank in [0, size) */
    int world_rank;   /* rank in the root communicator this one was split from */
    double timeout_s; /* deadline of each blocking call, seconds (> 0) */
    int device_memory; /* 1: buffers are CUDA device memory (nccl, a local run
                        * with a device copy, staged mpi), 0: host */
    /* Copies between two buffers of this communicator's kind; NULL: memcpy. Set on
     * local communicators of rv_local_run_copy and on staged mpi ones. Returns 0,
     * or -1 with the message in rv_last_error(). */
    int (*move)(void *dst, const void *src, size_t bytes);

    rv_status (*isend)(rv_comm *c, const void *buf, size_t bytes, int peer, int tag,
                       rv_comm_request **req);
    rv_status (*irecv)(rv_comm *c, void *buf, size_t bytes, int peer, int tag,
                       rv_comm_request **req);
    /* *done = 1 once complete; never blocks; does not release req. */
    rv_status (*test)(rv_comm *c, rv_comm_request *req, int *done);
    /* Blocks until complete or the deadline; does not release req. */
    rv_status (*wait)(rv_comm *c, rv_comm_request *req, double deadline);
    /* Cancels req if still pending and releases it. */
    void (*request_free)(rv_comm *c, rv_comm_request *req);
    rv_status (*sendrecv)(rv_comm *c, const void *sendbuf, size_t send_bytes, int dst,
                          void *recvbuf, size_t recv_bytes, int src, int tag,
                          double deadline);
    /* Sum over ranks, element by element; sendbuf == recvbuf is in place. */
    rv_status (*allreduce)(rv_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                           rv_comm_dtype dtype, double deadline);
    /* recvbuf (size, bytes): rank r's sendbuf (bytes) lands at recvbuf + r * bytes. */
    rv_status (*allgather)(rv_comm *c, const void *sendbuf, void *recvbuf, size_t bytes,
                           double deadline);
    /* sendbuf, recvbuf (size, bytes): block j of sendbuf goes to rank j and lands
     * there at block (this rank); the buffers must not overlap. */
    rv_status (*alltoall)(rv_comm *c, const void *sendbuf, void *recvbuf, size_t bytes,
                          double deadline);
    rv_status (*barrier)(rv_comm *c, double deadline);
    rv_status (*split)(rv_comm *c, int color, int key, double deadline, rv_comm **out);
    /* Ends the whole run at once (every rank's blocking calls fail; MPI_Abort). */
    rv_status (*abort)(rv_comm *c, int code);
    void (*destroy)(rv_comm *c);
    /* Payload bytes this rank has handed to others through the rv_comm_* calls
     * since creation (or since the caller last set it to 0): point-to-point sends,
     * and (size - 1) times its share of an allgather, alltoall or allreduce. */
    double sent_bytes;
    /* Launches the isend/irecv posted since the last wait, test or collective now
     * (nccl, and local in strict mode, hold them until then); NULL: nothing held. */
    rv_status (*start)(rv_comm *c);
};

/* ---- creation ------------------------------------------------------------------- */

/* The body of one local rank; its status is the rank's result. */
typedef rv_status (*rv_local_fn)(rv_comm *comm, void *arg);

/* Runs fn on nranks threads (1..1024), each with its own "local" communicator of
 * that size, and returns when all have returned: RV_OK, or the first failing
 * rank's status with its message (rv_last_error()). A rank that returns is gone:
 * peers waiting on it get RV_ERR_COMM at once, so one rank failing early never
 * hangs the others. The communicator is freed when fn returns; free the ones
 * split from it, and complete or free every request, before returning.
 * RINGVIT_COMM_STRICT=1 gives the ranks NCCL's semantics (for tests of schedules
 * meant for NCCL): posts go out as one group at the next wait, test, start or
 * collective, a group completes as a whole, sends above RINGVIT_COMM_STRICT_EAGER
 * bytes (default 65536) complete only once received, and messages between a pair
 * match in post order whatever their tags (another tag or size is an error). */
RV_API rv_status rv_local_run(int nranks, rv_local_fn fn, void *arg);

/* Copies bytes from src to dst and returns when done: 0, or -1 with the message in
 * rv_last_error(). rv_cuda_copy_sync (kernels/rv_cuda.h) is one. */
typedef int (*rv_comm_copy_fn)(void *dst, const void *src, size_t bytes);

/* rv_local_run for ranks whose buffers may be device memory (several ranks on
 * one GPU, each with its own stream): every message moves with copy instead of
 * memcpy (rv_cuda_copy_sync takes host and device pointers alike), and the
 * communicators report device_memory = 1. Point-to-point, allgather, alltoall,
 * barrier and split take either kind of buffer; allreduce adds on the host, so
 * its buffers must be host memory. */
RV_API rv_status rv_local_run_copy(int nranks, rv_local_fn fn, void *arg,
                                   rv_comm_copy_fn copy);

/* An "mpi" communicator over every process (a duplicate of MPI_COMM_WORLD with
 * MPI_ERRORS_RETURN). Calls MPI_Init_thread (MPI_THREAD_MULTIPLE) first when the
 * program has not; then
 * rv_comm_mpi_finalize() ends MPI. RV_ERR_UNSUPPORTED in a build without MPI.
 * RINGVIT_COMM_MPI_CHUNK (bytes, default 1 GiB) splits larger messages into
 * several MPI calls (MPI counts are int); small values exist for the tests. */
RV_API rv_status rv_comm_mpi_world(rv_comm **out);
/* 1 when MPI runs with MPI_THREAD_MULTIPLE (rv_comm_mpi_world asks for it), so
 * threads of a process may each use their own mpi communicator at once. */
RV_API int rv_comm_mpi_thread_multiple(void);
/* MPI_Finalize, when rv_comm_mpi_world called MPI_Init; else nothing. Free every
 * mpi communicator first. */
RV_API rv_status rv_comm_mpi_finalize(void);
/* Lets mpi communicator c take CUDA device memory with an MPI that cannot read
 * it: from now on every payload is staged through host memory with copy (which
 * must take host and device pointers alike, as rv_cuda_copy_sync does): a send
 * copies the caller's buffer to a host buffer of its own when posted, a receive
 * lands in one and is copied to the caller's buffer when it completes (in wait
 * or test; so a receive's buffer is written only then), and allreduce,
 * allgather and alltoall copy their input to the host and their result back.
 * Host buffers keep working (one more copy). c->device_memory becomes 1 and
 * c->move copy; communicators split from c are staged too. (A CUDA-aware MPI
 * would not need it; ringvit does not assume one.) RV_ERR_INVALID for a
 * communicator of another backend, RV_ERR_UNSUPPORTED in a build without MPI. */
RV_API rv_status rv_comm_mpi_stage_device(rv_comm *c, rv_comm_copy_fn copy);

/* An "nccl" communicator with the same ranks as bootstrap (local or mpi; rank 0's
 * ncclUniqueId travels over it), on CUDA device `device` (-1: rank % devices).
 * Buffers are device memory; operations run on the communicator's own stream.
 * isend/irecv posted since the last wait/test are launched together, as one NCCL
 * group, at the next wait, test or collective: post every send and receive of an
 * exchange before waiting on any. RV_ERR_UNSUPPORTED in a
 * build without NCCL, or where libnccl.so.2 cannot be loaded: NCCL is not linked
 * but loaded by the first call, so programs that never call this need no NCCL. */
RV_API rv_status rv_comm_nccl_create(rv_comm *bootstrap, int device, rv_comm **out);

/* Which backends this build holds: "local", "mpi", "nccl". */
RV_API int rv_comm_backend_built(const char *name);

RV_API void rv_comm_free(rv_comm **c);

/* ---- timeouts --------------------------------------------------------------------- */

/* RINGVIT_COMM_TIMEOUT in seconds, or 120 when unset; RV_ERR_INVALID when set to
 * anything but a positive number. Every new communicator starts from it. */
RV_API rv_status rv_comm_default_timeout(double *seconds);
RV_API rv_status rv_comm_set_timeout(rv_comm *c, double seconds); /* this communicator only */

/* ---- operations (the table, with checks and the deadline) -------------------------- */

static inline int rv_comm_rank(const rv_comm *c) { return c->rank; }
static inline int rv_comm_size(const rv_comm *c) { return c->size; }

/* bytes may be 0. The buffer must stay untouched (send) / unread (recv) until the
 * request completes. A receive takes the next message from peer with that tag
 * (messages between a pair with one tag arrive in order); it must be at least as
 * large as the message, and a larger message is an error (mpi: a message over
 * the chunk size must be received with its exact size; nccl: tags are not sent,
 * messages between a pair match in post order).
 * Progress: posting never blocks. On "local" the data moves in the receiver's
 * next wait or test (any request of that rank), on "mpi" in MPI's progress
 * (wait/test), on "nccl" on the GPU once launched; so post a transfer, compute,
 * then wait (or call rv_comm_test now and then during a long computation). */
RV_API rv_status rv_comm_isend(rv_comm *c, const void *buf, size_t bytes, int peer, int tag,
                               rv_comm_request **req);
RV_API rv_status rv_comm_irecv(rv_comm *c, void *buf, size_t bytes, int peer, int tag,
                               rv_comm_request **req);
/* Waits for *req within the communicator's timeout and releases it (*req = NULL),
 * on success and on error alike. A NULL *req is complete. */
RV_API rv_status rv_comm_wait(rv_comm_request **req);
/* Waits for every non-NULL reqs[i] within one timeout and releases them all; the
 * first error is returned and the rest are cancelled. */
RV_API rv_status rv_comm_waitall(rv_comm_request **reqs, int n);
/* *done = 1 and *req released when complete; *done = 0 otherwise. An error
 * releases *req too. */
RV_API rv_status rv_comm_test(rv_comm_request **req, int *done);
/* Cancels (if pending) and releases *req; NULL is fine. */
RV_API void rv_comm_request_free(rv_comm_request **req);

/* Launches this rank's posted isend/irecv now, as one group, without waiting (on
 * nccl, and local in strict mode, they otherwise go out at the next wait, test or
 * collective). Call it after posting an exchange that must be under way before
 * this rank posts sends that depend on a peer's progress. */
RV_API rv_status rv_comm_start(rv_comm *c);

/* Send to dst and receive from src at once (the ring shift). */
RV_API rv_status rv_comm_sendrecv(rv_comm *c, const void *sendbuf, size_t send_bytes, int dst,
                                  void *recvbuf, size_t recv_bytes, int src, int tag);
RV_API rv_status rv_comm_allreduce(rv_comm *c, const void *sendbuf, void *recvbuf,
                                   size_t count, rv_comm_dtype dtype);
RV_API rv_status rv_comm_allgather(rv_comm *c, const void *sendbuf, void *recvbuf,
                                   size_t bytes);
RV_API rv_status rv_comm_alltoall(rv_comm *c, const void *sendbuf, void *recvbuf,
                                  size_t bytes);
RV_API rv_status rv_comm_barrier(rv_comm *c);
/* Collective: ranks with the same color form a sub-communicator, ordered by key
 * then by rank; color RV_COMM_UNDEFINED gives *out = NULL. The new communicator
 * takes this one's timeout. For a dp x cp mesh of rank = dp_index * cp + cp_index:
 * split(rank / cp, rank) is the cp group, split(rank % cp, rank) the dp group. */
RV_API rv_status rv_comm_split(rv_comm *c, int color, int key, rv_comm **out);
/* The dp x cp mesh: with cp ranks per context-parallel group (size % cp == 0) and
 * rank = dp_index * cp + cp_index, *cp_comm holds the cp consecutive ranks of this
 * rank's sequence (rank cp_index there) and *dp_comm the size / cp ranks with the
 * same cp_index (rank dp_index there). Both are freed by the caller. */
RV_API rv_status rv_comm_mesh_split(rv_comm *c, int cp, rv_comm **cp_comm, rv_comm **dp_comm);
RV_API rv_status rv_comm_abort(rv_comm *c, int code);

RV_API size_t rv_comm_dtype_size(rv_comm_dtype dtype);
RV_API const char *rv_comm_dtype_name(rv_comm_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif
