/* audio_patches.c: W fbank rows -> normalised audio patches (rv_patch.h), the
 * layout AST's Conv2d patch embedding reads: frequency-major, time fastest,
 * one patch per frequency band, bands fstride mel bins apart (overlapping when
 * fstride < F, as AST's 10-bin stride over 16-bin patches). */
#include "rv_patch.h"
#include "rv_tokens.h"

void rv_audio_patchify(const float *rows, int64_t row_stride, int F, int fstride, int W,
                       float mean, float std, float *out)
{
    if (fstride <= 0)
        fstride = F;
    const int bands = (RV_FBANK_BINS - F) / fstride + 1;
    const float scale = 1.0f / (2.0f * std);
    for (int b = 0; b < bands; b++)
        for (int f = 0; f < F; f++) {
            const float *col = rows + b * fstride + f;
            float *o = out + ((int64_t)b * F + f) * W;
            for (int w = 0; w < W; w++)
                o[w] = (col[w * row_stride] - mean) * scale;
        }
}
