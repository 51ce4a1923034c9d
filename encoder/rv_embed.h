/* rv_embed.h: the main job, one recording in and its embeddings out, as one
 * library call sequence that the `ringvit embed` command, the Python package and
 * C programs all use, so their outputs are the same bytes.
 *
 * The ranks of a group (a communicator of C ranks: threads of one process, or
 * MPI processes) share each recording: every rank decodes and tokenizes only
 * its own slice of the token sequence, the encoder runs with context
 * parallelism over the group, and rank 0 of the group receives the output.
 * Every rank of the group makes the same calls in the same order:
 *
 *   rv_embed_open      the job: this rank's backend (CPU threads or a GPU), the
 *                      group's control communicators and its watch, the model's
 *                      tokenizer and sampling options; the ranks agree
 *   rv_embed_queue     an input to prepare (probe, plan, decode and tokenize this
 *                      rank's slice): at once on the job's worker thread when
 *                      opts.prefetch > 0, else when rv_embed_run needs it
 *   rv_embed_run       the input: the ranks agree on its plan and their slices,
 *                      then the context-parallel forward and pooling
 *   rv_embed_collect   the output on rank 0: every tensor and metadata entry
 *                      the output file holds (per-token outputs gathered first);
 *                      rv_embed_output_write writes it
 *   rv_embed_close
 *
 * rv_embed_output_complete tells whether a file is already a complete output of
 * such a job (for --resume). Free a job's inputs before the job. Between stages the ranks vote (rv_comm_vote.h): a
 * stage that fails on one rank (a corrupt stretch of its part of the file, no
 * memory) fails the input on every rank at the same point, with that rank's
 * message; a rank asked to stop (hooks.stop) stops them all after the stage, or
 * before the next layer of the forward.
 *
 * Times are seconds on the container's clock (as ffprobe and PyAV report pts):
 * the segments' starts and ends, the tokens' times; the metadata "time_origin"
 * is the first video frame's pts and "start_s" where the sample grid starts.
 *
 * The output (what `ringvit embed` writes, one safetensors file per input):
 *   global          (D)      mean of every token's output but CLS
 *   segments        (G, D)   means over windows of segment_s seconds, every hop_s
 *   segment_start   (G) F64  s on the container's clock
 *   segment_end     (G) F64
 *   segment_tokens  (G) I64  tokens pooled in each window
 *   video_mean      (D)      mean of the video tokens (zeros when none)
 *   audio_mean      (D)      mean of the audio tokens (zeros when none)
 *   cls             (D)      the CLS token's output (models with one)
 *   dist            (D)      the distillation token's output (AST)
 *   pooled          (D)      the model family's pooled output (rv_vit_pool_head)
 *   projected       (P)      its projection (CLIP's visual_projection, when stored)
 *   logits          (C) F32  the classifier head's scores (models with a head:
 *                            rv_vit_classify of cls, dist, global)
 * and with opts.tokens, every token in sequence order:
 *   tokens          (S, D)
 *   token_time      (S, 2) F64  start, end, s on the container's clock
 *   token_modality  (S) U8      0 video, 1 audio, 2 special
 *   token_pos       (S, 3) I64  video (tubelet, row, column), audio (step, band, 0)
 * The embeddings (global .. projected, tokens) are F32, or F16 / BF16 rounded to
 * nearest even with opts.dtype; with opts.normalize the rows of global, segments
 * and tokens are divided by their L2 norm first (a zero row stays zero). The
 * logits are scores, not embeddings: always F32, never normalised.
 * Metadata: format ("ringvit-embed"), source, probe (JSON), model, model_hash,
 * config (JSON), family, random_weights, cp, strategy, attention, hop_s, causal,
 * fps, size, segment_s, recording_s, time_origin, start_s, tokens, video_tokens,
 * audio_tokens, dtype, normalize, ringvit_version; with a head, labels (JSON: the
 * C class names in id order) and multi_label (true: the classes are independent,
 * scored by sigmoid; false: by softmax).
 *
 * rv_embed_labels_read turns an output's logits into ranked labels (what
 * `ringvit labels` prints): per block when the file holds block_logits (G, C)
 * with block_start / block_end, else for the recording. */
#ifndef RV_EMBED_H
#define RV_EMBED_H

#include <stdint.h>

