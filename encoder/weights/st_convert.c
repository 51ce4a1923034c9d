/* st_convert.c: the float formats of safetensors tensors (F32, F16, BF16) to f32
 * and back, written once for every reader and writer of the library: the weight
 * loaders (any stored dtype to f32), the embed outputs and the exports (rows,
 * L2-normalised when asked, rounded to F16 or BF16 to nearest even). */
#include <math.h>
#include <string.h>

#include "st_convert.h"

static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
    if (e == 0x1f) {
        u = sign | 0x7f800000u | (m << 13); /* inf, nan */
    } else if (e != 0) {
        u = sign | ((e + 112) << 23) | (m << 13);
    } else if (m == 0) {
        u = sign;
    } else { /* subnormal: normalise */
        int sh = 0;
        while (!(m & 0x400)) {
            m <<= 1;
            sh++;
        }
        u = sign | ((uint32_t)(113 - sh) << 23) | ((m & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void st_to_f32(const rv_st_tensor *t, float *out)
{
    const unsigned char *p = t->data;
    if (t->dtype == RV_F32) {
        for (int64_t i = 0; i < t->numel; i++, p += 4) {
            uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                         (uint32_t)p[3] << 24;
            memcpy(&out[i], &u, 4);
        }
    } else {
        for (int64_t i = 0; i < t->numel; i++, p += 2) {
            uint16_t h = (uint16_t)(p[0] | p[1] << 8);
            if (t->dtype == RV_BF16) {
                uint32_t u = (uint32_t)h << 16;
                memcpy(&out[i], &u, 4);
            } else {
                out[i] = half_to_float(h);
            }
        }
    }
}

/* IEEE half, rounded to nearest even: subnormals below 2^-14, infinity from
 * 65520 up (the halfway point past the largest half, 65504), NaN kept a NaN. */
static uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    const uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: quiet, the payload's top bits kept */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* infinity, or rounds to it */
        return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) { /* normal: rebias the exponent, round off 13 bits */
        uint32_t h = (ax - 0x38000000u) >> 13, rem = ax & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
            h++; /* a carry into the exponent is still right */
        return (uint16_t)(sign | h);
    }
    /* subnormal (or zero): the value in units of 2^-24, rounded */
    const uint32_t e = ax >> 23;
    if (e < 102) /* below 2^-25: rounds to zero */
        return (uint16_t)sign;
    const uint32_t mant = (ax & 0x7fffffu) | 0x800000u, shift = 126 - e; /* 14..24 */
    uint32_t h = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u)))
        h++; /* 0x400: the smallest normal, also right */
    return (uint16_t)(sign | h);
}

/* bfloat16, rounded to nearest even (overflow to infinity); NaN kept a NaN. */
static uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* rows x cols floats as written: each row divided by its L2 norm (norm; a zero
 * row stays zero), then converted to dtype, into dst (rows * cols elements). */
void st_rows_out(const float *x, int64_t rows, int64_t cols, int norm, rv_dtype dtype,
                     void *dst)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *row = x + r * cols;
        double n = 0;
        if (norm) {
            for (int64_t c = 0; c < cols; c++)
                n += (double)row[c] * row[c];
            n = sqrt(n);
        }
        for (int64_t c = 0; c < cols; c++) {
            const float v = n > 0 ? (float)(row[c] / n) : row[c];
            const int64_t i = r * cols + c;
            if (dtype == RV_F16)
                ((uint16_t *)dst)[i] = f32_to_f16(v);
            else if (dtype == RV_BF16)
                ((uint16_t *)dst)[i] = f32_to_bf16(v);
            else
                ((float *)dst)[i] = v;
        }
    }
}
