/* video_sampler.c: the frame of each sample time. Sample k (time t_k) takes the
 * last decoded frame whose pts <= t_k, the first frame when none is; sampling
 * stops where the last frame's display ends (its pts plus its duration). Frames
 * arrive in presentation order; a frame is known to answer t_k only once the
 * next frame (pts > t_k) or the end of the stream has been seen, so the sampler
 * holds two frames: cur, which answers, and next. A frame is converted to RGB
 * only when it answers a sample, once however many samples it answers, on the
 * conversion thread (convert_worker.c) while decoding goes on. */
#include <stdlib.h>
#include <string.h>

#include "ingest_internal.h"

rv_status rv_sampler_init(rv_sampler *s, const char *path, rv_video_reader *reader,
                          const rv_ingest_opts *o, int rotation)
{
    memset(s, 0, sizeof *s);
    s->path = path;
    s->reader = reader;
    rv_grid_init(&s->grid, o);
    AVStream *st = rv_video_reader_stream(reader);
    s->grid.tb = st->time_base;
    AVRational rate = st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0
                          ? st->avg_frame_rate
                          : st->r_frame_rate;
    if (rate.num > 0 && rate.den > 0)
        s->fallback_dur = av_rescale_q(1, av_inv_q(rate), st->time_base);
    if (s->fallback_dur <= 0)
        s->fallback_dur = 1;
    s->k_next = s->grid.k_first;
    s->cur = av_frame_alloc();
    s->next = av_frame_alloc();
    if (!s->cur || !s->next)
        return rv_fail(RV_ERR_NOMEM, "%s: out of memory for frames", path);
    s->cw_live = 1;
    /* One swscale thread: the worker itself runs beside the decoder's threads
     * (measured: slice threads on top only add synchronisation). */
    rv_status status = rv_cworker_start(&s->cw, path, o->size, o->pad, rotation, 1);
    if (status != RV_OK)
        return status;
    /* The reader plans against the grid only once time_origin is known (see
     * rv_sampler_set_first): until then any frame may be the first. */
    return RV_OK;
}

void rv_sampler_release(rv_sampler *s)
{
    if (s->cw_live) /* first: the worker may still write into the caller's chunk */
        rv_cworker_stop(&s->cw);
    s->cw_live = 0;
    av_frame_free(&s->cur);
    av_frame_free(&s->next);
}

/* Display duration of a frame: its packet's duration, else one frame at the
 * stream's average rate. */
static int64_t frame_duration(const rv_sampler *s, const AVFrame *f)
{
    return f->pkt_duration > 0 ? f->pkt_duration : s->fallback_dur;
}

static void take_cur(rv_sampler *s, AVFrame *f, int64_t pts)
{
    av_frame_unref(s->cur);
    av_frame_move_ref(s->cur, f);
    s->has_cur = 1;
    s->cur_pts = pts;
    s->cur_dur = frame_duration(s, s->cur);
    s->cur_submitted = 0;
}

void rv_sampler_set_first(rv_sampler *s, AVFrame *frame)
{
    int64_t pts = rv_frame_pts(frame);
    if (pts == AV_NOPTS_VALUE)
        pts = 0;
    rv_grid_set_time_origin(&s->grid, pts);
    s->decoded++;
    take_cur(s, frame, pts);
    rv_video_reader_plan(s->reader, &s->grid, &s->k_next);
}

void rv_sampler_take(rv_sampler *s, AVFrame *frame)
{
    int64_t pts = rv_frame_pts(frame);
    if (pts == AV_NOPTS_VALUE)
        pts = s->grid.time_origin;
    s->decoded++;
    take_cur(s, frame, pts);
}

void rv_sampler_reset(rv_sampler *s)
{
    av_frame_unref(s->cur);
    av_frame_unref(s->next);
    s->has_cur = s->has_next = s->eof = s->done = 0;
    s->cur_submitted = 0;
}

/* At the end of the stream: a file whose video stops well before the length its
 * header gives was cut short (an interrupted copy or download). */
static rv_status check_truncated(rv_sampler *s)
{
    AVStream *st = rv_video_reader_stream(s->reader);
    int64_t start = st->start_time != AV_NOPTS_VALUE ? st->start_time : s->grid.time_origin;
    double got = (double)(s->end_pts - start) * av_q2d(st->time_base);
    if (rv_video_reader_truncated(s->reader))
        return rv_fail(RV_ERR_FORMAT, "%s: the file cannot be read past %.3f s; it is "
                       "truncated or damaged", s->path, got);
    if (st->duration == AV_NOPTS_VALUE || st->duration <= 0)
        return RV_OK;
    double want = (double)st->duration * av_q2d(st->time_base);
    double slack = want * 0.1 > 1.0 ? want * 0.1 : 1.0;
    if (got + slack < want)
        return rv_fail(RV_ERR_FORMAT,
                       "%s: the video stops at %.3f s but the file says it lasts %.3f s; the "
                       "file is truncated",
                       s->path, got, want);
    return RV_OK;
}

static rv_status fill(rv_sampler *s, int cap, uint8_t *frames, double *times,
                      double *src_times, int *n)
{
    const size_t fsize = (size_t)s->cw.fsize;
    rv_status st = RV_OK;
    while (*n < cap && !s->done) {
        if (!rv_grid_valid(&s->grid, s->k_next)) {
            s->done = 1;
            break;
        }
        if (s->has_cur && (s->has_next || s->eof)) {
            int64_t bound = s->eof ? s->end_pts : s->next_pts;
            if (rv_grid_floor_pts(&s->grid, s->k_next) < bound) { /* t_k < bound */
                /* Converted once, on the worker; later samples repeat it. */
                st = rv_cworker_submit(&s->cw, s->cur_submitted ? NULL : s->cur,
                                       frames + (size_t)*n * fsize, 1);
                if (st != RV_OK)
                    return st;
                s->cur_submitted = 1;
                times[*n] = rv_grid_time(&s->grid, s->k_next);
                src_times[*n] = rv_grid_pts_seconds(&s->grid, s->cur_pts);
                (*n)++;
                s->k_next++;
                continue;
            }
            if (s->eof) {
                s->done = 1;
                break;
            }
            take_cur(s, s->next, s->next_pts);
            s->has_next = 0;
            continue;
        }
        int eof = 0;
        if ((st = rv_video_reader_receive(s->reader, s->next, &eof)) != RV_OK)
            return st;
        if (eof) {
            if (!s->has_cur)
                return rv_fail(RV_ERR_FORMAT, "%s: no video frame could be decoded", s->path);
            s->eof = 1;
            s->end_pts = s->cur_pts + s->cur_dur;
            if ((st = check_truncated(s)) != RV_OK)
                return st;
            continue;
        }
        s->decoded++;
        int64_t pts = rv_frame_pts(s->next);
        if (pts == AV_NOPTS_VALUE)
            pts = s->has_cur ? s->cur_pts + s->cur_dur : s->grid.time_origin;
        if (!s->has_cur) {
            take_cur(s, s->next, pts);
        } else {
            s->has_next = 1;
            s->next_pts = pts;
        }
    }
    return RV_OK;
}

rv_status rv_sampler_fill(rv_sampler *s, int cap, uint8_t *frames, double *times,
                          double *src_times, int *n)
{
    *n = 0;
    rv_status st = fill(s, cap, frames, times, src_times, n);
    /* The chunk is complete once the worker is done with it (also on failure:
     * the caller may free the chunk). */
    rv_status wst = rv_cworker_wait(&s->cw);
    s->converted = s->cw.converted;
    return st != RV_OK ? st : wst;
}
