/* rv_tok_slice.h: one recording's tokens on one rank of a context-parallel group,
 * as `ringvit embed` and `ringvit finetune` make them, in two calls that need no
 * communication, so a group can vote between them:
 *   1. rv_tok_recording_plan: probe, timeline and layout of the whole sequence
 *      from the file's headers (every rank finds the same); a file that states
 *      no duration (a still image) is marked need_count and counted with one
 *      whole pass (rv_tok_recording_count) or from counts another rank made
 *      (rv_tok_recording_counted);
 *   2. rv_tok_slice_plan, then rv_tok_slice_fill: the shard plan (zigzag or
 *      contiguous), this rank's counts and arrays, and only this rank's tokens
 *      decoded and tokenized into them, streamed chunk by chunk.
 * The grid starts where the recording starts (audio before the first frame
 * included) unless a start on the container's clock is given. The slice holds
 * the tokens' sequence times (what the encoder sees); the recording's t0 (its
 * layout's) puts them on the container's clock, as rv_tok_info gives them. */
#ifndef RV_TOK_SLICE_H
#define RV_TOK_SLICE_H

#include <stdint.h>

#include "rv_api.h"
#include "rv_ingest.h"
#include "rv_shard.h"
#include "rv_status.h"
#include "rv_tokenize.h"
#include "rv_tokens.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One recording, planned before decoding. */
typedef struct rv_tok_recording {
    rv_tok_layout layout;  /* the whole sequence (unset while need_count) */
    rv_ingest_opts io;     /* the ingest options with start_s on the grid's clock */
    double end_s;          /* where the tokens end, sequence time (start + duration
                              at most); NAN while need_count */
    double probe_end_s;    /* the end the probe states (rv_tok_layout_from_probe's
                              end_s), sequence time; NAN while need_count */
    double time_origin;    /* the first video frame's pts, container clock, s */
    double t0;             /* t0 on the container's clock, s (layout.t0 too): a
                              sequence time t is at t0 + t */
    double rec_start;      /* the recording's start, sequence time (<= 0: audio
                              first) */
    int need_count;        /* 1: the file states no duration; count it first */
} rv_tok_recording;

/* Plans path's sequence with to and io (io->start_s is ignored): the grid starts
 * at start_at on the container's clock, or at the recording's start when
 * start_at is NAN. A file without a stated duration returns RV_OK with
 * need_count set (rv_last_error() then says so). probe (may be NULL) receives
 * the file's probe, for the caller to free (rv_probe_free). */
RV_API rv_status rv_tok_recording_plan(const char *path, const rv_tok_opts *to,
                                       const rv_ingest_opts *io, double start_at,
                                       rv_tok_recording *rec, rv_probe **probe);

/* Called on every ingested chunk of a counting pass; anything but RV_OK stops it. */
typedef rv_status (*rv_tok_beat_fn)(void *user);

/* Counts a need_count recording with one whole pass and completes its layout;
 * frames and samples (may be NULL) receive the counts, for other ranks. */
RV_API rv_status rv_tok_recording_count(const char *path, const rv_tok_opts *to,
                                        rv_tok_recording *rec, rv_tok_beat_fn beat, void *user,
                                        int64_t *frames, int64_t *samples, double *end_s);

/* Completes a need_count recording's layout (its t0 the recording's) from
 * counts rv_tok_recording_count made elsewhere. */
RV_API rv_status rv_tok_recording_counted(const rv_tok_opts *to, rv_tok_recording *rec,
                                          int64_t frames, int64_t samples, double end_s);

/* One rank's tokens of a planned recording, in the rank's local order. */
typedef struct rv_tok_slice {
    rv_shard_plan plan;     /* the sequence over the group's ranks */
    int rank;
    int64_t len;            /* this rank's tokens */
    int64_t nvideo, naudio; /* of them video and audio */
    uint8_t *modality;      /* (len) rv_modality */
    int64_t *pos;           /* (len, 3) */
    double *seq_time;       /* (len, 2) start, end: sequence time (s from t0) */
    int64_t *window;        /* (len) each token's window (its block with spans) */
    float *video;           /* (nvideo, video_dim) patches; NULL unless kept */
    float *audio;           /* (naudio, audio_dim) patches; NULL unless kept */
    int64_t got, got_video, got_audio; /* filled so far */
} rv_tok_slice;

/* Plans the shards of L over ranks (kind: RV_SHARD_ZIGZAG or RV_SHARD_CONTIGUOUS)
 * and allocates rank's arrays; keep_patches 0 leaves video and audio NULL (the
 * fill's callback then sees each batch's patches, which die with the batch).
 * Release with rv_tok_slice_release, on failure too. */
RV_API rv_status rv_tok_slice_plan(const rv_tok_layout *L, rv_shard_kind kind, int ranks, int rank,
                                   int keep_patches, rv_tok_slice *s);

/* Decodes and tokenizes the slice's tokens of path into its arrays. each (may be
 * NULL) is called after every batch is stored, with the batch and its offset in
 * the slice; anything but RV_OK stops the fill. stats (may be NULL) sums the
 * rank's passes. A token count other than the plan's is RV_ERR_INTERNAL. */
typedef rv_status (*rv_tok_slice_fn)(const rv_tok_batch *b, int64_t offset, void *user);
RV_API rv_status rv_tok_slice_fill(const char *path, const rv_tok_layout *L, rv_tok_slice *s,
                                   rv_tok_slice_fn each, void *user, rv_tok_stats *stats);

/* Bytes the slice's arrays hold. */
RV_API size_t rv_tok_slice_bytes(const rv_tok_slice *s, const rv_tok_layout *L);

/* Frees the arrays and zeroes the slice. */
RV_API void rv_tok_slice_release(rv_tok_slice *s);

#ifdef __cplusplus
}
#endif
#endif
