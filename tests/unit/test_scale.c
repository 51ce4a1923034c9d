/* test_scale.c: the CPU backend's layer-scale ops against naive double loops
 * (tests/ref): scale_add (y += x * gamma), scale_cols (x *= gamma) and
 * colsum_mul_add (dst += column sums of a * b, summed in double) over empty, tiny,
 * odd and threaded shapes with 1 and 2 threads; nothing past the tensor is
 * written; colsum_mul_add gives the same bits for any thread count and beats a
 * float accumulation on data built to defeat one; bad arguments are refused. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_ops.h"
#include "rv_backend.h"

/* scale_add rounds once or twice (with or without a fused multiply-add). */
#define TOL_SCALE_ADD 2.5e-7
/* colsum_mul_add: the double sum rounded to float, then added to dst (two roundings). */
#define TOL_COLSUM 2.5e-7
/* Entries past the tensor, which must stay as they are. */
#define TAIL 17
#define SENTINEL 1234.5f

static rv_backend *cpu(int threads)
{
    rv_backend *be = NULL;
    cr_assert_eq(rv_backend_cpu_create(threads, &be), RV_OK, "%s", rv_last_error());
    return be;
}

/* rows x cols: empty both ways, one element, odd shapes below and above the
 * threaded threshold (64k elements), several 64-column blocks (colsum_mul_add). */
static const int shapes[][2] = {{0, 5},     {5, 0},   {0, 0},    {1, 1},   {7, 13},
                                {1003, 37}, {5, 200}, {300, 515}, {2000, 130}};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

static size_t count_changed_tail(const float *x, size_t n)
{
    size_t bad = 0;
    for (size_t i = n; i < n + TAIL; i++)
        bad += x[i] != SENTINEL;
    return bad;
}

static float *with_tail(size_t n)
{
    float *x = ref_alloc_f(n + TAIL);
    for (size_t i = n; i < n + TAIL; i++)
        x[i] = SENTINEL;
    return x;
}

static void check_scale_add(int threads)
{
    rv_backend *be = cpu(threads);
    ref_rng rng = ref_rng_make(700 + threads);
    for (size_t s = 0; s < N_SHAPES; s++) {
        int rows = shapes[s][0], cols = shapes[s][1];
        size_t n = (size_t)rows * cols;
        float *y = with_tail(n), *x = ref_alloc_f(n), *gamma = ref_alloc_f(cols);
        ref_fill_uniform(&rng, y, n, -2.0f, 2.0f);
        ref_fill_uniform(&rng, x, n, -2.0f, 2.0f);
        ref_fill_normal(&rng, gamma, cols, 0.0f, 0.3f);
        double *yd = ref_dup_d(y, n), *xd = ref_dup_d(x, n), *gd = ref_dup_d(gamma, cols);
        ref_scale_add(yd, xd, gd, rows, cols);
        cr_assert_eq(be->scale_add(be, y, x, gamma, rows, cols), RV_OK, "%s", rv_last_error());
        double e = rv_rel_err(y, yd, n);
        cr_expect_leq(e, TOL_SCALE_ADD, "scale_add %dx%d threads=%d: rel err %.3g", rows, cols,
                      threads, e);
        cr_expect_eq(count_changed_tail(y, n), 0, "scale_add %dx%d wrote past the end", rows,
                     cols);
        free(y), free(x), free(gamma), free(yd), free(xd), free(gd);
    }
    rv_backend_free(&be);
}

Test(scale, scale_add_threads1) { check_scale_add(1); }
Test(scale, scale_add_threads2) { check_scale_add(2); }

/* One rounded product per element: the float result is the double one rounded,
 * exactly. */
static void check_scale_cols(int threads)
{
    rv_backend *be = cpu(threads);
    ref_rng rng = ref_rng_make(800 + threads);
    for (size_t s = 0; s < N_SHAPES; s++) {
        int rows = shapes[s][0], cols = shapes[s][1];
        size_t n = (size_t)rows * cols;
        float *x = with_tail(n), *gamma = ref_alloc_f(cols), *want = ref_alloc_f(n);
        ref_fill_uniform(&rng, x, n, -3.0f, 3.0f);
        ref_fill_normal(&rng, gamma, cols, 0.0f, 0.3f);
        double *xd = ref_dup_d(x, n), *gd = ref_dup_d(gamma, cols);
        ref_scale_cols(xd, gd, rows, cols);
        ref_to_float(xd, want, n);
        cr_assert_eq(be->scale_cols(be, x, gamma, rows, cols), RV_OK, "%s", rv_last_error());
        cr_expect_arr_eq(x, want, n * sizeof(float), "scale_cols %dx%d threads=%d differs", rows,
                         cols, threads);
        cr_expect_eq(count_changed_tail(x, n), 0, "scale_cols %dx%d wrote past the end", rows,
                     cols);
        free(x), free(gamma), free(want), free(xd), free(gd);
    }
    rv_backend_free(&be);
}

Test(scale, scale_cols_threads1) { check_scale_cols(1); }
Test(scale, scale_cols_threads2) { check_scale_cols(2); }

/* a has a third of its entries 1e4 times larger, so column sums cancel and a
 * float accumulation loses digits (checked below on the largest shape). */
static void fill_colsum_inputs(ref_rng *rng, float *a, float *b, size_t n)
{
    ref_fill_uniform(rng, a, n, -1.0f, 1.0f);
    ref_fill_uniform(rng, b, n, -1.0f, 1.0f);
    for (size_t i = 0; i < n; i += 3)
        a[i] *= 1e4f;
}

