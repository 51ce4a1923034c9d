/* embed_gather.c: the per-token outputs of every rank of a group to rank 0, in
 * sequence order, one rank's segment at a time, so rank 0 never holds more than
 * its own slice and the largest segment of another; rank 0 appends them to a
 * sink (an unlinked scratch file beside the output, or memory). */
#include <stdlib.h>

#include "embed_internal.h"

typedef struct piece {
    int rank;
    int64_t start, len, local; /* global start, tokens, offset in the rank's slice */
} piece;

static int piece_cmp(const void *a, const void *b)
{
    const piece *x = a, *y = b;
    return (x->start > y->start) - (x->start < y->start);
}

/* The non-empty segments of every rank in sequence order; returns how many. */
static int pieces_of(const rv_shard_plan *sp, piece *out)
{
    int n = 0;
    for (int r = 0; r < sp->ranks; r++) {
        rv_shard_seg seg[RV_SHARD_MAX_SEGS];
        int k = rv_shard_segments(sp, r, seg);
        int64_t local = 0;
        for (int i = 0; i < k; i++) {
            if (seg[i].len > 0)
                out[n++] = (piece){.rank = r, .start = seg[i].start, .len = seg[i].len,
                                   .local = local};
            local += seg[i].len;
        }
    }
    qsort(out, (size_t)n, sizeof *out, piece_cmp);
    return n;
}

/* Every wait is the watch's: as long as the peer it waits for works (rank 0
 * writing the slices before, a sender still sending), and no longer than the
 * timeout after the peer falls silent. */
rv_status embed_gather_tokens(rv_embed_job *j, const rv_shard_plan *sp, const float *y, int dim,
                              collect_column *sink, rv_status *write_st)
{
    const size_t row = sizeof(float) * (size_t)dim;
    piece *pc = malloc(sizeof *pc * (size_t)(RV_SHARD_MAX_SEGS * sp->ranks));
    rv_comm_request **req = calloc((size_t)(RV_SHARD_MAX_SEGS * sp->ranks), sizeof *req);
    int *to0 = calloc((size_t)(RV_SHARD_MAX_SEGS * sp->ranks), sizeof *to0); /* peer 0 */
    float *buf = NULL;
    rv_status st = RV_OK;
    *write_st = RV_OK;
    if (!pc || !req || !to0) {
        st = rv_fail(RV_ERR_NOMEM, "rank %d: out of memory", j->rank);
        goto end;
    }
    int n = pieces_of(sp, pc), nreq = 0;
    if (j->rank != 0) {
        for (int i = 0; i < n && st == RV_OK; i++)
            if (pc[i].rank == j->rank)
                st = rv_comm_isend(j->ctl, y + pc[i].local * dim, row * (size_t)pc[i].len, 0, i,
                                   &req[nreq++]);
        rv_status w = rv_comm_watch_waitall(j->watch, req, to0, nreq);
        st = st != RV_OK ? st : w;
        goto end;
    }
    int64_t most = 0;
    for (int i = 0; i < n; i++)
        if (pc[i].rank != 0 && pc[i].len > most)
            most = pc[i].len;
    if (most > 0 && !(buf = malloc(row * (size_t)most))) {
        /* Without a buffer nothing can be received; the others time out. */
        st = rv_fail(RV_ERR_NOMEM, "rank 0: out of memory for %lld gathered tokens",
                     (long long)most);
        goto end;
    }
    for (int i = 0; i < n && st == RV_OK; i++) {
        const float *src = y + pc[i].local * dim;
        if (pc[i].rank != 0) {
            rv_comm_request *r = NULL;
            if ((st = rv_comm_irecv(j->ctl, buf, row * (size_t)pc[i].len, pc[i].rank, i, &r)) !=
                    RV_OK ||
                (st = rv_comm_watch_waitall(j->watch, &r, &pc[i].rank, 1)) != RV_OK)
                break;
            src = buf;
        }
        if (*write_st == RV_OK)
            *write_st = collect_column_put(sink, src, row * (size_t)pc[i].len);
        rv_comm_watch_beat(j->watch);
    }
end:
    free(buf);
    free(req);
    free(to0);
    free(pc);
    return st;
}
