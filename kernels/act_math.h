/* act_math.h: the tanh-form GELU and quick GELU for one element, forward and
 * backward, written once for the CPU backend (cpu_act.c, where GCC vectorizes
 * loops of them) and the CUDA kernels (cuda_elementwise.cu), so both backends
 * compute the same numbers and the CPU tests vouch for the device's arithmetic.
 * Internal to kernels/.
 *
 * Both are x * sigmoid(z), of sign x:
 *   gelu_tanh:  z = 2u, u = sqrt(2/pi) (x + 0.044715 x^3)  (x/2 (1 + tanh u) = x sigmoid(2u))
 *   quick_gelu: z = 1.702 x
 *   y = x sigmoid(z),   dy/dx = sigmoid(z) (1 + g (1 - sigmoid(z))),   g = x dz/dx
 * With w = |z| and t = e^-w in (0, 1],
 *   sigmoid(z) = 1/(1+t) and 1 - sigmoid(z) = t/(1+t) for x >= 0, the reverse for x < 0,
 * so nothing cancels (1 + tanh u does, to noise, for negative x) and nothing
 * overflows (e^+w would).
 *
 * Accuracy. y shrinks like e^-w for negative x and reaches the smallest float at
 * w ~ 100, and an absolute error in w is the same relative error in e^-w. In
 * float, w would carry ~2 ulp, i.e. ~1e-5 relative in y at w = 87; so w and the
 * reduction w = n ln2 - r run in double (exact enough to not count), and only
 * e^r, with |r| <= ln2/2, in float (degree-7 Taylor polynomial, error < 1e-8).
 * 2^-n is applied in two halves, the second one last, so results in the subnormal
 * range are rounded once rather than losing the bits of an already subnormal t.
 * Measured against the double reference: within 2.5e-7 relative for every x
 * whose y is a normal float, 5e-7 for dy/dx away from its zero crossing.
 *
 * Large |x|: |x| is clamped where the outputs are settled (for x < 0, x e^-w and
 * its derivative are far below the smallest subnormal; for x > 0, y = x and
 * dy/dx = 1 exactly), so x^3 never overflows. NaN passes the clamp untouched and
 * comes out as NaN. All integer work is on unsigned values, so no input is
 * undefined behaviour. */
#ifndef RV_ACT_MATH_H
#define RV_ACT_MATH_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define ACT_FN static __device__ __forceinline__
#define ACT_F2U(f) __float_as_uint(f)
#define ACT_U2F(u) __uint_as_float(u)
#else
#define ACT_FN static inline
static inline uint32_t act_f2u(float f)
{
    union {
        float f;
        uint32_t u;
    } b = {.f = f};
    return b.u;
}
static inline float act_u2f(uint32_t u)
{
    union {
        uint32_t u;
        float f;
    } b = {.u = u};
    return b.f;
}
#define ACT_F2U(f) act_f2u(f)
#define ACT_U2F(u) act_u2f(u)
#endif

/* |x| is clamped to these: there w = 142 (tanh) and 122.5 (quick), so e^-w is
 * below 1e-53 and y and dy/dx times any sane dy round to 0 for x < 0 (and are x
 * and 1 for x > 0); and w <= 170, which act_exp_neg needs. */
#define ACT_TANH_X_MAX 12.0f
#define ACT_QUICK_X_MAX 72.0f

#define ACT_TWO_SQRT_2_OVER_PI 1.5957691216057307 /* 2 sqrt(2/pi): z = 2u */
#define ACT_TANH_C 0.044715
#define ACT_QUICK_B 1.702

/* min(|x|, max) for max > 0; NaN stays NaN. Worked on the bit patterns, which
 * order non-negative floats as their values, and selected with a mask: GCC turns
 * a plain `a < max ? a : max` followed by the double arithmetic below into a
 * branch to a constant-folded path, and then vectorizes no loop of it. */
ACT_FN float act_abs_clamp(float x, float max)
{
    uint32_t u = ACT_F2U(x) & 0x7fffffffu, um = ACT_F2U(max);
    uint32_t over = 0u - (uint32_t)(u > um && u <= 0x7f800000u); /* all ones: clamp */
    return ACT_U2F((u & ~over) | (um & over));
}

/* e^-w = m * s for 0 <= w <= 170 (or NaN), where m = e^r 2^-n1 is a normal float
 * and s = 2^-n2: n = round(w / ln2) <= 246 splits into halves of at most 123, so
 * both powers are normal floats. (The bound is kept by clamping |x|: a clamp of
 * w here would keep GCC from vectorizing the loops, as act_abs_clamp says.) */
