/* test_attention.c: the CPU attention block (forward with log-sum-exp, backward,
 * merge) against naive double-precision attention, on odd shapes, causal masks
 * with chunk offsets that mask whole tiles, and finite differences. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_paths.h"
#include "ref_attention.h"
#include "ref_ops.h"
#include "rv_backend.h"

/* Tolerances, all on normalised errors (max |got - want| / max |want|, rv_rel_err;
 * gradients floored at a tenth of the largest reference gradient, grad_err), the
 * f32 kernels against the double references of tests/ref on every kernel set.
 * The forward accumulates d-term dot products and sk-term softmax-weighted sums
 * of V in f32 (epsilon 1.2e-7) with an online rescale per tile: rounding grows
 * like sqrt(sk) * eps, about 4e-6 at sk = 1031; the LSE (|LSE| ~ 5) is one log of
 * such a sum. */
#define TOL_FWD 1e-5
/* The backward recomputes P = exp(S - LSE) (its rounding amplified by |S| ~ 10),
 * then sums over sq (dK, dV) or sk (dQ) keys: ten times the forward's. */
#define TOL_BWD 1e-4
/* Central differences of the f32 forward with step 1e-2: the truncation (h^2 times
 * the third derivative) and the loss's own rounding eps * |L| / h, about 1e-3. */
#define TOL_FD_F32 2e-3
/* Central differences of the double reference with step 1e-5: truncation ~1e-10
 * plus cancellation eps_double / h ~ 1e-11. */
#define TOL_FD_REF 1e-7

typedef struct case_data {
    int sq, sk, heads, dim;
    rv_attn_mask mask;
    float *q, *k, *v, *dout; /* f32 inputs */
    double *qd, *kd, *vd, *doutd;
} case_data;

static case_data make_case(uint64_t seed, int sq, int sk, int heads, int dim,
                           rv_attn_mask mask)
{
    case_data c = {sq, sk, heads, dim, mask, 0, 0, 0, 0, 0, 0, 0, 0};
    ref_rng r = ref_rng_make(seed);
    size_t nq = (size_t)sq * heads * dim, nk = (size_t)sk * heads * dim;
    c.q = ref_alloc_f(nq);
    c.k = ref_alloc_f(nk);
    c.v = ref_alloc_f(nk);
    c.dout = ref_alloc_f(nq);
    /* A spread of 2 in q and k makes the softmax peaked, not uniform. */
    ref_fill_normal(&r, c.q, nq, 0.0f, 1.5f);
    ref_fill_normal(&r, c.k, nk, 0.0f, 1.5f);
    ref_fill_uniform(&r, c.v, nk, -1.0f, 1.0f);
    ref_fill_uniform(&r, c.dout, nq, -1.0f, 1.0f);
    c.qd = ref_dup_d(c.q, nq);
    c.kd = ref_dup_d(c.k, nk);
    c.vd = ref_dup_d(c.v, nk);
    c.doutd = ref_dup_d(c.dout, nq);
    return c;
}

static void free_case(case_data *c)
{
    free(c->q), free(c->k), free(c->v), free(c->dout);
    free(c->qd), free(c->kd), free(c->vd), free(c->doutd);
}

static rv_backend *cpu(int threads)
{
    rv_backend *be = NULL;
    cr_assert_eq(rv_backend_cpu_create(threads, &be), RV_OK);
    return be;
}

static void run_fwd(rv_backend *be, const case_data *c, float *o, float *lse)
{
    rv_attn_fwd_args a = {.q = c->q, .k = c->k, .v = c->v, .o = o, .lse = lse, .sq = c->sq,
                          .sk = c->sk, .heads = c->heads, .dim = c->dim, .scale = 0.0f,
                          .mask = c->mask, .accumulate = 0};
    cr_assert_eq(be->attn_fwd(be, &a), RV_OK, "attn_fwd: %s", rv_last_error());
}

