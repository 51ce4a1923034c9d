/* comm_mpi.c: the "mpi" communicator backend (OpenMPI): the same program under
 * mpiexec -n N, across processes and machines.
 *
 * Errors come back as return codes (MPI_ERRORS_RETURN on our own duplicate of
 * MPI_COMM_WORLD); nothing here aborts. MPI_Wait would block forever on a peer
 * that never answers, so every wait polls MPI_Test against the deadline, and the
 * collectives are the nonblocking ones (MPI_Iallreduce, ...) polled the same way.
 * MPI counts are int: messages longer than the chunk size (1 GiB, or
 * RINGVIT_COMM_MPI_CHUNK bytes) travel as several MPI messages with the same tag,
 * which MPI keeps in order; such a message must be received with its exact size.
 * A collective abandoned at a timeout cannot be cancelled: its request is kept
 * and tested again when the communicator is freed.
 *
 * Staged device memory (rv_comm_mpi_stage_device): an MPI without CUDA support
 * cannot read device memory, so every payload goes through a host buffer of the
 * request's own, filled with the given copy function before a send and copied
 * out once a receive completes; collectives stage their inputs and outputs the
 * same way. A staging buffer MPI may still touch (a request freed before it
 * completed, a collective abandoned at a timeout) is never freed under it: it
 * lingers on the communicator until MPI is done with it, or is kept for good. */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_impl.h"

#ifdef RINGVIT_HAVE_MPI
#include <mpi.h>

#define CHUNK_ENV "RINGVIT_COMM_MPI_CHUNK"
#define CHUNK_MAX ((size_t)1 << 30)

/* A staged request freed before MPI finished with its host buffer. */
typedef struct mpi_linger {
    MPI_Request *reqs; /* (n) */
    int n;
    void *host;
} mpi_linger;

typedef struct mpi_ctx {
    MPI_Comm comm;
    size_t chunk;          /* bytes per MPI call at most, <= CHUNK_MAX */
    MPI_Request *orphans;  /* (norphans) collectives left pending by a timeout */
    int norphans, orphans_cap;
    rv_comm_copy_fn stage; /* non-NULL: buffers may be device memory (staged) */
    mpi_linger *linger;    /* (nlinger) staged requests still in flight after their free */
    int nlinger, linger_cap;
    void **kept;           /* (nkept) staging buffers of orphaned collectives */
    int nkept, kept_cap;
} mpi_ctx;

typedef struct mpi_req {
    rv_comm_request base;
    int is_send, peer, tag;
    size_t bytes;
    int n;             /* pieces */
    MPI_Request *reqs; /* (n) */
    void *host;        /* staged: the host copy MPI moves (bytes), else NULL */
    void *user;        /* staged receive: where the message lands once complete */
    int delivered;     /* staged receive: copied out to user */
} mpi_req;

static int mpi_we_initialized;

static rv_status mpi_make_comm(MPI_Comm comm, size_t chunk, int world_rank, double timeout_s,
                               rv_comm **out);

/* Formats an MPI error code for a message. */
static const char *mpi_errstr(int rc, char *buf)
{
    int len = 0;
    if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS)
        snprintf(buf, MPI_MAX_ERROR_STRING, "MPI error %d", rc);
    return buf;
}

/* Progress-friendly pause between polls: spin first, then yield, then sleep, so a
 * short wait is fast and a long one leaves the core to other ranks. */
static void poll_pause(long *polls)
{
    long k = (*polls)++;
    if (k < 64)
        return;
    if (k < 4096) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
}

/* ---- staging buffers MPI may still touch ----------------------------------------- */

/* Frees the host buffers of lingering requests MPI has finished with. */
static void linger_reap(mpi_ctx *x)
{
    for (int i = 0; i < x->nlinger;) {
        mpi_linger *l = &x->linger[i];
        int flag = 0;
        if (MPI_Testall(l->n, l->reqs, &flag, MPI_STATUSES_IGNORE) != MPI_SUCCESS || !flag) {
            i++;
            continue;
        }
        free(l->reqs);
        free(l->host);
        x->linger[i] = x->linger[--x->nlinger];
    }
}

