/* decode_loop.c: the FFmpeg send/receive pair as the readers use it. EAGAIN and
 * EOF are states, not errors; invalid data (a corrupt packet, a frame the decoder
 * had to conceal) is counted and skipped, and only a count past the limit fails,
 * naming the file, so one bad packet in an hour of video costs one frame. */
#include "ingest_internal.h"

rv_status rv_corrupt_add(rv_corrupt *c, const char *what, int stream, int averr)
{
    c->count++;
    if (averr)
        rv_log(RV_LOG_DEBUG, "%s: stream %d: %s (%s)", c->path, stream, what, rv_av_err(averr));
    else
        rv_log(RV_LOG_DEBUG, "%s: stream %d: %s", c->path, stream, what);
    if (c->count == 1)
        rv_log(RV_LOG_WARN, "%s: stream %d: %s; skipping it (and counting any more, up to %d)",
               c->path, stream, what, c->limit);
    if (c->count > c->limit)
        return rv_fail(RV_ERR_FORMAT,
                       "%s: more than %d corrupt packets or frames (the last: stream %d, %s); "
                       "the file is damaged",
                       c->path, c->limit, stream, what);
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