static void check_colsum_mul_add(int threads)
{
    rv_backend *be = cpu(threads);
    ref_rng rng = ref_rng_make(900 + threads);
    for (size_t s = 0; s < N_SHAPES; s++) {
        int rows = shapes[s][0], cols = shapes[s][1];
        size_t n = (size_t)rows * cols;
        float *a = ref_alloc_f(n), *b = ref_alloc_f(n), *dst = with_tail((size_t)cols);
        fill_colsum_inputs(&rng, a, b, n);
        for (int j = 0; j < cols; j++)
            dst[j] = (float)j - 3.5f;
        double *ad = ref_dup_d(a, n), *bd = ref_dup_d(b, n), *dd = ref_dup_d(dst, cols);
        ref_colsum_mul_add(ad, bd, rows, cols, dd);
        cr_assert_eq(be->colsum_mul_add(be, a, b, rows, cols, dst), RV_OK, "%s",
                     rv_last_error());
        double e = rv_rel_err(dst, dd, (size_t)cols);
        cr_expect_leq(e, TOL_COLSUM, "colsum_mul_add %dx%d threads=%d: rel err %.3g", rows, cols,
                      threads, e);
        cr_expect_eq(count_changed_tail(dst, (size_t)cols), 0,
                     "colsum_mul_add %dx%d wrote past dst", rows, cols);
        free(a), free(b), free(dst), free(ad), free(bd), free(dd);
    }
    rv_backend_free(&be);
}

Test(scale, colsum_mul_add_threads1) { check_colsum_mul_add(1); }
Test(scale, colsum_mul_add_threads2) { check_colsum_mul_add(2); }

/* Each column is summed by one thread in row order: 1, 2 and 3 threads give the
 * same bits. And the data does defeat a float accumulation, so the tolerance
 * above does check that the sums run in double. */
Test(scale, colsum_mul_add_deterministic_and_in_double)
{
    const int rows = 2000, cols = 130;
    const size_t n = (size_t)rows * cols;
    ref_rng rng = ref_rng_make(77);
    float *a = ref_alloc_f(n), *b = ref_alloc_f(n), *out[3];
    fill_colsum_inputs(&rng, a, b, n);
    for (int t = 0; t < 3; t++) {
        rv_backend *be = cpu(t + 1);
        out[t] = ref_alloc_f(cols);
        cr_assert_eq(be->colsum_mul_add(be, a, b, rows, cols, out[t]), RV_OK);
        rv_backend_free(&be);
    }
    cr_expect_arr_eq(out[1], out[0], cols * sizeof(float), "2 threads differ from 1");
    cr_expect_arr_eq(out[2], out[0], cols * sizeof(float), "3 threads differ from 1");

    double *ad = ref_dup_d(a, n), *bd = ref_dup_d(b, n), *want = ref_alloc_d(cols);
    ref_colsum_mul_add(ad, bd, rows, cols, want);
    float *fsum = ref_alloc_f(cols);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            fsum[j] += a[(size_t)i * cols + j] * b[(size_t)i * cols + j];
    double ef = rv_rel_err(fsum, want, cols);
    cr_expect_gt(ef, 4 * TOL_COLSUM, "a float accumulation is already within %.3g", ef);
    free(a), free(b), free(ad), free(bd), free(want), free(fsum);
    for (int t = 0; t < 3; t++)
        free(out[t]);
}

/* RV_ERR_INVALID with the op's name in the message; clears the error. */
static void expect_invalid(rv_status st, const char *op, const char *what)
{
    cr_expect_eq(st, RV_ERR_INVALID, "%s: status %d, want RV_ERR_INVALID", what, (int)st);
    cr_expect(strstr(rv_last_error(), op) != NULL, "%s: message '%s'", what, rv_last_error());
    rv_clear_error();
}

Test(scale, invalid_arguments)
{
    rv_backend *be = cpu(1);
    float x[6] = {0}, y[6] = {0}, g[3] = {1, 1, 1};
    expect_invalid(be->scale_add(be, y, x, g, -1, 3), "scale_add", "negative rows");
    expect_invalid(be->scale_add(be, y, x, g, 2, -3), "scale_add", "negative cols");
    expect_invalid(be->scale_add(be, NULL, x, g, 2, 3), "scale_add", "y NULL");
    expect_invalid(be->scale_add(be, y, NULL, g, 2, 3), "scale_add", "x NULL");
    expect_invalid(be->scale_add(be, y, x, NULL, 2, 3), "scale_add", "gamma NULL");
    expect_invalid(be->scale_cols(be, x, g, -2, 3), "scale_cols", "negative rows");
    expect_invalid(be->scale_cols(be, NULL, g, 2, 3), "scale_cols", "x NULL");
    expect_invalid(be->scale_cols(be, x, NULL, 2, 3), "scale_cols", "gamma NULL");
    expect_invalid(be->colsum_mul_add(be, x, y, 2, -3, g), "colsum_mul_add", "negative cols");
    expect_invalid(be->colsum_mul_add(be, NULL, y, 2, 3, g), "colsum_mul_add", "a NULL");
    expect_invalid(be->colsum_mul_add(be, x, NULL, 2, 3, g), "colsum_mul_add", "b NULL");
    expect_invalid(be->colsum_mul_add(be, x, y, 2, 3, NULL), "colsum_mul_add", "dst NULL");
    /* Empty shapes read nothing, so NULL is fine there; dst stays as it is. */
    cr_expect_eq(be->scale_add(be, NULL, NULL, NULL, 0, 3), RV_OK);
    cr_expect_eq(be->scale_cols(be, NULL, NULL, 4, 0), RV_OK);
    cr_expect_eq(be->colsum_mul_add(be, NULL, NULL, 0, 3, g), RV_OK);
    cr_expect(g[0] == 1.0f && g[1] == 1.0f && g[2] == 1.0f, "rows=0 changed dst");
    rv_backend_free(&be);
}
