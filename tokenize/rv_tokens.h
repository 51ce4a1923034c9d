/* rv_tokens.h: the token sequence a recording becomes, and its layout.
 *
 * A recording (sampled frames and 16 kHz audio from ingest, rv_ingest.h) becomes
 * one sequence of tokens of three kinds (modality ids):
 *
 *   RV_MOD_VIDEO (0)  a tubelet patch: T consecutive sampled frames x P x P pixels
 *                     x 3 channels, flattened (t, y, x, c) (c fastest), each value
 *                     (pixel / 255 - mean[c]) / std[c] (ImageNet mean and std by
 *                     default). Position (t, y, x) = (tubelet index g, patch row,
 *                     patch column). Tubelet g holds grid frames gT .. gT+T-1; a
 *                     trailing partial tubelet repeats the last frame (windows
 *                     cut from the recording, below: T frames from its
 *                     window's first, its window's last repeated). T = 1 gives
 *                     plain image patches (a still image is a one-frame video).
 *                     The torchvision conv_proj weight (D, 3, T, P, P) matches
 *                     after a permute to (D, T, P, P, 3).
 *   RV_MOD_AUDIO (1)  an audio patch: F mel bins x W fbank frames of the Kaldi
 *                     log-mel filterbank (rv_fbank.h), flattened (f, w) (w
 *                     fastest, as AST's Conv2d over (freq, time) sees it), each
 *                     value (fbank - mean) / (2 std) as AST normalises (mean
 *                     -4.2677393, std 4.5689974 by default). Position (t, f, 0) =
 *                     (time step p, frequency band b): fbank frames p*stride ..
 *                     p*stride + W-1 (of its window's own with windows cut
 *                     from the recording), mel bins b*fstride .. b*fstride +
 *                     F-1. Like
 *                     a strided Conv2d there are (128 - F) / fstride + 1 bands
 *                     (integer division; fstride = F by default: 128 / F bands
 *                     side by side when F divides 128); patches overlap in time
 *                     when stride < W and in frequency when fstride < F (AST:
 *                     F = W = 16, stride = fstride = 10, 12 bands over bins
 *                     0..125). Only whole patches are made: the fbank frames
 *                     after the last time step, and the mel bins above the last
 *                     band, are read by no token.
 *   RV_MOD_CLS   (2)  the optional special tokens, cls of them (0, 1 or 2) in
 *                     front of the sequence, or in front of every window with
 *                     cls_each_window: special token i (i < cls) is the class
 *                     token (i = 0) or the distillation token (i = 1, as DeiT
 *                     and AST have), with position (i, 0, 0), item -1, part 0,
 *                     no patch, time [t, t]: t = start (the first grid frame's
 *                     time) in front of the sequence; t = t_w, the start of its
 *                     window w (below), with cls_each_window.
 *
 * Times (rv_ingest.h's time model): every token has its time span twice, in
 * sequence time (seq_time: seconds from t0, the axis the layout, the encoder's
 * time code and attention spans and pooling compute on, exactly) and on the
 * container's clock (time: t0 + seq_time, what is written and reported, as
 * ffprobe and PyAV report pts). A tubelet spans [t_gT, t_{gT+T}) with t_k =
 * rv_ingest_frame_time(k), so its start is exactly the frame_time ingest hands
 * out for its first frame (both clocks); an audio patch spans the samples its
 * fbank frames read, [start + j0 / 16000, start + j1 / 16000) with j0 = p *
 * stride * 160 and j1 = j0 + (W - 1) * 160 + 400. (Windows cut from the
 * recording: k is the tubelet's first frame, j0 its window's first sample J(w)
 * + (p - p0(w)) * stride * 160.) The layout's t0 (rv_tok_layout) places a
 * sequence on the container's clock.
 *
 * Order: the time after the grid start (ingest's start_s) is cut into windows.
 * Time windows (frame_windows 0, the default): window w is [w * window_s,
 * (w + 1) * window_s) after the grid start, window_s rounded to the
 * microsecond; it holds every tubelet whose first frame and every audio patch
 * whose first sample falls in it (windows cut from the recording: the
 * tubelets and patches of its own frames and samples, below); t_w = start +
 * w * window_s, i.e. (start_us + w * window_us) / 1e6 s. Frame windows
 * (frame_windows 1, needs video): window w is tubelet w's time range [t_wT,
 * t_(w+1)T) (t_k the sampled frame times, unbounded: tubelets after the last
 * frame still have their ranges), so it holds tubelet w and every audio patch
 * whose first sample (sample j is at start + j / 16000 s) falls in that
 * range; t_w = t_wT. Every decision is made on exact integers (fps_num /
 * fps_den, samples, microseconds): no floating point. windows = one past the
 * last window holding a video or audio token (windows in between may hold
 * none).
 * The sequence: the cls special tokens (class, then distillation), then for
 * w = 0, 1, ...: the video tokens of w (tubelet by tubelet, each row by row,
 * column by column), then the audio tokens of w (time step by time step, each
 * band from low to high frequency). With cls_each_window the special tokens
 * lead every window instead: for w = 0 .. windows - 1: the cls special tokens
 * of w, the video tokens of w, the audio tokens of w; every window gets them,
 * one without video or audio tokens too, so seq = windows * cls + nvideo +
 * naudio (else cls + nvideo + naudio). Token times are therefore
 * non-decreasing within each modality.
 *
 * Windows are attention blocks: a caller that lets tokens attend only within
 * their window (rv_token.window, rv_tok_batch.window) sees each block as if it
 * had been embedded on its own. With window_positions each window is
 * tokenized as the recording cut at its bounds. Window w holds the sampled
 * frames whose times fall in it, [K(w), K(w + 1)), and the audio samples whose
 * times fall in it, [J(w), J(w + 1)) (the first frame and sample at or after
 * its start, exact integers; the last window ends where the recording does),
 * and reads nothing else: its tubelets are T consecutive frames from K(w) (a
 * last partial one repeats the window's last frame, as at the recording's
 * end), its fbank frames read its samples from J(w) (1 + (n - 400) / 160 of
 * them for n samples, none under 400), its audio steps its fbank frames from
 * its first (1 + (frames - W) / stride, none under W). Positions count from 0
 * in each window: video pos[0] = g - g0(w), audio pos[0] = p - p0(w), g0(w) /
 * p0(w) the window's first tubelet / audio step (rows, columns and bands
 * unchanged; item keeps the running index g / p of the sequence). With
 * cls_each_window too, window w's tokens are exactly those of a recording of
 * its frames and samples alone (one window long, the same options): the same
 * patches, positions and special tokens, the times shifted by where its
 * frames, its samples and the window start. AST on 10.24 s blocks: 1022 fbank
 * frames and 101 steps in every whole block, block 1 from 10.24 s. Frame
 * windows are cut alike: tubelet w is window w, its audio the samples of its
 * time range (at video frame rates too few for an audio step). Every window
 * but the last has as many frames (samples) as its length holds, give or take
 * one, so the layout stays arithmetic: the tubelets, fbank frames and steps
 * of windows [0, w) are in closed form, an item's window a binary search.
 *
 * The layout (rv_tok_layout) is that order as arithmetic: from the options and
 * two numbers, the sampled frames and audio samples the sequence covers, every
 * token's index, modality, position and time are computed without touching
 * any data, so the layout and the shard plans over it are made before decoding
 * (rv_tok_layout_from_probe) and a rank can find which frames and samples its
 * tokens need (rv_tok_span_of).
 *
 * Depends on ingest types only (and rv_shard.h, beside it). */
