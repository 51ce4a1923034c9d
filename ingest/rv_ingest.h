/* rv_ingest.h: media ingest, the first stage of ringvit. Opens a media file with
 * FFmpeg, samples its video at a fixed rate by presentation time (VFR-safe),
 * rotates frames upright, resizes them to S x S RGB and resamples the audio to
 * mono 16 kHz float, handing the result out in fixed-size chunks so a long
 * recording never sits decoded in memory at once. This header has no FFmpeg
 * types, so the tokenizer and outside programs can include it alone.
 *
 * Time model (all times in seconds):
 *   - time_origin is the presentation time of the first decoded video frame
 *     (of the first decoded audio frame in an audio-only file) on the
 *     container's clock (the clock of the streams' pts, as ffprobe and PyAV
 *     report them); t0 is time_origin rounded down to the microsecond: the
 *     zero of the sample grid, so the grid lies on whole microseconds of that
 *     clock;
 *   - sequence time is seconds from t0. The grid and everything that must be
 *     exact are computed on it: the options (start_s, duration_s),
 *     rv_ingest_frame_time, the end (rv_ingest_stats.end_s). Every time handed
 *     out with the data (a chunk's frame_time and source_time, rv_ingest_result's)
 *     is on the container's clock: t0 + its sequence time, with t0 in the chunk
 *     and the stats. Subtracting t0 back is not exact, so what needs sequence
 *     time computes it (rv_ingest_frame_time) instead of recovering it;
 *   - sample k (k = 0, 1, ...) is taken at t_k = start + k / fps (sequence
 *     time); its frame is the last decoded frame whose pts <= t0 + t_k (the
 *     first frame if none is);
 *   - start may be negative, down to the audio that precedes t0 (an MPEG-TS
 *     file whose audio starts before its first video frame): the samples
 *     before t0 then repeat the first frame and the audio before t0 is kept.
 *     rv_ingest_timeline reads where a file's streams start and
 *     rv_timeline_start turns a start on the container's clock (or the
 *     recording's start) into this offset, which is how the command line's
 *     --start works;
 *   - the recording ends where the last frame stops being displayed (its pts
 *     plus its duration), or, audio-only, after the last audio sample; sampling
 *     stops before that end and before start + duration;
 *   - audio sample j (j = 0, 1, ...) is at start + j / 16000; gaps in the
 *     audio stream and a stream that starts late or ends early are filled with
 *     silence, audio before t0 + start or after the end is dropped.
 *
 * Frames: shorter side resized to S (aspect kept, swscale area averaging, the frame's
 * own colour matrix and range), then the centre S x S crop; with pad, the
 * longer side goes to S and the rest is black (letterbox). The display-matrix
 * rotation of the stream (90, 180, 270 degrees) is applied after the resize
 * and before the crop. Mirrored display matrices are not honoured.
 *
 * Bad input never crashes or hangs: empty, truncated or unrecognised files,
 * files without a decodable stream, unsupported codecs and absurd sizes fail
 * with RV_ERR_FORMAT, RV_ERR_IO or RV_ERR_UNSUPPORTED and a message that names
 * the file; corrupt packets in the middle of a stream are counted and skipped
 * up to a limit that scales with the file (below).
 *
 * Corrupt data: every packet the demuxer cannot read or the decoder refuses, and
 * every frame it decodes only in part (concealed), in the streams being read, is
 * counted (rv_ingest_stats.corrupt) and skipped, with one warning at the first
 * and a summary at the end. The ingest fails (RV_ERR_FORMAT, naming the
 * file, the count, its share and the limit) when the count passes both limits:
 *     count > max_corrupt  and  count > max_corrupt_share x packets,
 * that is, past rv_ingest_corrupt_limit(opts, packets). With the defaults (32,
 * 0.01) a file stops only when more than 32 and more than 1% of its packets are
 * corrupt; max_corrupt_share = 0 makes max_corrupt an absolute count, and
 * max_corrupt = 0 leaves the share alone. A file fails as soon as it is over the
 * limit, so packets is the file's packet count known before decoding:
 *   - per stream read (the video and the audio), the count the container states
 *     (nb_frames: MP4 and MOV give it); else the stream's duration (or the
 *     file's) times its packet rate: avg_frame_rate for video, sample_rate /
 *     frame_size for audio; a stream with neither makes the total unknown;
 *   - when start and duration ask for part of the recording, the same share of
 *     that total: the part's length over the stream's duration. A range of it
 *     (first_frame, max_frames, rv_ingest_range: one rank's part) expects what
 *     the whole part holds, so each rank is held to the limit of one pass over
 *     it (the damage a range sees is compared with the whole part's packets);
 *   - while decoding, the packets read so far when they are more (the estimate
 *     was low); with the total unknown, the share cannot be judged mid-stream;
 *   - at the end, once more: a whole pass against the packets it read, which
 *     settles an unknown total and keeps a container that overstates its count
 *     from hiding damage; a range against the larger of the estimate and its
 *     packets (an unknown total: its packets). The ingest then fails after its
 *     last chunk.
 * Only decoded packets can be found corrupt: the sparse path's skipped packets
 * count among the packets, never as corrupt (decode_all checks every one). */
