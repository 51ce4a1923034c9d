/* cpu_attention_bwd.c: tiled attention backward (flash-attention 2 style). The
 * probabilities are recomputed tile by tile from Q, K and the saved log-sum-exp;
 * nothing of size (Sq x Sk) is kept.
 *
 * Work items are (head, split): a split owns every ns-th key tile of its head
 * (interleaved, so causal work stays balanced) and accumulates that tile's dK, dV
 * locally while walking the query tiles that see it. dQ receives contributions
 * from every key tile: split 0 adds straight into dq, other splits into a private
 * (sq x dim) buffer that is summed into dq at the end. Splits exist only when there
 * are more threads than heads. Per query tile and key tile:
 *   P  = exp(scale * Q K^T - lse)        dV += P^T dO
 *   dP = dO V^T                          dS  = P * (dP - D),  D = rowsum(dO * O)
 *   dQ += scale * dS K                   dK += scale * dS^T Q
 * Under a span mask (RV_MASK_SPAN) a key tile walks only the query tiles its box
 * meets (cpu_attn_span.h), masking pair by pair (P = 0) where the boxes partly meet.
 * This is the portable BLAS version (oneDNN's sgemm on each thread alone); where
 * the CPU has AVX-512 or AVX2 (and RINGVIT_CPU_KERNELS=blas is not set) the
 * register-blocked kernels' backward (cpu_attn_tiles_isa.h) runs instead. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_attention.h"
#include "cpu_attn_span.h"
#include "cpu_attn_tiles.h"
#include "cpu_dnnl.h"
#include "cpu_exp.h"
#include "cpu_ops.h"

typedef struct bwd_workspace {
    float *p;  /* (BQ, BK) probabilities */
    float *dp; /* (BQ, BK) dP, then dS */
    float *dk; /* (BK, dim) key-tile dK accumulator */
    float *dv; /* (BK, dim) key-tile dV accumulator */
} bwd_workspace;

typedef struct bwd_plan {
    const rv_attn_bwd_args *a;
    float scale, scale2;
    float *lse2;   /* (heads, sq) log-sum-exp in base 2; +inf for rows that see nothing */
    float *delta;  /* (heads, sq) D = rowsum(dO * O) */
    float *dq_part; /* (heads, ns - 1, sq, dim) private dQ of splits 1.. */
    int ns;        /* splits per head */
    rv_span_tiles qt, kt; /* span mask: query tiles of RV_BWD_BQ, key tiles of RV_BWD_BK */
} bwd_plan;

/* One (query tile, key tile) pair: rows i0..i0+bq-1 against keys j0..j0+bk-1 into
 * the key tile's dK, dV accumulators and dq. span: 0 for a causal or no mask (each
 * row sees a prefix of the keys), SPAN_ALL or SPAN_SOME under a span mask. */
static void bwd_pair(const bwd_plan *pl, int h, int j0, int bk, int i0, int span, float *dq,
                     int ldq, bwd_workspace *w)
{
    const rv_attn_bwd_args *a = pl->a;
    const int d = a->dim, ld = a->heads * a->dim;
    const float *k = a->k + ((size_t)j0 * a->heads + h) * d;
    const float *v = a->v + ((size_t)j0 * a->heads + h) * d;
    int bq = a->sq - i0 < RV_BWD_BQ ? a->sq - i0 : RV_BWD_BQ;
    const float *q = a->q + ((size_t)i0 * a->heads + h) * d;
    const float *dout = a->dout + ((size_t)i0 * a->heads + h) * d;
    const float *lse2 = pl->lse2 + (size_t)h * a->sq + i0;
    const float *delta = pl->delta + (size_t)h * a->sq + i0;

    cpu_sgemm_serial(0, 1, bq, bk, d, pl->scale2, q, ld, k, ld, 0.0f, w->p, bk);
    cpu_sgemm_serial(0, 1, bq, bk, d, 1.0f, dout, ld, v, ld, 0.0f, w->dp, bk);
    for (int i = 0; i < bq; i++) {
        float *p = w->p + (size_t)i * bk, *ds = w->dp + (size_t)i * bk;
        int n;
        if (span == SPAN_ALL)
            n = bk;
        else if (span == SPAN_SOME) /* masked scores give exp2(-inf) = 0 below */
            n = rv_span_mask_row(&a->mask, i0 + i, j0, bk, p) > 0 ? bk : 0;
        else {
            n = rv_mask_visible(&a->mask, a->sk, i0 + i) - j0;
            n = n < 0 ? 0 : (n > bk ? bk : n);
        }
        float m = lse2[i], dl = delta[i];
        for (int j = 0; j < n; j++) {
            float pj = rv_exp2_nonpos(p[j] - m);
            p[j] = pj;
            ds[j] = pj * (ds[j] - dl);
        }
        for (int j = n; j < bk; j++) {
            p[j] = 0.0f;
            ds[j] = 0.0f;
        }
    }
    cpu_sgemm_serial(1, 0, bk, d, bq, 1.0f, w->p, bk, dout, ld, 1.0f, w->dv, d);
    cpu_sgemm_serial(1, 0, bk, d, bq, pl->scale, w->dp, bk, q, ld, 1.0f, w->dk, d);
    cpu_sgemm_serial(0, 0, bq, d, bk, pl->scale, w->dp, bk, k, ld, 1.0f, dq + (size_t)i0 * ldq,
                     ldq);
}

