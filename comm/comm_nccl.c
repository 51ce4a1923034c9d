/* comm_nccl.c: the "nccl" communicator backend: CUDA device buffers moved by
 * NCCL, one communicator per rank, bootstrapped over a local or MPI communicator
 * (rank 0's ncclUniqueId is allgathered over it).
 *
 * The NCCL communicator is nonblocking (config.blocking = 0), so no NCCL call can
 * hang the host: every call that answers ncclInProgress is polled against the
 * deadline. Operations run on the communicator's own stream; completion is a CUDA
 * event polled with cudaEventQuery until the deadline, and a deadline that passes
 * aborts the NCCL communicator (ncclCommAbort), which frees the stuck kernels.
 *
 * NCCL matches a send only with a receive issued concurrently, so isend/irecv do
 * not launch: they queue, and the queue goes out as one ncclGroupStart/End at the
 * next wait, test or collective. Tags are not sent; between a pair of ranks the
 * messages match in post order.
 *
 * NCCL is not linked: every NCCL call goes through the rv_nccl table, which
 * rv_comm_nccl_create fills on first use from libnccl.so.2 (nccl_dl.c), so the
 * library runs without NCCL installed until an NCCL communicator is asked for. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_impl.h"

#ifdef RINGVIT_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include "nccl_dl.h"

typedef struct nccl_req nccl_req;

typedef struct nccl_ctx {
    ncclComm_t comm;
    cudaStream_t stream;
    int device;
    int aborted;       /* ncclCommAbort was called: every later call fails */
    float *scratch;    /* (1) device float for the barrier */
    nccl_req **queue;  /* (nqueue) isend/irecv posted since the last launch */
    int nqueue, queue_cap;
} nccl_ctx;

struct nccl_req {
    rv_comm_request base;
    int is_send, peer, tag;
    size_t bytes;
    void *buf;        /* device memory (bytes) */
    int launched;     /* its group went out and `done` was recorded after it */
    cudaEvent_t done;
};

static rv_status nccl_make_comm(ncclComm_t comm, int device, int world_rank,
                                double timeout_s, rv_comm **out);

static void poll_pause(long *polls)
{
    if ((*polls)++ < 64)
        return;
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
}

static rv_status cuda_fail(rv_comm *c, cudaError_t e, const char *what)
{
    return rv_fail(RV_ERR_BACKEND, "rank %d: %s: CUDA error: %s", c->rank, what,
                   cudaGetErrorString(e));
}

static rv_status nccl_error(rv_comm *c, ncclResult_t rc, const char *what)
{
    nccl_ctx *x = c->ctx;
    const char *last = x && x->comm ? rv_nccl.GetLastError(x->comm) : "";
    return rv_fail(rc == ncclRemoteError ? RV_ERR_COMM : RV_ERR_BACKEND, "rank %d: %s: %s%s%s",
                   c->rank, what, rv_nccl.GetErrorString(rc), last && last[0] ? ": " : "",
                   last ? last : "");
}

/* Aborts the NCCL communicator (the only way to stop its kernels) after a timeout. */
static void nccl_abort_comm(nccl_ctx *x)
{
    if (x->aborted || !x->comm)
        return;
    rv_nccl.CommAbort(x->comm);
    x->aborted = 1;
}

/* Polls comm's asynchronous state while it is ncclInProgress (rc is the answer of
 * the call just made on it) until the deadline. */
static ncclResult_t settle(ncclComm_t comm, ncclResult_t rc, double deadline, int *timed_out)
{
    long polls = 0;
    *timed_out = 0;
    while (rc == ncclInProgress) {
        if (rv_clock_s() >= deadline) {
            *timed_out = 1;
            break;
        }
        poll_pause(&polls);
        if (rv_nccl.CommGetAsyncError(comm, &rc) != ncclSuccess)
            break;
    }
    return rc;
}

/* settle() for a call on this rank's communicator, turned into a status. */
static rv_status settle_call(rv_comm *c, ncclResult_t rc, double deadline, const char *what)
{
    nccl_ctx *x = c->ctx;
    int timed_out = 0;
    rc = settle(x->comm, rc, deadline, &timed_out);
    if (timed_out) {
        nccl_abort_comm(x);
        return rv_fail(RV_ERR_TIMEOUT, "rank %d: %s: not accepted within %.1f s; NCCL "
                       "communicator aborted", c->rank, what, c->timeout_s);
    }
    return rc == ncclSuccess ? RV_OK : nccl_error(c, rc, what);
}

