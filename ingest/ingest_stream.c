/* ingest_stream.c: the chunk loop behind rv_ingest_stream and rv_ingest_range.
 * Opens the file, picks the streams, finds time_origin (the first video
 * frame, or the first audio frame of an audio-only file) and t0, seeks when the
 * grid starts far into the file, then repeats: fill up to chunk_frames samples,
 * read the matching audio span, hand both to the callback, the frame times
 * moved from sequence time to the container's clock (t0 + each). The video and the audio
 * each have their own demuxer, so neither waits on the other's interleaving and
 * memory holds one chunk, one audio block and the video lookahead. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ingest_internal.h"
#include "ingest_time.h"

#define SEEK_MIN_S 10.0   /* seek only when the grid starts this far in */
#define SEEK_MARGIN_S 1.0 /* aim this much before the first sample */

typedef struct ingest {
    const char *path;
    const rv_ingest_opts *o;
    rv_corrupt corrupt;
    int vindex, aindex;
    rv_video_reader *vr;
    rv_sampler smp;
    int smp_live;
    rv_audio_reader *ar;
    double t0;                /* t0 on the container clock, s (whole microseconds) */
    int64_t j_limit;          /* audio limit from duration / max_frames */
    uint8_t *frames;          /* (chunk_frames, S, S, 3) */
    double *times, *src_times;
    float *audio;
    int64_t audio_cap;
} ingest;

static void ingest_release(ingest *g)
{
    if (g->smp_live)
        rv_sampler_release(&g->smp);
    rv_video_reader_free(&g->vr);
    rv_audio_reader_free(&g->ar);
    free(g->frames);
    free(g->times);
    free(g->src_times);
    free(g->audio);
}

/* Opens the video, takes its first frame as time_origin (t0 from it) and, when
 * the grid starts far in, seeks there; falls back to decoding from the
 * beginning when the seek lands after the first sample. */
static rv_status open_video(ingest *g, AVFormatContext **fmt, rv_ingest_stats *stats)
{
    rv_video_reader_cfg cfg = {*fmt, g->vindex, g->o->threads, !g->o->decode_all, &g->corrupt};
    AVFrame *first = av_frame_alloc();
    rv_status st = RV_OK;
    int eof = 0, rotation = 0;
    int64_t time_origin = 0;
    if (!first)
        return rv_fail(RV_ERR_NOMEM, "%s: out of memory", g->path);
    *fmt = NULL; /* the reader owns it now, even on failure */
    for (int attempt = 0; attempt < 2; attempt++) {
        if (attempt == 1) { /* start over with a fresh reader: correct, only slower */
            rv_sampler_release(&g->smp);
            g->smp_live = 0;
            rv_video_reader_free(&g->vr);
            cfg.fmt = NULL;
        }
        if ((st = rv_video_reader_open(g->path, &cfg, &g->vr)) != RV_OK)
            goto end;
        AVStream *vs = rv_video_reader_stream(g->vr);
        rotation = rv_stream_rotation(vs);
        stats->rotation = rotation;
        stats->width = vs->codecpar->width;
        stats->height = vs->codecpar->height;
        g->smp_live = 1; /* released even if init stops half way */
        if ((st = rv_sampler_init(&g->smp, g->path, g->vr, g->o, rotation)) != RV_OK)
            goto end;
        if ((st = rv_video_reader_receive(g->vr, first, &eof)) != RV_OK)
            goto end;
        if (eof) {
            st = rv_fail(RV_ERR_FORMAT, "%s: no video frame could be decoded", g->path);
            goto end;
        }
        rv_sampler_set_first(&g->smp, first);
        if (attempt == 1) {
            if (g->smp.grid.time_origin != time_origin)
                st = rv_fail(RV_ERR_FORMAT, "%s: the first frame changed between two reads",
                             g->path);
            goto end;
        }
        rv_grid *grid = &g->smp.grid;
        time_origin = grid->time_origin;
        g->t0 = (double)grid->t0_us / 1e6;

        int64_t t_first = rv_grid_floor_pts(grid, grid->k_first);
        double ahead = (double)(t_first - time_origin) * av_q2d(grid->tb);
        if (g->o->decode_all || !rv_grid_valid(grid, grid->k_first) || ahead < SEEK_MIN_S)
            goto end;
        int64_t target = t_first - (int64_t)(SEEK_MARGIN_S / av_q2d(grid->tb));
        if (rv_video_reader_seek(g->vr, target) != RV_OK)
            continue;
        rv_sampler_reset(&g->smp);
        if ((st = rv_video_reader_receive(g->vr, first, &eof)) != RV_OK)
            goto end;
        int64_t pts = eof ? AV_NOPTS_VALUE : rv_frame_pts(first);
        if (pts != AV_NOPTS_VALUE && pts <= t_first) {
            rv_sampler_take(&g->smp, first);
            stats->seeked = 1;
            goto end;
        }
        rv_log(RV_LOG_DEBUG, "%s: seek landed after the first sample; decoding from the start",
               g->path);
    }
end:
    av_frame_free(&first);
    return st;
}