#ifndef RV_INGEST_H
#define RV_INGEST_H

#include <stddef.h>
#include <stdint.h>

#include "rv_api.h"
#include "rv_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RV_AUDIO_RATE 16000   /* Hz, the rate of every audio sample handed out */
#define RV_INGEST_MAX_SIDE 16384        /* largest accepted coded width or height, px */
#define RV_INGEST_MAX_PIXELS (1 << 26)  /* largest accepted width * height, px */
#define RV_INGEST_MAX_THREADS 256       /* most decoder threads (rv_ingest_opts.threads) */

/* ---- probe: what a file holds, without decoding it ----------------------------- */

typedef enum rv_stream_kind {
    RV_STREAM_VIDEO = 0,
    RV_STREAM_AUDIO,
    RV_STREAM_OTHER, /* subtitles, data, attachments */
} rv_stream_kind;

typedef struct rv_probe_stream {
    int index;              /* stream index in the container (ffprobe's numbering) */
    rv_stream_kind kind;
    char codec[32];         /* codec name ("h264"), "unknown" when FFmpeg has none */
    int decodable;          /* 1 when this FFmpeg build has a decoder for it */
    int is_default;         /* the container marks it as the default stream */
    double start_s;         /* container start time of the stream, s; NAN unknown */
    double duration_s;      /* duration the container claims, s; NAN unknown */
    int64_t nb_frames;      /* frame count the container claims, 0 unknown; never
                               used for sampling (it is often wrong), only as the
                               packet estimate of the corrupt-data limit */
    int64_t bit_rate;       /* bits/s, 0 unknown */
    /* video */
    int width, height;      /* coded size, px (before rotation) */
    int rotation;           /* clockwise degrees to display upright: 0, 90, 180, 270 */
    double fps;             /* average frame rate, frames/s; 0 unknown */
    char pix_fmt[32];       /* "yuv420p", "" unknown */
    /* audio */
    int sample_rate;        /* Hz */
    int channels;
    char channel_layout[64]; /* "5.1(side)", "" unknown */
} rv_probe_stream;

typedef struct rv_probe {
    char path[4096];
    char format[64];         /* demuxer name ("mov,mp4,m4a,3gp,3g2,mj2") */
    double duration_s;       /* container duration, s; NAN unknown */
    double start_s;          /* container start time, s; NAN unknown */
    int64_t bit_rate;        /* bits/s, 0 unknown */
    int64_t size_bytes;      /* file size */
    int nstreams;
    rv_probe_stream *streams; /* (nstreams) */
    int video;               /* stream index ingest would decode for frames, -1 none */
    int audio;               /* stream index ingest would decode for audio, -1 none */
} rv_probe;

/* Opens path, reads its headers (and FFmpeg's stream analysis) and fills *out.
 * Fails when the file cannot be read or is not a media file; a file with no
 * decodable stream still probes (video and audio are then -1). */
RV_API rv_status rv_probe_file(const char *path, rv_probe **out);

/* Sets *p to NULL; NULL or *p == NULL is a no-op. */
RV_API void rv_probe_free(rv_probe **p);

/* The probe as JSON text (malloc'd; free()): printed 1, as `ringvit probe
 * --json` prints it (2-space indent, 9 significant digits); 0, compact with
 * keys sorted and every digit (what the outputs store as "probe" metadata, and what
 * json_loads reads back). Unknown numbers are null; the path is rv_utf8_text's
 * when it is not valid UTF-8. */
RV_API rv_status rv_probe_json_text(const rv_probe *p, int printed, char **json);

/* text with every byte that is not part of valid UTF-8 written as \xNN
 * (malloc'd; NULL when out of memory). */
