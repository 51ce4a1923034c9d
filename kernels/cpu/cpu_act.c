/* cpu_act.c: the MLP activations (rv_act) of the CPU backend, forward and
 * backward, elementwise: GELU in its exact (erf) form here, the tanh form and
 * quick GELU through act_math.h (shared with the CUDA kernels). Every loop is
 * written so GCC vectorizes it (no libm calls, no branches) and runs over
 * be->threads with OpenMP when it is long enough.
 *
 * GELU (erf):
 *   y     = x * Phi(x),                  Phi(x) = erfc(-x / sqrt 2) / 2
 *   dy/dx = Phi(x) + x * phi(x),         phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
 *
 * libm's erff/erfcf are scalar calls of ~15 ns each (GELU then costs a sizeable
 * share of the MLP's matrix multiplies), so Phi is computed here in a form GCC
 * vectorizes (~1.5 ns per element on one core). With z = |x| / sqrt 2 and
 * t = 1 / (1 + z/2):
 *
 *   erfc(z) = t * exp(-z^2) * exp(P(t))      (Numerical Recipes' erfcc, a Chebyshev
 *                                             fit with relative error < 1.2e-7, z >= 0)
 *
 * and Phi(x) = erfc(z)/2 for x < 0, 1 - erfc(z)/2 otherwise. The relative error of
 * erfc stays below 1e-6 far into the tail (x >= -12.5) because z^2 = x^2 / 2 is
 * split exactly into hi + lo (fma) and exp(-hi) is evaluated without rounding its
 * argument; so tiny outputs for negative x are accurate too (1 + erf(x / sqrt 2)
 * would cancel to noise there).
 *
 * x and y (dy and dx) may be the same array: each element is read before it is
 * written, by the same iteration. */
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdint.h>

#include "../act_math.h"
#include "cpu_ops.h"

/* Below this many elements an OpenMP team costs more than it saves. */
#define PAR_MIN_ELEMS (32 * 1024)

#define INV_SQRT2 0.70710678118654752440f
#define INV_SQRT_2PI 0.39894228040143267794f

/* e^a for a <= 1 (a = -inf gives 0; below -87.3, where the result leaves the
 * normal range, 0 as well; NaN stays NaN). Cody-Waite reduction a = n ln2 + r with
 * |r| <= ln2/2, a degree-7 Taylor polynomial for e^r (error < 1e-8), and 2^n built
 * in the exponent bits. Integer work is unsigned, so no input is undefined. */
static inline float exp_le1(float a)
{
    const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    const float ln2_hi = 0.693359375f; /* 9 bits: n * ln2_hi is exact */
    const float ln2_lo = -2.12194440e-4f;
    int under = a < -87.3f;
    float ac = under ? -87.3f : a;
    float k = ac * 1.44269504f + shifter; /* n = round(a / ln2) sits in k's low bits */
    float n = k - shifter;
    float r = ac - n * ln2_hi;
    r = r - n * ln2_lo;
    float p = 1.9841270e-4f;
    p = p * r + 1.3888889e-3f;
    p = p * r + 8.3333333e-3f;
    p = p * r + 4.1666667e-2f;
    p = p * r + 1.6666667e-1f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    union {
        float f;
        uint32_t u;
    } bits = {.f = k}, scale;
    scale.u = (bits.u - 0x4B400000u + 127u) << 23; /* 2^n */
    return under ? 0.0f : p * scale.f;
}

/* Phi(x), and phi(x) through *pdf. */
static inline float gelu_cdf(float x, float *pdf)
{
    float ax = fabsf(x);
    ax = ax < 14.0f ? ax : 14.0f; /* Phi(-14) < 1e-44; keeps x^2 finite (NaN -> 14) */
    float t = 1.0f / (1.0f + 0.5f * INV_SQRT2 * ax);
    /* z^2 = x^2 / 2 = hi + lo exactly, from x itself: rounding z = |x| / sqrt 2
     * first would cost ~x^2 * 6e-8 relative error in exp(-z^2) (1e-5 at x = 12). */
    float xx = ax * ax;
    float hi = 0.5f * xx;
    float lo = 0.5f * fmaf(ax, ax, -xx);
    float e = exp_le1(-hi) * (1.0f - lo); /* exp(-z^2) */
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f; /* P(t) in [-1.27, 3e-8] */
    float half_erfc = 0.5f * t * e * exp_le1(p);
    *pdf = INV_SQRT_2PI * e;
    return x < 0.0f ? half_erfc : 1.0f - half_erfc;
}

/* One loop per activation: the activation is chosen once per call, so each loop
 * body is branch-free and vectorizes. The loops are compiled twice, for the build's
 * baseline and for AVX2 with FMA, and the second runs where the CPU has those
 * (act_spans): in a build without -march=native, fmaf above is otherwise a libm
 * call per element. The file is compiled with -fno-trapping-math (CMakeLists.txt),
 * without which GCC vectorizes none of these loops for AVX2 (their selects would
 * evaluate both sides): a scalar GELU took 7% of an encoder forward, 0.3% now. */
