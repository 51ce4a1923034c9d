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
 * This is the portable BLAS version; where the CPU has AVX-512 (and
 * RINGVIT_CPU_KERNELS=blas is not set) cpu_attn_bwd_tiles_avx512.c runs instead. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_attention.h"
#include "cpu_attn_tiles.h"
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
} bwd_plan;

static void bwd_key_tile(const bwd_plan *pl, int h, int j0, int bk, float *dq, int ldq,
                         bwd_workspace *w)
{
    const rv_attn_bwd_args *a = pl->a;
    const int d = a->dim, ld = a->heads * a->dim;
    const float *k = a->k + ((size_t)j0 * a->heads + h) * d;
    const float *v = a->v + ((size_t)j0 * a->heads + h) * d;
    memset(w->dk, 0, sizeof(float) * (size_t)bk * d);
    memset(w->dv, 0, sizeof(float) * (size_t)bk * d);

    /* First query row that sees key j0 under a causal mask. */
    int i_first = 0;
    if (a->mask.kind == RV_MASK_CAUSAL) {
        int64_t f = a->mask.k_start + j0 - a->mask.q_start;
        i_first = f < 0 ? 0 : (f > a->sq ? a->sq : (int)f);
    }
    for (int i0 = i_first / RV_BWD_BQ * RV_BWD_BQ; i0 < a->sq; i0 += RV_BWD_BQ) {
        int bq = a->sq - i0 < RV_BWD_BQ ? a->sq - i0 : RV_BWD_BQ;
        const float *q = a->q + ((size_t)i0 * a->heads + h) * d;
        const float *dout = a->dout + ((size_t)i0 * a->heads + h) * d;
        const float *lse2 = pl->lse2 + (size_t)h * a->sq + i0;
        const float *delta = pl->delta + (size_t)h * a->sq + i0;

        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bq, bk, d, pl->scale2, q, ld,
                    k, ld, 0.0f, w->p, bk);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bq, bk, d, 1.0f, dout, ld, v,
                    ld, 0.0f, w->dp, bk);
        for (int i = 0; i < bq; i++) {
            int n = rv_mask_visible(&a->mask, a->sk, i0 + i) - j0;
            n = n < 0 ? 0 : (n > bk ? bk : n);
            float *p = w->p + (size_t)i * bk, *ds = w->dp + (size_t)i * bk;
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
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bk, d, bq, 1.0f, w->p, bk,
                    dout, ld, 1.0f, w->dv, d);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bk, d, bq, pl->scale, w->dp, bk,
                    q, ld, 1.0f, w->dk, d);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bq, d, bk, pl->scale, w->dp,
                    bk, k, ld, 1.0f, dq + (size_t)i0 * ldq, ldq);
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
#if defined(__x86_64__) && defined(__GNUC__)
    if (rv_attn_tiles_select() == &rv_attn_tiles_avx512)
        return rv_attn_bwd_avx512(be, a);
#endif

    const int d = a->dim, ktiles = (a->sk + RV_BWD_BK - 1) / RV_BWD_BK;
    bwd_plan pl = {.a = a};
    pl.scale = rv_attn_scale(a->scale, d);
    pl.scale2 = pl.scale * RV_LOG2E;
    pl.ns = (be->threads + a->heads - 1) / a->heads;
    if (pl.ns > ktiles)
        pl.ns = ktiles;
    const size_t hs = (size_t)a->heads * a->sq;
    const size_t part = (size_t)a->sq * d; /* one split's private dQ */
    rv_status ret = RV_OK;
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
        omp_set_num_threads(1); /* BLAS calls below run on this thread */
        bwd_workspace w;
        w.p = malloc(sizeof(float) * RV_BWD_BQ * RV_BWD_BK);
        w.dp = malloc(sizeof(float) * RV_BWD_BQ * RV_BWD_BK);
        w.dk = malloc(sizeof(float) * RV_BWD_BK * (size_t)d);
        w.dv = malloc(sizeof(float) * RV_BWD_BK * (size_t)d);
        int ok = w.p && w.dp && w.dk && w.dv;
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
                bwd_key_tile(&pl, h, j0, bk, dq, ldq, &w);
            }
        }
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
    return ret;
}