/* A staged request being freed: 0 when MPI is done with it (the caller frees
 * everything); else 1, and its requests and host buffer now belong to the
 * communicator (a pending receive is cancelled first; a cancelled request still
 * completes, and then the buffer is freed). Out of memory for the list, the
 * requests are left to MPI and the buffer is kept for good rather than freed
 * while MPI may still use it. */
static int linger_add(mpi_ctx *x, MPI_Request *reqs, int n, void *host, int is_send)
{
    int flag = 0;
    if (MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE) == MPI_SUCCESS && flag)
        return 0;
    if (!is_send)
        for (int i = 0; i < n; i++)
            if (reqs[i] != MPI_REQUEST_NULL)
                MPI_Cancel(&reqs[i]);
    if (x->nlinger == x->linger_cap) {
        int cap = x->linger_cap ? 2 * x->linger_cap : 8;
        mpi_linger *p = realloc(x->linger, sizeof *p * (size_t)cap);
        if (!p) {
            for (int i = 0; i < n; i++)
                if (reqs[i] != MPI_REQUEST_NULL)
                    MPI_Request_free(&reqs[i]);
            free(reqs);
            return 1;
        }
        x->linger = p;
        x->linger_cap = cap;
    }
    x->linger[x->nlinger++] = (mpi_linger){reqs, n, host};
    return 1;
}

/* After a staged collective: its host buffer is freed, unless the collective
 * was abandoned at the deadline (MPI may still write into it): then the
 * communicator keeps it until it is freed. */
static void stage_release(mpi_ctx *x, void *host, int orphans_before, rv_status st)
{
    if (x->norphans == orphans_before && st != RV_ERR_TIMEOUT) {
        free(host);
        return;
    }
    if (x->nkept == x->kept_cap) {
        int cap = x->kept_cap ? 2 * x->kept_cap : 8;
        void **p = realloc(x->kept, sizeof *p * (size_t)cap);
        if (!p)
            return; /* kept for good */
        x->kept = p;
        x->kept_cap = cap;
    }
    x->kept[x->nkept++] = host;
}

/* dst <- src (bytes) with the communicator's copy function, naming the step. */
static rv_status stage_copy(rv_comm *c, void *dst, const void *src, size_t bytes,
                            const char *what, const char *dir)
{
    mpi_ctx *x = c->ctx;
    if (x->stage(dst, src, bytes) == 0)
        return RV_OK;
    return rv_fail(RV_ERR_BACKEND, "rank %d: %s: copy %s the host staging buffer: %s", c->rank,
                   what, dir, rv_last_error());
}

/* ---- point-to-point ---------------------------------------------------------------- */

static rv_status mpi_post(rv_comm *c, int is_send, void *buf, size_t bytes, int peer,
                          int tag, rv_comm_request **out)
{
    mpi_ctx *x = c->ctx;
    mpi_req *r = calloc(1, sizeof *r);
    int n = bytes == 0 ? 1 : (int)((bytes + x->chunk - 1) / x->chunk);
    rv_status st = RV_OK;
    char what[160], err[MPI_MAX_ERROR_STRING];
    if (r)
        r->reqs = malloc(sizeof(MPI_Request) * (size_t)n);
    if (!r || !r->reqs) {
        rv_comm_describe_p2p(what, sizeof what, is_send, peer, tag, bytes);
        st = rv_fail(RV_ERR_NOMEM, "rank %d: %s: out of memory", c->rank, what);
        goto end;
    }
    *r = (mpi_req){{c}, is_send, peer, tag, bytes, 0, r->reqs, NULL, NULL, 0};
    if (x->stage && bytes) {
        linger_reap(x);
        rv_comm_describe_p2p(what, sizeof what, is_send, peer, tag, bytes);
        if (!(r->host = malloc(bytes))) {
            st = rv_fail(RV_ERR_NOMEM, "rank %d: %s: out of memory for its host staging "
                         "buffer", c->rank, what);
            goto end;
        }
        if (is_send && (st = stage_copy(c, r->host, buf, bytes, what, "to")) != RV_OK)
            goto end;
        r->user = buf;
        buf = r->host;
    }
    for (; r->n < n; r->n++) {
        size_t off = (size_t)r->n * x->chunk;
        int len = (int)(bytes - off < x->chunk ? bytes - off : x->chunk);
        int rc = is_send ? MPI_Isend((char *)buf + off, len, MPI_BYTE, peer, tag, x->comm,
                                     &r->reqs[r->n])
                         : MPI_Irecv((char *)buf + off, len, MPI_BYTE, peer, tag, x->comm,
                                     &r->reqs[r->n]);
        if (rc != MPI_SUCCESS) {
            rv_comm_describe_p2p(what, sizeof what, is_send, peer, tag, bytes);
            st = rv_fail(RV_ERR_BACKEND, "rank %d: %s: %s", c->rank, what, mpi_errstr(rc, err));
            goto end;
        }
    }
    *out = &r->base;
    r = NULL;
end:
    if (r) {
        if (r->reqs)
            c->request_free(c, &r->base);
        else
            free(r);
    }
    return st;
}

