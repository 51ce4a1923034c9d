/* tok_opts.c: the tokenizer options: defaults (AST audio, ImageNet video, no
 * blocks), the checks that need nothing but the options themselves, and the
 * audio band count they imply. */
#include <math.h>

#include "rv_tokens.h"

const char *rv_modality_name(int modality)
{
    switch (modality) {
    case RV_MOD_VIDEO: return "video";
    case RV_MOD_AUDIO: return "audio";
    case RV_MOD_CLS: return "cls";
    default: return "?";
    }
}

void rv_tok_opts_default(rv_tok_opts *o)
{
    *o = (rv_tok_opts){
        .tubelet = 2,
        .patch = 16,
        .mean = {0.485f, 0.456f, 0.406f},
        .std = {0.229f, 0.224f, 0.225f},
        .audio_freq = 16,
        .audio_time = 16,
        .audio_stride = 16,
        .audio_fstride = 0,
        .audio_mean = -4.2677393f,
        .audio_std = 4.5689974f,
        .window_s = 2.0,
        .cls = 0,
        .video = 1,
        .audio = 1,
        .frame_windows = 0,
        .cls_each_window = 0,
        .window_positions = 0,
    };
}

rv_status rv_tok_opts_check(const rv_tok_opts *o)
{
    if (!o)
        return rv_fail(RV_ERR_INVALID, "tokenize: no options");
    if (o->tubelet < 1 || o->tubelet > 64)
        return rv_fail(RV_ERR_INVALID, "tokenize: tubelet %d must be in [1, 64] frames", o->tubelet);
    if (o->patch < 1 || o->patch > 4096)
        return rv_fail(RV_ERR_INVALID, "tokenize: patch %d must be in [1, 4096] pixels", o->patch);
    for (int c = 0; c < 3; c++) {
        if (!isfinite(o->mean[c]) || !(o->std[c] > 0) || !isfinite(o->std[c]))
            return rv_fail(RV_ERR_INVALID,
                           "tokenize: video mean %g / std %g of channel %d: need finite, std > 0",
                           o->mean[c], o->std[c], c);
    }
    if (o->audio_freq < 1 || o->audio_freq > RV_FBANK_BINS)
        return rv_fail(RV_ERR_INVALID, "tokenize: audio patch of %d mel bins must be in [1, %d]",
                       o->audio_freq, RV_FBANK_BINS);
    if (o->audio_fstride < 0 || o->audio_fstride > RV_FBANK_BINS)
        return rv_fail(RV_ERR_INVALID, "tokenize: audio frequency stride %d must be in [0, %d] "
                       "mel bins (0: the patch's %d)", o->audio_fstride, RV_FBANK_BINS,
                       o->audio_freq);
    if (o->audio_time < 1 || o->audio_time > 4096)
        return rv_fail(RV_ERR_INVALID, "tokenize: audio patch of %d frames must be in [1, 4096]",
                       o->audio_time);
    if (o->audio_stride < 1 || o->audio_stride > 4096)
        return rv_fail(RV_ERR_INVALID, "tokenize: audio stride %d must be in [1, 4096] frames",
                       o->audio_stride);
    if (!isfinite(o->audio_mean) || !(o->audio_std > 0) || !isfinite(o->audio_std))
        return rv_fail(RV_ERR_INVALID, "tokenize: audio mean %g / std %g: need finite, std > 0",
                       o->audio_mean, o->audio_std);
    if ((unsigned)o->frame_windows > 1 || (unsigned)o->cls_each_window > 1 ||
        (unsigned)o->window_positions > 1)
        return rv_fail(RV_ERR_INVALID, "tokenize: frame_windows %d, cls_each_window %d, "
                       "window_positions %d: each must be 0 or 1", o->frame_windows,
                       o->cls_each_window, o->window_positions);
    if (o->frame_windows && !o->video)
        return rv_fail(RV_ERR_INVALID, "tokenize: frame windows (window w = tubelet w) need "
                       "video, and video is left out");
    /* frame windows do not use window_s */
    if (!o->frame_windows && !(o->window_s >= 0.01 && o->window_s <= 86400.0))
        return rv_fail(RV_ERR_INVALID, "tokenize: window %g s must be in [0.01, 86400]",
                       o->window_s);
    if (o->cls < 0 || o->cls > 2)
        return rv_fail(RV_ERR_INVALID, "tokenize: %d leading special tokens: cls must be 0, 1 "
                       "(a class token) or 2 (class and distillation tokens)", o->cls);
    if (!o->video && !o->audio)
        return rv_fail(RV_ERR_INVALID, "tokenize: neither video nor audio: no tokens to make");
    return RV_OK;
}

int rv_tok_audio_fstride(const rv_tok_opts *o)
{
    return o->audio_fstride > 0 ? o->audio_fstride : o->audio_freq;
}

/* As a strided Conv2d over the 128 mel bins counts its outputs: the bins above
 * the last whole band are read by no band. */
int rv_tok_audio_bands(const rv_tok_opts *o)
{
    return (RV_FBANK_BINS - o->audio_freq) / rv_tok_audio_fstride(o) + 1;
}
