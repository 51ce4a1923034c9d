/* rv_tokenize.h: recordings to token sequences, chunk by chunk.
 *
 * The tokenizer takes ingest chunks (rv_ingest.h) in order and hands out the
 * tokens of rv_tokens.h window by window, so memory holds one window of tokens
 * plus one chunk, whatever the recording's length. Two ways to run it:
 *
 *   - open: the sequence is whatever the recording holds (rv_tokenize_file);
 *   - planned: the sequence follows a layout made before decoding, usually
 *     from the probe (rv_tok_layout_from_probe), and only the tokens
 *     [first, first + count) of it are made (rv_tokenize_range). Only the
 *     frames and samples those tokens read are ingested (the range API of
 *     ingest seeks there), fbank frames included: an audio patch near the
 *     range's edge gets the 400-sample context of its frames from the audio
 *     beyond. Every token is computed from the same frames and samples, with
 *     the same arithmetic, as in the pass over the whole planned sequence, so a
 *     rank's tokens are exactly the whole pass's tokens at those indices.
 *
 * A planned pass trusts the plan's frame and sample counts: frames and samples
 * after them are dropped (counted in the stats); a recording that ends before
 * them is padded, the last frame repeated and the audio silent, by at most
 * RV_TOK_PAD_MAX_S (more fails with RV_ERR_FORMAT naming both lengths). A rank
 * whose range ends before the recording does cannot see its real end, so that
 * check is made by the ranks whose ranges reach it.
 *
 * Times (rv_tokens.h): a batch gives each token's sequence time and its time on
 * the container's clock, t0 + the sequence time, with the layout's t0: the
 * plan's in a planned pass (rv_tok_recording_plan sets it; a plan made by
 * rv_tok_layout_make has 0, sequence time), the first chunk's (rv_ingest_chunk.t0)
 * in an open pass. */
#ifndef RV_TOKENIZE_H
#define RV_TOKENIZE_H

#include <stdint.h>

#include "rv_api.h"
#include "rv_ingest.h"
#include "rv_shard.h"
#include "rv_status.h"
#include "rv_tokens.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A run of consecutive tokens of the sequence (one window's, or part of one;
 * the leading special tokens come with the first window's). */
typedef struct rv_tok_batch {
    int64_t first;            /* global index of the first token */
    int64_t count;            /* tokens (may be 0) */
    const uint8_t *modality;  /* (count) rv_modality */
    const int64_t *pos;       /* (count, 3) */
    const double *time;       /* (count, 2) start, end: s on the container's clock */
    const double *seq_time;   /* (count, 2) start, end: sequence time (s from t0) */
    const int64_t *window;    /* (count) each token's window (rv_token.window):
                                 with blocks (rv_tokens.h) its attention block */
    int64_t nvideo;           /* video tokens among them */
    const float *video;       /* (nvideo, video_dim) their patches, in order */
    int64_t naudio;
    const float *audio;       /* (naudio, audio_dim) */
    /* The log-mel rows (rv_fbank.h) the audio patches are cut from, numbered 0 ..
     * fbank_frames - 1 over the sequence, each handed out once in a whole pass:
     * row f reads samples 160 f .. 160 f + 399. With windows cut from the
     * recording (window_positions: blocks, rv_tokens.h) each window has its own
     * rows, window after window: window w's read its samples from its first
     * one, J(w), 160 apart, none past its last, so they are the filterbank of
     * the window's samples alone (torchaudio's fbank of them), and its audio
     * patches are cut from them from its first row. */
    int64_t fbank_first;      /* fbank frame index of fbank[0] */
    int64_t nfbank;           /* fbank frames computed since the previous batch */
    const float *fbank;       /* (nfbank, 128) log-mel, before normalisation */
    int last;                 /* 1 on the final batch (which may be empty) */
} rv_tok_batch;

/* Receives each batch; pointers live until it returns. Anything but RV_OK
 * stops the pass, which returns that status. */
typedef rv_status (*rv_tok_batch_fn)(const rv_tok_batch *b, void *user);

typedef struct rv_tok_stats {
    rv_ingest_stats ingest;   /* the ingest pass (zero for rv_tokenizer_*) */
    rv_tok_layout layout;     /* the sequence: the plan, or (open) the recording's */
    int64_t first, tokens;    /* tokens handed out: [first, first + tokens) */
    int64_t video_tokens, audio_tokens;
    int64_t cls_tokens;       /* special tokens (class and distillation) handed out,
                                 those of every window with cls_each_window */
    int64_t fbank_frames;     /* fbank frames computed */
    int64_t padded_frames, padded_samples;   /* made up: the recording ended early */
    int64_t dropped_frames, dropped_samples; /* ignored: after the plan's end */
    double cpu_s;             /* this thread's CPU time in the tokenizer, not in
                                 decoding nor in the batch callback */
} rv_tok_stats;

/* ---- the engine, for chunks from anywhere ----------------------------------------- */

typedef struct rv_tokenizer rv_tokenizer;

/* plan != NULL: planned, tokens [first, first + count) of plan (to and io are
 * then ignored). plan == NULL: open, the whole sequence; has_video / has_audio
 * say whether frames / audio will come at all (so the other modality is not
 * held back waiting for them); frame windows without video are refused. */
RV_API rv_status rv_tokenizer_new(const rv_tok_layout *plan, int64_t first, int64_t count,
                                  const rv_tok_opts *to, const rv_ingest_opts *io,
                                  int has_video, int has_audio, rv_tok_batch_fn fn, void *user,
                                  rv_tokenizer **out);

/* Feeds one chunk: frames with consecutive grid indices, audio with
 * consecutive sample indices, continuing the previous chunk's. */
RV_API rv_status rv_tokenizer_push(rv_tokenizer *t, const rv_ingest_chunk *c);

/* No more chunks: pads (planned) or closes the layout (open) and hands out the
 * rest, ending with a batch whose last is 1. */
RV_API rv_status rv_tokenizer_finish(rv_tokenizer *t);

RV_API void rv_tokenizer_stats(const rv_tokenizer *t, rv_tok_stats *out);

/* Sets *t to NULL; NULL or *t == NULL is a no-op. */
RV_API void rv_tokenizer_free(rv_tokenizer **t);

/* ---- passes over a media file ---------------------------------------------------- */

/* The whole recording, open (its own length decides the layout, in stats). */
RV_API rv_status rv_tokenize_file(const char *path, const rv_ingest_opts *io,
                                  const rv_tok_opts *to, rv_tok_batch_fn fn, void *user,
                                  rv_tok_stats *stats);

/* Tokens [first, first + count) of the planned sequence; ingests plan->ingest's
 * grid (its stream, thread and corrupt-packet settings too), only the part the
 * tokens need. count == seq with first == 0 is the whole planned pass. */
RV_API rv_status rv_tokenize_range(const char *path, const rv_tok_layout *plan, int64_t first,
                                   int64_t count, rv_tok_batch_fn fn, void *user,
                                   rv_tok_stats *stats);

/* Rank r's tokens under shard plan sp of plan's sequence: one range per
 * segment, in segment order (the rank's local order). stats (may be NULL) sums
 * the segments' counts. */
RV_API rv_status rv_tokenize_rank(const char *path, const rv_tok_layout *plan,
                                  const rv_shard_plan *sp, int rank, rv_tok_batch_fn fn,
                                  void *user, rv_tok_stats *stats);

#ifdef __cplusplus
}
#endif
#endif
