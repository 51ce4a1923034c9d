/* test_attention_span.c: span masks (RV_MASK_SPAN) of the CPU attention block
 * against naive double-precision masked attention (ref_attention.c, the pair rule
 * written plainly).
 *
 * Token times are laid out as a sequence makes them: 2 s interleaving windows,
 * each holding its video tokens in time order (4 frames of 0.5 s; the tokens of a
 * frame start together), then its audio tokens in time order (random start times:
 * no two alike). Masks: sliding windows (key = start time, reach = W/2, W = 0 makes
 * audio rows see only themselves), blocks (key = floor(t / B), reach 0) and frames
 * (key = floor(t / 0.5 s)), each with and without causal, on query and key chunks
 * that are different slices of one sequence (global offsets q_start, k_start, as
 * context-parallel attention calls them); accumulate mode over several key chunks
 * against one call over all keys; rows that see nothing; NaN keys; the argument
 * checks; and that tile skipping is real: the kernels' tile-pair counters against
 * the tiles that hold a visible pair, for 20 000 tokens and a 2 s window. Every
 * kernel set this CPU runs (AVX-512, AVX2, BLAS tiles) is checked too. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_attention.h" /* RV_FWD_BQ, ..., the tile sizes */
#include "cpu/cpu_attn_span.h" /* rv_cpu_attn_tile_counts */
#include "kernel_paths.h"
#include "ref_attention.h"
#include "ref_ops.h"
#include "rv_backend.h"

/* Tolerances, on normalised errors (rv_rel_err; gradients floored at a tenth of
 * the largest reference gradient, grad_err), every kernel set against the double
 * reference and chunked calls against one call; the sizes of test_attention.c,
 * whose error analysis holds here (f32, epsilon 1.2e-7, sums over at most a few
 * thousand visible keys per row, so sqrt(sk) * eps stays under 1e-5; the backward's
 * recomputed P and sums over rows cost ten times that). */
#define TOL_FWD 1e-5
#define TOL_BWD 1e-4

/* ---- a synthetic sequence (times: ref_span_times) -------------------------------- */

typedef enum { M_WINDOW, M_BLOCK, M_FRAME } mask_type;

typedef struct span_spec {
    mask_type type;
    double size; /* window W or block B in seconds (frames: 0.5 s) */
    int causal;
} span_spec;

/* Keys of every token of the sequence for spec s, and the reach. */
static double *seq_keys(const double *t, int n, span_spec s, double *reach)
{
    double *k = ref_alloc_d((size_t)n);
    double b = s.type == M_FRAME ? 0.5 : s.size;
    for (int i = 0; i < n; i++)
        k[i] = s.type == M_WINDOW ? t[i] : floor(t[i] / b);
    *reach = s.type == M_WINDOW ? s.size / 2 : 0.0;
    return k;
}

/* The mask of queries [q0, q0 + sq) and keys [k0, k0 + sk) of the sequence. */
static rv_attn_mask slice_mask(const double *key, const double *t, double reach, int causal,
                               int q0, int k0)
{
    return (rv_attn_mask){.kind = RV_MASK_SPAN, .q_start = q0, .k_start = k0,
                          .q_key = key + q0, .k_key = key + k0, .q_time = t + q0,
                          .k_time = t + k0, .reach = reach, .causal = causal};
}

static const char *spec_name(span_spec s, char *buf, size_t len)
{
    static const char *names[] = {"window", "block", "frame"};
    snprintf(buf, len, "%s %g s%s", names[s.type], s.size, s.causal ? " causal" : "");
    return buf;
}

/* ---- tensors of one sequence ---------------------------------------------------- */

typedef struct seq_data {
    int n, heads, dim;
    float *q, *k, *v, *dout; /* (n, heads, dim) */
    double *qd, *kd, *vd, *doutd;
} seq_data;

static seq_data seq_make(uint64_t seed, int n, int heads, int dim)
{
    seq_data s = {n, heads, dim, 0, 0, 0, 0, 0, 0, 0, 0};
    ref_rng r = ref_rng_make(seed);
    size_t m = (size_t)n * heads * dim;
    s.q = ref_alloc_f(m), s.k = ref_alloc_f(m), s.v = ref_alloc_f(m), s.dout = ref_alloc_f(m);
    ref_fill_normal(&r, s.q, m, 0.0f, 1.5f); /* peaked softmax, as test_attention.c */
    ref_fill_normal(&r, s.k, m, 0.0f, 1.5f);
    ref_fill_uniform(&r, s.v, m, -1.0f, 1.0f);
    ref_fill_uniform(&r, s.dout, m, -1.0f, 1.0f);
    s.qd = ref_dup_d(s.q, m), s.kd = ref_dup_d(s.k, m), s.vd = ref_dup_d(s.v, m);
    s.doutd = ref_dup_d(s.dout, m);
    return s;
}

