/* embed_internal.h: what the files of encoder/embed share (rv_embed.h is the
 * public face):
 *
 *   embed_opts.c     defaults, the dtype names, the modalities a model embeds
 *   embed_job.c      rv_embed_open / close: this rank's backends, the group's
 *                    control communicators and watch
 *   embed_votes.c    the votes between stages, the stop hook, beats
 *   embed_prepare.c  one input on one rank before the encoder: probe and plan,
 *                    then this rank's slice decoded, tokenized and embedded
 *                    batch by batch; the worker that does it ahead (prefetch)
 *   embed_patches.c  the same slice from a whole sequence's patches held in
 *                    memory (the flat layer's embed of token arrays)
 *   embed_run.c      rv_embed_run: the votes on the prepared work, the
 *                    context-parallel forward, pooling
 *   embed_gather.c   the per-token outputs of every rank to rank 0, in order
 *   embed_output.c   rv_embed_collect: the output's tensors and metadata, the
 *                    dtype conversions, rv_embed_output_complete
 *   embed_labels.c   rv_embed_labels_read: a written output's logits as ranked
 *                    labels (`ringvit labels`)
 * Bytes that may not fit in memory twice (the gathered tokens) go to a column
 * (ingest/collect_column.h): an unlinked scratch file beside the output, or memory.
 */
#ifndef RV_EMBED_INTERNAL_H
#define RV_EMBED_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "collect_column.h"
#include "rv_backend.h"
#include "rv_comm.h"
#include "rv_comm_vote.h"
#include "rv_comm_watch.h"
#include "rv_embed.h"
#include "rv_shard.h"
#include "rv_tok_slice.h"
#include "rv_tokenize.h"
#include "rv_tokens.h"
#include "rv_vit.h"

/* ---- embed_opts.c ---------------------------------------------------------------------- */

/* "f32", "f16", "bf16": the metadata "dtype" of RV_F32, RV_F16, RV_BF16; NULL
 * for another type. */
const char *embed_dtype_name(rv_dtype dtype);

/* ---- the job ------------------------------------------------------------------------ */

typedef struct embed_ahead embed_ahead;

struct rv_embed_job {
    rv_embed_model m;          /* m.name owned */
    char hash[17];             /* rv_vit_hash of the model */
    char *config_json;         /* rv_vit_config_to_json */
    rv_embed_opts o;           /* resolved: threads, timeout, segment_s; device owned */
    rv_tok_opts to;            /* the model's tokenizer */
    rv_ingest_opts io;         /* the model's sampling, start_s 0 (each input's own) */
    rv_embed_hooks h;
    int rank, size;            /* in the group */
    int mpi;                   /* the group is an MPI communicator (one rank a process) */
    rv_comm *comm;             /* the group (the caller's): the forward, pooling */
    rv_comm *ctl;              /* the same ranks for the gather of the tokens */
    rv_comm *dev;              /* the same ranks for the forward's device buffers when
                                  comm cannot take them (MPI with cuda: NCCL, or comm
                                  staged through host memory); NULL: comm */
    rv_comm_watch *watch;      /* the votes and the gather wait on live peers */
    rv_vote vote;              /* the last vote */
    rv_backend *be;            /* this rank's compute threads, or its GPU stream */
    rv_backend *host;          /* beside a device be: the patch embedding's host
                                  backend (NULL when be is host memory) */
    rv_vit_model *dev_weights; /* the model in be's memory (cuda), else NULL */
    embed_ahead *ahead;        /* the worker of prefetch (NULL: in turn) */
};

/* ---- embed_votes.c ------------------------------------------------------------------- */

/* The stop hook, 0 without one. */
int embed_stopping(const rv_embed_job *j);
/* A vote of the group on a stage of the job (stop hook included). */
rv_vote_outcome embed_agree(rv_embed_job *j, rv_status mine, const void *payload, size_t bytes);
/* The host backend of the patch embedding on the rank's thread. */
rv_backend *embed_host_backend(const rv_embed_job *j);

/* ---- one input on one rank ------------------------------------------------------------ */

#define EMBED_MSG RV_VOTE_MSG

/* A whole sequence's patches held by the caller (embed_patches.c). */
typedef struct embed_patches {
    rv_tok_layout layout;
    const float *video;          /* (layout.nvideo, video_dim) */
    const float *audio;          /* (layout.naudio, audio_dim) */
    double time_origin;          /* the first frame's pts, s */
    double t0;                   /* the grid's zero on the container's clock, s */
    double end_s, rec_start;     /* s from t0 */
    char *probe_json;            /* the probe as compact JSON (metadata "probe"), or NULL */
} embed_patches;

/* A rank's tokens as they stream from the tokenizer: their descriptions, and
 * their embeddings computed batch by batch (rv_vit_embed), so the patches of a
 * long recording are never held whole. */
typedef struct embed_slice {
    rv_tok_slice t;              /* this rank's tokens (patches not kept) */
    float *y;                    /* (t.len, D) embeddings, then the forward's output */
    const rv_vit_model *model;
    rv_backend *hb;              /* the host backend the embedding runs on */
    int grid;                    /* patches per frame side */
    int64_t audio_steps;         /* rv_vit_tokens.audio_steps */
    const rv_tok_layout *layout; /* the whole sequence's (each block's audio steps) */
    double flops;                /* the embedding's */
    const rv_embed_job *job;     /* its hooks */
    rv_comm_watch *watch;        /* beaten per batch (NULL: ahead, on a thread) */
} embed_slice;

