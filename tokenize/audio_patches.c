/* audio_patches.c: W fbank rows -> 128/F normalised audio patches (rv_patch.h),
 * the layout AST's Conv2d patch embedding reads: frequency-major, time fastest. */
#include "rv_patch.h"
#include "rv_tokens.h"

void rv_audio_patchify(const float *rows, int64_t row_stride, int F, int W, float mean,
                       float std, float *out)
{
    const int bands = RV_FBANK_BINS / F;
    const float scale = 1.0f / (2.0f * std);
    for (int b = 0; b < bands; b++)
        for (int f = 0; f < F; f++) {
            const float *col = rows + b * F + f;
            float *o = out + ((int64_t)b * F + f) * W;
            for (int w = 0; w < W; w++)
                o[w] = (col[w * row_stride] - mean) * scale;
        }
}
