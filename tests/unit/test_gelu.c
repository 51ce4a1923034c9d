/* test_gelu.c: the CPU backend's GELU (erf form) forward and backward against the
 * double reference (tests/ref) with 1 and 2 threads, per-element accuracy in the
 * tails, the backward against central finite differences of sum(gelu(x) * r) in
 * double, in-place use and argument validation. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_ops.h"
#include "rv_backend.h"

#define TOL_FWD 1e-5
#define TOL_BWD 1e-4

static rv_backend *cpu(int threads)
{
    rv_backend *be = NULL;
    rv_status st = rv_backend_cpu_create(threads, &be);
    cr_assert_eq(st, RV_OK, "rv_backend_cpu_create: %s", rv_last_error());
    return be;
}

/* 100003 elements take the threaded path. */
static const size_t sizes[] = {1, 7, 129, 1000, 100003};

static void check_all(int threads)
{
    rv_backend *be = cpu(threads);
    ref_rng rng = ref_rng_make(500 + threads);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        float *x = ref_alloc_f(n), *y = ref_alloc_f(n), *dy = ref_alloc_f(n),
              *dx = ref_alloc_f(n);
        ref_fill_normal(&rng, x, n, 0.0f, 3.0f);
        ref_fill_normal(&rng, dy, n, 0.0f, 1.0f);
        double *xd = ref_dup_d(x, n), *dyd = ref_dup_d(dy, n);
        double *yd = ref_alloc_d(n), *dxd = ref_alloc_d(n);
        ref_gelu_fwd(xd, yd, n);
        ref_gelu_bwd(xd, dyd, dxd, n);

        cr_assert_eq(be->gelu_fwd(be, x, y, n), RV_OK, "%s", rv_last_error());
        cr_assert_eq(be->gelu_bwd(be, x, dy, dx, n), RV_OK, "%s", rv_last_error());
        double ey = rv_rel_err(y, yd, n), ex = rv_rel_err(dx, dxd, n);
        cr_expect_leq(ey, TOL_FWD, "gelu_fwd n=%zu threads=%d: rel err %.3g", n, threads, ey);
        cr_expect_leq(ex, TOL_BWD, "gelu_bwd n=%zu threads=%d: rel err %.3g", n, threads, ex);

        free(x), free(y), free(dy), free(dx), free(xd), free(dyd), free(yd), free(dxd);
    }
    rv_backend_free(&be);
}

Test(gelu, fwd_bwd_vs_reference_threads1) { check_all(1); }
Test(gelu, fwd_bwd_vs_reference_threads2) { check_all(2); }

/* Every element of the forward, not just the largest, is accurate: in the negative
 * tail y is tiny and 1 + erf(x / sqrt 2) would cancel to noise in float. */
Test(gelu, fwd_elementwise_tails)
{
    rv_backend *be = cpu(1);
    enum { N = 2401 };
    float *x = ref_alloc_f(N), *y = ref_alloc_f(N);
    for (int i = 0; i < N; i++)
        x[i] = -12.0f + 0.01f * (float)i; /* -12 .. 12 */
    double *xd = ref_dup_d(x, N), *yd = ref_alloc_d(N);
    ref_gelu_fwd(xd, yd, N);
    cr_assert_eq(be->gelu_fwd(be, x, y, N), RV_OK);
    double worst = 0.0;
    int at = 0;
    for (int i = 0; i < N; i++) {
        double e = yd[i] == 0.0 ? fabs((double)y[i]) : fabs(y[i] - yd[i]) / fabs(yd[i]);
        if (!(e <= worst))
            worst = e, at = i;
    }
    cr_expect_leq(worst, TOL_FWD, "worst elementwise rel err %.3g at x=%g (got %g want %g)",
                  worst, (double)x[at], (double)y[at], yd[at]);
    free(x), free(y), free(xd), free(yd);
    rv_backend_free(&be);
}

/* Huge, tiny and non-finite inputs: no overflow inside, NaN stays NaN. */
Test(gelu, extremes)
{
    rv_backend *be = cpu(1);
    enum { N = 12 };
    const float x[N] = {0.0f, -0.0f, 1e-30f, -1e-30f, 20.0f, -20.0f, 88.0f, -88.0f,
                        1e30f, -1e30f, 3e38f, -3e38f};
    float y[N], dx[N], one[N], nan_in = NAN, nan_out[2];
    for (int i = 0; i < N; i++)
        one[i] = 1.0f;
    double xd[N], yd[N], dxd[N], oned[N];
    ref_to_double(x, xd, N);
    ref_to_double(one, oned, N);
    ref_gelu_fwd(xd, yd, N);
    ref_gelu_bwd(xd, oned, dxd, N);
    cr_assert_eq(be->gelu_fwd(be, x, y, N), RV_OK);
    cr_assert_eq(be->gelu_bwd(be, x, one, dx, N), RV_OK);
    for (int i = 0; i < N; i++) {
        cr_expect(fabs(y[i] - yd[i]) <= 1e-6 * fabs(yd[i]) + 1e-36, "gelu(%g) = %g, want %g",
                  (double)x[i], (double)y[i], yd[i]);
        cr_expect(fabs(dx[i] - dxd[i]) <= 1e-6, "gelu'(%g) = %g, want %g", (double)x[i],
                  (double)dx[i], dxd[i]);
    }
    cr_assert_eq(be->gelu_fwd(be, &nan_in, &nan_out[0], 1), RV_OK);
    cr_assert_eq(be->gelu_bwd(be, &nan_in, one, &nan_out[1], 1), RV_OK);
    cr_expect(isnan(nan_out[0]) && isnan(nan_out[1]), "NaN in, %g %g out",
              (double)nan_out[0], (double)nan_out[1]);
    rv_backend_free(&be);
}