/* Packets the streams read should hold over the part of the recording asked
 * for (start, duration; a rank's range of it expects the same as one pass over
 * it), known before decoding (rv_ingest.h, "Corrupt data"); -1 when a stream's
 * is unknown. */
static int64_t expected_packets(const ingest *g, const AVFormatContext *fmt)
{
    double from = rv_ingest_frame_time(g->o, 0);
    double to = g->o->duration_s > 0 ? from + g->o->duration_s : INFINITY;
    double file_s = fmt->duration > 0 ? (double)fmt->duration / AV_TIME_BASE : NAN;
    const int index[2] = {g->vindex, g->aindex};
    int64_t sum = 0;
    for (int i = 0; i < 2; i++) {
        if (index[i] < 0)
            continue;
        const AVStream *s = fmt->streams[index[i]];
        const AVCodecParameters *par = s->codecpar;
        double dur = s->duration > 0 ? (double)s->duration * av_q2d(s->time_base) : file_s;
        double rate = 0;
        if (par->codec_type == AVMEDIA_TYPE_VIDEO && s->avg_frame_rate.num > 0 &&
            s->avg_frame_rate.den > 0)
            rate = av_q2d(s->avg_frame_rate);
        else if (par->codec_type == AVMEDIA_TYPE_AUDIO && par->sample_rate > 0 &&
                 par->frame_size > 0)
            rate = (double)par->sample_rate / par->frame_size;
        int64_t n = rv_ingest_packets_expected(s->nb_frames, dur, rate, from, to);
        rv_log(RV_LOG_DEBUG, "%s: stream %d: %lld packets expected (stated %lld, %g s at %g/s)",
               g->path, index[i], (long long)n, (long long)s->nb_frames, dur, rate);
        if (n < 0)
            return -1;
        sum = n < INT64_MAX - sum ? sum + n : INT64_MAX; /* a hostile count saturates */
    }
    return sum;
}

static rv_status ensure_audio_cap(ingest *g, int64_t n)
{
    if (n <= g->audio_cap)
        return RV_OK;
    float *a = realloc(g->audio, sizeof(float) * (size_t)n);
    if (!a)
        return rv_fail(RV_ERR_NOMEM, "%s: out of memory for audio", g->path);
    g->audio = a;
    g->audio_cap = n;
    return RV_OK;
}

