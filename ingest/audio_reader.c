/* audio_reader.c: demuxes and decodes one audio stream (its own demuxer, so the
 * audio is read where it is needed whatever the file's interleaving, and memory
 * stays at one block) and serves samples by position j: reads copy the
 * resampled blocks, fill gaps and the time after the stream's end with silence,
 * and drop samples before j0 (audio that starts before t0 + start). */
#include <stdlib.h>
#include <string.h>

#include "ingest_internal.h"

#define MAX_READ_ERRORS 16
#define SEEK_MIN_S 10.0   /* seek only when the start is this far into the file */
#define SEEK_MARGIN_S 1.0 /* land this much early: decoder and filter warm-up */

struct rv_audio_reader {
    const char *path;
    AVFormatContext *fmt;
    AVCodecContext *dec;
    AVStream *st;
    int index;
    AVPacket *pkt;
    AVFrame *frame;
    int has_frame;             /* frame decoded but not yet resampled */
    rv_resampler rs;
    rv_corrupt *corrupt;
    int demux_eof, drain_sent, dec_eof, flushed, ended;
    int read_errors;
    const float *blk;          /* current resampled block (inside rs) */
    int blk_n, blk_off;
    int64_t blk_pos;           /* position of blk[0] */
    int64_t end_pos;           /* one past the last sample seen */
};

rv_status rv_audio_reader_open(const char *path, int stream, int threads,
                               rv_corrupt *corrupt, rv_audio_reader **out)
{
    rv_audio_reader *r = calloc(1, sizeof *r);
    rv_status st = RV_OK;
    *out = NULL;
    if (!r)
        return rv_fail(RV_ERR_NOMEM, "%s: out of memory", path);
    r->path = path;
    r->index = stream;
    r->corrupt = corrupt;
    r->end_pos = INT64_MIN;
    if ((st = rv_media_open(path, &r->fmt)) != RV_OK)
        goto end;
    if (stream < 0 || (unsigned)stream >= r->fmt->nb_streams) {
        st = rv_fail(RV_ERR_INTERNAL, "%s: audio stream %d out of range", path, stream);
        goto end;
    }
    for (unsigned i = 0; i < r->fmt->nb_streams; i++)
        r->fmt->streams[i]->discard = (int)i == stream ? AVDISCARD_DEFAULT : AVDISCARD_ALL;
    r->st = r->fmt->streams[stream];
    if ((st = rv_decoder_open(path, r->fmt, stream, threads, &r->dec)) != RV_OK)
        goto end;
    r->pkt = av_packet_alloc();
    r->frame = av_frame_alloc();
    if (!r->pkt || !r->frame) {
        st = rv_fail(RV_ERR_NOMEM, "%s: out of memory", path);
        goto end;
    }
    rv_resampler_init(&r->rs, r->st->time_base, 0.0, AV_NOPTS_VALUE);
    *out = r;
    r = NULL;
end:
    rv_audio_reader_free(&r);
    return st;
}

void rv_audio_reader_free(rv_audio_reader **pr)
{
    rv_audio_reader *r = pr ? *pr : NULL;
    if (!r)
        return;
    rv_resampler_release(&r->rs);
    av_frame_free(&r->frame);
    av_packet_free(&r->pkt);
    avcodec_free_context(&r->dec);
    avformat_close_input(&r->fmt);
    free(r);
    *pr = NULL;
}

/* Decodes the next frame into r->frame (has_frame = 1), or sets dec_eof. */
static rv_status decode_next(rv_audio_reader *r)
{
    for (;;) {
        int got = 0, eof = 0;
        rv_status st = rv_decode_receive(r->dec, r->frame, r->index, r->corrupt, &got, &eof);
        if (st != RV_OK)
            return st;
        if (got) {
            r->has_frame = 1;
            return RV_OK;
        }
        if (eof || r->drain_sent) {
            r->dec_eof = 1;
            return RV_OK;
        }
        if (r->demux_eof) {
            r->drain_sent = 1;
            if ((st = rv_decode_send(r->dec, NULL, r->index, r->corrupt)) != RV_OK)
                return st;
            continue;
        }
        int ret = av_read_frame(r->fmt, r->pkt);
        if (ret == AVERROR_EOF) {
            r->demux_eof = 1;
            continue;
        }
        if (ret < 0) {
            if (++r->read_errors > MAX_READ_ERRORS || (r->fmt->pb && avio_feof(r->fmt->pb))) {
                rv_log(RV_LOG_WARN, "%s: cannot read the audio past this point (%s)",
                       r->path, rv_av_err(ret));
                r->demux_eof = 1;
                continue;
            }
            if ((st = rv_corrupt_add(r->corrupt, "unreadable packet", r->index, ret)) != RV_OK)
                return st;
            continue;
        }
        r->read_errors = 0;
        if (r->pkt->stream_index == r->index) {
            r->corrupt->packets++;
            st = rv_decode_send(r->dec, r->pkt, r->index, r->corrupt);
        }
        av_packet_unref(r->pkt);
        if (st != RV_OK)
            return st;
    }
}

static int64_t frame_pts(const rv_audio_reader *r, const AVFrame *f)
{
    int64_t pts = f->best_effort_timestamp != AV_NOPTS_VALUE ? f->best_effort_timestamp : f->pts;
    if (pts == AV_NOPTS_VALUE)
        pts = r->st->start_time != AV_NOPTS_VALUE ? r->st->start_time : 0;
    return pts;
}

