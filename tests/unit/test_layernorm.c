/* test_layernorm.c: the CPU backend's layernorm forward and backward against the
 * double reference (tests/ref) on odd shapes with 1 and 2 threads, the backward
 * also against central finite differences of the scalar loss sum(y * r) computed
 * in double, plus accumulation into dw/db, in-place use and argument validation. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_ops.h"
#include "rv_backend.h"

/* Tolerances, on normalised errors (rv_rel_err: max |got - want| / max |want|).
 * The forward sums cols <= 1000 entries twice (mean, variance) in f32 (epsilon
 * 1.2e-7): sqrt(cols) * eps ~ 4e-6, and the variance's rounding reaches y halved
 * through the square root. */
#define TOL_FWD 1e-5
/* The backward subtracts two row means of products from dy * w (cancellation of
 * terms |rstd * dy * w| against their mean), and dw, db sum over rows <= 1000:
 * ten times the forward's; the same bound holds against central differences of
 * the double loss (step 1e-6: truncation and cancellation ~1e-10). */
#define TOL_BWD 1e-4
/* The double reference backward against the same central differences. */
#define TOL_REF_FD 1e-7
#define EPS 1e-5f

static rv_backend *cpu(int threads)
{
    rv_backend *be = NULL;
    rv_status st = rv_backend_cpu_create(threads, &be);
    cr_assert_eq(st, RV_OK, "rv_backend_cpu_create: %s", rv_last_error());
    return be;
}

