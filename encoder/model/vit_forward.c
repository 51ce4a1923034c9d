/* vit_forward.c: the encoder forward of one rank's slice with context
 * parallelism (rv_vit.h): embedding (and the family's LayerNorm before the
 * first block), L blocks (vit_block.c, whose attention goes through
 * rv_cp_attention.h, the only step that sees other ranks' tokens), and the
 * final LayerNorm where the family has one, every op through the backend table.
 *
 * Activation buffers, all (len, .) of this rank's slice, so memory per rank
 * scales with its share of the sequence:
 *   y    (len, D)   the residual stream, in the caller's output; the pre- and
 *                   final LayerNorms run in place
 *   h    (len, D)   LayerNorm output, then the attention output
 *   qkv  (3, len, D) q, k, v, each (len, heads, dh) as the CP attention wants
 *                   them; also the embedding's scratch and the MLP's hidden rows
 *                   (the MLP runs over row chunks that fit there)
 *   lse  (heads, len), mean, rstd (len)
 * plus the resampled position grid when the recording's grid differs. On a device
 * backend these buffers and the residual stream are device memory; the embedding
 * is computed on the host into y, uploaded, and the result copied back to y. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "cp_strategies.h"
#include "vit_internal.h"

/* Fewest MLP rows per chunk worth a GEMM; below it the hidden rows get a buffer
 * of their own (of MLP_OWN_ROWS rows) instead of borrowing qkv. */
#define MLP_MIN_ROWS 64
#define MLP_OWN_ROWS 1024

double rv_vit_forward_flops(const rv_vit_config *c, int64_t seq, int64_t nvideo,
                            int64_t naudio, int causal)
{
    const double D = c->dim, M = c->mlp, S = (double)seq;
    const double vdim = (double)c->tubelet * c->patch * c->patch * RV_VIT_CHANNELS;
    const double adim = (double)c->audio_freq * c->audio_time;
    double pairs = causal ? S * (S + 1) / 2 : S * S;
    double embed = 2.0 * S * D * D + 2.0 * (double)nvideo * vdim * D +
                   2.0 * (double)naudio * adim * D;
    double layer = 2.0 * S * D * (4.0 * D + 2.0 * M) + 4.0 * D * pairs;
    return embed + c->layers * layer;
}

rv_status vit_check_args(const rv_vit_model *m, const rv_vit_run *run, const rv_vit_tokens *in,
                         const float *y, int patches)
{
    if (!m || !run || !in || !run->be || !run->comm)
        return rv_fail(RV_ERR_INVALID, "vit forward: model, run (backend, communicator) and "
                       "tokens are required");
    rv_status st = rv_vit_config_check(&m->cfg);
    if (st != RV_OK)
        return st;
    /* A device backend runs the blocks with the weights copied into its memory,
     * and the embedding on a host backend. */
    if (!rv_backend_is_host(run->be) && !run->weights)
        return rv_fail(RV_ERR_UNSUPPORTED, "vit forward: the %s backend needs the weights in "
                       "its memory (rv_vit_to_backend)", run->be->name);
    if (run->host && !rv_backend_is_host(run->host))
        return rv_fail(RV_ERR_INVALID, "vit forward: run->host is the %s backend, whose "
                       "memory is not host memory", run->host->name);
    if (run->plan.ranks != run->comm->size)
        return rv_fail(RV_ERR_INVALID, "vit forward: the shard plan is for %d ranks but the "
                       "communicator has %d", run->plan.ranks, run->comm->size);
    int64_t want = rv_shard_len(&run->plan, run->comm->rank);
    if (in->len != want)
        return rv_fail(RV_ERR_INVALID, "vit forward: rank %d holds %lld tokens but its shard "
                       "of the %lld-token plan has %lld", run->comm->rank, (long long)in->len,
                       (long long)run->plan.seq, (long long)want);
    if (in->len > INT_MAX / 4)
        return rv_fail(RV_ERR_INVALID, "vit forward: %lld tokens on one rank is too many",
                       (long long)in->len);
    if (in->len > 0 && !y)
        return rv_fail(RV_ERR_INVALID, "vit forward: y is NULL");
    return vit_tokens_check(m, in, patches);
}

rv_status vit_host_backend(const rv_vit_run *run, rv_backend **hb, rv_backend **owned)
{
    *owned = NULL;
    *hb = run->host;
    if (*hb)
        return RV_OK;
    rv_status st = rv_backend_cpu_create(0, owned);
    *hb = *owned;
    return st;
}