/* Normalised error of a gradient, with a floor of a tenth of gscale, the largest
 * entry of any of the three reference gradients of the same loss. With a single
 * visible key the softmax is constant and dQ, dK are exactly zero (only f32
 * cancellation noise of order 1e-6 is left), so the plain normalised error would
 * divide rounding noise by zero; elsewhere the floor is below max|want|. */
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

static double max_abs3(const double *a, size_t na, const double *b, size_t nb,
                       const double *c, size_t nc)
{
    double m = 0;
    for (size_t i = 0; i < na; i++)
        m = fabs(a[i]) > m ? fabs(a[i]) : m;
    for (size_t i = 0; i < nb; i++)
        m = fabs(b[i]) > m ? fabs(b[i]) : m;
    for (size_t i = 0; i < nc; i++)
        m = fabs(c[i]) > m ? fabs(c[i]) : m;
    return m;
}

/* Checks forward and backward of one case against the double reference. */
static void check_case(int threads, uint64_t seed, int sq, int sk, int heads, int dim,
                       rv_attn_mask mask, int backward)
{
    rv_backend *be = cpu(threads);
    case_data c = make_case(seed, sq, sk, heads, dim, mask);
    size_t nq = (size_t)sq * heads * dim, nk = (size_t)sk * heads * dim;
    size_t nl = (size_t)heads * sq;
    double *o_ref = ref_alloc_d(nq), *lse_ref = ref_alloc_d(nl);
    ref_attn_fwd(c.qd, c.kd, c.vd, sq, sk, heads, dim, 0, mask, o_ref, lse_ref);
    float *o = ref_alloc_f(nq), *lse = ref_alloc_f(nl);
    run_fwd(be, &c, o, lse);
    double eo = rv_rel_err(o, o_ref, nq), el = rv_rel_err(lse, lse_ref, nl);
    cr_expect_leq(eo, TOL_FWD, "O: rel err %.3g (sq=%d sk=%d H=%d d=%d causal=%d q0=%lld k0=%lld T=%d)",
                  eo, sq, sk, heads, dim, mask.kind, (long long)mask.q_start,
                  (long long)mask.k_start, threads);
    cr_expect_leq(el, TOL_FWD, "LSE: rel err %.3g (sq=%d sk=%d H=%d d=%d causal=%d)", el, sq,
                  sk, heads, dim, mask.kind);
    for (size_t i = 0; i < nl; i++)
        cr_expect_eq(isinf(lse_ref[i]) != 0, isinf(lse[i]) != 0, "lse[%zu] %g vs %g", i,
                     lse[i], lse_ref[i]);

    if (backward) {
        double *dq_ref = ref_alloc_d(nq), *dk_ref = ref_alloc_d(nk), *dv_ref = ref_alloc_d(nk);
        ref_attn_bwd(c.qd, c.kd, c.vd, c.doutd, sq, sk, heads, dim, 0, mask, dq_ref, dk_ref,
                     dv_ref);
        float *dq = ref_alloc_f(nq), *dk = ref_alloc_f(nk), *dv = ref_alloc_f(nk);
        /* Garbage in the outputs must be overwritten when accumulate is 0. */
        for (size_t i = 0; i < nq; i++)
            dq[i] = 1e3f;
        for (size_t i = 0; i < nk; i++)
            dk[i] = dv[i] = -1e3f;
        rv_attn_bwd_args b = {.q = c.q, .k = c.k, .v = c.v, .o = o, .lse = lse, .dout = c.dout,
                              .dq = dq, .dk = dk, .dv = dv, .sq = sq, .sk = sk, .heads = heads,
                              .dim = dim, .scale = 0.0f, .mask = mask, .accumulate = 0};
        cr_assert_eq(be->attn_bwd(be, &b), RV_OK, "attn_bwd: %s", rv_last_error());
        double g = max_abs3(dq_ref, nq, dk_ref, nk, dv_ref, nk);
        double e1 = grad_err(dq, dq_ref, nq, g), e2 = grad_err(dk, dk_ref, nk, g),
               e3 = grad_err(dv, dv_ref, nk, g);
        cr_expect_leq(e1, TOL_BWD, "dQ rel err %.3g (sq=%d sk=%d H=%d d=%d causal=%d T=%d)", e1,
                      sq, sk, heads, dim, mask.kind, threads);
        cr_expect_leq(e2, TOL_BWD, "dK rel err %.3g (sq=%d sk=%d H=%d d=%d causal=%d T=%d)", e2,
                      sq, sk, heads, dim, mask.kind, threads);
        cr_expect_leq(e3, TOL_BWD, "dV rel err %.3g (sq=%d sk=%d H=%d d=%d causal=%d T=%d)", e3,
                      sq, sk, heads, dim, mask.kind, threads);
        free(dq), free(dk), free(dv), free(dq_ref), free(dk_ref), free(dv_ref);
    }
    free(o), free(lse), free(o_ref), free(lse_ref);
    free_case(&c);
    rv_backend_free(&be);
}

