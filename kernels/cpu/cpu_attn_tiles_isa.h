/* cpu_attn_tiles_isa.h: the attention tile steps and the tiled backward, written
 * once over a set of register-blocked micro-kernels and compiled once per
 * instruction set: cpu_attn_tiles_avx512.c and cpu_attn_tiles_avx2.c each set the
 * compiler target, include their kernels and then this file, with
 *   RV_ISA_QK_TILE(qp, d, ktp, ldk, rows, cols, s, lds)      s = qp @ ktp
 *   RV_ISA_PV_TILE(p, ldp, vp, ldv, k, rows, cols, acc, lda) acc += p @ vp
 *   RV_ISA_NAME   the kernel set's name, RV_ISA_TABLE the table it defines.
 * Not a header to include anywhere else.
 *
 * The forward's steps fill an rv_attn_tile_ops table (cpu_attn_tiles.h) that
 * cpu_attention_fwd.c drives; the row operations of the online softmax run a
 * register at a time (cpu_vec_rows.h: RV_VF and RV_VI of RV_VL lanes, operations
 * RV_VOP(op)), also set by the including file.
 *
 * The backward: same work split as the BLAS version (cpu_attention_bwd.c): items
 * are (head, split), a split owns every ns-th key tile of its head and accumulates
 * that tile's dK, dV in a per-thread buffer while it walks the query tiles that see
 * it. Memory: the query side is packed once per call (four (sq, dim) copies) plus
 * one (dim, sq) dQ^T per split.
 *
 * Everything is computed transposed, key rows by query columns, so that every
 * product has a layout the two micro-kernels take without a per-tile transpose:
 *   S^T  = K (scale log2 e Q)^T       qk kernel, Q^T packed once per call, scaled
 *                                     as the forward scales it: the same scores
 *   dP^T = V dO^T                     qk kernel, dO^T packed once per call
 *   P^T  = exp2(S^T - lse2), dS^T = P^T * (dP^T - D)     a vector of query columns at a time
 *          (lse2 = lse log2 e kept as two floats, so its rounding does not
 *          shift every probability of the row)
 *   dV  += P^T dO,  dK += dS^T Q      pv kernel, dK scaled once at the end
 *   dQ^T += (scale K^T) dS^T          pv kernel into a per-split (dim, sq) buffer
 * The dQ^T buffers are summed into dq in split order at the end, so results are
 * deterministic for a given thread count. Span masks (RV_MASK_SPAN): a key tile
 * walks only the query tiles its box meets (cpu_attn_span.h), and the probabilities
 * of invisible pairs are masked to 0 where the boxes partly meet. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_attention.h"
#include "cpu_attn_span.h"
#include "cpu_attn_tiles.h"
#include "cpu_exp.h"

/* A vector of the instruction set's width at p (aligned). */
#define ISA_V(p) (*(RV_VF *)(p))
#define ISA_CV(p) (*(const RV_VF *)(p))

#define BQ RV_BWD_BQ /* query columns of a tile */
#define BK RV_BWD_BK /* key rows of a tile */
_Static_assert(BQ % 32 == 0 && BK % 8 == 0, "tile sizes the micro-kernels take");

/* Query-side tensors packed once per call, shared by all threads. */
typedef struct bwd_pack {
    float *qt;     /* (heads, qtiles, dim, BQ) queries * scale * log2 e, transposed,
                      zero past sq */
    float *dot;    /* (heads, qtiles, dim, BQ) dout transposed, zero past sq */
    float *qp;     /* (heads, sqpad, dpad) queries, zero padded */
    float *dop;    /* (heads, sqpad, dpad) dout, zero padded */
    float *lse2;   /* (heads, sqpad) lse in base 2; +inf where a row sees no key */
    float *lse2lo; /* (heads, sqpad) lse * log2 e - lse2, its rounding error */
    float *delta;  /* (heads, sqpad) D = rowsum(dO * O) */
    float *dqt;    /* (heads, ns, dpad, sqpad) each split's dQ^T */
    int qtiles, sqpad, dpad, ns;
    float scale;
} bwd_pack;