#include "rv_api.h"
#include "rv_comm.h"
#include "rv_comm_vote.h"
#include "rv_cp_attention.h"
#include "rv_ingest.h"
#include "rv_safetensors.h"
#include "rv_status.h"
#include "rv_vit.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RV_EMBED_FORMAT "ringvit-embed"       /* metadata "format" of every output */
#define RV_EMBED_MAX_PREFETCH 16              /* the most inputs prepared ahead */
#define RV_EMBED_MAX_TOKENS (INT64_C(1) << 24) /* default max_tokens: above the ~13
                                                 million tokens of a day at the
                                                 default settings */
#define RV_EMBED_LONG_TOKENS 100000           /* an input this long is announced
                                                 (hooks.plan) before it is decoded */

typedef struct rv_embed_opts {
    /* sampling; the model decides the tokenizer (tubelet, patches, normalisation) */
    rv_ingest_opts io;      /* fps, pad, duration, streams (video_stream or
                               audio_stream -2: leave that modality out), corrupt
                               limits, decode_all; size 0: the model's frame side;
                               threads 0: the compute threads (at most
                               RV_INGEST_MAX_THREADS); start_s is not read: */
    double start_at;        /* where the sample grid starts, s on the container's
                               clock; NAN (default): the recording's start */
    int want_video, want_audio; /* 1: refused when the model has no weights for it */
    /* the encoder */
    const char *device;     /* "cpu" (default) or "cuda" */
    rv_precision precision; /* auto (default: f32 on cpu, bf16 on cuda), f32 or bf16
                               (cpu: where it has AVX-512 BF16 or AMX; refused
                               before any work elsewhere) */
    int gpu;                /* cuda: this rank's GPU (modulo the visible ones); -1
                               (default): the group's world rank */
    int threads;            /* compute threads of this rank; 0 (default): the
                               cores over local_ranks */
    int local_ranks;        /* ranks of this process sharing its cores, for the
                               default threads; 0 (default): the group's size, or
                               under MPI the launcher's ranks on this machine */
    rv_cp_strategy strategy; /* ring (default), allgather, ulysses */
    int causal;
    rv_span span;           /* full (default), window=S, block=S, frame */
    int nccl;               /* MPI group with cuda: the forward's messages over NCCL
                               (else staged through host memory over MPI) */
    double timeout_s;       /* how long a rank waits for a silent peer (default
                               RINGVIT_COMM_TIMEOUT, else 120; 0: the same) */
    /* the output */
    double segment_s;       /* per-segment means, s; 0 (default): 10, or the block's
                               seconds with span block=S */
    double hop_s;           /* segment g starts at g x hop_s; 0 (default): segment_s */
    int tokens;             /* 1: the per-token outputs too */
    rv_dtype dtype;         /* RV_F32 (default), RV_F16 or RV_BF16: the embeddings */
    int normalize;          /* 1: rows of global, segments, tokens L2-normalised */
    int64_t max_tokens;     /* an input of more tokens, or segments, is refused before
                               it is decoded (default RV_EMBED_MAX_TOKENS) */
    int prefetch;           /* inputs prepared ahead on a worker thread (default 1;
                               0: each in turn; at most RV_EMBED_MAX_PREFETCH) */
} rv_embed_opts;

/* The defaults above (the command's and Python's). */
RV_API void rv_embed_opts_default(rv_embed_opts *o);

/* The dtype of the embeddings by name ("f32", "f16", "bf16", as the metadata
 * "dtype" says it); RV_ERR_INVALID for another name. */
RV_API rv_status rv_embed_dtype_parse(const char *name, rv_dtype *out);

/* The model of a job, shared read-only by the ranks of a process. */
typedef struct rv_embed_model {
    const rv_vit_model *model;
    const char *name;       /* what it was opened from (metadata "model") */
    int random_weights;     /* 1: a preset's seeded random weights (metadata) */
} rv_embed_model;

/* The modalities a job over cfg embeds with o: the model's, without those o
 * leaves out (io.video_stream / audio_stream -2); want_video / want_audio on a
 * model without weights for it is RV_ERR_INVALID, and leaving out every
 * modality the model has too. why (cap bytes; may be NULL) gets a one-line
 * reason when a modality of the recording is left out because of the model ("":
 * none). */
RV_API rv_status rv_embed_modalities(const rv_vit_config *cfg, const rv_embed_opts *o,
                                     int *video, int *audio, char *why, size_t cap);