static const rv_attn_mask no_mask = {.kind = RV_MASK_NONE, .q_start = 0, .k_start = 0};
static const rv_attn_mask causal = {.kind = RV_MASK_CAUSAL, .q_start = 0, .k_start = 0};

/* The shape grid of the foundation issue: S in {1, 7, 129, 1000}, d in {32, 64, 80,
 * 128}, H in {1, 3, 4}, causal and not. Backward on all but the largest. Under the
 * sanitizers the largest S is 300 (several tiles and a ragged edge each way). */
Test(attention, grid_forward_and_backward)
{
#ifdef RV_TEST_SANITIZED
    const int seqs[] = {1, 7, 129, 300}, dims[] = {32, 64, 80, 128}, heads[] = {1, 3, 4};
#else
    const int seqs[] = {1, 7, 129, 1000}, dims[] = {32, 64, 80, 128}, heads[] = {1, 3, 4};
#endif
    uint64_t seed = 1;
    for (int si = 0; si < 4; si++)
        for (int di = 0; di < 4; di++)
            for (int hi = 0; hi < 3; hi++)
                for (int causal_on = 0; causal_on < 2; causal_on++) {
                    int s = seqs[si];
                    /* The largest S's backward reference is slow: fewer combos. */
                    int bwd = si < 3 || (hi == 1 && (di == 0 || di == 3));
                    check_case(1 + (int)(seed % 2), seed, s, s, heads[hi], dims[di],
                               causal_on ? causal : no_mask, bwd);
                    seed++;
                }
}

/* Query and key chunks at different global offsets, as in ring attention: whole
 * tiles fully masked, fully visible, rows that see nothing, sq != sk. */
Test(attention, causal_chunk_offsets)
{
    struct {
        int sq, sk;
        int64_t q0, k0;
    } cases[] = {
        {300, 300, 0, 500},     /* keys entirely in the future: every row sees nothing */
        {300, 257, 1000, 0},    /* keys entirely in the past: no mask inside */
        {600, 300, 200, 300},   /* the first 100 rows see nothing, then a staircase */
        {129, 700, 400, 0},     /* key tiles beyond the staircase skipped */
        {1000, 1000, 0, 0},     /* plain causal */
        {5, 517, 511, 3},       /* few queries, many keys, ragged last tile */
        {517, 5, 3, 511},       /* many queries, few keys */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rv_attn_mask m = {.kind = RV_MASK_CAUSAL, .q_start = cases[i].q0, .k_start = cases[i].k0};
        check_case(2, 100 + i, cases[i].sq, cases[i].sk, 2, 64, m, 1);
        check_case(1, 200 + i, cases[i].sq, cases[i].sk, 3, 32, m, 1);
    }
    /* Non-causal sq != sk. */
    check_case(2, 300, 77, 1031, 4, 80, no_mask, 1);
    check_case(2, 301, 1031, 77, 1, 128, no_mask, 1);
}

