/* vit_backward.c: the encoder backward of one rank's slice with context
 * parallelism (rv_vit_train.h), from the activations rv_vit_forward_train kept
 * (vit_internal.h), layer by layer in reverse:
 *   final LayerNorm:  dx = ln_bwd(dy)  (ln_w, ln_b accumulated; dx = dy without one)
 *   MLP block:        dbr = dx, or with layer scale ls_2 * dx and ls_2 += colsum(dx *
 *                     br) (br, the branch output, recomputed);
 *                     fc2_b += colsum dbr, fc2_w += dbr^T act(pre), da = dbr W2,
 *                     dpre = act'(pre) da, fc1_b += colsum dpre,
 *                     fc1_w += dpre^T ln_2(xm), dx += ln_2_bwd(dpre W1)
 *   attention block:  dbr and ls_1 as for the MLP;
 *                     proj_b += colsum dbr, proj_w += dbr^T o, do = dbr Wo,
 *                     dq, dk, dv = CP attention backward (communicates: every
 *                     rank gets the gradient of its own keys and values back),
 *                     qkv_b += colsums (the biases the family has),
 *                     qkv_w += d{q,k,v}^T ln_1(x), dx += ln_1_bwd(dq Wq + dk Wk + dv Wv)
 *   pre-norm:         dx = pre_ln_bwd(dx) (families with one)
 *   embedding:        vit_embed_backward.c
 * LayerNorm outputs are recomputed from the saved block inputs. Every gradient
 * is ADDED into grad (this rank's share; the sum over ranks is the sequence's).
 * Bias gradients are column sums in double. Scratch: a few (len, D) buffers and
 * one (len, M).
 *
 * On a device backend (run->weights set, the activations in its memory) the
 * blocks run there: dy is uploaded, grad is uploaded into a device copy that the
 * blocks add into and is copied back, and the embedding's backward (gathers and
 * scatters by token) runs on the host over the downloaded dx. */
#include <stdlib.h>
#include <string.h>

#include "rv_tokens.h"
#include "rv_vit_train.h"
#include "vit_internal.h"

void rv_vit_grad_zero(rv_vit_model *g)
{
    if (g && g->arena)
        memset(g->arena, 0, sizeof(float) * g->arena_floats);
}

double rv_vit_backward_flops(const rv_vit_config *c, int64_t seq, int64_t nvideo,
                             int64_t naudio, int causal)
{
    const double D = c->dim, M = c->mlp, S = (double)seq;
    const double vdim = (double)c->tubelet * c->patch * c->patch * RV_VIT_CHANNELS;
    const double adim = (double)c->audio_freq * c->audio_time;
    double pairs = causal ? S * (S + 1) / 2 : S * S;
    /* Weight gradients only in the embedding (the patches need none); per layer
     * twice the forward's GEMMs (input and weight gradients) and the attention
     * backward's 10 D per visible pair. */
    double embed = 2.0 * S * D * D + 2.0 * (double)nvideo * vdim * D +
                   2.0 * (double)naudio * adim * D;
    double layer = 4.0 * S * D * (4.0 * D + 2.0 * M) + 10.0 * D * pairs;
    return embed + c->layers * layer;
}

static rv_status check_backward(const rv_vit_model *m, const rv_vit_tokens *in,
                                const rv_vit_acts *a, const rv_vit_model *grad,
                                const float *dmask)
{
    const rv_vit_config *c = &m->cfg;
    if (!a || !grad)
        return rv_fail(RV_ERR_INVALID, "vit backward: acts and grad are required");
    if (a->len != in->len || a->dim != c->dim || a->layers != c->layers ||
        a->heads != c->heads || a->mlp != c->mlp)
        return rv_fail(RV_ERR_INVALID, "vit backward: the activations are of %lld tokens (D %d, "
                       "L %d, heads %d, M %d) but the slice has %lld tokens (D %d, L %d, heads "
                       "%d, M %d)", (long long)a->len, a->dim, a->layers, a->heads, a->mlp,
                       (long long)in->len, c->dim, c->layers, c->heads, c->mlp);
    if (grad->arena_floats != m->arena_floats || grad->cfg.dim != c->dim ||
        grad->cfg.layers != c->layers || grad->cfg.mlp != c->mlp || grad->cfg.grid != c->grid)
        return rv_fail(RV_ERR_INVALID, "vit backward: the gradient buffer holds %zu floats, the "
                       "model %zu (not the same config)", grad->arena_floats, m->arena_floats);
    if (a->any_hidden && !dmask)
        return rv_fail(RV_ERR_INVALID, "vit backward: tokens were hidden but dmask_token is NULL");
    return RV_OK;
}

