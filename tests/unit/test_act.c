/* test_act.c: the CPU backend's MLP activations (rv_act: GELU erf form, GELU tanh
 * form, quick GELU), forward and backward, against the double references of
 * tests/ref: whole arrays with 1 and 2 threads and sizes from 0 to past the
 * threaded threshold; every element of the tails, where outputs are tiny (the
 * negative side must keep its relative accuracy) or saturate; huge, tiny and NaN
 * inputs; the backward (kernel and reference) against central finite differences
 * of the double forward; in-place use; and the arguments that must be refused,
 * an unknown activation among them. Each tail test prints the worst error it
 * measured, so a run shows the margins. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_ops.h"
#include "rv_backend.h"

/* Tolerances, all relative. Each output is one elementwise function of one input:
 * no accumulation, so the error is a few roundings of f32 (epsilon 1.2e-7: the
 * input's rounding amplified by |x f'(x) / f(x)|, an exp or erf approximation, a
 * product), under 8 epsilon.
 * Normalised (max-abs) error of whole arrays, as in the other op tests: */
#define TOL_FWD 1e-6
#define TOL_BWD 1e-6
/* Elementwise relative error, with |reference| floored at FLT_MIN (below it a
 * float has fewer bits), over the tails of each activation and at extreme inputs;
 * the backward multiplies two approximated factors, hence twice the forward's: */
#define TOL_ELEM_FWD 1e-6
#define TOL_ELEM_BWD 2e-6
/* The double reference backward against central differences of the double forward
 * with step 1e-6: truncation h^2 f''' ~ 1e-12 plus cancellation eps_double / h ~
 * 1e-10, well under: */
#define TOL_REF_FD 1e-7

static const rv_act acts[] = {RV_ACT_GELU, RV_ACT_GELU_TANH, RV_ACT_QUICK_GELU};
#define N_ACTS (sizeof acts / sizeof acts[0])

static const char *act_label(rv_act act)
{
    return act == RV_ACT_GELU        ? "gelu"
           : act == RV_ACT_GELU_TANH ? "gelu_tanh"
           : act == RV_ACT_QUICK_GELU ? "quick_gelu"
                                      : "?";
}

static rv_backend *cpu(int threads)
{
    rv_backend *be = NULL;
    rv_status st = rv_backend_cpu_create(threads, &be);
    cr_assert_eq(st, RV_OK, "rv_backend_cpu_create: %s", rv_last_error());
    return be;
}

/* |got - want| / max(|want|, FLT_MIN); 0 when both are the same (zeros too). */
static double elem_err(float got, double want)
{
    if ((double)got == want)
        return 0.0;
    double den = fabs(want) > FLT_MIN ? fabs(want) : FLT_MIN;
    double e = fabs((double)got - want) / den;
    return isnan(e) ? INFINITY : e;
}

/* ---- whole arrays against the reference -------------------------------------------- */

/* 0 and 1 are edge sizes, 7 and 129 odd tails of a vector loop, 100003 takes the
 * threaded path. */
static const size_t sizes[] = {0, 1, 7, 129, 1000, 100003};

static void check_all(int threads)
{
    rv_backend *be = cpu(threads);
    ref_rng rng = ref_rng_make(500 + threads);
    for (size_t a = 0; a < N_ACTS; a++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            rv_act act = acts[a];
            size_t n = sizes[s];
            float *x = ref_alloc_f(n), *y = ref_alloc_f(n), *dy = ref_alloc_f(n),
                  *dx = ref_alloc_f(n);
            ref_fill_normal(&rng, x, n, 0.0f, 3.0f);
            ref_fill_normal(&rng, dy, n, 0.0f, 1.0f);
            double *xd = ref_dup_d(x, n), *dyd = ref_dup_d(dy, n);
            double *yd = ref_alloc_d(n), *dxd = ref_alloc_d(n);
            ref_act_fwd(act, xd, yd, n);
            ref_act_bwd(act, xd, dyd, dxd, n);

            cr_assert_eq(be->act_fwd(be, act, x, y, n), RV_OK, "%s", rv_last_error());
            cr_assert_eq(be->act_bwd(be, act, x, dy, dx, n), RV_OK, "%s", rv_last_error());
            double ey = rv_rel_err(y, yd, n), ex = rv_rel_err(dx, dxd, n);
            cr_expect_leq(ey, TOL_FWD, "%s fwd n=%zu threads=%d: rel err %.3g", act_label(act),
                          n, threads, ey);
            cr_expect_leq(ex, TOL_BWD, "%s bwd n=%zu threads=%d: rel err %.3g", act_label(act),
                          n, threads, ex);

            free(x), free(y), free(dy), free(dx), free(xd), free(dyd), free(yd), free(dxd);
        }
    rv_backend_free(&be);
}

