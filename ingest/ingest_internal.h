/* ingest_internal.h: the pieces of ingest/ shared between its files, with FFmpeg
 * types. Never installed and never included outside ingest/ (the public API is
 * rv_ingest.h). One file per job:
 *   av_log_bridge.c   FFmpeg's log -> rv_log, FFmpeg error strings
 *   media_open.c      open a file (clear errors), pick streams, open a decoder
 *   rotation.c        display matrix -> clockwise degrees
 *   sample_grid.c     the sample-time grid as exact integer arithmetic
 *   video_convert.c   decoded frame -> S x S RGB (swscale, rotation, crop/pad)
 *   convert_worker.c  that conversion on a thread of its own
 *   packet_queue.c    the lookahead queue of compressed video packets
 *   decode_loop.c     send/receive helpers that count corrupt data
 *   video_reader.c    demux + decode video, with the sparse fast path
 *   video_sampler.c   picks the frame of each sample time
 *   audio_resample.c  swresample to mono 16 kHz, placed by pts
 *   audio_reader.c    demux + decode audio into positioned sample blocks
 *   ingest_stream.c   the chunk loop (rv_ingest_stream, rv_ingest_range)
 *   ingest_collect.c  everything in memory (rv_ingest_read)
 *   probe.c           rv_probe_file
 * and, without FFmpeg types (a build without media keeps them):
 *   ingest_opts.c     the options, the sample-time arithmetic (ingest_time.h)
 *   probe_json.c      the probe as JSON, paths as UTF-8 text (ingest_json.h)
 *   collect_column.c  byte runs in memory or scratch files, for the collectors
 *                     (collect_column.h; tokenize's tokens collector uses it too)
 *   frames_collect.c  what `ringvit frames` writes and rv_flat_reader hands out */
#ifndef RV_INGEST_INTERNAL_H
#define RV_INGEST_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/frame.h>
#include <libswresample/swresample.h>
#include <libswscale/swscale.h>

#include "rv_ingest.h"
#include "rv_status.h"

/* ---- av_log_bridge.c ----------------------------------------------------------- */

/* Routes FFmpeg's own log lines to rv_log at DEBUG (idempotent, thread-safe). */
void rv_av_log_install(void);

/* FFmpeg error code as text, in a thread-local buffer. */
const char *rv_av_err(int err);

/* The last error line FFmpeg logged on this thread ("" if none), and clearing it. */
const char *rv_av_last_log(void);
void rv_av_clear_log(void);

/* "h264", or for a codec FFmpeg does not know "unknown (fourcc XVID)". */
const char *rv_codec_desc(const AVCodecParameters *par);

/* ---- media_open.c ---------------------------------------------------------------- */

/* Opens path for demuxing and reads the stream info. Maps every failure to a
 * status and a message naming the file (missing, unreadable, empty, directory,
 * not a media file). */
rv_status rv_media_open(const char *path, AVFormatContext **out);

/* Picks the stream of type (AVMEDIA_TYPE_VIDEO / _AUDIO): wanted >= 0 must be that
 * stream and decodable; wanted == -1 picks the best decodable one (or sets *index
 * to -1 when there is none); wanted <= -2 sets -1. Attached pictures (cover art)
 * are never video. RV_ERR_UNSUPPORTED when streams of the type exist but none has
 * a decoder in this build. */
rv_status rv_media_pick(const char *path, AVFormatContext *fmt, enum AVMediaType type,
                        int wanted, int *index);

/* The video and the audio stream ingest reads with o's stream choices: the audio
 * is left out (with a warning when warn) when the default pick has no decoder;
 * RV_ERR_FORMAT when neither is left. */
rv_status rv_ingest_pick_streams(const char *path, AVFormatContext *fmt,
                                 const rv_ingest_opts *o, int warn, int *vindex, int *aindex);

/* Opens a decoder for stream index (threads 0 = automatic). Video sizes beyond
 * RV_INGEST_MAX_SIDE / RV_INGEST_MAX_PIXELS fail with RV_ERR_UNSUPPORTED. */
rv_status rv_decoder_open(const char *path, AVFormatContext *fmt, int index, int threads,
                          AVCodecContext **out);

/* 1 when stream index has a decoder in this build. */
int rv_stream_decodable(const AVStream *st);

/* ---- rotation.c ------------------------------------------------------------------ */

/* Clockwise degrees (0, 90, 180, 270) that display the stream upright, from its
 * display matrix (0 when it has none or it is not a multiple of 90 degrees). */
int rv_stream_rotation(const AVStream *st);

/* ---- sample_grid.c --------------------------------------------------------------- */

