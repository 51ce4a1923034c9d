/* timeline.c: where a recording starts on its container's clock. Decodes the
 * first frame of the video and of the audio stream ingest would read, the way
 * ingest does (the same readers, so time_origin is the very pts ingest takes),
 * and gives time_origin, t0 and the recording's start (the earlier of t0 and the first audio) in whole
 * microseconds, rounded down from the exact pts (so the first audio sample is
 * kept). */
#include <math.h>
#include <string.h>

#include "ingest_internal.h"

rv_status rv_ingest_timeline(const char *path, const rv_ingest_opts *o, rv_timeline *out)
{
    AVFormatContext *fmt = NULL;
    rv_video_reader *vr = NULL;
    rv_audio_reader *ar = NULL;
    AVFrame *first = NULL;
    rv_status st;
    int vindex = -1, aindex = -1, eof = 0, found = 0;
    int64_t vpts = 0, apts = 0;
    AVRational vtb = {1, 1}, atb = {1, 1};
    if (!out)
        return rv_fail(RV_ERR_INVALID, "timeline: out is NULL");
    *out = (rv_timeline){.time_origin = 0, .audio_s = NAN};
    if ((st = rv_ingest_opts_check(o)) != RV_OK)
        return st;
    rv_av_log_install();
    rv_corrupt corrupt = {.expected = -1, .o = o, .path = path};
    corrupt.limit = rv_ingest_corrupt_limit(o, -1);
    if ((st = rv_media_open(path, &fmt)) != RV_OK)
        goto end;
    if ((st = rv_ingest_pick_streams(path, fmt, o, 0, &vindex, &aindex)) != RV_OK)
        goto end;
    if (vindex >= 0) {
        rv_video_reader_cfg cfg = {fmt, vindex, o->threads, 0, &corrupt};
        fmt = NULL; /* the reader owns it now, even on failure */
        if (!(first = av_frame_alloc())) {
            st = rv_fail(RV_ERR_NOMEM, "%s: out of memory", path);
            goto end;
        }
        if ((st = rv_video_reader_open(path, &cfg, &vr)) != RV_OK ||
            (st = rv_video_reader_receive(vr, first, &eof)) != RV_OK)
            goto end;
        if (eof) {
            st = rv_fail(RV_ERR_FORMAT, "%s: no video frame could be decoded", path);
            goto end;
        }
        vpts = rv_frame_pts(first);
        if (vpts == AV_NOPTS_VALUE)
            vpts = 0; /* as the sampler takes it */
        vtb = rv_video_reader_stream(vr)->time_base;
        out->time_origin = (double)vpts * av_q2d(vtb);
        out->t0_us = out->start_us = rv_pts_floor_us(vpts, vtb); /* as ingest takes it */
    }
    if (aindex >= 0) {
        if ((st = rv_audio_reader_open(path, aindex, o->threads, &corrupt, &ar)) != RV_OK ||
            (st = rv_audio_reader_first_pts(ar, &apts, &atb, &found)) != RV_OK)
            goto end;
        if (!found && vindex < 0) {
            st = rv_fail(RV_ERR_FORMAT, "%s: no audio could be decoded", path);
            goto end;
        }
        if (found) {
            const int64_t a_us = rv_pts_floor_us(apts, atb);
            out->audio_s = (double)apts * av_q2d(atb);
            if (vindex < 0) {
                out->time_origin = out->audio_s;
                out->t0_us = out->start_us = a_us;
            } else if (a_us < out->start_us) {
                out->start_us = a_us;
            }
        }
    }
end:
    out->t0 = (double)out->t0_us / 1e6;
    av_frame_free(&first);
    rv_audio_reader_free(&ar);
    rv_video_reader_free(&vr);
    avformat_close_input(&fmt);
    return st;
}