#ifndef RV_TOKENS_H
#define RV_TOKENS_H

#include <stdint.h>

#include "rv_api.h"
#include "rv_ingest.h"
#include "rv_shard.h"
#include "rv_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rv_modality {
    RV_MOD_VIDEO = 0,
    RV_MOD_AUDIO = 1,
    RV_MOD_CLS = 2,
} rv_modality;

/* "video", "audio", "cls" ("?" outside the enum). */
RV_API const char *rv_modality_name(int modality);

#define RV_FBANK_HOP 160 /* samples between fbank frames (10 ms at 16 kHz) */
#define RV_FBANK_LEN 400 /* samples read by one fbank frame (25 ms) */
#define RV_FBANK_BINS 128 /* mel bins */

/* How far the real recording may fall short of the length a layout assumed (the
 * container's stated duration is often off by a frame or an encoder delay):
 * up to this much is padded (the last frame repeated, silence), more fails. */
#define RV_TOK_PAD_MAX_S 1.0

typedef struct rv_tok_opts {
    int tubelet;          /* T frames per video token (default 2) */
    int patch;            /* P pixels per side (default 16); must divide the size */
    float mean[3], std[3]; /* video normalisation per RGB channel, on [0, 1] values
                             (ImageNet: 0.485 0.456 0.406 / 0.229 0.224 0.225) */
    int audio_freq;       /* F mel bins per audio patch, 1..128 (default 16) */
    int audio_time;       /* W fbank frames per audio patch (default 16) */
    int audio_stride;     /* fbank frames between patch starts (default 16 = W) */
    int audio_fstride;    /* mel bins between the first bins of neighbouring bands,
                             0..128; 0 (default) means F: bands side by side */
    float audio_mean, audio_std; /* AST: -4.2677393, 4.5689974 */
    double window_s;      /* interleaving window, s (default 2); unused with
                             frame_windows */
    int cls;              /* leading special tokens (default 0): 1 a class token,
                             2 a class then a distillation token */
    int video, audio;     /* 0 leaves that modality out (default 1, 1) */
    /* windows as attention blocks (rv_tokens.h's header; all 0 by default, which
     * is the sequence as it was before them) */
    int frame_windows;    /* 1: window w is tubelet w's time range, not window_s
                             seconds (window_s is then unused); needs video */
    int cls_each_window;  /* 1: the cls special tokens lead every window */
    int window_positions; /* 1: each window is tokenized as the recording cut
                             at its bounds (its own tubelets, fbank frames and
                             audio steps), video / audio pos[0] counting from
                             its first tubelet / audio step */
} rv_tok_opts;