static rv_status mpi_isend(rv_comm *c, const void *buf, size_t bytes, int peer, int tag,
                           rv_comm_request **out)
{
    return mpi_post(c, 1, (void *)buf, bytes, peer, tag, out);
}

static rv_status mpi_irecv(rv_comm *c, void *buf, size_t bytes, int peer, int tag,
                           rv_comm_request **out)
{
    return mpi_post(c, 0, buf, bytes, peer, tag, out);
}

static rv_status mpi_test(rv_comm *c, rv_comm_request *req, int *done)
{
    mpi_req *r = (mpi_req *)req;
    char what[160], err[MPI_MAX_ERROR_STRING];
    /* One piece (the usual case): MPI_Test reports its own error (a truncation),
     * where MPI_Testall would only say MPI_ERR_IN_STATUS. */
    MPI_Status status;
    int flag = 0, rc = r->n == 1 ? MPI_Test(&r->reqs[0], &flag, &status)
                                 : MPI_Testall(r->n, r->reqs, &flag, MPI_STATUSES_IGNORE);
    *done = flag;
    if (rc == MPI_SUCCESS && flag && r->host && !r->is_send && !r->delivered) {
        /* Staged: the message is in the host buffer; now it reaches the caller's.
         * Only the bytes that came (a message may be shorter than the receive;
         * one over the chunk size has the exact size). */
        int got = 0;
        size_t len = r->bytes;
        if (r->n == 1 && MPI_Get_count(&status, MPI_BYTE, &got) == MPI_SUCCESS && got >= 0 &&
            (size_t)got < len)
            len = (size_t)got;
        r->delivered = 1;
        rv_comm_describe_p2p(what, sizeof what, r->is_send, r->peer, r->tag, r->bytes);
        rv_status st = len ? stage_copy(c, r->user, r->host, len, what, "from") : RV_OK;
        if (st != RV_OK)
            return st;
    }
    if (rc == MPI_SUCCESS)
        return RV_OK;
    rv_comm_describe_p2p(what, sizeof what, r->is_send, r->peer, r->tag, r->bytes);
    return rv_fail(rc == MPI_ERR_TRUNCATE ? RV_ERR_COMM : RV_ERR_BACKEND, "rank %d: %s: %s",
                   c->rank, what, mpi_errstr(rc, err));
}

static rv_status mpi_wait(rv_comm *c, rv_comm_request *req, double deadline)
{
    mpi_req *r = (mpi_req *)req;
    long polls = 0;
    for (;;) {
        int done = 0;
        rv_status st = mpi_test(c, req, &done);
        if (st != RV_OK || done)
            return st;
        if (rv_clock_s() >= deadline)
            break;
        poll_pause(&polls);
    }
    char who[64], what[160];
    rv_comm_who(c, who, sizeof who);
    rv_comm_describe_p2p(what, sizeof what, r->is_send, r->peer, r->tag, r->bytes);
    return rv_fail(RV_ERR_TIMEOUT, "%s: %s: %s within %.1f s", who, what,
                   r->is_send ? "not received" : "no message", c->timeout_s);
}

static void mpi_request_free(rv_comm *c, rv_comm_request *req)
{
    mpi_req *r = (mpi_req *)req;
    if (r->host && linger_add(c->ctx, r->reqs, r->n, r->host, r->is_send)) {
        /* MPI may still use the staging buffer: the communicator keeps both. */
        free(r);
        return;
    }
    for (int i = 0; i < r->n; i++) {
        if (r->reqs[i] == MPI_REQUEST_NULL)
            continue;
        if (!r->is_send) /* a send cannot be recalled; it is left to MPI */
            MPI_Cancel(&r->reqs[i]);
        MPI_Request_free(&r->reqs[i]);
    }
    free(r->host); /* complete: MPI is done with it */
    free(r->reqs);
    free(r);
}

