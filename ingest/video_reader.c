/* video_reader.c: demuxes and decodes one video stream, in presentation order,
 * with the sparse fast path. The path only ever leaves out frames that cannot be
 * the answer to any sample (tests compare it with decode_all byte for byte):
 *
 *   - non-reference frames: a packet is decoded with AVDISCARD_NONREF when a
 *     later packet in the lookahead has a pts in (its pts, the next sample time
 *     at or after it], so some other frame always displays at that sample;
 *   - whole stretches of a GOP: when the lookahead holds a keyframe K, every
 *     packet before it has a smaller pts, and no pending sample time falls
 *     between the smallest of those pts and K's, the packets before K are
 *     dropped and decoding goes on at K (what a seek would do, without trusting
 *     the container's index). For H.264 K must be an IDR picture, which resets
 *     the decoder by itself, as VP8, VP9 and AV1 keyframes do; for other codecs
 *     (HEVC CRA pictures, MPEG-4 I frames) the decoder is drained and flushed
 *     first, as after a seek, so leading pictures that refer to dropped ones are
 *     discarded instead of decoded from missing references.
 * The lookahead holds the packets from the decoder's position to the first
 * keyframe after the next sample (about one GOP), bounded in count and bytes.
 * If a decoded frame's pts ever differs from its packet's, the plan cannot be
 * trusted and the reader falls back to decoding everything. */
#include <stdlib.h>
#include <string.h>

#include "ingest_internal.h"

#define LOOK_MIN 16                 /* packets past the head for the NONREF rule */
#define LOOK_MAX_PACKETS 1024       /* bound of the lookahead */
#define LOOK_MAX_BYTES (32u << 20)
#define MAX_READ_ERRORS 16          /* consecutive demux errors before giving up */

struct rv_video_reader {
    const char *path;
    AVFormatContext *fmt;
    AVCodecContext *dec;
    AVStream *st;
    int index;
    AVPacket *pkt;              /* scratch for av_read_frame */
    rv_pktq q;                  /* lookahead, decode order */
    int demux_eof;
    int drain_sent;             /* the final NULL packet went in */
    int draining_for_jump;      /* drain, then flush, then go on from the queue head */
    int need_key;               /* after a seek: drop packets up to a clean keyframe */
    int sparse;
    int h264, nal_len;          /* H.264: jump only to IDR; NAL length size, 0 = Annex B */
    int clean_keys;             /* a keyframe resets the decoder by itself: jumps need
                                   no drain and flush (H.264 IDR, VP8, VP9, AV1) */
    const rv_grid *grid;
    const int64_t *k_pending;
    rv_corrupt *corrupt;
    int64_t skipped;
    int read_errors;
    int truncated;
};

rv_status rv_video_reader_open(const char *path, const rv_video_reader_cfg *cfg,
                               rv_video_reader **out)
{
    rv_video_reader *r = calloc(1, sizeof *r);
    rv_status st = RV_OK;
    *out = NULL;
    if (!r)
        return rv_fail(RV_ERR_NOMEM, "%s: out of memory", path);
    r->path = path;
    r->index = cfg->stream;
    r->sparse = cfg->sparse;
    r->corrupt = cfg->corrupt;
    if (cfg->fmt)
        r->fmt = cfg->fmt;
    else if ((st = rv_media_open(path, &r->fmt)) != RV_OK)
        goto end;
    if (r->index < 0 || (unsigned)r->index >= r->fmt->nb_streams) {
        st = rv_fail(RV_ERR_INTERNAL, "%s: video stream %d out of range", path, r->index);
        goto end;
    }
    for (unsigned i = 0; i < r->fmt->nb_streams; i++)
        r->fmt->streams[i]->discard = (int)i == r->index ? AVDISCARD_DEFAULT : AVDISCARD_ALL;
    r->st = r->fmt->streams[r->index];
    if ((st = rv_decoder_open(path, r->fmt, r->index, cfg->threads, &r->dec)) != RV_OK)
        goto end;
    if (!(r->pkt = av_packet_alloc())) {
        st = rv_fail(RV_ERR_NOMEM, "%s: out of memory", path);
        goto end;
    }
    enum AVCodecID id = r->st->codecpar->codec_id;
    r->clean_keys = id == AV_CODEC_ID_H264 || id == AV_CODEC_ID_VP8 || id == AV_CODEC_ID_VP9 ||
                    id == AV_CODEC_ID_AV1;
    if (id == AV_CODEC_ID_H264) {
        const AVCodecParameters *par = r->st->codecpar;
        r->h264 = 1;
        if (par->extradata_size >= 7 && par->extradata[0] == 1)
            r->nal_len = (par->extradata[4] & 3) + 1; /* avcC */
    }
    *out = r;
    r = NULL;
end:
    rv_video_reader_free(&r);
    return st;
}

void rv_video_reader_free(rv_video_reader **pr)
{
    rv_video_reader *r = pr ? *pr : NULL;
    if (!r)
        return;
    rv_pktq_release(&r->q);
    av_packet_free(&r->pkt);
    avcodec_free_context(&r->dec);
    avformat_close_input(&r->fmt);
    free(r);
    *pr = NULL;
}