static rv_status check_usable(rv_comm *c, const char *what)
{
    nccl_ctx *x = c->ctx;
    if (x->aborted)
        return rv_fail(RV_ERR_COMM, "rank %d: %s: the NCCL communicator was aborted after an "
                       "earlier error", c->rank, what);
    cudaError_t e = cudaSetDevice(x->device);
    return e == cudaSuccess ? RV_OK : cuda_fail(c, e, what);
}

/* ---- point-to-point ---------------------------------------------------------------- */

/* Launches the queued isend/irecv as one group and records each one's event. */
static rv_status launch_queue(rv_comm *c, double deadline)
{
    nccl_ctx *x = c->ctx;
    rv_status st = RV_OK;
    if (x->nqueue == 0)
        return RV_OK;
    if ((st = check_usable(c, "send/recv group")) != RV_OK)
        goto end;
    ncclResult_t rc = rv_nccl.GroupStart();
    for (int i = 0; i < x->nqueue && rc == ncclSuccess; i++) {
        nccl_req *r = x->queue[i];
        rc = r->is_send
                 ? rv_nccl.Send(r->buf, r->bytes, ncclUint8, r->peer, x->comm, x->stream)
                 : rv_nccl.Recv(r->buf, r->bytes, ncclUint8, r->peer, x->comm, x->stream);
    }
    ncclResult_t rc_end = rv_nccl.GroupEnd();
    if (rc == ncclSuccess || rc == ncclInProgress)
        rc = rc_end;
    if ((st = settle_call(c, rc, deadline, "send/recv group")) != RV_OK)
        goto end;
    for (int i = 0; i < x->nqueue; i++) {
        cudaError_t e = cudaEventRecord(x->queue[i]->done, x->stream);
        if (e != cudaSuccess) {
            st = cuda_fail(c, e, "send/recv group: event");
            goto end;
        }
        x->queue[i]->launched = 1;
    }
end:
    x->nqueue = 0; /* a failed group is not retried: its requests fail below */
    return st;
}

/* rv_comm_start: the queued isend/irecv go out now, as one group, not waited for. */
static rv_status nccl_start(rv_comm *c)
{
    return launch_queue(c, rv_clock_s() + c->timeout_s);
}

static rv_status nccl_post(rv_comm *c, int is_send, void *buf, size_t bytes, int peer,
                           int tag, rv_comm_request **out)
{
    nccl_ctx *x = c->ctx;
    char what[160];
    rv_comm_describe_p2p(what, sizeof what, is_send, peer, tag, bytes);
    rv_status st = check_usable(c, what);
    if (st != RV_OK)
        return st;
    nccl_req *r = calloc(1, sizeof *r);
    if (!r)
        return rv_fail(RV_ERR_NOMEM, "rank %d: %s: out of memory", c->rank, what);
    *r = (nccl_req){{c}, is_send, peer, tag, bytes, buf, 0, NULL};
    cudaError_t e = cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        free(r);
        return cuda_fail(c, e, what);
    }
    if (x->nqueue == x->queue_cap) {
        int cap = x->queue_cap ? 2 * x->queue_cap : 16;
        nccl_req **q = realloc(x->queue, sizeof *q * (size_t)cap);
        if (!q) {
            cudaEventDestroy(r->done);
            free(r);
            return rv_fail(RV_ERR_NOMEM, "rank %d: %s: out of memory", c->rank, what);
        }
        x->queue = q;
        x->queue_cap = cap;
    }
    x->queue[x->nqueue++] = r;
    *out = &r->base;
    return RV_OK;
}

static rv_status nccl_isend(rv_comm *c, const void *buf, size_t bytes, int peer, int tag,
                            rv_comm_request **out)
{
    return nccl_post(c, 1, (void *)buf, bytes, peer, tag, out);
}

