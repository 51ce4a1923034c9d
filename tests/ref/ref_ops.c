/* ref_ops.c: the naive double-precision references and shared test helpers declared
 * in ref_ops.h. Straight loops on purpose: this is what the kernels are judged by. */
#include "ref_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- random numbers ---------------------------------------------------------------- */

ref_rng ref_rng_make(uint64_t seed)
{
    ref_rng r = {seed};
    return r;
}

uint64_t ref_rng_u64(ref_rng *r)
{
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double ref_rng_uniform(ref_rng *r)
{
    return (double)(ref_rng_u64(r) >> 11) * 0x1.0p-53;
}

double ref_rng_normal(ref_rng *r)
{
    double u1 = 1.0 - ref_rng_uniform(r); /* (0, 1]: log(u1) is finite */
    double u2 = ref_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void ref_fill_uniform(ref_rng *r, float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++) {
        float v = (float)(lo + (hi - (double)lo) * ref_rng_uniform(r));
        x[i] = v < hi ? v : nextafterf(hi, lo); /* rounding to float may reach hi */
    }
}

void ref_fill_normal(ref_rng *r, float *x, size_t n, float mean, float std)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(mean + std * ref_rng_normal(r));
}

/* ---- memory and copies ----------------------------------------------------------------- */

static void *alloc_or_die(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "ref_ops: cannot allocate %zu x %zu bytes\n", n, size);
        abort();
    }
    return p;
}

float *ref_alloc_f(size_t n)
{
    return alloc_or_die(n, sizeof(float));
}

double *ref_alloc_d(size_t n)
{
    return alloc_or_die(n, sizeof(double));
}

void ref_to_double(const float *src, double *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (double)src[i];
}

void ref_to_float(const double *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (float)src[i];
}

double *ref_dup_d(const float *src, size_t n)
{
    double *d = ref_alloc_d(n);
    ref_to_double(src, d, n);
    return d;
}

float *ref_dup_f(const float *src, size_t n)
{
    float *d = ref_alloc_f(n);
    if (n)
        memcpy(d, src, n * sizeof *d);
    return d;
}

/* ---- comparison ------------------------------------------------------------------------ */

/* Folds one (got, want) pair into the running maxima; returns 0 when the pair
 * makes the error infinite (NaN, or an infinity on one side only). */
static int err_step(double g, double w, double *max_err, double *max_ref)
{
    if (isnan(g) || isnan(w))
        return 0;
    if (isinf(g) || isinf(w))
        return g == w; /* the same infinity is exact and not a magnitude */
    double e = fabs(g - w);
    if (e > *max_err)
        *max_err = e;
    if (fabs(w) > *max_ref)
        *max_ref = fabs(w);
    return 1;
}

double rv_rel_err(const float *got, const double *want, size_t n)
{
    double max_err = 0.0, max_ref = 0.0;
    for (size_t i = 0; i < n; i++)
        if (!err_step((double)got[i], want[i], &max_err, &max_ref))
            return INFINITY;
    return max_err / (max_ref > 1e-30 ? max_ref : 1e-30);
}

double rv_rel_err_d(const double *got, const double *want, size_t n)
{
    double max_err = 0.0, max_ref = 0.0;
    for (size_t i = 0; i < n; i++)
        if (!err_step(got[i], want[i], &max_err, &max_ref))
            return INFINITY;
    return max_err / (max_ref > 1e-30 ? max_ref : 1e-30);
}

double ref_dot(const double *a, const double *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* ---- reference ops ------------------------------------------------------------------------ */

void ref_gemm(int trans_a, int trans_b, int m, int n, int k, double alpha, const double *a,
              int lda, const double *b, int ldb, double beta, double *c, int ldc)
{
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int p = 0; p < k; p++) {
                double av = trans_a ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
                double bv = trans_b ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
                s += av * bv;
            }
            double *cij = &c[(size_t)i * ldc + j];
            *cij = alpha * s + (beta == 0.0 ? 0.0 : beta * *cij);
        }
    }
}

void ref_bias_add(double *x, const double *bias, int rows, int cols)
{
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            x[(size_t)i * cols + j] += bias[j];
}

/* mean and 1/sqrt(var + eps) of one row, two passes. */
static void row_stats(const double *xr, int cols, double eps, double *mean, double *rstd)
{
    double s = 0.0;
    for (int j = 0; j < cols; j++)
        s += xr[j];
    double m = s / cols;
    double v = 0.0;
    for (int j = 0; j < cols; j++)
        v += (xr[j] - m) * (xr[j] - m);
    *mean = m;
    *rstd = 1.0 / sqrt(v / cols + eps);
}

void ref_layernorm_fwd(const double *x, const double *w, const double *b, int rows,
                       int cols, double eps, double *y, double *mean, double *rstd)
{
    for (int i = 0; i < rows; i++) {
        const double *xr = x + (size_t)i * cols;
        double m, r;
        row_stats(xr, cols, eps, &m, &r);
        for (int j = 0; j < cols; j++)
            y[(size_t)i * cols + j] = (xr[j] - m) * r * w[j] + b[j];
        if (mean)
            mean[i] = m;
        if (rstd)
            rstd[i] = r;
    }
}