static const int shapes[][2] = {
    /* rows, cols: 129 columns span three dw/db tiles; 1000 x 129 is threaded */
    {1, 1}, {1, 7}, {7, 129}, {129, 1000}, {1000, 7}, {1000, 129},
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

/* Inputs with a mean well away from 0 (3 +- 2), as after a residual add. */
static void check_fwd(rv_backend *be, ref_rng *rng, int rows, int cols)
{
    size_t n = (size_t)rows * cols;
    float *x = ref_alloc_f(n), *w = ref_alloc_f(cols), *b = ref_alloc_f(cols);
    float *y = ref_alloc_f(n), *mean = ref_alloc_f(rows), *rstd = ref_alloc_f(rows);
    ref_fill_normal(rng, x, n, 3.0f, 2.0f);
    ref_fill_normal(rng, w, cols, 1.0f, 0.5f);
    ref_fill_normal(rng, b, cols, 0.0f, 0.5f);
    double *xd = ref_dup_d(x, n), *wd = ref_dup_d(w, cols), *bd = ref_dup_d(b, cols);
    double *yd = ref_alloc_d(n), *md = ref_alloc_d(rows), *rd = ref_alloc_d(rows);

    ref_layernorm_fwd(xd, wd, bd, rows, cols, EPS, yd, md, rd);
    rv_status st = be->layernorm_fwd(be, x, w, b, rows, cols, EPS, y, mean, rstd);
    cr_assert_eq(st, RV_OK, "layernorm_fwd: %s", rv_last_error());

    double ey = rv_rel_err(y, yd, n), em = rv_rel_err(mean, md, rows),
           er = rv_rel_err(rstd, rd, rows);
    cr_expect(ey <= TOL_FWD && em <= TOL_FWD && er <= TOL_FWD,
              "layernorm_fwd %dx%d threads=%d: rel err y %.3g mean %.3g rstd %.3g", rows,
              cols, be->threads, ey, em, er);

    free(x), free(w), free(b), free(y), free(mean), free(rstd);
    free(xd), free(wd), free(bd), free(yd), free(md), free(rd);
}

/* The backward gets the reference's mean/rstd (rounded to float), so a forward bug
 * cannot hide a backward one. dw and db start non-zero: they must be added to. */
static void check_bwd(rv_backend *be, ref_rng *rng, int rows, int cols)
{
    size_t n = (size_t)rows * cols;
    float *x = ref_alloc_f(n), *w = ref_alloc_f(cols), *dy = ref_alloc_f(n);
    float *dx = ref_alloc_f(n), *dw = ref_alloc_f(cols), *db = ref_alloc_f(cols);
    float *mean = ref_alloc_f(rows), *rstd = ref_alloc_f(rows);
    ref_fill_normal(rng, x, n, 3.0f, 2.0f);
    ref_fill_normal(rng, w, cols, 1.0f, 0.5f);
    ref_fill_normal(rng, dy, n, 0.0f, 1.0f);
    ref_fill_uniform(rng, dw, cols, -0.5f, 0.5f);
    ref_fill_uniform(rng, db, cols, -0.5f, 0.5f);
    ref_fill_normal(rng, dx, n, 0.0f, 1.0f); /* garbage: must be overwritten */

    double *xd = ref_dup_d(x, n), *wd = ref_dup_d(w, cols), *dyd = ref_dup_d(dy, n);
    double *dxd = ref_alloc_d(n), *dwd = ref_dup_d(dw, cols), *dbd = ref_dup_d(db, cols);
    double *yd = ref_alloc_d(n), *md = ref_alloc_d(rows), *rd = ref_alloc_d(rows);
    double *zero = ref_alloc_d(cols);
    ref_layernorm_fwd(xd, wd, zero, rows, cols, EPS, yd, md, rd);
    ref_to_float(md, mean, rows);
    ref_to_float(rd, rstd, rows);
    ref_layernorm_bwd(dyd, xd, wd, rows, cols, EPS, dxd, dwd, dbd);

    rv_status st = be->layernorm_bwd(be, dy, x, w, mean, rstd, rows, cols, dx, dw, db);
    cr_assert_eq(st, RV_OK, "layernorm_bwd: %s", rv_last_error());

    double ex = rv_rel_err(dx, dxd, n), ew = rv_rel_err(dw, dwd, cols),
           eb = rv_rel_err(db, dbd, cols);
    if (cols == 1) {
        /* dx is exactly 0 in theory (x - mean = 0), so there is no scale to normalise
         * by: bound each entry by rounding of dy * w, amplified by rstd = 1/sqrt(eps). */
        ex = 0.0;
        for (int i = 0; i < rows; i++) {
            double e = fabs(dx[i]) / (rd[i] * fabs(dyd[i] * wd[0]) + 1e-30);
            ex = e > ex ? e : ex;
        }
    }
    cr_expect(ex <= TOL_BWD && ew <= TOL_BWD && eb <= TOL_BWD,
              "layernorm_bwd %dx%d threads=%d: rel err dx %.3g dw %.3g db %.3g", rows, cols,
              be->threads, ex, ew, eb);

    free(x), free(w), free(dy), free(dx), free(dw), free(db), free(mean), free(rstd);
    free(xd), free(wd), free(dyd), free(dxd), free(dwd), free(dbd), free(yd), free(md),
        free(rd), free(zero);
}

static void check_all(int threads)
{
    rv_backend *be = cpu(threads);
    ref_rng rng = ref_rng_make(300 + threads);
    for (size_t s = 0; s < NSHAPES; s++) {
        check_fwd(be, &rng, shapes[s][0], shapes[s][1]);
        check_bwd(be, &rng, shapes[s][0], shapes[s][1]);
    }
    rv_backend_free(&be);
}

Test(layernorm, fwd_bwd_vs_reference_threads1) { check_all(1); }
Test(layernorm, fwd_bwd_vs_reference_threads2) { check_all(2); }

/* ---- finite differences --------------------------------------------------------------- */

/* L(x, w, b) = sum(layernorm(x; w, b) * r), in double. */
static double loss(const double *x, const double *w, const double *b, const double *r,
                   int rows, int cols, double *scratch)
{
    ref_layernorm_fwd(x, w, b, rows, cols, EPS, scratch, NULL, NULL);
    return ref_dot(scratch, r, (size_t)rows * cols);
}

/* Central differences of L with respect to every entry of v (which is one of x, w,
 * b and is restored afterwards). */
static void fd_grad(double *v, size_t nv, double *grad, const double *x, const double *w,
                    const double *b, const double *r, int rows, int cols, double *scratch)
{
    const double h = 1e-6;
    for (size_t i = 0; i < nv; i++) {
        double v0 = v[i];
        v[i] = v0 + h;
        double lp = loss(x, w, b, r, rows, cols, scratch);
        v[i] = v0 - h;
        double lm = loss(x, w, b, r, rows, cols, scratch);
        v[i] = v0;
        grad[i] = (lp - lm) / (2 * h);
    }
}

static void check_fd(int threads, int rows, int cols, ref_rng *rng)
{
    rv_backend *be = cpu(threads);
    size_t n = (size_t)rows * cols;
    float *x = ref_alloc_f(n), *w = ref_alloc_f(cols), *b = ref_alloc_f(cols);
    float *r = ref_alloc_f(n), *y = ref_alloc_f(n), *mean = ref_alloc_f(rows),
          *rstd = ref_alloc_f(rows);
    float *dx = ref_alloc_f(n), *dw = ref_alloc_f(cols), *db = ref_alloc_f(cols);
    ref_fill_normal(rng, x, n, 0.5f, 1.5f);
    ref_fill_normal(rng, w, cols, 1.0f, 0.5f);
    ref_fill_normal(rng, b, cols, 0.0f, 0.5f);
    ref_fill_normal(rng, r, n, 0.0f, 1.0f);

    double *xd = ref_dup_d(x, n), *wd = ref_dup_d(w, cols), *bd = ref_dup_d(b, cols);
    double *rd = ref_dup_d(r, n), *scratch = ref_alloc_d(n);
    double *gx = ref_alloc_d(n), *gw = ref_alloc_d(cols), *gb = ref_alloc_d(cols);
    fd_grad(xd, n, gx, xd, wd, bd, rd, rows, cols, scratch);
    fd_grad(wd, cols, gw, xd, wd, bd, rd, rows, cols, scratch);
    fd_grad(bd, cols, gb, xd, wd, bd, rd, rows, cols, scratch);

    /* the backend's own forward feeds its backward, as in training */
    cr_assert_eq(be->layernorm_fwd(be, x, w, b, rows, cols, EPS, y, mean, rstd), RV_OK);
    cr_assert_eq(be->layernorm_bwd(be, r, x, w, mean, rstd, rows, cols, dx, dw, db), RV_OK,
                 "%s", rv_last_error());
    double ex = rv_rel_err(dx, gx, n), ew = rv_rel_err(dw, gw, cols),
           eb = rv_rel_err(db, gb, cols);
    cr_expect(ex <= TOL_BWD && ew <= TOL_BWD && eb <= TOL_BWD,
              "layernorm_bwd vs finite differences %dx%d: dx %.3g dw %.3g db %.3g", rows,
              cols, ex, ew, eb);

    /* the reference backward agrees with finite differences too (to FD accuracy) */
    double *rx = ref_alloc_d(n), *rw = ref_alloc_d(cols), *rb = ref_alloc_d(cols);
    ref_layernorm_bwd(rd, xd, wd, rows, cols, EPS, rx, rw, rb);
    double fx = rv_rel_err_d(rx, gx, n), fw = rv_rel_err_d(rw, gw, cols),
           fb = rv_rel_err_d(rb, gb, cols);
    cr_expect(fx <= TOL_REF_FD && fw <= TOL_REF_FD && fb <= TOL_REF_FD,
              "ref_layernorm_bwd vs finite differences %dx%d: dx %.3g dw %.3g db %.3g",
              rows, cols, fx, fw, fb);

    free(x), free(w), free(b), free(r), free(y), free(mean), free(rstd), free(dx), free(dw),
        free(db);
    free(xd), free(wd), free(bd), free(rd), free(scratch), free(gx), free(gw), free(gb);
    free(rx), free(rw), free(rb);
    rv_backend_free(&be);
}

Test(layernorm, bwd_vs_finite_differences)
{
    ref_rng rng = ref_rng_make(77);
    check_fd(1, 1, 7, &rng);
    check_fd(1, 3, 16, &rng);
    check_fd(2, 5, 67, &rng);
}

/* ---- accumulation, aliasing, arguments ----------------------------------------------- */

/* Two backward calls add twice into dw, db, while dx is the same both times. */
Test(layernorm, bwd_accumulates_dw_db)
{
    rv_backend *be = cpu(2);
    ref_rng rng = ref_rng_make(5);
    enum { R = 300, C = 130 }; /* threaded: R * C > 32K */
    float *x = ref_alloc_f(R * C), *w = ref_alloc_f(C), *b = ref_alloc_f(C);
    float *y = ref_alloc_f(R * C), *dy = ref_alloc_f(R * C), *mean = ref_alloc_f(R),
          *rstd = ref_alloc_f(R);
    float *dx = ref_alloc_f(R * C), *dw = ref_alloc_f(C), *db = ref_alloc_f(C);
    ref_fill_normal(&rng, x, R * C, 0.0f, 1.0f);
    ref_fill_normal(&rng, w, C, 1.0f, 0.3f);
    ref_fill_normal(&rng, dy, R * C, 0.0f, 1.0f);
    cr_assert_eq(be->layernorm_fwd(be, x, w, b, R, C, EPS, y, mean, rstd), RV_OK);

    double *xd = ref_dup_d(x, R * C), *wd = ref_dup_d(w, C), *dyd = ref_dup_d(dy, R * C);
    double *dxd = ref_alloc_d(R * C), *dwd = ref_alloc_d(C), *dbd = ref_alloc_d(C);
    ref_layernorm_bwd(dyd, xd, wd, R, C, EPS, dxd, dwd, dbd);
    ref_layernorm_bwd(dyd, xd, wd, R, C, EPS, dxd, dwd, dbd);

    for (int call = 0; call < 2; call++)
        cr_assert_eq(be->layernorm_bwd(be, dy, x, w, mean, rstd, R, C, dx, dw, db), RV_OK);
    double ex = rv_rel_err(dx, dxd, R * C), ew = rv_rel_err(dw, dwd, C),
           eb = rv_rel_err(db, dbd, C);
    cr_expect(ex <= TOL_BWD && ew <= TOL_BWD && eb <= TOL_BWD,
              "after two calls: dx %.3g dw %.3g db %.3g", ex, ew, eb);

    free(x), free(w), free(b), free(y), free(dy), free(mean), free(rstd), free(dx), free(dw),
        free(db);
    free(xd), free(wd), free(dyd), free(dxd), free(dwd), free(dbd);
    rv_backend_free(&be);
}

/* y may be x and dx may be dy: same results as with separate buffers. */
Test(layernorm, in_place)
{
    rv_backend *be = cpu(2);
    ref_rng rng = ref_rng_make(9);
    enum { R = 257, C = 200 };
    size_t n = (size_t)R * C;
    float *x = ref_alloc_f(n), *w = ref_alloc_f(C), *b = ref_alloc_f(C);
    float *y = ref_alloc_f(n), *m = ref_alloc_f(R), *s = ref_alloc_f(R);
    float *dy = ref_alloc_f(n), *dx = ref_alloc_f(n), *dw = ref_alloc_f(C),
          *db = ref_alloc_f(C), *dw2 = ref_alloc_f(C), *db2 = ref_alloc_f(C);
    ref_fill_normal(&rng, x, n, 1.0f, 2.0f);
    ref_fill_normal(&rng, w, C, 1.0f, 0.3f);
    ref_fill_normal(&rng, b, C, 0.0f, 0.3f);
    ref_fill_normal(&rng, dy, n, 0.0f, 1.0f);

    cr_assert_eq(be->layernorm_fwd(be, x, w, b, R, C, EPS, y, m, s), RV_OK);
    cr_assert_eq(be->layernorm_bwd(be, dy, x, w, m, s, R, C, dx, dw, db), RV_OK);

    float *xi = ref_dup_f(x, n), *dyi = ref_dup_f(dy, n);
    cr_assert_eq(be->layernorm_fwd(be, xi, w, b, R, C, EPS, xi, m, s), RV_OK);
    cr_expect_arr_eq(xi, y, n * sizeof(float), "in-place forward differs");
    cr_assert_eq(be->layernorm_bwd(be, dyi, x, w, m, s, R, C, dyi, dw2, db2), RV_OK);
    cr_expect_arr_eq(dyi, dx, n * sizeof(float), "in-place backward dx differs");
    cr_expect_arr_eq(dw2, dw, C * sizeof(float), "in-place backward dw differs");
    cr_expect_arr_eq(db2, db, C * sizeof(float), "in-place backward db differs");

    free(x), free(w), free(b), free(y), free(m), free(s), free(dy), free(dx), free(dw),
        free(db), free(dw2), free(db2), free(xi), free(dyi);
    rv_backend_free(&be);
}

static void expect_invalid(rv_status st, const char *what)
{
    cr_expect_eq(st, RV_ERR_INVALID, "%s: status %d, want RV_ERR_INVALID", what, (int)st);
    cr_expect(strstr(rv_last_error(), "layernorm") != NULL, "%s: message '%s'", what,
              rv_last_error());
    rv_clear_error();
}

Test(layernorm, invalid_arguments)
{
    rv_backend *be = cpu(1);
    float x[8] = {0}, w[4] = {1, 1, 1, 1}, b[4] = {0}, y[8], m[2], s[2];
    float dx[8], dw[4] = {0}, db[4] = {0};
    expect_invalid(be->layernorm_fwd(be, x, w, b, -1, 4, EPS, y, m, s), "rows < 0");
    expect_invalid(be->layernorm_fwd(be, x, w, b, 2, -4, EPS, y, m, s), "cols < 0");
    expect_invalid(be->layernorm_fwd(be, x, w, b, 2, 0, EPS, y, m, s), "cols == 0");
    expect_invalid(be->layernorm_fwd(be, x, w, b, 2, 4, -1e-5f, y, m, s), "eps < 0");
    expect_invalid(be->layernorm_fwd(be, x, w, b, 2, 4, NAN, y, m, s), "eps NaN");
    expect_invalid(be->layernorm_fwd(be, NULL, w, b, 2, 4, EPS, y, m, s), "x NULL");
    expect_invalid(be->layernorm_fwd(be, x, NULL, b, 2, 4, EPS, y, m, s), "w NULL");
    expect_invalid(be->layernorm_fwd(be, x, w, b, 2, 4, EPS, y, NULL, s), "mean NULL");
    expect_invalid(be->layernorm_fwd(be, x, w, b, 2, 4, EPS, y, m, NULL), "rstd NULL");
    cr_expect_eq(be->layernorm_fwd(be, NULL, NULL, NULL, 0, 4, EPS, NULL, NULL, NULL), RV_OK);

    cr_assert_eq(be->layernorm_fwd(be, x, w, b, 2, 4, EPS, y, m, s), RV_OK);
    expect_invalid(be->layernorm_bwd(be, x, x, w, m, s, -2, 4, dx, dw, db), "bwd rows < 0");
    expect_invalid(be->layernorm_bwd(be, x, x, w, m, s, 2, 0, dx, dw, db), "bwd cols == 0");
    expect_invalid(be->layernorm_bwd(be, NULL, x, w, m, s, 2, 4, dx, dw, db), "dy NULL");
    expect_invalid(be->layernorm_bwd(be, x, x, w, NULL, s, 2, 4, dx, dw, db), "mean NULL");
    expect_invalid(be->layernorm_bwd(be, x, x, w, m, s, 2, 4, dx, NULL, db), "dw NULL");
    expect_invalid(be->layernorm_bwd(be, x, x, w, m, s, 2, 4, dx, dw, NULL), "db NULL");
    cr_expect_eq(be->layernorm_bwd(be, NULL, NULL, NULL, NULL, NULL, 0, 4, NULL, NULL, NULL),
                 RV_OK);
    rv_backend_free(&be);
}