static rv_status nccl_irecv(rv_comm *c, void *buf, size_t bytes, int peer, int tag,
                            rv_comm_request **out)
{
    return nccl_post(c, 0, buf, bytes, peer, tag, out);
}

/* Completion of an event recorded on the stream, with NCCL's own errors. */
static rv_status event_state(rv_comm *c, cudaEvent_t ev, const char *what, int *done)
{
    nccl_ctx *x = c->ctx;
    ncclResult_t async = ncclSuccess;
    *done = 0;
    if (rv_nccl.CommGetAsyncError(x->comm, &async) == ncclSuccess && async != ncclSuccess &&
        async != ncclInProgress)
        return nccl_error(c, async, what);
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess)
        *done = 1;
    else if (e != cudaErrorNotReady)
        return cuda_fail(c, e, what);
    return RV_OK;
}

/* Polls ev until it completes or the deadline, which aborts the communicator. */
static rv_status event_wait(rv_comm *c, cudaEvent_t ev, double deadline, const char *what,
                            const char *late)
{
    nccl_ctx *x = c->ctx;
    long polls = 0;
    char who[64];
    for (;;) {
        int done = 0;
        rv_status st = event_state(c, ev, what, &done);
        if (st != RV_OK || done)
            return st;
        if (rv_clock_s() >= deadline)
            break;
        poll_pause(&polls);
    }
    nccl_abort_comm(x);
    rv_comm_who(c, who, sizeof who);
    return rv_fail(RV_ERR_TIMEOUT, "%s: %s: %s within %.1f s; NCCL communicator aborted", who,
                   what, late, c->timeout_s);
}

static rv_status nccl_test(rv_comm *c, rv_comm_request *req, int *done)
{
    nccl_req *r = (nccl_req *)req;
    char what[160];
    rv_comm_describe_p2p(what, sizeof what, r->is_send, r->peer, r->tag, r->bytes);
    *done = 0;
    rv_status st = launch_queue(c, rv_clock_s() + c->timeout_s);
    if (st != RV_OK)
        return st;
    if (!r->launched)
        return rv_fail(RV_ERR_COMM, "rank %d: %s: its send/recv group failed", c->rank, what);
    return event_state(c, r->done, what, done);
}

static rv_status nccl_wait(rv_comm *c, rv_comm_request *req, double deadline)
{
    nccl_req *r = (nccl_req *)req;
    char what[160];
    rv_comm_describe_p2p(what, sizeof what, r->is_send, r->peer, r->tag, r->bytes);
    rv_status st = launch_queue(c, deadline);
    if (st != RV_OK)
        return st;
    if (!r->launched)
        return rv_fail(RV_ERR_COMM, "rank %d: %s: its send/recv group failed", c->rank, what);
    return event_wait(c, r->done, deadline, what, r->is_send ? "not received" : "no message");
}

static void nccl_request_free(rv_comm *c, rv_comm_request *req)
{
    nccl_ctx *x = c->ctx;
    nccl_req *r = (nccl_req *)req;
    for (int i = 0; i < x->nqueue; i++) /* never launched: just drop it */
        if (x->queue[i] == r) {
            memmove(&x->queue[i], &x->queue[i + 1], sizeof *x->queue * (size_t)(x->nqueue - i - 1));
            x->nqueue--;
            break;
        }
    cudaEventDestroy(r->done);
    free(r);
}

/* ---- collectives -------------------------------------------------------------------- */

/* Records an event after what was just enqueued and waits for it. */
static rv_status stream_wait(rv_comm *c, double deadline, const char *what)
{
    nccl_ctx *x = c->ctx;
    cudaEvent_t ev = NULL;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e != cudaSuccess)
        return cuda_fail(c, e, what);
    rv_status st = RV_OK;
    if ((e = cudaEventRecord(ev, x->stream)) != cudaSuccess)
        st = cuda_fail(c, e, what);
    else
        st = event_wait(c, ev, deadline, what, "not complete");
    cudaEventDestroy(ev);
    return st;
}

static rv_status coll_begin(rv_comm *c, double deadline, const char *what)
{
    rv_status st = check_usable(c, what);
    return st != RV_OK ? st : launch_queue(c, deadline);
}