RV_API char *rv_utf8_text(const char *text);

/* ---- ingest: sampled frames and resampled audio, in chunks ----------------------- */

typedef struct rv_ingest_opts {
    int fps_num, fps_den;   /* sampling rate fps_num / fps_den frames/s (default 1/1) */
    int size;               /* output side S, px (default 224) */
    int pad;                /* 0: crop to S x S (default); 1: letterbox into S x S */
    double start_s;         /* where the sample grid starts, sequence time (s from
                               t0, rounded to the microsecond); negative: before
                               the first video frame (rv_timeline_start) */
    double duration_s;      /* sample only [start, start + duration); <= 0: to the end */
    int64_t first_frame;    /* range API: hand out grid indices k >= first_frame only
                               (and audio from the matching sample on) */
    int64_t max_frames;     /* range API: at most this many grid indices; <= 0: no limit */
    int video_stream;       /* container stream index, -1 best (default), -2 none */
    int audio_stream;       /* container stream index, -1 best (default), -2 none */
    int chunk_frames;       /* frames per chunk (default 32); audio-only files are
                               chunked as if they had frames at fps */
    int max_corrupt;        /* corrupt packets or frames always tolerated (default 32);
                               the ingest fails past this count and past the share */
    double max_corrupt_share; /* share of the file's packets tolerated corrupt, in
                               [0, 1] (default 0.01, 1%); 0: max_corrupt alone is the
                               limit (see "Corrupt data" above) */
    int threads;            /* decoder threads, 0 = automatic (default); the resize
                               runs on one more thread beside them */
    int decode_all;         /* 1: decode and consider every frame (the plain
                               reference the sparse fast path is tested against) */
} rv_ingest_opts;

/* The defaults above. */
RV_API void rv_ingest_opts_default(rv_ingest_opts *o);

/* Where a recording starts on its container's clock (the clock of the streams'
 * pts, as ffprobe and PyAV report them), found by decoding the first frame of
 * the video and of the audio stream that ingest would read with o (its stream
 * choices; the rest of o is not used). */
typedef struct rv_timeline {
    double time_origin;       /* the first decoded video frame's pts, s (audio only:
                                 the first audio frame's): the time_origin outputs
                                 record */
    int64_t t0_us;            /* t0: time_origin rounded down to the microsecond, us;
                                 sequence time is from it */
    double t0;                /* t0_us / 1e6: t0 on the container's clock, s (the
                                 sample grid's zero) */
    double audio_s;           /* the first decoded audio frame's pts, s; NAN: no
                                 audio is read */
    int64_t start_us;         /* where the recording starts, us: the earlier of t0
                                 and audio_s rounded down to the microsecond */
} rv_timeline;

RV_API rv_status rv_ingest_timeline(const char *path, const rv_ingest_opts *o,
                                    rv_timeline *out);

/* rv_ingest_opts.start_s for a grid that starts at at_s on the container's clock
 * (rounded to the microsecond): the recording's start when at_s is NAN or before
 * it. Negative when the audio starts before the first frame. */
RV_API double rv_timeline_start(const rv_timeline *tl, double at_s);

/* Checks o (fps > 0, size in [8, 4096], |start| <= 1e9, ...); RV_ERR_INVALID naming the
 * field otherwise. Every entry point calls it. */
RV_API rv_status rv_ingest_opts_check(const rv_ingest_opts *o);

/* A frame rate as text, exactly: "30", "29.97" (up to 6 decimals) or
 * "30000/1001", above 0 and at most 1000 frames/s, reduced to *num / *den;
 * RV_ERR_INVALID otherwise. */
RV_API rv_status rv_ingest_parse_fps(const char *text, int *num, int *den);

/* A corrupt-data limit as text: "N", a count (0 to 2^30), sets max_corrupt = N
 * and max_corrupt_share = 0 (an absolute limit); "P%", a share (0% to 100%,
 * like 0.5%), sets max_corrupt_share = P / 100 and max_corrupt = 0;
 * RV_ERR_INVALID otherwise. */
RV_API rv_status rv_ingest_parse_max_corrupt(const char *text, rv_ingest_opts *o);

/* The most corrupt packets and frames tolerated among packets packets:
 * max(max_corrupt, floor(max_corrupt_share x packets)); packets < 0 (unknown):
 * max_corrupt when max_corrupt_share is 0, else INT64_MAX (the share cannot be
 * judged yet). */
