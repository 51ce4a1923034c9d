/* cp_ring.c: ring attention. Forward: each rank starts with its own K/V block;
 * at every step the block travels to rank+1 while this rank computes its queries
 * against it (the transfer of the next block is posted before the compute), and
 * the kernel folds each block into the running (o, lse) by log-sum-exp. Blocks
 * travel in chunks (ring_chunks), one ring pass per chunk, so a
 * rank holds two chunks in flight rather than two whole blocks; a chunk is the
 * same share of each segment of a slice (chunk_pieces). Backward: whole K/V
 * blocks travel (the CPU backward packs the query side on every call, which costs
 * about 40% more with 512-row key pieces than with whole blocks); each rank
 * computes its contribution to the visiting block's dK/dV in a fresh buffer while
 * the partial sum of the ranks before it arrives, adds it and passes it on, so the
 * sum reaches the block's owner after one last hop. dQ stays local. Message tags:
 * K 11, V 12, partial dK 13, dV 14, final dK 15, dV 16.
 *
 * On a device backend the kernels are queued on its compute stream while the
 * transfer runs on the communicator's (NCCL's stream, or the copy of a local
 * run): post the exchange, queue the block's kernels, wait for the transfer,
 * then wait for the kernels (cp_busy_end) before a buffer they read is received
 * into or a result they wrote is sent. Buffers are the backend's memory. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cp_internal.h"

/* CPU: at most RV_CP_RING_PASSES chunks, none shorter than RV_CP_RING_CHUNK rows.
 * Every kernel call streams its queries and running output through memory once,
 * so longer chunks cost less per key (512-row zigzag pieces spent about 10% of a
 * rank's time so); the two chunks in flight stay at a quarter of the slice. */
#define RV_CP_RING_CHUNK 1024
#define RV_CP_RING_PASSES 8
/* On a device, memory is plentiful and every kernel call re-reads and merges the
 * running output: chunks as long as 16384 rows keep those passes a few percent. */
#define RV_CP_RING_CHUNK_DEVICE 16384

enum { TAG_K = 11, TAG_V = 12, TAG_DK = 13, TAG_DV = 14, TAG_FINAL_DK = 15, TAG_FINAL_DV = 16 };

/* Posts the exchange of one block: send (k, v) of `len` rows to the right, receive
 * the next block of `next_len` rows from the left into (nk, nv). */
static rv_status post_kv(rv_cp_attn *cp, const float *k, const float *v, int64_t len,
                         float *nk, float *nv, int64_t next_len, rv_comm_request *reqs[4])
{
    rv_comm *c = cp->comm;
    const size_t row = (size_t)cp->heads * cp->dim * sizeof(float);
    int left = (c->rank + c->size - 1) % c->size, right = (c->rank + 1) % c->size;
    rv_status st;
    if ((st = rv_comm_irecv(c, nk, next_len * row, left, TAG_K, &reqs[0])) != RV_OK ||
        (st = rv_comm_irecv(c, nv, next_len * row, left, TAG_V, &reqs[1])) != RV_OK ||
        (st = rv_comm_isend(c, k, len * row, right, TAG_K, &reqs[2])) != RV_OK ||
        (st = rv_comm_isend(c, v, len * row, right, TAG_V, &reqs[3])) != RV_OK)
        return st;
    cp->stats.bytes_sent += 2.0 * len * row;
    return RV_OK;
}

static rv_status wait_all(rv_cp_attn *cp, rv_comm_request **reqs, int n)
{
    double t0 = cp_now();
    rv_status st = rv_comm_waitall(reqs, n);
    cp->stats.wait_s += cp_now() - t0;
    return st;
}

/* Chunk c (of m) of a block: the c-th m-th of each of its segments, so that under
 * zigzag shards a chunk holds keys from both ends of the sequence and every rank
 * does the same work at every step (a chunk cut from the slice's start would give
 * one rank all the early keys at once, and the ring would wait on it). piece[j] =
 * {first row within segment j, rows}; returns the chunk's rows. */
