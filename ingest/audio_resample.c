/* audio_resample.c: decoded audio frames -> mono 16 kHz float through swresample
 * (its default downmix and filter, as `ffmpeg -ac 1 -ar 16000` uses), each output
 * block with its sample position j (0 at t0 + start). Positions follow the
 * samples, not each frame's pts, as long as the pts agree within 40 ms; a larger
 * jump (a gap in the recording, or overlapping timestamps) starts a new segment
 * at the frame's own pts, so the reader can fill the gap with silence or trim
 * the overlap. A change of input format starts a new segment too. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <libavutil/mathematics.h>
#include <libavutil/opt.h>

#include "ingest_internal.h"

#define RESYNC_S 0.040

void rv_resampler_init(rv_resampler *r, AVRational tb, double start_time, int64_t first_pts)
{
    memset(r, 0, sizeof *r);
    r->tb = tb;
    r->start_time = start_time;
    r->first_pts = first_pts;
    r->in_fmt = -1;
}

/* Where a new segment starting with frame (pts) goes, on the grid of a run that
 * resampled the stream from its first frame without a break: input sample m
 * (counted from the first frame, at this rate) meets an output sample exactly
 * when m is a multiple of L = rate / gcd(rate, 16000). Dropping the d < L samples
 * up to the next such m puts every output sample of the segment where the
 * unbroken run has one, so a part reached by seeking reproduces the whole run's
 * audio (after the filter's warm-up, inside the seek margin), not a copy shifted
 * by a fraction of a sample. *skip = d; returns the segment's position. */
static double grid_start(rv_resampler *r, const AVFrame *f, int64_t pts, int *skip)
{
    const int64_t rate = f->sample_rate;
    double fpos = ((double)pts * av_q2d(r->tb) - r->start_time) * RV_AUDIO_RATE;
    *skip = 0;
    if (r->first_pts == AV_NOPTS_VALUE || rate <= 0)
        return fpos;
    const int64_t g = av_gcd(rate, RV_AUDIO_RATE), L = rate / g, M = RV_AUDIO_RATE / g;
    const int64_t m = av_rescale_q(pts - r->first_pts, r->tb, (AVRational){1, (int)rate});
    const int64_t d = ((L - m % L) % L + L) % L;
    if (d >= f->nb_samples)
        return fpos;
    *skip = (int)d;
    double pos0 = ((double)r->first_pts * av_q2d(r->tb) - r->start_time) * RV_AUDIO_RATE;
    return (double)(llround(pos0) + (m + d) / L * M);
}

void rv_resampler_release(rv_resampler *r)
{
    swr_free(&r->swr);
    av_channel_layout_uninit(&r->in_layout);
    free(r->buf);
    r->buf = NULL;
    r->buf_cap = 0;
}

static rv_status configure(rv_resampler *r, const char *path, const AVFrame *f)
{
    AVChannelLayout in = {0};
    rv_status st = RV_OK;
    int ret;
    if (f->ch_layout.nb_channels <= 0) {
        st = rv_fail(RV_ERR_FORMAT, "%s: audio frame without channels", path);
        goto end;
    }
    if (f->ch_layout.order == AV_CHANNEL_ORDER_UNSPEC)
        av_channel_layout_default(&in, f->ch_layout.nb_channels);
    else if ((ret = av_channel_layout_copy(&in, &f->ch_layout)) < 0) {
        st = rv_fail(RV_ERR_NOMEM, "%s: out of memory", path);
        goto end;
    }
    if (r->swr && r->in_fmt == f->format && r->in_rate == f->sample_rate &&
        !av_channel_layout_compare(&r->in_layout, &in))
        goto end;
    if (f->sample_rate <= 0) {
        st = rv_fail(RV_ERR_FORMAT, "%s: audio frame without a sample rate", path);
        goto end;
    }
    swr_free(&r->swr);
    AVChannelLayout mono = AV_CHANNEL_LAYOUT_MONO;
    ret = swr_alloc_set_opts2(&r->swr, &mono, AV_SAMPLE_FMT_FLT, RV_AUDIO_RATE, &in,
                              f->format, f->sample_rate, 0, NULL);
    if (ret >= 0)
        ret = swr_init(r->swr);
    if (ret < 0) {
        swr_free(&r->swr);
        st = rv_fail(RV_ERR_UNSUPPORTED, "%s: cannot resample %d Hz %d-channel audio (%s)",
                     path, f->sample_rate, in.nb_channels, rv_av_err(ret));
        goto end;
    }
    av_channel_layout_uninit(&r->in_layout);
    r->in_layout = in;
    in = (AVChannelLayout){0};
    r->in_fmt = f->format;
    r->in_rate = f->sample_rate;
    r->have_seg = 0; /* a new format starts a new segment */
end:
    av_channel_layout_uninit(&in);
    return st;
}