/* ---- collectives -------------------------------------------------------------------- */

/* Polls reqs (n) until all complete or the deadline; at the deadline they become
 * orphans of the communicator. `what` names the operation. */
static rv_status coll_wait(rv_comm *c, MPI_Request *reqs, int n, double deadline,
                           const char *what)
{
    mpi_ctx *x = c->ctx;
    char who[64], err[MPI_MAX_ERROR_STRING];
    long polls = 0;
    rv_comm_who(c, who, sizeof who);
    for (;;) {
        int flag = 0, rc = MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS)
            return rv_fail(RV_ERR_BACKEND, "%s: %s: %s", who, what, mpi_errstr(rc, err));
        if (flag)
            return RV_OK;
        if (rv_clock_s() >= deadline)
            break;
        poll_pause(&polls);
    }
    for (int i = 0; i < n; i++) {
        if (reqs[i] == MPI_REQUEST_NULL)
            continue;
        if (x->norphans == x->orphans_cap) {
            int cap = x->orphans_cap ? 2 * x->orphans_cap : 8;
            MPI_Request *p = realloc(x->orphans, sizeof *p * (size_t)cap);
            if (!p)
                continue; /* forgotten: MPI keeps it alive anyway */
            x->orphans = p;
            x->orphans_cap = cap;
        }
        x->orphans[x->norphans++] = reqs[i];
    }
    return rv_fail(RV_ERR_TIMEOUT, "%s: %s: not complete within %.1f s (a rank has not joined)",
                   who, what, c->timeout_s);
}

static rv_status mpi_allreduce(rv_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                               rv_comm_dtype dtype, double deadline)
{
    mpi_ctx *x = c->ctx;
    const size_t es = rv_comm_dtype_size(dtype), per = x->chunk / es;
    const int n = count == 0 ? 1 : (int)((count + per - 1) / per);
    MPI_Datatype type = dtype == RV_COMM_F32 ? MPI_FLOAT : MPI_DOUBLE;
    MPI_Request *reqs = malloc(sizeof *reqs * (size_t)n);
    char what[96], err[MPI_MAX_ERROR_STRING];
    rv_status st = RV_OK;
    int posted = 0;
    snprintf(what, sizeof what, "allreduce of %zu %s", count, rv_comm_dtype_name(dtype));
    if (!reqs) {
        st = rv_fail(RV_ERR_NOMEM, "rank %d: %s: out of memory", c->rank, what);
        goto end;
    }
    for (; posted < n; posted++) {
        size_t off = (size_t)posted * per, len = count - off < per ? count - off : per;
        const void *s = sendbuf == recvbuf ? MPI_IN_PLACE : (const char *)sendbuf + off * es;
        int rc = MPI_Iallreduce(s, (char *)recvbuf + off * es, (int)len, type, MPI_SUM,
                                x->comm, &reqs[posted]);
        if (rc != MPI_SUCCESS) {
            st = rv_fail(RV_ERR_BACKEND, "rank %d: %s: %s", c->rank, what, mpi_errstr(rc, err));
            break;
        }
    }
    /* Pieces already posted are waited for even after a failed post: they are
     * collective and the other ranks take part in them. */
    if (posted) {
        rv_status wst = coll_wait(c, reqs, posted, deadline, what);
        st = st != RV_OK ? st : wst;
    }
end:
    free(reqs);
    return st;
}

/* allgather (alltoall = 0) or alltoall (1) of `bytes` per rank, in pieces of at
 * most the chunk size: piece k of every block travels in one MPI call whose
 * datatype strides by a whole block. */