void rv_video_reader_plan(rv_video_reader *r, const rv_grid *grid, const int64_t *k_pending)
{
    r->grid = grid;
    r->k_pending = k_pending;
}

AVStream *rv_video_reader_stream(rv_video_reader *r) { return r->st; }
const AVCodecContext *rv_video_reader_codec(rv_video_reader *r) { return r->dec; }
int64_t rv_video_reader_skipped(const rv_video_reader *r) { return r->skipped; }
int rv_video_reader_truncated(const rv_video_reader *r) { return r->truncated; }

/* An H.264 access unit that holds an IDR slice (NAL type 5). */
static int h264_is_idr(const AVPacket *p, int nal_len)
{
    const uint8_t *d = p->data, *e = p->data + p->size;
    if (nal_len > 0) {
        while (e - d > nal_len) {
            uint32_t n = 0;
            for (int i = 0; i < nal_len; i++)
                n = (n << 8) | d[i];
            d += nal_len;
            if (n == 0 || n > (uint32_t)(e - d))
                return 0;
            if ((d[0] & 0x1f) == 5)
                return 1;
            d += n;
        }
        return 0;
    }
    for (; e - d > 3; d++) { /* Annex B: 00 00 01 start codes */
        if (d[0] == 0 && d[1] == 0 && d[2] == 1) {
            if ((d[3] & 0x1f) == 5)
                return 1;
            d += 2;
        }
    }
    return 0;
}

/* Reads one packet of the stream into the queue; sets demux_eof at the end. */
static rv_status read_one(rv_video_reader *r)
{
    for (;;) {
        int ret = av_read_frame(r->fmt, r->pkt);
        if (ret == AVERROR_EOF) {
            r->demux_eof = 1;
            return RV_OK;
        }
        if (ret < 0) {
            if (++r->read_errors > MAX_READ_ERRORS || (r->fmt->pb && avio_feof(r->fmt->pb))) {
                r->demux_eof = 1;
                r->truncated = 1;
                rv_log(RV_LOG_WARN, "%s: cannot read past this point (%s); stopping there",
                       r->path, rv_av_err(ret));
                return RV_OK;
            }
            rv_status st = rv_corrupt_add(r->corrupt, "unreadable packet", r->index, ret);
            if (st != RV_OK)
                return st;
            continue;
        }
        r->read_errors = 0;
        if (r->pkt->stream_index != r->index) {
            av_packet_unref(r->pkt);
            continue;
        }
        r->corrupt->packets++;
        return rv_pktq_push(&r->q, r->pkt);
    }
}

/* 1 when the queue holds a keyframe past the head with pts > t. */
static int key_after(const rv_video_reader *r, int64_t t)
{
    for (int i = 1; i < r->q.count; i++) {
        const AVPacket *p = rv_pktq_at(&r->q, i);
        if ((p->flags & AV_PKT_FLAG_KEY) && p->pts != AV_NOPTS_VALUE && p->pts > t)
            return 1;
    }
    return 0;
}

static int planning(const rv_video_reader *r)
{
    return r->sparse && r->grid && r->k_pending && rv_grid_valid(r->grid, *r->k_pending);
}

static rv_status fill(rv_video_reader *r)
{
    while (!r->demux_eof && r->q.count < LOOK_MAX_PACKETS && r->q.bytes < LOOK_MAX_BYTES) {
        if (!planning(r)) {
            if (r->q.count >= 1)
                break;
        } else if (r->q.count > LOOK_MIN &&
                   key_after(r, rv_grid_floor_pts(r->grid, *r->k_pending))) {
            break;
        }
        rv_status st = read_one(r);
        if (st != RV_OK)
            return st;
    }
    return RV_OK;
}

/* Index in the queue (>= 1) of the keyframe to restart at, or -1. */
static int find_jump(const rv_video_reader *r)
{
    const rv_grid *g = r->grid;
    const int64_t k = *r->k_pending;
    int best = -1;
    int64_t lo = INT64_MAX, hi = INT64_MIN; /* pts range of the packets before i */
    for (int i = 0; i < r->q.count; i++) {
        const AVPacket *p = rv_pktq_at(&r->q, i);
        if (p->pts == AV_NOPTS_VALUE)
            break; /* nothing past an unknown pts can be reasoned about */
        /* Candidates: keyframes past the head, after every packet before them. */
        if (i > 0 && (p->flags & AV_PKT_FLAG_KEY) && hi < p->pts &&
            (!r->h264 || h264_is_idr(p, r->nal_len))) {
            /* No pending sample may fall in [lo, K.pts): its answer could be a
             * dropped frame. (Samples before lo are answered by frames already
             * sent; from K.pts on, K or a later frame answers.) */
            int64_t k2 = rv_grid_first_k_at_or_after(g, lo, k);
            if (!rv_grid_valid(g, k2) || rv_grid_floor_pts(g, k2) >= p->pts)
                best = i;
        }
        if (p->pts < lo)
            lo = p->pts;
        if (p->pts > hi)
            hi = p->pts;
    }
    return best;
}