typedef struct bwd_ws {
    float *kp;  /* (BK, dim) key tile, zero rows past bk */
    float *vp;  /* (BK, dim) value tile, zero rows past bk */
    float *kt;  /* (dpad, BK) key tile transposed times scale, zero padded */
    float *st;  /* (BK, BQ) S^T, then P^T */
    float *dpt; /* (BK, BQ) dP^T, then dS^T */
    float *dk;  /* (BK, dpad) unscaled dK of the key tile */
    float *dv;  /* (BK, dpad) dV of the key tile */
} bwd_ws;

static inline int round_up(int x, int m)
{
    return (x + m - 1) / m * m;
}

static void *alloc64(size_t floats)
{
    return aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64);
}

/* Span mask of key row j (chunk-local) against the query columns i0..i0+bq-1:
 * vis[c] = -1 where query i0 + c sees the key, else 0 (and 0 on to BQ). The rule
 * of span_sees (attn_span.h), written as loops GCC vectorizes. */
static void span_cols(const rv_attn_mask *m, int64_t j, int i0, int bq, int32_t *vis)
{
    const double kk = m->k_key[j], r = m->reach, *qk = m->q_key + i0;
    int c = 0;
    if (!m->causal) {
        for (; c < bq; c++)
            vis[c] = -(int32_t)(fabs(qk[c] - kk) <= r);
    } else {
        const double kt = m->k_time[j], *qt = m->q_time + i0;
        const int64_t first = m->k_start + j - m->q_start - i0; /* columns no earlier */
        for (; c < bq; c++)
            vis[c] = -(int32_t)((fabs(qk[c] - kk) <= r) &
                                ((kt < qt[c]) | ((kt == qt[c]) & (c >= first))));
    }
    for (; c < BQ; c++)
        vis[c] = 0;
}

/* P^T and dS^T of one (key tile, query tile) pair, in place of S^T and dP^T. Key
 * row j sees the query columns [lo_j, bq) (causal or no mask; span = 0), all of
 * them (SPAN_ALL) or those of its span mask (SPAN_SOME); every other entry becomes
 * exactly 0. */
static void bwd_probs(const rv_attn_bwd_args *a, int j0, int bk, int bkp, int i0, int bq,
                      int span, const float *lse2, const float *lse2lo, const float *delta,
                      float *st, float *dpt)
{
    const RV_VF ninf = RV_VOP(splat)(-INFINITY);
    RV_VI iota;
    for (int l = 0; l < RV_VL; l++)
        iota[l] = l;
    const int cols = round_up(bq, RV_VL);
    int32_t vis[BQ] __attribute__((aligned(64)));
    for (int j = 0; j < bkp; j++) {
        float *s = st + (size_t)j * BQ, *ds = dpt + (size_t)j * BQ;
        int64_t lo = 0;
        if (a->mask.kind == RV_MASK_CAUSAL)
            lo = (int64_t)j0 + j + a->mask.k_start - a->mask.q_start - i0;
        lo = lo < 0 ? 0 : lo;
        if (j >= bk || lo >= bq) {
            for (int c = 0; c < BQ; c += RV_VL)
                ISA_V(s + c) = ISA_V(ds + c) = (RV_VF){0};
            continue;
        }
        if (span == SPAN_SOME)
            span_cols(&a->mask, (int64_t)j0 + j, i0, bq, vis);
        const RV_VI vlo = (RV_VI){0} + (int32_t)lo, vhi = (RV_VI){0} + bq;
        int c = 0;
        for (; c < cols; c += RV_VL) {
            RV_VI idx = iota + c;
            RV_VI live = (idx >= vlo) & (idx < vhi);
            if (span == SPAN_SOME)
                live &= *(const RV_VI *)(vis + c);
            RV_VF t = (ISA_CV(s + c) - ISA_CV(lse2 + c)) - ISA_CV(lse2lo + c);
            t = RV_VOP(select)(live, t, ninf);
            RV_VF p = RV_VOP(exp2)(t);
            ISA_V(s + c) = p;
            ISA_V(ds + c) = p * (ISA_CV(ds + c) - ISA_CV(delta + c));
        }
        for (; c < BQ; c += RV_VL)
            ISA_V(s + c) = ISA_V(ds + c) = (RV_VF){0};
    }
}