static rv_status nccl_allreduce(rv_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                                rv_comm_dtype dtype, double deadline)
{
    nccl_ctx *x = c->ctx;
    char what[96];
    snprintf(what, sizeof what, "allreduce of %zu %s", count, rv_comm_dtype_name(dtype));
    rv_status st = coll_begin(c, deadline, what);
    if (st != RV_OK)
        return st;
    ncclResult_t rc = rv_nccl.AllReduce(sendbuf, recvbuf, count,
                                        dtype == RV_COMM_F32 ? ncclFloat32 : ncclFloat64,
                                        ncclSum, x->comm, x->stream);
    if ((st = settle_call(c, rc, deadline, what)) != RV_OK)
        return st;
    return stream_wait(c, deadline, what);
}

static rv_status nccl_allgather(rv_comm *c, const void *sendbuf, void *recvbuf, size_t bytes,
                                double deadline)
{
    nccl_ctx *x = c->ctx;
    char what[96];
    snprintf(what, sizeof what, "allgather of %zu bytes per rank", bytes);
    rv_status st = coll_begin(c, deadline, what);
    if (st != RV_OK)
        return st;
    ncclResult_t rc = rv_nccl.AllGather(sendbuf, recvbuf, bytes, ncclUint8, x->comm, x->stream);
    if ((st = settle_call(c, rc, deadline, what)) != RV_OK)
        return st;
    return stream_wait(c, deadline, what);
}

static rv_status nccl_alltoall(rv_comm *c, const void *sendbuf, void *recvbuf, size_t bytes,
                               double deadline)
{
    nccl_ctx *x = c->ctx;
    char what[96];
    snprintf(what, sizeof what, "alltoall of %zu bytes per rank", bytes);
    rv_status st = coll_begin(c, deadline, what);
    if (st != RV_OK)
        return st;
    const char *s = sendbuf;
    char *d = recvbuf;
    size_t own = (size_t)c->rank * bytes;
    cudaError_t e = bytes ? cudaMemcpyAsync(d + own, s + own, bytes, cudaMemcpyDeviceToDevice,
                                            x->stream)
                          : cudaSuccess;
    if (e != cudaSuccess)
        return cuda_fail(c, e, what);
    ncclResult_t rc = rv_nccl.GroupStart();
    for (int p = 0; p < c->size && rc == ncclSuccess; p++) {
        if (p == c->rank)
            continue;
        rc = rv_nccl.Send(s + (size_t)p * bytes, bytes, ncclUint8, p, x->comm, x->stream);
        if (rc == ncclSuccess)
            rc = rv_nccl.Recv(d + (size_t)p * bytes, bytes, ncclUint8, p, x->comm, x->stream);
    }
    ncclResult_t rc_end = rv_nccl.GroupEnd();
    if (rc == ncclSuccess || rc == ncclInProgress)
        rc = rc_end;
    if ((st = settle_call(c, rc, deadline, what)) != RV_OK)
        return st;
    return stream_wait(c, deadline, what);
}

static rv_status nccl_barrier(rv_comm *c, double deadline)
{
    nccl_ctx *x = c->ctx;
    rv_status st = coll_begin(c, deadline, "barrier");
    if (st != RV_OK)
        return st;
    ncclResult_t rc = rv_nccl.AllReduce(x->scratch, x->scratch, 1, ncclFloat32, ncclSum,
                                        x->comm, x->stream);
    if ((st = settle_call(c, rc, deadline, "barrier")) != RV_OK)
        return st;
    return stream_wait(c, deadline, "barrier");
}

