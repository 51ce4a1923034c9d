/* export_rows.c: the numbers of a row as the export writes them: an output's
 * F32 / F16 / BF16 tensor to f32, each row L2-normalised and rounded to the
 * export's dtype exactly as `embed --normalize --dtype` does it (the same
 * formula, so exporting an f32 output with --normalize gives the rows embed
 * would have written), and the top labels of a row of logits. */
#include <math.h>
#include <string.h>

#include "export_internal.h"

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
    if (e == 0x1f) {
        u = sign | 0x7f800000u | (m << 13); /* infinity, NaN */
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

/* IEEE half, rounded to nearest even: subnormals below 2^-14, infinity from
 * 65520 up, NaN kept a NaN. ref: encoder/embed/embed_output.c (f32_to_f16), the
 * rounding every F16 output of embed has. */
static uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    const uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u)
        return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) {
        uint32_t h = (ax - 0x38000000u) >> 13, rem = ax & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
            h++;
        return (uint16_t)(sign | h);
    }
    const uint32_t e = ax >> 23;
    if (e < 102)
        return (uint16_t)sign;
    const uint32_t mant = (ax & 0x7fffffu) | 0x800000u, shift = 126 - e;
    uint32_t h = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

void export_to_f32(const rv_st_tensor *t, float *out)
{
    const unsigned char *p = t->data;
    for (int64_t i = 0; i < t->numel; i++) {
        if (t->dtype == RV_F32) {
            uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                         (uint32_t)p[3] << 24;
            memcpy(&out[i], &u, 4);
            p += 4;
        } else {
            const uint16_t h = (uint16_t)(p[0] | p[1] << 8);
            if (t->dtype == RV_BF16) {
                uint32_t u = (uint32_t)h << 16;
                memcpy(&out[i], &u, 4);
            } else {
                out[i] = f16_to_f32(h);
            }
            p += 2;
        }
    }
}

void export_row_out(const float *row, int64_t cols, int norm, rv_dtype dtype, void *dst)
{
    double n = 0;
    if (norm) {
        for (int64_t c = 0; c < cols; c++)
            n += (double)row[c] * row[c];
        n = sqrt(n);
    }
    for (int64_t c = 0; c < cols; c++) {
        const float v = n > 0 ? (float)(row[c] / n) : row[c];
        if (dtype == RV_F16) {
            const uint16_t h = f32_to_f16(v);
            memcpy((unsigned char *)dst + 2 * c, &h, 2);
        } else {
            memcpy((unsigned char *)dst + 4 * c, &v, 4);
        }
    }
}

void export_top_labels(const float *logits, int n, int multi, int k, int *ids, double *p)
{
    double top = -INFINITY, sum = 0;
    for (int c = 0; c < n; c++)
        if (logits[c] > top)
            top = logits[c];
    if (!multi)
        for (int c = 0; c < n; c++)
            sum += exp((double)logits[c] - top);
    /* k passes of a selection: k is small (RV_EXPORT_TOP_K), n a label count. */
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int c = 0; c < n; c++) {
            int taken = 0;
            for (int i = 0; i < j && !taken; i++)
                taken = ids[i] == c;
            if (!taken && (best < 0 || logits[c] > logits[best] ||
                           (isnan(logits[best]) && !isnan(logits[c]))))
                best = c;
        }
        const double x = logits[best];
        ids[j] = best;
        p[j] = multi ? 1 / (1 + exp(-x)) : exp(x - top) / sum;
    }
}
