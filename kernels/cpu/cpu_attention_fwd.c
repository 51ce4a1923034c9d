/* cpu_attention_fwd.c: tiled attention forward (flash-attention style online
 * softmax) returning the output and the log-sum-exp of every query row.
 *
 * Work items are (head, query tile); each thread walks the key tiles a query tile
 * can see, keeping a running row max m, row sum l and an unnormalised output
 * accumulator. The tile steps (cpu_attn_tiles.h) run on packed copies of the
 * tiles: AVX-512 register-blocked kernels where the CPU has them, else BLAS. Scores are in base-2 units
 * (scale * log2 e folded into the packed queries) so the exponential is a cheap
 * exp2. Memory per thread is one (BQ x BK) score tile, the packed tiles and a
 * (BQ x dim) accumulator: never an (Sq x Sk) buffer. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_attention.h"
#include "cpu_attn_tiles.h"
#include "cpu_exp.h"
#include "cpu_ops.h"

/* Keys and values packed once per call for the tile kernels, shared by all threads:
 * every key tile's transpose is one contiguous (dim, BK) block, so a tile product
 * reads consecutive memory whatever the sequence length. */
typedef struct fwd_pack {
    float *kt;   /* (heads, ktiles, dim, BK) keys transposed, zero past sk */
    float *vp;   /* (heads, ktiles * BK, dpad) values, zero padded */
    int ktiles;  /* key tiles of BK */
    int dpad;    /* dim rounded up to 16 */
} fwd_pack;

typedef struct fwd_workspace {
    float *qp;  /* (BQ, dim) query tile scaled by scale * log2 e, zero rows past the end */
    float *s;   /* (BQ, BK) scores, then probabilities */
    float *acc; /* (BQ, dpad) unnormalised output */
    float *m;   /* (BQ) running max, base-2 units */
    float *l;   /* (BQ) running sum */
} fwd_workspace;

static inline int round_up(int x, int m)
{
    return (x + m - 1) / m * m;
}

static void fwd_tile(const rv_attn_fwd_args *a, const rv_attn_tile_ops *ops,
                     const fwd_pack *pk, float scale2, int h, int i0, int bq,
                     fwd_workspace *w)
{
    const int d = a->dim, dpad = pk->dpad;
    const int bqp = round_up(bq, 8);
    for (int i = 0; i < bqp; i++) {
        float *dst = w->qp + (size_t)i * d;
        w->m[i] = -INFINITY;
        w->l[i] = 0.0f;
        if (i >= bq) {
            memset(dst, 0, sizeof(float) * (size_t)d);
            continue;
        }
        const float *src = a->q + ((size_t)(i0 + i) * a->heads + h) * d;
        for (int c = 0; c < d; c++)
            dst[c] = src[c] * scale2;
    }
    memset(w->acc, 0, sizeof(float) * (size_t)bqp * dpad);
    if (a->accumulate) {
        /* Continue from the partial result in (o, lse): running max lse (base 2),
         * running sum 1, accumulator o; rows that saw nothing stay empty. */
        for (int i = 0; i < bq; i++) {
            float l0 = a->lse[(size_t)h * a->sq + i0 + i];
            if (l0 == -INFINITY)
                continue;
            w->m[i] = l0 * RV_LOG2E;
            w->l[i] = 1.0f;
            memcpy(w->acc + (size_t)i * dpad, a->o + ((size_t)(i0 + i) * a->heads + h) * d,
                   sizeof(float) * (size_t)d);
        }
    }

    /* Keys beyond what the tile's last row sees are never needed. */
    int kend = rv_mask_visible(&a->mask, a->sk, i0 + bq - 1);
    for (int j0 = 0; j0 < kend; j0 += RV_FWD_BK) {
        int bk = kend - j0 < RV_FWD_BK ? kend - j0 : RV_FWD_BK;
        int bkp = round_up(bk, 32);
        const float *ktp = pk->kt + ((size_t)h * pk->ktiles + j0 / RV_FWD_BK) * d * RV_FWD_BK;
        const float *vp = pk->vp + ((size_t)h * pk->ktiles * RV_FWD_BK + j0) * dpad;
        ops->qk(w->qp, d, ktp, RV_FWD_BK, bqp, bkp, w->s, bkp);
        for (int i = 0; i < bq; i++) {
            int n = rv_mask_visible(&a->mask, a->sk, i0 + i) - j0;
            n = n < 0 ? 0 : (n > bk ? bk : n);
            float corr = ops->softmax_row(w->s + (size_t)i * bkp, n, bk, &w->m[i], &w->l[i]);
            if (corr != 1.0f) {
                float *acc = w->acc + (size_t)i * dpad;
                for (int c = 0; c < d; c++)
                    acc[c] *= corr;
            }
        }
        ops->pv(w->s, bkp, vp, dpad, bk, bqp, w->acc);
    }

    for (int i = 0; i < bq; i++) {
        float *o = a->o + ((size_t)(i0 + i) * a->heads + h) * d;
        const float *acc = w->acc + (size_t)i * dpad;
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

static void *alloc64(size_t floats)
{
    return aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64);
}

/* Fills the shared packs; rows are spread over the threads. */
static void fwd_pack_fill(const rv_attn_fwd_args *a, fwd_pack *pk, int threads)
{
    const int d = a->dim, dpad = pk->dpad;
    const long per_head = (long)pk->ktiles * RV_FWD_BK;
    const long rows = (long)a->heads * per_head; /* (head, key) pairs */
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long r = 0; r < rows; r++) {
        int h = (int)(r / per_head), j = (int)(r % per_head);
        float *kt = pk->kt + ((size_t)h * pk->ktiles + j / RV_FWD_BK) * d * RV_FWD_BK +
                    j % RV_FWD_BK;
        float *vp = pk->vp + ((size_t)h * per_head + j) * dpad;
        if (j >= a->sk) {
            for (int c = 0; c < d; c++)
                kt[(size_t)c * RV_FWD_BK] = 0.0f;
            memset(vp, 0, sizeof(float) * (size_t)dpad);
            continue;
        }
        const float *k = a->k + ((size_t)j * a->heads + h) * d;
        const float *v = a->v + ((size_t)j * a->heads + h) * d;
        for (int c = 0; c < d; c++)
            kt[(size_t)c * RV_FWD_BK] = k[c];
        memcpy(vp, v, sizeof(float) * (size_t)d);
        for (int c = d; c < dpad; c++)
            vp[c] = 0.0f;
    }
}

