/* tubelet.c: video frames <-> tubelet patches (rv_patch.h). One pass over
 * each patch row reads P contiguous RGB pixels, so the cost is a table lookup
 * per byte. */
#include <math.h>
#include <string.h>

#include "rv_patch.h"

void rv_tubelet_lut(const float mean[3], const float std[3], float lut[3][256])
{
    for (int c = 0; c < 3; c++)
        for (int v = 0; v < 256; v++)
            lut[c][v] = (float)(((double)v / 255.0 - mean[c]) / std[c]);
}

void rv_tubelet_patchify(const uint8_t *const *frames, int T, int S, int P,
                         const float lut[3][256], float *out)
{
    const int G = S / P;
    const int64_t dim = (int64_t)T * P * P * 3;
    for (int gy = 0; gy < G; gy++)
        for (int gx = 0; gx < G; gx++) {
            float *o = out + (int64_t)(gy * G + gx) * dim;
            for (int t = 0; t < T; t++)
                for (int py = 0; py < P; py++) {
                    const uint8_t *src = frames[t] + ((size_t)(gy * P + py) * S + (size_t)gx * P) * 3;
                    for (int px = 0; px < P; px++, src += 3, o += 3) {
                        o[0] = lut[0][src[0]];
                        o[1] = lut[1][src[1]];
                        o[2] = lut[2][src[2]];
                    }
                }
        }
}

/* The v in 0..255 whose table value is nearest to x (the table is increasing:
 * std > 0). */
static uint8_t nearest(const float *lut, float x)
{
    int lo = 0, hi = 255;
    while (lo < hi) { /* first v with lut[v] >= x */
        int mid = (lo + hi) / 2;
        if (lut[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo > 0 && fabsf(x - lut[lo - 1]) <= fabsf(lut[lo] - x))
        lo--;
    return (uint8_t)lo;
}

void rv_tubelet_unpatchify(const float *patches, int T, int S, int P,
                           const float lut[3][256], uint8_t *const *frames)
{
    const int G = S / P;
    const int64_t dim = (int64_t)T * P * P * 3;
    for (int gy = 0; gy < G; gy++)
        for (int gx = 0; gx < G; gx++) {
            const float *in = patches + (int64_t)(gy * G + gx) * dim;
            for (int t = 0; t < T; t++)
                for (int py = 0; py < P; py++) {
                    uint8_t *dst = frames[t] + ((size_t)(gy * P + py) * S + (size_t)gx * P) * 3;
                    for (int px = 0; px < P; px++, dst += 3, in += 3) {
                        dst[0] = nearest(lut[0], in[0]);
                        dst[1] = nearest(lut[1], in[1]);
                        dst[2] = nearest(lut[2], in[2]);
                    }
                }
        }
}
