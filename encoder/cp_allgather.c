/* cp_allgather.c: all-gather attention. Every rank gathers all K/V into global
 * order (memory O(S * heads * dim) per rank for K/V), then runs one local tiled
 * attention per query segment; the causal mask uses the segments' global offsets.
 * Backward: each rank computes its queries' contributions to dK/dV for every key,
 * the contributions are summed over ranks (all-reduce) and each rank keeps its own
 * rows. The gather is one blocking collective: it does not overlap the compute. */
#include <stdlib.h>
#include <string.h>

#include "cp_internal.h"

/* x (len, row floats) of every rank -> global (S, row). padded holds N blocks. */
static rv_status gather_global(rv_cp_attn *cp, const float *x, int64_t len, float *padded,
                               float *global)
{
    const int64_t maxlen = rv_shard_max_len(&cp->plan);
    const size_t rowf = (size_t)cp->heads * cp->dim, block = maxlen * rowf;
    float *mine = padded + (size_t)cp->comm->rank * block;
    memcpy(mine, x, sizeof(float) * len * rowf);
    memset(mine + len * rowf, 0, sizeof(float) * (block - len * rowf));
    double t0 = cp_now();
    rv_status st = rv_comm_allgather(cp->comm, mine, padded, sizeof(float) * block);
    cp->stats.wait_s += cp_now() - t0;
    cp->stats.bytes_sent += (double)(cp->comm->size - 1) * block * sizeof(float);
    if (st == RV_OK)
        cp_unpad_to_global(&cp->plan, padded, maxlen, rowf, global);
    return st;
}

typedef struct gathered {
    float *padded; /* (N, maxlen, heads, dim) */
    float *k, *v;  /* (S, heads, dim) */
    size_t bytes;
} gathered;

static rv_status gather_kv(rv_cp_attn *cp, const float *k, const float *v, gathered *g)
{
    const int64_t maxlen = rv_shard_max_len(&cp->plan), len = rv_shard_len(&cp->plan, cp->comm->rank);
    const size_t rowf = (size_t)cp->heads * cp->dim;
    const size_t npad = (size_t)cp->comm->size * (maxlen > 0 ? maxlen : 1) * rowf;
    const size_t nglob = (size_t)(cp->plan.seq > 0 ? cp->plan.seq : 1) * rowf;
    g->padded = malloc(sizeof(float) * npad);
    g->k = malloc(sizeof(float) * nglob);
    g->v = malloc(sizeof(float) * nglob);
    g->bytes = sizeof(float) * (npad + 2 * nglob);
    if (!g->padded || !g->k || !g->v)
        return rv_fail(RV_ERR_NOMEM, "allgather attention: cannot allocate %zu bytes", g->bytes);
    rv_status st = gather_global(cp, k, len, g->padded, g->k);
    if (st == RV_OK)
        st = gather_global(cp, v, len, g->padded, g->v);
    return st;
}

static void gathered_free(gathered *g)
{
    free(g->padded), free(g->k), free(g->v);
}

rv_status cp_allgather_forward(rv_cp_attn *cp, const float *q, const float *k,
                               const float *v, float *o, float *lse)
{
    const int H = cp->heads, d = cp->dim;
    const size_t rowf = (size_t)H * d;
    const cp_segs me = cp_segs_of(&cp->plan, cp->comm->rank);
    rv_shard_seg all = {0, cp->plan.seq};
    gathered g = {0};
    float *lse_seg = malloc(sizeof(float) * H * (me.len > 0 ? me.len : 1));
    rv_status st = lse_seg ? gather_kv(cp, k, v, &g)
                           : rv_fail(RV_ERR_NOMEM, "allgather attention: out of memory");
    if (st != RV_OK)
        goto end;
    cp_note_peak(cp, g.bytes);
    double t0 = cp_now();
    for (int i = 0; i < me.n; i++) {
        if (me.seg[i].len == 0)
            continue;
        rv_attn_fwd_args a = {q + me.off[i] * rowf, g.k, g.v, o + me.off[i] * rowf, lse_seg,
                              (int)me.seg[i].len, (int)cp->plan.seq, H, d, cp->scale,
                              cp_mask(cp, me.seg[i], all), 0};
        if ((st = cp->be->attn_fwd(cp->be, &a)) != RV_OK)
            goto end;
        cp_lse_to_slice(lse_seg, H, me.seg[i].len, lse, me.len, me.off[i]);
        cp->stats.flops += 4.0 * d * H * rv_cp_visible_pairs(me.seg[i], all, cp->causal);
    }
    cp->stats.busy_s += cp_now() - t0;
end:
    gathered_free(&g);
    free(lse_seg);
    return st;
}

