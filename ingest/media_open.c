/* media_open.c: opening a media file, choosing its video and audio streams and
 * opening their decoders, with every failure turned into a status and a message
 * that names the file and says what is wrong with it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <stdio.h>

#include <libavutil/avutil.h>
#include <libavutil/dict.h>

#include "ingest_internal.h"

rv_status rv_media_open(const char *path, AVFormatContext **out)
{
    AVFormatContext *fmt = NULL;
    AVDictionary **opts = NULL; /* (streams at the start) decoder options */
    unsigned nopts = 0;
    rv_status st = RV_OK;
    struct stat sb;
    int ret;

    *out = NULL;
    rv_av_log_install();
    if (!path || !path[0])
        return rv_fail(RV_ERR_INVALID, "no media file given");
    if (stat(path, &sb) != 0)
        return rv_fail(RV_ERR_IO, "%s: %s", path,
                       errno == ENOENT ? "no such file" : strerror(errno));
    /* FFmpeg would wait forever on a FIFO with no writer (or read a device
     * without end) and stall a whole batch: only regular files are read
     * (standard input is spooled to one by the command line's "-"). */
    if (S_ISDIR(sb.st_mode))
        return rv_fail(RV_ERR_IO, "%s: is a directory, not a media file; only regular files "
                       "are read", path);
    if (!S_ISREG(sb.st_mode))
        return rv_fail(RV_ERR_IO, "%s: is %s; only regular files are read", path,
                       S_ISFIFO(sb.st_mode)  ? "a FIFO"
                       : S_ISSOCK(sb.st_mode) ? "a socket"
                       : S_ISCHR(sb.st_mode)  ? "a character device"
                       : S_ISBLK(sb.st_mode)  ? "a block device"
                                              : "not a regular file");
    if (sb.st_size == 0)
        return rv_fail(RV_ERR_FORMAT, "%s: empty file", path);

    rv_av_clear_log();
    ret = avformat_open_input(&fmt, path, NULL, NULL);
    if (ret < 0) {
        const char *why = rv_av_last_log();
        if (ret == AVERROR(ENOENT) || ret == AVERROR(EACCES) || ret == AVERROR(EIO) ||
            ret == AVERROR(EISDIR))
            st = rv_fail(RV_ERR_IO, "%s: cannot open: %s", path, rv_av_err(ret));
        else
            st = rv_fail(RV_ERR_FORMAT, "%s: not a media file FFmpeg can read (%s%s%s)", path,
                         rv_av_err(ret), why[0] ? ": " : "", why);
        goto end;
    }
    /* Reading the stream information may decode a first frame (a still image's
     * size is in its data): the decoders it opens refuse pictures over the size
     * limit before allocating them, or a few hundred bytes of PNG declaring
     * 16000x16000 take a gigabyte here. */
    if (fmt->nb_streams > 0) {
        opts = calloc(fmt->nb_streams, sizeof *opts);
        if (!opts) {
            st = rv_fail(RV_ERR_NOMEM, "%s: out of memory", path);
            goto end;
        }
        nopts = fmt->nb_streams;
        for (unsigned i = 0; i < nopts; i++)
            av_dict_set_int(&opts[i], "max_pixels", RV_INGEST_MAX_PIXELS, 0);
    }
    ret = avformat_find_stream_info(fmt, opts);
    if (ret < 0) {
        const char *why = rv_av_last_log();
        st = rv_fail(RV_ERR_FORMAT, "%s: cannot read the stream information (%s%s%s)", path,
                     rv_av_err(ret), why[0] ? ": " : "", why);
        goto end;
    }
    if (fmt->nb_streams == 0) {
        st = rv_fail(RV_ERR_FORMAT, "%s: the file holds no streams", path);
        goto end;
    }
    *out = fmt;
    fmt = NULL;
end:
    for (unsigned i = 0; i < nopts; i++)
        av_dict_free(&opts[i]);
    free(opts);
    avformat_close_input(&fmt);
    return st;
}

const char *rv_codec_desc(const AVCodecParameters *par)
{
    static _Thread_local char buf[64];
    if (par->codec_id != AV_CODEC_ID_NONE)
        return avcodec_get_name(par->codec_id);
    if (par->codec_tag) {
        char tag[AV_FOURCC_MAX_STRING_SIZE];
        av_fourcc_make_string(tag, par->codec_tag);
        snprintf(buf, sizeof buf, "unknown (fourcc %s)", tag);
        return buf;
    }
    return "unknown";
}

int rv_stream_decodable(const AVStream *st)
{
    const AVCodecParameters *par = st->codecpar;
    return par->codec_id != AV_CODEC_ID_NONE && avcodec_find_decoder(par->codec_id) != NULL;
}

static int is_candidate(const AVStream *st, enum AVMediaType type)
{
    const AVCodecParameters *par = st->codecpar;
    if (par->codec_type != type)
        return 0;
    if (type == AVMEDIA_TYPE_VIDEO && (st->disposition & AV_DISPOSITION_ATTACHED_PIC))
        return 0; /* cover art is a still image, not the recording */
    return 1;
}