ACT_FN void act_exp_neg(double w, float *m, float *s)
{
    const double shifter_d = 6755399441055744.0; /* 1.5 * 2^52: adding it rounds to an integer */
    const float shifter = 12582912.0f;            /* 1.5 * 2^23, the same for floats */
    double n = (w * 1.4426950408889634 + shifter_d) - shifter_d; /* round(w / ln2) */
    float r = (float)(n * 0.69314718055994531 - w);               /* e^-w = 2^-n e^r */
    float p = 1.9841270e-4f; /* 1/7!, ..., 1/1!, 1 */
    p = p * r + 1.3888889e-3f;
    p = p * r + 8.3333333e-3f;
    p = p * r + 4.1666667e-2f;
    p = p * r + 1.6666667e-1f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    float nf = (float)n;                     /* 0 .. 246, exact */
    float k1 = 0.5f * nf + shifter;          /* n1 = round(n / 2) in the low bits */
    float k2 = (nf - (k1 - shifter)) + shifter; /* n2 = n - n1 */
    uint32_t n1 = ACT_F2U(k1) - 0x4B400000u, n2 = ACT_F2U(k2) - 0x4B400000u;
    *m = p * ACT_U2F((127u - n1) << 23);
    *s = ACT_U2F((127u - n2) << 23);
}

/* The shared tail of both activations once w (= |z|) is known: y = x sigmoid(z),
 * with xs (x clamped) for x where x < 0, so a huge negative x times the t of the
 * clamped w gives 0 rather than 3e38 * e^-142. */
ACT_FN float act_sigmoid_fwd(float x, float xs, double w)
{
    float m, s;
    act_exp_neg(w, &m, &s);
    float inv = 1.0f / (1.0f + m * s);
    /* x < 0: x t/(1+t), multiplied in an order that rounds subnormal results once.
     * Both sides are computed and one is selected: no branch, so loops vectorize. */
    float neg = xs * inv * m * s, pos = x * inv;
    return x < 0.0f ? neg : pos;
}

/* dy * d(x sigmoid(z))/dx, g = x dz/dx (finite: from the clamped x). */
ACT_FN float act_sigmoid_bwd(float x, float dy, double w, float g)
{
    float m, s;
    act_exp_neg(w, &m, &s);
    float t = m * s, inv = 1.0f / (1.0f + t);
    /* x < 0: sigmoid = t inv, 1 - sigmoid = inv; x >= 0: sigmoid = inv, 1 - sigmoid = t inv */
    float neg = dy * inv * (1.0f + g * inv) * m * s, pos = dy * inv * (1.0f + g * (t * inv));
    return x < 0.0f ? neg : pos;
}

ACT_FN float act_gelu_tanh_fwd(float x)
{
    float a = act_abs_clamp(x, ACT_TANH_X_MAX);
    double ad = (double)a;
    double w = ACT_TWO_SQRT_2_OVER_PI * ad * (1.0 + ACT_TANH_C * ad * ad);
    return act_sigmoid_fwd(x, -a, w);
}

ACT_FN float act_gelu_tanh_bwd(float x, float dy)
{
    float a = act_abs_clamp(x, ACT_TANH_X_MAX);
    double ad = (double)a;
    double w = ACT_TWO_SQRT_2_OVER_PI * ad * (1.0 + ACT_TANH_C * ad * ad);
    float xc = x < 0.0f ? -a : a;
    /* x dz/dx = 2 sqrt(2/pi) x (1 + 3 * 0.044715 x^2) */
    float g = (float)ACT_TWO_SQRT_2_OVER_PI * xc * (1.0f + (float)(3.0 * ACT_TANH_C) * xc * xc);
    return act_sigmoid_bwd(x, dy, w, g);
}

ACT_FN float act_quick_gelu_fwd(float x)
{
    float a = act_abs_clamp(x, ACT_QUICK_X_MAX);
    return act_sigmoid_fwd(x, -a, ACT_QUICK_B * (double)a);
}

ACT_FN float act_quick_gelu_bwd(float x, float dy)
{
    float a = act_abs_clamp(x, ACT_QUICK_X_MAX);
    float xc = x < 0.0f ? -a : a;
    return act_sigmoid_bwd(x, dy, ACT_QUICK_B * (double)a, (float)ACT_QUICK_B * xc);
}

#endif