/* A layer-scaled residual branch x += ls * br, br = in W^T + b (in (len, k), W
 * (D, k)): recomputes br into dbr, adds colsum(dx * br) into dls, then turns
 * dbr into the branch's gradient ls * dx. */
static rv_status ls_branch_bwd(rv_backend *be, const float *in, int k, const float *w,
                               const float *b, const float *ls, const float *dx, int len, int D,
                               float *dbr, float *dls)
{
    rv_status st;
    if ((st = be->gemm(be, 0, 1, len, D, k, 1.0f, in, k, w, k, 0.0f, dbr, D)) != RV_OK ||
        (st = be->bias_add(be, dbr, b, len, D)) != RV_OK ||
        (st = be->colsum_mul_add(be, dx, dbr, len, D, dls)) != RV_OK ||
        (st = be->copy(be, dbr, dx, sizeof(float) * (size_t)len * D,
                       RV_COPY_DEVICE_TO_DEVICE)) != RV_OK)
        return st;
    return be->scale_cols(be, dbr, ls, len, D);
}

rv_status rv_vit_backward(const rv_vit_model *m, const rv_vit_run *run,
                          const rv_vit_tokens *in, const rv_vit_acts *acts, const float *dy,
                          rv_vit_model *grad, float *dmask_token, rv_vit_stats *stats)
{
    rv_status st = vit_check_args(m, run, in, dy, 1);
    if (st != RV_OK || (st = check_backward(m, in, acts, grad, dmask_token)) != RV_OK)
        return st;
    const rv_vit_config *c = &m->cfg;
    rv_backend *be = run->be;
    /* On a device: weights (wm) and gradients (gd) in its memory, dy uploaded into
     * dyd; the embedding's backward on the host backend hb over host scratch. */
    const int on_host = rv_backend_is_host(be);
    const rv_vit_model *wm = on_host ? m : run->weights;
    rv_vit_model *gd = on_host ? grad : NULL;
    rv_backend *hb = NULL, *hb_own = NULL; /* hb_own: made here when run->host is NULL */
    const float *dyd = on_host ? dy : NULL;
    float *dy_dev = NULL, *hscratch = NULL;
    const int D = c->dim, H = c->heads, M = c->mlp, len = (int)in->len;
    const int cap = len > 0 ? len : 1;
    const size_t nd = (size_t)cap * D;
    const rv_vit_acts *a = acts;
    if ((a->be != NULL) == on_host)
        return rv_fail(RV_ERR_INVALID, "vit backward: the activations are in %s memory but the "
                       "backend is %s (use the forward_train of the same backend)",
                       a->be ? a->be->name : "host", be->name);
    rv_vit_stats s = {0};
    rv_cp_attn cp = {0};
    float *dx = NULL, *t1 = NULL, *t2 = NULL, *t3 = NULL, *dqkv = NULL, *big = NULL, *ms = NULL;
    double t0 = rv_clock_s(), t1s;
    size_t bytes = a->bytes + sizeof(float) * (6 * nd + (size_t)cap * M + 2 * (size_t)cap);

    if ((st = be->alloc(be, sizeof(float) * nd, (void **)&dx)) != RV_OK ||
        (st = be->alloc(be, sizeof(float) * nd, (void **)&t1)) != RV_OK ||
        (st = be->alloc(be, sizeof(float) * nd, (void **)&t2)) != RV_OK ||
        (st = be->alloc(be, sizeof(float) * 3 * nd, (void **)&dqkv)) != RV_OK ||
        (st = be->alloc(be, sizeof(float) * (size_t)cap * M, (void **)&big)) != RV_OK ||
        (st = be->alloc(be, sizeof(float) * 2 * (size_t)cap, (void **)&ms)) != RV_OK)
        goto end;
    /* A layer scale's branch output and gradient need a buffer of their own. */
    if (c->layer_scale && (st = be->alloc(be, sizeof(float) * nd, (void **)&t3)) != RV_OK)
        goto end;
    if (!on_host) {
        if ((st = be->alloc(be, sizeof(float) * nd, (void **)&dy_dev)) != RV_OK ||
            (st = be->copy(be, dy_dev, dy, sizeof(float) * (size_t)len * D,
                           RV_COPY_HOST_TO_DEVICE)) != RV_OK ||
            (st = rv_vit_to_backend(grad, be, &gd)) != RV_OK)
            goto end;
        dyd = dy_dev;
    }
    if ((st = rv_cp_attn_init(&cp, be, run->comm, &run->plan, run->strategy, H, D / H,
                              run->causal, 0.0f)) != RV_OK)
        goto end;
    if ((st = vit_span_setup(&cp, run, in)) != RV_OK)
        goto end;

    /* Final LayerNorm (a family without one passes dy straight on). */
    if ((st = c->final_norm
                  ? be->layernorm_bwd(be, dyd, a->x + (size_t)c->layers * nd, wm->ln_w,
                                      a->final_stats, a->final_stats + cap, len, D, dx, gd->ln_w,
                                      gd->ln_b)
                  : be->copy(be, dx, dyd, sizeof(float) * (size_t)len * D,
                             RV_COPY_DEVICE_TO_DEVICE)) != RV_OK)
        goto end;
    t1s = rv_clock_s();
    s.other_s += t1s - t0, t0 = t1s;
    const rv_act act = (rv_act)c->act;

    for (int l = c->layers - 1; l >= 0; l--) {
        const rv_vit_layer *w = &wm->layer[l];
        rv_vit_layer *g = &gd->layer[l];
        const float *x = a->x + (size_t)l * nd, *xm = a->xmid + (size_t)l * nd;
        const float *q = a->qkv + (size_t)l * 3 * nd, *o = a->o + (size_t)l * nd;
        const float *pre = a->pre + (size_t)l * cap * M, *lse = a->lse + (size_t)l * H * cap;
        const float *ls = a->ln_stats + (size_t)l * 4 * cap;

        /* MLP block: dx is the gradient of its output xn = xm + ls_2 * br,
         * br = fc2(act(fc1(ln_2(xm)))); dbr, the gradient of br, is dx (no layer
         * scale) or ls_2 * dx, and dls_2 = colsum(dx * br) with br recomputed. */
        const float *dbr = dx;
        if ((st = be->act_fwd(be, act, pre, big, (size_t)len * M)) != RV_OK)
            goto end;
        if (c->layer_scale) {
            if ((st = ls_branch_bwd(be, big, M, w->fc2_w, w->fc2_b, w->ls2, dx, len, D, t3,
                                    g->ls2)) != RV_OK)
                goto end;
            dbr = t3;
            s.flops += 2.0 * len * (double)D * M;
        }
        if ((st = be->colsum_add(be, dbr, len, D, g->fc2_b)) != RV_OK ||
            (st = be->gemm(be, 1, 0, D, M, len, 1.0f, dbr, D, big, M, 1.0f, g->fc2_w, M)) != RV_OK ||
            (st = be->gemm(be, 0, 0, len, M, D, 1.0f, dbr, D, w->fc2_w, M, 0.0f, big, M)) != RV_OK ||
            (st = be->act_bwd(be, act, pre, big, big, (size_t)len * M)) != RV_OK)
            goto end;
        if ((st = be->colsum_add(be, big, len, M, g->fc1_b)) != RV_OK ||
            (st = be->layernorm_fwd(be, xm, w->ln2_w, w->ln2_b, len, D, c->eps, t2, ms,
                                    ms + cap)) != RV_OK ||
            (st = be->gemm(be, 1, 0, M, D, len, 1.0f, big, M, t2, D, 1.0f, g->fc1_w, D)) != RV_OK ||
            (st = be->gemm(be, 0, 0, len, D, M, 1.0f, big, M, w->fc1_w, D, 0.0f, t1, D)) != RV_OK ||
            (st = be->layernorm_bwd(be, t1, xm, w->ln2_w, ls + 2 * cap, ls + 3 * cap, len, D, t1,
                                    g->ln2_w, g->ln2_b)) != RV_OK ||
            (st = be->add(be, dx, t1, (size_t)len * D)) != RV_OK) /* dx: the gradient of xm */
            goto end;
        s.flops += 8.0 * len * (double)D * M;
        t1s = rv_clock_s();
        s.mlp_s += t1s - t0, t0 = t1s;

        /* Attention block: xm = x + ls_1 * proj(attention(qkv(ln_1(x)))). */
        float *dq = dqkv, *dk = dqkv + nd, *dv = dqkv + 2 * nd;
        dbr = dx;
        if (c->layer_scale) {
            if ((st = ls_branch_bwd(be, o, D, w->proj_w, w->proj_b, w->ls1, dx, len, D, t3,
                                    g->ls1)) != RV_OK)
                goto end;
            dbr = t3;
            s.flops += 2.0 * len * (double)D * D;
        }
        if ((st = be->colsum_add(be, dbr, len, D, g->proj_b)) != RV_OK ||
            (st = be->gemm(be, 1, 0, D, D, len, 1.0f, dbr, D, o, D, 1.0f, g->proj_w, D)) != RV_OK ||
            (st = be->gemm(be, 0, 0, len, D, D, 1.0f, dbr, D, w->proj_w, D, 0.0f, t1, D)) != RV_OK ||
            (st = rv_cp_attn_backward(&cp, q, q + nd, q + 2 * nd, o, lse, t1, dq, dk, dv)) != RV_OK ||
            (st = be->layernorm_fwd(be, x, w->ln1_w, w->ln1_b, len, D, c->eps, t2, ms,
                                    ms + cap)) != RV_OK)
            goto end;
        for (int j = 0; j < 3; j++) {
            const float *dj = dqkv + (size_t)j * nd, *wj = w->qkv_w + (size_t)j * D * D;
            /* only the biases the family has: an absent one stays zero */
            if (g->qkv_b && (c->qkv_bias & (1 << j)) &&
                (st = be->colsum_add(be, dj, len, D, g->qkv_b + (size_t)j * D)) != RV_OK)
                goto end;
            if ((st = be->gemm(be, 1, 0, D, D, len, 1.0f, dj, D, t2, D, 1.0f,
                               g->qkv_w + (size_t)j * D * D, D)) != RV_OK ||
                (st = be->gemm(be, 0, 0, len, D, D, 1.0f, dj, D, wj, D, j ? 1.0f : 0.0f, t1,
                               D)) != RV_OK)
                goto end;
        }
        if ((st = be->layernorm_bwd(be, t1, x, w->ln1_w, ls, ls + cap, len, D, t1, g->ln1_w,
                                    g->ln1_b)) != RV_OK ||
            (st = be->add(be, dx, t1, (size_t)len * D)) != RV_OK) /* dx: the gradient of x */
            goto end;
        s.flops += 16.0 * len * (double)D * D;
        t1s = rv_clock_s();
        s.attn_s += t1s - t0, t0 = t1s;
    }
    /* A pre-norm: dx is the gradient of x[0] = pre_ln(emb); the embedding's is
     * its LayerNorm backward. */
    if (c->pre_norm && ((st = be->layernorm_bwd(be, dx, a->emb, wm->pre_ln_w, a->pre_stats,
                                                a->pre_stats + cap, len, D, t1, gd->pre_ln_w,
                                                gd->pre_ln_b)) != RV_OK ||
                        (st = be->copy(be, dx, t1, sizeof(float) * (size_t)len * D,
                                       RV_COPY_DEVICE_TO_DEVICE)) != RV_OK))
        goto end;

    /* Embedding: t1 holds the time codes, dqkv the per-modality rows. */
    if (on_host) {
        if ((st = vit_embed_backward(m, be, in, a->any_hidden ? a->hidden : NULL, dx, t1, dqkv,
                                     grad, dmask_token, &s.flops)) != RV_OK ||
            (st = be->synchronize(be)) != RV_OK)
            goto end;
    } else {
        /* The blocks' gradients come home first (gd started as a copy of grad),
         * then the host adds the embedding's. Host scratch: dx, codes, proj. */
        const size_t pf = (size_t)(in->nvideo > in->naudio ? in->nvideo : in->naudio);
        if (!(hscratch = malloc(sizeof(float) * (2 * nd + (pf > 0 ? pf : 1) * D)))) {
            st = rv_fail(RV_ERR_NOMEM, "vit backward: no host memory for the embedding's "
                         "backward of %d tokens", len);
            goto end;
        }
        if ((st = be->copy(be, hscratch, dx, sizeof(float) * (size_t)len * D,
                           RV_COPY_DEVICE_TO_HOST)) != RV_OK ||
            (st = be->copy(be, grad->arena, gd->arena, sizeof(float) * grad->arena_floats,
                           RV_COPY_DEVICE_TO_HOST)) != RV_OK ||
            (st = vit_host_backend(run, &hb, &hb_own)) != RV_OK ||
            (st = vit_embed_backward(m, hb, in, a->any_hidden ? a->hidden : NULL, hscratch,
                                     hscratch + nd, hscratch + 2 * nd, grad, dmask_token,
                                     &s.flops)) != RV_OK)
            goto end;
    }
    s.embed_s += rv_clock_s() - t0;
    s.cp = cp.stats;
    s.flops += cp.stats.flops;
    s.peak_bytes = bytes + cp.stats.peak_bytes;
    if (stats)
        *stats = s;
end:
    rv_cp_attn_free(&cp);
    be->free(be, dx);
    be->free(be, t1);
    be->free(be, t2);
    be->free(be, t3);
    be->free(be, dqkv);
    be->free(be, big);
    be->free(be, ms);
    if (!on_host) {
        be->synchronize(be); /* after an error kernels may still use the buffers */
        if (dy_dev)
            be->free(be, dy_dev);
        rv_vit_backend_free(be, &gd);
        rv_backend_free(&hb_own);
        free(hscratch);
    }
    return st;
}