Test(attention, fully_masked_rows_are_zero_and_neg_inf)
{
    rv_backend *be = cpu(2);
    rv_attn_mask m = {.kind = RV_MASK_CAUSAL, .q_start = 0, .k_start = 64};
    case_data c = make_case(7, 40, 50, 2, 32, m);
    float *o = ref_alloc_f((size_t)40 * 2 * 32), *lse = ref_alloc_f(80);
    for (int i = 0; i < 40 * 64; i++)
        o[i] = NAN;
    run_fwd(be, &c, o, lse);
    for (int i = 0; i < 40 * 64; i++)
        cr_assert_eq(o[i], 0.0f);
    for (int i = 0; i < 80; i++)
        cr_assert(isinf(lse[i]) && lse[i] < 0);
    free(o), free(lse);
    free_case(&c);
    rv_backend_free(&be);
}

/* Finite differences of the f32 forward against the f32 backward, and of the double
 * reference forward against the double reference backward (which the kernel
 * backward is compared with above). */
static double loss_f32(rv_backend *be, case_data *c, const double *r)
{
    size_t nq = (size_t)c->sq * c->heads * c->dim;
    float *o = ref_alloc_f(nq), *lse = ref_alloc_f((size_t)c->heads * c->sq);
    run_fwd(be, c, o, lse);
    double l = 0;
    for (size_t i = 0; i < nq; i++)
        l += o[i] * r[i];
    free(o), free(lse);
    return l;
}

static double loss_f64(case_data *c, const double *r)
{
    size_t nq = (size_t)c->sq * c->heads * c->dim;
    double *o = ref_alloc_d(nq), *lse = ref_alloc_d((size_t)c->heads * c->sq);
    ref_attn_fwd(c->qd, c->kd, c->vd, c->sq, c->sk, c->heads, c->dim, 0, c->mask, o, lse);
    double l = ref_dot(o, r, nq);
    free(o), free(lse);
    return l;
}

Test(attention, backward_finite_differences)
{
    rv_backend *be = cpu(2);
    for (int causal_on = 0; causal_on < 2; causal_on++) {
        rv_attn_mask m = {.kind = causal_on ? RV_MASK_CAUSAL : RV_MASK_NONE, .q_start = 3, .k_start = 0};
        case_data c = make_case(11 + causal_on, 9, 13, 2, 8, m);
        size_t nq = 9 * 2 * 8, nk = 13 * 2 * 8;
        double *r = c.doutd; /* loss = sum(o * dout): its gradient is the backward */
        float *o = ref_alloc_f(nq), *lse = ref_alloc_f(18);
        run_fwd(be, &c, o, lse);
        float *dq = ref_alloc_f(nq), *dk = ref_alloc_f(nk), *dv = ref_alloc_f(nk);
        rv_attn_bwd_args b = {.q = c.q, .k = c.k, .v = c.v, .o = o, .lse = lse, .dout = c.dout,
                              .dq = dq, .dk = dk, .dv = dv, .sq = 9, .sk = 13, .heads = 2, .dim = 8,
                              .scale = 0.0f, .mask = m, .accumulate = 0};
        cr_assert_eq(be->attn_bwd(be, &b), RV_OK);
        double *dqr = ref_alloc_d(nq), *dkr = ref_alloc_d(nk), *dvr = ref_alloc_d(nk);
        ref_attn_bwd(c.qd, c.kd, c.vd, c.doutd, 9, 13, 2, 8, 0, m, dqr, dkr, dvr);

        struct {
            float *x;
            double *xd;
            size_t n;
            float *g;
            double *gr;
        } in[3] = {{c.q, c.qd, nq, dq, dqr}, {c.k, c.kd, nk, dk, dkr}, {c.v, c.vd, nk, dv, dvr}};
        for (int t = 0; t < 3; t++) {
            double *fd32 = ref_alloc_d(in[t].n), *fd64 = ref_alloc_d(in[t].n);
            double *g32 = ref_alloc_d(in[t].n);
            for (size_t i = 0; i < in[t].n; i++) {
                const float h32 = 1e-2f;
                float x0 = in[t].x[i];
                in[t].x[i] = x0 + h32;
                double lp = loss_f32(be, &c, r);
                in[t].x[i] = x0 - h32;
                double lm = loss_f32(be, &c, r);
                in[t].x[i] = x0;
                fd32[i] = (lp - lm) / (2.0 * h32);
                g32[i] = in[t].g[i];

                const double h64 = 1e-5;
                double xd0 = in[t].xd[i];
                in[t].xd[i] = xd0 + h64;
                lp = loss_f64(&c, r);
                in[t].xd[i] = xd0 - h64;
                lm = loss_f64(&c, r);
                in[t].xd[i] = xd0;
                fd64[i] = (lp - lm) / (2.0 * h64);
            }
            double e32 = rv_rel_err_d(g32, fd32, in[t].n);
            double e64 = rv_rel_err_d(in[t].gr, fd64, in[t].n);
            cr_expect_leq(e32, TOL_FD_F32, "input %d causal %d: f32 backward vs finite differences %.3g",
                          t, causal_on, e32);
            cr_expect_leq(e64, TOL_FD_REF, "input %d causal %d: reference backward vs finite differences %.3g",
                          t, causal_on, e64);
            free(fd32), free(fd64), free(g32);
        }
        free(o), free(lse), free(dq), free(dk), free(dv), free(dqr), free(dkr), free(dvr);
        free_case(&c);
    }
    rv_backend_free(&be);
}

