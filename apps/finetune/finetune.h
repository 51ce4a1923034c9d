/* finetune.h: what the files of `ringvit finetune` share.
 *
 *   cmd_finetune.c     flags, help, the model, the settings, resume checks, exit codes
 *   finetune_data.c    manifests (path<TAB>label), classes, content hash, the
 *                      seeded order of every epoch
 *   finetune_tokens.c  one recording's slice of tokens on one rank (probe, plan,
 *                      decode + tokenize), kept in a per-rank cache
 *   finetune_loop.c    one rank's training: the dp x cp mesh, forward, loss,
 *                      backward, gradient all-reduce, clip, AdamW, eval, checkpoints
 *   finetune_log.c     the JSON-lines log and the progress on standard error
 *   finetune_output.c  the tuned weights file (-o): model, head, class names
 *
 * Data order: step s consumes the global batch of dp * accum recordings at data
 * positions [s * dp * accum, (s + 1) * dp * accum) of the concatenated epoch
 * orders (epoch e is a permutation of the manifest, a function of (seed, e)
 * only); dp group g takes positions s * dp * accum + g * accum + a, a < accum.
 * So the trajectory is a function of the settings alone, and a checkpoint at
 * step s resumes at data position s * dp * accum. */
#ifndef RV_FINETUNE_H
#define RV_FINETUNE_H

#include <pthread.h>
#include <signal.h>
#include <stdint.h>

#include "rv_comm.h"
#include "rv_ingest.h"
#include "rv_tok_slice.h"
#include "rv_tokens.h"
#include "rv_vit.h"
#include "rv_vit_train.h"

#define FT_CMD "finetune"
#define FT_FORMAT "ringvit-finetune" /* metadata "format" of the -o file */
#define FT_META_CLASSES "ringvit.classes"   /* JSON array of the class names */
#define FT_META_SETTINGS "ringvit.finetune" /* the settings JSON */

/* ---- finetune_signal.c ---------------------------------------------------------- */

/* Set by the SIGINT/SIGTERM handler: stop after the current step. */
extern volatile sig_atomic_t ft_stop_signal;
/* The handler (cli_on_stop_signals): the first signal sets ft_stop_signal, a second
 * one stops at once. */
void ft_on_signal(int sig);

/* ---- finetune_data.c ------------------------------------------------------------ */

typedef struct ft_item {
    char *path;   /* resolved against the manifest's folder */
    int label;    /* class index (classify), 0 (mae) */
} ft_item;

typedef struct ft_data {
    ft_item *item; /* (n) */
    int n;
    uint64_t hash; /* FNV-1a 64 of the manifest's bytes */
} ft_data;

typedef struct ft_classes {
    char **name;   /* (n) sorted (byte order), unique */
    int n;
} ft_classes;

/* Reads manifest. with_labels (classify): every entry needs "path<TAB>label";
 * with derive != NULL the classes become the sorted unique labels (the training
 * manifest), else each label is looked up in *known (a label not there is a
 * usage error naming it). Without labels (mae) a label column is ignored.
 * Returns 0, or RV_EXIT_USAGE / RV_EXIT_FAIL after a message. */
int ft_data_read(const char *manifest, int with_labels, ft_classes *derive,
                 const ft_classes *known, ft_data *out);
void ft_data_free(ft_data *d);
void ft_classes_free(ft_classes *c);
/* FNV-1a 64 over the class names (each followed by a NUL). */
uint64_t ft_classes_hash(const ft_classes *c);

/* The seeded order of the epochs: a permutation of n per epoch, a function of
 * (seed, epoch) only (Fisher-Yates driven by a counter-based hash). */
typedef struct ft_order {
    uint64_t seed;
    int n;
    int64_t epoch; /* the epoch perm holds (-1: none yet) */
    int *perm;     /* (n) */
} ft_order;

rv_status ft_order_init(ft_order *o, uint64_t seed, int n);
/* The manifest index at data position pos (epoch pos / n). */
int ft_order_at(ft_order *o, int64_t pos);
void ft_order_free(ft_order *o);

/* splitmix64's finaliser: the counter-based hash every seed derivation uses. */
uint64_t ft_mix64(uint64_t z);

/* ---- finetune_tokens.c ---------------------------------------------------------- */

/* One rank's slice of one recording's sequence. */
typedef struct ft_slice {
    rv_tok_layout L;              /* the whole sequence */
    double end_s;                 /* the recording's end, s since t0 */
    rv_tok_slice t;               /* this rank's tokens, patches kept */
} ft_slice;

/* Plans path's sequence over ranks (zigzag when causal without a span, else
 * contiguous), from the recording's start, and decodes and tokenizes rank's
 * slice (rv_tok_slice.h). A file that states no duration is counted first
 * (every rank alike). beat(beat_arg), when given, is called at every batch and
 * chunk: this rank is still working. */