/* NONREF is safe for the head when a later packet shows at or before the next
 * sample time at or after the head's pts. */
static int nonref_ok(const rv_video_reader *r)
{
    const AVPacket *h = rv_pktq_at(&r->q, 0);
    if (h->pts == AV_NOPTS_VALUE || (h->flags & AV_PKT_FLAG_KEY))
        return 0;
    const rv_grid *g = r->grid;
    int64_t k = rv_grid_first_k_at_or_after(g, h->pts, *r->k_pending);
    int64_t bound = rv_grid_valid(g, k) ? rv_grid_floor_pts(g, k) : INT64_MAX;
    for (int i = 1; i < r->q.count; i++) {
        const AVPacket *p = rv_pktq_at(&r->q, i);
        if (p->pts != AV_NOPTS_VALUE && p->pts > h->pts && p->pts <= bound)
            return 1;
    }
    return 0;
}

/* Sends the next packet (or the draining NULL) to the decoder. */
static rv_status feed(rv_video_reader *r)
{
    rv_status st;
    for (;;) {
        if ((st = fill(r)) != RV_OK)
            return st;
        if (!r->need_key || r->q.count == 0)
            break;
        const AVPacket *h = rv_pktq_at(&r->q, 0);
        if ((h->flags & AV_PKT_FLAG_KEY) && (!r->h264 || h264_is_idr(h, r->nal_len))) {
            r->need_key = 0;
            break;
        }
        rv_pktq_drop_front(&r->q, 1);
    }
    if (r->q.count == 0) {
        if (!r->drain_sent) {
            r->drain_sent = 1;
            return rv_decode_send(r->dec, NULL, r->index, r->corrupt);
        }
        return RV_OK;
    }
    if (planning(r)) {
        int j = find_jump(r);
        if (j > 0) {
            rv_log(RV_LOG_DEBUG, "%s: skipping %d packets to the keyframe at pts %lld "
                   "(next sample %lld)", r->path, j, (long long)rv_pktq_at(&r->q, j)->pts,
                   (long long)*r->k_pending);
            rv_pktq_drop_front(&r->q, j);
            r->skipped += j;
            if (!r->clean_keys) {
                r->draining_for_jump = 1;
                return rv_decode_send(r->dec, NULL, r->index, r->corrupt);
            }
            /* The keyframe resets the decoder: frames still inside come out first,
             * in order, as if the dropped packets had never been in the file. */
        }
        r->dec->skip_frame = nonref_ok(r) ? AVDISCARD_NONREF : AVDISCARD_DEFAULT;
    } else {
        r->dec->skip_frame = AVDISCARD_DEFAULT;
    }
    AVPacket *p = rv_pktq_pop(&r->q);
    st = rv_decode_send(r->dec, p, r->index, r->corrupt);
    av_packet_free(&p);
    return st;
}

rv_status rv_video_reader_receive(rv_video_reader *r, AVFrame *frame, int *eof)
{
    *eof = 0;
    av_frame_unref(frame);
    for (;;) {
        int got = 0, deof = 0;
        rv_status st = rv_decode_receive(r->dec, frame, r->index, r->corrupt, &got, &deof);
        if (st != RV_OK)
            return st;
        if (got) {
            if (r->sparse && (frame->pts == AV_NOPTS_VALUE ||
                              frame->pts != frame->best_effort_timestamp)) {
                rv_log(RV_LOG_DEBUG, "%s: frame timestamps differ from packet timestamps; "
                       "decoding every frame from here", r->path);
                r->sparse = 0;
            }
            return RV_OK;
        }
        if (deof) {
            if (r->draining_for_jump) {
                avcodec_flush_buffers(r->dec);
                r->draining_for_jump = 0;
                continue;
            }
            *eof = 1;
            return RV_OK;
        }
        /* EAGAIN after the draining NULL should not happen; never spin on it. */
        if (r->draining_for_jump) {
            avcodec_flush_buffers(r->dec);
            r->draining_for_jump = 0;
            continue;
        }
        if (r->drain_sent) {
            *eof = 1;
            return RV_OK;
        }
        if ((st = feed(r)) != RV_OK)
            return st;
    }
}

rv_status rv_video_reader_seek(rv_video_reader *r, int64_t pts)
{
    int ret = av_seek_frame(r->fmt, r->index, pts, AVSEEK_FLAG_BACKWARD);
    if (ret < 0)
        return rv_fail(RV_ERR_UNSUPPORTED, "%s: cannot seek (%s)", r->path, rv_av_err(ret));
    rv_pktq_clear(&r->q);
    avcodec_flush_buffers(r->dec);
    r->demux_eof = 0;
    r->drain_sent = 0;
    r->draining_for_jump = 0;
    r->need_key = 1;
    r->read_errors = 0;
    return RV_OK;
}