/* What a caller hears of the job; every entry optional. index is the caller's
 * number of the input (rv_embed_queue). */
typedef struct rv_embed_hooks {
    void *user;
    /* group rank 0: input index enters a stage ("probe", "count", "tokenize",
     * "encode", "write"); total_s the recording's length and tokens its
     * sequence's (0: not known yet); flops the forward's (encode; 0 unknown) */
    void (*stage)(void *user, int index, const char *path, const char *stage, double total_s,
                  int64_t tokens, double flops);
    /* group rank 0, possibly on the worker thread: an input of at least
     * RV_EMBED_LONG_TOKENS tokens is about to be decoded */
    void (*plan)(void *user, const char *path, int64_t tokens, int64_t video, int64_t audio,
                 double seconds, double flops);
    /* every rank, any thread: n more of this rank's tokens made */
    void (*tokens)(void *user, int64_t n);
    /* every rank: nonzero asks the job to stop (a signal, an interrupt) */
    int (*stop)(void *user);
} rv_embed_hooks;

typedef struct rv_embed_job rv_embed_job;     /* one rank's */
typedef struct rv_embed_input rv_embed_input; /* one recording on one rank */
typedef struct rv_embed_output rv_embed_output;

/* The options a job over m on ranks ranks (mpi: one rank a process) would run,
 * checked without touching a file or a device: RV_ERR_INVALID naming what is
 * wrong (ulysses on heads the ranks do not divide, a size the patch does not
 * divide, a modality the model lacks, ...), as rv_embed_open would refuse them. */
RV_API rv_status rv_embed_check(const rv_vit_model *m, const rv_embed_opts *o, int ranks, int mpi);

/* Every rank of group together: this rank's job over m with o (copied) and
 * hooks (copied; NULL: none). The ranks agree: RV_VOTE_OK, else *out is NULL
 * and rv_last_error() says why (RV_VOTE_FAILED: a rank could not set up, so
 * nothing can run; RV_VOTE_BROKEN: the ranks lost each other). group must stay
 * alive until rv_embed_close. */
RV_API rv_vote_outcome rv_embed_open(const rv_embed_model *m, rv_comm *group,
                                     const rv_embed_opts *o, const rv_embed_hooks *hooks,
                                     rv_embed_job **out);
RV_API void rv_embed_close(rv_embed_job **j);

/* A vote of the job's group on the caller's own stage (rv_comm_vote.h), for a
 * batch's decisions between inputs (which input next, the counts at the end):
 * every rank together; the job's stop hook is asked too. */
RV_API rv_vote_outcome rv_embed_vote(rv_embed_job *j, rv_status mine, const void *payload,
                                     size_t bytes, rv_vote *out);

/* This rank's handle of input path, the caller's number index (for the hooks):
 * with opts.prefetch its preparation starts now on the job's worker thread,
 * which prepares queued inputs one after another (queue at most prefetch + 1
 * ahead of rv_embed_run). Every rank queues the same inputs in the same order.
 * Only a missing handle (no memory) fails here; a file that cannot be read fails
 * in rv_embed_run, on every rank alike. */
RV_API rv_status rv_embed_queue(rv_embed_job *j, const char *path, int index,
                                rv_embed_input **out);

/* What one input cost (rv_embed_run and rv_embed_collect fill it on every rank;
 * the figures are the group's: the slowest rank's stages, all ranks' FLOPs). */
typedef struct rv_embed_stats {
    double probe_s, decode_s, tokenize_s, encode_s; /* wall seconds of the stages;
                                       decode and tokenize split their common stage
                                       by the tokenizer's CPU time */
    double wait_s;          /* the encoder's wait for this input's tokens */
    double collect_s;       /* rv_embed_collect: the gather and the output's tensors */
    double seconds;         /* from the start of its preparation to now */
    double recording_s;     /* seconds the sequence covers */
    int64_t tokens, video_tokens, audio_tokens;
    double flops;           /* the forward's, every rank */
    double rank_mb;         /* the most a rank held for it (slice, activations), MiB */
    double rss_mb;          /* the largest peak resident set of a rank's process, MiB */
} rv_embed_stats;

