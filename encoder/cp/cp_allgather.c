/* cp_allgather.c: all-gather attention. Every rank gathers all K/V into global
 * order (memory O(S * heads * dim) per rank for K/V), then runs one local tiled
 * attention per query segment; the causal mask uses the segments' global offsets.
 * Backward: each rank computes its queries' contributions to dK/dV for every key;
 * a reduce-scatter (one all-to-all of each rank's rows, then a sum on the owner)
 * leaves each rank the complete gradient of its own rows. The gather is one
 * blocking collective: it does not overlap the compute. Buffers are the backend's
 * memory; kernels finish (synchronize) before their results are sent. */
#include "cp_span.h"
#include "cp_strategies.h"

/* x (len, row floats) of every rank -> global (S, row). padded holds N blocks. */
static rv_status gather_global(rv_cp_attn *cp, const float *x, int64_t len, float *padded,
                               float *global)
{
    const int64_t maxlen = rv_shard_max_len(&cp->plan);
    const size_t rowf = (size_t)cp->heads * cp->dim, block = maxlen * rowf;
    float *mine = padded + (size_t)cp->comm->rank * block;
    rv_status st;
    if ((st = cp_copy(cp, mine, x, len * rowf)) != RV_OK ||
        (st = cp->be->fill(cp->be, mine + len * rowf, 0.0f, block - len * rowf)) != RV_OK ||
        (st = cp->be->synchronize(cp->be)) != RV_OK)
        return st;
    double t0 = rv_clock_s();
    st = rv_comm_allgather(cp->comm, mine, padded, sizeof(float) * block);
    cp->stats.wait_s += rv_clock_s() - t0;
    cp->stats.bytes_sent += (double)(cp->comm->size - 1) * block * sizeof(float);
    if (st == RV_OK)
        st = cp_unpad_to_global(cp, padded, maxlen, rowf, global);
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
    g->bytes = sizeof(float) * (npad + 2 * nglob);
    rv_status st;
    if ((st = cp_alloc(cp, npad, &g->padded)) != RV_OK || (st = cp_alloc(cp, nglob, &g->k)) != RV_OK ||
        (st = cp_alloc(cp, nglob, &g->v)) != RV_OK)
        return st;
    if ((st = gather_global(cp, k, len, g->padded, g->k)) == RV_OK)
        st = gather_global(cp, v, len, g->padded, g->v);
    return st;
}

static void gathered_free(rv_cp_attn *cp, gathered *g)
{
    cp->be->synchronize(cp->be); /* kernels may still read them after an error */
    cp_free(cp, &g->padded), cp_free(cp, &g->k), cp_free(cp, &g->v);
}

rv_status cp_allgather_forward(rv_cp_attn *cp, const float *q, const float *k,
                               const float *v, float *o, float *lse)
{
    const int H = cp->heads, d = cp->dim;
    const size_t rowf = (size_t)H * d;
    const cp_segs me = cp_segs_of(&cp->plan, cp->comm->rank);
    rv_shard_seg all = {.start = 0, .len = cp->plan.seq};
    gathered g = {0};
    float *lse_seg[RV_SHARD_MAX_SEGS] = {0};
    rv_status st = RV_OK;
    for (int i = 0; i < me.n && st == RV_OK; i++)
        st = cp_alloc(cp, (size_t)H * me.seg[i].len, &lse_seg[i]);
    if (st != RV_OK || (st = gather_kv(cp, k, v, &g)) != RV_OK)
        goto end;
    cp_note_peak(cp, g.bytes);
    double t0 = rv_clock_s();
    for (int i = 0; i < me.n; i++) {
        if (me.seg[i].len == 0)
            continue;
        rv_attn_fwd_args a = {.q = q + me.off[i] * rowf, .k = g.k, .v = g.v,
                              .o = o + me.off[i] * rowf, .lse = lse_seg[i],
                              .sq = (int)me.seg[i].len, .sk = (int)cp->plan.seq, .heads = H,
                              .dim = d, .scale = cp->scale, .mask = cp_mask(cp, me.seg[i], all),
                              .accumulate = 0};
        if ((st = cp->be->attn_fwd(cp->be, &a)) != RV_OK ||
            (st = cp_lse_to_slice(cp, lse_seg[i], me.seg[i].len, lse, me.len, me.off[i])) != RV_OK)
            goto end;
        cp->stats.flops += 4.0 * d * H * cp_pairs_all(cp, i, me.seg[i]);
    }
    st = cp_busy_end(cp, t0);
end:
    gathered_free(cp, &g);
    for (int i = 0; i < RV_SHARD_MAX_SEGS; i++)
        cp_free(cp, &lse_seg[i]);
    return st;
}

/* Global-order gradients (S, rowf) of every rank -> this rank's rows, summed over
 * ranks: an all-to-all of the per-owner padded blocks, then N additions. */