Test(act, fwd_bwd_vs_reference_threads1) { check_all(1); }
Test(act, fwd_bwd_vs_reference_threads2) { check_all(2); }

/* ---- every element of the tails ----------------------------------------------------- */

/* The range of each activation's elementwise check: far enough that the negative
 * side reaches and crosses the subnormal range (tanh: y < FLT_MIN below about
 * x = -8; quick: below about x = -51) and the positive side saturates. GELU (erf)
 * stops at -12, where y = -2e-32 (its exp flushes to 0 near x = -13.2). */
static float tail_lo(rv_act act)
{
    return act == RV_ACT_QUICK_GELU ? -64.0f : -12.0f;
}

/* Every element of the forward, and of the backward away from its zero crossing
 * (|x| >= 2; near x = -0.75 dy/dx passes through 0, where a relative error means
 * nothing), is accurate: in the negative tail y is tiny, and 1 + erf(x / sqrt 2)
 * or 1 + tanh(u) would cancel to noise in float. */
Test(act, elementwise_tails)
{
    rv_backend *be = cpu(1);
    enum { N = 4801 };
    float *x = ref_alloc_f(N), *y = ref_alloc_f(N), *dx = ref_alloc_f(N), *one = ref_alloc_f(N);
    double *xd = ref_alloc_d(N), *yd = ref_alloc_d(N), *dxd = ref_alloc_d(N),
           *oned = ref_alloc_d(N);
    for (size_t a = 0; a < N_ACTS; a++) {
        rv_act act = acts[a];
        float lo = tail_lo(act), step = -2.0f * lo / (float)(N - 1);
        for (int i = 0; i < N; i++)
            x[i] = lo + step * (float)i, one[i] = 1.0f; /* lo .. -lo */
        ref_to_double(x, xd, N);
        ref_to_double(one, oned, N);
        ref_act_fwd(act, xd, yd, N);
        ref_act_bwd(act, xd, oned, dxd, N);
        cr_assert_eq(be->act_fwd(be, act, x, y, N), RV_OK);
        cr_assert_eq(be->act_bwd(be, act, x, one, dx, N), RV_OK);
        double wf = 0.0, wb = 0.0;
        int af = 0, ab = 0, subnormal = 0;
        for (int i = 0; i < N; i++) {
            double ef = elem_err(y[i], yd[i]);
            if (!(ef <= wf))
                wf = ef, af = i;
            subnormal += yd[i] != 0.0 && fabs(yd[i]) < FLT_MIN;
            if (fabsf(x[i]) < 2.0f)
                continue;
            double eb = elem_err(dx[i], dxd[i]);
            if (!(eb <= wb))
                wb = eb, ab = i;
        }
        printf("act: %-10s x in [%g, %g]: worst elementwise rel err fwd %.3g at x=%g, "
               "bwd (|x| >= 2) %.3g at x=%g; %d subnormal outputs\n",
               act_label(act), (double)lo, (double)-lo, wf, (double)x[af], wb, (double)x[ab],
               subnormal);
        cr_expect_leq(wf, TOL_ELEM_FWD, "%s fwd: worst rel err %.3g at x=%g (got %g want %g)",
                      act_label(act), wf, (double)x[af], (double)y[af], yd[af]);
        cr_expect_leq(wb, TOL_ELEM_BWD, "%s bwd: worst rel err %.3g at x=%g (got %g want %g)",
                      act_label(act), wb, (double)x[ab], (double)dx[ab], dxd[ab]);
    }
    free(x), free(y), free(dx), free(one), free(xd), free(yd), free(dxd), free(oned);
    rv_backend_free(&be);
}

/* ---- extreme inputs ---------------------------------------------------------------- */

/* Huge, tiny and non-finite inputs: no overflow inside (x^3 of x = 3e38, e^-z of a
 * large negative z), the saturated limits exactly (y = x, dy/dx = 1 on the right;
 * y = 0, dy/dx = 0 far on the left), NaN stays NaN. */
