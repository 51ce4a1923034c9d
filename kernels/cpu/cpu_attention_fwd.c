/* cpu_attention_fwd.c: tiled attention forward (flash-attention style online
 * softmax) returning the output and the log-sum-exp of every query row.
 *
 * Work items are (head, query tile); each thread walks the key tiles a query tile
 * can see, keeping a running row max m, row sum l and an unnormalised output
 * accumulator. The tile steps (cpu_attn_tiles.h) run on packed copies of the
 * tiles: the register-blocked kernels of the best instruction set the CPU has
 * (AVX-512, AVX2), else BLAS (cpu_kernels_select.c). Scores are in base-2 units
 * (scale * log2 e folded into the packed queries) so the exponential is a cheap
 * exp2. Memory per thread is one (BQ x BK) score tile, the packed tiles and a
 * (BQ x dim) accumulator: never an (Sq x Sk) buffer.
 *
 * Span masks (RV_MASK_SPAN): a query tile visits only the key tiles its box meets
 * (cpu_attn_span.h: binary search over prefix maxima and suffix minima of the key
 * tiles' boxes, then box by box); a tile pair that every pair of sees runs as
 * unmasked, of one partly seen only the runs of 32-key sub-tiles that meet are
 * computed, with the scores of invisible pairs -inf before the online softmax.
 * Work items are then runs of consecutive query tiles of a head, and each thread
 * packs the key tiles it visits into a few slots of its own (fwd_kcache) rather
 * than all keys being packed up front: a long sequence under a narrow window
 * touches each key a few times, not the pages of a pack of every key on every
 * call. With accumulate, rows that see no key of the call keep their (o, lse) bit
 * for bit. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_attention.h"
#include "cpu_attn_span.h"
#include "cpu_attn_tiles.h"
#include "cpu_exp.h"
#include "cpu_ops.h"

/* Query rows of a forward tile taken through scores, softmax and P @ V together
 * (a multiple of 8, the score kernels' row block). */
#ifndef RV_FWD_ROWS
#define RV_FWD_ROWS 16
#endif

/* Keys and values packed once per call for the tile kernels, shared by all threads:
 * every key tile's transpose is one contiguous (dim, BK) block, so a tile product
 * reads consecutive memory whatever the sequence length. */
typedef struct fwd_pack {
    float *kt;   /* (heads, ktiles, dim, BK) keys transposed, zero past sk */
    float *vp;   /* (heads, ktiles * BK, dpad) values, zero padded */
    int ktiles;  /* key tiles of BK */
    int dpad;    /* dim rounded up to 16 */
} fwd_pack;

/* One packed key tile: its keys transposed (dim, BK) and its values (BK, dpad). */
typedef struct fwd_ktile {
    const float *kt, *vp;
} fwd_ktile;

/* Span masks: each thread packs the key tiles it visits into slots of its own,
 * tile u of head h in slot u % slots (tag h * ktiles + u; -1: empty), instead of
 * one pack of every key before the call. A query tile's candidate key tiles are
 * fewer than the slots, so they never evict each other, and the next query tile of
 * the same head finds most of them packed. Memory: slots tiles per thread. */
typedef struct fwd_kcache {
    float *kt;  /* (slots, dim, BK) */
    float *vp;  /* (slots, BK, dpad) */
    int *tag;   /* (slots) */
    int slots;  /* 0: the shared fwd_pack is used */
} fwd_kcache;

typedef struct fwd_workspace {
    float *qp;  /* (BQ, dim) query tile scaled by scale * log2 e, zero rows past the end */
    float *s;   /* (BQ, BK) scores, then probabilities */
    float *acc; /* (BQ, dpad) unnormalised output */
    float *m;   /* (BQ) running max, base-2 units */
    float *l;   /* (BQ) running sum */
    unsigned char *seen; /* (BQ) the row saw a key in this call */
    float *tile; /* the tile kernels' own scratch (ops->ws_floats); NULL: none */
} fwd_workspace;

static inline int round_up(int x, int m)
{
    return (x + m - 1) / m * m;
}

/* Packs the query tile, resets the running statistics and, with accumulate,
 * continues from the partial result in (o, lse). */
