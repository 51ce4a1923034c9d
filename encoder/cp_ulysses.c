/* cp_ulysses.c: Ulysses (DeepSpeed) sequence parallelism. An all-to-all turns the
 * sequence-sharded (len, heads, dim) slices into head-sharded full sequences
 * (S, heads/N, dim); each rank runs ordinary attention over the whole sequence on
 * its heads; a second all-to-all turns the outputs back. Slices of unequal length
 * travel padded to the longest. Backward re-shards Q, K, V, O, dO and the lse the
 * same way and sends dQ, dK, dV back. */
#include <stdlib.h>
#include <string.h>

#include "cp_internal.h"

typedef struct uly {
    rv_cp_attn *cp;
    int hg;          /* heads per rank */
    int64_t maxlen;  /* longest slice */
    int64_t len;     /* this rank's slice */
    size_t block;    /* floats per all-to-all block: maxlen * hg * dim */
    float *send, *recv; /* (N, block) scratch */
} uly;

static rv_status uly_open(rv_cp_attn *cp, uly *u)
{
    u->cp = cp;
    u->hg = cp->heads / cp->comm->size;
    u->maxlen = rv_shard_max_len(&cp->plan);
    u->len = rv_shard_len(&cp->plan, cp->comm->rank);
    u->block = (size_t)(u->maxlen > 0 ? u->maxlen : 1) * u->hg * cp->dim;
    u->send = calloc((size_t)cp->comm->size * u->block, sizeof(float));
    u->recv = calloc((size_t)cp->comm->size * u->block, sizeof(float));
    if (!u->send || !u->recv)
        return rv_fail(RV_ERR_NOMEM, "ulysses attention: cannot allocate all-to-all buffers");
    return RV_OK;
}

static void uly_close(uly *u)
{
    free(u->send), free(u->recv);
    u->send = u->recv = NULL;
}

static rv_status uly_exchange(uly *u)
{
    rv_cp_attn *cp = u->cp;
    double t0 = cp_now();
    rv_status st = rv_comm_alltoall(cp->comm, u->send, u->recv, sizeof(float) * u->block);
    cp->stats.wait_s += cp_now() - t0;
    cp->stats.bytes_sent += (double)(cp->comm->size - 1) * u->block * sizeof(float);
    return st;
}

/* x (len, heads, dim) on every rank -> xg (S, hg, dim): the whole sequence, our heads. */
static rv_status uly_to_heads(uly *u, const float *x, float *xg)
{
    const int n = u->cp->comm->size, d = u->cp->dim, H = u->cp->heads;
    const size_t w = (size_t)u->hg * d;
    for (int j = 0; j < n; j++)
        for (int64_t t = 0; t < u->len; t++)
            memcpy(u->send + j * u->block + t * w, x + ((size_t)t * H + (size_t)j * u->hg) * d,
                   sizeof(float) * w);
    rv_status st = uly_exchange(u);
    if (st == RV_OK)
        cp_unpad_to_global(&u->cp->plan, u->recv, u->maxlen, w, xg);
    return st;
}

/* xg (S, hg, dim) -> x (len, heads, dim): our rows, every head. */
static rv_status uly_from_heads(uly *u, const float *xg, float *x)
{
    const int n = u->cp->comm->size, d = u->cp->dim, H = u->cp->heads;
    const size_t w = (size_t)u->hg * d;
    cp_global_to_padded(&u->cp->plan, xg, u->maxlen, w, u->send);
    rv_status st = uly_exchange(u);
    if (st != RV_OK)
        return st;
    for (int j = 0; j < n; j++)
        for (int64_t t = 0; t < u->len; t++)
            memcpy(x + ((size_t)t * H + (size_t)j * u->hg) * d, u->recv + j * u->block + t * w,
                   sizeof(float) * w);
    return RV_OK;
}

/* lse (heads, len) -> lseg (hg, S). */
static rv_status uly_lse_to_heads(uly *u, const float *lse, float *lseg)
{
    const int n = u->cp->comm->size, hg = u->hg;
    const int64_t S = u->cp->plan.seq;
    for (int j = 0; j < n; j++)
        for (int hh = 0; hh < hg; hh++)
            memcpy(u->send + j * u->block + (size_t)hh * u->maxlen,
                   lse + ((size_t)j * hg + hh) * u->len, sizeof(float) * u->len);
    rv_status st = uly_exchange(u);
    if (st != RV_OK)
        return st;
    for (int i = 0; i < n; i++) {
        cp_segs s = cp_segs_of(&u->cp->plan, i);
        for (int hh = 0; hh < hg; hh++)
            for (int g = 0; g < s.n; g++)
                memcpy(lseg + (size_t)hh * S + s.seg[g].start,
                       u->recv + i * u->block + (size_t)hh * u->maxlen + s.off[g],
                       sizeof(float) * s.seg[g].len);
    }
    return RV_OK;
}

/* lseg (hg, S) -> lse (heads, len). */
static rv_status uly_lse_from_heads(uly *u, const float *lseg, float *lse)
{
    const int n = u->cp->comm->size, hg = u->hg;
    const int64_t S = u->cp->plan.seq;
    for (int i = 0; i < n; i++) {
        cp_segs s = cp_segs_of(&u->cp->plan, i);
        for (int hh = 0; hh < hg; hh++)
            for (int g = 0; g < s.n; g++)
                memcpy(u->send + i * u->block + (size_t)hh * u->maxlen + s.off[g],
                       lseg + (size_t)hh * S + s.seg[g].start, sizeof(float) * s.seg[g].len);
    }
    rv_status st = uly_exchange(u);
    if (st != RV_OK)
        return st;
    for (int j = 0; j < n; j++)
        for (int hh = 0; hh < hg; hh++)
            memcpy(lse + ((size_t)j * hg + hh) * u->len,
                   u->recv + j * u->block + (size_t)hh * u->maxlen, sizeof(float) * u->len);
    return RV_OK;
}