/* Splitting K/V into 1..8 random chunks, attending to each with its global key
 * offset and merging by log-sum-exp gives the unsplit result; the chunked backward
 * with accumulate = 1 and the final (o, lse) sums to the unsplit backward. */
Test(attention, merge_of_random_chunks)
{
    rv_backend *be = cpu(2);
    ref_rng rng = ref_rng_make(99);
    for (int trial = 0; trial < 16; trial++) {
        int nchunks = 1 + trial % 8;
        int causal_on = (trial / 8) % 2;
        int sq = 150 + (int)(ref_rng_u64(&rng) % 200), sk = 300 + (int)(ref_rng_u64(&rng) % 400);
        int heads = 1 + trial % 3, dim = trial % 2 ? 64 : 32;
        /* Queries sit in the middle of the key range: some chunks are fully masked. */
        rv_attn_mask m = {.kind = causal_on ? RV_MASK_CAUSAL : RV_MASK_NONE, .q_start = sk / 3, .k_start = 0};
        case_data c = make_case(500 + trial, sq, sk, heads, dim, m);
        size_t nq = (size_t)sq * heads * dim, nk = (size_t)sk * heads * dim, nl = (size_t)heads * sq;

        /* Random cut points, possibly empty chunks. */
        int cuts[9];
        cuts[0] = 0;
        cuts[nchunks] = sk;
        for (int i = 1; i < nchunks; i++)
            cuts[i] = (int)(ref_rng_u64(&rng) % (uint64_t)(sk + 1));
        for (int i = 1; i < nchunks; i++) /* sort */
            for (int j = i + 1; j < nchunks; j++)
                if (cuts[j] < cuts[i]) {
                    int t = cuts[i];
                    cuts[i] = cuts[j];
                    cuts[j] = t;
                }

        float *o = ref_alloc_f(nq), *lse = ref_alloc_f(nl);
        float *o2 = ref_alloc_f(nq), *lse2 = ref_alloc_f(nl);
        for (int ch = 0; ch < nchunks; ch++) {
            int k0 = cuts[ch], n = cuts[ch + 1] - cuts[ch];
            size_t off = (size_t)k0 * heads * dim;
            rv_attn_mask mc = {.kind = m.kind, .q_start = m.q_start, .k_start = m.k_start + k0};
            rv_attn_fwd_args a = {.q = c.q, .k = c.k + off, .v = c.v + off, .o = ch ? o2 : o,
                                  .lse = ch ? lse2 : lse, .sq = sq, .sk = n, .heads = heads,
                                  .dim = dim, .scale = 0.0f, .mask = mc, .accumulate = 0};
            cr_assert_eq(be->attn_fwd(be, &a), RV_OK);
            if (ch)
                cr_assert_eq(be->attn_merge(be, o, lse, o2, lse2, sq, heads, dim), RV_OK);
        }
        double *o_ref = ref_alloc_d(nq), *lse_ref = ref_alloc_d(nl);
        ref_attn_fwd(c.qd, c.kd, c.vd, sq, sk, heads, dim, 0, m, o_ref, lse_ref);
        double eo = rv_rel_err(o, o_ref, nq), el = rv_rel_err(lse, lse_ref, nl);
        cr_expect_leq(eo, TOL_FWD, "trial %d (%d chunks): merged O rel err %.3g", trial, nchunks, eo);
        cr_expect_leq(el, TOL_FWD, "trial %d (%d chunks): merged LSE rel err %.3g", trial, nchunks, el);

        /* The same chunks folded in by the forward itself (accumulate = 1). */
        float *o3 = ref_alloc_f(nq), *lse3 = ref_alloc_f(nl);
        for (int ch = 0; ch < nchunks; ch++) {
            int k0 = cuts[ch], n = cuts[ch + 1] - cuts[ch];
            size_t off = (size_t)k0 * heads * dim;
            rv_attn_mask mc = {.kind = m.kind, .q_start = m.q_start, .k_start = m.k_start + k0};
            rv_attn_fwd_args a = {.q = c.q, .k = c.k + off, .v = c.v + off, .o = o3, .lse = lse3,
                                  .sq = sq, .sk = n, .heads = heads, .dim = dim, .scale = 0.0f,
                                  .mask = mc, .accumulate = ch > 0};
            cr_assert_eq(be->attn_fwd(be, &a), RV_OK);
        }
        eo = rv_rel_err(o3, o_ref, nq), el = rv_rel_err(lse3, lse_ref, nl);
        cr_expect_leq(eo, TOL_FWD, "trial %d (%d chunks): accumulated O rel err %.3g", trial, nchunks, eo);
        cr_expect_leq(el, TOL_FWD, "trial %d (%d chunks): accumulated LSE rel err %.3g", trial, nchunks, el);
        free(o3), free(lse3);

        /* Chunked backward, accumulating dQ; each chunk's dK, dV land in its rows. */
        float *dq = ref_alloc_f(nq), *dk = ref_alloc_f(nk), *dv = ref_alloc_f(nk);
        for (int ch = 0; ch < nchunks; ch++) {
            int k0 = cuts[ch], n = cuts[ch + 1] - cuts[ch];
            size_t off = (size_t)k0 * heads * dim;
            rv_attn_mask mc = {.kind = m.kind, .q_start = m.q_start, .k_start = m.k_start + k0};
            rv_attn_bwd_args b = {.q = c.q, .k = c.k + off, .v = c.v + off, .o = o, .lse = lse,
                                  .dout = c.dout, .dq = dq, .dk = dk + off, .dv = dv + off,
                                  .sq = sq, .sk = n, .heads = heads, .dim = dim, .scale = 0.0f,
                                  .mask = mc, .accumulate = 1};
            cr_assert_eq(be->attn_bwd(be, &b), RV_OK);
        }
        double *dqr = ref_alloc_d(nq), *dkr = ref_alloc_d(nk), *dvr = ref_alloc_d(nk);
        ref_attn_bwd(c.qd, c.kd, c.vd, c.doutd, sq, sk, heads, dim, 0, m, dqr, dkr, dvr);
        double g = max_abs3(dqr, nq, dkr, nk, dvr, nk);
        double e1 = grad_err(dq, dqr, nq, g), e2 = grad_err(dk, dkr, nk, g), e3 = grad_err(dv, dvr, nk, g);
        cr_expect_leq(e1, TOL_BWD, "trial %d: chunked dQ rel err %.3g", trial, e1);
        cr_expect_leq(e2, TOL_BWD, "trial %d: chunked dK rel err %.3g", trial, e2);
        cr_expect_leq(e3, TOL_BWD, "trial %d: chunked dV rel err %.3g", trial, e3);

        free(o), free(lse), free(o2), free(lse2), free(o_ref), free(lse_ref);
        free(dq), free(dk), free(dv), free(dqr), free(dkr), free(dvr);
        free_case(&c);
    }
    rv_backend_free(&be);
}