RV_API void rv_tok_opts_default(rv_tok_opts *o);

/* Checks the options on their own (ranges, std > 0, cls 0..2, the window flags
 * 0 or 1, frame windows only with video); the layout checks what depends on
 * the frame size. */
RV_API rv_status rv_tok_opts_check(const rv_tok_opts *o);

/* The mel bins between neighbouring bands (audio_fstride, or F when it is 0)
 * and the bands per audio time step, (128 - F) / that + 1; for checked options. */
RV_API int rv_tok_audio_fstride(const rv_tok_opts *o);
RV_API int rv_tok_audio_bands(const rv_tok_opts *o);

/* One token's description. */
typedef struct rv_token {
    int modality;      /* rv_modality */
    int64_t pos[3];    /* video (g, y, x); audio (p, band, 0); special token i:
                          (i, 0, 0), 0 the class token, 1 the distillation token;
                          with window_positions g - g0(w) and p - p0(w) */
    double time[2];    /* start, end: s on the container's clock (t0 + seq_time) */
    double seq_time[2]; /* start, end: sequence time (s from t0), what the encoder
                           sees */
    int64_t item;      /* tubelet g or audio time step p (-1 for special tokens) */
    int part;          /* patch y * grid + x, or band (0 for special tokens) */
    int64_t window;    /* its window w (the leading special tokens: 0) */
} rv_token;

/* The layout of one sequence. Plain data: copy it, send it to other ranks. */
typedef struct rv_tok_layout {
    rv_tok_opts opts;
    rv_ingest_opts ingest;  /* the grid: fps, size, start (range fields zeroed) */
    double t0;              /* t0 on the container's clock, s: token times are t0 +
                               their sequence times. rv_tok_layout_make and
                               rv_tok_layout_from_probe leave it 0 (sequence time);
                               rv_tok_recording_plan sets it from the file's
                               timeline, an open tokenizer pass from its first
                               chunk's t0 */
    int64_t nframes;        /* sampled frames covered: grid k < nframes (0: none) */
    int64_t nsamples;       /* audio samples covered: j < nsamples (0: none) */
    /* derived */
    int grid;               /* size / patch: patches per side */
    int per_tubelet;        /* grid * grid video tokens per tubelet */
    int bands;              /* (128 - F) / fstride + 1 audio tokens per time step */
    int64_t video_dim;      /* T * P * P * 3 floats per video patch */
    int64_t audio_dim;      /* F * W floats per audio patch */
    int64_t tubelets;       /* ceil(nframes / T); window_positions: the windows'
                               own, summed (so for fbank_frames and steps) */
    int64_t fbank_frames;   /* 1 + (nsamples - 400) / 160, 0 under 400 samples */
    int64_t steps;          /* audio time steps: 1 + (fbank_frames - W) / stride */
    int64_t window_us;      /* window_s in microseconds (0 with frame_windows) */
    int64_t windows;        /* one past the last window holding a video or audio
                               token (0: none) */
    int64_t nvideo, naudio; /* tokens per modality */
    int64_t seq;            /* all tokens, the special tokens included */
    int64_t nspecial;       /* special tokens: cls, or windows * cls with
                               cls_each_window */
} rv_tok_layout;

/* The layout of a sequence covering nframes sampled frames and nsamples audio
 * samples of the grid in io (fps, size, start_s; start_s rounded to the
 * microsecond as ingest does). Checks to against io (patch divides size, ...).
 * With to->video == 0 (to->audio == 0) nframes (nsamples) is taken as 0. */
RV_API rv_status rv_tok_layout_make(const rv_tok_opts *to, const rv_ingest_opts *io,
                                    int64_t nframes, int64_t nsamples, rv_tok_layout *out);