Test(act, extremes)
{
    rv_backend *be = cpu(1);
    enum { N = 14 };
    const float x[N] = {0.0f,  -0.0f, 1e-30f, -1e-30f, 5.0f,  -5.0f, 20.0f,
                        -20.0f, 88.0f, -88.0f, 1e30f,  -1e30f, 3e38f, -3e38f};
    float y[N], dx[N], one[N], nan_in = NAN, nan_out[2];
    for (int i = 0; i < N; i++)
        one[i] = 1.0f;
    double xd[N], yd[N], dxd[N], oned[N];
    ref_to_double(x, xd, N);
    ref_to_double(one, oned, N);
    for (size_t a = 0; a < N_ACTS; a++) {
        rv_act act = acts[a];
        const char *name = act_label(act);
        ref_act_fwd(act, xd, yd, N);
        ref_act_bwd(act, xd, oned, dxd, N);
        cr_assert_eq(be->act_fwd(be, act, x, y, N), RV_OK);
        cr_assert_eq(be->act_bwd(be, act, x, one, dx, N), RV_OK);
        double wf = 0.0, wb = 0.0;
        for (int i = 0; i < N; i++) {
            double ef = elem_err(y[i], yd[i]), eb = elem_err(dx[i], dxd[i]);
            wf = ef > wf ? ef : wf;
            wb = eb > wb ? eb : wb;
            cr_expect_leq(ef, TOL_ELEM_FWD, "%s(%g) = %g, want %g", name, (double)x[i],
                          (double)y[i], yd[i]);
            cr_expect_leq(eb, TOL_ELEM_BWD, "%s'(%g) = %g, want %g", name, (double)x[i],
                          (double)dx[i], dxd[i]);
        }
        printf("act: %-10s extremes: worst elementwise rel err fwd %.3g, bwd %.3g\n", name, wf,
               wb);
        cr_assert_eq(be->act_fwd(be, act, &nan_in, &nan_out[0], 1), RV_OK);
        cr_assert_eq(be->act_bwd(be, act, &nan_in, one, &nan_out[1], 1), RV_OK);
        cr_expect(isnan(nan_out[0]) && isnan(nan_out[1]), "%s: NaN in, %g %g out", name,
                  (double)nan_out[0], (double)nan_out[1]);
    }
    rv_backend_free(&be);
}

/* The sigmoid forms at +-infinity: their limits (GELU's erf form is left out: at
 * -inf it gives -inf * 0 = NaN, as x * Phi(x) does in any float evaluation). */
Test(act, sigmoid_forms_at_infinity)
{
    rv_backend *be = cpu(1);
    const float x[2] = {INFINITY, -INFINITY}, dy[2] = {0.5f, 0.5f};
    for (size_t a = 1; a < N_ACTS; a++) {
        float y[2], dx[2];
        cr_assert_eq(be->act_fwd(be, acts[a], x, y, 2), RV_OK);
        cr_assert_eq(be->act_bwd(be, acts[a], x, dy, dx, 2), RV_OK);
        cr_expect(y[0] == INFINITY && y[1] == 0.0f && dx[0] == 0.5f && dx[1] == 0.0f,
                  "%s: y(+-inf) = %g %g, dx = %g %g", act_label(acts[a]), (double)y[0],
                  (double)y[1], (double)dx[0], (double)dx[1]);
    }
    rv_backend_free(&be);
}

/* ---- finite differences ------------------------------------------------------------- */

/* dL/dx for L = sum(act(x) * r) by central differences of the double forward;
 * both the kernel and the reference backward are held to it. */
static void check_fd(rv_act act, int threads, size_t n, ref_rng *rng)
{
    rv_backend *be = cpu(threads);
    float *x = ref_alloc_f(n), *r = ref_alloc_f(n), *dx = ref_alloc_f(n);
    ref_fill_normal(rng, x, n, 0.0f, 2.0f);
    ref_fill_normal(rng, r, n, 0.0f, 1.0f);
    double *xd = ref_dup_d(x, n), *rd = ref_dup_d(r, n), *g = ref_alloc_d(n),
           *rx = ref_alloc_d(n);
    const double h = 1e-6;
    for (size_t i = 0; i < n; i++) {
        /* only element i changes: the loss difference is r_i * (act(x+h) - act(x-h)) */
        double xp = xd[i] + h, xm = xd[i] - h, yp, ym;
        ref_act_fwd(act, &xp, &yp, 1);
        ref_act_fwd(act, &xm, &ym, 1);
        g[i] = rd[i] * (yp - ym) / (2 * h);
    }
    cr_assert_eq(be->act_bwd(be, act, x, r, dx, n), RV_OK);
    double e = rv_rel_err(dx, g, n);
    cr_expect_leq(e, TOL_BWD, "%s bwd vs finite differences n=%zu: %.3g", act_label(act), n, e);
    ref_act_bwd(act, xd, rd, rx, n);
    double er = rv_rel_err_d(rx, g, n);
    cr_expect_leq(er, TOL_REF_FD, "ref_act_bwd(%s) vs finite differences n=%zu: %.3g",
                  act_label(act), n, er);
    free(x), free(r), free(dx), free(xd), free(rd), free(g), free(rx);
    rv_backend_free(&be);
}