Test(attention, merge_with_empty_side_is_exact)
{
    rv_backend *be = cpu(1);
    float o[4] = {1, 2, 3, 4}, lse[2] = {0.5f, -INFINITY};
    float o2[4] = {9, 9, 5, 6}, lse2[2] = {-INFINITY, 1.25f};
    cr_assert_eq(be->attn_merge(be, o, lse, o2, lse2, 2, 1, 2), RV_OK);
    cr_assert(o[0] == 1 && o[1] == 2 && lse[0] == 0.5f);
    cr_assert(o[2] == 5 && o[3] == 6 && lse[1] == 1.25f);
    float a[2] = {0, 0}, la[1] = {-INFINITY}, b[2] = {0, 0}, lb[1] = {-INFINITY};
    cr_assert_eq(be->attn_merge(be, a, la, b, lb, 1, 1, 2), RV_OK);
    cr_assert(isinf(la[0]) && la[0] < 0 && a[0] == 0 && a[1] == 0);
    rv_backend_free(&be);
}

Test(attention, rejects_bad_shapes)
{
    rv_backend *be = cpu(1);
    float x[4] = {0}, l[1];
    rv_attn_fwd_args a = {.q = x, .k = x, .v = x, .o = x, .lse = l, .sq = 1, .sk = 1, .heads = 0,
                          .dim = 4, .scale = 0.0f, .mask = no_mask, .accumulate = 0};
    cr_assert_eq(be->attn_fwd(be, &a), RV_ERR_INVALID);
    cr_assert(strstr(rv_last_error(), "heads=0"), "message: %s", rv_last_error());
    a.heads = 1;
    a.sq = -1;
    cr_assert_eq(be->attn_fwd(be, &a), RV_ERR_INVALID);
    a.sq = 1;
    a.q = NULL;
    cr_assert_eq(be->attn_fwd(be, &a), RV_ERR_INVALID);
    rv_backend_free(&be);
}