rv_status rv_media_pick(const char *path, AVFormatContext *fmt, enum AVMediaType type,
                        int wanted, int *index)
{
    const char *kind = type == AVMEDIA_TYPE_VIDEO ? "video" : "audio";
    *index = -1;
    if (wanted <= -2)
        return RV_OK;
    if (wanted >= 0) {
        if ((unsigned)wanted >= fmt->nb_streams)
            return rv_fail(RV_ERR_INVALID, "%s: there is no stream %d (the file has %u)",
                           path, wanted, fmt->nb_streams);
        const AVStream *st = fmt->streams[wanted];
        if (!is_candidate(st, type))
            return rv_fail(RV_ERR_INVALID, "%s: stream %d is not a %s stream", path,
                           wanted, kind);
        if (!rv_stream_decodable(st))
            return rv_fail(RV_ERR_UNSUPPORTED,
                           "%s: %s stream %d (codec %s) cannot be decoded by this FFmpeg "
                           "build",
                           path, kind, wanted, rv_codec_desc(st->codecpar));
        *index = wanted;
        return RV_OK;
    }
    /* Like the ffmpeg command: the largest picture, or the most channels. */
    int64_t best_score = -1;
    int undecodable = -1;
    for (unsigned i = 0; i < fmt->nb_streams; i++) {
        const AVStream *st = fmt->streams[i];
        if (!is_candidate(st, type))
            continue;
        if (!rv_stream_decodable(st)) {
            if (undecodable < 0)
                undecodable = (int)i;
            continue;
        }
        const AVCodecParameters *par = st->codecpar;
        int64_t score = type == AVMEDIA_TYPE_VIDEO
                            ? (int64_t)par->width * par->height
                            : par->ch_layout.nb_channels;
        if (st->disposition & AV_DISPOSITION_DEFAULT)
            score += 1; /* breaks ties towards the default stream */
        if (score > best_score) {
            best_score = score;
            *index = (int)i;
        }
    }
    if (*index < 0 && undecodable >= 0)
        return rv_fail(RV_ERR_UNSUPPORTED,
                       "%s: %s stream %d (codec %s) cannot be decoded by this FFmpeg build",
                       path, kind, undecodable,
                       rv_codec_desc(fmt->streams[undecodable]->codecpar));
    return RV_OK;
}

rv_status rv_decoder_open(const char *path, AVFormatContext *fmt, int index, int threads,
                          AVCodecContext **out)
{
    AVStream *st = fmt->streams[index];
    const AVCodecParameters *par = st->codecpar;
    AVCodecContext *dec = NULL;
    rv_status s = RV_OK;
    int ret;

    *out = NULL;
    if (par->codec_type == AVMEDIA_TYPE_VIDEO) {
        if (par->width <= 0 || par->height <= 0) {
            /* Also what a picture over the limit leaves: the stream information's
             * decoder refused to allocate it (rv_media_open). */
            s = rv_fail(RV_ERR_FORMAT,
                        "%s: video stream %d has no picture size FFmpeg could read (or its "
                        "pictures exceed %d px in all, which are refused before decoding)",
                        path, index, RV_INGEST_MAX_PIXELS);
            goto end;
        }
        if (par->width > RV_INGEST_MAX_SIDE || par->height > RV_INGEST_MAX_SIDE ||
            (int64_t)par->width * par->height > RV_INGEST_MAX_PIXELS) {
            s = rv_fail(RV_ERR_UNSUPPORTED,
                        "%s: video stream %d is %dx%d; ringvit accepts at most %d px a side "
                        "and %d px in all",
                        path, index, par->width, par->height, RV_INGEST_MAX_SIDE,
                        RV_INGEST_MAX_PIXELS);
            goto end;
        }
    }
    const AVCodec *codec = avcodec_find_decoder(par->codec_id);
    if (!codec) {
        s = rv_fail(RV_ERR_UNSUPPORTED, "%s: stream %d (codec %s) cannot be decoded by this "
                    "FFmpeg build", path, index, rv_codec_desc(par));
        goto end;
    }
    dec = avcodec_alloc_context3(codec);
    if (!dec) {
        s = rv_fail(RV_ERR_NOMEM, "%s: out of memory for the decoder", path);
        goto end;
    }
    if ((ret = avcodec_parameters_to_context(dec, par)) < 0) {
        s = rv_fail(RV_ERR_FORMAT, "%s: stream %d: bad codec parameters (%s)", path, index,
                    rv_av_err(ret));
        goto end;
    }
    dec->pkt_timebase = st->time_base;
    dec->thread_count = threads > 0 ? threads : 0;
    /* A stream whose pictures grow past the limit mid-stream: refused by the
     * decoder before the picture is allocated. */
    dec->max_pixels = RV_INGEST_MAX_PIXELS;
    if ((ret = avcodec_open2(dec, codec, NULL)) < 0) {
        s = rv_fail(ret == AVERROR_PATCHWELCOME || ret == AVERROR(ENOSYS)
                        ? RV_ERR_UNSUPPORTED
                        : RV_ERR_FORMAT,
                    "%s: stream %d: cannot open the %s decoder (%s)", path, index,
                    codec->name, rv_av_err(ret));
        goto end;
    }
    *out = dec;
    dec = NULL;
end:
    avcodec_free_context(&dec);
    return s;
}

rv_status rv_ingest_pick_streams(const char *path, AVFormatContext *fmt,
                                 const rv_ingest_opts *o, int warn, int *vindex, int *aindex)
{
    rv_status st = rv_media_pick(path, fmt, AVMEDIA_TYPE_VIDEO, o->video_stream, vindex);
    if (st != RV_OK)
        return st;
    st = rv_media_pick(path, fmt, AVMEDIA_TYPE_AUDIO, o->audio_stream, aindex);
    if (st == RV_ERR_UNSUPPORTED && o->audio_stream == -1 && *vindex >= 0) {
        if (warn)
            rv_log(RV_LOG_WARN, "%s; going on without audio", rv_last_error());
        *aindex = -1;
        st = RV_OK;
    }
    if (st != RV_OK)
        return st;
    if (*vindex < 0 && *aindex < 0)
        return rv_fail(RV_ERR_FORMAT, "%s: no video or audio stream to decode", path);
    return RV_OK;
}