RV_API int64_t rv_ingest_corrupt_limit(const rv_ingest_opts *o, int64_t packets);

/* t_k = start + k / fps, sequence time (s from t0), exactly rounded. */
RV_API double rv_ingest_frame_time(const rv_ingest_opts *o, int64_t k);

/* Size (ow, oh) a w x h display-oriented picture is resized to before the crop
 * (or, with pad, before the letterbox): shorter (pad: longer) side to size,
 * aspect kept, rounded half up, at least 1 px. */
RV_API void rv_ingest_scaled_size(int w, int h, int size, int pad, int *ow, int *oh);

/* Index of the first audio sample of grid index k: round(k * 16000 / fps). */
RV_API int64_t rv_ingest_audio_index(const rv_ingest_opts *o, int64_t k);

typedef struct rv_ingest_chunk {
    int64_t first_frame;       /* grid index k of frames[0] */
    int nframes;               /* 0 in audio-only files */
    int size;                  /* S */
    double t0;                 /* t0 on the container's clock, s: the grid's zero */
    const uint8_t *frames;     /* (nframes, S, S, 3) RGB, row-major */
    const double *frame_time;  /* (nframes) t0 + t_k: s on the container's clock */
    const double *source_time; /* (nframes) pts of the decoded frame used, s on the
                                  container's clock (t0 + its sequence time) */
    int64_t first_sample;      /* audio index j of audio[0] */
    int64_t nsamples;          /* 0 when the file has no audio */
    const float *audio;        /* (nsamples) mono, 16 kHz, [-1, 1] nominal */
    int last;                  /* 1 on the final chunk (which may be empty) */
} rv_ingest_chunk;

/* Receives each chunk; the pointers live until it returns. Returning anything
 * but RV_OK stops the ingest, which returns that status. */
typedef rv_status (*rv_ingest_chunk_fn)(const rv_ingest_chunk *chunk, void *user);

typedef struct rv_ingest_stats {
    int video_stream, audio_stream; /* container stream indices used, -1 none */
    int width, height;         /* coded size of the video, px */
    int rotation;              /* clockwise degrees applied: 0, 90, 180, 270 */
    double t0;                 /* t0 on the container's clock, s (0 until a file is
                                  open) */
    double end_s;              /* end of the recording, sequence time (s from t0) */
    double end_time;           /* the same end on the container's clock, s:
                                  t0 + end_s */
    int64_t frames;            /* frames handed out */
    int64_t samples;           /* audio samples handed out */
    int64_t decoded_frames;    /* video frames the decoder produced */
    int64_t converted_frames;  /* frames resized to RGB (<= frames) */
    int64_t skipped_packets;   /* video packets the sparse path did not decode */
    int64_t corrupt;           /* corrupt packets and frames skipped or concealed */
    int64_t packets;           /* packets read from the streams decoded (skipped ones
                                  included), the share's final denominator */
    int64_t packets_expected;  /* packets the span read was expected to hold before
                                  decoding, -1 unknown */
    int64_t corrupt_limit;     /* the limit the count was last judged against (at the
                                  end: rv_ingest_corrupt_limit(opts, packets)) */
    int seeked;                /* the start was reached by seeking */
    int truncated;             /* the file ended before the container said it would */
} rv_ingest_stats;

/* Ingests path chunk by chunk: frames [k, k + chunk_frames) with the audio
 * samples [J(k), J(k + chunk_frames)), J = rv_ingest_audio_index; the final
 * chunk carries the audio up to the end. Memory stays bounded by the chunk size
 * (plus about one GOP of compressed packets), whatever the file's length.
 * stats may be NULL. */
RV_API rv_status rv_ingest_stream(const char *path, const rv_ingest_opts *opts,
                                  rv_ingest_chunk_fn fn, void *user, rv_ingest_stats *stats);

/* Time-range API for one rank's part: grid indices [first_frame, first_frame +
 * count) of the same grid (and the matching audio), chunk by chunk. Seeks close
 * to the range instead of decoding from the beginning. */
RV_API rv_status rv_ingest_range(const char *path, const rv_ingest_opts *opts,
                                 int64_t first_frame, int64_t count, rv_ingest_chunk_fn fn,
                                 void *user, rv_ingest_stats *stats);

