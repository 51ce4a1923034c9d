/* rv_fbank.h: the Kaldi log-mel filterbank with the Audio Spectrogram
 * Transformer's settings, as torchaudio.compliance.kaldi.fbank(w,
 * htk_compat=True, window_type='hanning', num_mel_bins=128, dither=0.0,
 * frame_shift=10, use_energy=False, sample_frequency=16000) computes it, with
 * torchaudio's other defaults (checked against torchaudio 0.13's source):
 *   - frames of 400 samples (25 ms) every 160 (10 ms), only whole frames
 *     (snip_edges): 1 + (n - 400) / 160 frames for n >= 400 samples, else none;
 *   - per frame: subtract the frame's mean (remove_dc_offset), pre-emphasis
 *     x[i] -= 0.97 x[i-1] (x[-1] = x[0]), symmetric Hann window
 *     0.5 - 0.5 cos(2 pi i / 399), zero-padded to 512;
 *   - power spectrum |X_k|^2 of a 512-point real FFT (libavutil av_tx, double);
 *   - 128 triangular mel filters, HTK mel scale 1127 ln(1 + f / 700), 20 Hz to
 *     8000 Hz (Nyquist), over FFT bins 0..255;
 *   - natural log with a floor of FLT_EPSILON (1.1920929e-07).
 * Output rows are float32 log-mel energies, not normalised (rv_tokens.h says how
 * audio patches are). Each frame reads only its own 400 samples, so any split
 * of a signal into overlapping pieces gives the same rows. */
#ifndef RV_FBANK_H
#define RV_FBANK_H

#include <stdint.h>

#include "rv_api.h"
#include "rv_status.h"
#include "rv_tokens.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Filterbank state: FFT plan, window, mel weights, scratch. One per thread. */
typedef struct rv_fbank rv_fbank;

RV_API rv_status rv_fbank_new(rv_fbank **out);
/* Sets *fb to NULL; NULL or *fb == NULL is a no-op. */
RV_API void rv_fbank_free(rv_fbank **fb);

/* Frames made from n samples: 1 + (n - 400) / 160 for n >= 400, else 0. */
RV_API int64_t rv_fbank_frames(int64_t n);

/* One frame from x[0..400) into out[0..128). */
RV_API void rv_fbank_frame(rv_fbank *fb, const float *x, float *out);

/* All rv_fbank_frames(n) frames of samples[0..n) into out (frames, 128). */
RV_API void rv_fbank_compute(rv_fbank *fb, const float *samples, int64_t n, float *out);

#ifdef __cplusplus
}
#endif
#endif