rv_status cp_allgather_backward(rv_cp_attn *cp, const float *q, const float *k,
                                const float *v, const float *o, const float *lse,
                                const float *dout, float *dq, float *dk, float *dv)
{
    const int H = cp->heads, d = cp->dim;
    const size_t rowf = (size_t)H * d, nglob = (size_t)cp->plan.seq * rowf;
    const cp_segs me = cp_segs_of(&cp->plan, cp->comm->rank);
    rv_shard_seg all = {0, cp->plan.seq};
    gathered g = {0};
    float *lse_seg = malloc(sizeof(float) * H * (me.len > 0 ? me.len : 1));
    float *dkg = calloc(nglob > 0 ? nglob : 1, sizeof(float));
    float *dvg = calloc(nglob > 0 ? nglob : 1, sizeof(float));
    rv_status st = lse_seg && dkg && dvg
                       ? gather_kv(cp, k, v, &g)
                       : rv_fail(RV_ERR_NOMEM, "allgather attention backward: out of memory");
    if (st != RV_OK)
        goto end;
    cp_note_peak(cp, g.bytes + 2 * sizeof(float) * nglob);
    memset(dq, 0, sizeof(float) * me.len * rowf);
    double t0 = cp_now();
    for (int i = 0; i < me.n; i++) {
        if (me.seg[i].len == 0)
            continue;
        size_t qo = me.off[i] * rowf;
        cp_lse_from_slice(lse, H, me.len, me.off[i], lse_seg, me.seg[i].len);
        rv_attn_bwd_args a = {q + qo, g.k, g.v, o + qo, lse_seg, dout + qo, dq + qo, dkg, dvg,
                              (int)me.seg[i].len, (int)cp->plan.seq, H, d, cp->scale,
                              cp_mask(cp, me.seg[i], all), 1};
        if ((st = cp->be->attn_bwd(cp->be, &a)) != RV_OK)
            goto end;
        cp->stats.flops += 10.0 * d * H * rv_cp_visible_pairs(me.seg[i], all, cp->causal);
    }
    cp->stats.busy_s += cp_now() - t0;
    t0 = cp_now();
    if ((st = rv_comm_allreduce(cp->comm, dkg, dkg, nglob, RV_COMM_F32)) != RV_OK ||
        (st = rv_comm_allreduce(cp->comm, dvg, dvg, nglob, RV_COMM_F32)) != RV_OK)
        goto end;
    cp->stats.wait_s += cp_now() - t0;
    cp->stats.bytes_sent += 2.0 * 2.0 * (cp->comm->size - 1) / cp->comm->size * nglob * sizeof(float);
    for (int i = 0; i < me.n; i++) {
        memcpy(dk + me.off[i] * rowf, dkg + me.seg[i].start * rowf,
               sizeof(float) * me.seg[i].len * rowf);
        memcpy(dv + me.off[i] * rowf, dvg + me.seg[i].start * rowf,
               sizeof(float) * me.seg[i].len * rowf);
    }
end:
    gathered_free(&g);
    free(lse_seg), free(dkg), free(dvg);
    return st;
}
