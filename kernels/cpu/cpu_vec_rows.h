/* cpu_vec_rows.h: the row operations of the attention softmax (splat, select, max,
 * horizontal max and sum, base-2 exponential, live-lane mask) for one vector width,
 * written once: RV_VEC_ROW_OPS(P, VF, VI, L) defines P_splat, P_select, P_max,
 * P_hmax, P_hsum, P_exp2 and P_lanes_below for float vectors VF and int32 vectors
 * VI of L lanes. Each width gets them at its own register size (AVX-512: 16 lanes,
 * AVX2: 8), so GCC never lowers a comparison of a vector wider than the registers
 * lane by lane. Use it in a file compiled for the instruction set of that width. */
#ifndef RV_CPU_VEC_ROWS_H
#define RV_CPU_VEC_ROWS_H

#include <stdint.h>

/* P_exp2: 2^t for t <= 0, lane by lane, as rv_exp2_nonpos in cpu_exp.h: arguments at
 * or below -127 (-inf included) give exactly 0; NaN lanes give 0 and +inf lanes 1,
 * never a wild exponent. P_exp2_nonpos: the same for arguments known to be <= 0 or
 * NaN (x - max of the row), one clamp fewer, the same bits. P_lanes_below(n): -1 in
 * lanes [0, n), 0 elsewhere. */
#define RV_VEC_ROW_OPS(P, VF, VI, L)                                                       \
    typedef uint32_t P##_u __attribute__((vector_size(sizeof(VI)))); /* wrapping ints */   \
    static inline VF P##_splat(float x)                                                    \
    {                                                                                      \
        return (VF){0} + x;                                                                \
    }                                                                                      \
    static inline VF P##_select(VI mask, VF a, VF b)                                       \
    {                                                                                      \
        return (VF)((mask & (VI)a) | (~mask & (VI)b));                                     \
    }                                                                                      \
    static inline VF P##_max(VF a, VF b)                                                   \
    {                                                                                      \
        return P##_select(a > b, a, b);                                                    \
    }                                                                                      \
    static inline float P##_hmax(VF v)                                                     \
    {                                                                                      \
        float m = v[0];                                                                    \
        for (int l = 1; l < L; l++)                                                        \
            m = v[l] > m ? v[l] : m;                                                       \
        return m;                                                                          \
    }                                                                                      \
    static inline float P##_hsum(VF v)                                                     \
    {                                                                                      \
        float s = 0.0f;                                                                    \
        for (int l = 0; l < L; l++)                                                        \
            s += v[l];                                                                     \
        return s;                                                                          \
    }                                                                                      \
    static inline VF P##_exp2_core(VF t) /* t in [-127, 0] */                             \
    {                                                                                      \
        const VF shifter = P##_splat(12582912.0f);                                         \
        VF big = t + shifter; /* 1.5 * 2^23 + round(t): round(t) in the low bits */        \
        VF r = big - shifter;                                                              \
        VF f = t - r;                                                                      \
        /* (round(t) + 127) << 23 from the low bits of big, as the conversion of r         \
         * gives it: the shift drops the 1.5 * 2^23, bit for bit the same exponent. */     \
        P##_u e = ((P##_u)big << 23) + (127u << 23);                                       \
        VF p = P##_splat(1.5403530393381606e-4f);                                          \
        p = p * f + 1.3333558146428443e-3f;                                                \
        p = p * f + 9.6181291076284772e-3f;                                                \
        p = p * f + 5.5504108664821580e-2f;                                                \
        p = p * f + 2.4022650695910071e-1f;                                                \
        p = p * f + 6.9314718055994531e-1f;                                                \
        p = p * f + 1.0f;                                                                  \
        return p * (VF)e;                                                                  \
    }                                                                                      \
    static inline VF P##_exp2(VF t)                                                        \
    {                                                                                      \
        t = P##_max(t, P##_splat(-127.0f));         /* NaN lanes become -127: 0 */         \
        t = P##_select(t < (VF){0}, t, (VF){0});    /* +inf: 1 */                          \
        return P##_exp2_core(t);                                                           \
    }                                                                                      \
    static inline VF P##_exp2_nonpos(VF t)                                                 \
    {                                                                                      \
        return P##_exp2_core(P##_max(t, P##_splat(-127.0f))); /* NaN: 0 */                 \
    }                                                                                      \
    static inline VI P##_lanes_below(int n)                                                \
    {                                                                                      \
        VI iota;                                                                           \
        for (int l = 0; l < L; l++)                                                        \
            iota[l] = l;                                                                   \
        return iota < ((VI){0} + n);                                                       \
    }

#endif
