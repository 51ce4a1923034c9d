/* vit_train_forward.c: the encoder forward of one rank's slice for training
 * (rv_vit_train.h): the same block function as rv_vit_forward (vit_block.c), so
 * the outputs are the same, but every block keeps what its backward needs in an
 * rv_vit_acts (vit_internal.h), all (len, .) of this rank's slice: the block
 * input, the residual after attention, q, k, v, the attention output and its
 * LSE, the MLP's pre-activation, and the LayerNorm statistics (the LayerNorm
 * outputs are recomputed by the backward); before a pre-norm, the embedding and
 * its statistics. Hidden tokens get the
 * mask token in place of their patch projection. On a device backend (run->weights
 * set) the activations live in its memory: the embedding runs on the host and is
 * uploaded as the block input x[0], and y is copied back. */
#include <stdlib.h>
#include <string.h>

#include "rv_tokens.h"
#include "rv_vit_train.h"
#include "vit_internal.h"

void rv_vit_acts_free(rv_vit_acts **a)
{
    if (!a || !*a)
        return;
    if ((*a)->be) {
        (*a)->be->synchronize((*a)->be);
        if ((*a)->arena)
            (*a)->be->free((*a)->be, (*a)->arena);
    } else {
        free((*a)->arena);
    }
    free((*a)->hidden);
    free(*a);
    *a = NULL;
}

/* The activations of a (len)-token slice, carved out of one arena: host memory,
 * or the memory of dev (a device backend) when it is not NULL. */
static rv_status acts_new(const rv_vit_config *c, int64_t len, rv_backend *dev,
                          rv_vit_acts **out)
{
    const size_t n = (size_t)(len > 0 ? len : 1), D = (size_t)c->dim, L = (size_t)c->layers;
    const size_t M = (size_t)c->mlp, H = (size_t)c->heads;
    /* Every part a multiple of 16 floats, so each starts on a cache line. */
#define ROUND16(f) (((f) + 15) / 16 * 16)
    const size_t fx = ROUND16((L + 1) * n * D), fm = ROUND16(L * n * D);
    const size_t fqkv = ROUND16(L * 3 * n * D), fo = ROUND16(L * n * D);
    const size_t fpre = ROUND16(L * n * M), flse = ROUND16(L * H * n);
    const size_t fst = ROUND16(L * 4 * n), ffin = ROUND16(2 * n);
    const size_t femb = c->pre_norm ? ROUND16(n * D) : 0, fpst = c->pre_norm ? ROUND16(2 * n) : 0;
#undef ROUND16
    const size_t floats = fx + fm + fqkv + fo + fpre + flse + fst + ffin + femb + fpst;
    rv_vit_acts *a = calloc(1, sizeof *a);
    rv_status st = RV_OK;
    if (!a)
        return rv_fail(RV_ERR_NOMEM, "vit forward_train: out of memory");
    a->len = len, a->dim = c->dim, a->layers = c->layers, a->heads = c->heads, a->mlp = c->mlp;
    a->bytes = sizeof(float) * floats + n;
    if (dev) {
        a->be = dev;
        if ((st = dev->alloc(dev, sizeof(float) * floats, (void **)&a->arena)) != RV_OK)
            goto end;
    } else {
        a->arena = aligned_alloc(64, sizeof(float) * floats);
    }
    a->hidden = calloc(n, 1);
    if (!a->arena || !a->hidden) {
        st = rv_fail(RV_ERR_NOMEM, "vit forward_train: cannot allocate %zu bytes of activations "
                     "for %lld tokens", a->bytes, (long long)len);
        goto end;
    }
    float *p = a->arena;
    a->x = p, p += fx;
    a->xmid = p, p += fm;
    a->qkv = p, p += fqkv;
    a->o = p, p += fo;
    a->pre = p, p += fpre;
    a->lse = p, p += flse;
    a->ln_stats = p, p += fst;
    a->final_stats = p, p += ffin;
    a->emb = c->pre_norm ? p : NULL, p += femb;
    a->pre_stats = c->pre_norm ? p : NULL;
    *out = a;
    a = NULL;
end:
    rv_vit_acts_free(&a);
    return st;
}

