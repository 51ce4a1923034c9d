/* cp_ulysses.c: Ulysses (DeepSpeed) sequence parallelism. An all-to-all turns the
 * sequence-sharded (len, heads, dim) slices into head-sharded full sequences
 * (S, heads/N, dim); each rank runs ordinary attention over the whole sequence on
 * its heads; a second all-to-all turns the outputs back. Slices of unequal length
 * travel padded to the longest. Backward re-shards Q, K, V, O, dO and the lse the
 * same way and sends dQ, dK, dV back. Buffers are the backend's memory; the
 * re-ordering is strided copies through its table. */
#include "cp_span.h"
#include "cp_strategies.h"

typedef struct uly {
    rv_cp_attn *cp;
    int hg;          /* heads per rank */
    int64_t maxlen;  /* longest slice */
    int64_t len;     /* this rank's slice */
    size_t block;    /* floats per all-to-all block: maxlen * hg * dim */
    float *send, *recv; /* (N, block) scratch, the backend's memory */
} uly;

static rv_status uly_open(rv_cp_attn *cp, uly *u)
{
    u->cp = cp;
    u->hg = cp->heads / cp->comm->size;
    u->maxlen = rv_shard_max_len(&cp->plan);
    u->len = rv_shard_len(&cp->plan, cp->comm->rank);
    u->block = (size_t)(u->maxlen > 0 ? u->maxlen : 1) * u->hg * cp->dim;
    const size_t nf = (size_t)cp->comm->size * u->block;
    rv_status st;
    /* Padding rows travel too: zero them once so no uninitialised bytes move. */
    if ((st = cp_alloc(cp, nf, &u->send)) != RV_OK || (st = cp_alloc(cp, nf, &u->recv)) != RV_OK ||
        (st = cp->be->fill(cp->be, u->send, 0.0f, nf)) != RV_OK)
        return st;
    return cp->be->fill(cp->be, u->recv, 0.0f, nf);
}

static void uly_close(uly *u)
{
    if (!u->cp)
        return;
    u->cp->be->synchronize(u->cp->be);
    cp_free(u->cp, &u->send), cp_free(u->cp, &u->recv);
}

/* The all-to-all of send into recv, once the kernels that filled send are done. */
static rv_status uly_exchange(uly *u)
{
    rv_cp_attn *cp = u->cp;
    rv_status st = cp->be->synchronize(cp->be);
    if (st != RV_OK)
        return st;
    double t0 = rv_clock_s();
    st = rv_comm_alltoall(cp->comm, u->send, u->recv, sizeof(float) * u->block);
    cp->stats.wait_s += rv_clock_s() - t0;
    cp->stats.bytes_sent += (double)(cp->comm->size - 1) * u->block * sizeof(float);
    return st;
}

/* x (len, heads, dim) on every rank -> xg (S, hg, dim): the whole sequence, our heads. */
static rv_status uly_to_heads(uly *u, const float *x, float *xg)
{
    rv_backend *be = u->cp->be;
    const int n = u->cp->comm->size, d = u->cp->dim, H = u->cp->heads;
    const size_t w = (size_t)u->hg * d;
    rv_status st = RV_OK;
    /* Block j gets heads [j*hg, (j+1)*hg) of every row: len rows of w floats. */
    for (int j = 0; j < n && st == RV_OK && u->len > 0; j++)
        st = be->copy2d(be, u->send + j * u->block, sizeof(float) * w, x + (size_t)j * u->hg * d,
                        sizeof(float) * H * d, sizeof(float) * w, (size_t)u->len);
    if (st == RV_OK)
        st = uly_exchange(u);
    if (st == RV_OK)
        st = cp_unpad_to_global(u->cp, u->recv, u->maxlen, w, xg);
    return st;
}

/* xg (S, hg, dim) -> x (len, heads, dim): our rows, every head. */
static rv_status uly_from_heads(uly *u, const float *xg, float *x)
{
    rv_backend *be = u->cp->be;
    const int n = u->cp->comm->size, d = u->cp->dim, H = u->cp->heads;
    const size_t w = (size_t)u->hg * d;
    rv_status st = cp_global_to_padded(u->cp, xg, u->maxlen, w, u->send);
    if (st == RV_OK)
        st = uly_exchange(u);
    for (int j = 0; j < n && st == RV_OK && u->len > 0; j++)
        st = be->copy2d(be, x + (size_t)j * u->hg * d, sizeof(float) * H * d,
                        u->recv + j * u->block, sizeof(float) * w, sizeof(float) * w,
                        (size_t)u->len);
    return st;
}