void ref_layernorm_bwd(const double *dy, const double *x, const double *w, int rows,
                       int cols, double eps, double *dx, double *dw, double *db)
{
    for (int i = 0; i < rows; i++) {
        const double *xr = x + (size_t)i * cols;
        const double *dyr = dy + (size_t)i * cols;
        double m, r;
        row_stats(xr, cols, eps, &m, &r);
        /* g = dy * w; dx = r * (g - mean(g) - xhat * mean(g * xhat)) */
        double g_mean = 0.0, gx_mean = 0.0;
        for (int j = 0; j < cols; j++) {
            double xhat = (xr[j] - m) * r;
            g_mean += dyr[j] * w[j];
            gx_mean += dyr[j] * w[j] * xhat;
        }
        g_mean /= cols;
        gx_mean /= cols;
        for (int j = 0; j < cols; j++) {
            double xhat = (xr[j] - m) * r;
            dx[(size_t)i * cols + j] = r * (dyr[j] * w[j] - g_mean - xhat * gx_mean);
            dw[j] += dyr[j] * xhat;
            db[j] += dyr[j];
        }
    }
}

void ref_gelu_fwd(const double *x, double *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = 0.5 * x[i] * erfc(-x[i] / M_SQRT2); /* = x/2 * (1 + erf(x/sqrt2)) */
}

void ref_gelu_bwd(const double *x, const double *dy, double *dx, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double cdf = 0.5 * erfc(-x[i] / M_SQRT2);
        double pdf = exp(-0.5 * x[i] * x[i]) / sqrt(2.0 * M_PI);
        dx[i] = dy[i] * (cdf + x[i] * pdf);
    }
}

/* u of the tanh form, and 1 + tanh(u) without the cancellation of the sum for
 * u < 0: there it is e^u / cosh(u) (= (cosh u + sinh u) / cosh u). */
static double gelu_tanh_u(double x)
{
    return sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
}

static double one_plus_tanh(double u)
{
    return u >= 0.0 ? 1.0 + tanh(u) : exp(u) / cosh(u);
}

void ref_act_fwd(rv_act act, const double *x, double *y, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        switch (act) {
        case RV_ACT_GELU:
            ref_gelu_fwd(&x[i], &y[i], 1);
            break;
        case RV_ACT_GELU_TANH:
            y[i] = 0.5 * v * one_plus_tanh(gelu_tanh_u(v));
            break;
        case RV_ACT_QUICK_GELU:
            y[i] = v / (1.0 + exp(-1.702 * v));
            break;
        default:
            y[i] = NAN;
        }
    }
}

void ref_act_bwd(rv_act act, const double *x, const double *dy, double *dx, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        switch (act) {
        case RV_ACT_GELU:
            ref_gelu_bwd(&x[i], &dy[i], &dx[i], 1);
            break;
        case RV_ACT_GELU_TANH: {
            /* d/dx x/2 (1 + tanh u) = (1 + tanh u)/2 + x/2 sech^2(u) u' */
            double u = gelu_tanh_u(v), c = cosh(u);
            double du = sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * v * v);
            dx[i] = dy[i] * (0.5 * one_plus_tanh(u) + 0.5 * v * du / (c * c));
            break;
        }
        case RV_ACT_QUICK_GELU: {
            /* d/dx x s(bx) = s(bx) + b x s(bx) (1 - s(bx)), s (1 - s) = 1 / (4 cosh^2(bx/2)) */
            double s = 1.0 / (1.0 + exp(-1.702 * v)), c = cosh(0.851 * v);
            dx[i] = dy[i] * (s + 1.702 * v / (4.0 * c * c));
            break;
        }
        default:
            dx[i] = NAN;
        }
    }
}

void ref_scale_add(double *y, const double *x, const double *gamma, int rows, int cols)
{
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            y[(size_t)i * cols + j] += x[(size_t)i * cols + j] * gamma[j];
}

void ref_scale_cols(double *x, const double *gamma, int rows, int cols)
{
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            x[(size_t)i * cols + j] *= gamma[j];
}

void ref_colsum_mul_add(const double *a, const double *b, int rows, int cols, double *dst)
{
    for (int j = 0; j < cols; j++) {
        double s = 0.0;
        for (int i = 0; i < rows; i++)
            s += a[(size_t)i * cols + j] * b[(size_t)i * cols + j];
        dst[j] += s;
    }
}

void ref_softmax(const double *x, double *y, int rows, int cols)
{
    for (int i = 0; i < rows; i++) {
        const double *xr = x + (size_t)i * cols;
        double *yr = y + (size_t)i * cols;
        double m = -INFINITY;
        for (int j = 0; j < cols; j++)
            if (xr[j] > m)
                m = xr[j];
        if (m == -INFINITY) {
            for (int j = 0; j < cols; j++)
                yr[j] = 0.0;
            continue;
        }
        double s = 0.0;
        for (int j = 0; j < cols; j++)
            s += exp(xr[j] - m);
        for (int j = 0; j < cols; j++)
            yr[j] = exp(xr[j] - m) / s;
    }
}
