/* test_gemm.c: the CPU backend's gemm and bias_add against the naive double
 * reference (tests/ref), over odd shapes, all four transpose combinations,
 * alpha/beta other than 1/0, padded leading dimensions and 1 or 2 threads; plus
 * argument validation and the shared comparison helpers everything else uses. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "ref_ops.h"
#include "rv_backend.h"

/* Tolerances, on normalised errors (rv_rel_err: max |got - want| / max |want|).
 * gemm: k-term dot products of N(0, 1) entries in f32 (epsilon 1.2e-7), however
 * the BLAS blocks them: the rounding grows like sqrt(k) * eps, about 4e-6 at the
 * largest k here (1000), plus beta * C's one rounding. */
#define TOL_FWD 1e-5
/* bias_add: one f32 addition an entry, at most half an ulp of the sum, so under
 * FLT_EPSILON of the largest entry. */
#define TOL_BIAS FLT_EPSILON

static rv_backend *cpu(int threads)
{
    rv_backend *be = NULL;
    rv_status st = rv_backend_cpu_create(threads, &be);
    cr_assert_eq(st, RV_OK, "rv_backend_cpu_create: %s", rv_last_error());
    return be;
}

/* One gemm against ref_gemm on fresh random operands. Every stored entry of A, B
 * (padding included) is random, so reading padding or the wrong transpose shows;
 * the padding columns of C must come back bit-identical. With beta == 0 the m x n
 * block of C starts as NaN, which a correct gemm never reads. */