static rv_status mpi_blocks(rv_comm *c, int alltoall, const void *sendbuf, void *recvbuf,
                            size_t bytes, double deadline)
{
    mpi_ctx *x = c->ctx;
    const int n = bytes <= x->chunk ? 1 : (int)((bytes + x->chunk - 1) / x->chunk);
    const int in_place = !alltoall && (const char *)sendbuf == (char *)recvbuf +
                                                                (size_t)c->rank * bytes;
    MPI_Request *reqs = malloc(sizeof *reqs * (size_t)n);
    char what[96], err[MPI_MAX_ERROR_STRING];
    rv_status st = RV_OK;
    int posted = 0;
    snprintf(what, sizeof what, "%s of %zu bytes per rank", alltoall ? "alltoall" : "allgather",
             bytes);
    if (!reqs) {
        st = rv_fail(RV_ERR_NOMEM, "rank %d: %s: out of memory", c->rank, what);
        goto end;
    }
    for (; posted < n; posted++) {
        size_t off = (size_t)posted * x->chunk;
        int len = (int)(bytes - off < x->chunk ? bytes - off : x->chunk), rc;
        const char *s = (const char *)sendbuf + off;
        char *d = (char *)recvbuf + off;
        MPI_Datatype block = MPI_BYTE, piece = MPI_DATATYPE_NULL;
        int bcount = len;
        if (n > 1) { /* len bytes, then a jump to the same offset of the next block */
            rc = MPI_Type_contiguous(len, MPI_BYTE, &piece);
            if (rc == MPI_SUCCESS)
                rc = MPI_Type_create_resized(piece, 0, (MPI_Aint)bytes, &block);
            if (rc == MPI_SUCCESS)
                rc = MPI_Type_commit(&block);
            if (piece != MPI_DATATYPE_NULL)
                MPI_Type_free(&piece);
            if (rc != MPI_SUCCESS) {
                st = rv_fail(RV_ERR_BACKEND, "rank %d: %s: datatype: %s", c->rank, what,
                             mpi_errstr(rc, err));
                break;
            }
            bcount = 1;
        }
        if (alltoall)
            rc = MPI_Ialltoall(s, bcount, block, d, bcount, block, x->comm, &reqs[posted]);
        else if (in_place)
            rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_BYTE, d, bcount, block, x->comm,
                                &reqs[posted]);
        else
            rc = MPI_Iallgather(s, len, MPI_BYTE, d, bcount, block, x->comm, &reqs[posted]);
        if (block != MPI_BYTE)
            MPI_Type_free(&block); /* pending operations keep what they need */
        if (rc != MPI_SUCCESS) {
            st = rv_fail(RV_ERR_BACKEND, "rank %d: %s: %s", c->rank, what, mpi_errstr(rc, err));
            break;
        }
    }
    if (posted) {
        rv_status wst = coll_wait(c, reqs, posted, deadline, what);
        st = st != RV_OK ? st : wst;
    }
end:
    free(reqs);
    return st;
}

static rv_status mpi_allgather(rv_comm *c, const void *sendbuf, void *recvbuf, size_t bytes,
                               double deadline)
{
    return mpi_blocks(c, 0, sendbuf, recvbuf, bytes, deadline);
}

static rv_status mpi_alltoall(rv_comm *c, const void *sendbuf, void *recvbuf, size_t bytes,
                              double deadline)
{
    return mpi_blocks(c, 1, sendbuf, recvbuf, bytes, deadline);
}

/* ---- staged collectives: host copies of device buffers, both ways ------------------ */

static rv_status staged_allreduce(rv_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                                  rv_comm_dtype dtype, double deadline)
{
    mpi_ctx *x = c->ctx;
    const size_t bytes = count * rv_comm_dtype_size(dtype);
    const int before = x->norphans;
    char what[96];
    rv_status st = RV_OK;
    void *h = NULL;
    if (bytes == 0)
        return mpi_allreduce(c, sendbuf, recvbuf, count, dtype, deadline);
    snprintf(what, sizeof what, "allreduce of %zu %s", count, rv_comm_dtype_name(dtype));
    if (!(h = malloc(bytes))) {
        st = rv_fail(RV_ERR_NOMEM, "rank %d: %s: out of memory for its host staging buffer",
                     c->rank, what);
        goto end;
    }
    /* A rank whose copy failed stays out of the collective: the others fail at
     * the deadline rather than sum a buffer that was never filled. */
    if ((st = stage_copy(c, h, sendbuf, bytes, what, "to")) != RV_OK)
        goto end;
    if ((st = mpi_allreduce(c, h, h, count, dtype, deadline)) == RV_OK)
        st = stage_copy(c, recvbuf, h, bytes, what, "from");
end:
    stage_release(x, h, before, st);
    return st;
}