static int64_t chunk_pieces(const cp_segs *s, int c, int m, rv_shard_seg piece[RV_SHARD_MAX_SEGS])
{
    int64_t total = 0;
    for (int j = 0; j < s->n; j++) {
        int64_t a = s->seg[j].len * c / m, b = s->seg[j].len * (c + 1) / m;
        piece[j] = (rv_shard_seg){a, b - a};
        total += b - a;
    }
    return total;
}

/* Chunks a block travels in, and the most rows one of them holds (a chunk takes
 * at most ceil(len_j / m) rows of each segment j). */
static int ring_chunks(const rv_cp_attn *cp, int64_t *max_rows)
{
    const int64_t maxlen = rv_shard_max_len(&cp->plan);
    int64_t chunk = RV_CP_RING_CHUNK_DEVICE;
    if (strcmp(cp->be->name, "cpu") == 0) {
        chunk = (maxlen + RV_CP_RING_PASSES - 1) / RV_CP_RING_PASSES;
        chunk = chunk > RV_CP_RING_CHUNK ? chunk : RV_CP_RING_CHUNK;
    }
    int m = (int)((maxlen + chunk - 1) / chunk);
    m = m > 0 ? m : 1;
    *max_rows = (maxlen + m - 1) / m + RV_SHARD_MAX_SEGS;
    return m;
}

/* Packs this rank's chunk (pieces of k and v at their slice offsets) into pk, pv;
 * the copies are done when it returns, so the chunk may be sent. */
static rv_status pack_own_chunk(rv_cp_attn *cp, const cp_segs *me,
                                const rv_shard_seg piece[RV_SHARD_MAX_SEGS], const float *k,
                                const float *v, float *pk, float *pv)
{
    const size_t rowf = (size_t)cp->heads * cp->dim;
    rv_status st = RV_OK;
    int64_t at = 0;
    for (int j = 0; j < me->n && st == RV_OK; j++) {
        size_t from = (size_t)(me->off[j] + piece[j].start) * rowf, n = (size_t)piece[j].len * rowf;
        if ((st = cp_copy(cp, pk + at * rowf, k + from, n)) == RV_OK)
            st = cp_copy(cp, pv + at * rowf, v + from, n);
        at += piece[j].len;
    }
    return st != RV_OK ? st : cp->be->synchronize(cp->be);
}