rv_status rv_vit_embed(const rv_vit_model *m, rv_backend *be, const rv_vit_tokens *in,
                       float *x, double *flops)
{
    if (!m || !be || !in || (in->len > 0 && !x))
        return rv_fail(RV_ERR_INVALID, "vit embed: model, backend, tokens and x are required");
    if (!rv_backend_is_host(be))
        return rv_fail(RV_ERR_UNSUPPORTED, "vit embed: the embedding runs on a host backend, "
                       "not %s", be->name);
    rv_status st = vit_tokens_check(m, in, 1);
    if (st != RV_OK || in->len == 0)
        return st;
    const rv_vit_config *c = &m->cfg;
    const size_t D = (size_t)c->dim;
    const int grid_pos = c->pos == RV_POS_GRID_BILINEAR || c->pos == RV_POS_GRID_BICUBIC;
    const int resample = grid_pos && in->nvideo > 0 && in->grid != c->grid;
    const size_t codes = c->time_code ? (size_t)in->len * D : 0;
    const size_t vf = (size_t)in->nvideo * D, af = (size_t)in->naudio * D;
    const size_t pf = resample ? (size_t)in->grid * in->grid * D : 0;
    float *scratch = malloc(sizeof(float) * (codes + vf + af + pf + 1));
    if (!scratch)
        return rv_fail(RV_ERR_NOMEM, "vit embed: out of memory for %lld tokens",
                       (long long)in->len);
    float *pos = resample ? scratch + codes + vf + af : NULL;
    if (resample)
        vit_pos_resample(m, in->grid, pos);
    vit_embed_scratch es = {.codes = scratch, .video = scratch + codes,
                            .audio = scratch + codes + vf, .pos = pos};
    double fl = 0;
    st = vit_embed(m, be, in, NULL, NULL, &es, x, &fl);
    if (flops)
        *flops += fl;
    free(scratch);
    return st;
}

/* The forward of rv_vit_forward (embedded 0: y is the output only) and of
 * rv_vit_forward_embedded (1: y holds the embeddings on entry). */