static rv_status run(ingest *g, rv_ingest_chunk_fn fn, void *user, rv_ingest_stats *stats)
{
    const rv_ingest_opts *o = g->o;
    AVFormatContext *fmt = NULL;
    rv_status st;
    rv_grid grid; /* the grid as options give it (audio-only files use it alone) */
    rv_grid_init(&grid, o);

    if ((st = rv_media_open(g->path, &fmt)) != RV_OK)
        goto end;
    if ((st = rv_ingest_pick_streams(g->path, fmt, o, 1, &g->vindex, &g->aindex)) != RV_OK)
        goto end;
    stats->video_stream = g->vindex;
    stats->audio_stream = g->aindex;
    g->corrupt.expected = expected_packets(g, fmt);
    g->corrupt.limit = rv_ingest_corrupt_limit(o, g->corrupt.expected);
    if (g->vindex >= 0 && (st = open_video(g, &fmt, stats)) != RV_OK)
        goto end;
    avformat_close_input(&fmt);
    if (g->aindex >= 0) {
        if ((st = rv_audio_reader_open(g->path, g->aindex, o->threads, &g->corrupt, &g->ar)) !=
            RV_OK)
            goto end;
        if (g->vindex < 0) {
            int found = 0;
            int64_t pts = 0;
            AVRational tb;
            if ((st = rv_audio_reader_first_pts(g->ar, &pts, &tb, &found)) != RV_OK)
                goto end;
            if (!found) {
                st = rv_fail(RV_ERR_FORMAT, "%s: no audio could be decoded", g->path);
                goto end;
            }
            g->t0 = (double)rv_pts_floor_us(pts, tb) / 1e6; /* as for video */
        }
        double start = (double)grid.start_us / 1e6;
        if ((st = rv_audio_reader_start(g->ar, g->t0 + start,
                                        rv_ingest_audio_index(o, grid.k_first))) != RV_OK)
            goto end;
    }
    stats->t0 = g->t0;

    g->j_limit = INT64_MAX;
    if (grid.k_end != INT64_MAX)
        g->j_limit = rv_ingest_audio_index(o, grid.k_end);
    if (o->duration_s > 0) {
        int64_t jd = llround(o->duration_s * RV_AUDIO_RATE);
        if (jd < g->j_limit)
            g->j_limit = jd;
    }

    const int C = o->chunk_frames;
    const size_t fsize = (size_t)o->size * o->size * 3;
    if (g->vindex >= 0) {
        g->frames = malloc(fsize * (size_t)C);
        g->times = malloc(sizeof(double) * (size_t)C);
        g->src_times = malloc(sizeof(double) * (size_t)C);
        if (!g->frames || !g->times || !g->src_times) {
            st = rv_fail(RV_ERR_NOMEM, "%s: out of memory for a chunk of %d frames", g->path, C);
            goto end;
        }
    }

    int64_t ka = grid.k_first;
    for (;;) {
        int n = 0, last = 0;
        int64_t kb, j0 = rv_ingest_audio_index(o, ka), j1;
        if (g->vindex >= 0) {
            if ((st = rv_sampler_fill(&g->smp, C, g->frames, g->times, g->src_times, &n)) !=
                RV_OK)
                goto end;
            for (int i = 0; i < n; i++) { /* on the container's clock */
                g->times[i] = g->t0 + g->times[i];
                g->src_times[i] = g->t0 + g->src_times[i];
            }
            ka = g->smp.k_next - n;
            j0 = rv_ingest_audio_index(o, ka);
            kb = ka + n;
            last = g->smp.done;
            j1 = rv_ingest_audio_index(o, kb);
            if (last && g->smp.eof) {
                double end_rel = rv_grid_pts_seconds(&g->smp.grid, g->smp.end_pts);
                stats->end_s = end_rel;
                j1 = llround((end_rel - (double)grid.start_us / 1e6) * RV_AUDIO_RATE);
            }
        } else {
            kb = ka + C;
            if (kb > grid.k_end)
                kb = grid.k_end;
            j1 = rv_ingest_audio_index(o, kb);
            last = kb >= grid.k_end;
        }
        if (j1 > g->j_limit)
            j1 = g->j_limit;
        if (j1 < j0)
            j1 = j0;
        int64_t ns = 0;
        if (g->ar) {
            int64_t end_pos = INT64_MAX;
            if ((st = ensure_audio_cap(g, j1 - j0 + 1)) != RV_OK)
                goto end;
            if ((st = rv_audio_reader_read(g->ar, j0, j1 - j0, g->audio, &end_pos)) != RV_OK)
                goto end;
            ns = j1 - j0;
            if (g->vindex < 0 && end_pos != INT64_MAX && end_pos <= j1) {
                ns = end_pos > j0 ? end_pos - j0 : 0;
                last = 1;
                stats->end_s = (double)grid.start_us / 1e6 + (double)(j0 + ns) / RV_AUDIO_RATE;
            }
        }
        rv_ingest_chunk c = {
            .first_frame = ka,
            .nframes = n,
            .size = o->size,
            .t0 = g->t0,
            .frames = g->frames,
            .frame_time = g->times,
            .source_time = g->src_times,
            .first_sample = j0,
            .nsamples = ns,
            .audio = g->ar ? g->audio : NULL,
            .last = last,
        };
        stats->frames += n;
        stats->samples += ns;
        if ((st = fn(&c, user)) != RV_OK)
            goto end;
        if (last)
            break;
        ka = kb;
    }
    st = rv_corrupt_finish(&g->corrupt);
end:
    avformat_close_input(&fmt);
    if (g->smp_live) {
        stats->decoded_frames = g->smp.decoded;
        stats->converted_frames = g->smp.converted;
    }
    if (g->vr)
        stats->skipped_packets = rv_video_reader_skipped(g->vr);
    stats->corrupt = g->corrupt.count;
    stats->packets = g->corrupt.packets;
    stats->packets_expected = g->corrupt.expected;
    stats->corrupt_limit = g->corrupt.limit;
    stats->end_time = stats->t0 + stats->end_s;
    return st;
}

rv_status rv_ingest_stream(const char *path, const rv_ingest_opts *opts,
                           rv_ingest_chunk_fn fn, void *user, rv_ingest_stats *stats)
{
    rv_ingest_stats local;
    rv_status st = rv_ingest_opts_check(opts);
    if (st != RV_OK)
        return st;
    if (!fn)
        return rv_fail(RV_ERR_INVALID, "ingest: no chunk callback");
    if (!stats)
        stats = &local;
    memset(stats, 0, sizeof *stats);
    stats->video_stream = stats->audio_stream = -1;
    rv_av_log_install();
    ingest g = {.path = path, .o = opts, .vindex = -1, .aindex = -1};
    g.corrupt = (rv_corrupt){.expected = -1, .o = opts, .path = path,
                             .range = opts->first_frame > 0 || opts->max_frames > 0};
    g.corrupt.limit = rv_ingest_corrupt_limit(opts, -1);
    st = run(&g, fn, user, stats);
    ingest_release(&g);
    return st;
}

rv_status rv_ingest_range(const char *path, const rv_ingest_opts *opts,
                          int64_t first_frame, int64_t count, rv_ingest_chunk_fn fn,
                          void *user, rv_ingest_stats *stats)
{
    if (!opts)
        return rv_fail(RV_ERR_INVALID, "ingest: no options");
    if (first_frame < 0 || count <= 0)
        return rv_fail(RV_ERR_INVALID, "ingest range: first frame %lld and count %lld must be "
                       ">= 0 and > 0", (long long)first_frame, (long long)count);
    rv_ingest_opts o = *opts;
    o.first_frame = first_frame;
    o.max_frames = count;
    return rv_ingest_stream(path, &o, fn, user, stats);
}