/* lse (heads, len) -> lseg (hg, S). */
static rv_status uly_lse_to_heads(uly *u, const float *lse, float *lseg)
{
    rv_backend *be = u->cp->be;
    const int n = u->cp->comm->size, hg = u->hg;
    const int64_t S = u->cp->plan.seq;
    rv_status st = RV_OK;
    /* Block j: hg rows (heads j*hg..) of len floats, at a pitch of maxlen. */
    for (int j = 0; j < n && st == RV_OK && u->len > 0; j++)
        st = be->copy2d(be, u->send + j * u->block, sizeof(float) * u->maxlen,
                        lse + (size_t)j * hg * u->len, sizeof(float) * u->len,
                        sizeof(float) * u->len, (size_t)hg);
    if (st == RV_OK)
        st = uly_exchange(u);
    for (int i = 0; i < n && st == RV_OK; i++) {
        cp_segs s = cp_segs_of(&u->cp->plan, i);
        for (int g = 0; g < s.n && st == RV_OK; g++)
            if (s.seg[g].len > 0)
                st = be->copy2d(be, lseg + s.seg[g].start, sizeof(float) * S,
                                u->recv + i * u->block + s.off[g], sizeof(float) * u->maxlen,
                                sizeof(float) * s.seg[g].len, (size_t)hg);
    }
    return st;
}

/* lseg (hg, S) -> lse (heads, len). */
static rv_status uly_lse_from_heads(uly *u, const float *lseg, float *lse)
{
    rv_backend *be = u->cp->be;
    const int n = u->cp->comm->size, hg = u->hg;
    const int64_t S = u->cp->plan.seq;
    rv_status st = RV_OK;
    for (int i = 0; i < n && st == RV_OK; i++) {
        cp_segs s = cp_segs_of(&u->cp->plan, i);
        for (int g = 0; g < s.n && st == RV_OK; g++)
            if (s.seg[g].len > 0)
                st = be->copy2d(be, u->send + i * u->block + s.off[g], sizeof(float) * u->maxlen,
                                lseg + s.seg[g].start, sizeof(float) * S,
                                sizeof(float) * s.seg[g].len, (size_t)hg);
    }
    if (st == RV_OK)
        st = uly_exchange(u);
    for (int j = 0; j < n && st == RV_OK && u->len > 0; j++)
        st = be->copy2d(be, lse + (size_t)j * hg * u->len, sizeof(float) * u->len,
                        u->recv + j * u->block, sizeof(float) * u->maxlen,
                        sizeof(float) * u->len, (size_t)hg);
    return st;
}

/* Head-sharded full-sequence tensors: count of them, each (S, hg, dim). */
static rv_status alloc_global(const uly *u, int count, float **t, size_t *bytes)
{
    size_t nf = (size_t)(u->cp->plan.seq > 0 ? u->cp->plan.seq : 1) * u->hg * u->cp->dim;
    *bytes = sizeof(float) * nf * count;
    rv_status st = RV_OK;
    for (int i = 0; i < count && st == RV_OK; i++)
        st = cp_alloc(u->cp, nf, &t[i]);
    return st;
}

static void free_global(rv_cp_attn *cp, float **t, int count)
{
    cp->be->synchronize(cp->be);
    for (int i = 0; i < count; i++)
        cp_free(cp, &t[i]);
}