/* Every kernel set (AVX-512, AVX2, BLAS tiles) against the same references,
 * wherever this CPU runs it (kernel_paths.h; the tests above run the set in use):
 * odd sizes, causal, offsets that leave whole tiles and rows unseen, and head dims
 * 32, 40, 64, 80 and 128. */
static void kernel_path_cases(const char *path)
{
    if (!kernel_path_force(path))
        return;
    const int dims[] = {32, 40, 64, 80, 128};
    for (int di = 0; di < 5; di++) {
        if (di % 2) /* the long case at two head dims: its reference is slow */
            check_case(2, 900 + di, 1000, 1000, 3, dims[di], causal, 1);
        check_case(1, 910 + di, 129, 517, 4, dims[di], no_mask, 1);
        check_case(2, 920 + di, 7, 33, 1, dims[di], no_mask, 1);
        rv_attn_mask m = {.kind = RV_MASK_CAUSAL, .q_start = 200, .k_start = 300};
        check_case(2, 930 + di, 600, 300, 2, dims[di], m, 1);
    }
}

Test(attention, avx512_tile_path)
{
    kernel_path_cases("avx512");
}

Test(attention, avx2_tile_path)
{
    kernel_path_cases("avx2");
}

Test(attention, blas_tile_path)
{
    kernel_path_cases("blas");
}

/* A kernel set no build has, and a CPU backend under it: refused, naming it. */
Test(attention, unknown_kernel_set_refused)
{
    cr_assert_eq(setenv("RINGVIT_CPU_KERNELS", "avx1024", 1), 0);
    cr_assert_null(rv_cpu_kernels());
    rv_backend *be = NULL;
    cr_assert_eq(rv_backend_cpu_create(1, &be), RV_ERR_INVALID);
    cr_assert_null(be);
    cr_assert(strstr(rv_last_error(), "RINGVIT_CPU_KERNELS=avx1024"), "%s", rv_last_error());
    cr_assert_eq(setenv("RINGVIT_CPU_KERNELS", "auto", 1), 0);
    cr_assert_str_eq(rv_cpu_kernels(), rv_cpu_kernels_best());
}