/* Key tile j0 of head h against every query tile that sees it; its dK, dV are
 * written (or added) at the end. Returns the query tiles computed; *boxes grows by
 * the query tile boxes compared. */
static int bwd_key_tile(const bwd_plan *pl, int h, int j0, int bk, float *dq, int ldq,
                        bwd_workspace *w, uint64_t *boxes)
{
    const rv_attn_bwd_args *a = pl->a;
    const int d = a->dim;
    int steps = 0;
    memset(w->dk, 0, sizeof(float) * (size_t)bk * d);
    memset(w->dv, 0, sizeof(float) * (size_t)bk * d);

    if (a->mask.kind == RV_MASK_SPAN) {
        /* The query tiles the key tile's box meets (cpu_attn_span.h). */
        const span_box *kb = &pl->kt.box[j0 / RV_BWD_BK];
        int first, end;
        rv_span_candidates(&pl->qt, kb, a->mask.reach, &first, &end);
        *boxes += (uint64_t)(end - first);
        for (int t = first; t < end; t++) {
            int how = span_meet(&pl->qt.box[t], kb, a->mask.reach, a->mask.causal);
            if (how == SPAN_NONE)
                continue;
            bwd_pair(pl, h, j0, bk, t * RV_BWD_BQ, how, dq, ldq, w);
            steps++;
        }
    } else {
        /* First query row that sees key j0 under a causal mask. */
        int i_first = 0;
        if (a->mask.kind == RV_MASK_CAUSAL) {
            int64_t f = a->mask.k_start + j0 - a->mask.q_start;
            i_first = f < 0 ? 0 : (f > a->sq ? a->sq : (int)f);
        }
        for (int i0 = i_first / RV_BWD_BQ * RV_BWD_BQ; i0 < a->sq; i0 += RV_BWD_BQ, steps++)
            bwd_pair(pl, h, j0, bk, i0, 0, dq, ldq, w);
    }

    for (int j = 0; j < bk; j++) {
        float *dk = a->dk + ((size_t)(j0 + j) * a->heads + h) * d;
        float *dv = a->dv + ((size_t)(j0 + j) * a->heads + h) * d;
        const float *sk = w->dk + (size_t)j * d, *sv = w->dv + (size_t)j * d;
        if (a->accumulate) {
            for (int c = 0; c < d; c++) {
                dk[c] += sk[c];
                dv[c] += sv[c];
            }
        } else {
            memcpy(dk, sk, sizeof(float) * (size_t)d);
            memcpy(dv, sv, sizeof(float) * (size_t)d);
        }
    }
    return steps;
}

/* Per-row preparation: base-2 lse (rows that see no key get +inf so every
 * probability of theirs is exactly 0) and D = rowsum(dO * O); dq zeroed when the
 * call overwrites. */
static void bwd_prepare(const bwd_plan *pl, int threads)
{
    const rv_attn_bwd_args *a = pl->a;
    const int d = a->dim;
    const long rows = (long)a->sq * a->heads;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long r = 0; r < rows; r++) {
        long i = r / a->heads, h = r % a->heads;
        const float *o = a->o + (size_t)r * d, *dout = a->dout + (size_t)r * d;
        float dsum = 0.0f;
        for (int c = 0; c < d; c++)
            dsum += o[c] * dout[c];
        float l = a->lse[h * a->sq + i];
        pl->delta[h * a->sq + i] = dsum;
        pl->lse2[h * a->sq + i] = l == -INFINITY ? INFINITY : l * RV_LOG2E;
        if (!a->accumulate)
            memset(a->dq + (size_t)r * d, 0, sizeof(float) * (size_t)d);
    }
}