/* allgather (alltoall = 0) or alltoall (1) through host copies of both buffers. */
static rv_status staged_blocks(rv_comm *c, int alltoall, const void *sendbuf, void *recvbuf,
                               size_t bytes, double deadline)
{
    mpi_ctx *x = c->ctx;
    const size_t total = bytes * (size_t)c->size;
    const int before = x->norphans;
    char what[96];
    rv_status st = RV_OK;
    char *h = NULL;
    if (bytes == 0)
        return mpi_blocks(c, alltoall, sendbuf, recvbuf, bytes, deadline);
    snprintf(what, sizeof what, "%s of %zu bytes per rank", alltoall ? "alltoall" : "allgather",
             bytes);
    /* alltoall: send blocks then receive blocks; allgather: the receive blocks,
     * this rank's own block filled first and gathered in place. */
    if (!(h = malloc(alltoall ? 2 * total : total))) {
        st = rv_fail(RV_ERR_NOMEM, "rank %d: %s: out of memory for its host staging buffer",
                     c->rank, what);
        goto end;
    }
    char *hsend = alltoall ? h : h + (size_t)c->rank * bytes, *hrecv = alltoall ? h + total : h;
    if ((st = stage_copy(c, hsend, sendbuf, alltoall ? total : bytes, what, "to")) != RV_OK)
        goto end;
    if ((st = mpi_blocks(c, alltoall, hsend, hrecv, bytes, deadline)) == RV_OK)
        st = stage_copy(c, recvbuf, hrecv, total, what, "from");
end:
    stage_release(x, h, before, st);
    return st;
}

static rv_status staged_allgather(rv_comm *c, const void *sendbuf, void *recvbuf, size_t bytes,
                                  double deadline)
{
    return staged_blocks(c, 0, sendbuf, recvbuf, bytes, deadline);
}

static rv_status staged_alltoall(rv_comm *c, const void *sendbuf, void *recvbuf, size_t bytes,
                                 double deadline)
{
    return staged_blocks(c, 1, sendbuf, recvbuf, bytes, deadline);
}

static rv_status mpi_barrier(rv_comm *c, double deadline)
{
    mpi_ctx *x = c->ctx;
    MPI_Request req;
    char err[MPI_MAX_ERROR_STRING];
    int rc = MPI_Ibarrier(x->comm, &req);
    if (rc != MPI_SUCCESS)
        return rv_fail(RV_ERR_BACKEND, "rank %d: barrier: %s", c->rank, mpi_errstr(rc, err));
    return coll_wait(c, &req, 1, deadline, "barrier");
}

static rv_status mpi_split(rv_comm *c, int color, int key, double deadline, rv_comm **out)
{
    mpi_ctx *x = c->ctx;
    int *members = malloc(sizeof(int) * (size_t)c->size);
    int n = 0, new_rank = -1;
    MPI_Comm nc = MPI_COMM_NULL;
    char err[MPI_MAX_ERROR_STRING];
    rv_status st = RV_OK;
    if (!members) {
        st = rv_fail(RV_ERR_NOMEM, "rank %d: split: out of memory", c->rank);
        goto end;
    }
    /* The nonblocking exchange finds a missing rank by the deadline; once every
     * rank has answered, the blocking MPI_Comm_split has all of them. */
    if ((st = rv_comm_split_plan(c, color, key, deadline, members, &n, &new_rank)) != RV_OK)
        goto end;
    int rc = MPI_Comm_split(x->comm, color == RV_COMM_UNDEFINED ? MPI_UNDEFINED : color, key,
                            &nc);
    if (rc != MPI_SUCCESS) {
        st = rv_fail(RV_ERR_BACKEND, "rank %d: split (color %d, key %d): %s", c->rank, color,
                     key, mpi_errstr(rc, err));
        goto end;
    }
    if (nc == MPI_COMM_NULL)
        goto end;
    MPI_Comm_set_errhandler(nc, MPI_ERRORS_RETURN);
    if ((st = mpi_make_comm(nc, x->chunk, c->world_rank, c->timeout_s, out)) != RV_OK) {
        MPI_Comm_free(&nc);
        goto end;
    }
    if (x->stage && (st = rv_comm_mpi_stage_device(*out, x->stage)) != RV_OK)
        rv_comm_free(out); /* a staged communicator's parts take device memory too */
end:
    free(members);
    return st;
}