/* Every rank of the group together, in queue order: waits for this rank's
 * preparation, agrees on the plan (a file that states no duration is counted
 * first by rank 0), agrees on the slices, runs the forward and pooling. Returns
 * the outcome (rv_last_error() says why when not RV_VOTE_OK; RV_VOTE_FAILED:
 * this input failed on every rank, the job goes on). stats (may be NULL). A rank
 * whose rv_embed_queue failed passes NULL: it votes the failure with the others. */
RV_API rv_vote_outcome rv_embed_run(rv_embed_job *j, rv_embed_input *in, rv_embed_stats *stats);

/* Every rank together after rv_embed_run succeeded: the output on group rank 0
 * (*out NULL elsewhere). With opts.tokens every rank's token outputs are
 * gathered to rank 0 first, into an unlinked scratch file in the folder of
 * scratch_near (a path; "-": $TMPDIR, else /tmp), or with scratch_near NULL
 * into memory. */
RV_API rv_vote_outcome rv_embed_collect(rv_embed_job *j, rv_embed_input *in,
                                        const char *scratch_near, rv_embed_output **out,
                                        rv_embed_stats *stats);
RV_API void rv_embed_input_free(rv_embed_input **in);

/* The output as a safetensors writer (owned by o, valid until its free): write it
 * with rv_st_writer_write (atomic) or rv_st_writer_write_fd. */
RV_API rv_st_writer *rv_embed_output_writer(rv_embed_output *o);
/* rv_st_writer_write(rv_embed_output_writer(o), path). */
RV_API rv_status rv_embed_output_write(rv_embed_output *o, const char *path);
RV_API void rv_embed_output_free(rv_embed_output **o);

/* 1 when path is a complete output of a job over m with o: a valid safetensors
 * file of format RV_EMBED_FORMAT by the same model (model_hash: its
 * rv_vit_hash, or NULL to compute it), dtype and normalize, holding every tensor
 * such a job writes (the per-token ones with o->tokens). For --resume. */
RV_API int rv_embed_output_complete(const char *path, const rv_vit_model *m,
                                    const char *model_hash, const rv_embed_opts *o);

/* ---- ranked labels from an output (embed_labels.c) ---------------------------------- */

typedef enum rv_labels_level {
    RV_LABELS_AUTO = 0,      /* per block when the file has block_logits, else recording */
    RV_LABELS_BLOCK = 1,     /* block_logits (G, C) with block_start / block_end */
    RV_LABELS_RECORDING = 2, /* logits (C) over [segment_start[0], segment_end[G-1]] */
} rv_labels_level;

typedef struct rv_labels_opts {
    int top;                 /* K labels per row (0: 5); more than C gives C */
    int multi_label;         /* -1 (default from rv_labels_opts_default): the file's
                                multi_label metadata; 1: sigmoid; 0: softmax */
    rv_labels_level level;
} rv_labels_opts;

RV_API void rv_labels_opts_default(rv_labels_opts *o);

/* An output's labels, ranked: rows of K (label, probability) pairs. */
typedef struct rv_embed_labels {
    int classes;             /* C */
    char **labels;           /* (C) the labels metadata, in id order */
    int multi_label;         /* 1: probabilities are sigmoid(logit), else softmax */
    rv_labels_level level;   /* RV_LABELS_BLOCK or RV_LABELS_RECORDING */
    int64_t rows;            /* G blocks, or 1 */
    double *start, *end;     /* (rows) s on the file's clock (the container's) */
    int top;                 /* K */
    int32_t *index;          /* (rows, K) label ids by decreasing probability (ties:
                                the lower id first) */
    float *prob;             /* (rows, K) their probabilities */
} rv_embed_labels;

/* Reads the output path (what rv_embed_output_write wrote) and ranks its labels
 * (o may be NULL: defaults). RV_ERR_FORMAT naming the file when it is not an
 * embed output, holds no logits (its model has no classifier head), or its
 * labels, logits and times disagree in size; RV_ERR_INVALID for the level asked
 * when the file lacks it (block without block_logits). Probabilities in double,
 * rounded once. */
RV_API rv_status rv_embed_labels_read(const char *path, const rv_labels_opts *o,
                                      rv_embed_labels **out);
RV_API void rv_embed_labels_free(rv_embed_labels **l);

/* The job's watch: this rank is still working. For a caller that waits on its
 * own between inputs (a batch's dispatch), so the group's votes wait for it;
 * NULL does nothing. */
RV_API void rv_embed_beat(rv_embed_job *j);

#ifdef __cplusplus
}
#endif
#endif