rv_status cpu_attn_bwd(rv_backend *be, const rv_attn_bwd_args *a)
{
    rv_status st = rv_attn_check_dims(a->sq, a->sk, a->heads, a->dim, "attn_bwd");
    if (st == RV_OK)
        st = rv_args_attn_mask(&a->mask, a->sq, a->sk, "attn_bwd");
    if (st != RV_OK)
        return st;
    if (!a->accumulate && a->sk > 0 && a->sq == 0) {
        memset(a->dk, 0, sizeof(float) * (size_t)a->sk * a->heads * a->dim);
        memset(a->dv, 0, sizeof(float) * (size_t)a->sk * a->heads * a->dim);
    }
    if (a->sq == 0 || a->sk == 0) {
        if (!a->accumulate && a->sq > 0)
            memset(a->dq, 0, sizeof(float) * (size_t)a->sq * a->heads * a->dim);
        return RV_OK;
    }
    if (!a->q || !a->k || !a->v || !a->o || !a->lse || !a->dout || !a->dq || !a->dk || !a->dv)
        return rv_fail(RV_ERR_INVALID, "attn_bwd: NULL tensor");

    const int d = a->dim, ktiles = (a->sk + RV_BWD_BK - 1) / RV_BWD_BK;
    bwd_plan pl = {.a = a};
    rv_status ret = RV_OK;
    if (a->mask.kind == RV_MASK_SPAN) {
        const rv_attn_mask *m = &a->mask;
        if ((ret = rv_span_tiles_make(m->q_key, m->causal ? m->q_time : NULL, a->sq, RV_BWD_BQ,
                                      be->threads, &pl.qt)) != RV_OK ||
            (ret = rv_span_tiles_make(m->k_key, m->causal ? m->k_time : NULL, a->sk, RV_BWD_BK,
                                      be->threads, &pl.kt)) != RV_OK)
            goto end;
    }
    const rv_attn_tile_ops *ops;
    const rv_precision prec = cpu_is_bf16(be) ? RV_PRECISION_BF16 : RV_PRECISION_F32;
    if ((ret = rv_attn_tiles_select(prec, &ops)) != RV_OK)
        goto end;
    if (ops->bwd) { /* the register-blocked kernels' backward (cpu_attn_tiles_isa.h) */
        ret = ops->bwd(be, a, a->mask.kind == RV_MASK_SPAN ? &pl.qt : NULL, &pl.kt);
        goto end;
    }
    pl.scale = rv_attn_scale(a->scale, d);
    pl.scale2 = pl.scale * RV_LOG2E;
    pl.ns = (be->threads + a->heads - 1) / a->heads;
    if (pl.ns > ktiles)
        pl.ns = ktiles;
    const size_t hs = (size_t)a->heads * a->sq;
    const size_t part = (size_t)a->sq * d; /* one split's private dQ */
    pl.lse2 = malloc(sizeof(float) * hs);
    pl.delta = malloc(sizeof(float) * hs);
    pl.dq_part = pl.ns > 1 ? calloc((size_t)a->heads * (pl.ns - 1) * part, sizeof(float)) : NULL;
    if (!pl.lse2 || !pl.delta || (pl.ns > 1 && !pl.dq_part)) {
        ret = rv_fail(RV_ERR_NOMEM, "attn_bwd: cannot allocate %zu row statistics", hs);
        goto end;
    }
    bwd_prepare(&pl, be->threads);

    const int items = a->heads * pl.ns;
    int failed = 0;
#pragma omp parallel num_threads(be->threads)
    {
        bwd_workspace w;
        w.p = malloc(sizeof(float) * RV_BWD_BQ * RV_BWD_BK);
        w.dp = malloc(sizeof(float) * RV_BWD_BQ * RV_BWD_BK);
        w.dk = malloc(sizeof(float) * RV_BWD_BK * (size_t)d);
        w.dv = malloc(sizeof(float) * RV_BWD_BK * (size_t)d);
        int ok = w.p && w.dp && w.dk && w.dv;
        uint64_t steps = 0, boxes = 0;
        if (!ok) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int it = 0; it < items; it++) {
            if (!ok)
                continue;
            int h = it / pl.ns, s = it % pl.ns;
            float *dq = a->dq + (size_t)h * d;
            int ldq = a->heads * d;
            if (s > 0) {
                dq = pl.dq_part + ((size_t)h * (pl.ns - 1) + s - 1) * part;
                ldq = d;
            }
            for (int t = s; t < ktiles; t += pl.ns) {
                int j0 = t * RV_BWD_BK;
                int bk = a->sk - j0 < RV_BWD_BK ? a->sk - j0 : RV_BWD_BK;
                steps += bwd_key_tile(&pl, h, j0, bk, dq, ldq, &w, &boxes);
            }
        }
        rv_cpu_attn_tiles_add(1, steps, boxes);
        free(w.p);
        free(w.dp);
        free(w.dk);
        free(w.dv);
    }
    if (failed) {
        ret = rv_fail(RV_ERR_NOMEM, "attn_bwd: cannot allocate tile workspace");
        goto end;
    }
    if (pl.ns > 1) {
        const long rows = (long)a->sq * a->heads;
#pragma omp parallel for num_threads(be->threads) schedule(static)
        for (long r = 0; r < rows; r++) {
            long i = r / a->heads, h = r % a->heads;
            float *dq = a->dq + (size_t)r * d;
            for (int s = 1; s < pl.ns; s++) {
                const float *src = pl.dq_part + ((size_t)h * (pl.ns - 1) + s - 1) * part + i * d;
                for (int c = 0; c < d; c++)
                    dq[c] += src[c];
            }
        }
    }
end:
    free(pl.lse2);
    free(pl.delta);
    free(pl.dq_part);
    rv_span_tiles_free(&pl.qt);
    rv_span_tiles_free(&pl.kt);
    return ret;
}
