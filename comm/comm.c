/* comm.c: the rv_comm_* wrappers over the communicator table: argument checks,
 * the per-communicator timeout turned into one deadline per call, request release,
 * the dp x cp mesh split, and the timeout setting (RINGVIT_COMM_TIMEOUT). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"

rv_status rv_comm_default_timeout(double *seconds)
{
    *seconds = RV_COMM_DEFAULT_TIMEOUT_S;
    const char *v = getenv(RV_COMM_TIMEOUT_ENV);
    if (!v || !v[0])
        return RV_OK;
    char *endp = NULL;
    errno = 0;
    double s = strtod(v, &endp);
    if (errno || endp == v || *endp != '\0' || !isfinite(s) || s <= 0)
        return rv_fail(RV_ERR_INVALID, "%s='%s': want a positive number of seconds",
                       RV_COMM_TIMEOUT_ENV, v);
    *seconds = s;
    return RV_OK;
}

rv_status rv_comm_set_timeout(rv_comm *c, double seconds)
{
    if (!c)
        return rv_fail(RV_ERR_INVALID, "rv_comm_set_timeout: communicator is NULL");
    if (!isfinite(seconds) || seconds <= 0)
        return rv_fail(RV_ERR_INVALID, "rank %d: timeout %g s: want a positive number of seconds",
                       c->rank, seconds);
    c->timeout_s = seconds;
    return RV_OK;
}

size_t rv_comm_dtype_size(rv_comm_dtype dtype)
{
    switch (dtype) {
    case RV_COMM_F32: return 4;
    case RV_COMM_F64: return 8;
    }
    return 0;
}

const char *rv_comm_dtype_name(rv_comm_dtype dtype)
{
    switch (dtype) {
    case RV_COMM_F32: return "f32";
    case RV_COMM_F64: return "f64";
    }
    return "unknown dtype";
}

int rv_comm_backend_built(const char *name)
{
    if (!name)
        return 0;
    if (strcmp(name, "local") == 0)
        return 1;
#ifdef RINGVIT_HAVE_MPI
    if (strcmp(name, "mpi") == 0)
        return 1;
#endif
#ifdef RINGVIT_HAVE_NCCL
    if (strcmp(name, "nccl") == 0)
        return 1;
#endif
    return 0;
}

const char *rv_comm_tag_name(int tag)
{
    switch (tag) {
    case RV_TAG_BARRIER: return "barrier";
    case RV_TAG_ALLGATHER: return "allgather";
    case RV_TAG_ALLTOALL: return "alltoall";
    case RV_TAG_ALLREDUCE: return "allreduce";
    }
    return NULL;
}

void rv_comm_describe_p2p(char *buf, size_t n, int is_send, int peer, int tag, size_t bytes)
{
    const char *coll = rv_comm_tag_name(tag);
    const char *what = is_send ? "isend to" : "irecv from";
    if (coll)
        snprintf(buf, n, "%s: %s rank %d (%zu bytes)", coll, what, peer, bytes);
    else
        snprintf(buf, n, "%s rank %d (tag %d, %zu bytes)", what, peer, tag, bytes);
}

void rv_comm_who(const rv_comm *c, char *buf, size_t n)
{
    if (c->world_rank != c->rank)
        snprintf(buf, n, "rank %d (world rank %d)", c->rank, c->world_rank);
    else
        snprintf(buf, n, "rank %d", c->rank);
}

rv_status rv_comm_refail(rv_status st, const rv_comm *c, const char *what)
{
    char who[64], inner[1024];
    rv_comm_who(c, who, sizeof who);
    const char *m = rv_last_error();
    size_t wl = strlen(who);
    if (strncmp(m, who, wl) == 0 && m[wl] == ':' && m[wl + 1] == ' ')
        m += wl + 2;
    snprintf(inner, sizeof inner, "%s", m);
    return rv_fail(st, "%s: %s: %s", who, what, inner);
}

void rv_comm_reduce_sum(void *acc, const void *x, size_t count, rv_comm_dtype dtype)
{
    if (dtype == RV_COMM_F32) {
        float *restrict a = acc;
        const float *restrict b = x;
        for (size_t i = 0; i < count; i++)
            a[i] += b[i];
    } else {
        double *restrict a = acc;
        const double *restrict b = x;
        for (size_t i = 0; i < count; i++)
            a[i] += b[i];
    }
}

/* ---- checks --------------------------------------------------------------------- */

