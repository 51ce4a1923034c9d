/* ref_ops.h: naive double-precision references the tests compare the backends to,
 * and the helpers every test shares: a seeded random generator, allocation,
 * float <-> double copies and the normalised error.
 *
 * The references are written for clarity, not speed: straight loops in double,
 * no blocking, no threads, nothing shared with the kernels under test. Every
 * array is row-major, as in rv_backend.h. Helper names are stable: other tests
 * (attention, encoder) build on them. */
#ifndef RV_REF_OPS_H
#define RV_REF_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "rv_backend.h" /* rv_act: the activations are named as the backends name them */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- random numbers -------------------------------------------------------------
 * splitmix64: one 64-bit word of state, the same stream for a seed on every
 * machine and libc (unlike rand()). */
typedef struct ref_rng {
    uint64_t state;
} ref_rng;

ref_rng ref_rng_make(uint64_t seed);
uint64_t ref_rng_u64(ref_rng *r);
double ref_rng_uniform(ref_rng *r); /* uniform in [0, 1), 53 random bits */
double ref_rng_normal(ref_rng *r);  /* standard normal N(0, 1) (Box-Muller) */
/* x[i] uniform in [lo, hi) / normal with the given mean and standard deviation. */
void ref_fill_uniform(ref_rng *r, float *x, size_t n, float lo, float hi);
void ref_fill_normal(ref_rng *r, float *x, size_t n, float mean, float std);

/* ---- memory and copies ------------------------------------------------------------
 * Zeroed arrays of n elements (n = 0 gives a valid 1-element block); they abort()
 * with a message when memory runs out, so tests need no NULL checks. Free with free(). */
float *ref_alloc_f(size_t n);
double *ref_alloc_d(size_t n);
void ref_to_double(const float *src, double *dst, size_t n);
void ref_to_float(const double *src, float *dst, size_t n); /* rounds to nearest */
double *ref_dup_d(const float *src, size_t n); /* new double copy of src */
float *ref_dup_f(const float *src, size_t n);  /* new float copy of src */

/* ---- comparison -------------------------------------------------------------------
 * Normalised error of got against want:
 *     max_i |got[i] - want[i]|  /  max(max_i |want[i]|, 1e-30)
 * i.e. the worst absolute error in units of the largest reference magnitude (ggml
 * style), so tiny reference entries do not blow it up. Entries where got and want
 * are the same infinity count as exact (e.g. the -inf log-sum-exp of a fully masked
 * row) and are left out of the maximum of |want|; a NaN on either side, or an
 * infinity on one side only, returns +INFINITY. n = 0 gives 0. */
double rv_rel_err(const float *got, const double *want, size_t n);
/* The same with a double `got` (e.g. analytic gradients against finite differences). */
double rv_rel_err_d(const double *got, const double *want, size_t n);

/* sum_i a[i] * b[i]; the scalar loss sum(y * r) of finite-difference checks. */
double ref_dot(const double *a, const double *b, size_t n);

/* ---- reference ops (semantics of the rv_backend.h entries of the same name) -------- */

/* C (m, n) = alpha * op(A) @ op(B) + beta * C; op(A) (m, k), op(B) (k, n). A is
 * stored (m, k) with row stride lda, or (k, m) when trans_a; B (k, n) with ldb, or
 * (n, k) when trans_b; C with ldc. Only the m x n block of C is written; beta == 0
 * does not read C. */
void ref_gemm(int trans_a, int trans_b, int m, int n, int k, double alpha, const double *a,
              int lda, const double *b, int ldb, double beta, double *c, int ldc);
/* x (rows, cols) += bias (cols) on every row. */
void ref_bias_add(double *x, const double *bias, int rows, int cols);

/* y = (x - mean) / sqrt(var + eps) * w + b per row (biased variance); mean and rstd
 * (rows) are written when not NULL. */
void ref_layernorm_fwd(const double *x, const double *w, const double *b, int rows,
                       int cols, double eps, double *y, double *mean, double *rstd);
/* Gradients of the forward above for output gradient dy; mean and rstd are
 * recomputed from x. dx (rows, cols) is overwritten, dw and db (cols) are added to. */
void ref_layernorm_bwd(const double *dy, const double *x, const double *w, int rows,
                       int cols, double eps, double *dx, double *dw, double *db);

/* y = x/2 * (1 + erf(x / sqrt 2)); dx = dy * d gelu(x) / dx. */
void ref_gelu_fwd(const double *x, double *y, size_t n);
void ref_gelu_bwd(const double *x, const double *dy, double *dx, size_t n);

/* The MLP activation act, y = act(x), and dx = dy * act'(x):
 *   RV_ACT_GELU        x/2 (1 + erf(x / sqrt 2))                     (ref_gelu_*)
 *   RV_ACT_GELU_TANH   x/2 (1 + tanh u),  u = sqrt(2/pi) (x + 0.044715 x^3)
 *   RV_ACT_QUICK_GELU  x / (1 + exp(-1.702 x))
 * The derivatives are written out by hand (not taken from the forward), so a
 * finite difference of ref_act_fwd checks ref_act_bwd. Both stay accurate (no
 * cancellation) in the negative tails, where y is tiny. An act outside rv_act
 * gives NaN everywhere. */
void ref_act_fwd(rv_act act, const double *x, double *y, size_t n);
void ref_act_bwd(rv_act act, const double *x, const double *dy, double *dx, size_t n);

/* Layer scale, gamma (cols) per column of (rows, cols) tensors: y += x * gamma;
 * x *= gamma; dst (cols) += sum over the rows of a * b. */
void ref_scale_add(double *y, const double *x, const double *gamma, int rows, int cols);
void ref_scale_cols(double *x, const double *gamma, int rows, int cols);
void ref_colsum_mul_add(const double *a, const double *b, int rows, int cols, double *dst);

/* Row-wise softmax; -inf entries give 0 and a row that is -inf everywhere gives all 0. */
void ref_softmax(const double *x, double *y, int rows, int cols);

#ifdef __cplusplus
}
#endif
#endif