/* The sample times t_k = t0 + start + k / fps, compared against pts in the video
 * stream's time base with exact integer arithmetic (no rounding drift over hours). */
typedef struct rv_grid {
    int64_t fps_num, fps_den; /* fps = fps_num / fps_den frames/s */
    int64_t start_us;         /* start offset, microseconds */
    int64_t time_origin;      /* the first frame's pts, tb units */
    int64_t t0_us;            /* t0: that pts rounded down to the microsecond, on the
                                 container's clock (the grid and every time are
                                 from it) */
    AVRational tb;            /* time base of the pts compared against */
    int64_t k_first;          /* first grid index handed out */
    int64_t k_end;            /* one past the last index allowed (INT64_MAX: none) */
} rv_grid;

/* Fills g from the options (time_origin and tb set later by the caller, with
 * rv_grid_set_time_origin). */
void rv_grid_init(rv_grid *g, const rv_ingest_opts *o);

/* floor(pts x tb x 1e6): a pts in whole microseconds, rounded down. */
int64_t rv_pts_floor_us(int64_t pts, AVRational tb);

/* Sets time_origin (the first frame's pts) and t0_us from it. */
void rv_grid_set_time_origin(rv_grid *g, int64_t pts);

/* floor(t_k) in tb units: a frame with pts p is at or before t_k iff p <= this. */
int64_t rv_grid_floor_pts(const rv_grid *g, int64_t k);

/* The smallest k >= k_from with p <= rv_grid_floor_pts(g, k). */
int64_t rv_grid_first_k_at_or_after(const rv_grid *g, int64_t pts, int64_t k_from);

/* 1 when k is within [k_first, k_end). */
int rv_grid_valid(const rv_grid *g, int64_t k);

/* t_k in sequence time (s from t0), correctly rounded. */
double rv_grid_time(const rv_grid *g, int64_t k);

/* pts in sequence time (pts - t0, s), correctly rounded. */
double rv_grid_pts_seconds(const rv_grid *g, int64_t pts);

/* ---- video_convert.c ------------------------------------------------------------- */

typedef struct rv_convert {
    int size;                 /* S, px */
    int pad;                  /* letterbox instead of crop */
    int rotation;             /* clockwise degrees */
    struct SwsContext *sws;   /* for the current source geometry */
    int src_w, src_h, src_fmt, src_cs, src_range; /* what sws was built for */
    int sw, sh;               /* scaled size in coded orientation, px */
    int dw, dh;               /* scaled size in display orientation, px */
    AVFrame *scaled;          /* (sh, sw, 3) RGB24 of the last frame */
    int threads;              /* swscale slice threads, 0 = one per core */
} rv_convert;

rv_status rv_convert_init(rv_convert *c, int size, int pad, int rotation, int threads);
/* Resizes, rotates and crops (or pads) f into out (S, S, 3). path names errors. */
rv_status rv_convert_frame(rv_convert *c, const char *path, const AVFrame *f, uint8_t *out);
void rv_convert_release(rv_convert *c);

/* Scaled size, display orientation, for a display size (w, h): shorter side to S
 * (longer side with pad), aspect kept, rounded half up, at least 1. */
void rv_convert_scaled_size(int w, int h, int size, int pad, int *ow, int *oh);

/* ---- convert_worker.c ------------------------------------------------------------ */

#define RV_CWORKER_JOBS 4

typedef struct rv_cjob {
    AVFrame *frame;           /* reference to convert, when has_frame */
    int has_frame;            /* 0: repeat the last picture */
    uint8_t *dst;             /* (copies, S, S, 3) chunk slots to fill */
    int copies;
} rv_cjob;

/* A thread that converts frames in submission order (see convert_worker.c). */
typedef struct rv_cworker {
    rv_convert conv;          /* used by the worker thread only */
    const char *path;
    size_t fsize;             /* S * S * 3 */
    uint8_t *last_rgb;        /* (S, S, 3) the last converted picture */
    rv_cjob jobs[RV_CWORKER_JOBS]; /* ring */
    int head, count, busy, stop, running, sync_live;
    rv_status status;         /* first failure of the worker */
    char err[1024];           /* its message */
    int64_t converted;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv_job, cv_done;
} rv_cworker;

rv_status rv_cworker_start(rv_cworker *w, const char *path, int size, int pad, int rotation,
                           int threads);
/* Queues frame (a new reference is taken; NULL: the last picture again) for the
 * copies slots at dst; blocks while the queue is full. */
rv_status rv_cworker_submit(rv_cworker *w, const AVFrame *frame, uint8_t *dst, int copies);
/* Waits until every queued job is done; the worker's first failure, if any. */
rv_status rv_cworker_wait(rv_cworker *w);
/* Finishes the queued jobs, joins the thread, frees everything. */
void rv_cworker_stop(rv_cworker *w);