static rv_status check_p2p(rv_comm *c, const char *op, const void *buf, size_t bytes,
                           int peer, int tag, rv_comm_request **req)
{
    if (!c || !req)
        return rv_fail(RV_ERR_INVALID, "%s: communicator or request pointer is NULL", op);
    *req = NULL;
    char who[64];
    rv_comm_who(c, who, sizeof who);
    if (peer < 0 || peer >= c->size)
        return rv_fail(RV_ERR_INVALID, "%s: %s rank %d: no such rank (size %d)", who, op,
                       peer, c->size);
    if (tag < 0 || tag > RV_COMM_TAG_MAX)
        return rv_fail(RV_ERR_INVALID, "%s: %s rank %d: tag %d outside [0, %d]", who, op,
                       peer, tag, RV_COMM_TAG_MAX);
    if (!buf && bytes)
        return rv_fail(RV_ERR_INVALID, "%s: %s rank %d: buffer is NULL for %zu bytes", who,
                       op, peer, bytes);
    return RV_OK;
}

static rv_status check_coll(rv_comm *c, const char *op, const void *a, const void *b,
                            size_t bytes_per_rank, int per_rank)
{
    if (!c)
        return rv_fail(RV_ERR_INVALID, "%s: communicator is NULL", op);
    char who[64];
    rv_comm_who(c, who, sizeof who);
    if (per_rank && bytes_per_rank > SIZE_MAX / (size_t)c->size)
        return rv_fail(RV_ERR_INVALID, "%s: %s: %zu bytes per rank times %d ranks overflows",
                       who, op, bytes_per_rank, c->size);
    if (bytes_per_rank && (!a || !b))
        return rv_fail(RV_ERR_INVALID, "%s: %s: buffer is NULL for %zu bytes", who, op,
                       bytes_per_rank);
    return RV_OK;
}

static double deadline_of(const rv_comm *c)
{
    return rv_clock_s() + c->timeout_s;
}

/* ---- point-to-point ------------------------------------------------------------------ */

rv_status rv_comm_isend(rv_comm *c, const void *buf, size_t bytes, int peer, int tag,
                        rv_comm_request **req)
{
    rv_status st = check_p2p(c, "isend to", buf, bytes, peer, tag, req);
    if (st != RV_OK)
        return st;
    c->sent_bytes += (double)bytes;
    return c->isend(c, buf, bytes, peer, tag, req);
}

rv_status rv_comm_irecv(rv_comm *c, void *buf, size_t bytes, int peer, int tag,
                        rv_comm_request **req)
{
    rv_status st = check_p2p(c, "irecv from", buf, bytes, peer, tag, req);
    if (st != RV_OK)
        return st;
    return c->irecv(c, buf, bytes, peer, tag, req);
}

void rv_comm_request_free(rv_comm_request **req)
{
    if (!req || !*req)
        return;
    rv_comm *c = (*req)->comm;
    c->request_free(c, *req);
    *req = NULL;
}

rv_status rv_comm_wait(rv_comm_request **req)
{
    if (!req)
        return rv_fail(RV_ERR_INVALID, "rv_comm_wait: request pointer is NULL");
    if (!*req)
        return RV_OK;
    rv_comm *c = (*req)->comm;
    rv_status st = c->wait(c, *req, deadline_of(c));
    rv_comm_request_free(req);
    return st;
}

rv_status rv_comm_waitall_until(rv_comm_request **reqs, int n, double deadline)
{
    rv_status st = RV_OK;
    for (int i = 0; i < n; i++) {
        if (!reqs[i])
            continue;
        rv_comm *c = reqs[i]->comm;
        if (st == RV_OK)
            st = c->wait(c, reqs[i], deadline);
        rv_comm_request_free(&reqs[i]); /* after a failure: cancels the rest */
    }
    return st;
}

rv_status rv_comm_waitall(rv_comm_request **reqs, int n)
{
    if (n > 0 && !reqs)
        return rv_fail(RV_ERR_INVALID, "rv_comm_waitall: %d requests but the array is NULL", n);
    double deadline = 0;
    for (int i = 0; i < n; i++)
        if (reqs[i]) {
            deadline = deadline_of(reqs[i]->comm);
            break;
        }
    return rv_comm_waitall_until(reqs, n, deadline);
}

rv_status rv_comm_test(rv_comm_request **req, int *done)
{
    if (!req || !done)
        return rv_fail(RV_ERR_INVALID, "rv_comm_test: request or done pointer is NULL");
    *done = 1;
    if (!*req)
        return RV_OK;
    rv_comm *c = (*req)->comm;
    rv_status st = c->test(c, *req, done);
    if (st != RV_OK || *done)
        rv_comm_request_free(req);
    return st;
}

rv_status rv_comm_start(rv_comm *c)
{
    if (!c)
        return rv_fail(RV_ERR_INVALID, "rv_comm_start: communicator is NULL");
    return c->start ? c->start(c) : RV_OK;
}