static rv_status mpi_abort(rv_comm *c, int code)
{
    mpi_ctx *x = c->ctx;
    char err[MPI_MAX_ERROR_STRING];
    int rc = MPI_Abort(x->comm, code);
    return rv_fail(RV_ERR_BACKEND, "rank %d: MPI_Abort returned: %s", c->rank,
                   mpi_errstr(rc, err));
}

static void mpi_destroy(rv_comm *c)
{
    mpi_ctx *x = c->ctx;
    int left = 0;
    for (int i = 0; i < x->norphans; i++) {
        int flag = 0;
        MPI_Test(&x->orphans[i], &flag, MPI_STATUS_IGNORE);
        left += !flag;
    }
    if (left)
        rv_log(RV_LOG_WARN, "rank %d: mpi communicator freed with %d collective(s) a rank "
               "never joined", c->rank, left);
    /* Staging buffers: freed once MPI is done with them, else left to it for good. */
    linger_reap(x);
    for (int i = 0; i < x->nlinger; i++)
        for (int j = 0; j < x->linger[i].n; j++)
            if (x->linger[i].reqs[j] != MPI_REQUEST_NULL)
                MPI_Request_free(&x->linger[i].reqs[j]);
    if (x->nlinger)
        rv_log(RV_LOG_WARN, "rank %d: mpi communicator freed with %d staged message(s) still "
               "in flight; their host buffers are not freed", c->rank, x->nlinger);
    for (int i = 0; i < x->nlinger; i++)
        free(x->linger[i].reqs);
    free(x->linger);
    for (int i = 0; !left && i < x->nkept; i++)
        free(x->kept[i]);
    free(x->kept);
    free(x->orphans);
    if (x->comm != MPI_COMM_NULL)
        MPI_Comm_free(&x->comm);
    free(x);
    free(c);
}

static const rv_comm mpi_table = {
    /* .name          = */ "mpi",
    /* .ctx           = */ NULL,
    /* .rank          = */ 0,
    /* .size          = */ 1,
    /* .world_rank    = */ 0,
    /* .timeout_s     = */ RV_COMM_DEFAULT_TIMEOUT_S,
    /* .device_memory = */ 0,
    /* .move          = */ NULL,
    /* .isend         = */ mpi_isend,
    /* .irecv         = */ mpi_irecv,
    /* .test          = */ mpi_test,
    /* .wait          = */ mpi_wait,
    /* .request_free  = */ mpi_request_free,
    /* .sendrecv      = */ rv_coll_sendrecv,
    /* .allreduce     = */ mpi_allreduce,
    /* .allgather     = */ mpi_allgather,
    /* .alltoall      = */ mpi_alltoall,
    /* .barrier       = */ mpi_barrier,
    /* .split         = */ mpi_split,
    /* .abort         = */ mpi_abort,
    /* .destroy       = */ mpi_destroy,
    /* .sent_bytes    = */ 0,
    /* .start         = */ NULL, /* posts go out at once */
};

static rv_status mpi_make_comm(MPI_Comm comm, size_t chunk, int world_rank, double timeout_s,
                               rv_comm **out)
{
    rv_comm *c = malloc(sizeof *c);
    mpi_ctx *x = calloc(1, sizeof *x);
    if (!c || !x) {
        free(c);
        free(x);
        return rv_fail(RV_ERR_NOMEM, "mpi communicator: out of memory");
    }
    *c = mpi_table;
    x->comm = comm;
    x->chunk = chunk;
    c->ctx = x;
    MPI_Comm_rank(comm, &c->rank);
    MPI_Comm_size(comm, &c->size);
    c->world_rank = world_rank < 0 ? c->rank : world_rank;
    c->timeout_s = timeout_s;
    *out = c;
    return RV_OK;
}

static rv_status chunk_from_env(size_t *chunk)
{
    *chunk = CHUNK_MAX;
    const char *v = getenv(CHUNK_ENV);
    if (!v || !v[0])
        return RV_OK;
    char *endp = NULL;
    errno = 0;
    unsigned long long n = strtoull(v, &endp, 10);
    if (errno || endp == v || *endp || n < 16 || n > CHUNK_MAX)
        return rv_fail(RV_ERR_INVALID, "%s='%s': want a byte count in [16, %zu]", CHUNK_ENV, v,
                       CHUNK_MAX);
    *chunk = (size_t)n & ~(size_t)7; /* whole f64 elements */
    return RV_OK;
}

