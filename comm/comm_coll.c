/* comm_coll.c: collectives built on a backend's isend/irecv/wait, for backends
 * without native ones (local): dissemination barrier, direct allgather and
 * alltoall, ring allreduce (reduce-scatter then allgather), and the (color, key)
 * exchange behind split. Every wait uses the caller's one deadline, and the
 * reserved tags (comm_impl.h) keep user messages out of the way; a failure names
 * the collective through the tag ("allreduce: irecv from rank 1 ..."). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"

/* Ring allreduce moves chunks in slabs of at most this many bytes, so its
 * scratch buffer stays small and warm whatever the message size. */
#define SLAB_BYTES ((size_t)4 << 20)

rv_status rv_coll_sendrecv(rv_comm *c, const void *sendbuf, size_t send_bytes, int dst,
                           void *recvbuf, size_t recv_bytes, int src, int tag,
                           double deadline)
{
    rv_comm_request *req[2] = {NULL, NULL};
    rv_status st = c->irecv(c, recvbuf, recv_bytes, src, tag, &req[0]);
    if (st == RV_OK)
        st = c->isend(c, sendbuf, send_bytes, dst, tag, &req[1]);
    if (st != RV_OK) {
        rv_comm_request_free(&req[0]);
        return st;
    }
    return rv_comm_waitall_until(req, 2, deadline);
}

rv_status rv_coll_barrier(rv_comm *c, double deadline)
{
    const int n = c->size, r = c->rank;
    rv_status st = RV_OK;
    for (int k = 1; k < n && st == RV_OK; k <<= 1)
        st = rv_coll_sendrecv(c, NULL, 0, (r + k) % n, NULL, 0, (r - k + n) % n,
                              RV_TAG_BARRIER, deadline);
    return st;
}

/* Posts a receive from and a send to every other rank at once, then waits:
 * sendbuf block `sblock(j)` goes to rank j, rank j's message lands at recv block j. */
static rv_status exchange_all(rv_comm *c, const char *sendbuf, size_t sstride,
                              char *recvbuf, size_t bytes, int tag, double deadline)
{
    const int n = c->size, r = c->rank;
    rv_comm_request **req = calloc(2 * (size_t)n, sizeof *req);
    rv_status st = RV_OK;
    if (!req) {
        st = rv_fail(RV_ERR_NOMEM, "rank %d: %s: out of memory", r, rv_comm_tag_name(tag));
        goto end;
    }
    for (int s = 1; s < n && st == RV_OK; s++) {
        int from = (r - s + n) % n;
        st = c->irecv(c, recvbuf + (size_t)from * bytes, bytes, from, tag, &req[2 * s]);
    }
    for (int s = 1; s < n && st == RV_OK; s++) {
        int to = (r + s) % n;
        st = c->isend(c, sendbuf + (size_t)to * sstride, bytes, to, tag, &req[2 * s + 1]);
    }
    if (st != RV_OK) {
        for (int i = 0; i < 2 * n; i++)
            rv_comm_request_free(&req[i]);
        goto end;
    }
    st = rv_comm_waitall_until(req, 2 * n, deadline);
end:
    free(req);
    return st;
}

rv_status rv_coll_allgather(rv_comm *c, const void *sendbuf, void *recvbuf, size_t bytes,
                            double deadline)
{
    char *own = (char *)recvbuf + (size_t)c->rank * bytes;
    if (bytes && (const char *)sendbuf != own) {
        if (c->move) {
            if (c->move(own, sendbuf, bytes) != 0)
                return rv_fail(RV_ERR_BACKEND, "rank %d: allgather: own block: %s", c->rank,
                               rv_last_error());
        } else {
            memmove(own, sendbuf, bytes);
        }
    }
    /* Every rank sends its own block: stride 0 from `own`. */
    return exchange_all(c, own, 0, recvbuf, bytes, RV_TAG_ALLGATHER, deadline);
}

rv_status rv_coll_alltoall(rv_comm *c, const void *sendbuf, void *recvbuf, size_t bytes,
                           double deadline)
{
    size_t off = (size_t)c->rank * bytes;
    if (bytes && c->move) {
        if (c->move((char *)recvbuf + off, (const char *)sendbuf + off, bytes) != 0)
            return rv_fail(RV_ERR_BACKEND, "rank %d: alltoall: own block: %s", c->rank,
                           rv_last_error());
    } else if (bytes) {
        memcpy((char *)recvbuf + off, (const char *)sendbuf + off, bytes);
    }
    return exchange_all(c, sendbuf, bytes, recvbuf, bytes, RV_TAG_ALLTOALL, deadline);
}