/* One (key tile, query tile t) pair into the key tile's dK, dV and split s's dQ^T.
 * span: 0 (causal or no mask), SPAN_ALL or SPAN_SOME. */
static void bwd_pair(const rv_attn_bwd_args *a, const bwd_pack *pk, int h, int s, int j0,
                     int bk, int t, int span, bwd_ws *w)
{
    const int d = a->dim, dpad = pk->dpad, bkp = round_up(bk, 8);
    float *dqt = pk->dqt + ((size_t)h * pk->ns + s) * dpad * pk->sqpad;
    const int i0 = t * BQ, bq = a->sq - i0 < BQ ? a->sq - i0 : BQ;
    const size_t tile = ((size_t)h * pk->qtiles + t) * d * BQ;
    const size_t row = (size_t)h * pk->sqpad + i0;
    const int cols = round_up(bq, 32);
    RV_ISA_QK_TILE(w->kp, d, pk->qt + tile, BQ, bkp, cols, w->st, BQ);
    RV_ISA_QK_TILE(w->vp, d, pk->dot + tile, BQ, bkp, cols, w->dpt, BQ);
    bwd_probs(a, j0, bk, bkp, i0, bq, span, pk->lse2 + row, pk->lse2lo + row,
              pk->delta + row, w->st, w->dpt);
    RV_ISA_PV_TILE(w->st, BQ, pk->dop + row * dpad, dpad, bq, bkp, dpad, w->dv, dpad);
    RV_ISA_PV_TILE(w->dpt, BQ, pk->qp + row * dpad, dpad, bq, bkp, dpad, w->dk, dpad);
    /* dQ^T (dpad, bq) += (scale K^T) (dpad, bk) @ dS^T (bk, bq) */
    RV_ISA_PV_TILE(w->kt, BK, w->dpt, BQ, bk, dpad, round_up(bq, 16), dqt + i0, pk->sqpad);
}

/* Key tile j0 of head h against every query tile that sees it (split s); its dK,
 * dV are written (or added) at the end. Returns the query tiles computed; *boxes
 * grows by the query tile boxes compared. */