rv_status cp_ring_forward(rv_cp_attn *cp, const float *q, const float *k, const float *v,
                          float *o, float *lse)
{
    const int n = cp->comm->size, r = cp->comm->rank, H = cp->heads, d = cp->dim;
    const size_t rowf = (size_t)H * d;
    const cp_segs me = cp_segs_of(&cp->plan, r);
    /* Blocks travel in m chunks, each chunk a ring pass of its own, so only two
     * chunks are in flight: memory per rank stays near its own slice. */
    int64_t maxchunk = 0;
    const int m = ring_chunks(cp, &maxchunk);
    rv_status st = RV_OK;
    rv_comm_request *reqs[4] = {0};
    float *buf[2] = {0}, *lse_acc[RV_SHARD_MAX_SEGS] = {0};
    size_t bytes = sizeof(float) * (4 * maxchunk * rowf + (size_t)H * me.len);
    for (int b = 0; b < 2 && st == RV_OK; b++)
        st = cp_alloc(cp, 2 * maxchunk * rowf, &buf[b]);
    for (int i = 0; i < me.n && st == RV_OK; i++)
        st = cp_alloc(cp, (size_t)H * me.seg[i].len, &lse_acc[i]);
    if (st != RV_OK)
        goto end;
    cp_note_peak(cp, bytes);
    if ((st = cp->be->fill(cp->be, o, 0.0f, me.len * rowf)) != RV_OK)
        goto end;
    for (int i = 0; i < me.n; i++)
        if ((st = cp->be->fill(cp->be, lse_acc[i], -INFINITY, (size_t)H * me.seg[i].len)) != RV_OK)
            goto end;
    /* q, k, v may come from kernels still queued: finish them before k, v are sent. */
    if ((st = cp->be->synchronize(cp->be)) != RV_OK)
        goto end;

    for (int c = 0; c < m; c++) {
        rv_shard_seg piece[RV_SHARD_MAX_SEGS] = {{0}};
        chunk_pieces(&me, c, m, piece);
        /* Step 0 computes on our own chunk: in place when it is one piece, else
         * packed into buf[1] (free: every step ends with its transfers and kernels
         * done, and step 0 receives into buf[0]). */
        const float *ck = k + piece[0].start * rowf, *cv = v + piece[0].start * rowf;
        if (me.n > 1) {
            if ((st = pack_own_chunk(cp, &me, piece, k, v, buf[1], buf[1] + maxchunk * rowf)) != RV_OK)
                goto end;
            ck = buf[1], cv = buf[1] + maxchunk * rowf;
        }
        for (int s = 0; s < n; s++) {
            int src = (r - s + n) % n, next = (r - s - 1 + n) % n;
            cp_segs ks = cp_segs_of(&cp->plan, src), ns = cp_segs_of(&cp->plan, next);
            rv_shard_seg kp[RV_SHARD_MAX_SEGS], np[RV_SHARD_MAX_SEGS];
            const int64_t rows = chunk_pieces(&ks, c, m, kp);
            const int64_t nrows = chunk_pieces(&ns, c, m, np);
            float *nk = buf[s % 2], *nv = buf[s % 2] + maxchunk * rowf;
            if (s < n - 1 && (st = post_kv(cp, ck, cv, rows, nk, nv, nrows, reqs)) != RV_OK)
                goto end;
            double t0 = cp_now();
            int64_t at = 0; /* piece j's first row in the chunk */
            for (int j = 0; j < ks.n; at += kp[j].len, j++) {
                if (kp[j].len == 0)
                    continue;
                rv_shard_seg kseg = {ks.seg[j].start + kp[j].start, kp[j].len};
                for (int i = 0; i < me.n; i++) {
                    if (cp_fully_masked(cp, me.seg[i], kseg))
                        continue;
                    rv_attn_fwd_args a = {q + me.off[i] * rowf, ck + at * rowf, cv + at * rowf,
                                          o + me.off[i] * rowf, lse_acc[i], (int)me.seg[i].len,
                                          (int)kseg.len, H, d, cp->scale,
                                          cp_mask(cp, me.seg[i], kseg), 1};
                    if ((st = cp->be->attn_fwd(cp->be, &a)) != RV_OK)
                        goto end;
                    cp->stats.flops += 4.0 * d * H * rv_cp_visible_pairs(me.seg[i], kseg, cp->causal);
                }
            }
            /* The transfer runs while the kernels do; buf[(s + 1) % 2], which the
             * next step receives into, is free once this step's kernels end. */
            double busy = cp_now() - t0;
            if (s < n - 1 && (st = wait_all(cp, reqs, 4)) != RV_OK)
                goto end;
            t0 = cp_now();
            if ((st = cp_busy_end(cp, t0)) != RV_OK)
                goto end;
            cp->stats.busy_s += busy;
            if (s < n - 1)
                ck = nk, cv = nv;
        }
    }
    for (int i = 0; i < me.n; i++)
        if ((st = cp_lse_to_slice(cp, lse_acc[i], me.seg[i].len, lse, me.len, me.off[i])) != RV_OK)
            goto end;
    st = cp->be->synchronize(cp->be);
end:
    for (int i = 0; i < 4; i++)
        rv_comm_request_free(&reqs[i]);
    /* Kernels may still read the buffers after an error: wait before freeing. */
    cp->be->synchronize(cp->be);
    cp_free(cp, &buf[0]), cp_free(cp, &buf[1]);
    for (int i = 0; i < RV_SHARD_MAX_SEGS; i++)
        cp_free(cp, &lse_acc[i]);
    return st;
}