/* dL/dx for L = sum(gelu(x) * r) by central differences in double. */
static void check_fd(int threads, size_t n, ref_rng *rng)
{
    rv_backend *be = cpu(threads);
    float *x = ref_alloc_f(n), *r = ref_alloc_f(n), *dx = ref_alloc_f(n);
    ref_fill_normal(rng, x, n, 0.0f, 2.0f);
    ref_fill_normal(rng, r, n, 0.0f, 1.0f);
    double *xd = ref_dup_d(x, n), *rd = ref_dup_d(r, n), *g = ref_alloc_d(n),
           *rx = ref_alloc_d(n);
    const double h = 1e-6;
    for (size_t i = 0; i < n; i++) {
        /* only element i changes: the loss difference is r_i * (gelu(x+h) - gelu(x-h)) */
        double xp = xd[i] + h, xm = xd[i] - h, yp, ym;
        ref_gelu_fwd(&xp, &yp, 1);
        ref_gelu_fwd(&xm, &ym, 1);
        g[i] = rd[i] * (yp - ym) / (2 * h);
    }
    cr_assert_eq(be->gelu_bwd(be, x, r, dx, n), RV_OK);
    double e = rv_rel_err(dx, g, n);
    cr_expect_leq(e, TOL_BWD, "gelu_bwd vs finite differences n=%zu: %.3g", n, e);
    ref_gelu_bwd(xd, rd, rx, n);
    double er = rv_rel_err_d(rx, g, n);
    cr_expect_leq(er, 1e-7, "ref_gelu_bwd vs finite differences n=%zu: %.3g", n, er);
    free(x), free(r), free(dx), free(xd), free(rd), free(g), free(rx);
    rv_backend_free(&be);
}

Test(gelu, bwd_vs_finite_differences)
{
    ref_rng rng = ref_rng_make(17);
    check_fd(1, 1, &rng);
    check_fd(1, 7, &rng);
    check_fd(2, 129, &rng);
}

/* y may be x, dx may be dy. */
Test(gelu, in_place)
{
    rv_backend *be = cpu(2);
    ref_rng rng = ref_rng_make(23);
    enum { N = 70001 };
    float *x = ref_alloc_f(N), *y = ref_alloc_f(N), *dy = ref_alloc_f(N),
          *dx = ref_alloc_f(N);
    ref_fill_normal(&rng, x, N, 0.0f, 2.0f);
    ref_fill_normal(&rng, dy, N, 0.0f, 1.0f);
    cr_assert_eq(be->gelu_fwd(be, x, y, N), RV_OK);
    cr_assert_eq(be->gelu_bwd(be, x, dy, dx, N), RV_OK);
    float *xi = ref_dup_f(x, N), *dyi = ref_dup_f(dy, N);
    cr_assert_eq(be->gelu_fwd(be, xi, xi, N), RV_OK);
    cr_assert_eq(be->gelu_bwd(be, x, dyi, dyi, N), RV_OK);
    cr_expect_arr_eq(xi, y, N * sizeof(float), "in-place forward differs");
    cr_expect_arr_eq(dyi, dx, N * sizeof(float), "in-place backward differs");
    free(x), free(y), free(dy), free(dx), free(xi), free(dyi);
    rv_backend_free(&be);
}

static void expect_invalid(rv_status st, const char *what)
{
    cr_expect_eq(st, RV_ERR_INVALID, "%s: status %d, want RV_ERR_INVALID", what, (int)st);
    cr_expect(strstr(rv_last_error(), "gelu") != NULL, "%s: message '%s'", what,
              rv_last_error());
    rv_clear_error();
}

Test(gelu, invalid_arguments)
{
    rv_backend *be = cpu(1);
    float x[4] = {0}, y[4];
    expect_invalid(be->gelu_fwd(be, NULL, y, 4), "fwd x NULL");
    expect_invalid(be->gelu_fwd(be, x, NULL, 4), "fwd y NULL");
    expect_invalid(be->gelu_bwd(be, NULL, x, y, 4), "bwd x NULL");
    expect_invalid(be->gelu_bwd(be, x, NULL, y, 4), "bwd dy NULL");
    expect_invalid(be->gelu_bwd(be, x, x, NULL, 4), "bwd dx NULL");
    cr_expect_eq(be->gelu_fwd(be, NULL, NULL, 0), RV_OK);
    cr_expect_eq(be->gelu_bwd(be, NULL, NULL, NULL, 0), RV_OK);
    rv_backend_free(&be);
}