rv_status cpu_attn_fwd(rv_backend *be, const rv_attn_fwd_args *a)
{
    int none = 0;
    rv_status st = rv_args_attn_fwd(a, &none);
    if (st != RV_OK || none)
        return st;

    const rv_attn_tile_ops *ops = rv_attn_tiles_select();
    const float scale2 = rv_attn_scale(a->scale, a->dim) * RV_LOG2E;
    const int qtiles = (a->sq + RV_FWD_BQ - 1) / RV_FWD_BQ;
    const int items = qtiles * a->heads;
    int failed = 0;
    rv_status ret = RV_OK;
    /* Under a causal mask the last query row sees the most keys: later keys are
     * never packed, and a block no row sees costs nothing. */
    const int kvis = rv_mask_visible(&a->mask, a->sk, a->sq - 1);
    if (kvis == 0) {
        if (a->accumulate)
            return RV_OK; /* nothing to add */
        memset(a->o, 0, sizeof(float) * (size_t)a->sq * a->heads * a->dim);
        for (size_t i = 0; i < (size_t)a->sq * a->heads; i++)
            a->lse[i] = -INFINITY;
        return RV_OK;
    }
    fwd_pack pk = {.ktiles = (kvis + RV_FWD_BK - 1) / RV_FWD_BK, .dpad = round_up(a->dim, 16)};
    const size_t keys = (size_t)a->heads * pk.ktiles * RV_FWD_BK;
    pk.kt = alloc64(keys * a->dim);
    pk.vp = alloc64(keys * pk.dpad);
    if (!pk.kt || !pk.vp) {
        ret = rv_fail(RV_ERR_NOMEM, "attn_fwd: cannot allocate packed keys (%zu keys)", keys);
        goto end;
    }
    fwd_pack_fill(a, &pk, be->threads);

#pragma omp parallel num_threads(be->threads)
    {
        const size_t dpad = (size_t)round_up(a->dim, 16);
        fwd_workspace w;
        w.qp = alloc64((size_t)RV_FWD_BQ * a->dim);
        w.s = alloc64((size_t)RV_FWD_BQ * RV_FWD_BK);
        w.acc = alloc64((size_t)RV_FWD_BQ * dpad);
        w.m = alloc64(RV_FWD_BQ);
        w.l = alloc64(RV_FWD_BQ);
        int ok = w.qp && w.s && w.acc && w.m && w.l;
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
            /* A tile whose last row sees no key adds nothing to a running result
             * (ring attention's diagonal blocks leave many so): skip rewriting
             * its (o, lse). */
            if (a->accumulate && rv_mask_visible(&a->mask, a->sk, i0 + bq - 1) == 0)
                continue;
            fwd_tile(a, ops, &pk, scale2, h, i0, bq, &w);
        }
        free(w.qp);
        free(w.s);
        free(w.acc);
        free(w.m);
        free(w.l);
    }
    if (failed)
        ret = rv_fail(RV_ERR_NOMEM, "attn_fwd: cannot allocate tile workspace");
end:
    free(pk.kt);
    free(pk.vp);
    return ret;
}
