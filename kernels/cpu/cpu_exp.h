/* cpu_exp.h: a fast base-2 exponential for the attention kernels' softmax. Written
 * so GCC vectorizes a loop of it (no libm call, no branches): round-to-nearest by
 * the 1.5*2^23 trick, a degree-6 polynomial for 2^f on [-1/2, 1/2] (relative error
 * below 2e-7), and the integer part added to the exponent bits. Arguments at or
 * below -127, -inf included, give exactly 0; arguments must be <= 0 (the
 * softmax only ever exponentiates x - max): larger ones give 1, NaN gives 0. */
#ifndef RV_CPU_EXP_H
#define RV_CPU_EXP_H

#include <stdint.h>

#define RV_LOG2E 1.4426950408889634f
#define RV_LN2 0.6931471805599453f

static inline float rv_exp2_nonpos(float t)
{
    /* Into [-127, 0] before the integer part is taken: NaN (from NaN or infinite
     * scores) gives 0 and +inf 1, never an out-of-range conversion or shift. */
    t = t > -127.0f ? t : -127.0f;
    t = t < 0.0f ? t : 0.0f;
    const float shifter = 12582912.0f; /* 1.5 * 2^23 */
    float r = (t + shifter) - shifter; /* t rounded to the nearest integer */
    float f = t - r;                   /* in [-1/2, 1/2] */
    union {
        int32_t i;
        float f;
    } scale = {.i = ((int32_t)r + 127) << 23}; /* 2^r, and exactly 0 for r = -127 */
    /* Taylor coefficients of 2^f = e^(f ln 2). */
    float p = 1.5403530393381606e-4f;
    p = p * f + 1.3333558146428443e-3f;
    p = p * f + 9.6181291076284772e-3f;
    p = p * f + 5.5504108664821580e-2f;
    p = p * f + 2.4022650695910071e-1f;
    p = p * f + 6.9314718055994531e-1f;
    p = p * f + 1.0f;
    return p * scale.f;
}

#endif