static rv_status forward(const rv_vit_model *m, const rv_vit_run *run, const rv_vit_tokens *in,
                         float *y, rv_vit_stats *stats, int embedded)
{
    rv_status st = vit_check_args(m, run, in, y, !embedded);
    if (st != RV_OK)
        return st;
    const rv_vit_config *c = &m->cfg;
    rv_backend *be = run->be;
    /* On a device: the weights and the residual stream (yd) in its memory, and a
     * host backend for the embedding. */
    const int on_host = rv_backend_is_host(be);
    const rv_vit_model *wm = on_host ? m : run->weights;
    /* Under a span on the ring (or one rank) the blocks run in query rows
     * (vit_forward_rows.c): a rank holds its residual, K and V, no more. */
    const int rows = run->span.kind != RV_SPAN_FULL &&
                     cp_strategy_span_rows(run->strategy, run->plan.ranks);
    rv_backend *hb = NULL, *hb_own = NULL; /* hb_own: made here when run->host is NULL */
    float *yd = on_host ? y : NULL;
    const int D = c->dim, H = c->heads, M = c->mlp, len = (int)in->len;
    const int cap = len > 0 ? len : 1; /* buffers stay valid pointers on an empty rank */
    const size_t nd = (size_t)cap * D;
    rv_vit_stats s = {0};
    rv_cp_attn cp = {0};
    float *h = NULL, *qkv = NULL, *lse = NULL, *mean = NULL, *rstd = NULL, *hid = NULL;
    double t0 = rv_clock_s(), t1;
    size_t bytes = sizeof(float) * nd; /* y */

    if ((st = rv_cp_attn_init(&cp, be, run->comm, &run->plan, run->strategy, H, D / H,
                              run->causal, 0.0f)) != RV_OK ||
        (st = vit_span_setup(&cp, run, in)) != RV_OK)
        goto end;
    if (!embedded) {
        if (!on_host && (st = vit_host_backend(run, &hb, &hb_own)) != RV_OK)
            goto end;
        if ((st = rv_vit_embed(m, on_host ? be : hb, in, y, &s.flops)) != RV_OK)
            goto end;
        /* the embedding's scratch is gone before the blocks' buffers come */
        bytes += sizeof(float) * ((c->time_code ? nd : 0) +
                                  (size_t)(in->nvideo + in->naudio) * D);
    }
    if (!on_host &&
        ((st = be->alloc(be, sizeof(float) * nd, (void **)&yd)) != RV_OK ||
         (st = be->copy(be, yd, y, sizeof(float) * (size_t)len * D, RV_COPY_HOST_TO_DEVICE)) != RV_OK))
        goto end;
    if ((st = be->alloc(be, sizeof(float) * cap, (void **)&mean)) != RV_OK)
        goto end;
    if ((st = be->alloc(be, sizeof(float) * cap, (void **)&rstd)) != RV_OK)
        goto end;
    if (c->pre_norm && (st = be->layernorm_fwd(be, yd, wm->pre_ln_w, wm->pre_ln_b, len, D, c->eps,
                                               yd, mean, rstd)) != RV_OK)
        goto end;
    t1 = rv_clock_s();
    s.embed_s = t1 - t0, t0 = t1;

    if (rows) {
        size_t rb = 0;
        if ((st = vit_blocks_rows(be, &cp, c, wm, run, yd, len, &s, &rb)) != RV_OK)
            goto end;
        bytes += rb;
    } else {
        /* The MLP's hidden rows borrow qkv when a worthwhile chunk fits there. */
        int chunk = (int)(3 * nd / (size_t)M < (size_t)cap ? 3 * nd / (size_t)M : (size_t)cap);
        int own_hidden = chunk < (cap < MLP_MIN_ROWS ? cap : MLP_MIN_ROWS);
        if (own_hidden)
            chunk = cap < MLP_OWN_ROWS ? cap : MLP_OWN_ROWS;
        bytes += sizeof(float) * (nd + 3 * nd + (size_t)H * cap + 2 * (size_t)cap +
                                  (own_hidden ? (size_t)chunk * M : 0));
        if ((st = be->alloc(be, sizeof(float) * nd, (void **)&h)) != RV_OK ||
            (st = be->alloc(be, sizeof(float) * 3 * nd, (void **)&qkv)) != RV_OK ||
            (st = be->alloc(be, sizeof(float) * (size_t)H * cap, (void **)&lse)) != RV_OK)
            goto end;
        if (own_hidden &&
            (st = be->alloc(be, sizeof(float) * (size_t)chunk * M, (void **)&hid)) != RV_OK)
            goto end;
        float *q = qkv, *k = qkv + nd, *v = qkv + 2 * nd;
        float *hrows = own_hidden ? hid : qkv;
        /* The residual stream yd is updated in place; the attention output goes to
         * h, the MLP's rows to hrows; a layer scale's scratch is q (free once the
         * attention has run) and h. */
        const vit_block_io io = {
            .x = yd, .xmid = yd, .xout = yd, .h = h, .q = q, .k = k, .v = v, .o = h, .lse = lse,
            .ln1_mean = mean, .ln1_rstd = rstd, .ln2_mean = mean, .ln2_rstd = rstd,
            .pre = hrows, .act = hrows, .chunk = chunk, .pre_all_rows = 0,
            .tmp_attn = c->layer_scale ? q : NULL, .tmp_mlp = c->layer_scale ? h : NULL,
        };
        for (int l = 0; l < c->layers; l++)
            if ((run->check && (st = run->check(run->check_arg)) != RV_OK) ||
                (st = vit_block_forward(be, &cp, c, &wm->layer[l], len, &io, &s)) != RV_OK)
                goto end;
    }
    t0 = rv_clock_s();
    if (c->final_norm &&
        (st = be->layernorm_fwd(be, yd, wm->ln_w, wm->ln_b, len, D, c->eps, yd, mean, rstd)) != RV_OK)
        goto end;
    if ((st = be->synchronize(be)) != RV_OK)
        goto end;
    if (!on_host &&
        (st = be->copy(be, y, yd, sizeof(float) * (size_t)len * D, RV_COPY_DEVICE_TO_HOST)) != RV_OK)
        goto end;
    s.other_s += rv_clock_s() - t0;
    s.cp = cp.stats;
    s.flops += cp.stats.flops;
    s.peak_bytes = bytes + cp.stats.peak_bytes;
    if (stats)
        *stats = s;
end:
    rv_cp_attn_free(&cp);
    if (!on_host) {
        be->synchronize(be); /* after an error kernels may still use the buffers */
        if (yd)
            be->free(be, yd);
        rv_backend_free(&hb_own);
    }
    be->free(be, h);
    be->free(be, qkv);
    be->free(be, lse);
    be->free(be, mean);
    be->free(be, rstd);
    be->free(be, hid);
    return st;
}

rv_status rv_vit_forward(const rv_vit_model *m, const rv_vit_run *run,
                         const rv_vit_tokens *in, float *y, rv_vit_stats *stats)
{
    return forward(m, run, in, y, stats, 0);
}

rv_status rv_vit_forward_embedded(const rv_vit_model *m, const rv_vit_run *run,
                                  const rv_vit_tokens *in, float *y, rv_vit_stats *stats)
{
    return forward(m, run, in, y, stats, 1);
}