static double frame_time(const rv_audio_reader *r, const AVFrame *f)
{
    return (double)frame_pts(r, f) * av_q2d(r->st->time_base);
}

rv_status rv_audio_reader_first_pts(rv_audio_reader *r, int64_t *pts, AVRational *tb,
                                    int *found)
{
    double t;
    rv_status st = rv_audio_reader_first_time(r, &t, found);
    if (st == RV_OK && *found) {
        *pts = frame_pts(r, r->frame);
        *tb = r->st->time_base;
    }
    return st;
}

rv_status rv_audio_reader_first_time(rv_audio_reader *r, double *t, int *found)
{
    *found = 0;
    if (!r->has_frame && !r->dec_eof) {
        rv_status st = decode_next(r);
        if (st != RV_OK)
            return st;
    }
    if (!r->has_frame)
        return RV_OK;
    *t = frame_time(r, r->frame);
    *found = 1;
    return RV_OK;
}

static void reset_decoding(rv_audio_reader *r)
{
    avcodec_flush_buffers(r->dec);
    av_frame_unref(r->frame);
    r->has_frame = 0;
    r->demux_eof = r->drain_sent = r->dec_eof = r->flushed = r->ended = 0;
    r->read_errors = 0;
    r->blk_n = r->blk_off = 0;
}

rv_status rv_audio_reader_start(rv_audio_reader *r, double start_time, int64_t j_from)
{
    rv_status st;
    double first = 0;
    int found = 0;
    if ((st = rv_audio_reader_first_time(r, &first, &found)) != RV_OK)
        return st;
    int64_t first_pts = AV_NOPTS_VALUE;
    if (found)
        first_pts = r->frame->best_effort_timestamp != AV_NOPTS_VALUE
                        ? r->frame->best_effort_timestamp
                        : r->frame->pts;
    rv_resampler_release(&r->rs);
    rv_resampler_init(&r->rs, r->st->time_base, start_time, first_pts);
    if (!found)
        return RV_OK;
    double want = start_time + (double)j_from / RV_AUDIO_RATE;
    if (want - first < SEEK_MIN_S)
        return RV_OK;
    int64_t ts = (int64_t)((want - SEEK_MARGIN_S) / av_q2d(r->st->time_base));
    if (av_seek_frame(r->fmt, r->index, ts, AVSEEK_FLAG_BACKWARD) >= 0) {
        reset_decoding(r);
        if ((st = decode_next(r)) != RV_OK)
            return st;
        if (r->has_frame && frame_time(r, r->frame) <= want)
            return RV_OK;
        rv_log(RV_LOG_DEBUG, "%s: audio seek landed late; decoding from the start", r->path);
    }
    /* Back to the beginning: correct, only slower. */
    int64_t t0 = r->fmt->start_time != AV_NOPTS_VALUE ? r->fmt->start_time : 0;
    int ret = avformat_seek_file(r->fmt, -1, INT64_MIN, t0, t0, 0);
    reset_decoding(r);
    if (ret < 0)
        return rv_fail(RV_ERR_UNSUPPORTED, "%s: cannot rewind the audio stream (%s)", r->path,
                       rv_av_err(ret));
    return RV_OK;
}

/* Makes the next block current; sets ended when the stream has no more. */
static rv_status next_block(rv_audio_reader *r)
{
    rv_status st;
    r->blk_n = r->blk_off = 0;
    if (!r->has_frame && !r->dec_eof && (st = decode_next(r)) != RV_OK)
        return st;
    const AVFrame *f = NULL;
    if (r->has_frame)
        f = r->frame;
    else if (r->flushed) {
        r->ended = 1;
        return RV_OK;
    } else
        r->flushed = 1;
    if ((st = rv_resampler_convert(&r->rs, r->path, f, &r->blk, &r->blk_n, &r->blk_pos)) !=
        RV_OK)
        return st;
    if (f) {
        av_frame_unref(r->frame);
        r->has_frame = 0;
    }
    if (r->blk_n > 0 && r->blk_pos + r->blk_n > r->end_pos)
        r->end_pos = r->blk_pos + r->blk_n;
    return RV_OK;
}

rv_status rv_audio_reader_read(rv_audio_reader *r, int64_t j0, int64_t n, float *dst,
                               int64_t *end)
{
    int64_t j = j0, stop = j0 + n;
    rv_status st;
    while (j < stop) {
        if (r->blk_off < r->blk_n) {
            int64_t bpos = r->blk_pos + r->blk_off;
            int64_t avail = r->blk_n - r->blk_off;
            if (bpos < j) { /* before the window: drop */
                int64_t skip = j - bpos < avail ? j - bpos : avail;
                r->blk_off += (int)skip;
            } else if (bpos > j) { /* a gap: silence */
                int64_t m = bpos - j < stop - j ? bpos - j : stop - j;
                memset(dst + (j - j0), 0, sizeof(float) * (size_t)m);
                j += m;
            } else {
                int64_t m = avail < stop - j ? avail : stop - j;
                memcpy(dst + (j - j0), r->blk + r->blk_off, sizeof(float) * (size_t)m);
                j += m;
                r->blk_off += (int)m;
            }
            continue;
        }
        if (r->ended) {
            memset(dst + (j - j0), 0, sizeof(float) * (size_t)(stop - j));
            break;
        }
        if ((st = next_block(r)) != RV_OK)
            return st;
    }
    *end = r->ended ? (r->end_pos == INT64_MIN ? 0 : r->end_pos) : INT64_MAX;
    return RV_OK;
}