#define ACT_SPANS(SFX, ATTR)                                                              \
    ATTR static void gelu_fwd##SFX(const float *x, float *y, size_t n)                    \
    {                                                                                     \
        for (size_t i = 0; i < n; i++) {                                                  \
            float v = x[i], pdf;                                                          \
            y[i] = v * gelu_cdf(v, &pdf);                                                 \
        }                                                                                 \
    }                                                                                     \
    ATTR static void gelu_bwd##SFX(const float *x, const float *dy, float *dx, size_t n)  \
    {                                                                                     \
        for (size_t i = 0; i < n; i++) {                                                  \
            float v = x[i], pdf;                                                          \
            float cdf = gelu_cdf(v, &pdf);                                                \
            dx[i] = dy[i] * (cdf + v * pdf);                                              \
        }                                                                                 \
    }                                                                                     \
    ATTR static void gelu_tanh_fwd##SFX(const float *x, float *y, size_t n)               \
    {                                                                                     \
        for (size_t i = 0; i < n; i++)                                                    \
            y[i] = act_gelu_tanh_fwd(x[i]);                                               \
    }                                                                                     \
    ATTR static void gelu_tanh_bwd##SFX(const float *x, const float *dy, float *dx,       \
                                        size_t n)                                         \
    {                                                                                     \
        for (size_t i = 0; i < n; i++)                                                    \
            dx[i] = act_gelu_tanh_bwd(x[i], dy[i]);                                       \
    }                                                                                     \
    ATTR static void quick_gelu_fwd##SFX(const float *x, float *y, size_t n)              \
    {                                                                                     \
        for (size_t i = 0; i < n; i++)                                                    \
            y[i] = act_quick_gelu_fwd(x[i]);                                              \
    }                                                                                     \
    ATTR static void quick_gelu_bwd##SFX(const float *x, const float *dy, float *dx,      \
                                         size_t n)                                        \
    {                                                                                     \
        for (size_t i = 0; i < n; i++)                                                    \
            dx[i] = act_quick_gelu_bwd(x[i], dy[i]);                                      \
    }                                                                                     \
    static const act_span_set act_spans##SFX = {                                          \
        {gelu_fwd##SFX, gelu_tanh_fwd##SFX, quick_gelu_fwd##SFX},                         \
        {gelu_bwd##SFX, gelu_tanh_bwd##SFX, quick_gelu_bwd##SFX},                         \
    };

typedef void (*act_fwd_span)(const float *x, float *y, size_t n);
typedef void (*act_bwd_span)(const float *x, const float *dy, float *dx, size_t n);

/* One compilation of the loops, indexed by rv_act. */
typedef struct act_span_set {
    act_fwd_span fwd[3];
    act_bwd_span bwd[3];
} act_span_set;
_Static_assert(RV_ACT_GELU == 0 && RV_ACT_GELU_TANH == 1 && RV_ACT_QUICK_GELU == 2,
               "act_span_set is indexed by rv_act");

ACT_SPANS(_base, )
#if defined(__x86_64__) && defined(__GNUC__)
ACT_SPANS(_fma, __attribute__((target("avx2,fma"))))
#endif

/* The loops for this CPU. */
static const act_span_set *act_spans(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return &act_spans_fma;
#endif
    return &act_spans_base;
}

/* Thread t of the team takes elements [n t / T, n (t + 1) / T), whole 16-element
 * blocks but the last. */
static void thread_span(size_t n, size_t *lo, size_t *hi)
{
    size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
    size_t blocks = (n + 15) / 16;
    *lo = blocks * t / nt * 16;
    *hi = blocks * (t + 1) / nt * 16;
    *lo = *lo < n ? *lo : n;
    *hi = *hi < n ? *hi : n;
}

static void run_fwd(int threads, act_fwd_span f, const float *x, float *y, size_t n)
{
#pragma omp parallel num_threads(threads) if (n > PAR_MIN_ELEMS)
    {
        size_t lo, hi;
        thread_span(n, &lo, &hi);
        f(x + lo, y + lo, hi - lo);
    }
}

static void run_bwd(int threads, act_bwd_span f, const float *x, const float *dy, float *dx,
                    size_t n)
{
#pragma omp parallel num_threads(threads) if (n > PAR_MIN_ELEMS)
    {
        size_t lo, hi;
        thread_span(n, &lo, &hi);
        f(x + lo, dy + lo, dx + lo, hi - lo);
    }
}

rv_status cpu_act_fwd(rv_backend *be, rv_act act, const float *x, float *y, size_t n)
{
    rv_status st = rv_args_act_fwd(act, x, y, n);
    if (st != RV_OK || n == 0)
        return st;
    run_fwd(be->threads, act_spans()->fwd[act], x, y, n);
    return RV_OK;
}

rv_status cpu_act_bwd(rv_backend *be, rv_act act, const float *x, const float *dy, float *dx,
                      size_t n)
{
    rv_status st = rv_args_act_bwd(act, x, dy, dx, n);
    if (st != RV_OK || n == 0)
        return st;
    run_bwd(be->threads, act_spans()->bwd[act], x, dy, dx, n);
    return RV_OK;
}