rv_status rv_vit_forward_train(const rv_vit_model *m, const rv_vit_run *run,
                               const rv_vit_tokens *in, const uint8_t *hidden,
                               const float *mask_token, float *y, rv_vit_acts **acts,
                               rv_vit_stats *stats)
{
    if (!acts)
        return rv_fail(RV_ERR_INVALID, "vit forward_train: acts is NULL");
    *acts = NULL;
    rv_status st = vit_check_args(m, run, in, y, 1);
    if (st != RV_OK)
        return st;
    const rv_vit_config *c = &m->cfg;
    rv_backend *be = run->be;
    /* On a device: weights wm there, the embedding on the host backend hb into
     * host scratch, y computed into ydev and copied back. */
    const int on_host = rv_backend_is_host(be);
    const rv_vit_model *wm = on_host ? m : run->weights;
    rv_backend *hb = NULL, *hb_own = NULL; /* hb_own: made here when run->host is NULL */
    float *hscratch = NULL, *ydev = NULL;
    const int D = c->dim, H = c->heads, M = c->mlp, len = (int)in->len;
    const int cap = len > 0 ? len : 1;
    const size_t nd = (size_t)cap * D;
    rv_vit_stats s = {0};
    rv_vit_acts *a = NULL;
    rv_cp_attn cp = {0};
    float *h = NULL, *act = NULL, *pos = NULL;
    double t0 = rv_clock_s(), t1;

    int any_hidden = 0;
    for (int i = 0; hidden && i < len; i++)
        any_hidden |= hidden[i] && in->modality[i] != RV_MOD_CLS;
    if (any_hidden && !mask_token)
        return rv_fail(RV_ERR_INVALID, "vit forward_train: tokens are hidden but mask_token "
                       "is NULL");
    if ((st = acts_new(c, in->len, on_host ? NULL : be, &a)) != RV_OK)
        goto end;
    if (hidden && len > 0)
        memcpy(a->hidden, hidden, (size_t)len);
    a->any_hidden = any_hidden;

    const int grid_pos = c->pos == RV_POS_GRID_BILINEAR || c->pos == RV_POS_GRID_BICUBIC;
    int resample = grid_pos && in->nvideo > 0 && in->grid != c->grid;
    size_t pos_floats = resample ? (size_t)in->grid * in->grid * D : 0;
    size_t bytes = a->bytes + sizeof(float) * (nd + (size_t)cap * M + pos_floats);
    if ((st = be->alloc(be, sizeof(float) * nd, (void **)&h)) != RV_OK ||
        (st = be->alloc(be, sizeof(float) * (size_t)cap * M, (void **)&act)) != RV_OK)
        goto end;
    if ((st = rv_cp_attn_init(&cp, be, run->comm, &run->plan, run->strategy, H, D / H,
                              run->causal, 0.0f)) != RV_OK)
        goto end;
    if ((st = vit_span_setup(&cp, run, in)) != RV_OK)
        goto end;

    /* The embedding goes to x[0], or, before a pre-norm, to emb (kept for the
     * backward) and x[0] = pre_ln(emb). */
    float *e = c->pre_norm ? a->emb : a->x;
    if (on_host) {
        if (resample) {
            if ((st = be->alloc(be, sizeof(float) * pos_floats, (void **)&pos)) != RV_OK)
                goto end;
            vit_pos_resample(m, in->grid, pos);
        }
        /* Layer 0's q, k, v are the embedding's scratch. */
        vit_embed_scratch es = {.codes = a->qkv, .video = a->qkv + nd, .audio = a->qkv + 2 * nd,
                                .pos = pos};
        if ((st = vit_embed(m, be, in, hidden, mask_token, &es, e, &s.flops)) != RV_OK)
            goto end;
    } else {
        /* Host scratch: the embedding, then its codes, video, audio, grid. */
        hscratch = malloc(sizeof(float) * (4 * nd + (pos_floats ? pos_floats : 1)));
        if (!hscratch) {
            st = rv_fail(RV_ERR_NOMEM, "vit forward_train: no host memory for the embedding "
                         "of %d tokens", len);
            goto end;
        }
        float *hpos = resample ? hscratch + 4 * nd : NULL;
        if (resample)
            vit_pos_resample(m, in->grid, hpos);
        vit_embed_scratch es = {.codes = hscratch + nd, .video = hscratch + 2 * nd,
                                .audio = hscratch + 3 * nd, .pos = hpos};
        if ((st = vit_host_backend(run, &hb, &hb_own)) != RV_OK ||
            (st = vit_embed(m, hb, in, hidden, mask_token, &es, hscratch, &s.flops)) != RV_OK ||
            (st = be->copy(be, e, hscratch, sizeof(float) * (size_t)len * D,
                           RV_COPY_HOST_TO_DEVICE)) != RV_OK ||
            (st = be->alloc(be, sizeof(float) * nd, (void **)&ydev)) != RV_OK)
            goto end;
        free(hscratch);
        hscratch = NULL;
    }
    if (c->pre_norm && (st = be->layernorm_fwd(be, a->emb, wm->pre_ln_w, wm->pre_ln_b, len, D,
                                               c->eps, a->x, a->pre_stats,
                                               a->pre_stats + cap)) != RV_OK)
        goto end;
    t1 = rv_clock_s();
    s.embed_s = t1 - t0, t0 = t1;

    for (int l = 0; l < c->layers; l++) {
        float *q = a->qkv + (size_t)l * 3 * nd, *ls = a->ln_stats + (size_t)l * 4 * cap;
        /* Everything the backward needs is kept: x, xmid, q, k, v, o, lse, pre and
         * the LayerNorm statistics; h and act are scratch (recomputed there). */
        const vit_block_io io = {
            .x = a->x + (size_t)l * nd, .xmid = a->xmid + (size_t)l * nd,
            .xout = a->x + (size_t)(l + 1) * nd, .h = h, .q = q, .k = q + nd, .v = q + 2 * nd,
            .o = a->o + (size_t)l * nd, .lse = a->lse + (size_t)l * H * cap,
            .ln1_mean = ls, .ln1_rstd = ls + cap, .ln2_mean = ls + 2 * cap, .ln2_rstd = ls + 3 * cap,
            .pre = a->pre + (size_t)l * cap * M, .act = act, .chunk = cap, .pre_all_rows = 1,
            .tmp_attn = c->layer_scale ? h : NULL, .tmp_mlp = c->layer_scale ? h : NULL,
        };
        if ((st = vit_block_forward(be, &cp, c, &wm->layer[l], len, &io, &s)) != RV_OK)
            goto end;
    }
    t0 = rv_clock_s();
    float *yout = on_host ? y : ydev;
    const float *xl = a->x + (size_t)c->layers * nd;
    if (c->final_norm ? (st = be->layernorm_fwd(be, xl, wm->ln_w, wm->ln_b, len, D, c->eps, yout,
                                                a->final_stats, a->final_stats + cap)) != RV_OK
                      : (st = be->copy(be, yout, xl, sizeof(float) * (size_t)len * D,
                                       RV_COPY_DEVICE_TO_DEVICE)) != RV_OK)
        goto end;
    if ((st = be->synchronize(be)) != RV_OK)
        goto end;
    if (!on_host &&
        (st = be->copy(be, y, ydev, sizeof(float) * (size_t)len * D, RV_COPY_DEVICE_TO_HOST)) != RV_OK)
        goto end;
    s.other_s += rv_clock_s() - t0;
    s.cp = cp.stats;
    s.flops += cp.stats.flops;
    s.peak_bytes = bytes + cp.stats.peak_bytes;
    if (stats)
        *stats = s;
    *acts = a;
    a = NULL;
end:
    rv_cp_attn_free(&cp);
    rv_vit_acts_free(&a);
    if (!on_host) {
        be->synchronize(be); /* after an error kernels may still use the buffers */
        if (ydev)
            be->free(be, ydev);
        free(hscratch);
        rv_backend_free(&hb_own);
    }
    be->free(be, h);
    be->free(be, act);
    be->free(be, pos);
    return st;
}