rv_status ft_slice_load(const char *path, const rv_tok_opts *to, const rv_ingest_opts *io,
                        int zigzag, int ranks, int rank, void (*beat)(void *), void *beat_arg,
                        ft_slice **out);
/* Bytes it holds. */
size_t ft_slice_bytes(const ft_slice *s);
void ft_slice_free(ft_slice **s);

/* ---- the run -------------------------------------------------------------------- */

typedef struct ft_settings {
    rv_task task;
    const char *manifest, *val_manifest, *model_name, *out, *ckpt, *log, *resume;
    ft_data train, val;
    ft_classes classes;
    int cp, dp, accum;
    int mpi;                 /* 1: --backend mpi or nccl (one rank per process) */
    int nccl;                /* 1: --backend nccl: the cp group's forward and backward
                                messages over NCCL */
    int threads;             /* compute threads per rank */
    int cuda;                /* --device cuda: the blocks on a GPU */
    rv_precision precision;  /* --precision: the blocks' backend's */
    int gpu;                 /* with cuda: this process's GPU under MPI; local: --gpu,
                                or -1 (rank % GPUs) */
    rv_cp_strategy strategy;
    int causal, cache, quiet, json, check_sync;
    rv_span span;            /* --attention */
    double timeout_s;
    int64_t steps;           /* total steps of the schedule */
    int64_t save_every;      /* 0: no periodic checkpoint */
    int64_t stop_at;         /* > 0: end after this step (checkpoint written) */
    uint64_t seed;
    double mask_ratio;       /* mae: fraction of tokens hidden */
    rv_adamw_opts opt;       /* the encoder's */
    rv_adamw_opts head_opt;  /* the head's: opt with --head-lr */
    rv_tok_opts to;
    rv_ingest_opts io;
    char settings[4096];     /* the JSON that defines the trajectory (checkpoints) */
    /* the starting state (read-only, copied by every rank) */
    const rv_vit_model *model0;
    const rv_train_head *head0;
    const rv_adamw *adam0;   /* NULL: fresh moments */
    int64_t step0;           /* steps already taken (resume) */
} ft_settings;

typedef struct ft_report ft_report; /* finetune_log.c */

/* What rank 0 reports about the run. */
typedef struct ft_result {
    int64_t steps_done;      /* step reached (step0 included) */
    double last_loss;
    double seconds;
    double tokens;           /* training tokens processed in this run */
    int evaluated;
    double val_loss, val_acc;
    int64_t val_count;
    int stopped;             /* a signal or --stop-at ended the run early */
    int output_written;
    char ckpt_written[4200]; /* the last checkpoint written ("" none) */
} ft_result;

/* Shared by every local rank (one per process under MPI). */
typedef struct ft_job {
    const ft_settings *set;
    ft_report *report;       /* rank 0's process only */
    ft_result res;           /* filled by world rank 0 */
    pthread_mutex_t lock;
    char error[1024];        /* the first failure's own message (not "another rank ...") */
} ft_job;

/* Notes this rank's own failure message (the first one wins). */
void ft_job_error(ft_job *job, int rank, const char *msg);

/* The body of one rank (rv_local_fn). */
rv_status ft_rank_main(rv_comm *world, void *arg);

/* ---- finetune_output.c ------------------------------------------------------------- */

/* The -o file: every encoder tensor (rv_vit_save's names), the head, metadata
 * ringvit.config, format, ringvit.classes (classify), ringvit.finetune
 * (settings) and ringvit.finetune_steps; atomically. */
rv_status ft_output_write(const char *path, const rv_vit_model *m, const rv_train_head *h,
                          const ft_settings *set, int64_t steps);

/* ---- finetune_log.c ------------------------------------------------------------------ */

/* log_path NULL: no log. append: continue an existing log (resume). */
rv_status ft_report_open(const ft_settings *set, const char *log_path, int append,
                         ft_report **out);
typedef struct ft_step_rec {
    int64_t step;            /* 1-based: steps taken after this one */
    double epoch;            /* data position / train size after the step */
    double loss, lr, grad_norm;
    int64_t tokens;          /* tokens of the global batch */
    double seconds;          /* this step's wall time */
    double accuracy;         /* classify: the batch's accuracy (< 0: none) */
} ft_step_rec;
void ft_report_step(ft_report *r, const ft_step_rec *s);
void ft_report_eval(ft_report *r, int64_t step, double epoch, double loss, double acc,
                    int64_t count, double seconds);
void ft_report_event(ft_report *r, const char *event, int64_t step, const char *path);
/* A message on standard error that clears the progress line first. */
void ft_report_message(ft_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* What went wrong writing the log (the first failure), or NULL: a log that
 * cannot be written fails the run. Call before ft_report_close. */
const char *ft_report_log_error(const ft_report *r);
void ft_report_close(ft_report **r);

#endif