/* ---- packet_queue.c -------------------------------------------------------------- */

typedef struct rv_pktq {
    AVPacket **pkts; /* (cap) ring of owned packets */
    int cap, head, count;
    size_t bytes;    /* payload bytes held */
} rv_pktq;

rv_status rv_pktq_push(rv_pktq *q, AVPacket *pkt); /* takes ownership of *pkt's data */
AVPacket *rv_pktq_at(const rv_pktq *q, int i);      /* i-th from the head, borrowed */
AVPacket *rv_pktq_pop(rv_pktq *q);                  /* caller frees (av_packet_free) */
void rv_pktq_drop_front(rv_pktq *q, int n);
void rv_pktq_clear(rv_pktq *q);
void rv_pktq_release(rv_pktq *q);

/* ---- decode_loop.c --------------------------------------------------------------- */

/* Counts corrupt packets/frames of one ingest and the packets read, and fails
 * past the limit (rv_ingest.h, "Corrupt data"). */
typedef struct rv_corrupt {
    int64_t count;              /* corrupt packets and frames */
    int64_t packets;            /* packets read from the decoded streams (readers add) */
    int64_t expected;           /* packets the part asked for should hold, -1 unknown */
    int64_t limit;              /* the limit last judged against */
    int range;                  /* a range of that part: its packets are not all read */
    const rv_ingest_opts *o;
    const char *path;
} rv_corrupt;

/* Records one corrupt packet or frame (what, stream, detail for the log); returns
 * RV_ERR_FORMAT once the count passes the limit for max(expected, packets). */
rv_status rv_corrupt_add(rv_corrupt *c, const char *what, int stream, int averr);

/* The verdict at the end of the ingest, against the packets read (a range:
 * against max(expected, packets)); a summary warning when any were corrupt. */
rv_status rv_corrupt_finish(rv_corrupt *c);

/* avcodec_send_packet (pkt NULL: drain) where invalid data is counted and
 * skipped, EAGAIN and EOF are not errors. */
rv_status rv_decode_send(AVCodecContext *dec, const AVPacket *pkt, int stream,
                         rv_corrupt *corrupt);

/* avcodec_receive_frame: *got = 1 with a frame, 0 when the decoder wants input
 * (EAGAIN), *eof = 1 when it is drained. Decode errors are counted and skipped;
 * frames flagged corrupt are counted and kept (they are concealed). */
rv_status rv_decode_receive(AVCodecContext *dec, AVFrame *frame, int stream,
                            rv_corrupt *corrupt, int *got, int *eof);

/* Presentation time of a decoded frame: best_effort_timestamp, else pts. */
int64_t rv_frame_pts(const AVFrame *f);

/* ---- video_reader.c -------------------------------------------------------------- */

typedef struct rv_video_reader rv_video_reader;

typedef struct rv_video_reader_cfg {
    AVFormatContext *fmt; /* an already opened file to use (taken over), or NULL */
    int stream;        /* container stream index */
    int threads;
    int sparse;        /* skip packets no sample needs */
    rv_corrupt *corrupt;
} rv_video_reader_cfg;

rv_status rv_video_reader_open(const char *path, const rv_video_reader_cfg *cfg,
                               rv_video_reader **out);

/* The sample grid and the first sample not yet settled, which the sparse path
 * plans against (borrowed; set before the first receive). */
void rv_video_reader_plan(rv_video_reader *r, const rv_grid *grid, const int64_t *k_pending);

/* Next decoded frame in presentation order into frame (unref'd first); *eof = 1
 * at the end of the stream. */
rv_status rv_video_reader_receive(rv_video_reader *r, AVFrame *frame, int *eof);

/* Repositions near pts (stream time base): the decoder restarts at a keyframe at
 * or before it. Frames then come from there. */
rv_status rv_video_reader_seek(rv_video_reader *r, int64_t pts);

AVStream *rv_video_reader_stream(rv_video_reader *r);
const AVCodecContext *rv_video_reader_codec(rv_video_reader *r);
int64_t rv_video_reader_skipped(const rv_video_reader *r);
int rv_video_reader_truncated(const rv_video_reader *r);
void rv_video_reader_free(rv_video_reader **r);

/* ---- video_sampler.c ------------------------------------------------------------- */