static void check_gemm(rv_backend *be, ref_rng *rng, int ta, int tb, int m, int n, int k,
                       float alpha, float beta, int pad)
{
    int a_rows = ta ? k : m, a_cols = ta ? m : k;
    int b_rows = tb ? n : k, b_cols = tb ? k : n;
    int lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
    size_t na = (size_t)a_rows * lda, nb = (size_t)b_rows * ldb, nc = (size_t)m * ldc;

    float *a = ref_alloc_f(na), *b = ref_alloc_f(nb), *c = ref_alloc_f(nc);
    ref_fill_normal(rng, a, na, 0.0f, 1.0f);
    ref_fill_normal(rng, b, nb, 0.0f, 1.0f);
    ref_fill_normal(rng, c, nc, 0.0f, 1.0f);
    if (beta == 0.0f)
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                c[(size_t)i * ldc + j] = NAN;
    float *c0 = ref_dup_f(c, nc);
    double *ad = ref_dup_d(a, na), *bd = ref_dup_d(b, nb), *cd = ref_dup_d(c, nc);

    ref_gemm(ta, tb, m, n, k, alpha, ad, lda, bd, ldb, beta, cd, ldc);
    rv_status st = be->gemm(be, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    cr_assert_eq(st, RV_OK, "gemm: %s", rv_last_error());

    double err = rv_rel_err(c, cd, nc);
    cr_expect_leq(err, TOL_FWD,
                  "gemm ta=%d tb=%d m=%d n=%d k=%d alpha=%g beta=%g pad=%d threads=%d: "
                  "rel err %.3g",
                  ta, tb, m, n, k, (double)alpha, (double)beta, pad, be->threads, err);
    for (int i = 0; pad > 0 && i < m; i++)
        cr_expect_arr_eq(c + (size_t)i * ldc + n, c0 + (size_t)i * ldc + n,
                         (size_t)pad * sizeof(float), "gemm wrote C padding (row %d)", i);

    free(a), free(b), free(c), free(c0), free(ad), free(bd), free(cd);
}

static const int shapes[][3] = {
    /* m, n, k */
    {1, 1, 1}, {7, 129, 1}, {129, 7, 1000}, {1000, 129, 7}, {1, 1000, 129}, {129, 65, 257},
};

static void check_all(int threads)
{
    rv_backend *be = cpu(threads);
    ref_rng rng = ref_rng_make(1000 + threads);
    const float ab[][2] = {{1.0f, 0.0f}, {-0.75f, 1.25f}, {0.37f, 0.0f}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (size_t p = 0; p < sizeof ab / sizeof ab[0]; p++)
                    for (int pad = 0; pad <= 5; pad += 5)
                        check_gemm(be, &rng, ta, tb, shapes[s][0], shapes[s][1],
                                   shapes[s][2], ab[p][0], ab[p][1], pad);
    rv_backend_free(&be);
}

Test(gemm, shapes_transposes_threads1) { check_all(1); }
Test(gemm, shapes_transposes_threads2) { check_all(2); }

/* Large enough that the GEMM library really splits the work over the team. */
Test(gemm, large_threaded)
{
    rv_backend *be = cpu(2);
    ref_rng rng = ref_rng_make(7);
    check_gemm(be, &rng, 0, 1, 384, 512, 256, 1.0f, 0.0f, 3);
    check_gemm(be, &rng, 1, 0, 300, 200, 512, 0.5f, -1.0f, 0);
    rv_backend_free(&be);
}

/* k == 0 and alpha == 0: C = beta * C without touching A and B. */
Test(gemm, k_zero_and_alpha_zero)
{
    rv_backend *be = cpu(1);
    ref_rng rng = ref_rng_make(11);
    check_gemm(be, &rng, 0, 0, 7, 9, 0, 1.0f, 0.5f, 2);
    check_gemm(be, &rng, 1, 1, 7, 9, 0, 1.0f, 0.0f, 2);
    check_gemm(be, &rng, 0, 1, 13, 5, 4, 0.0f, -2.0f, 1);
    check_gemm(be, &rng, 1, 0, 13, 5, 4, 0.0f, 0.0f, 1);
    /* k == 0 reads neither A nor B */
    float c6[6] = {1, 2, 3, 4, 5, 6};
    cr_expect_eq(be->gemm(be, 0, 0, 2, 3, 0, 1.0f, NULL, 1, NULL, 3, 0.5f, c6, 3), RV_OK);
    cr_expect(c6[0] == 0.5f && c6[5] == 3.0f, "C = 0.5 C: %g .. %g", (double)c6[0],
              (double)c6[5]);
    /* m == 0 or n == 0: nothing to do, NULL operands are fine */
    cr_expect_eq(be->gemm(be, 0, 0, 0, 5, 3, 1.0f, NULL, 3, NULL, 5, 0.0f, NULL, 5), RV_OK);
    cr_expect_eq(be->gemm(be, 0, 0, 4, 0, 3, 1.0f, NULL, 3, NULL, 1, 0.0f, NULL, 1), RV_OK);
    rv_backend_free(&be);
}

/* The caller's OpenMP thread count is restored after the call. */
Test(gemm, restores_omp_threads)
{
    rv_backend *be = cpu(2);
    ref_rng rng = ref_rng_make(3);
    omp_set_num_threads(3);
    check_gemm(be, &rng, 0, 0, 64, 64, 64, 1.0f, 0.0f, 0);
    cr_expect_eq(omp_get_max_threads(), 3, "omp_get_max_threads() = %d after gemm",
                 omp_get_max_threads());
    rv_backend_free(&be);
}

static void expect_invalid(rv_status st, const char *what)
{
    cr_expect_eq(st, RV_ERR_INVALID, "%s: status %d, want RV_ERR_INVALID", what, (int)st);
    cr_expect(strlen(rv_last_error()) > 0, "%s: no error message", what);
    rv_clear_error();
}

Test(gemm, invalid_arguments)
{
    rv_backend *be = cpu(1);
    float a[64] = {0}, b[64] = {0}, c[64] = {0};
    expect_invalid(be->gemm(be, 0, 0, -1, 2, 2, 1, a, 2, b, 2, 0, c, 2), "m < 0");
    expect_invalid(be->gemm(be, 0, 0, 2, -1, 2, 1, a, 2, b, 2, 0, c, 2), "n < 0");
    expect_invalid(be->gemm(be, 0, 0, 2, 2, -1, 1, a, 2, b, 2, 0, c, 2), "k < 0");
    expect_invalid(be->gemm(be, 0, 0, 2, 3, 4, 1, a, 3, b, 3, 0, c, 3), "lda < k");
    expect_invalid(be->gemm(be, 1, 0, 2, 3, 4, 1, a, 1, b, 3, 0, c, 3), "lda < m (trans)");
    expect_invalid(be->gemm(be, 0, 0, 2, 3, 4, 1, a, 4, b, 2, 0, c, 3), "ldb < n");
    expect_invalid(be->gemm(be, 0, 1, 2, 3, 4, 1, a, 4, b, 3, 0, c, 3), "ldb < k (trans)");
    expect_invalid(be->gemm(be, 0, 0, 2, 3, 4, 1, a, 4, b, 3, 0, c, 2), "ldc < n");
    expect_invalid(be->gemm(be, 0, 0, 2, 3, 4, 1, NULL, 4, b, 3, 0, c, 3), "a NULL");
    expect_invalid(be->gemm(be, 0, 0, 2, 3, 4, 1, a, 4, NULL, 3, 0, c, 3), "b NULL");
    expect_invalid(be->gemm(be, 0, 0, 2, 3, 4, 1, a, 4, b, 3, 0, NULL, 3), "c NULL");

    cr_expect_eq(be->gemm(be, 0, 0, 2, 3, 4, 1, a, 3, b, 3, 0, c, 3), RV_ERR_INVALID);
    cr_expect(strstr(rv_last_error(), "gemm") && strstr(rv_last_error(), "lda"),
              "message names the op and the argument: '%s'", rv_last_error());
    rv_backend_free(&be);
}

/* ---- bias_add ---------------------------------------------------------------------- */

static void check_bias(int threads, int rows, int cols, ref_rng *rng)
{
    rv_backend *be = cpu(threads);
    size_t n = (size_t)rows * cols;
    float *x = ref_alloc_f(n), *bias = ref_alloc_f(cols);
    ref_fill_normal(rng, x, n, 0.0f, 1.0f);
    ref_fill_normal(rng, bias, cols, 0.0f, 1.0f);
    double *xd = ref_dup_d(x, n), *bd = ref_dup_d(bias, cols);
    ref_bias_add(xd, bd, rows, cols);
    cr_assert_eq(be->bias_add(be, x, bias, rows, cols), RV_OK, "%s", rv_last_error());
    double err = rv_rel_err(x, xd, n);
    cr_expect_leq(err, TOL_BIAS, "bias_add %dx%d threads=%d: rel err %.3g", rows, cols,
                  threads, err);
    free(x), free(bias), free(xd), free(bd);
    rv_backend_free(&be);
}

Test(bias_add, shapes_threads)
{
    ref_rng rng = ref_rng_make(21);
    const int dims[][2] = {{1, 1}, {1, 7}, {7, 129}, {129, 1000}, {1000, 129}, {1000, 7}};
    for (int t = 1; t <= 2; t++)
        for (size_t s = 0; s < sizeof dims / sizeof dims[0]; s++)
            check_bias(t, dims[s][0], dims[s][1], &rng);
}

Test(bias_add, invalid_arguments)
{
    rv_backend *be = cpu(1);
    float x[8] = {0}, bias[4] = {0};
    expect_invalid(be->bias_add(be, x, bias, -1, 4), "rows < 0");
    expect_invalid(be->bias_add(be, x, bias, 2, -4), "cols < 0");
    expect_invalid(be->bias_add(be, NULL, bias, 2, 4), "x NULL");
    expect_invalid(be->bias_add(be, x, NULL, 2, 4), "bias NULL");
    cr_expect_eq(be->bias_add(be, NULL, NULL, 0, 4), RV_OK);
    rv_backend_free(&be);
}

/* ---- the shared helpers (tests/ref) that every comparison relies on ---------------- */

Test(ref, rel_err_semantics)
{
    const double want[4] = {1.0, -4.0, 0.5, -INFINITY};
    const float same[4] = {1.0f, -4.0f, 0.5f, -INFINITY};
    const float off[4] = {1.0f, -4.0f, 0.7f, -INFINITY};
    const float nan_[4] = {1.0f, -4.0f, NAN, -INFINITY};
    const float inf_[4] = {1.0f, -4.0f, 0.5f, 0.0f};
    cr_expect_eq(rv_rel_err(same, want, 4), 0.0);
    /* max |got - want| = 0.2 (float 0.7 is not exact) over max |want| = 4 */
    cr_expect(fabs(rv_rel_err(off, want, 4) - fabs((double)0.7f - 0.5) / 4.0) < 1e-15);
    cr_expect(isinf(rv_rel_err(nan_, want, 4)));
    cr_expect(isinf(rv_rel_err(inf_, want, 4)));
    cr_expect_eq(rv_rel_err(same, want, 0), 0.0);
    const double zeros[2] = {0.0, 0.0}, gotd[2] = {0.0, 1e-40};
    cr_expect(rv_rel_err_d(gotd, zeros, 2) > 1e-11, "tiny denominators stay tiny");
}

Test(ref, rng_is_deterministic)
{
    ref_rng r1 = ref_rng_make(42), r2 = ref_rng_make(42), r3 = ref_rng_make(43);
    uint64_t a = ref_rng_u64(&r1), b = ref_rng_u64(&r2), c = ref_rng_u64(&r3);
    cr_expect_eq(a, b);
    cr_expect_neq(a, c);
    /* moments of the normal filler */
    enum { N = 200000 };
    float *x = ref_alloc_f(N);
    ref_fill_normal(&r1, x, N, 2.0f, 3.0f);
    double s = 0, s2 = 0;
    for (int i = 0; i < N; i++)
        s += x[i], s2 += (double)x[i] * x[i];
    double mean = s / N, var = s2 / N - mean * mean;
    cr_expect(fabs(mean - 2.0) < 0.05 && fabs(var - 9.0) < 0.2, "mean %g var %g", mean, var);
    ref_fill_uniform(&r1, x, N, -1.0f, 3.0f);
    float lo = x[0], hi = x[0];
    for (int i = 0; i < N; i++)
        lo = x[i] < lo ? x[i] : lo, hi = x[i] > hi ? x[i] : hi;
    cr_expect(lo >= -1.0f && hi < 3.0f && lo < -0.99f && hi > 2.99f, "range [%g, %g]",
              (double)lo, (double)hi);
    free(x);
}