rv_status rv_comm_mpi_stage_device(rv_comm *c, rv_comm_copy_fn copy)
{
    if (!c || !copy)
        return rv_fail(RV_ERR_INVALID, "mpi stage device: communicator or copy function is NULL");
    /* The table, not the name, says whose context this is. */
    if (c->destroy != mpi_destroy)
        return rv_fail(RV_ERR_INVALID, "rank %d: mpi stage device: a %s communicator, not an "
                       "mpi one", c->rank, c->name ? c->name : "foreign");
    mpi_ctx *x = c->ctx;
    x->stage = copy;
    c->device_memory = 1;
    c->move = copy;
    c->allreduce = staged_allreduce;
    c->allgather = staged_allgather;
    c->alltoall = staged_alltoall;
    return RV_OK;
}

rv_status rv_comm_mpi_world(rv_comm **out)
{
    int inited = 0, finalized = 0, rc;
    double timeout_s = 0;
    size_t chunk = 0;
    char err[MPI_MAX_ERROR_STRING];
    MPI_Comm dup = MPI_COMM_NULL;
    rv_status st = RV_OK;
    if (!out)
        return rv_fail(RV_ERR_INVALID, "mpi world: output pointer is NULL");
    *out = NULL;
    if ((st = rv_comm_default_timeout(&timeout_s)) != RV_OK ||
        (st = chunk_from_env(&chunk)) != RV_OK)
        goto end;
    MPI_Finalized(&finalized);
    if (finalized) {
        st = rv_fail(RV_ERR_INVALID, "mpi world: MPI has already been finalized");
        goto end;
    }
    MPI_Initialized(&inited);
    if (!inited) {
        /* Threads may each use their own communicator (embed's dispatcher). */
        int provided = MPI_THREAD_SINGLE;
        if ((rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided)) != MPI_SUCCESS) {
            st = rv_fail(RV_ERR_BACKEND, "mpi world: MPI_Init_thread: %s", mpi_errstr(rc, err));
            goto end;
        }
        mpi_we_initialized = 1;
    }
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &dup)) != MPI_SUCCESS) {
        st = rv_fail(RV_ERR_BACKEND, "mpi world: MPI_Comm_dup: %s", mpi_errstr(rc, err));
        goto end;
    }
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    if ((st = mpi_make_comm(dup, chunk, -1, timeout_s, out)) != RV_OK)
        MPI_Comm_free(&dup);
end:
    return st;
}

rv_status rv_comm_mpi_finalize(void)
{
    int finalized = 0;
    char err[MPI_MAX_ERROR_STRING];
    MPI_Finalized(&finalized);
    if (!mpi_we_initialized || finalized)
        return RV_OK;
    mpi_we_initialized = 0;
    int rc = MPI_Finalize();
    if (rc != MPI_SUCCESS)
        return rv_fail(RV_ERR_BACKEND, "MPI_Finalize: %s", mpi_errstr(rc, err));
    return RV_OK;
}

int rv_comm_mpi_thread_multiple(void)
{
    int inited = 0, level = MPI_THREAD_SINGLE;
    MPI_Initialized(&inited);
    if (!inited || MPI_Query_thread(&level) != MPI_SUCCESS)
        return 0;
    return level == MPI_THREAD_MULTIPLE;
}

#else /* !RINGVIT_HAVE_MPI */

int rv_comm_mpi_thread_multiple(void)
{
    return 0;
}

rv_status rv_comm_mpi_world(rv_comm **out)
{
    if (out)
        *out = NULL;
    return rv_fail(RV_ERR_UNSUPPORTED, "this build of ringvit has no MPI communicator "
                   "(configure with -DRINGVIT_MPI=ON where MPI is installed)");
}

rv_status rv_comm_mpi_finalize(void)
{
    return RV_OK;
}

rv_status rv_comm_mpi_stage_device(rv_comm *c, rv_comm_copy_fn copy)
{
    (void)c;
    (void)copy;
    return rv_fail(RV_ERR_UNSUPPORTED, "this build of ringvit has no MPI communicator "
                   "(configure with -DRINGVIT_MPI=ON where MPI is installed)");
}

#endif
