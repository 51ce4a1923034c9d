/* decode_loop.c: the FFmpeg send/receive pair as the readers use it, and the
 * corrupt-data count. EAGAIN and EOF are states, not errors; invalid data (a
 * corrupt packet, a frame the decoder had to conceal) is counted and skipped,
 * and only a count past the limit (the larger of max_corrupt and a share of the
 * file's packets, rv_ingest.h) fails, naming the file, so one bad packet in an
 * hour of video costs one frame. */
#include <stdio.h>

#include "ingest_internal.h"

/* The rule as words: "0.5% of the file's packets", "32 or 1% of the file's
 * packets, whichever is more"; "" for an absolute count (the number says it). */
static const char *rule_text(const rv_ingest_opts *o, char *buf, size_t len)
{
    double pct = o->max_corrupt_share * 100;
    buf[0] = '\0';
    if (o->max_corrupt_share > 0 && o->max_corrupt <= 0)
        snprintf(buf, len, "%.6g%% of the file's packets", pct);
    else if (o->max_corrupt_share > 0)
        snprintf(buf, len, "%d or %.6g%% of the file's packets, whichever is more",
                 o->max_corrupt, pct);
    return buf;
}

/* "1.52% of about 2867 packets" (est: n is the estimate, not a count), "1.5% of
 * the 700 packets read so far" (so_far), "" when n is 0. */
static const char *share_text(int64_t count, int64_t n, int est, int so_far, char *buf,
                              size_t len)
{
    buf[0] = '\0';
    if (n > 0)
        snprintf(buf, len, ", %.3g%% of %s%lld packets%s", 100.0 * (double)count / (double)n,
                 est ? "about " : so_far ? "the " : "", (long long)n,
                 so_far ? " read so far" : "");
    return buf;
}

rv_status rv_corrupt_add(rv_corrupt *c, const char *what, int stream, int averr)
{
    char rule[128], shr[96];
    c->count++;
    if (averr)
        rv_log(RV_LOG_DEBUG, "%s: stream %d: %s (%s)", c->path, stream, what, rv_av_err(averr));
    else
        rv_log(RV_LOG_DEBUG, "%s: stream %d: %s", c->path, stream, what);
    rule_text(c->o, rule, sizeof rule);
    if (c->count == 1) {
        if (rule[0])
            rv_log(RV_LOG_WARN, "%s: stream %d: %s; skipping it (and any more, up to %s)",
                   c->path, stream, what, rule);
        else
            rv_log(RV_LOG_WARN, "%s: stream %d: %s; skipping it (and any more, up to %d)",
                   c->path, stream, what, c->o->max_corrupt);
    }
    /* Mid-stream the share is of the packets expected (or read, when more): the
     * damage seen so far is judged against the whole file, not the part read. */
    int64_t n = c->expected < 0 ? -1 : c->expected > c->packets ? c->expected : c->packets;
    c->limit = rv_ingest_corrupt_limit(c->o, n);
    if (c->count <= c->limit)
        return RV_OK;
    if (n >= 0)
        share_text(c->count, n, n > c->packets, 0, shr, sizeof shr);
    else
        share_text(c->count, c->packets, 0, 1, shr, sizeof shr);
    return rv_fail(RV_ERR_FORMAT,
                   "%s: %lld corrupt packets or frames%s, more than the %lld allowed (%s%sthe "
                   "last: stream %d, %s); the file is damaged",
                   c->path, (long long)c->count, shr, (long long)c->limit, rule,
                   rule[0] ? "; " : "", stream, what);
}

rv_status rv_corrupt_finish(rv_corrupt *c)
{
    char rule[128], shr[96];
    /* A whole pass has read all its packets: they are the truth, whatever was
     * expected. A range read only its own, the share is still of them all. */
    int64_t n = c->range && c->expected > c->packets ? c->expected : c->packets;
    c->limit = rv_ingest_corrupt_limit(c->o, n);
    if (c->count == 0)
        return RV_OK;
    rule_text(c->o, rule, sizeof rule);
    share_text(c->count, n, n > c->packets, 0, shr, sizeof shr);
    if (c->count > c->limit)
        return rv_fail(RV_ERR_FORMAT,
                       "%s: %lld corrupt packets or frames%s, more than the %lld allowed%s%s%s; "
                       "the file is damaged",
                       c->path, (long long)c->count, shr, (long long)c->limit,
                       rule[0] ? " (" : "", rule, rule[0] ? ")" : "");
    rv_log(RV_LOG_WARN, "%s: %lld corrupt packets or frames skipped or concealed%s, within the "
           "%lld allowed%s%s%s", c->path, (long long)c->count, shr, (long long)c->limit,
           rule[0] ? " (" : "", rule, rule[0] ? ")" : "");
    return RV_OK;
}

rv_status rv_decode_send(AVCodecContext *dec, const AVPacket *pkt, int stream,
                         rv_corrupt *corrupt)
{
    int ret = avcodec_send_packet(dec, pkt);
    if (ret >= 0 || ret == AVERROR(EAGAIN) || ret == AVERROR_EOF)
        return RV_OK;
    if (ret == AVERROR(ENOMEM))
        return rv_fail(RV_ERR_NOMEM, "%s: stream %d: out of memory while decoding",
                       corrupt->path, stream);
    /* Anything else the decoder refuses is a bad packet: skip it. */
    return rv_corrupt_add(corrupt, "corrupt packet", stream, ret);
}

rv_status rv_decode_receive(AVCodecContext *dec, AVFrame *frame, int stream,
                            rv_corrupt *corrupt, int *got, int *eof)
{
    *got = 0;
    *eof = 0;
    for (;;) {
        int ret = avcodec_receive_frame(dec, frame);
        if (ret == 0) {
            if (frame->decode_error_flags || (frame->flags & AV_FRAME_FLAG_CORRUPT)) {
                rv_status s = rv_corrupt_add(corrupt, "corrupt frame (concealed)", stream, 0);
                if (s != RV_OK) {
                    av_frame_unref(frame);
                    return s;
                }
            }
            *got = 1;
            return RV_OK;
        }
        if (ret == AVERROR(EAGAIN))
            return RV_OK;
        if (ret == AVERROR_EOF) {
            *eof = 1;
            return RV_OK;
        }
        if (ret == AVERROR(ENOMEM))
            return rv_fail(RV_ERR_NOMEM, "%s: stream %d: out of memory while decoding",
                           corrupt->path, stream);
        rv_status s = rv_corrupt_add(corrupt, "undecodable frame", stream, ret);
        if (s != RV_OK)
            return s;
    }
}

int64_t rv_frame_pts(const AVFrame *f)
{
    if (f->best_effort_timestamp != AV_NOPTS_VALUE)
        return f->best_effort_timestamp;
    return f->pts;
}