/* Head-sharded full-sequence tensors: count of them, each (S, hg, dim). */
static float **alloc_global(const uly *u, int count, size_t *bytes)
{
    size_t nf = (size_t)(u->cp->plan.seq > 0 ? u->cp->plan.seq : 1) * u->hg * u->cp->dim;
    float **t = calloc((size_t)count, sizeof(float *));
    if (!t)
        return NULL;
    for (int i = 0; i < count; i++)
        if (!(t[i] = malloc(sizeof(float) * nf))) {
            for (int j = 0; j < i; j++)
                free(t[j]);
            free(t);
            return NULL;
        }
    *bytes = sizeof(float) * nf * count;
    return t;
}

static void free_global(float **t, int count)
{
    if (!t)
        return;
    for (int i = 0; i < count; i++)
        free(t[i]);
    free(t);
}

rv_status cp_ulysses_forward(rv_cp_attn *cp, const float *q, const float *k, const float *v,
                             float *o, float *lse)
{
    uly u = {0};
    size_t bytes = 0;
    float **g = NULL, *lseg = NULL; /* g: qg, kg, vg, og */
    rv_shard_seg all = {0, cp->plan.seq};
    rv_status st = uly_open(cp, &u);
    if (st != RV_OK)
        goto end;
    g = alloc_global(&u, 4, &bytes);
    lseg = malloc(sizeof(float) * u.hg * (cp->plan.seq > 0 ? cp->plan.seq : 1));
    if (!g || !lseg) {
        st = rv_fail(RV_ERR_NOMEM, "ulysses attention: cannot allocate head-sharded tensors");
        goto end;
    }
    cp_note_peak(cp, bytes + 2 * sizeof(float) * cp->comm->size * u.block);
    if ((st = uly_to_heads(&u, q, g[0])) != RV_OK || (st = uly_to_heads(&u, k, g[1])) != RV_OK ||
        (st = uly_to_heads(&u, v, g[2])) != RV_OK)
        goto end;
    rv_attn_fwd_args a = {g[0], g[1], g[2], g[3], lseg, (int)cp->plan.seq, (int)cp->plan.seq,
                          u.hg, cp->dim, cp->scale, cp_mask(cp, all, all), 0};
    double t0 = cp_now();
    if ((st = cp->be->attn_fwd(cp->be, &a)) != RV_OK)
        goto end;
    cp->stats.busy_s += cp_now() - t0;
    cp->stats.flops += 4.0 * cp->dim * u.hg * rv_cp_visible_pairs(all, all, cp->causal);
    if ((st = uly_from_heads(&u, g[3], o)) != RV_OK)
        goto end;
    st = uly_lse_from_heads(&u, lseg, lse);
end:
    free_global(g, 4);
    free(lseg);
    uly_close(&u);
    return st;
}

rv_status cp_ulysses_backward(rv_cp_attn *cp, const float *q, const float *k,
                              const float *v, const float *o, const float *lse,
                              const float *dout, float *dq, float *dk, float *dv)
{
    uly u = {0};
    size_t bytes = 0;
    float **g = NULL, *lseg = NULL; /* g: q, k, v, o, dout, dq, dk, dv (head-sharded) */
    rv_shard_seg all = {0, cp->plan.seq};
    rv_status st = uly_open(cp, &u);
    if (st != RV_OK)
        goto end;
    g = alloc_global(&u, 8, &bytes);
    lseg = malloc(sizeof(float) * u.hg * (cp->plan.seq > 0 ? cp->plan.seq : 1));
    if (!g || !lseg) {
        st = rv_fail(RV_ERR_NOMEM, "ulysses attention backward: cannot allocate tensors");
        goto end;
    }
    cp_note_peak(cp, bytes + 2 * sizeof(float) * cp->comm->size * u.block);
    const float *in[5] = {q, k, v, o, dout};
    for (int i = 0; i < 5; i++)
        if ((st = uly_to_heads(&u, in[i], g[i])) != RV_OK)
            goto end;
    if ((st = uly_lse_to_heads(&u, lse, lseg)) != RV_OK)
        goto end;
    rv_attn_bwd_args a = {g[0], g[1], g[2], g[3], lseg, g[4], g[5], g[6], g[7],
                          (int)cp->plan.seq, (int)cp->plan.seq, u.hg, cp->dim, cp->scale,
                          cp_mask(cp, all, all), 0};
    double t0 = cp_now();
    if ((st = cp->be->attn_bwd(cp->be, &a)) != RV_OK)
        goto end;
    cp->stats.busy_s += cp_now() - t0;
    cp->stats.flops += 10.0 * cp->dim * u.hg * rv_cp_visible_pairs(all, all, cp->causal);
    if ((st = uly_from_heads(&u, g[5], dq)) != RV_OK ||
        (st = uly_from_heads(&u, g[6], dk)) != RV_OK)
        goto end;
    st = uly_from_heads(&u, g[7], dv);
end:
    free_global(g, 8);
    free(lseg);
    uly_close(&u);
    return st;
}
