/* probe.c: rv_probe_file, what a media file holds (container, streams, sizes,
 * rates, rotation, which streams ingest would use) from its headers and
 * FFmpeg's stream analysis, without decoding the recording. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <libavutil/pixdesc.h>

#include "ingest_internal.h"

static double ts_seconds(int64_t ts, AVRational tb)
{
    return ts == AV_NOPTS_VALUE ? NAN : (double)ts * av_q2d(tb);
}

static void fill_stream(rv_probe_stream *ps, const AVStream *st)
{
    const AVCodecParameters *par = st->codecpar;
    ps->index = st->index;
    ps->kind = par->codec_type == AVMEDIA_TYPE_VIDEO   ? RV_STREAM_VIDEO
               : par->codec_type == AVMEDIA_TYPE_AUDIO ? RV_STREAM_AUDIO
                                                       : RV_STREAM_OTHER;
    if (ps->kind == RV_STREAM_VIDEO && (st->disposition & AV_DISPOSITION_ATTACHED_PIC))
        ps->kind = RV_STREAM_OTHER; /* cover art */
    snprintf(ps->codec, sizeof ps->codec, "%s", rv_codec_desc(par));
    ps->decodable = rv_stream_decodable(st);
    ps->is_default = !!(st->disposition & AV_DISPOSITION_DEFAULT);
    ps->start_s = ts_seconds(st->start_time, st->time_base);
    ps->duration_s = ts_seconds(st->duration, st->time_base);
    ps->nb_frames = st->nb_frames > 0 ? st->nb_frames : 0;
    ps->bit_rate = par->bit_rate > 0 ? par->bit_rate : 0;
    if (par->codec_type == AVMEDIA_TYPE_VIDEO) {
        ps->width = par->width;
        ps->height = par->height;
        ps->rotation = rv_stream_rotation(st);
        AVRational r = st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0
                           ? st->avg_frame_rate
                           : st->r_frame_rate;
        ps->fps = r.num > 0 && r.den > 0 ? av_q2d(r) : 0.0;
        const char *pf = av_get_pix_fmt_name(par->format);
        snprintf(ps->pix_fmt, sizeof ps->pix_fmt, "%s", pf ? pf : "");
    } else if (par->codec_type == AVMEDIA_TYPE_AUDIO) {
        ps->sample_rate = par->sample_rate;
        ps->channels = par->ch_layout.nb_channels;
        if (par->ch_layout.order != AV_CHANNEL_ORDER_UNSPEC &&
            av_channel_layout_describe(&par->ch_layout, ps->channel_layout,
                                       sizeof ps->channel_layout) < 0)
            ps->channel_layout[0] = '\0';
    }
}

rv_status rv_probe_file(const char *path, rv_probe **out)
{
    AVFormatContext *fmt = NULL;
    rv_probe *p = NULL;
    rv_status st;
    *out = NULL;
    if ((st = rv_media_open(path, &fmt)) != RV_OK)
        goto end;
    p = calloc(1, sizeof *p);
    if (!p || !(p->streams = calloc(fmt->nb_streams, sizeof *p->streams))) {
        st = rv_fail(RV_ERR_NOMEM, "%s: out of memory", path);
        goto end;
    }
    snprintf(p->path, sizeof p->path, "%s", path);
    snprintf(p->format, sizeof p->format, "%s", fmt->iformat->name);
    p->duration_s = ts_seconds(fmt->duration, AV_TIME_BASE_Q);
    p->start_s = ts_seconds(fmt->start_time, AV_TIME_BASE_Q);
    p->bit_rate = fmt->bit_rate > 0 ? fmt->bit_rate : 0;
    struct stat sb;
    p->size_bytes = stat(path, &sb) == 0 ? (int64_t)sb.st_size : 0;
    p->nstreams = (int)fmt->nb_streams;
    for (unsigned i = 0; i < fmt->nb_streams; i++)
        fill_stream(&p->streams[i], fmt->streams[i]);
    /* What ingest would pick; an undecodable kind is just absent here. */
    if (rv_media_pick(path, fmt, AVMEDIA_TYPE_VIDEO, -1, &p->video) != RV_OK)
        p->video = -1;
    if (rv_media_pick(path, fmt, AVMEDIA_TYPE_AUDIO, -1, &p->audio) != RV_OK)
        p->audio = -1;
    rv_clear_error();
    *out = p;
    p = NULL;
end:
    avformat_close_input(&fmt);
    rv_probe_free(&p);
    return st;
}

void rv_probe_free(rv_probe **pp)
{
    rv_probe *p = pp ? *pp : NULL;
    if (!p)
        return;
    free(p->streams);
    free(p);
    *pp = NULL;
}
