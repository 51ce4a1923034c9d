/* vit_forward_rows.c: the encoder's blocks for inference under an attention
 * span, in query rows, so a rank of an hour-long recording holds its residual
 * stream and its K and V, never its queries, attention outputs or LayerNorm
 * outputs whole (three (len, D) buffers where the whole-slice forward needs
 * five). Per block:
 *   1. K and V of every row, from ln_1 of row chunks;
 *   2. the K/V runs the span needs from the other ranks (cp_span_exchange);
 *   3. for each row chunk: ln_1 again, its queries, the attention of those rows
 *      against every key they can see (cp_span_rows), the projection into the
 *      residual, then the chunk's MLP.
 * A chunk's rows of the residual change only when it is processed, after every
 * K and V came from the block's input, so the result is the whole-slice
 * forward's (vit_block.c), up to the order of float sums. */
#include <string.h>

#include "cp_strategies.h"
#include "vit_internal.h"

/* Rows per chunk: attention tiles are 256 queries; the MLP's hidden rows of a
 * chunk are 2048 x M floats. */
#define ROWS_CHUNK 2048

rv_status vit_blocks_rows(rv_backend *be, rv_cp_attn *cp, const rv_vit_config *c,
                          const rv_vit_model *wm, const rv_vit_run *run, float *y, int len,
                          rv_vit_stats *s, size_t *bytes)
{
    const int D = c->dim, H = c->heads, M = c->mlp;
    const int cap = len > 0 ? len : 1, ch = cap < ROWS_CHUNK ? cap : ROWS_CHUNK;
    const size_t nd = (size_t)cap * D, cd = (size_t)ch * D;
    rv_status st = RV_OK;
    float *k = NULL, *v = NULL, *h = NULL, *q = NULL, *o = NULL, *lse = NULL, *mean = NULL,
          *rstd = NULL, *hid = NULL, *tmp = NULL;
    *bytes = sizeof(float) * (2 * nd + 4 * cd + (size_t)H * ch + 2 * (size_t)ch + (size_t)ch * M);
    if ((st = be->alloc(be, sizeof(float) * nd, (void **)&k)) != RV_OK ||
        (st = be->alloc(be, sizeof(float) * nd, (void **)&v)) != RV_OK ||
        (st = be->alloc(be, sizeof(float) * cd, (void **)&h)) != RV_OK ||
        (st = be->alloc(be, sizeof(float) * cd, (void **)&q)) != RV_OK ||
        (st = be->alloc(be, sizeof(float) * cd, (void **)&o)) != RV_OK ||
        (st = be->alloc(be, sizeof(float) * cd, (void **)&tmp)) != RV_OK ||
        (st = be->alloc(be, sizeof(float) * (size_t)H * ch, (void **)&lse)) != RV_OK ||
        (st = be->alloc(be, sizeof(float) * ch, (void **)&mean)) != RV_OK ||
        (st = be->alloc(be, sizeof(float) * ch, (void **)&rstd)) != RV_OK ||
        (st = be->alloc(be, sizeof(float) * (size_t)ch * M, (void **)&hid)) != RV_OK)
        goto end;
    for (int l = 0; l < c->layers; l++) {
        const rv_vit_layer *w = &wm->layer[l];
        if (run->check && (st = run->check(run->check_arg)) != RV_OK)
            goto end;
        double t0 = rv_clock_s(), mlp = 0;
        /* 1. K and V of every row. */
        for (int r0 = 0; r0 < len; r0 += ch) {
            const int n = len - r0 < ch ? len - r0 : ch;
            float *kv[2] = {k + (size_t)r0 * D, v + (size_t)r0 * D};
            if ((st = be->layernorm_fwd(be, y + (size_t)r0 * D, w->ln1_w, w->ln1_b, n, D, c->eps,
                                        h, mean, rstd)) != RV_OK)
                goto end;
            for (int j = 1; j < 3; j++) {
                if ((st = be->gemm(be, 0, 1, n, D, D, 1.0f, h, D, w->qkv_w + (size_t)j * D * D, D,
                                   0.0f, kv[j - 1], D)) != RV_OK)
                    goto end;
                if (w->qkv_b && (c->qkv_bias & (1 << j)) &&
                    (st = be->bias_add(be, kv[j - 1], w->qkv_b + (size_t)j * D, n, D)) != RV_OK)
                    goto end;
            }
        }
        /* 2. What the span needs from the other ranks. */
        if (cp->plan.ranks > 1 && (st = cp_span_exchange(cp, k, v)) != RV_OK)
            goto end;
        /* 3. The queries, their attention, the projection and the MLP, chunk by chunk. */
        for (int r0 = 0; r0 < len; r0 += ch) {
            const int n = len - r0 < ch ? len - r0 : ch;
            float *yc = y + (size_t)r0 * D;
            if ((st = be->layernorm_fwd(be, yc, w->ln1_w, w->ln1_b, n, D, c->eps, h, mean,
                                        rstd)) != RV_OK ||
                (st = be->gemm(be, 0, 1, n, D, D, 1.0f, h, D, w->qkv_w, D, 0.0f, q, D)) != RV_OK)
                goto end;
            if (w->qkv_b && (c->qkv_bias & RV_VIT_BIAS_Q) &&
                (st = be->bias_add(be, q, w->qkv_b, n, D)) != RV_OK)
                goto end;
            if ((st = cp_span_rows(cp, q, r0, n, k, v, o, lse)) != RV_OK)
                goto end;
            if (c->layer_scale) {
                if ((st = be->gemm(be, 0, 1, n, D, D, 1.0f, o, D, w->proj_w, D, 0.0f, tmp, D)) != RV_OK ||
                    (st = be->bias_add(be, tmp, w->proj_b, n, D)) != RV_OK ||
                    (st = be->scale_add(be, yc, tmp, w->ls1, n, D)) != RV_OK)
                    goto end;
            } else if ((st = be->bias_add(be, yc, w->proj_b, n, D)) != RV_OK ||
                       (st = be->gemm(be, 0, 1, n, D, D, 1.0f, o, D, w->proj_w, D, 1.0f, yc,
                                      D)) != RV_OK) {
                goto end;
            }
            const double tm = rv_clock_s();
            if ((st = be->layernorm_fwd(be, yc, w->ln2_w, w->ln2_b, n, D, c->eps, h, mean,
                                        rstd)) != RV_OK ||
                (st = be->gemm(be, 0, 1, n, M, D, 1.0f, h, D, w->fc1_w, D, 0.0f, hid, M)) != RV_OK ||
                (st = be->bias_add(be, hid, w->fc1_b, n, M)) != RV_OK ||
                (st = be->act_fwd(be, (rv_act)c->act, hid, hid, (size_t)n * M)) != RV_OK)
                goto end;
            if (c->layer_scale) {
                if ((st = be->gemm(be, 0, 1, n, D, M, 1.0f, hid, M, w->fc2_w, M, 0.0f, tmp, D)) != RV_OK ||
                    (st = be->bias_add(be, tmp, w->fc2_b, n, D)) != RV_OK ||
                    (st = be->scale_add(be, yc, tmp, w->ls2, n, D)) != RV_OK)
                    goto end;
            } else if ((st = be->bias_add(be, yc, w->fc2_b, n, D)) != RV_OK ||
                       (st = be->gemm(be, 0, 1, n, D, M, 1.0f, hid, M, w->fc2_w, M, 1.0f, yc,
                                      D)) != RV_OK) {
                goto end;
            }
            mlp += rv_clock_s() - tm;
        }
        s->flops += 2.0 * len * (double)D * 4 * D + 4.0 * len * (double)D * M;
        s->attn_s += rv_clock_s() - t0 - mlp; /* on a device the clocks see launches only */
        s->mlp_s += mlp;
    }
end:
    be->free(be, k), be->free(be, v), be->free(be, h), be->free(be, q), be->free(be, o);
    be->free(be, tmp), be->free(be, lse), be->free(be, mean), be->free(be, rstd);
    be->free(be, hid);
    return st;
}