static rv_status reserve(rv_resampler *r, const char *path, int n)
{
    if (n <= r->buf_cap)
        return RV_OK;
    float *b = realloc(r->buf, sizeof(float) * (size_t)n);
    if (!b)
        return rv_fail(RV_ERR_NOMEM, "%s: out of memory for audio", path);
    r->buf = b;
    r->buf_cap = n;
    return RV_OK;
}

rv_status rv_resampler_convert(rv_resampler *r, const char *path, const AVFrame *frame,
                               const float **out, int *n, int64_t *pos)
{
    rv_status st;
    *out = r->buf;
    *n = 0;
    *pos = 0;
    if (!frame) { /* flush what the filter still holds */
        if (!r->swr || !r->have_seg)
            return RV_OK;
        int cap = swr_get_out_samples(r->swr, 0) + 64;
        if ((st = reserve(r, path, cap)) != RV_OK)
            return st;
        uint8_t *dst = (uint8_t *)r->buf;
        int got = swr_convert(r->swr, &dst, cap, NULL, 0);
        if (got < 0)
            return rv_fail(RV_ERR_BACKEND, "%s: swresample failed (%s)", path, rv_av_err(got));
        *out = r->buf;
        *n = got;
        *pos = llround(r->seg_pos) + r->seg_out;
        r->seg_out += got;
        return RV_OK;
    }
    if ((st = configure(r, path, frame)) != RV_OK)
        return st;
    int64_t pts = frame->best_effort_timestamp != AV_NOPTS_VALUE ? frame->best_effort_timestamp
                                                                  : frame->pts;
    double fpos = 0;
    if (pts != AV_NOPTS_VALUE)
        fpos = ((double)pts * av_q2d(r->tb) - r->start_time) * RV_AUDIO_RATE;
    int skip = 0;
    if (!r->have_seg) {
        r->seg_pos = pts != AV_NOPTS_VALUE ? fpos : 0;
        if (pts != AV_NOPTS_VALUE && r->first_pts != AV_NOPTS_VALUE)
            r->seg_pos = grid_start(r, frame, pts, &skip);
        r->seg_in = r->seg_out = 0;
        r->have_seg = 1;
    } else if (pts != AV_NOPTS_VALUE) {
        double expect = r->seg_pos + (double)r->seg_in * RV_AUDIO_RATE / r->in_rate;
        if (fabs(fpos - expect) > RESYNC_S * RV_AUDIO_RATE) {
            rv_log(RV_LOG_DEBUG, "%s: audio timestamps jump by %.3f s; resyncing", path,
                   (fpos - expect) / RV_AUDIO_RATE);
            /* Restart the filter: the few samples it still holds belong to the
             * old segment, which the jump cuts off anyway. */
            swr_close(r->swr);
            int ret = swr_init(r->swr);
            if (ret < 0)
                return rv_fail(RV_ERR_BACKEND, "%s: swresample failed (%s)", path,
                               rv_av_err(ret));
            r->seg_pos = grid_start(r, frame, pts, &skip);
            r->seg_in = r->seg_out = 0;
        }
    }
    /* The frame's samples from skip on. */
    const int channels = frame->ch_layout.nb_channels;
    const int planar = av_sample_fmt_is_planar(frame->format);
    const int bps = av_get_bytes_per_sample(frame->format);
    const uint8_t *in_small[16], **in = in_small;
    int nplanes = planar ? channels : 1;
    if (nplanes > 16 && !(in = malloc(sizeof *in * (size_t)nplanes)))
        return rv_fail(RV_ERR_NOMEM, "%s: out of memory for audio", path);
    for (int i = 0; i < nplanes; i++)
        in[i] = frame->extended_data[i] + (size_t)skip * bps * (planar ? 1 : channels);
    const int nin = frame->nb_samples - skip;
    int cap = swr_get_out_samples(r->swr, nin) + 64;
    if ((st = reserve(r, path, cap)) != RV_OK) {
        if (in != in_small)
            free(in);
        return st;
    }
    uint8_t *dst = (uint8_t *)r->buf;
    int got = swr_convert(r->swr, &dst, cap, in, nin);
    if (in != in_small)
        free(in);
    if (got < 0)
        return rv_fail(RV_ERR_BACKEND, "%s: swresample failed (%s)", path, rv_av_err(got));
    *out = r->buf;
    *n = got;
    *pos = llround(r->seg_pos) + r->seg_out;
    r->seg_out += got;
    r->seg_in += nin;
    return RV_OK;
}
