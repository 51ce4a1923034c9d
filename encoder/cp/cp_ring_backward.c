/* cp_ring_backward.c: the ring attention backward. Whole K/V blocks travel to
 * rank+1 (the CPU backward packs the query side on every call, which costs about
 * 40% more with 512-row key pieces than with whole blocks); each rank computes its
 * contribution to the visiting block's dK/dV in a fresh buffer while the partial
 * sum of the ranks before it arrives, adds it and passes it on, so the sum
 * reaches the block's owner after one last hop. dQ stays local. Message tags:
 * K, V (cp_common.h), partial dK 13, dV 14, final dK 15, dV 16.
 *
 * On a device backend the kernels are queued on its compute stream while the
 * transfer runs on the communicator's (NCCL's stream, or the copy of a local
 * run): post the exchange, queue the block's kernels, wait for the transfer,
 * then wait for the kernels (cp_busy_end) before a buffer they read is received
 * into or a result they wrote is sent. Buffers are the backend's memory. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cp_span.h"
#include "cp_strategies.h"

enum { TAG_DK = 13, TAG_DV = 14, TAG_FINAL_DK = 15, TAG_FINAL_DV = 16 };

/* Posts the exchange of one block: send (k, v) of `len` rows to the right, receive
 * the next block of `next_len` rows from the left into (nk, nv). */
static rv_status post_kv(rv_cp_attn *cp, const float *k, const float *v, int64_t len,
                         float *nk, float *nv, int64_t next_len, rv_comm_request *reqs[4])
{
    rv_comm *c = cp->comm;
    const size_t row = (size_t)cp->heads * cp->dim * sizeof(float);
    int left = (c->rank + c->size - 1) % c->size, right = (c->rank + 1) % c->size;
    rv_status st;
    if ((st = rv_comm_irecv(c, nk, next_len * row, left, CP_TAG_K, &reqs[0])) != RV_OK ||
        (st = rv_comm_irecv(c, nv, next_len * row, left, CP_TAG_V, &reqs[1])) != RV_OK ||
        (st = rv_comm_isend(c, k, len * row, right, CP_TAG_K, &reqs[2])) != RV_OK ||
        (st = rv_comm_isend(c, v, len * row, right, CP_TAG_V, &reqs[3])) != RV_OK)
        return st;
    cp->stats.bytes_sent += 2.0 * len * row;
    return RV_OK;
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
        /* Under way before this step's gradient sends are posted: on NCCL (which
         * holds posts until the next wait) they would otherwise go out in one group
         * with them, and that group could not complete until the right neighbour
         * posted its receive for the gradient, which it does only after its own
         * such group completed: a cycle round the ring once blocks outgrow NCCL's
         * buffers (tests/unit/test_comm_strict.c keeps the old schedule). */
        if ((st = rv_comm_start(c)) != RV_OK)
            goto end;
        /* g[s % 2] was sent two steps ago: that send must be done before reuse. */
        if ((st = cp_wait(cp, g_reqs[s % 2], 2)) != RV_OK)
            goto end;
        if ((st = cp->be->fill(cp->be, gk, 0.0f, len * rowf)) != RV_OK ||
            (st = cp->be->fill(cp->be, gv, 0.0f, len * rowf)) != RV_OK)
            goto end;

        cp_segs ks = cp_segs_of(&cp->plan, src);
        double t0 = rv_clock_s();
        for (int i = 0; i < me.n; i++)
            for (int j = 0; j < ks.n; j++) {
                if (cp_fully_masked(cp, me.seg[i], ks.seg[j]))
                    continue;
                size_t qo = me.off[i] * rowf, ko = ks.off[j] * rowf;
                rv_attn_bwd_args a = {.q = q + qo, .k = ck + ko, .v = cv + ko, .o = o + qo,
                                      .lse = lse_seg[i], .dout = dout + qo, .dq = dq + qo,
                                      .dk = gk + ko, .dv = gv + ko, .sq = (int)me.seg[i].len,
                                      .sk = (int)ks.seg[j].len, .heads = H, .dim = d,
                                      .scale = cp->scale, .mask = cp_mask(cp, me.seg[i], ks.seg[j]),
                                      .accumulate = 1};
                if ((st = cp->be->attn_bwd(cp->be, &a)) != RV_OK)
                    goto end;
                cp->stats.flops += 10.0 * d * H *
                                   rv_cp_visible_pairs(me.seg[i], ks.seg[j], cp->causal);
            }
        double busy = rv_clock_s() - t0;

        /* The partial sum arrives while the kernels run; then the block's kernels and
         * the additions must be done before gk, gv are sent and part is received into. */
        if (s > 0) {
            if ((st = cp_wait(cp, part_reqs, 2)) != RV_OK)
                goto end;
            if ((st = cp->be->add(cp->be, gk, part, (size_t)len * rowf)) != RV_OK ||
                (st = cp->be->add(cp->be, gv, part + cap * rowf, (size_t)len * rowf)) != RV_OK)
                goto end;
        }
        t0 = rv_clock_s();
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
            if ((st = cp_wait(cp, kv_reqs, 4)) != RV_OK)
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
    if ((st = cp_wait(cp, fin, 2)) != RV_OK)
        goto end;
    for (int b = 0; b < 2; b++)
        if ((st = cp_wait(cp, g_reqs[b], 2)) != RV_OK)
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