rv_status cp_ulysses_forward(rv_cp_attn *cp, const float *q, const float *k, const float *v,
                             float *o, float *lse)
{
    uly u = {0};
    size_t bytes = 0;
    float *g[4] = {0}, *lseg = NULL; /* g: qg, kg, vg, og */
    rv_shard_seg all = {.start = 0, .len = cp->plan.seq};
    rv_status st = uly_open(cp, &u);
    if (st != RV_OK || (st = alloc_global(&u, 4, g, &bytes)) != RV_OK ||
        (st = cp_alloc(cp, (size_t)u.hg * cp->plan.seq, &lseg)) != RV_OK)
        goto end;
    cp_note_peak(cp, bytes + 2 * sizeof(float) * cp->comm->size * u.block);
    if ((st = uly_to_heads(&u, q, g[0])) != RV_OK || (st = uly_to_heads(&u, k, g[1])) != RV_OK ||
        (st = uly_to_heads(&u, v, g[2])) != RV_OK)
        goto end;
    rv_attn_fwd_args a = {.q = g[0], .k = g[1], .v = g[2], .o = g[3], .lse = lseg,
                          .sq = (int)cp->plan.seq, .sk = (int)cp->plan.seq, .heads = u.hg,
                          .dim = cp->dim, .scale = cp->scale, .mask = cp_mask(cp, all, all),
                          .accumulate = 0};
    double t0 = rv_clock_s();
    if ((st = cp->be->attn_fwd(cp->be, &a)) != RV_OK || (st = cp_busy_end(cp, t0)) != RV_OK)
        goto end;
    cp->stats.flops += 4.0 * cp->dim * u.hg * cp_pairs_all(cp, -1, all);
    if ((st = uly_from_heads(&u, g[3], o)) != RV_OK)
        goto end;
    if ((st = uly_lse_from_heads(&u, lseg, lse)) == RV_OK)
        st = cp->be->synchronize(cp->be);
end:
    free_global(cp, g, 4);
    cp_free(cp, &lseg);
    uly_close(&u);
    return st;
}

rv_status cp_ulysses_backward(rv_cp_attn *cp, const float *q, const float *k,
                              const float *v, const float *o, const float *lse,
                              const float *dout, float *dq, float *dk, float *dv)
{
    uly u = {0};
    size_t bytes = 0;
    float *g[8] = {0}, *lseg = NULL; /* g: q, k, v, o, dout, dq, dk, dv (head-sharded) */
    rv_shard_seg all = {.start = 0, .len = cp->plan.seq};
    rv_status st = uly_open(cp, &u);
    if (st != RV_OK || (st = alloc_global(&u, 8, g, &bytes)) != RV_OK ||
        (st = cp_alloc(cp, (size_t)u.hg * cp->plan.seq, &lseg)) != RV_OK)
        goto end;
    cp_note_peak(cp, bytes + 2 * sizeof(float) * cp->comm->size * u.block);
    const float *in[5] = {q, k, v, o, dout};
    for (int i = 0; i < 5; i++)
        if ((st = uly_to_heads(&u, in[i], g[i])) != RV_OK)
            goto end;
    if ((st = uly_lse_to_heads(&u, lse, lseg)) != RV_OK)
        goto end;
    rv_attn_bwd_args a = {.q = g[0], .k = g[1], .v = g[2], .o = g[3], .lse = lseg, .dout = g[4],
                          .dq = g[5], .dk = g[6], .dv = g[7], .sq = (int)cp->plan.seq,
                          .sk = (int)cp->plan.seq, .heads = u.hg, .dim = cp->dim,
                          .scale = cp->scale, .mask = cp_mask(cp, all, all), .accumulate = 0};
    double t0 = rv_clock_s();
    if ((st = cp->be->attn_bwd(cp->be, &a)) != RV_OK || (st = cp_busy_end(cp, t0)) != RV_OK)
        goto end;
    cp->stats.flops += 10.0 * cp->dim * u.hg * cp_pairs_all(cp, -1, all);
    if ((st = uly_from_heads(&u, g[5], dq)) != RV_OK ||
        (st = uly_from_heads(&u, g[6], dk)) != RV_OK)
        goto end;
    if ((st = uly_from_heads(&u, g[7], dv)) == RV_OK)
        st = cp->be->synchronize(cp->be);
end:
    free_global(cp, g, 8);
    cp_free(cp, &lseg);
    uly_close(&u);
    return st;
}

rv_status cp_ulysses_span_setup(rv_cp_attn *cp)
{
    rv_status st = cp_span_gather_keys(cp);
    if (st != RV_OK)
        return st;
    /* Each rank attends over the whole sequence on its heads: count its pairs once. */
    rv_cp_span_state *s = cp->span;
    const int64_t S = cp->plan.seq;
    s->all_pairs = cp_span_pairs(s->g_key_h, s->g_time_h, 0, S, s->g_key_h, s->g_time_h, 0, S,
                                 s->reach, cp->causal);
    return RV_OK;
}