static int bwd_key_tile(const rv_attn_bwd_args *a, const bwd_pack *pk,
                        const rv_span_tiles *qtl, const rv_span_tiles *ktl, int h, int s,
                        int j0, int bk, bwd_ws *w, uint64_t *boxes)
{
    const int d = a->dim, dpad = pk->dpad;
    int steps = 0;
    for (int j = 0; j < BK; j++) {
        float *kp = w->kp + (size_t)j * d, *vp = w->vp + (size_t)j * d;
        if (j >= bk) {
            memset(kp, 0, sizeof(float) * (size_t)d);
            memset(vp, 0, sizeof(float) * (size_t)d);
            for (int c = 0; c < dpad; c++)
                w->kt[(size_t)c * BK + j] = 0.0f;
            continue;
        }
        const float *k = a->k + ((size_t)(j0 + j) * a->heads + h) * d;
        const float *v = a->v + ((size_t)(j0 + j) * a->heads + h) * d;
        for (int c = 0; c < d; c++) {
            kp[c] = k[c];
            w->kt[(size_t)c * BK + j] = k[c] * pk->scale;
        }
        for (int c = d; c < dpad; c++)
            w->kt[(size_t)c * BK + j] = 0.0f;
        memcpy(vp, v, sizeof(float) * (size_t)d);
    }
    memset(w->dk, 0, sizeof(float) * (size_t)BK * dpad);
    memset(w->dv, 0, sizeof(float) * (size_t)BK * dpad);

    if (qtl) {
        /* Span mask: the query tiles the key tile's box meets (cpu_attn_span.h). */
        const span_box *kb = &ktl->box[j0 / BK];
        int first, end;
        rv_span_candidates(qtl, kb, a->mask.reach, &first, &end);
        *boxes += (uint64_t)(end - first);
        for (int t = first; t < end; t++) {
            int how = span_meet(&qtl->box[t], kb, a->mask.reach, a->mask.causal);
            if (how == SPAN_NONE)
                continue;
            bwd_pair(a, pk, h, s, j0, bk, t, how, w);
            steps++;
        }
    } else {
        /* First query row that sees key j0 under a causal mask. */
        int i_first = 0;
        if (a->mask.kind == RV_MASK_CAUSAL) {
            int64_t f = a->mask.k_start + j0 - a->mask.q_start;
            i_first = f < 0 ? 0 : (f > a->sq ? a->sq : (int)f);
        }
        for (int t = i_first / BQ; t < pk->qtiles; t++, steps++)
            bwd_pair(a, pk, h, s, j0, bk, t, 0, w);
    }

    for (int j = 0; j < bk; j++) {
        float *dk = a->dk + ((size_t)(j0 + j) * a->heads + h) * d;
        float *dv = a->dv + ((size_t)(j0 + j) * a->heads + h) * d;
        const float *sk = w->dk + (size_t)j * dpad, *sv = w->dv + (size_t)j * dpad;
        if (a->accumulate) {
            for (int c = 0; c < d; c++) {
                dk[c] += sk[c] * pk->scale;
                dv[c] += sv[c];
            }
        } else {
            for (int c = 0; c < d; c++)
                dk[c] = sk[c] * pk->scale;
            memcpy(dv, sv, sizeof(float) * (size_t)d);
        }
    }
    return steps;
}

/* Packs the query-side tensors; (head, row) pairs are spread over the threads. */
static void bwd_pack_fill(const rv_attn_bwd_args *a, bwd_pack *pk, int threads)
{
    const int d = a->dim, dpad = pk->dpad;
    const long rows = (long)a->heads * pk->sqpad;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long r = 0; r < rows; r++) {
        int h = (int)(r / pk->sqpad), i = (int)(r % pk->sqpad);
        float *qp = pk->qp + (size_t)r * dpad, *dop = pk->dop + (size_t)r * dpad;
        memset(qp, 0, sizeof(float) * (size_t)dpad);
        memset(dop, 0, sizeof(float) * (size_t)dpad);
        pk->lse2[r] = INFINITY;
        pk->lse2lo[r] = 0.0f;
        pk->delta[r] = 0.0f;
        float *qt = pk->qt + ((size_t)h * pk->qtiles + i / BQ) * d * BQ + i % BQ;
        float *dot = pk->dot + ((size_t)h * pk->qtiles + i / BQ) * d * BQ + i % BQ;
        if (i >= a->sq) {
            for (int c = 0; c < d; c++)
                qt[(size_t)c * BQ] = dot[(size_t)c * BQ] = 0.0f;
            continue;
        }
        const size_t src = ((size_t)i * a->heads + h) * d;
        const float *q = a->q + src, *dout = a->dout + src, *o = a->o + src;
        const float scale2 = pk->scale * RV_LOG2E;
        double dsum = 0.0; /* D feeds every dS of the row: summed in double */
        for (int c = 0; c < d; c++) {
            qt[(size_t)c * BQ] = q[c] * scale2;
            qp[c] = q[c];
            dot[(size_t)c * BQ] = dop[c] = dout[c];
            dsum += (double)o[c] * dout[c];
        }
        float l = a->lse[(size_t)h * a->sq + i];
        if (l != -INFINITY) {
            double l2 = (double)l * 1.4426950408889634;
            pk->lse2[r] = (float)l2;
            pk->lse2lo[r] = (float)(l2 - (float)l2);
        }
        pk->delta[r] = (float)dsum;
    }
}

