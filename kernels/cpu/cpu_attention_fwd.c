/* cpu_attention_fwd.c: tiled attention forward (flash-attention style online
 * softmax) returning the output and the log-sum-exp of every query row.
 *
 * Work items are (head, query tile); each thread walks the key tiles a query tile
 * can see, keeping a running row max m, row sum l and an unnormalised output
 * accumulator. Scores are computed in base-2 units (scale * log2 e folded into the
 * GEMM's alpha) so the exponential is a cheap exp2. Memory per thread is one
 * (BQ x BK) score tile and a (BQ x dim) accumulator: never an (Sq x Sk) buffer. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_attention.h"
#include "cpu_exp.h"
#include "cpu_ops.h"

typedef struct fwd_workspace {
    float *s;   /* (BQ, BK) scores, then probabilities */
    float *acc; /* (BQ, dim) unnormalised output */
    float *m;   /* (BQ) running max, base-2 units */
    float *l;   /* (BQ) running sum */
} fwd_workspace;

/* Online-softmax update of one query row with its scores s[0..n) (n visible
 * keys of this tile; the tile's other columns become 0). Returns the factor the
 * row's accumulator must be multiplied by before adding P @ V. */
static inline float softmax_row_update(float *s, int n, int bk, float *m, float *l)
{
    float mx = -INFINITY;
    for (int j = 0; j < n; j++)
        mx = s[j] > mx ? s[j] : mx;
    float m_new = mx > *m ? mx : *m;
    float sum = 0.0f;
    if (m_new == -INFINITY) { /* nothing seen yet in this row */
        memset(s, 0, sizeof(float) * (size_t)bk);
        return 1.0f;
    }
    for (int j = 0; j < n; j++) {
        float p = rv_exp2_nonpos(s[j] - m_new);
        s[j] = p;
        sum += p;
    }
    for (int j = n; j < bk; j++)
        s[j] = 0.0f;
    float corr = rv_exp2_nonpos(*m - m_new);
    *l = *l * corr + sum;
    *m = m_new;
    return corr;
}

static void fwd_tile(const rv_attn_fwd_args *a, float scale2, int h, int i0, int bq,
                     fwd_workspace *w)
{
    const int d = a->dim, ld = a->heads * a->dim;
    const float *q = a->q + ((size_t)i0 * a->heads + h) * d;
    for (int i = 0; i < bq; i++) {
        w->m[i] = -INFINITY;
        w->l[i] = 0.0f;
    }
    memset(w->acc, 0, sizeof(float) * (size_t)bq * d);

    /* Keys beyond what the tile's last row sees are never needed. */
    int kend = rv_mask_visible(&a->mask, a->sk, i0 + bq - 1);
    for (int j0 = 0; j0 < kend; j0 += RV_FWD_BK) {
        int bk = kend - j0 < RV_FWD_BK ? kend - j0 : RV_FWD_BK;
        const float *k = a->k + ((size_t)j0 * a->heads + h) * d;
        const float *v = a->v + ((size_t)j0 * a->heads + h) * d;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bq, bk, d, scale2, q, ld, k,
                    ld, 0.0f, w->s, bk);
        for (int i = 0; i < bq; i++) {
            int n = rv_mask_visible(&a->mask, a->sk, i0 + i) - j0;
            n = n < 0 ? 0 : (n > bk ? bk : n);
            float corr = softmax_row_update(w->s + (size_t)i * bk, n, bk, &w->m[i], &w->l[i]);
            if (corr != 1.0f) {
                float *acc = w->acc + (size_t)i * d;
                for (int c = 0; c < d; c++)
                    acc[c] *= corr;
            }
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bq, d, bk, 1.0f, w->s, bk, v,
                    ld, 1.0f, w->acc, d);
    }

    for (int i = 0; i < bq; i++) {
        float *o = a->o + ((size_t)(i0 + i) * a->heads + h) * d;
        const float *acc = w->acc + (size_t)i * d;
        float *lse = a->lse + (size_t)h * a->sq + i0 + i;
        if (w->l[i] > 0.0f) {
            float inv = 1.0f / w->l[i];
            for (int c = 0; c < d; c++)
                o[c] = acc[c] * inv;
            *lse = (w->m[i] + log2f(w->l[i])) * RV_LN2;
        } else {
            memset(o, 0, sizeof(float) * (size_t)d);
            *lse = -INFINITY;
        }
    }
}

rv_status cpu_attn_fwd(rv_backend *be, const rv_attn_fwd_args *a)
{
    rv_status st = rv_attn_check_dims(a->sq, a->sk, a->heads, a->dim, "attn_fwd");
    if (st != RV_OK)
        return st;
    if (a->sq == 0)
        return RV_OK;
    if (!a->q || !a->o || !a->lse || (a->sk > 0 && (!a->k || !a->v)))
        return rv_fail(RV_ERR_INVALID, "attn_fwd: NULL tensor");

    const float scale2 = rv_attn_scale(a->scale, a->dim) * RV_LOG2E;
    const int qtiles = (a->sq + RV_FWD_BQ - 1) / RV_FWD_BQ;
    const int items = qtiles * a->heads;
    int failed = 0;

#pragma omp parallel num_threads(be->threads)
    {
        omp_set_num_threads(1); /* BLAS calls below run on this thread */
        fwd_workspace w;
        w.s = malloc(sizeof(float) * RV_FWD_BQ * RV_FWD_BK);
        w.acc = malloc(sizeof(float) * RV_FWD_BQ * (size_t)a->dim);
        w.m = malloc(sizeof(float) * RV_FWD_BQ);
        w.l = malloc(sizeof(float) * RV_FWD_BQ);
        int ok = w.s && w.acc && w.m && w.l;
        if (!ok) {
#pragma omp atomic write
            failed = 1;
        }
        /* Causal tiles late in the sequence see the most keys: hand them out first. */
#pragma omp for schedule(dynamic, 1)
        for (int it = 0; it < items; it++) {
            if (!ok)
                continue;
            int t = qtiles - 1 - it / a->heads, h = it % a->heads;
            int i0 = t * RV_FWD_BQ;
            int bq = a->sq - i0 < RV_FWD_BQ ? a->sq - i0 : RV_FWD_BQ;
            fwd_tile(a, scale2, h, i0, bq, &w);
        }
        free(w.s);
        free(w.acc);
        free(w.m);
        free(w.l);
    }
    if (failed)
        return rv_fail(RV_ERR_NOMEM, "attn_fwd: cannot allocate tile workspace");
    return RV_OK;
}
