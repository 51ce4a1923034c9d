/* embed_rank.h: one rank of `ringvit embed` (embed_batch.c), the votes by
 * which the ranks of a group agree after every stage that can fail, so one
 * rank's failure (a corrupt stretch of the file, no memory) fails the input on
 * every rank of the group at the same point instead of leaving the others
 * waiting, the work a rank prepares ahead (embed_prepare.c), and the dispatch
 * of inputs to groups (embed_dispatch.c). */
#ifndef RV_EMBED_RANK_H
#define RV_EMBED_RANK_H

#include <pthread.h>
#include <stdint.h>

#include "embed.h"
#include "rv_backend.h"
#include "rv_comm.h"
#include "rv_comm_watch.h"
#include "rv_shard.h"
#include "rv_tok_slice.h"
#include "rv_tokenize.h"

#define EMBED_VOTE_VALS 10
#define EMBED_MSG 424

/* What each rank says after a stage; 512 bytes, gathered by every rank. */
typedef struct embed_vote {
    int32_t status;                /* rv_status of this rank's stage */
    int32_t stop;                  /* 1: a signal asked this process to stop */
    double val[EMBED_VOTE_VALS];   /* stage results (rank 0's decisions, stats) */
    char msg[EMBED_MSG];           /* rv_last_error() when status != RV_OK */
} embed_vote;

typedef struct embed_dispatch embed_dispatch;
typedef struct embed_ahead embed_ahead;

typedef struct embed_rank {
    embed_batch *b;
    int world_rank, group, groups; /* this rank in the world; its group of groups */
    embed_dispatch *disp; /* the group's claims and outcomes (rank 0 of the group) */
    embed_ahead *ahead;   /* --prefetch: the worker that prepares inputs ahead */
    const embed_settings *set;
    rv_comm *comm;      /* the cp group, --timeout deadlines (the forward, pooling) */
    rv_comm *dev;       /* the same ranks for the forward's device buffers when comm
                         * cannot take them: NCCL (--backend nccl) or a staged copy
                         * of comm (--backend mpi --device cuda); NULL: comm */
    rv_comm *ctl;       /* the same ranks for the gather of --tokens (waits under watch) */
    rv_comm_watch *watch; /* the votes and the gather wait on live peers: a rank silent
                         * for --timeout fails them (rv_comm_watch.h) */
    rv_backend *be;     /* this rank's compute threads, or its GPU stream */
    rv_backend *host;   /* beside a device be: a host backend for the patch embedding
                         * (--threads), made once; NULL when be is host memory */
    rv_vit_model *dev_weights; /* the model in be's memory (--device cuda), else NULL */
    int rank, size;
    embed_vote *votes;  /* (size) the last vote */
} embed_rank;

/* Outcome of a vote and of one input. */
enum {
    AGREE_OK = 0,       /* every rank succeeded */
    AGREE_FAILED = 1,   /* some rank failed: the input fails (message in rv_last_error) */
    AGREE_STOP = 2,     /* a signal: the batch stops */
    AGREE_FATAL = 3,    /* communication broke: the batch cannot go on */
};

/* Every rank calls it together with its stage status (its rv_last_error() is
 * sent along) and up to EMBED_VOTE_VALS values; k->votes then holds every
 * rank's vote. On AGREE_FAILED rv_last_error() is the first failing rank's
 * message ("rank R: ..." when there are several ranks). */
int embed_agree(embed_rank *k, rv_status mine, const double *val, int nval);

/* ---- embed_prepare.c: one input's work on one rank before the encoder ---------- */

/* A rank's tokens as they stream from the tokenizer: their descriptions, and
 * their embeddings computed batch by batch (rv_vit_embed), so the patches of a
 * long recording are never held whole. */
typedef struct embed_slice {
    rv_tok_slice t;                     /* this rank's tokens (patches not kept) */
    float *y;                           /* (t.len, D) embeddings, then the forward's output */
    const rv_vit_model *model;
    rv_backend *hb;                     /* the host backend the embedding runs on */
    int grid;                           /* patches per frame side */
    int64_t audio_steps;                /* rv_vit_tokens.audio_steps */
    double flops;                       /* the embedding's */
    embed_report *report;               /* tokens made (NULL: not counted) */
    int64_t report_scale;               /* tokens the report counts per token made here */
    rv_comm_watch *watch;               /* beaten per batch (NULL: ahead, on a thread) */
} embed_slice;

/* Where a rank's preparation of an input stopped. */
enum {
    PREP_PROBED = 1,    /* probed and planned; the file states no duration: counted next */
    PREP_DONE = 2,      /* its slice is tokenized (or a stage failed: see the statuses) */
};

