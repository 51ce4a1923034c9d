/* rv_patch.h: cutting frames into tubelet patches and a log-mel spectrogram
 * into audio patches, and back (layouts and normalisation in rv_tokens.h).
 *
 * Video: T frames (S, S, 3) RGB u8 -> (S/P)^2 patches of T*P*P*3 floats,
 * patch index y * (S/P) + x, inside a patch (t, py, px, c) with c fastest.
 * Each value is lut[c][pixel] = (pixel / 255 - mean[c]) / std[c]; the table
 * makes the map exact and identical everywhere, and unpatchify inverts it
 * exactly (the nearest table entry).
 * Audio: W consecutive fbank rows (128 bins each) -> (128 - F) / fstride + 1
 * patches of F*W floats, band b holding mel bins b*fstride .. b*fstride+F-1
 * (a Conv2d of kernel F and stride fstride over the bins), inside a patch
 * (f, w) with w fastest, each value (fbank - mean) / (2 std) as AST normalises. */
#ifndef RV_PATCH_H
#define RV_PATCH_H

#include <stdint.h>

#include "rv_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* lut[c][v] = (v / 255 - mean[c]) / std[c] for v in 0..255. */
RV_API void rv_tubelet_lut(const float mean[3], const float std[3], float lut[3][256]);

/* frames[t] (t < T) points at frame t of the tubelet, (S, S, 3); repeat a
 * pointer to repeat a frame. out: ((S/P)^2, T*P*P*3). S % P == 0. */
RV_API void rv_tubelet_patchify(const uint8_t *const *frames, int T, int S, int P,
                                const float lut[3][256], float *out);

/* The inverse: patches ((S/P)^2, T*P*P*3) -> frames[t] (S, S, 3), each value
 * the v whose lut[c][v] is nearest. */
RV_API void rv_tubelet_unpatchify(const float *patches, int T, int S, int P,
                                  const float lut[3][256], uint8_t *const *frames);

/* rows: W fbank rows, row w at rows + w * row_stride (128 bins). F in
 * [1, 128]; fstride mel bins between band starts (0: F, bands side by side).
 * out: ((128 - F) / fstride + 1, F*W). */
RV_API void rv_audio_patchify(const float *rows, int64_t row_stride, int F, int fstride, int W,
                              float mean, float std, float *out);

#ifdef __cplusplus
}
#endif
#endif