static rv_status reduce_scatter(rv_cp_attn *cp, const float *global, float *send, float *recv,
                                float *mine)
{
    const int n = cp->comm->size;
    const int64_t maxlen = rv_shard_max_len(&cp->plan), len = rv_shard_len(&cp->plan, cp->comm->rank);
    const size_t rowf = (size_t)cp->heads * cp->dim, block = (size_t)maxlen * rowf;
    rv_status st;
    if ((st = cp_global_to_padded(cp, global, maxlen, rowf, send)) != RV_OK ||
        (st = cp->be->synchronize(cp->be)) != RV_OK)
        return st;
    double t0 = rv_clock_s();
    st = rv_comm_alltoall(cp->comm, send, recv, sizeof(float) * block);
    cp->stats.wait_s += rv_clock_s() - t0;
    cp->stats.bytes_sent += (double)(n - 1) * block * sizeof(float);
    if (st != RV_OK)
        return st;
    if ((st = cp_copy(cp, mine, recv, (size_t)len * rowf)) != RV_OK)
        return st;
    for (int j = 1; j < n; j++)
        if ((st = cp->be->add(cp->be, mine, recv + (size_t)j * block, (size_t)len * rowf)) != RV_OK)
            return st;
    return RV_OK;
}

rv_status cp_allgather_backward(rv_cp_attn *cp, const float *q, const float *k,
                                const float *v, const float *o, const float *lse,
                                const float *dout, float *dq, float *dk, float *dv)
{
    const int H = cp->heads, d = cp->dim, n = cp->comm->size;
    const size_t rowf = (size_t)H * d, nglob = (size_t)cp->plan.seq * rowf;
    const size_t npad = (size_t)n * (size_t)rv_shard_max_len(&cp->plan) * rowf;
    const cp_segs me = cp_segs_of(&cp->plan, cp->comm->rank);
    rv_shard_seg all = {.start = 0, .len = cp->plan.seq};
    gathered g = {0};
    float *lse_seg = NULL, *dkg = NULL, *dvg = NULL, *recv = NULL;
    rv_status st;
    if ((st = cp_alloc(cp, (size_t)H * me.len, &lse_seg)) != RV_OK ||
        (st = cp_alloc(cp, nglob, &dkg)) != RV_OK || (st = cp_alloc(cp, nglob, &dvg)) != RV_OK ||
        (st = gather_kv(cp, k, v, &g)) != RV_OK)
        goto end;
    /* The gathered K, V make way for the reduce-scatter's receive buffer, and the
     * gather's padded buffer is its send buffer: the peak is the compute's. */
    cp_note_peak(cp, g.bytes + sizeof(float) * 2 * nglob);
    if ((st = cp->be->fill(cp->be, dq, 0.0f, me.len * rowf)) != RV_OK ||
        (st = cp->be->fill(cp->be, dkg, 0.0f, nglob)) != RV_OK ||
        (st = cp->be->fill(cp->be, dvg, 0.0f, nglob)) != RV_OK)
        goto end;
    double t0 = rv_clock_s();
    for (int i = 0; i < me.n; i++) {
        if (me.seg[i].len == 0)
            continue;
        size_t qo = me.off[i] * rowf;
        if ((st = cp_lse_from_slice(cp, lse, me.len, me.off[i], lse_seg, me.seg[i].len)) != RV_OK)
            goto end;
        rv_attn_bwd_args a = {.q = q + qo, .k = g.k, .v = g.v, .o = o + qo, .lse = lse_seg,
                              .dout = dout + qo, .dq = dq + qo, .dk = dkg, .dv = dvg,
                              .sq = (int)me.seg[i].len, .sk = (int)cp->plan.seq, .heads = H,
                              .dim = d, .scale = cp->scale, .mask = cp_mask(cp, me.seg[i], all),
                              .accumulate = 1};
        if ((st = cp->be->attn_bwd(cp->be, &a)) != RV_OK)
            goto end;
        cp->stats.flops += 10.0 * d * H * cp_pairs_all(cp, i, me.seg[i]);
    }
    if ((st = cp_busy_end(cp, t0)) != RV_OK)
        goto end;
    cp_free(cp, &g.k), cp_free(cp, &g.v);
    if ((st = cp_alloc(cp, npad, &recv)) != RV_OK)
        goto end;
    /* Our rows of the summed dK and dV, in slice order. */
    if ((st = reduce_scatter(cp, dkg, g.padded, recv, dk)) != RV_OK ||
        (st = reduce_scatter(cp, dvg, g.padded, recv, dv)) != RV_OK)
        goto end;
    st = cp->be->synchronize(cp->be);
end:
    gathered_free(cp, &g);
    cp_free(cp, &lse_seg), cp_free(cp, &dkg), cp_free(cp, &dvg);
    cp_free(cp, &recv);
    return st;
}