/* dq (+)= the sum over splits of dQ^T, transposed block by block. */
static void bwd_dq_reduce(const rv_attn_bwd_args *a, const bwd_pack *pk, int threads)
{
    const int d = a->dim, ld = a->heads * d;
    const long items = (long)a->heads * pk->qtiles;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long it = 0; it < items; it++) {
        int h = (int)(it / pk->qtiles), i0 = (int)(it % pk->qtiles) * BQ;
        int bq = a->sq - i0 < BQ ? a->sq - i0 : BQ;
        float *dq = a->dq + (size_t)i0 * ld + (size_t)h * d;
        if (!a->accumulate)
            for (int i = 0; i < bq; i++)
                memset(dq + (size_t)i * ld, 0, sizeof(float) * (size_t)d);
        for (int s = 0; s < pk->ns; s++) {
            const float *src = pk->dqt + ((size_t)h * pk->ns + s) * pk->dpad * pk->sqpad + i0;
            for (int c = 0; c < d; c++)
                for (int i = 0; i < bq; i++)
                    dq[(size_t)i * ld + c] += src[(size_t)c * pk->sqpad + i];
        }
    }
}

static rv_status isa_bwd(rv_backend *be, const rv_attn_bwd_args *a,
                         const rv_span_tiles *qtl, const rv_span_tiles *ktl)
{
    const int d = a->dim, ktiles = (a->sk + BK - 1) / BK;
    bwd_pack pk = {.qtiles = (a->sq + BQ - 1) / BQ, .dpad = round_up(d, 16)};
    pk.sqpad = pk.qtiles * BQ;
    pk.scale = rv_attn_scale(a->scale, d);
    pk.ns = (be->threads + a->heads - 1) / a->heads;
    if (pk.ns > ktiles)
        pk.ns = ktiles;
    const size_t nrows = (size_t)a->heads * pk.sqpad;
    const size_t ndqt = nrows * pk.ns * pk.dpad;
    rv_status ret = RV_OK;
    pk.qt = alloc64(nrows * d);
    pk.dot = alloc64(nrows * d);
    pk.qp = alloc64(nrows * pk.dpad);
    pk.dop = alloc64(nrows * pk.dpad);
    pk.lse2 = alloc64(nrows);
    pk.lse2lo = alloc64(nrows);
    pk.delta = alloc64(nrows);
    pk.dqt = alloc64(ndqt);
    if (!pk.qt || !pk.dot || !pk.qp || !pk.dop || !pk.lse2 || !pk.lse2lo || !pk.delta || !pk.dqt) {
        ret = rv_fail(RV_ERR_NOMEM, "attn_bwd: cannot allocate packed queries (%zu rows)",
                      nrows);
        goto end;
    }
    memset(pk.dqt, 0, sizeof(float) * ndqt);
    bwd_pack_fill(a, &pk, be->threads);

    const int items = a->heads * pk.ns;
    int failed = 0;
#pragma omp parallel num_threads(be->threads)
    {
        bwd_ws w;
        w.kp = alloc64((size_t)BK * d);
        w.vp = alloc64((size_t)BK * d);
        w.kt = alloc64((size_t)pk.dpad * BK);
        w.st = alloc64((size_t)BK * BQ);
        w.dpt = alloc64((size_t)BK * BQ);
        w.dk = alloc64((size_t)BK * pk.dpad);
        w.dv = alloc64((size_t)BK * pk.dpad);
        int ok = w.kp && w.vp && w.kt && w.st && w.dpt && w.dk && w.dv;
        uint64_t steps = 0, boxes = 0;
        if (!ok) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int it = 0; it < items; it++) {
            if (!ok)
                continue;
            int h = it / pk.ns, s = it % pk.ns;
            for (int t = s; t < ktiles; t += pk.ns) {
                int j0 = t * BK, bk = a->sk - j0 < BK ? a->sk - j0 : BK;
                steps += bwd_key_tile(a, &pk, qtl, ktl, h, s, j0, bk, &w, &boxes);
            }
        }
        rv_cpu_attn_tiles_add(1, steps, boxes);
        free(w.kp);
        free(w.vp);
        free(w.kt);
        free(w.st);
        free(w.dpt);
        free(w.dk);
        free(w.dv);
    }
    if (failed) {
        ret = rv_fail(RV_ERR_NOMEM, "attn_bwd: cannot allocate tile workspace");
        goto end;
    }
    bwd_dq_reduce(a, &pk, be->threads);