static void fwd_tile_begin(const rv_attn_fwd_args *a, float scale2, int dpad, int h, int i0,
                           int bq, fwd_workspace *w)
{
    const int d = a->dim;
    const int bqp = round_up(bq, 8);
    for (int i = 0; i < bqp; i++) {
        float *dst = w->qp + (size_t)i * d;
        w->m[i] = -INFINITY;
        w->l[i] = 0.0f;
        w->seen[i] = 0;
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
}

/* One key tile (keys j0..j0+bk-1) into the running result of the query tile.
 * span = 0: a causal or no mask, each row seeing a prefix of the keys; SPAN_ALL:
 * every row sees every key of the tile; SPAN_SOME: the span mask pair by pair.
 * A span step may be part of a key tile: j0 a multiple of RV_SPAN_SUB, the keys
 * within one tile. */
static void fwd_tile_step(const rv_attn_fwd_args *a, const rv_attn_tile_ops *ops,
                          fwd_ktile kt, int dpad, int i0, int bq, int j0, int bk, int span,
                          fwd_workspace *w)
{
    const int d = a->dim;
    const int bqp = round_up(bq, 8), bkp = round_up(bk, 32);
    const float *ktp = kt.kt + j0 % RV_FWD_BK; /* span steps may start inside a tile */
    const float *vp = kt.vp + (size_t)(j0 % RV_FWD_BK) * dpad;
    /* Rows in chunks of RV_FWD_ROWS: a chunk's scores stay in L1 from the product
     * through the softmax to P @ V (the whole tile's would be 512 KB, in L2). The
     * rows are independent: the same results for any chunk size. AVX-512 only:
     * the AVX2 kernels walk the key columns outermost and gain nothing, BLAS
     * pays per call. */
    int chunk = bqp;
#if defined(__x86_64__) && defined(__GNUC__)
    if (ops == &rv_attn_tiles_avx512)
        chunk = RV_FWD_ROWS;
#endif
    for (int r0 = 0; r0 < bqp; r0 += chunk) {
        const int rows = bqp - r0 < chunk ? bqp - r0 : chunk;
        const int r1 = r0 + rows < bq ? r0 + rows : bq; /* rows past bq: padding */
        ops->qk(w->qp + (size_t)r0 * d, d, ktp, RV_FWD_BK, rows, bkp, w->s + (size_t)r0 * bkp,
                bkp, w->tile);
        for (int i = r0; i < r1; i++) {
            float *s = w->s + (size_t)i * bkp;
            int n;
            if (span == SPAN_ALL) {
                n = bk;
            } else if (span == SPAN_SOME) {
                n = rv_span_mask_row(&a->mask, i0 + i, j0, bk, s) > 0 ? bk : 0;
            } else {
                n = rv_mask_visible(&a->mask, a->sk, i0 + i) - j0;
                n = n < 0 ? 0 : (n > bk ? bk : n);
            }
            w->seen[i] |= n > 0;
            float corr = ops->softmax_row(s, n, bk, &w->m[i], &w->l[i]);
            if (corr != 1.0f) {
                float *acc = w->acc + (size_t)i * dpad;
                for (int c = 0; c < d; c++)
                    acc[c] *= corr;
            }
        }
        ops->pv(w->s + (size_t)r0 * bkp, bkp, vp, dpad, bk, rows,
                w->acc + (size_t)r0 * dpad, w->tile);
    }
}

/* Normalised output and lse of the query tile. keep_unseen: rows that saw no key
 * in this call keep their (o, lse) as they are (accumulate under a span mask). */
static void fwd_tile_end(const rv_attn_fwd_args *a, int dpad, int h, int i0, int bq,
                         int keep_unseen, const fwd_workspace *w)
{
    const int d = a->dim;
    for (int i = 0; i < bq; i++) {
        if (keep_unseen && !w->seen[i])
            continue;
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

/* Key tile u of head h in the shared pack. */
static fwd_ktile pack_tile(const fwd_pack *pk, int d, int h, int u)
{
    return (fwd_ktile){pk->kt + ((size_t)h * pk->ktiles + u) * d * RV_FWD_BK,
                       pk->vp + ((size_t)h * pk->ktiles + u) * RV_FWD_BK * pk->dpad};
}

/* Key row j of head h packed: kt[c * BK] = k[c] (a column of a transposed tile),
 * vp = v zero padded to dpad; zeros for j >= sk. */
static void pack_key_row(const rv_attn_fwd_args *a, int h, int j, float *kt, float *vp,
                         int dpad)
{
    const int d = a->dim;
    if (j >= a->sk) {
        for (int c = 0; c < d; c++)
            kt[(size_t)c * RV_FWD_BK] = 0.0f;
        memset(vp, 0, sizeof(float) * (size_t)dpad);
        return;
    }
    const float *k = a->k + ((size_t)j * a->heads + h) * d;
    const float *v = a->v + ((size_t)j * a->heads + h) * d;
    for (int c = 0; c < d; c++)
        kt[(size_t)c * RV_FWD_BK] = k[c];
    memcpy(vp, v, sizeof(float) * (size_t)d);
    for (int c = d; c < dpad; c++)
        vp[c] = 0.0f;
}

/* Key tile u of head h: from the thread's slots (packed there first if missing), or
 * from the shared pack. */
static fwd_ktile span_tile(const rv_attn_fwd_args *a, const fwd_pack *pk, fwd_kcache *kc,
                           int h, int u)
{
    if (kc->slots == 0)
        return pack_tile(pk, a->dim, h, u);
    const int slot = u % kc->slots, tag = h * pk->ktiles + u, dpad = pk->dpad;
    float *kt = kc->kt + (size_t)slot * a->dim * RV_FWD_BK;
    float *vp = kc->vp + (size_t)slot * RV_FWD_BK * dpad;
    if (kc->tag[slot] != tag) {
        for (int j = 0; j < RV_FWD_BK; j++)
            pack_key_row(a, h, u * RV_FWD_BK + j, kt + j, vp + (size_t)j * dpad, dpad);
        kc->tag[slot] = tag;
    }
    return (fwd_ktile){kt, vp};
}

/* Query tile i0 of head h under a causal or no mask: the key tiles up to what its
 * last row sees. Returns the key tiles computed. */
static int fwd_tile(const rv_attn_fwd_args *a, const rv_attn_tile_ops *ops,
                    const fwd_pack *pk, float scale2, int h, int i0, int bq,
                    fwd_workspace *w)
{
    fwd_tile_begin(a, scale2, pk->dpad, h, i0, bq, w);
    /* Keys beyond what the tile's last row sees are never needed. */
    int kend = rv_mask_visible(&a->mask, a->sk, i0 + bq - 1), steps = 0;
    for (int j0 = 0; j0 < kend; j0 += RV_FWD_BK, steps++) {
        int bk = kend - j0 < RV_FWD_BK ? kend - j0 : RV_FWD_BK;
        fwd_tile_step(a, ops, pack_tile(pk, a->dim, h, j0 / RV_FWD_BK), pk->dpad, i0, bq, j0,
                      bk, 0, w);
    }
    fwd_tile_end(a, pk->dpad, h, i0, bq, 0, w);
    return steps;
}

/* Query tile t of head h under a span mask: only the key tiles its box meets,
 * found by binary search (cpu_attn_span.h). Of a key tile it meets partly, only
 * the runs of sub-tiles (ks: RV_SPAN_SUB keys each) that meet are computed: where
 * a window's edge cuts a tile, most of it is out of reach. Returns the key tiles
 * computed; *boxes grows by the key tile boxes compared. */
static int fwd_tile_span(const rv_attn_fwd_args *a, const rv_attn_tile_ops *ops,
                         const fwd_pack *pk, fwd_kcache *kc, const rv_span_tiles *qt,
                         const rv_span_tiles *kt, const rv_span_tiles *ks, float scale2,
                         int h, int t, fwd_workspace *w, uint64_t *boxes)
{
    const double reach = a->mask.reach;
    const int causal = a->mask.causal, per = RV_FWD_BK / RV_SPAN_SUB;
    const int i0 = t * RV_FWD_BQ, bq = a->sq - i0 < RV_FWD_BQ ? a->sq - i0 : RV_FWD_BQ;
    const span_box *qb = &qt->box[t];
    int first, end, steps = 0;
    rv_span_candidates(kt, qb, a->mask.reach, &first, &end);
    *boxes += (uint64_t)(end - first);
    int meet = SPAN_NONE;
    for (int u = first; u < end && meet == SPAN_NONE; u++)
        meet = span_meet(qb, &kt->box[u], reach, causal);
    if (meet == SPAN_NONE && a->accumulate)
        return 0; /* the running result stays as it is */
    fwd_tile_begin(a, scale2, pk->dpad, h, i0, bq, w);
    for (int u = first; u < end; u++) {
        int how = span_meet(qb, &kt->box[u], reach, causal);
        if (how == SPAN_NONE)
            continue;
        steps++;
        const fwd_ktile tile = span_tile(a, pk, kc, h, u);
        if (how == SPAN_ALL) {
            int j0 = u * RV_FWD_BK, bk = a->sk - j0 < RV_FWD_BK ? a->sk - j0 : RV_FWD_BK;
            fwd_tile_step(a, ops, tile, pk->dpad, i0, bq, j0, bk, SPAN_ALL, w);
            continue;
        }
        const int s1 = (u + 1) * per < ks->n ? (u + 1) * per : ks->n;
        for (int s0 = u * per; s0 < s1;) {
            int sub = span_meet(qb, &ks->box[s0], reach, causal), e = s0 + 1;
            if (sub == SPAN_NONE) {
                s0++;
                continue;
            }
            int all = sub == SPAN_ALL;
            for (; e < s1 && (sub = span_meet(qb, &ks->box[e], reach, causal)) != SPAN_NONE; e++)
                all &= sub == SPAN_ALL;
            int j0 = s0 * RV_SPAN_SUB, j1 = e * RV_SPAN_SUB < a->sk ? e * RV_SPAN_SUB : a->sk;
            fwd_tile_step(a, ops, tile, pk->dpad, i0, bq, j0, j1 - j0,
                          all ? SPAN_ALL : SPAN_SOME, w);
            s0 = e;
        }
    }
    fwd_tile_end(a, pk->dpad, h, i0, bq, a->accumulate, w);
    return steps;
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
        pack_key_row(a, h, j, kt, vp, dpad);
    }
}

rv_status cpu_attn_fwd(rv_backend *be, const rv_attn_fwd_args *a)
{
    int none = 0;
    rv_status st = rv_args_attn_fwd(a, &none);
    if (st != RV_OK || none)
        return st;

    const rv_attn_tile_ops *ops;
    const rv_precision prec = cpu_is_bf16(be) ? RV_PRECISION_BF16 : RV_PRECISION_F32;
    if ((st = rv_attn_tiles_select(prec, &ops)) != RV_OK)
        return st;
    const float scale2 = rv_attn_scale(a->scale, a->dim) * RV_LOG2E;
    const int qtiles = (a->sq + RV_FWD_BQ - 1) / RV_FWD_BQ;
    const int items = qtiles * a->heads;
    const int span = a->mask.kind == RV_MASK_SPAN;
    int failed = 0;
    rv_status ret = RV_OK;
    rv_span_tiles qt = {0}, kt = {0}, ks = {0};
    int slots = 0; /* span masks: key tile slots per thread (fwd_kcache); 0: shared pack */
    int run = 1, runs = items; /* span masks: consecutive query tiles of a head per item */
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
    if (span) {
        const rv_attn_mask *m = &a->mask;
        if ((ret = rv_span_tiles_make(m->q_key, m->causal ? m->q_time : NULL, a->sq, RV_FWD_BQ,
                                      be->threads, &qt)) != RV_OK ||
            (ret = rv_span_tiles_make(m->k_key, m->causal ? m->k_time : NULL, a->sk, RV_FWD_BK,
                                      be->threads, &kt)) != RV_OK ||
            (ret = rv_span_tiles_make(m->k_key, m->causal ? m->k_time : NULL, a->sk,
                                      RV_SPAN_SUB, be->threads, &ks)) != RV_OK)
            goto end;
        /* Each thread packs the key tiles it visits when every query tile's
         * candidates fit in a few slots: no pack of every key, whose pages a long
         * sequence would fault in on every call, for the few tiles a window sees. */
        int most = 0;
        for (int t = 0; t < qtiles; t++) {
            int first, end;
            rv_span_candidates(&kt, &qt.box[t], m->reach, &first, &end);
            most = end - first > most ? end - first : most;
        }
        if (most + 1 <= RV_SPAN_SLOTS_MAX && most + 1 < pk.ktiles) {
            slots = most + 1;
            /* Items are runs of consecutive query tiles of one head (each thread
             * then finds the key tiles of the last one packed), about 4 per thread. */
            run = (items + 4 * be->threads - 1) / (4 * be->threads);
            run = run < 1 ? 1 : (run > qtiles ? qtiles : run);
            runs = a->heads * ((qtiles + run - 1) / run);
        }
    }
    if (!slots) {
        pk.kt = alloc64(keys * a->dim);
        pk.vp = alloc64(keys * pk.dpad);
        if (!pk.kt || !pk.vp) {
            ret = rv_fail(RV_ERR_NOMEM, "attn_fwd: cannot allocate packed keys (%zu keys)", keys);
            goto end;
        }
        fwd_pack_fill(a, &pk, be->threads);
    }

#pragma omp parallel num_threads(be->threads)
    {
        const size_t dpad = (size_t)round_up(a->dim, 16);
        fwd_workspace w;
        w.qp = alloc64((size_t)RV_FWD_BQ * a->dim);
        w.s = alloc64((size_t)RV_FWD_BQ * RV_FWD_BK);
        w.acc = alloc64((size_t)RV_FWD_BQ * dpad);
        w.m = alloc64(RV_FWD_BQ);
        w.l = alloc64(RV_FWD_BQ);
        w.seen = malloc(RV_FWD_BQ);
        const size_t tile_ws = ops->ws_floats ? ops->ws_floats(a->dim) : 0;
        w.tile = tile_ws ? alloc64(tile_ws) : NULL;
        fwd_kcache kc = {.slots = slots};
        if (slots) {
            kc.kt = alloc64((size_t)slots * a->dim * RV_FWD_BK);
            kc.vp = alloc64((size_t)slots * RV_FWD_BK * dpad);
            kc.tag = malloc(sizeof(int) * (size_t)slots);
            for (int x = 0; kc.tag && x < slots; x++)
                kc.tag[x] = -1;
        }
        int ok = w.qp && w.s && w.acc && w.m && w.l && w.seen && (!tile_ws || w.tile) &&
                 (!slots || (kc.kt && kc.vp && kc.tag));
        if (!ok) {
#pragma omp atomic write
            failed = 1;
        }
        uint64_t steps = 0, boxes = 0;
        /* Causal tiles late in the sequence see the most keys: hand them out first. */
#pragma omp for schedule(dynamic, 1)
        for (int it = 0; it < runs; it++) {
            if (!ok)
                continue;
            if (span) {
                /* Span masks: query tiles t0.. of head h, in order. */
                const int per_head = (qtiles + run - 1) / run, h = it / per_head;
                const int t0 = it % per_head * run, t1 = t0 + run < qtiles ? t0 + run : qtiles;
                for (int t = t0; t < t1; t++)
                    steps += fwd_tile_span(a, ops, &pk, &kc, &qt, &kt, &ks, scale2, h, t, &w,
                                           &boxes);
                continue;
            }
            int t = qtiles - 1 - it / a->heads, h = it % a->heads;
            int i0 = t * RV_FWD_BQ;
            int bq = a->sq - i0 < RV_FWD_BQ ? a->sq - i0 : RV_FWD_BQ;
            /* A tile whose last row sees no key adds nothing to a running result
             * (ring attention's diagonal blocks leave many so): skip rewriting
             * its (o, lse). */
            if (a->accumulate && rv_mask_visible(&a->mask, a->sk, i0 + bq - 1) == 0)
                continue;
            steps += fwd_tile(a, ops, &pk, scale2, h, i0, bq, &w);
        }
        rv_cpu_attn_tiles_add(0, steps, boxes);
        free(w.qp);
        free(w.s);
        free(w.acc);
        free(w.m);
        free(w.l);
        free(w.seen);
        free(w.tile);
        free(kc.kt);
        free(kc.vp);
        free(kc.tag);
    }
    if (failed)
        ret = rv_fail(RV_ERR_NOMEM, "attn_fwd: cannot allocate tile workspace");
end:
    free(pk.kt);
    free(pk.vp);
    rv_span_tiles_free(&qt);
    rv_span_tiles_free(&kt);
    rv_span_tiles_free(&ks);
    return ret;
}