/* Elements [start, end) of chunk i when count elements are cut into n chunks. */
static void chunk_range(size_t count, int n, int i, size_t *start, size_t *end)
{
    *start = count / n * i + ((size_t)i < count % n ? (size_t)i : count % n);
    *end = *start + count / n + ((size_t)i < count % n ? 1 : 0);
}

rv_status rv_coll_allreduce(rv_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                            rv_comm_dtype dtype, double deadline)
{
    const int n = c->size, r = c->rank;
    const size_t es = rv_comm_dtype_size(dtype);
    const size_t slab = SLAB_BYTES / es; /* elements per message */
    char *acc = recvbuf, *tmp = NULL;
    rv_status st = RV_OK;
    if (count && sendbuf != recvbuf)
        memcpy(recvbuf, sendbuf, count * es);
    if (n == 1)
        goto end;
    size_t tmp_elems = count / n + 1 < slab ? count / n + 1 : slab;
    tmp = malloc(tmp_elems * es);
    if (!tmp) {
        st = rv_fail(RV_ERR_NOMEM, "rank %d: allreduce of %zu %s: out of memory", r, count,
                     rv_comm_dtype_name(dtype));
        goto end;
    }
    const int right = (r + 1) % n, left = (r - 1 + n) % n;
    /* Every chunk is cut into the same number of slabs on every rank (from the
     * longest chunk), so each message meets its match; short chunks send empties. */
    size_t longest = count / n + (count % n ? 1 : 0);
    size_t nslab = longest == 0 ? 1 : (longest + slab - 1) / slab;
    /* Reduce-scatter: after step s rank r holds the sum of s + 2 ranks' chunk
     * (r - s - 1); after n - 1 steps its chunk (r + 1) is complete. */
    for (int s = 0; s < n - 1 && st == RV_OK; s++) {
        size_t s0, s1, r0, r1;
        chunk_range(count, n, (r - s + n) % n, &s0, &s1);
        chunk_range(count, n, (r - s - 1 + 2 * n) % n, &r0, &r1);
        for (size_t k = 0; k < nslab && st == RV_OK; k++) {
            size_t so = s0 + k * slab, ro = r0 + k * slab;
            size_t sn = so < s1 ? (s1 - so < slab ? s1 - so : slab) : 0;
            size_t rn = ro < r1 ? (r1 - ro < slab ? r1 - ro : slab) : 0;
            st = rv_coll_sendrecv(c, acc + (sn ? so * es : 0), sn * es, right, tmp, rn * es,
                                  left, RV_TAG_ALLREDUCE, deadline);
            if (st == RV_OK)
                rv_comm_reduce_sum(acc + ro * es, tmp, rn, dtype);
        }
    }
    /* Allgather of the complete chunks around the same ring, straight into place. */
    for (int s = 0; s < n - 1 && st == RV_OK; s++) {
        size_t s0, s1, r0, r1;
        chunk_range(count, n, (r + 1 - s + n) % n, &s0, &s1);
        chunk_range(count, n, (r - s + n) % n, &r0, &r1);
        st = rv_coll_sendrecv(c, acc + s0 * es, (s1 - s0) * es, right, acc + r0 * es,
                              (r1 - r0) * es, left, RV_TAG_ALLREDUCE, deadline);
    }
end:
    free(tmp);
    return st;
}

rv_status rv_comm_split_plan(rv_comm *c, int color, int key, double deadline,
                             int *members, int *n, int *new_rank)
{
    const int size = c->size;
    int mine[2] = {color, key};
    int *all = malloc(sizeof(int) * 2 * (size_t)size); /* (size, 2): color, key */
    rv_status st = RV_OK;
    *n = 0;
    *new_rank = -1;
    if (!all) {
        st = rv_fail(RV_ERR_NOMEM, "rank %d: split: out of memory", c->rank);
        goto end;
    }
    if ((st = c->allgather(c, mine, all, sizeof mine, deadline)) != RV_OK) {
        char what[64];
        snprintf(what, sizeof what, "split (color %d, key %d)", color, key);
        st = rv_comm_refail(st, c, what);
        goto end;
    }
    if (color == RV_COMM_UNDEFINED)
        goto end;
    /* Insertion sort by (key, rank): groups are small and this stays stable. */
    for (int q = 0; q < size; q++) {
        if (all[2 * q] != color)
            continue;
        int at = *n;
        while (at > 0 && all[2 * members[at - 1] + 1] > all[2 * q + 1]) {
            members[at] = members[at - 1];
            at--;
        }
        members[at] = q;
        (*n)++;
    }
    for (int i = 0; i < *n; i++)
        if (members[i] == c->rank)
            *new_rank = i;
end:
    free(all);
    return st;
}