typedef struct rv_sampler {
    rv_grid grid;
    rv_cworker cw;            /* converts the answering frames into the chunk */
    int cw_live;
    rv_video_reader *reader;  /* borrowed */
    const char *path;
    AVFrame *cur;             /* the frame that answers the pending samples */
    AVFrame *next;            /* the frame after cur, once received */
    int has_cur, has_next, eof, done;
    int64_t cur_pts, cur_dur; /* tb units */
    int64_t next_pts;         /* tb units */
    int64_t fallback_dur;     /* 1 / average frame rate in tb units, 0 unknown */
    int64_t end_pts;          /* end of the last frame's display, tb units (at eof) */
    int64_t k_next;           /* next grid index to hand out */
    int cur_submitted;        /* cur went to the converter: repeat its picture */
    int64_t decoded, converted;
} rv_sampler;

rv_status rv_sampler_init(rv_sampler *s, const char *path, rv_video_reader *reader,
                          const rv_ingest_opts *o, int rotation);

/* Takes frame (moved from) as the first frame: sets time_origin. */
void rv_sampler_set_first(rv_sampler *s, AVFrame *frame);

/* Takes frame (moved from) as the first frame after a seek (time_origin kept). */
void rv_sampler_take(rv_sampler *s, AVFrame *frame);

/* Forgets the current frames (after a seek); keeps time_origin and k_next. */
void rv_sampler_reset(rv_sampler *s);

/* Fills up to cap samples: frames (cap, S, S, 3), times and source times
 * (sequence time); *n set to how many; s->done when no sample follows. */
rv_status rv_sampler_fill(rv_sampler *s, int cap, uint8_t *frames, double *times,
                          double *src_times, int *n);

void rv_sampler_release(rv_sampler *s);

/* ---- audio_resample.c ------------------------------------------------------------ */

/* Resamples decoded audio frames to mono 16 kHz float and gives each output block
 * its sample position j (relative to t0 + start), following the frames' pts: a
 * jump of more than 40 ms starts a new segment at the new position, so gaps
 * become silence downstream and overlaps are trimmed. Every segment starts on the
 * sample grid of an unbroken run from the stream's first frame. */
typedef struct rv_resampler {
    SwrContext *swr;
    int in_rate, in_fmt;       /* input the context was built for */
    AVChannelLayout in_layout;
    double start_time;         /* t0 + start on the audio stream's clock, s: where
                                  sample 0 is */
    AVRational tb;             /* audio stream time base */
    int64_t first_pts;         /* pts of the stream's first frame (tb), the grid
                                  new segments align to; AV_NOPTS_VALUE: none */
    int have_seg;
    double seg_pos;            /* position of the segment's first output sample */
    int64_t seg_in;            /* input samples since the segment start */
    int64_t seg_out;           /* output samples since the segment start */
    float *buf;                /* (buf_cap) output of the last call */
    int buf_cap;
} rv_resampler;

/* start_time: the time (audio stream clock, s) of audio sample j = 0; first_pts:
 * the pts of the stream's first frame (AV_NOPTS_VALUE if unknown). */
void rv_resampler_init(rv_resampler *r, AVRational tb, double start_time, int64_t first_pts);

/* Converts frame (NULL: flush the resampler at the end of the stream): *out
 * points at *n samples whose first is at position *pos (valid until the next
 * call). */
rv_status rv_resampler_convert(rv_resampler *r, const char *path, const AVFrame *frame,
                               const float **out, int *n, int64_t *pos);
void rv_resampler_release(rv_resampler *r);

/* ---- audio_reader.c -------------------------------------------------------------- */

typedef struct rv_audio_reader rv_audio_reader;

rv_status rv_audio_reader_open(const char *path, int stream, int threads,
                               rv_corrupt *corrupt, rv_audio_reader **out);

/* Presentation time (stream clock, s) of the first decoded audio frame, decoding
 * it if needed (for audio-only files, whose time_origin it is); *found = 0 when
 * the stream decodes to nothing. */
rv_status rv_audio_reader_first_time(rv_audio_reader *r, double *t, int *found);

/* The same frame's pts and the stream's time base (exact, for rv_ingest_timeline). */
rv_status rv_audio_reader_first_pts(rv_audio_reader *r, int64_t *pts, AVRational *tb,
                                    int *found);

/* Fixes the time of sample j = 0 (stream clock, s) and seeks close to sample
 * j_from when it is far into the file. */
rv_status rv_audio_reader_start(rv_audio_reader *r, double start_time, int64_t j_from);

/* Writes samples [j0, j0 + n) into dst, silence where the stream has none.
 * Reads must move forward. *end set to the position one past the stream's last
 * sample once the stream has ended (else INT64_MAX). */
rv_status rv_audio_reader_read(rv_audio_reader *r, int64_t j0, int64_t n, float *dst,
                               int64_t *end);

void rv_audio_reader_free(rv_audio_reader **r);

#endif