rv_status cp_ring_backward(rv_cp_attn *cp, const float *q, const float *k, const float *v,
                           const float *o, const float *lse, const float *dout, float *dq,
                           float *dk, float *dv)
{
    rv_comm *c = cp->comm;
    const int n = c->size, r = c->rank, H = cp->heads, d = cp->dim;
    const int left = (r + n - 1) % n, right = (r + 1) % n;
    const size_t rowf = (size_t)H * d, rowb = rowf * sizeof(float);
    const cp_segs me = cp_segs_of(&cp->plan, r);
    const int64_t maxlen = rv_shard_max_len(&cp->plan), cap = maxlen > 0 ? maxlen : 1;
    rv_status st = RV_OK;
    rv_comm_request *kv_reqs[4] = {0}, *part_reqs[2] = {0}, *g_reqs[2][2] = {{0}};
    float *kvbuf[2] = {0}, *g[2] = {0}, *part = NULL, *lse_seg[RV_SHARD_MAX_SEGS] = {0};
    size_t bytes = sizeof(float) * (10 * cap * rowf + (size_t)H * me.len);
    for (int b = 0; b < 2 && st == RV_OK; b++) {
        st = cp_alloc(cp, 2 * cap * rowf, &kvbuf[b]);
        if (st == RV_OK)
            st = cp_alloc(cp, 2 * cap * rowf, &g[b]);
    }
    if (st == RV_OK)
        st = cp_alloc(cp, 2 * cap * rowf, &part);
    for (int i = 0; i < me.n && st == RV_OK; i++)
        st = cp_alloc(cp, (size_t)H * me.seg[i].len, &lse_seg[i]);
    if (st != RV_OK)
        goto end;
    cp_note_peak(cp, bytes);
    if ((st = cp->be->fill(cp->be, dq, 0.0f, me.len * rowf)) != RV_OK)
        goto end;
    for (int i = 0; i < me.n; i++)
        if ((st = cp_lse_from_slice(cp, lse, me.len, me.off[i], lse_seg[i], me.seg[i].len)) != RV_OK)
            goto end;
    /* The inputs may come from kernels still queued: finish them before k, v are sent. */
    if ((st = cp->be->synchronize(cp->be)) != RV_OK)
        goto end;

    const float *ck = k, *cv = v;
    for (int s = 0; s < n; s++) {
        int src = (r - s + n) % n, next = (r - s - 1 + n) % n;
        int64_t len = rv_shard_len(&cp->plan, src);
        float *gk = g[s % 2], *gv = g[s % 2] + cap * rowf;
        float *nk = kvbuf[s % 2], *nv = kvbuf[s % 2] + cap * rowf;
        /* The partial gradient of this block from the ranks it visited before. */
        if (s > 0 && ((st = rv_comm_irecv(c, part, len * rowb, left, TAG_DK, &part_reqs[0])) != RV_OK ||
                      (st = rv_comm_irecv(c, part + cap * rowf, len * rowb, left, TAG_DV,
                                          &part_reqs[1])) != RV_OK))
            goto end;
        if (s < n - 1 &&
            (st = post_kv(cp, ck, cv, len, nk, nv, rv_shard_len(&cp->plan, next), kv_reqs)) != RV_OK)
            goto end;
        /* g[s % 2] was sent two steps ago: that send must be done before reuse. */
        if ((st = wait_all(cp, g_reqs[s % 2], 2)) != RV_OK)
            goto end;
        if ((st = cp->be->fill(cp->be, gk, 0.0f, len * rowf)) != RV_OK ||
            (st = cp->be->fill(cp->be, gv, 0.0f, len * rowf)) != RV_OK)
            goto end;

        cp_segs ks = cp_segs_of(&cp->plan, src);
        double t0 = cp_now();
        for (int i = 0; i < me.n; i++)
            for (int j = 0; j < ks.n; j++) {
                if (cp_fully_masked(cp, me.seg[i], ks.seg[j]))
                    continue;
                size_t qo = me.off[i] * rowf, ko = ks.off[j] * rowf;
                rv_attn_bwd_args a = {q + qo, ck + ko, cv + ko, o + qo, lse_seg[i], dout + qo,
                                      dq + qo, gk + ko, gv + ko, (int)me.seg[i].len,
                                      (int)ks.seg[j].len, H, d, cp->scale,
                                      cp_mask(cp, me.seg[i], ks.seg[j]), 1};
                if ((st = cp->be->attn_bwd(cp->be, &a)) != RV_OK)
                    goto end;
                cp->stats.flops += 10.0 * d * H *
                                   rv_cp_visible_pairs(me.seg[i], ks.seg[j], cp->causal);
            }
        double busy = cp_now() - t0;

        /* The partial sum arrives while the kernels run; then the block's kernels and
         * the additions must be done before gk, gv are sent and part is received into. */
        if (s > 0) {
            if ((st = wait_all(cp, part_reqs, 2)) != RV_OK)
                goto end;
            if ((st = cp->be->add(cp->be, gk, part, (size_t)len * rowf)) != RV_OK ||
                (st = cp->be->add(cp->be, gv, part + cap * rowf, (size_t)len * rowf)) != RV_OK)
                goto end;
        }
        t0 = cp_now();
        if ((st = cp_busy_end(cp, t0)) != RV_OK)
            goto end;
        cp->stats.busy_s += busy;
        /* On to the next rank; after the last step the sum is complete and goes to
         * its owner, which is the next rank too. */
        int tk = s < n - 1 ? TAG_DK : TAG_FINAL_DK, tv = s < n - 1 ? TAG_DV : TAG_FINAL_DV;
        if ((st = rv_comm_isend(c, gk, len * rowb, right, tk, &g_reqs[s % 2][0])) != RV_OK ||
            (st = rv_comm_isend(c, gv, len * rowb, right, tv, &g_reqs[s % 2][1])) != RV_OK)
            goto end;
        cp->stats.bytes_sent += 2.0 * len * rowb;
        if (s < n - 1) {
            if ((st = wait_all(cp, kv_reqs, 4)) != RV_OK)
                goto end;
            ck = nk, cv = nv;
        }
    }
    /* Our own block's complete gradient comes back from the left. */
    rv_comm_request *fin[2] = {0};
    if ((st = rv_comm_irecv(c, dk, me.len * rowb, left, TAG_FINAL_DK, &fin[0])) != RV_OK ||
        (st = rv_comm_irecv(c, dv, me.len * rowb, left, TAG_FINAL_DV, &fin[1])) != RV_OK) {
        rv_comm_request_free(&fin[0]);
        goto end;
    }
    if ((st = wait_all(cp, fin, 2)) != RV_OK)
        goto end;
    for (int b = 0; b < 2; b++)
        if ((st = wait_all(cp, g_reqs[b], 2)) != RV_OK)
            goto end;
end:
    for (int i = 0; i < 4; i++)
        rv_comm_request_free(&kv_reqs[i]);
    for (int i = 0; i < 2; i++) {
        rv_comm_request_free(&part_reqs[i]);
        rv_comm_request_free(&g_reqs[0][i]);
        rv_comm_request_free(&g_reqs[1][i]);
    }
    cp->be->synchronize(cp->be); /* after an error kernels may still read the buffers */
    cp_free(cp, &kvbuf[0]), cp_free(cp, &kvbuf[1]), cp_free(cp, &g[0]), cp_free(cp, &g[1]);
    cp_free(cp, &part);
    for (int i = 0; i < RV_SHARD_MAX_SEGS; i++)
        cp_free(cp, &lse_seg[i]);
    return st;
}
