/* test_softmax.c: the CPU backend's row-wise softmax against the double reference
 * (tests/ref) on odd shapes with 1 and 2 threads, with -inf (masked) entries and a
 * fully masked row, inputs large enough to overflow a naive exp, in-place use and
 * argument validation. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_ops.h"
#include "rv_backend.h"

/* Tolerances, relative. A row's exponentials sum in f32 (epsilon 1.2e-7) over
 * cols <= 1000 entries: rounding of sqrt(cols) * eps ~ 4e-6 in the normaliser,
 * which every output shares; so for the normalised error (rv_rel_err) of the
 * outputs and for a row's sum against 1 (a fully masked row sums to exactly 0). */
#define TOL_FWD 1e-5

static rv_backend *cpu(int threads)
{
    rv_backend *be = NULL;
    rv_status st = rv_backend_cpu_create(threads, &be);
    cr_assert_eq(st, RV_OK, "rv_backend_cpu_create: %s", rv_last_error());
    return be;
}

/* Runs the backend and the reference on x and compares; returns the output. */
static float *run(rv_backend *be, const float *x, int rows, int cols)
{
    size_t n = (size_t)rows * cols;
    float *y = ref_alloc_f(n);
    double *xd = ref_dup_d(x, n), *yd = ref_alloc_d(n);
    ref_softmax(xd, yd, rows, cols);
    cr_assert_eq(be->softmax_fwd(be, x, y, rows, cols), RV_OK, "%s", rv_last_error());
    double e = rv_rel_err(y, yd, n);
    cr_expect_leq(e, TOL_FWD, "softmax %dx%d threads=%d: rel err %.3g", rows, cols,
                  be->threads, e);
    free(xd), free(yd);
    return y;
}

static const int shapes[][2] = {
    {1, 1}, {1, 7}, {7, 129}, {129, 1000}, {1000, 7}, {1000, 129},
};

static void check_all(int threads)
{
    rv_backend *be = cpu(threads);
    ref_rng rng = ref_rng_make(700 + threads);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int rows = shapes[s][0], cols = shapes[s][1];
        size_t n = (size_t)rows * cols;
        float *x = ref_alloc_f(n);
        ref_fill_normal(&rng, x, n, 0.0f, 3.0f);
        free(run(be, x, rows, cols));
        free(x);
    }
    rv_backend_free(&be);
}

Test(softmax, vs_reference_threads1) { check_all(1); }
Test(softmax, vs_reference_threads2) { check_all(2); }

/* About a third of the entries masked, row 0 masked everywhere, row 1 with a single
 * visible entry: masked entries are exactly 0, the fully masked row is all 0 (not
 * NaN), every other row sums to 1. */
static void check_masked(int threads)
{
    rv_backend *be = cpu(threads);
    ref_rng rng = ref_rng_make(31 + threads);
    enum { R = 257, C = 129 }; /* threaded with 2 */
    float *x = ref_alloc_f(R * C);
    ref_fill_normal(&rng, x, R * C, 0.0f, 4.0f);
    for (int i = 0; i < R * C; i++)
        if (ref_rng_uniform(&rng) < 0.35)
            x[i] = -INFINITY;
    for (int j = 0; j < C; j++) {
        x[j] = -INFINITY;
        x[C + j] = j == 5 ? 2.5f : -INFINITY;
    }
    float *y = run(be, x, R, C);
    for (int i = 0; i < R; i++) {
        double sum = 0.0;
        for (int j = 0; j < C; j++) {
            float v = y[(size_t)i * C + j];
            cr_assert(!isnan(v), "NaN at row %d col %d", i, j);
            if (x[(size_t)i * C + j] == -INFINITY)
                cr_assert_eq(v, 0.0f, "masked entry (%d, %d) = %g", i, j, (double)v);
            sum += v;
        }
        double want = i == 0 ? 0.0 : 1.0;
        cr_expect(fabs(sum - want) <= TOL_FWD * want, "row %d sums to %.9g, want %g", i, sum, want);
    }
    cr_expect_eq(y[C + 5], 1.0f, "single visible entry: %g", (double)y[C + 5]);
    free(x), free(y);
    rv_backend_free(&be);
}

Test(softmax, masked_threads1) { check_masked(1); }
Test(softmax, masked_threads2) { check_masked(2); }

/* exp(100) overflows float and exp(-1000) underflows: only a max-shifted softmax
 * gets these rows right. */
Test(softmax, large_magnitudes)
{
    rv_backend *be = cpu(1);
    ref_rng rng = ref_rng_make(41);
    enum { R = 4, C = 333 };
    float *x = ref_alloc_f(R * C);
    ref_fill_uniform(&rng, x, C, 80.0f, 120.0f);
    ref_fill_uniform(&rng, x + C, C, -1000.0f, -990.0f);
    ref_fill_uniform(&rng, x + 2 * C, C, 1e30f, 2e30f);
    ref_fill_uniform(&rng, x + 3 * C, C, -3.0f, 3.0f);
    x[3 * C + 7] = 3e38f; /* one huge entry takes the whole row */
    float *y = run(be, x, R, C);
    for (int i = 0; i < R * C; i++)
        cr_assert(isfinite(y[i]), "non-finite output %g at %d", (double)y[i], i);
    cr_expect_eq(y[3 * C + 7], 1.0f);
    free(x), free(y);
    rv_backend_free(&be);
}

Test(softmax, in_place)
{
    rv_backend *be = cpu(2);
    ref_rng rng = ref_rng_make(43);
    enum { R = 300, C = 200 };
    float *x = ref_alloc_f(R * C), *y = ref_alloc_f(R * C);
    ref_fill_normal(&rng, x, R * C, 0.0f, 3.0f);
    x[17] = -INFINITY;
    cr_assert_eq(be->softmax_fwd(be, x, y, R, C), RV_OK);
    cr_assert_eq(be->softmax_fwd(be, x, x, R, C), RV_OK);
    cr_expect_arr_eq(x, y, sizeof(float) * R * C, "in-place softmax differs");
    free(x), free(y);
    rv_backend_free(&be);
}

static void expect_invalid(rv_status st, const char *what)
{
    cr_expect_eq(st, RV_ERR_INVALID, "%s: status %d, want RV_ERR_INVALID", what, (int)st);
    cr_expect(strstr(rv_last_error(), "softmax") != NULL, "%s: message '%s'", what,
              rv_last_error());
    rv_clear_error();
}

Test(softmax, invalid_arguments)
{
    rv_backend *be = cpu(1);
    float x[8] = {0}, y[8];
    expect_invalid(be->softmax_fwd(be, x, y, -1, 4), "rows < 0");
    expect_invalid(be->softmax_fwd(be, x, y, 2, -4), "cols < 0");
    expect_invalid(be->softmax_fwd(be, NULL, y, 2, 4), "x NULL");
    expect_invalid(be->softmax_fwd(be, x, NULL, 2, 4), "y NULL");
    cr_expect_eq(be->softmax_fwd(be, NULL, NULL, 0, 4), RV_OK);
    cr_expect_eq(be->softmax_fwd(be, NULL, NULL, 3, 0), RV_OK);
    rv_backend_free(&be);
}