rv_status rv_comm_sendrecv(rv_comm *c, const void *sendbuf, size_t send_bytes, int dst,
                           void *recvbuf, size_t recv_bytes, int src, int tag)
{
    rv_comm_request *dummy = NULL;
    rv_status st = check_p2p(c, "isend to", sendbuf, send_bytes, dst, tag, &dummy);
    if (st == RV_OK)
        st = check_p2p(c, "irecv from", recvbuf, recv_bytes, src, tag, &dummy);
    if (st != RV_OK)
        return st;
    c->sent_bytes += (double)send_bytes;
    return c->sendrecv(c, sendbuf, send_bytes, dst, recvbuf, recv_bytes, src, tag,
                       deadline_of(c));
}

/* ---- collectives ------------------------------------------------------------------- */

rv_status rv_comm_allreduce(rv_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                            rv_comm_dtype dtype)
{
    size_t es = rv_comm_dtype_size(dtype);
    if (c && es == 0)
        return rv_fail(RV_ERR_INVALID, "rank %d: allreduce: unknown dtype %d", c->rank,
                       (int)dtype);
    if (c && count > SIZE_MAX / 8)
        return rv_fail(RV_ERR_INVALID, "rank %d: allreduce: count %zu is too large", c->rank,
                       count);
    rv_status st = check_coll(c, "allreduce", sendbuf, recvbuf, count * es, 0);
    if (st != RV_OK)
        return st;
    c->sent_bytes += (double)(count * es) * (c->size - 1);
    return c->allreduce(c, sendbuf, recvbuf, count, dtype, deadline_of(c));
}

rv_status rv_comm_allgather(rv_comm *c, const void *sendbuf, void *recvbuf, size_t bytes)
{
    rv_status st = check_coll(c, "allgather", sendbuf, recvbuf, bytes, 1);
    if (st != RV_OK)
        return st;
    c->sent_bytes += (double)bytes * (c->size - 1);
    return c->allgather(c, sendbuf, recvbuf, bytes, deadline_of(c));
}

rv_status rv_comm_alltoall(rv_comm *c, const void *sendbuf, void *recvbuf, size_t bytes)
{
    rv_status st = check_coll(c, "alltoall", sendbuf, recvbuf, bytes, 1);
    if (st != RV_OK)
        return st;
    if (bytes && sendbuf == recvbuf)
        return rv_fail(RV_ERR_INVALID, "rank %d: alltoall: sendbuf and recvbuf must differ",
                       c->rank);
    c->sent_bytes += (double)bytes * (c->size - 1);
    return c->alltoall(c, sendbuf, recvbuf, bytes, deadline_of(c));
}

rv_status rv_comm_barrier(rv_comm *c)
{
    if (!c)
        return rv_fail(RV_ERR_INVALID, "barrier: communicator is NULL");
    return c->barrier(c, deadline_of(c));
}

rv_status rv_comm_split(rv_comm *c, int color, int key, rv_comm **out)
{
    if (!c || !out)
        return rv_fail(RV_ERR_INVALID, "split: communicator or output pointer is NULL");
    *out = NULL;
    if (color < 0 && color != RV_COMM_UNDEFINED)
        return rv_fail(RV_ERR_INVALID, "rank %d: split: color %d (want >= 0 or RV_COMM_UNDEFINED)",
                       c->rank, color);
    rv_status st = c->split(c, color, key, deadline_of(c), out);
    if (st == RV_OK && *out)
        (*out)->timeout_s = c->timeout_s;
    return st;
}

rv_status rv_comm_mesh_split(rv_comm *c, int cp, rv_comm **cp_comm, rv_comm **dp_comm)
{
    if (!c || !cp_comm || !dp_comm)
        return rv_fail(RV_ERR_INVALID, "mesh split: communicator or output pointer is NULL");
    *cp_comm = *dp_comm = NULL;
    if (cp < 1 || c->size % cp != 0)
        return rv_fail(RV_ERR_INVALID, "rank %d: mesh split: %d ranks do not divide into "
                       "context-parallel groups of %d", c->rank, c->size, cp);
    rv_status st = rv_comm_split(c, c->rank / cp, c->rank, cp_comm);
    if (st == RV_OK)
        st = rv_comm_split(c, c->rank % cp, c->rank, dp_comm);
    if (st != RV_OK) {
        rv_comm_free(cp_comm);
        rv_comm_free(dp_comm);
    }
    return st;
}

rv_status rv_comm_abort(rv_comm *c, int code)
{
    if (!c)
        return rv_fail(RV_ERR_INVALID, "abort: communicator is NULL");
    return c->abort(c, code);
}

void rv_comm_free(rv_comm **c)
{
    if (!c || !*c)
        return;
    (*c)->destroy(*c);
    *c = NULL;
}