/* Where a rank's preparation of an input stopped. */
enum {
    PREP_PROBED = 1,    /* probed and planned; the file states no duration: counted next */
    PREP_DONE = 2,      /* its slice is tokenized (or a stage failed: see the statuses) */
};

struct rv_embed_input {
    rv_embed_job *job;           /* the job it was queued to */
    int index;                   /* the caller's number */
    char *path;                  /* the file, or NULL with patches */
    embed_patches *patches;      /* the sequence from memory, or NULL */
    int reached;                 /* PREP_*: how far it got */
    rv_status probe_st;          /* probe and plan */
    char probe_msg[EMBED_MSG];
    rv_status tok_st;            /* shard plan, slice and tokenize */
    char tok_msg[EMBED_MSG];
    rv_probe *probe;
    rv_tok_recording rec;        /* the plan (rv_tok_slice.h) */
    embed_slice s;
    rv_tok_stats ts;
    double probe_s, tok_wall;    /* wall seconds of the two stages */
    double wait_s;               /* in turn: both stages' seconds, which the encoder waited */
    double t_start;              /* rv_clock_s() when its probe began (0: not begun) */
    /* after rv_embed_run */
    int ran;                     /* 1: forward and pooling succeeded */
    rv_vit_pooled pooled;        /* the pooled outputs (every rank) */
    rv_vit_blocks blocks;        /* under block and frame spans: each block's (rank 0) */
    /* ahead (prefetch) */
    int queued;                  /* given to the worker, not yet waited for */
    atomic_int finished;         /* the worker has finished it */
};

/* ---- embed_prepare.c ------------------------------------------------------------------ */

/* Probes and plans in on this rank; stops there for a file that states no
 * duration (need_count). Failures are recorded in in, not returned. */
void embed_prepare_probe(rv_embed_job *j, rv_embed_input *in);
/* Checks in's size (max_tokens; a long input announced), plans this rank's
 * slice of it (keep_patches: with arrays for its patches) and allocates its
 * embeddings. */
rv_status embed_plan_slice(rv_embed_job *j, rv_embed_input *in, int keep_patches, rv_backend *hb,
                           rv_comm_watch *watch);
/* Plans the shards and tokenizes this rank's slice of the planned in (hb: the
 * host backend of the patch embedding; watch: beaten, or NULL). */
void embed_prepare_tokens(rv_embed_job *j, rv_embed_input *in, rv_backend *hb,
                          rv_comm_watch *watch);
/* The rank's worker that prepares queued inputs ahead, one after another; slots:
 * the most queued at once. */
rv_status embed_ahead_create(rv_embed_job *j, int slots, embed_ahead **out);
void embed_ahead_push(embed_ahead *a, rv_embed_input *in);
/* Waits until the worker has finished in (beating the watch meanwhile); returns
 * the wait, s (0 for an input not queued). */
double embed_ahead_wait(embed_ahead *a, rv_embed_input *in);
/* Takes in out of the queue if the worker has not started it, else waits until
 * it has finished (before in is freed). */
void embed_ahead_cancel(embed_ahead *a, rv_embed_input *in);
/* Stops the worker after the input in hand; inputs still queued are marked
 * failed ("not prepared"). */
void embed_ahead_free(embed_ahead **a);
/* What in holds on this rank, freed (not while queued and unfinished). */
void embed_prepare_release(rv_embed_input *in);
/* Bytes of the slice: its arrays. */
size_t embed_slice_bytes(const embed_slice *s, int dim);

/* ---- embed_patches.c ------------------------------------------------------------------ */

/* The slice of a sequence held in memory (in->patches): plans the shards, copies
 * this rank's tokens' descriptions and patches, and embeds them in the batches
 * the tokenizer would have handed out, so the sums are those of a file's. */
void embed_prepare_patches(rv_embed_job *j, rv_embed_input *in);
/* An input over patches (copied: layout, probe; the patch arrays are borrowed
 * until rv_embed_input_free). */
rv_status embed_queue_patches(rv_embed_job *j, const embed_patches *p, int index,
                              rv_embed_input **out);

/* ---- embed_labels.c ------------------------------------------------------------------ */

/* The top k of C logits as probabilities (softmax, or sigmoid with multi_label)
 * in double: ids by decreasing probability, ties the lower id first. The one
 * ranking of `ringvit labels` and of the export's metadata. */
rv_status embed_labels_rank(const float *logits, int C, int multi_label, int k, int32_t *ids,
                            double *p);

/* ---- embed_gather.c ------------------------------------------------------------------- */

/* Rank 0 receives every slice of y (len, dim) in sequence order and appends it
 * to sink; the others send theirs. A failure to write on rank 0 still drains
 * every message and comes back in *write_st. */
rv_status embed_gather_tokens(rv_embed_job *j, const rv_shard_plan *sp, const float *y, int dim,
                              collect_column *sink, rv_status *write_st);

#endif
