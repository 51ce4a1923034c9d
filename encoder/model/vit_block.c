/* vit_block.c: one encoder block's forward (vit_internal.h), the only copy of
 * the block, used by the inference forward (vit_forward.c: the residual stream
 * updated in place, the MLP over row chunks) and by the training forward
 * (vit_train_forward.c: every input and intermediate kept for the backward):
 *   h = ln_1(x);  q, k, v = h Wq^T [+ bq], h Wk^T [+ bk], h Wv^T [+ bv]
 *   o = CP attention(q, k, v)
 *   xmid = x + ls_1 * (o Wo^T + bo)                  (ls_1 = 1 without layer scale)
 *   h = ln_2(xmid);  pre = h W1^T + b1
 *   xout = xmid + ls_2 * (act(pre) W2^T + b2)        (over row chunks of pre)
 * Without layer scale the projections accumulate straight into the residual
 * (GEMM with beta 1); with it they go through a scratch (io->tmp_attn, which
 * must not be o; io->tmp_mlp, which may be h) and scale_add. Every op goes
 * through the backend table, so the block runs unchanged on a device. */
#include <string.h>

#include "vit_internal.h"

rv_status vit_block_forward(rv_backend *be, rv_cp_attn *cp, const rv_vit_config *c,
                            const rv_vit_layer *w, int len, const vit_block_io *io,
                            rv_vit_stats *s)
{
    double t0 = rv_clock_s(), t1;
    const int D = c->dim, M = c->mlp;
    const size_t nd = (size_t)len * D;
    rv_status st = RV_OK;
    if (c->layer_scale && (!io->tmp_attn || !io->tmp_mlp))
        return rv_fail(RV_ERR_INTERNAL, "vit block: layer scale without a scratch buffer");

    /* Attention branch. */
    if ((st = be->layernorm_fwd(be, io->x, w->ln1_w, w->ln1_b, len, D, c->eps, io->h,
                                io->ln1_mean, io->ln1_rstd)) != RV_OK)
        return st;
    float *qkv[3] = {io->q, io->k, io->v};
    for (int j = 0; j < 3; j++) {
        if ((st = be->gemm(be, 0, 1, len, D, D, 1.0f, io->h, D, w->qkv_w + (size_t)j * D * D, D,
                           0.0f, qkv[j], D)) != RV_OK)
            return st;
        /* A family without this bias keeps zeros in its place (or no bias at all). */
        if (w->qkv_b && (c->qkv_bias & (1 << j)) &&
            (st = be->bias_add(be, qkv[j], w->qkv_b + (size_t)j * D, len, D)) != RV_OK)
            return st;
    }
    if (io->xmid != io->x &&
        (st = be->copy(be, io->xmid, io->x, sizeof(float) * nd, RV_COPY_DEVICE_TO_DEVICE)) != RV_OK)
        return st;
    if ((st = rv_cp_attn_forward(cp, io->q, io->k, io->v, io->o, io->lse)) != RV_OK)
        return st;
    if (c->layer_scale) {
        if ((st = be->gemm(be, 0, 1, len, D, D, 1.0f, io->o, D, w->proj_w, D, 0.0f, io->tmp_attn,
                           D)) != RV_OK ||
            (st = be->bias_add(be, io->tmp_attn, w->proj_b, len, D)) != RV_OK ||
            (st = be->scale_add(be, io->xmid, io->tmp_attn, w->ls1, len, D)) != RV_OK)
            return st;
    } else if ((st = be->bias_add(be, io->xmid, w->proj_b, len, D)) != RV_OK ||
               (st = be->gemm(be, 0, 1, len, D, D, 1.0f, io->o, D, w->proj_w, D, 1.0f, io->xmid,
                              D)) != RV_OK) {
        return st;
    }
    s->flops += 2.0 * len * (double)D * 4 * D;
    t1 = rv_clock_s();
    s->attn_s += t1 - t0, t0 = t1;

    /* MLP branch, over row chunks (one chunk of every row in training). */
    if (io->xout != io->xmid &&
        (st = be->copy(be, io->xout, io->xmid, sizeof(float) * nd, RV_COPY_DEVICE_TO_DEVICE)) != RV_OK)
        return st;
    if ((st = be->layernorm_fwd(be, io->xmid, w->ln2_w, w->ln2_b, len, D, c->eps, io->h,
                                io->ln2_mean, io->ln2_rstd)) != RV_OK)
        return st;
    if (!c->layer_scale && (st = be->bias_add(be, io->xout, w->fc2_b, len, D)) != RV_OK)
        return st;
    for (int r0 = 0; r0 < len; r0 += io->chunk) {
        const int n = len - r0 < io->chunk ? len - r0 : io->chunk;
        /* training keeps pre of every row (one chunk, act beside it); inference
         * reuses one chunk's buffer for pre and act alike */
        float *pre = io->pre + (io->pre_all_rows ? (size_t)r0 * M : 0);
        float *act = io->act == io->pre ? pre : io->act;
        float *out = io->xout + (size_t)r0 * D;
        if ((st = be->gemm(be, 0, 1, n, M, D, 1.0f, io->h + (size_t)r0 * D, D, w->fc1_w, D, 0.0f,
                           pre, M)) != RV_OK ||
            (st = be->bias_add(be, pre, w->fc1_b, n, M)) != RV_OK ||
            (st = be->act_fwd(be, (rv_act)c->act, pre, act, (size_t)n * M)) != RV_OK)
            return st;
        if (c->layer_scale) {
            /* tmp_mlp may be h: this chunk's rows of h are read by fc1 above */
            float *t = io->tmp_mlp + (size_t)r0 * D;
            if ((st = be->gemm(be, 0, 1, n, D, M, 1.0f, act, M, w->fc2_w, M, 0.0f, t, D)) != RV_OK ||
                (st = be->bias_add(be, t, w->fc2_b, n, D)) != RV_OK ||
                (st = be->scale_add(be, out, t, w->ls2, n, D)) != RV_OK)
                return st;
        } else if ((st = be->gemm(be, 0, 1, n, D, M, 1.0f, act, M, w->fc2_w, M, 1.0f, out, D)) !=
                   RV_OK) {
            return st;
        }
    }
    s->flops += 4.0 * len * (double)D * M;
    s->mlp_s += rv_clock_s() - t0;
    return st;
}