/* Everything in memory at once (short files, tests). */
typedef struct rv_ingest_result {
    int64_t nframes;
    int size;
    uint8_t *frames;        /* (nframes, S, S, 3) RGB */
    double *frame_time;     /* (nframes) s on the container's clock (as the chunks') */
    double *source_time;    /* (nframes) s on the container's clock */
    int64_t first_sample;   /* audio index of audio[0] */
    int64_t nsamples;
    float *audio;           /* (nsamples) mono 16 kHz */
    rv_ingest_stats stats;
} rv_ingest_result;

RV_API rv_status rv_ingest_read(const char *path, const rv_ingest_opts *opts,
                                rv_ingest_result **out);

/* Sets *r to NULL; NULL or *r == NULL is a no-op. */
RV_API void rv_ingest_result_free(rv_ingest_result **r);

/* ---- collectors: what the commands write, gathered as the data arrive ------------ */

/* Where a collector keeps what it gathers. */
typedef enum rv_collect_keep {
    RV_KEEP_NONE = 0,  /* nothing: it only counts (and checks) */
    RV_KEEP_MEMORY,    /* in memory: the arrays can be taken over */
    RV_KEEP_SCRATCH,   /* in unlinked scratch files in the folder of an output path
                          ("-", standard output: $TMPDIR, else /tmp), mapped
                          read-only at the end: a long recording costs disk, not
                          memory */
} rv_collect_keep;

/* One gathered tensor. */
typedef struct rv_collected {
    const char *name;   /* as the commands write it */
    const char *dtype;  /* "u8", "i64", "f32" or "f64" */
    int ndim;
    int64_t shape[4];   /* (ndim) */
    const void *data;   /* the elements, C order; NULL when there are none */
} rv_collected;

/* ---- frames: what `ringvit frames` writes and rv_flat_reader hands out ----------- */

/* A recording opened for its frames: probed first (a file that is not media
 * fails with the probe's message), its timeline read, the grid started at
 * start_at on the container's clock (NAN: where the recording starts, the audio
 * before the first frame included) and the options checked. */
typedef struct rv_frames_plan {
    rv_ingest_opts io;      /* the options given, start_s set (sequence time) */
    rv_timeline tl;         /* where the recording starts: time_origin, t0 */
    double start_time;      /* where the grid starts on the container's clock, s:
                               tl.t0 + io.start_s */
    rv_probe *probe;        /* the file's probe (rv_frames_plan_release frees it) */
} rv_frames_plan;

RV_API rv_status rv_frames_plan_make(const char *path, const rv_ingest_opts *io, double start_at,
                                     rv_frames_plan *out);
/* Frees the probe; NULL is a no-op. */
RV_API void rv_frames_plan_release(rv_frames_plan *p);

/* The tensors of the frames collector, in the order `ringvit frames` writes
 * them (each aligned to its element after the one before):
 *   frame_time         (N) f64           t0 + t_k, s on the container's clock
 *   frame_source_time  (N) f64           pts of the frame used, same clock
 *   audio              (M) f32           mono 16 kHz, sample j at t0 + start + j / 16000
 *   frames             (N, S, S, 3) u8   RGB */
enum { RV_FRAMES_TIME, RV_FRAMES_SOURCE_TIME, RV_FRAMES_AUDIO, RV_FRAMES_PICTURES,
       RV_FRAMES_ARRAYS };

/* Gathers the chunks of an ingest of S x S frames (size), kept as keep says
 * (RV_KEEP_MEMORY or RV_KEEP_SCRATCH beside the output path beside). */
typedef struct rv_frames_collector rv_frames_collector;
RV_API rv_status rv_frames_collector_new(int size, rv_collect_keep keep, const char *beside,
                                         rv_frames_collector **out);
/* An rv_ingest_chunk_fn (user: the collector): appends the chunk. */
RV_API rv_status rv_frames_collect(const rv_ingest_chunk *c, void *collector);
/* The tensors gathered (RV_FRAMES_ARRAYS of them), scratch files mapped: call it
 * once every chunk is in. The data live until the collector is freed or taken. */
RV_API rv_status rv_frames_arrays(rv_frames_collector *c, rv_collected out[RV_FRAMES_ARRAYS]);
/* In memory: tensor i's buffer (malloc'd, for the caller to free; NULL when it
 * is empty or kept in a scratch file), no longer the collector's. */
RV_API void *rv_frames_take(rv_frames_collector *c, int i);
/* Sets *c to NULL; NULL or *c == NULL is a no-op. */
RV_API void rv_frames_collector_free(rv_frames_collector **c);

#ifdef __cplusplus
}
#endif
#endif