static void seq_free(seq_data *s)
{
    free(s->q), free(s->k), free(s->v), free(s->dout);
    free(s->qd), free(s->kd), free(s->vd), free(s->doutd);
}

static size_t row_off(const seq_data *s, int row)
{
    return (size_t)row * s->heads * s->dim;
}

static rv_backend *cpu(int threads)
{
    rv_backend *be = NULL;
    cr_assert_eq(rv_backend_cpu_create(threads, &be), RV_OK);
    return be;
}

/* Normalised gradient error with a floor of a tenth of the largest reference
 * gradient of the loss (gscale), as test_attention.c: where a row sees one key
 * only, dQ and dK are zero up to f32 cancellation noise. */
static double grad_err(const float *got, const double *want, size_t n, double gscale)
{
    double mx = 0, err = 0;
    for (size_t i = 0; i < n; i++) {
        mx = fabs(want[i]) > mx ? fabs(want[i]) : mx;
        double e = fabs(got[i] - want[i]);
        err = e > err || isnan(e) ? e : err;
    }
    double floor = 0.1 * gscale;
    return err / (mx > floor ? mx : (floor > 0 ? floor : 1e-30));
}

static double max_abs(const double *x, size_t n, double m)
{
    for (size_t i = 0; i < n; i++)
        m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* Forward and backward of queries [q0, q0 + sq) against keys [k0, k0 + sk) under
 * mask m (chunk-local arrays), against the double reference. */
static void check_slices(rv_backend *be, const seq_data *s, int q0, int sq, int k0, int sk,
                         rv_attn_mask m, const char *what)
{
    const int H = s->heads, d = s->dim;
    const size_t nq = (size_t)sq * H * d, nk = (size_t)sk * H * d, nl = (size_t)H * sq;
    const float *q = s->q + row_off(s, q0), *k = s->k + row_off(s, k0);
    const float *v = s->v + row_off(s, k0), *dout = s->dout + row_off(s, q0);
    double *o_ref = ref_alloc_d(nq), *lse_ref = ref_alloc_d(nl);
    ref_attn_fwd(s->qd + row_off(s, q0), s->kd + row_off(s, k0), s->vd + row_off(s, k0), sq,
                 sk, H, d, 0, m, o_ref, lse_ref);
    float *o = ref_alloc_f(nq), *lse = ref_alloc_f(nl);
    for (size_t i = 0; i < nq; i++)
        o[i] = NAN; /* overwritten, rows that see nothing included */
    rv_attn_fwd_args a = {.q = q, .k = k, .v = v, .o = o, .lse = lse, .sq = sq, .sk = sk,
                          .heads = H, .dim = d, .scale = 0.0f, .mask = m, .accumulate = 0};
    cr_assert_eq(be->attn_fwd(be, &a), RV_OK, "%s: attn_fwd: %s", what, rv_last_error());
    double eo = rv_rel_err(o, o_ref, nq), el = rv_rel_err(lse, lse_ref, nl);
    cr_expect_leq(eo, TOL_FWD, "%s: O rel err %.3g", what, eo);
    cr_expect_leq(el, TOL_FWD, "%s: LSE rel err %.3g", what, el);
    size_t empty = 0, wrong = 0;
    for (size_t r = 0; r < nl; r++) {
        if (lse_ref[r] != -INFINITY)
            continue;
        empty++;
        const float *row = o + ((r % sq) * H + r / sq) * d;
        int zero = 1;
        for (int c = 0; c < d; c++)
            zero &= row[c] == 0.0f;
        wrong += !(lse[r] == -INFINITY && zero);
    }
    cr_expect_eq(wrong, 0, "%s: %zu of %zu rows that see no key are not o = 0, lse = -inf",
                 what, wrong, empty);

    double *dq_ref = ref_alloc_d(nq), *dk_ref = ref_alloc_d(nk), *dv_ref = ref_alloc_d(nk);
    ref_attn_bwd(s->qd + row_off(s, q0), s->kd + row_off(s, k0), s->vd + row_off(s, k0),
                 s->doutd + row_off(s, q0), sq, sk, H, d, 0, m, dq_ref, dk_ref, dv_ref);
    float *dq = ref_alloc_f(nq), *dk = ref_alloc_f(nk), *dv = ref_alloc_f(nk);
    for (size_t i = 0; i < nq; i++)
        dq[i] = 1e3f; /* garbage that accumulate = 0 must overwrite */
    for (size_t i = 0; i < nk; i++)
        dk[i] = dv[i] = -1e3f;
    rv_attn_bwd_args b = {.q = q, .k = k, .v = v, .o = o, .lse = lse, .dout = dout, .dq = dq,
                          .dk = dk, .dv = dv, .sq = sq, .sk = sk, .heads = H, .dim = d,
                          .scale = 0.0f, .mask = m, .accumulate = 0};
    cr_assert_eq(be->attn_bwd(be, &b), RV_OK, "%s: attn_bwd: %s", what, rv_last_error());
    double g = max_abs(dv_ref, nk, max_abs(dk_ref, nk, max_abs(dq_ref, nq, 0)));
    double e1 = grad_err(dq, dq_ref, nq, g), e2 = grad_err(dk, dk_ref, nk, g),
           e3 = grad_err(dv, dv_ref, nk, g);
    cr_expect_leq(e1, TOL_BWD, "%s: dQ rel err %.3g", what, e1);
    cr_expect_leq(e2, TOL_BWD, "%s: dK rel err %.3g", what, e2);
    cr_expect_leq(e3, TOL_BWD, "%s: dV rel err %.3g", what, e3);
    free(dq), free(dk), free(dv), free(dq_ref), free(dk_ref), free(dv_ref);
    free(o), free(lse), free(o_ref), free(lse_ref);
}

/* The masks of the grid: windows (W = 0: audio rows see only themselves; a 1 s
 * window; one of 4 s reaching across windows), blocks of 1 s and 3 s, frames. */
static const span_spec specs[] = {
    {M_WINDOW, 0.0, 0}, {M_WINDOW, 1.0, 0}, {M_WINDOW, 4.0, 0}, {M_BLOCK, 1.0, 0},
    {M_BLOCK, 3.0, 0},  {M_FRAME, 0.5, 0},
};
#define NSPECS (int)(sizeof specs / sizeof specs[0])

/* Query and key slices of a 1000-token sequence: the whole of it; overlapping
 * chunks; queries after their keys (causal: every key earlier, most out of reach);
 * queries before their keys (causal: nothing seen at all). */
static const struct {
    int q0, sq, k0, sk;
} slices[] = {{0, 1000, 0, 1000}, {250, 450, 500, 500}, {700, 300, 0, 520}, {0, 300, 600, 400}};
#define NSLICES (int)(sizeof slices / sizeof slices[0])

static void grid(int threads, int dim, int heads, uint64_t seed)
{
    rv_backend *be = cpu(threads);
    const int n = 1000;
    double *t = ref_span_times(seed, n, 100.0);
    seq_data s = seq_make(seed + 1, n, heads, dim);
    for (int si = 0; si < NSPECS; si++)
        for (int causal = 0; causal < 2; causal++) {
            span_spec sp = specs[si];
            sp.causal = causal;
            double reach;
            double *key = seq_keys(t, n, sp, &reach);
            for (int li = 0; li < NSLICES; li++) {
                char name[64], what[160];
                snprintf(what, sizeof what, "%s, q [%d, +%d) k [%d, +%d), d=%d H=%d T=%d",
                         spec_name(sp, name, sizeof name), slices[li].q0, slices[li].sq,
                         slices[li].k0, slices[li].sk, dim, heads, threads);
                rv_attn_mask m = slice_mask(key, t, reach, causal, slices[li].q0, slices[li].k0);
                check_slices(be, &s, slices[li].q0, slices[li].sq, slices[li].k0, slices[li].sk,
                             m, what);
            }
            free(key);
        }
    seq_free(&s);
    free(t);
    rv_backend_free(&be);
}

Test(attention_span, masks_forward_and_backward)
{
    grid(2, 64, 2, 10);
}

Test(attention_span, masks_forward_and_backward_odd_dim)
{
    grid(1, 48, 1, 20);
}

/* Every kernel set wherever this CPU runs it (kernel_paths.h; the tests above run
 * the set in use), at head dim 40, one head. */
Test(attention_span, avx512_tile_path)
{
    if (kernel_path_force("avx512"))
        grid(2, 40, 1, 30);
}

Test(attention_span, avx2_tile_path)
{
    if (kernel_path_force("avx2"))
        grid(2, 40, 1, 30);
}

Test(attention_span, blas_tile_path)
{
    if (kernel_path_force("blas"))
        grid(2, 40, 1, 30);
}

/* ---- accumulate over key chunks ------------------------------------------------- */

/* Whether query row i (chunk-local) sees any of keys [0, sk) under m. */
static int row_sees_any(const rv_attn_mask *m, int i, int sk)
{
    for (int j = 0; j < sk; j++) {
        if (!(fabs(m->q_key[i] - m->k_key[j]) <= m->reach))
            continue;
        if (!m->causal || m->k_time[j] < m->q_time[i] ||
            (m->k_time[j] == m->q_time[i] && m->k_start + j <= m->q_start + i))
            return 1;
    }
    return 0;
}

/* The keys of a sequence in 5 chunks (one empty), folded into (o, lse) one chunk at
 * a time with accumulate = 1, equal the reference over all keys; rows that see
 * nothing in a chunk keep their running (o, lse) bit for bit. The chunked backward
 * with accumulate = 1 equals the reference's gradients. */
static void accumulate_case(int threads, span_spec sp, uint64_t seed)
{
    rv_backend *be = cpu(threads);
    const int n = 900, H = 2, d = 32, q0 = 200, sq = 500;
    const int cuts[] = {0, 140, 140, 455, 610, 900}; /* chunk c: [cuts[c], cuts[c + 1]) */
    const int nch = 5;
    double *t = ref_span_times(seed, n, 90.0), reach;
    double *key = seq_keys(t, n, sp, &reach);
    seq_data s = seq_make(seed + 1, n, H, d);
    const size_t nq = (size_t)sq * H * d, nl = (size_t)H * sq, nkall = (size_t)n * H * d;
    const float *q = s.q + row_off(&s, q0), *dout = s.dout + row_off(&s, q0);
    char name[64];
    spec_name(sp, name, sizeof name);

    float *o = ref_alloc_f(nq), *lse = ref_alloc_f(nl);
    float *o_prev = ref_alloc_f(nq), *lse_prev = ref_alloc_f(nl);
    for (int c = 0; c < nch; c++) {
        int k0 = cuts[c], sk = cuts[c + 1] - cuts[c];
        rv_attn_mask m = slice_mask(key, t, reach, sp.causal, q0, k0);
        memcpy(o_prev, o, sizeof(float) * nq);
        memcpy(lse_prev, lse, sizeof(float) * nl);
        rv_attn_fwd_args a = {.q = q, .k = s.k + row_off(&s, k0), .v = s.v + row_off(&s, k0),
                              .o = o, .lse = lse, .sq = sq, .sk = sk, .heads = H, .dim = d,
                              .scale = 0.0f, .mask = m, .accumulate = c > 0};
        cr_assert_eq(be->attn_fwd(be, &a), RV_OK, "%s chunk %d: %s", name, c, rv_last_error());
        if (c == 0)
            continue;
        size_t kept = 0, moved = 0;
        for (int i = 0; i < sq; i++) {
            if (row_sees_any(&m, i, sk))
                continue;
            for (int h = 0; h < H; h++) {
                size_t r = (size_t)h * sq + i, x = ((size_t)i * H + h) * d;
                int same = memcmp(&lse[r], &lse_prev[r], sizeof(float)) == 0 &&
                           memcmp(o + x, o_prev + x, sizeof(float) * d) == 0;
                kept += same;
                moved += !same;
            }
        }
        cr_expect_eq(moved, 0, "%s chunk %d: %zu of %zu unseeing rows changed (o, lse)", name, c,
                     moved, kept + moved);
    }
    rv_attn_mask mall = slice_mask(key, t, reach, sp.causal, q0, 0);
    double *o_ref = ref_alloc_d(nq), *lse_ref = ref_alloc_d(nl);
    ref_attn_fwd(s.qd + row_off(&s, q0), s.kd, s.vd, sq, n, H, d, 0, mall, o_ref, lse_ref);
    double eo = rv_rel_err(o, o_ref, nq), el = rv_rel_err(lse, lse_ref, nl);
    cr_expect_leq(eo, TOL_FWD, "%s: accumulated O rel err %.3g", name, eo);
    cr_expect_leq(el, TOL_FWD, "%s: accumulated LSE rel err %.3g", name, el);

    /* One call over all keys gives the same. */
    float *o1 = ref_alloc_f(nq), *lse1 = ref_alloc_f(nl);
    rv_attn_fwd_args a1 = {.q = q, .k = s.k, .v = s.v, .o = o1, .lse = lse1, .sq = sq, .sk = n,
                           .heads = H, .dim = d, .scale = 0.0f, .mask = mall, .accumulate = 0};
    cr_assert_eq(be->attn_fwd(be, &a1), RV_OK);
    eo = rv_rel_err(o1, o_ref, nq);
    cr_expect_leq(eo, TOL_FWD, "%s: one call O rel err %.3g", name, eo);

    float *dq = ref_alloc_f(nq), *dk = ref_alloc_f(nkall), *dv = ref_alloc_f(nkall);
    for (int c = 0; c < nch; c++) {
        int k0 = cuts[c], sk = cuts[c + 1] - cuts[c];
        rv_attn_mask m = slice_mask(key, t, reach, sp.causal, q0, k0);
        size_t off = row_off(&s, k0);
        rv_attn_bwd_args b = {.q = q, .k = s.k + off, .v = s.v + off, .o = o, .lse = lse,
                              .dout = dout, .dq = dq, .dk = dk + off, .dv = dv + off, .sq = sq,
                              .sk = sk, .heads = H, .dim = d, .scale = 0.0f, .mask = m,
                              .accumulate = 1};
        cr_assert_eq(be->attn_bwd(be, &b), RV_OK, "%s chunk %d: %s", name, c, rv_last_error());
    }
    double *dqr = ref_alloc_d(nq), *dkr = ref_alloc_d(nkall), *dvr = ref_alloc_d(nkall);
    ref_attn_bwd(s.qd + row_off(&s, q0), s.kd, s.vd, s.doutd + row_off(&s, q0), sq, n, H, d, 0,
                 mall, dqr, dkr, dvr);
    double g = max_abs(dvr, nkall, max_abs(dkr, nkall, max_abs(dqr, nq, 0)));
    double e1 = grad_err(dq, dqr, nq, g), e2 = grad_err(dk, dkr, nkall, g),
           e3 = grad_err(dv, dvr, nkall, g);
    cr_expect_leq(e1, TOL_BWD, "%s: chunked dQ rel err %.3g", name, e1);
    cr_expect_leq(e2, TOL_BWD, "%s: chunked dK rel err %.3g", name, e2);
    cr_expect_leq(e3, TOL_BWD, "%s: chunked dV rel err %.3g", name, e3);

    free(dq), free(dk), free(dv), free(dqr), free(dkr), free(dvr);
    free(o1), free(lse1), free(o_ref), free(lse_ref);
    free(o), free(lse), free(o_prev), free(lse_prev);
    seq_free(&s);
    free(key), free(t);
    rv_backend_free(&be);
}

Test(attention_span, accumulate_over_key_chunks)
{
    const span_spec cases[] = {{M_WINDOW, 1.0, 0}, {M_WINDOW, 1.0, 1}, {M_WINDOW, 0.0, 1},
                               {M_BLOCK, 2.0, 0},  {M_BLOCK, 2.0, 1},  {M_FRAME, 0.5, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        accumulate_case(1 + (int)(i % 2), cases[i], 40 + i);
}

/* A longer sequence (8000 tokens, 32 key tiles), where the forward packs the key
 * tiles each thread visits instead of all keys (cpu_attention_fwd.c): queries
 * [2000, 5000) against the keys in 3 chunks folded in with accumulate = 1, equal to
 * one call over all keys, and sampled rows equal to the reference. */
Test(attention_span, long_sequence_key_chunks)
{
    rv_backend *be = cpu(2);
    const int n = 8000, H = 2, d = 64, q0 = 2000, sq = 3000;
    const int cuts[] = {0, 2600, 4100, 8000};
    double *t = ref_span_times(70, n, 100.0);
    seq_data s = seq_make(71, n, H, d);
    const size_t nq = (size_t)sq * H * d, nl = (size_t)H * sq;
    const span_spec cases[] = {{M_WINDOW, 4.0, 0}, {M_WINDOW, 4.0, 1}, {M_BLOCK, 3.0, 1},
                               {M_FRAME, 0.5, 0}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        char name[64];
        spec_name(cases[ci], name, sizeof name);
        double reach;
        double *key = seq_keys(t, n, cases[ci], &reach);
        float *o = ref_alloc_f(nq), *lse = ref_alloc_f(nl);
        float *o1 = ref_alloc_f(nq), *lse1 = ref_alloc_f(nl);
        for (int c = 0; c < 3; c++) {
            int k0 = cuts[c], sk = cuts[c + 1] - cuts[c];
            rv_attn_mask m = slice_mask(key, t, reach, cases[ci].causal, q0, k0);
            rv_attn_fwd_args a = {.q = s.q + row_off(&s, q0), .k = s.k + row_off(&s, k0),
                                  .v = s.v + row_off(&s, k0), .o = o, .lse = lse, .sq = sq,
                                  .sk = sk, .heads = H, .dim = d, .scale = 0.0f, .mask = m,
                                  .accumulate = c > 0};
            cr_assert_eq(be->attn_fwd(be, &a), RV_OK, "%s: %s", name, rv_last_error());
        }
        rv_attn_mask mall = slice_mask(key, t, reach, cases[ci].causal, q0, 0);
        rv_attn_fwd_args a1 = {.q = s.q + row_off(&s, q0), .k = s.k, .v = s.v, .o = o1, .lse = lse1,
                               .sq = sq, .sk = n, .heads = H, .dim = d, .scale = 0.0f, .mask = mall,
                               .accumulate = 0};
        cr_assert_eq(be->attn_fwd(be, &a1), RV_OK, "%s: %s", name, rv_last_error());
        double *o1d = ref_alloc_d(nq), *l1d = ref_alloc_d(nl);
        ref_to_double(o1, o1d, nq);
        ref_to_double(lse1, l1d, nl);
        double eo = rv_rel_err(o, o1d, nq), el = rv_rel_err(lse, l1d, nl);
        cr_expect_leq(eo, TOL_FWD, "%s: accumulated O against one call: rel err %.3g", name, eo);
        cr_expect_leq(el, TOL_FWD, "%s: accumulated LSE against one call: rel err %.3g", name, el);
        double worst = 0;
        for (int i = 0; i < sq; i += 50) {
            rv_attn_mask mi = slice_mask(key, t, reach, cases[ci].causal, q0 + i, 0);
            double oref[2 * 64], lref[2];
            ref_attn_fwd(s.qd + row_off(&s, q0 + i), s.kd, s.vd, 1, n, H, d, 0, mi, oref, lref);
            for (int h = 0; h < H; h++) {
                double e = rv_rel_err(o1 + ((size_t)i * H + h) * d, oref + h * d, (size_t)d);
                double e2 = rv_rel_err(lse1 + (size_t)h * sq + i, lref + h, 1);
                worst = e > worst ? e : worst;
                worst = e2 > worst ? e2 : worst;
            }
        }
        cr_expect_leq(worst, TOL_FWD, "%s: sampled rows against the reference: rel err %.3g", name,
                      worst);
        free(o), free(lse), free(o1), free(lse1), free(o1d), free(l1d), free(key);
    }
    seq_free(&s);
    free(t);
    rv_backend_free(&be);
}

/* ---- edge cases ----------------------------------------------------------------- */

/* Keys that are NaN see nothing and are seen by nothing; the tiles holding them
 * must still mask pair by pair. */
Test(attention_span, nan_keys_see_nothing)
{
    rv_backend *be = cpu(2);
    const int n = 700;
    double *t = ref_span_times(50, n, 100.0), reach;
    span_spec sp = {M_WINDOW, 2.0, 0};
    double *key = seq_keys(t, n, sp, &reach);
    for (int i = 3; i < n; i += 97)
        key[i] = NAN;
    seq_data s = seq_make(51, n, 2, 32);
    for (int causal = 0; causal < 2; causal++) {
        rv_attn_mask m = slice_mask(key, t, reach, causal, 0, 0);
        check_slices(be, &s, 0, n, 0, n, m, causal ? "NaN keys, causal" : "NaN keys");
        m = slice_mask(key, t, reach, causal, 100, 0);
        check_slices(be, &s, 100, 600, 0, 650, m, causal ? "NaN keys, slices, causal"
                                                       : "NaN keys, slices");
    }
    seq_free(&s);
    free(key), free(t);
    rv_backend_free(&be);
}

Test(attention_span, rejects_bad_masks)
{
    rv_backend *be = cpu(1);
    float x[8] = {0}, l[2];
    double key[2] = {0, 1}, tm[2] = {0, 1};
    rv_attn_mask m = {.kind = RV_MASK_SPAN, .q_key = key, .k_key = key, .q_time = tm,
                      .k_time = tm, .reach = 1.0, .causal = 1};
    rv_attn_fwd_args a = {.q = x, .k = x, .v = x, .o = x, .lse = l, .sq = 2, .sk = 2, .heads = 1,
                          .dim = 2, .scale = 0.0f, .mask = m, .accumulate = 0};
    rv_attn_bwd_args b = {.q = x, .k = x, .v = x, .o = x, .lse = l, .dout = x, .dq = x, .dk = x,
                          .dv = x, .sq = 2, .sk = 2, .heads = 1, .dim = 2, .scale = 0.0f, .mask = m,
                          .accumulate = 0};
    cr_assert_eq(be->attn_fwd(be, &a), RV_OK, "%s", rv_last_error());
    cr_assert_eq(be->attn_bwd(be, &b), RV_OK, "%s", rv_last_error());

    struct {
        rv_attn_mask m;
        const char *msg;
    } bad[] = {
        {m, "q_key"}, {m, "k_key"}, {m, "q_time"}, {m, "k_time"},
        {m, "reach"}, {m, "reach"}, {m, "reach"}, {m, "unknown mask kind 7"},
    };
    bad[0].m.q_key = NULL;
    bad[1].m.k_key = NULL;
    bad[2].m.q_time = NULL;
    bad[3].m.k_time = NULL;
    bad[4].m.reach = -0.5;
    bad[5].m.reach = NAN;
    bad[6].m.reach = INFINITY;
    bad[7].m.kind = (rv_mask_kind)7;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        a.mask = bad[i].m;
        b.mask = bad[i].m;
        cr_expect_eq(be->attn_fwd(be, &a), RV_ERR_INVALID, "fwd case %zu accepted", i);
        cr_expect(strstr(rv_last_error(), bad[i].msg), "fwd case %zu: message %s", i,
                  rv_last_error());
        cr_expect_eq(be->attn_bwd(be, &b), RV_ERR_INVALID, "bwd case %zu accepted", i);
        cr_expect(strstr(rv_last_error(), bad[i].msg), "bwd case %zu: message %s", i,
                  rv_last_error());
    }
    /* Without causal the times are not read; an empty side needs no keys. */
    a.mask = m;
    a.mask.causal = 0;
    a.mask.q_time = a.mask.k_time = NULL;
    cr_expect_eq(be->attn_fwd(be, &a), RV_OK, "%s", rv_last_error());
    a.mask.k_key = NULL;
    a.sk = 0;
    cr_expect_eq(be->attn_fwd(be, &a), RV_OK, "%s", rv_last_error());
    cr_expect(l[0] == -INFINITY && x[0] == 0.0f);
    rv_backend_free(&be);
}

/* ---- tile skipping -------------------------------------------------------------- */

/* For 20 000 tokens at 100 tokens/s and a 2 s window (each query sees about 1 % of
 * the keys), the tile pairs the forward and backward compute, from the kernels'
 * counters, against the tile pairs that hold at least one visible pair (counted
 * pair by pair here): never fewer (or results would be wrong), at most a few more
 * (boxes that overlap without a visible pair), and so a visited fraction of the
 * same order as the visible fraction, not the whole square; and the tile boxes
 * compared on the way are about as many (a binary search, not a scan of every
 * tile). The forward output of sampled rows is checked against the reference over
 * all keys. */
static void tile_skipping(const char *path)
{
    rv_backend *be = cpu(2);
    const int n = 20000, H = 1, d = 32;
    double *t = ref_span_times(60, n, 100.0), reach;
    span_spec sp = {M_WINDOW, 2.0, 0};
    double *key = seq_keys(t, n, sp, &reach);
    seq_data s = seq_make(61, n, H, d);
    const int fq = (n + RV_FWD_BQ - 1) / RV_FWD_BQ, fk = (n + RV_FWD_BK - 1) / RV_FWD_BK;
    const int bq = (n + RV_BWD_BQ - 1) / RV_BWD_BQ, bk = (n + RV_BWD_BK - 1) / RV_BWD_BK;

    for (int causal = 0; causal < 2; causal++) {
        rv_attn_mask m = slice_mask(key, t, reach, causal, 0, 0);
        /* Visible pairs, and the tiles of either tiling that hold one. */
        unsigned char *fmeet = calloc((size_t)fq * fk, 1), *bmeet = calloc((size_t)bq * bk, 1);
        cr_assert(fmeet && bmeet);
        double visible = 0;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                if (!(fabs(key[i] - key[j]) <= reach))
                    continue;
                if (causal && !(t[j] < t[i] || (t[j] == t[i] && j <= i)))
                    continue;
                visible++;
                fmeet[(size_t)(i / RV_FWD_BQ) * fk + j / RV_FWD_BK] = 1;
                bmeet[(size_t)(i / RV_BWD_BQ) * bk + j / RV_BWD_BK] = 1;
            }
        uint64_t fneed = 0, bneed = 0;
        for (size_t x = 0; x < (size_t)fq * fk; x++)
            fneed += fmeet[x];
        for (size_t x = 0; x < (size_t)bq * bk; x++)
            bneed += bmeet[x];

        float *o = ref_alloc_f((size_t)n * H * d), *lse = ref_alloc_f((size_t)n * H);
        float *dq = ref_alloc_f((size_t)n * H * d), *dk = ref_alloc_f((size_t)n * H * d);
        float *dv = ref_alloc_f((size_t)n * H * d);
        uint64_t f0, b0, x0, f1, b1, x1, f2, b2, x2;
        rv_cpu_attn_tile_counts(&f0, &b0, &x0);
        rv_attn_fwd_args a = {.q = s.q, .k = s.k, .v = s.v, .o = o, .lse = lse, .sq = n, .sk = n,
                              .heads = H, .dim = d, .scale = 0.0f, .mask = m, .accumulate = 0};
        cr_assert_eq(be->attn_fwd(be, &a), RV_OK, "%s", rv_last_error());
        rv_cpu_attn_tile_counts(&f1, &b1, &x1);
        rv_attn_bwd_args b = {.q = s.q, .k = s.k, .v = s.v, .o = o, .lse = lse, .dout = s.dout,
                              .dq = dq, .dk = dk, .dv = dv, .sq = n, .sk = n, .heads = H, .dim = d,
                              .scale = 0.0f, .mask = m, .accumulate = 0};
        cr_assert_eq(be->attn_bwd(be, &b), RV_OK, "%s", rv_last_error());
        rv_cpu_attn_tile_counts(&f2, &b2, &x2);
        uint64_t fvis = f1 - f0, bvis = b2 - b1, fbox = x1 - x0, bbox = x2 - x1;

        double vfrac = visible / ((double)n * n);
        double ffrac = (double)fvis / ((double)fq * fk), bfrac = (double)bvis / ((double)bq * bk);
        printf("tile skipping (%s%s): visible pairs %.4f%%; forward %llu of %d tiles (%.3f%%, "
               "%llu hold a visible pair, %llu boxes compared), backward %llu of %d tiles "
               "(%.3f%%, %llu hold one, %llu boxes compared)\n",
               path, causal ? ", causal" : "", 100 * vfrac, (unsigned long long)fvis, fq * fk,
               100 * ffrac, (unsigned long long)fneed, (unsigned long long)fbox,
               (unsigned long long)bvis, bq * bk, 100 * bfrac, (unsigned long long)bneed,
               (unsigned long long)bbox);
        /* The search: the tiles whose boxes are compared are about those computed,
         * not every tile of the other side. */
        cr_expect_leq(fbox, 2 * fvis + fq, "forward compared %llu boxes for %llu tiles computed",
                      (unsigned long long)fbox, (unsigned long long)fvis);
        cr_expect_leq(bbox, 2 * bvis + bk, "backward compared %llu boxes for %llu tiles computed",
                      (unsigned long long)bbox, (unsigned long long)bvis);
        cr_expect_geq(fvis, fneed, "forward computed %llu tiles, %llu hold visible pairs",
                      (unsigned long long)fvis, (unsigned long long)fneed);
        cr_expect_leq(fvis, fneed + fneed / 10 + 2, "forward computed %llu tiles, only %llu "
                      "hold visible pairs", (unsigned long long)fvis, (unsigned long long)fneed);
        cr_expect_geq(bvis, bneed, "backward computed %llu tiles, %llu hold visible pairs",
                      (unsigned long long)bvis, (unsigned long long)bneed);
        cr_expect_leq(bvis, bneed + bneed / 10 + 2, "backward computed %llu tiles, only %llu "
                      "hold visible pairs", (unsigned long long)bvis, (unsigned long long)bneed);
        /* Tile granularity bounds the rest: a forward query tile spans 2.56 s and
         * its key tiles 5.12 s around a 2 s window (measured: 4.5x the visible
         * fraction, 8.7x causal, which halves the visible pairs but not the tiles
         * on the diagonal); backward tiles 0.64 s and 1.28 s (2.4x, 3.8x). A
         * kernel that visits every tile is at 90x and more. */
        cr_expect_leq(ffrac, 12 * vfrac, "forward visits %.3f%% of the tiles for %.3f%% visible",
                      100 * ffrac, 100 * vfrac);
        cr_expect_leq(bfrac, 5 * vfrac, "backward visits %.3f%% of the tiles for %.3f%% visible",
                      100 * bfrac, 100 * vfrac);

        /* Sampled rows against the reference over all keys. */
        double worst = 0;
        for (int x = 0; x < 40; x++) {
            int i = (int)((long)x * (n - 1) / 39);
            rv_attn_mask mi = slice_mask(key, t, reach, causal, i, 0);
            double oref[32], lref[1];
            ref_attn_fwd(s.qd + row_off(&s, i), s.kd, s.vd, 1, n, H, d, 0, mi, oref, lref);
            double e = rv_rel_err(o + row_off(&s, i), oref, (size_t)d);
            double el = rv_rel_err(lse + i, lref, 1);
            worst = e > worst ? e : worst;
            worst = el > worst ? el : worst;
        }
        cr_expect_leq(worst, TOL_FWD, "%s: sampled rows of the long sequence: rel err %.3g", path,
                      worst);
        free(o), free(lse), free(dq), free(dk), free(dv), free(fmeet), free(bmeet);
    }
    seq_free(&s);
    free(key), free(t);
    rv_backend_free(&be);
}

Test(attention_span, tile_skipping_is_real)
{
    tile_skipping("as built");
}

Test(attention_span, tile_skipping_is_real_avx2)
{
    if (kernel_path_force("avx2"))
        tile_skipping("avx2");
}

Test(attention_span, tile_skipping_is_real_blas)
{
    if (kernel_path_force("blas"))
        tile_skipping("blas");
}