/* The layout made from what the container says, before decoding: the end of
 * the recording is the duration of the video stream ingest would use (of the
 * audio stream in an audio-only file, or with io->video_stream == -2), else the
 * container's end less that stream's start; frames and samples follow from it,
 * start_s and duration_s as rv_ingest.h defines them. *end_s gets that end (s
 * sequence time; may be NULL). RV_ERR_UNSUPPORTED when the file states no duration
 * (count with a whole pass then: rv_tokenize_file with plan NULL). */
RV_API rv_status rv_tok_layout_from_probe(const rv_probe *p, const rv_tok_opts *to,
                                          const rv_ingest_opts *io, rv_tok_layout *out,
                                          double *end_s);

/* Window w's first global token index (w in [0, windows]; windows gives seq):
 * its first special token with cls_each_window, else its first video or audio
 * token (window 0 starts at cls, after the leading special tokens). */
RV_API int64_t rv_tok_window_start(const rv_tok_layout *L, int64_t w);
/* The window holding global token i (0 <= i < seq; the leading special tokens
 * are in 0, those of cls_each_window in the window they lead). */
RV_API int64_t rv_tok_window_of(const rv_tok_layout *L, int64_t i);
/* t_w, window w's start, sequence time (s from t0; the seq_time of its special
 * tokens). */
RV_API double rv_tok_window_time(const rv_tok_layout *L, int64_t w);
/* Windows of tubelet g and of audio step p. */
RV_API int64_t rv_tok_window_of_tubelet(const rv_tok_layout *L, int64_t g);
RV_API int64_t rv_tok_window_of_step(const rv_tok_layout *L, int64_t p);
/* Tubelets [*g0, *g1) and audio steps [*p0, *p1) of window w. */
RV_API void rv_tok_window_items(const rv_tok_layout *L, int64_t w, int64_t *g0, int64_t *g1,
                                int64_t *p0, int64_t *p1);

/* Describes global token i (0 <= i < seq); RV_ERR_INVALID out of range.
 * Tokens 0 .. cls-1 are special tokens (with cls_each_window those of window 0). */
RV_API rv_status rv_tok_info(const rv_tok_layout *L, int64_t i, rv_token *out);
/* Global index of video token (g, part) / audio token (p, band). */
RV_API int64_t rv_tok_index_video(const rv_tok_layout *L, int64_t g, int part);
RV_API int64_t rv_tok_index_audio(const rv_tok_layout *L, int64_t p, int band);
/* Video (audio) tokens among the global tokens [0, i). */
RV_API int64_t rv_tok_video_before(const rv_tok_layout *L, int64_t i);
RV_API int64_t rv_tok_audio_before(const rv_tok_layout *L, int64_t i);

/* Where the grid starts (ingest.start_s) on the container's clock, s: t0 +
 * ingest.start_s (the start_s outputs record). */
RV_API double rv_tok_start_time(const rv_tok_layout *L);

/* What a run of global tokens [first, first + count) needs. */
typedef struct rv_tok_span {
    int64_t first, count;     /* the tokens */
    int64_t cls;              /* special tokens among them (any number with
                                 cls_each_window, else those of [0, opts.cls)) */
    int64_t tubelet0, tubelet1; /* tubelets with a token in the run, [0, 0) none */
    int64_t step0, step1;     /* audio steps with a token in the run */
    int64_t frame0, frame1;   /* sampled frames those tubelets read (< nframes) */
    int64_t fbank0, fbank1;   /* fbank frames those steps read (rv_tok_batch's
                                 numbering) */
    int64_t sample0, sample1; /* audio samples those fbank frames read (with
                                 windows cut from the recording, some between
                                 two windows' fbank frames are read by none) */
    int64_t grid0, grid1;     /* grid indices to ingest so frames and samples are
                                 all handed out: [grid0, grid1) (rv_ingest_range) */
    double time[2];           /* earliest token start, latest token end, s on the
                                 container's clock (t0 + their sequence times; t0,
                                 t0 when empty); special tokens count with theirs */
} rv_tok_span;

RV_API rv_status rv_tok_span_of(const rv_tok_layout *L, int64_t first, int64_t count,
                                rv_tok_span *out);

/* The shard plan of the layout's sequence over ranks (rv_shard.h), and the
 * spans of rank r's segments (RV_SHARD_MAX_SEGS; returns how many). */
RV_API rv_status rv_tok_shard_plan(const rv_tok_layout *L, rv_shard_kind kind, int ranks,
                                   rv_shard_plan *out);
RV_API int rv_tok_rank_spans(const rv_tok_layout *L, const rv_shard_plan *p, int rank,
                             rv_tok_span spans[RV_SHARD_MAX_SEGS]);

#ifdef __cplusplus
}
#endif
#endif
