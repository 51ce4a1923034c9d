/* fbank_unavailable.c: the filterbank in a build without FFmpeg (its FFT is
 * libavutil's av_tx), which replaces fbank.c: audio cannot be tokenized there and
 * rv_fbank_new says so; the rest of tokenize (shard plans, layouts) is whole. */
#include "rv_fbank.h"

rv_status rv_fbank_new(rv_fbank **out)
{
    if (out)
        *out = NULL;
    return rv_fail(RV_ERR_UNSUPPORTED, "fbank: this ringvit was built without FFmpeg "
                   "(RINGVIT_MEDIA=OFF), whose FFT the filterbank uses");
}

void rv_fbank_free(rv_fbank **fb)
{
    if (fb)
        *fb = NULL;
}

int64_t rv_fbank_frames(int64_t n)
{
    return n >= RV_FBANK_LEN ? 1 + (n - RV_FBANK_LEN) / RV_FBANK_HOP : 0;
}

void rv_fbank_frame(rv_fbank *fb, const float *x, float *out)
{
    (void)fb, (void)x, (void)out; /* unreachable: no rv_fbank exists */
}

void rv_fbank_compute(rv_fbank *fb, const float *samples, int64_t n, float *out)
{
    (void)fb, (void)samples, (void)n, (void)out;
}