static rv_status nccl_split(rv_comm *c, int color, int key, double deadline, rv_comm **out)
{
    nccl_ctx *x = c->ctx;
    ncclComm_t nc = NULL;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    int timed_out = 0;
    rv_status st = coll_begin(c, deadline, "split");
    if (st != RV_OK)
        return st;
    ncclResult_t rc = rv_nccl.CommSplit(
        x->comm, color == RV_COMM_UNDEFINED ? NCCL_SPLIT_NOCOLOR : color, key, &nc, &config);
    /* The child, once it exists, answers for its own creation; else the parent. */
    if (rc == ncclSuccess || rc == ncclInProgress)
        rc = nc ? settle(nc, ncclInProgress, deadline, &timed_out)
                : settle(x->comm, rc, deadline, &timed_out);
    if (timed_out) {
        if (nc)
            rv_nccl.CommAbort(nc);
        nccl_abort_comm(x);
        return rv_fail(RV_ERR_TIMEOUT, "rank %d: split (color %d, key %d): not complete within "
                       "%.1f s; NCCL communicator aborted", c->rank, color, key, c->timeout_s);
    }
    if (rc != ncclSuccess) {
        if (nc)
            rv_nccl.CommAbort(nc);
        return nccl_error(c, rc, "split");
    }
    if (!nc)
        return RV_OK; /* RV_COMM_UNDEFINED */
    if ((st = nccl_make_comm(nc, x->device, c->world_rank, c->timeout_s, out)) != RV_OK)
        rv_nccl.CommAbort(nc);
    return st;
}

static rv_status nccl_abort(rv_comm *c, int code)
{
    (void)code;
    nccl_abort_comm(c->ctx);
    return RV_OK;
}

static void nccl_destroy(rv_comm *c)
{
    nccl_ctx *x = c->ctx;
    cudaSetDevice(x->device);
    for (int i = 0; i < x->nqueue; i++) { /* posted, never waited for */
        cudaEventDestroy(x->queue[i]->done);
        free(x->queue[i]);
    }
    if (x->comm && !x->aborted) {
        int timed_out = 0;
        ncclResult_t rc = settle(x->comm, rv_nccl.CommFinalize(x->comm),
                                 rv_clock_s() + c->timeout_s, &timed_out);
        if (timed_out || rc != ncclSuccess)
            rv_nccl.CommAbort(x->comm);
        else
            rv_nccl.CommDestroy(x->comm);
    }
    if (x->stream)
        cudaStreamDestroy(x->stream);
    cudaFree(x->scratch);
    free(x->queue);
    free(x);
    free(c);
}

static const rv_comm nccl_table = {
    /* .name          = */ "nccl",
    /* .ctx           = */ NULL,
    /* .rank          = */ 0,
    /* .size          = */ 1,
    /* .world_rank    = */ 0,
    /* .timeout_s     = */ RV_COMM_DEFAULT_TIMEOUT_S,
    /* .device_memory = */ 1,
    /* .move          = */ NULL,
    /* .isend         = */ nccl_isend,
    /* .irecv         = */ nccl_irecv,
    /* .test          = */ nccl_test,
    /* .wait          = */ nccl_wait,
    /* .request_free  = */ nccl_request_free,
    /* .sendrecv      = */ rv_coll_sendrecv,
    /* .allreduce     = */ nccl_allreduce,
    /* .allgather     = */ nccl_allgather,
    /* .alltoall      = */ nccl_alltoall,
    /* .barrier       = */ nccl_barrier,
    /* .split         = */ nccl_split,
    /* .abort         = */ nccl_abort,
    /* .destroy       = */ nccl_destroy,
    /* .sent_bytes    = */ 0,
    /* .start         = */ nccl_start,
};

/* Wraps an initialised NCCL communicator; on failure the caller still owns comm. */
static rv_status nccl_make_comm(ncclComm_t comm, int device, int world_rank,
                                double timeout_s, rv_comm **out)
{
    rv_comm *c = malloc(sizeof *c);
    nccl_ctx *x = calloc(1, sizeof *x);
    rv_status st = RV_OK;
    cudaError_t e = cudaSuccess;
    if (!c || !x) {
        st = rv_fail(RV_ERR_NOMEM, "nccl communicator: out of memory");
        goto end;
    }
    *c = nccl_table;
    c->ctx = x;
    x->device = device;
    rv_nccl.CommUserRank(comm, &c->rank);
    rv_nccl.CommCount(comm, &c->size);
    c->world_rank = world_rank < 0 ? c->rank : world_rank;
    c->timeout_s = timeout_s;
    if ((e = cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaMalloc((void **)&x->scratch, sizeof(float))) != cudaSuccess ||
        (e = cudaMemset(x->scratch, 0, sizeof(float))) != cudaSuccess) {
        st = cuda_fail(c, e, "nccl communicator: stream and scratch");
        goto end;
    }
    x->comm = comm;
    *out = c;
    c = NULL;
    x = NULL;
end:
    if (x) {
        if (x->stream)
            cudaStreamDestroy(x->stream);
        cudaFree(x->scratch);
    }
    free(x);
    free(c);
    return st;
}