/* One input on one rank before the encoder: probed and planned from the
 * headers, then this rank's slice decoded and tokenized. */
typedef struct embed_prep {
    int index;                   /* the input */
    int skip;                    /* --resume: its complete output exists (group rank 0's call) */
    int reached;                 /* PREP_*: how far it got */
    rv_status probe_st;          /* probe and plan */
    char probe_msg[EMBED_MSG];
    rv_status tok_st;            /* shard plan, slice and tokenize */
    char tok_msg[EMBED_MSG];
    rv_probe *probe;
    rv_tok_recording rec;        /* the plan: layout, the grid's start from --start
                                    (io.start_s), time_origin, t0 (what the
                                    outputs' times are shifted by), rec_start, end_s;
                                    need_count: rank 0 counts a file that states no
                                    duration */
    embed_slice s;
    rv_tok_stats ts;
    double probe_s, tok_wall;    /* wall seconds of the two stages */
    double wait_s;               /* in turn: both stages' seconds, which the encoder waited */
    double t_start;              /* rv_clock_s() when its probe began (0: not begun) */
    /* ahead (--prefetch) */
    int queued;                  /* given to the rank's worker, not yet waited for */
    atomic_int finished;         /* the worker has finished it */
} embed_prep;

/* Probes and plans p->index on this rank; stops there for a file that states
 * no duration (need_count). Failures are recorded in p, not returned. */
void embed_prepare_probe(embed_rank *k, embed_prep *p);
/* Plans the shards and tokenizes this rank's slice of the planned p (hb: the
 * host backend of the patch embedding; watch: beaten, or NULL). */
void embed_prepare_tokens(embed_rank *k, embed_prep *p, rv_backend *hb, rv_comm_watch *watch);
/* The rank's worker that prepares queued inputs ahead (--prefetch), one after
 * another; slots: the most queued at once. */
rv_status embed_ahead_create(embed_rank *k, int slots, embed_ahead **out);
/* Queues p (index, skip set) to be probed, planned and tokenized. */
void embed_ahead_push(embed_ahead *a, embed_prep *p);
/* Waits until the worker has finished p (beating the watch meanwhile); returns
 * the wait, s (0 for an input not queued). */
double embed_ahead_wait(embed_ahead *a, embed_prep *p);
/* Stops the worker after the input in hand; inputs still queued are marked
 * failed ("not prepared"). Then free the preps. */
void embed_ahead_free(embed_ahead **a);
/* One wait of at most ms on cv (mu held), then a beat of watch with mu
 * released: a rank that waits on a thread of its own still says it is alive. */
void embed_wait_beating(pthread_cond_t *cv, pthread_mutex_t *mu, long ms, rv_comm_watch *watch);
/* Frees what p holds (not while queued and unfinished). */
void embed_prepare_free(embed_prep *p);
/* Bytes of the slice: its arrays. */
size_t embed_slice_bytes(const embed_slice *s, int dim);

/* ---- embed_dispatch.c: which group embeds which input ------------------------------ */

/* Every rank of the world calls it together, after the groups are formed (under
 * MPI it splits world for its messages). */
rv_status embed_dispatch_create(rv_comm *world, embed_rank *k, embed_dispatch **out);
/* World rank 0's process under MPI with several groups: starts the thread that
 * answers the other groups, once this process has made all its communicators
 * (later calls do nothing). */
rv_status embed_dispatch_start(embed_dispatch *d);
/* Group rank 0: the next unclaimed input, or -1 when none is left or the batch
 * stops (a signal in world rank 0's process, a broken group). */
rv_status embed_dispatch_claim(embed_dispatch *d, int *index);
/* Group rank 0: the outcome of an input (the log line, counts). */
rv_status embed_dispatch_done(embed_dispatch *d, int index, const embed_result *res);
/* Group rank 0: this group is finished (broken: its ranks lost each other, the
 * batch stops, msg says why; stopped: by a signal). Unless broken, waits for
 * every group to finish, beating the group's watch, and then gives the batch's
 * counts: ok, failed, skipped, fatal (1: a group broke), stopped (1: a signal). */
rv_status embed_dispatch_finish(embed_dispatch *d, int broken, int stopped, const char *msg,
                                double counts[5]);
/* Every rank; world rank 0's process joins its thread. */
void embed_dispatch_free(embed_dispatch **d);

/* ---- embed_job.c ---------------------------------------------------------------------- */

/* One prepared input on one group; every rank of the group calls it together.
 * res is filled on group rank 0 (other ranks pass scratch). Returns an AGREE_*
 * outcome; AGREE_OK covers a skipped input too (res->status). */
int embed_job_run(embed_rank *k, embed_prep *p, embed_result *res);

#endif