Test(act, bwd_vs_finite_differences)
{
    ref_rng rng = ref_rng_make(17);
    for (size_t a = 0; a < N_ACTS; a++) {
        check_fd(acts[a], 1, 1, &rng);
        check_fd(acts[a], 1, 7, &rng);
        check_fd(acts[a], 2, 129, &rng);
    }
}

/* ---- in place ----------------------------------------------------------------------- */

/* y may be x, dx may be dy: the same bits as out of place, threaded (N > the
 * threshold) and not. */
Test(act, in_place)
{
    rv_backend *be = cpu(2);
    ref_rng rng = ref_rng_make(23);
    const size_t ns[] = {70001, 33};
    for (size_t a = 0; a < N_ACTS; a++)
        for (int k = 0; k < 2; k++) {
            rv_act act = acts[a];
            size_t n = ns[k];
            float *x = ref_alloc_f(n), *y = ref_alloc_f(n), *dy = ref_alloc_f(n),
                  *dx = ref_alloc_f(n);
            ref_fill_normal(&rng, x, n, 0.0f, 2.0f);
            ref_fill_normal(&rng, dy, n, 0.0f, 1.0f);
            cr_assert_eq(be->act_fwd(be, act, x, y, n), RV_OK);
            cr_assert_eq(be->act_bwd(be, act, x, dy, dx, n), RV_OK);
            float *xi = ref_dup_f(x, n), *dyi = ref_dup_f(dy, n);
            cr_assert_eq(be->act_fwd(be, act, xi, xi, n), RV_OK);
            cr_assert_eq(be->act_bwd(be, act, x, dyi, dyi, n), RV_OK);
            cr_expect_arr_eq(xi, y, n * sizeof(float), "%s n=%zu: in-place forward differs",
                             act_label(act), n);
            cr_expect_arr_eq(dyi, dx, n * sizeof(float), "%s n=%zu: in-place backward differs",
                             act_label(act), n);
            free(x), free(y), free(dy), free(dx), free(xi), free(dyi);
        }
    rv_backend_free(&be);
}

/* ---- arguments ---------------------------------------------------------------------- */

/* RV_ERR_INVALID, with a message that holds `want`; clears the error. */
static void expect_invalid(rv_status st, const char *want, const char *what)
{
    cr_expect_eq(st, RV_ERR_INVALID, "%s: status %d, want RV_ERR_INVALID", what, (int)st);
    cr_expect(strstr(rv_last_error(), want) != NULL, "%s: message '%s' lacks '%s'", what,
              rv_last_error(), want);
    rv_clear_error();
}

Test(act, invalid_arguments)
{
    rv_backend *be = cpu(1);
    float x[4] = {0}, y[4];
    for (size_t a = 0; a < N_ACTS; a++) {
        rv_act act = acts[a];
        expect_invalid(be->act_fwd(be, act, NULL, y, 4), "act_fwd", "fwd x NULL");
        expect_invalid(be->act_fwd(be, act, x, NULL, 4), "act_fwd", "fwd y NULL");
        expect_invalid(be->act_bwd(be, act, NULL, x, y, 4), "act_bwd", "bwd x NULL");
        expect_invalid(be->act_bwd(be, act, x, NULL, y, 4), "act_bwd", "bwd dy NULL");
        expect_invalid(be->act_bwd(be, act, x, x, NULL, 4), "act_bwd", "bwd dx NULL");
        cr_expect_eq(be->act_fwd(be, act, NULL, NULL, 0), RV_OK);
        cr_expect_eq(be->act_bwd(be, act, NULL, NULL, NULL, 0), RV_OK);
    }
    /* An unknown activation is refused, naming the value, even with nothing to do,
     * and leaves the output alone. */
    const int bad[] = {3, -1, 1000};
    for (int i = 0; i < 3; i++) {
        char num[32];
        snprintf(num, sizeof num, "activation %d", bad[i]);
        y[0] = 42.0f;
        expect_invalid(be->act_fwd(be, (rv_act)bad[i], x, y, 4), num, "fwd unknown act");
        expect_invalid(be->act_bwd(be, (rv_act)bad[i], x, x, y, 4), num, "bwd unknown act");
        expect_invalid(be->act_fwd(be, (rv_act)bad[i], NULL, NULL, 0), num,
                       "fwd unknown act, n=0");
        cr_expect_eq(y[0], 42.0f, "unknown act %d wrote the output", bad[i]);
    }
    rv_backend_free(&be);
}