rv_status rv_comm_nccl_create(rv_comm *bootstrap, int device, rv_comm **out)
{
    ncclUniqueId *ids = NULL;
    ncclComm_t comm = NULL;
    int ndev = 0, timed_out = 0;
    rv_status st = RV_OK;
    if (!bootstrap || !out)
        return rv_fail(RV_ERR_INVALID, "nccl create: bootstrap or output pointer is NULL");
    *out = NULL;
    if (bootstrap->device_memory)
        return rv_fail(RV_ERR_INVALID, "rank %d: nccl create: the bootstrap communicator must "
                       "move host memory (local or mpi), not %s", bootstrap->rank,
                       bootstrap->name);
    /* Every rank loads (and fails) alike, before the exchange below: no rank waits
     * on a peer that could not load NCCL. */
    if ((st = rv_nccl_load()) != RV_OK)
        return rv_fail(st, "rank %d: %s", bootstrap->rank, rv_last_error());
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0)
        return rv_fail(RV_ERR_UNSUPPORTED, "rank %d: nccl create: no CUDA device (%s)",
                       bootstrap->rank, e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    if (device < 0)
        device = bootstrap->rank % ndev;
    if (device >= ndev)
        return rv_fail(RV_ERR_INVALID, "rank %d: nccl create: device %d of %d", bootstrap->rank,
                       device, ndev);
    if ((e = cudaSetDevice(device)) != cudaSuccess)
        return rv_fail(RV_ERR_BACKEND, "rank %d: nccl create: cudaSetDevice(%d): %s",
                       bootstrap->rank, device, cudaGetErrorString(e));
    ids = calloc((size_t)bootstrap->size, sizeof *ids);
    if (!ids) {
        st = rv_fail(RV_ERR_NOMEM, "rank %d: nccl create: out of memory", bootstrap->rank);
        goto end;
    }
    ncclResult_t rc = ncclSuccess;
    if (bootstrap->rank == 0 && (rc = rv_nccl.GetUniqueId(&ids[0])) != ncclSuccess) {
        /* Still take part in the exchange below, so the others fail fast too. */
        st = rv_fail(RV_ERR_BACKEND, "rank 0: nccl create: ncclGetUniqueId: %s",
                     rv_nccl.GetErrorString(rc));
    }
    rv_status xst = rv_comm_allgather(bootstrap, &ids[bootstrap->rank], ids, sizeof *ids);
    if (st == RV_OK)
        st = xst;
    if (st != RV_OK)
        goto end;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    rc = rv_nccl.CommInitRankConfig(&comm, bootstrap->size, ids[0], bootstrap->rank, &config);
    if (comm)
        rc = settle(comm, rc, rv_clock_s() + bootstrap->timeout_s, &timed_out);
    if (timed_out) {
        st = rv_fail(RV_ERR_TIMEOUT, "rank %d: nccl create: ncclCommInitRank not complete within "
                     "%.1f s", bootstrap->rank, bootstrap->timeout_s);
        goto end;
    }
    if (rc != ncclSuccess) {
        st = rv_fail(RV_ERR_BACKEND, "rank %d: nccl create: ncclCommInitRank: %s",
                     bootstrap->rank, rv_nccl.GetErrorString(rc));
        goto end;
    }
    if ((st = nccl_make_comm(comm, device, bootstrap->world_rank, bootstrap->timeout_s, out)) ==
        RV_OK)
        comm = NULL;
end:
    if (comm)
        rv_nccl.CommAbort(comm);
    free(ids);
    return st;
}

#else /* !RINGVIT_HAVE_NCCL */

rv_status rv_comm_nccl_create(rv_comm *bootstrap, int device, rv_comm **out)
{
    (void)bootstrap;
    (void)device;
    if (out)
        *out = NULL;
    return rv_fail(RV_ERR_UNSUPPORTED, "this build of ringvit has no NCCL communicator "
                   "(it needs CUDA and NCCL at configure time)");
}

#endif