end:
    free(pk.qt);
    free(pk.dot);
    free(pk.qp);
    free(pk.dop);
    free(pk.lse2);
    free(pk.lse2lo);
    free(pk.delta);
    free(pk.dqt);
    return ret;
}

/* ---- the forward's tile steps ---------------------------------------------------- */

static void isa_qk(const float *qp, int d, const float *ktp, int ldk, int rows, int cols,
                   float *s, int lds, float *ws)
{
    (void)ws;
    RV_ISA_QK_TILE(qp, d, ktp, ldk, rows, cols, s, lds);
}

/* Online-softmax update of one query row with its scores s[0..n) (n visible
 * keys of this tile; the rest of the row up to bk becomes 0). The row is 64-byte
 * aligned and writable up to bk rounded up to 16. Returns the factor the row's
 * accumulator must be multiplied by before P @ V is added. */
static float isa_softmax_row(float *s, int n, int bk, float *m, float *l)
{
    const RV_VF ninf = RV_VOP(splat)(-INFINITY);
    RV_VF vmx = ninf;
    for (int j = 0; j < n; j += RV_VL) {
        RV_VF x = ISA_CV(s + j);
        if (n - j < RV_VL)
            x = RV_VOP(select)(RV_VOP(lanes_below)(n - j), x, ninf);
        vmx = RV_VOP(max)(vmx, x);
    }
    float mx = RV_VOP(hmax)(vmx);
    float m_new = mx > *m ? mx : *m;
    if (m_new == -INFINITY) { /* nothing seen yet in this row */
        for (int j = 0; j < bk; j += RV_VL)
            ISA_V(s + j) = (RV_VF){0};
        return 1.0f;
    }
    const RV_VF vm = RV_VOP(splat)(m_new);
    RV_VF vsum = {0};
    int j = 0;
    for (; j < n; j += RV_VL) {
        RV_VF t = ISA_CV(s + j) - vm;
        if (n - j < RV_VL)
            t = RV_VOP(select)(RV_VOP(lanes_below)(n - j), t, ninf);
        RV_VF p = RV_VOP(exp2_nonpos)(t); /* t <= 0: s <= m_new, or NaN */
        ISA_V(s + j) = p;
        vsum += p;
    }
    for (; j < bk; j += RV_VL)
        ISA_V(s + j) = (RV_VF){0};
    float corr = rv_exp2_nonpos(*m - m_new);
    *l = *l * corr + RV_VOP(hsum)(vsum);
    *m = m_new;
    return corr;
}

static void isa_pv(const float *s, int lds, const float *vp, int ldv, int bk, int rows,
                   float *acc, float *ws)
{
    (void)ws;
    RV_ISA_PV_TILE(s, lds, vp, ldv, bk, rows, ldv, acc, ldv);
}

const rv_attn_tile_ops RV_ISA_TABLE = {
    .name = RV_ISA_NAME,
    .ws_floats = NULL,
    .qk = isa_qk,
    .softmax_row = isa_softmax_row,
    .pv = isa_pv,
    .bwd = isa_bwd,
};
