/* embed.h: what the files of `ringvit embed` share.
 *
 *   cmd_embed.c     flags, help, the model, output names, signals, exit codes
 *   embed_inputs.c  the input list (arguments and --manifest) and output names
 *   embed_batch.c   one rank's loop over the inputs (its group's claims, the
 *                   inputs prepared ahead), and the votes by which the ranks of
 *                   a group agree after every stage that can fail
 *   embed_dispatch.c which group embeds which input: the next unclaimed input to
 *                   the first free group, outcomes to rank 0's report
 *   embed_prepare.c one recording's work on one rank before the encoder: probe,
 *                   plan, decode and tokenize its slice (ahead, on a thread, with
 *                   --prefetch)
 *   embed_job.c     one recording on one group: the votes on the prepared
 *                   work, forward, pool, gather (--tokens), write
 *   embed_output.c  the output safetensors: write, check (--resume), stale
 *                   temporary files
 *   embed_log.c     the JSON-lines log, progress on standard error, --json
 *   embed_shard.c   --shard I/N: jobs started separately that share --out-dir
 *                   divide the inputs through a claim file per input
 *
 * The W ranks form W / C groups of C ranks (--ranks W --cp C; under mpiexec W
 * is the process count): data parallel over the inputs, context parallel
 * within a recording. Every rank runs embed_batch_rank with the same
 * embed_batch: the ranks of --backend local are threads sharing it, under
 * --backend mpi or nccl each process has its own copy (the same inputs and
 * settings). Rank 0 of each group writes its outputs; rank 0 of the world
 * hands out the inputs, writes the log and prints; the other ranks compute. */
#ifndef RV_EMBED_H
#define RV_EMBED_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>

#include "rv_comm.h"
#include "rv_ingest.h"
#include "rv_safetensors.h"
#include "rv_tokens.h"
#include "rv_vit.h"

/* Exit status beyond cli.h's: some inputs failed. */
#define RV_EXIT_SOME_FAILED 3
#define EMBED_FORMAT "ringvit-embed" /* metadata "format" of every output */
#define EMBED_LOG_NAME "embed-log.jsonl"
/* The log of job I of N (--shard I/N): the jobs never write one file. */
#define EMBED_SHARD_LOG_FMT "embed-log.shard-%d-of-%d.jsonl"
/* --claim-stale: a claim not refreshed for this many seconds is its dead job's. */
#define EMBED_CLAIM_STALE_S 600.0
/* Under MPI, how long a rank other than 0 waits for rank 0 to end a broken job
 * (rank 0 says why first) before it ends the job itself. */
#define EMBED_ABORT_PAUSE_S 2

/* Set by the SIGINT/SIGTERM handler (cmd_embed.c): stop after the current stage. */
extern volatile sig_atomic_t embed_stop_signal;
/* The temporary file of the output being written ("" when none), so a second
 * signal, which ends the process at once, can remove it. */
extern char embed_tmp_path[4200];

typedef struct embed_input {
    char *path;   /* media file (manifest entries resolved against its folder) */
    char *output; /* its output .safetensors */
    char *note;   /* why the output name differs from the input's (NULL) */
} embed_input;

typedef struct embed_settings {
    const rv_vit_model *model; /* shared read-only by the local ranks */
    const char *model_name;    /* preset name, weights path or model folder */
    int random_weights;        /* 1: a preset's random weights (said in the metadata) */
    char model_hash[17];
    char *config_json;         /* rv_vit_config_to_json */
    rv_tok_opts to;            /* from the model config and flags */
    rv_ingest_opts io;         /* fps, size, streams (start_s: each input's own, from
                                  start_at, in embed_prep.io) */
    double start_at;           /* --start on the container's clock, s (NAN: the
                                  recording's start) */
    rv_cp_strategy strategy;
    int causal;
    rv_span span;              /* --attention */
    int ranks;                 /* cp size: the ranks of a group */
    int world;                 /* ranks in all (a multiple of ranks) */
    int prefetch;              /* --prefetch: inputs a rank prepares ahead */
    int mpi;                   /* 1: --backend mpi or nccl (one rank per process) */
    int nccl;                  /* 1: --backend nccl: the forward's messages over NCCL */
    int threads;               /* compute threads per rank */
    int cuda;                  /* --device cuda: each rank's blocks on a GPU */
    int gpu;                   /* with cuda: this process's GPU under MPI; local: --gpu,
                                  or -1 (rank % GPUs) */
    double timeout_s;          /* communication deadline inside the forward */
    double segment_s, hop_s;   /* --segment, --hop (0: the segment) */
    int64_t max_tokens;        /* --max-tokens: the most tokens, or segments, of an input */
    int tokens;                /* --tokens: per-token outputs too */
    int resume;
    int quiet, json;
    /* The outputs' form (embed_output.c) and the heartbeat (embed_log.c). */
    rv_dtype dtype;            /* --dtype: the float embeddings as RV_F32, RV_F16 or RV_BF16 */
    int normalize;             /* --normalize: rows of global, segments, tokens L2-normalised */
    double progress_s;         /* --progress: a line every this many s when stderr is not
                                  a terminal (0: none) */
    /* --shard I/N (embed_shard.c): this job's number and the job count (0: no
     * shards), and --claim-stale */
    int shard_index, shard_count;
    double claim_stale_s;
} embed_settings;

/* The index of an --out-dir run, beside its outputs (embed_log.c). */
#define EMBED_INDEX_NAME "index.jsonl"

/* The most inputs --prefetch prepares ahead. */
#define EMBED_MAX_PREFETCH 16

/* An input of this many tokens or more is announced before it is decoded. */
#define EMBED_LONG_TOKENS 100000


typedef enum embed_status {
    EMBED_OK = 0,
    EMBED_FAILED = 1,
    EMBED_SKIPPED = 2,
} embed_status;

/* One input's outcome, as rank 0 reports it. Stage times are wall seconds on
 * rank 0 between the ranks' agreements (so the slowest rank sets them); decode
 * and tokenize split their common stage by the slowest rank's tokenizer CPU time. */
typedef struct embed_result {
    embed_status status;
    char error[1024];
    double seconds;           /* the whole input */
    double probe_s, decode_s, tokenize_s, encode_s, write_s;
    double recording_s;       /* seconds the sequence covers */
    int64_t tokens, video_tokens, audio_tokens;
    double flops;             /* forward FLOPs, all ranks */
    double rank_mb;           /* most bytes a rank held for this input (its token
                                 slice, outputs and activations), MiB */
    double rss_mb;            /* largest peak resident set of a rank's process, MiB */
    double wait_s;            /* the encoder's wait for this input's tokens (the
                                 group's slowest rank), s */
    int group;                /* the group that embedded it */
} embed_result;

typedef struct embed_report embed_report; /* embed_log.c */
typedef struct embed_shard embed_shard;   /* embed_shard.c */

typedef struct embed_batch {
    const embed_settings *set;
    embed_input *in;          /* (n) */
    int n;
    embed_result *res;        /* (n) filled on rank 0 */
    embed_report *report;     /* rank 0's process only (NULL elsewhere) */
    embed_shard *shard;       /* --shard: the claim files (world rank 0's process; NULL
                                 elsewhere and without --shard) */
    /* outcome of the run, set by rank 0 */
    int fatal;                /* communication broke or setup failed on a rank */
    char fatal_msg[1024];
    int stopped;              /* a signal stopped the batch */
    int done;                 /* inputs handled */
    int counts[3];            /* inputs ok, failed, skipped (every process, at the end) */
    /* The dispatch (embed_dispatch.c), in world rank 0's process: */
    pthread_mutex_t lock;
    pthread_cond_t changed;   /* a group finished */
    int next;                 /* the first unclaimed input */
    int groups_left;          /* groups that have not finished */
} embed_batch;

/* ---- embed_inputs.c --------------------------------------------------------- */

/* Appends the paths of manifest (one per line; '#' comments and blank lines
 * ignored; relative paths are relative to the manifest's folder). Returns 0, or
 * RV_EXIT_USAGE after a message when it cannot be read. */
int embed_inputs_manifest(const char *manifest, embed_input **in, int *n, int *cap);
/* Appends one path. Returns 0 or RV_EXIT_FAIL (out of memory). */
int embed_inputs_add(const char *path, embed_input **in, int *n, int *cap);
/* Output names: out given: the single input goes there; else DIR/<basename
 * without extension>.safetensors, a name taken by an earlier input getting -2,
 * -3, ... (noted in in[i].note). Returns 0 or RV_EXIT_FAIL. */
int embed_inputs_name(embed_input *in, int n, const char *out, const char *dir);
void embed_inputs_free(embed_input *in, int n);

/* ---- embed_batch.c ---------------------------------------------------------- */

/* The body of one rank (rv_local_fn): every input in turn. Returns RV_OK unless
 * communication broke (then batch->fatal). */
rv_status embed_batch_rank(rv_comm *comm, void *arg);

/* ---- embed_output.c --------------------------------------------------------- */

typedef struct embed_output {
    const char *path;
    const embed_settings *set;
    const char *source;        /* the input path */
    const char *probe_json;
    const rv_tok_layout *L;
    double recording_s;        /* the recording's length from its start (or from t0
                                  when --start is later), s */
    double time_origin;        /* t0 on the container's clock, s */
    double start_s;            /* the grid's start on that clock, s */
    const rv_vit_pooled *pooled; /* times already on the container's clock */
    /* --tokens: all S tokens in global order */
    const float *tokens;       /* (S, D) */
    const double *token_time;  /* (S, 2) */
    const uint8_t *token_modality; /* (S) */
    const int64_t *token_pos;  /* (S, 3) */
} embed_output;

/* Writes o->path atomically (rv_st_writer_write: "<path>.tmp.<pid>", renamed). */
rv_status embed_output_write(const embed_output *o);
/* 1 when path is a complete output of this command: a valid safetensors file
 * of format EMBED_FORMAT holding every tensor this run would write. */
int embed_output_complete(const char *path, const embed_settings *set);
/* Removes the temporary files "<out>.tmp.<pid>" that a killed run left beside
 * the outputs in[0..n) (only when process pid is gone). Returns how many. */
int embed_output_clean_stale(const embed_input *in, int n);
/* A complete output's metadata "recording_s" and "tokens" (for the index of an
 * input skipped by --resume): *recording_s NAN and *tokens -1 where absent.
 * Returns 0, or -1 when the file cannot be opened. */
int embed_output_info(const char *path, double *recording_s, int64_t *tokens);
/* The metadata "dtype" of --dtype ("f32", "f16", "bf16"). */
const char *embed_output_dtype_name(rv_dtype dtype);

/* ---- embed_log.c ------------------------------------------------------------ */

/* log_path NULL: no JSON-lines log. Not quiet: a progress line redrawn in place
 * when stderr is a terminal, else (set->progress_s > 0) a heartbeat line at most
 * every progress_s seconds while an input has taken longer than that. */
rv_status embed_report_open(const embed_settings *set, const char *log_path, int nfiles,
                            embed_report **out);
/* A new stage of input index (progress line). total_s: the recording's length;
 * tokens: the sequence's length (0 unknown). */
void embed_report_stage(embed_report *r, int index, const char *path, const char *stage,
                        double total_s, int64_t tokens);
/* Says what a long input will cost before its work starts: tokens, seconds of
 * recording, the forward's FLOPs (0: unknown) and, after an earlier input set the
 * rate, the estimated encode time on this machine. */
void embed_report_plan(embed_report *r, const char *path, int64_t tokens, int64_t video,
                       int64_t audio, double seconds, double flops);
/* The FLOPs of the forward about to run (for the encode stage's ETA). */
void embed_report_flops(embed_report *r, double flops);
/* n more tokens made (any local rank's thread). */
void embed_report_tokens(embed_report *r, int64_t n);
/* The outcome of input index: the log line, the stderr line, the --json line. */
void embed_report_done(embed_report *r, int index, const embed_input *in,
                       const embed_result *res);
/* A message for standard error that clears the progress line first. */
void embed_report_message(embed_report *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* What went wrong writing the log (the first failure), or NULL: a log that
 * cannot be written fails the run. Call before embed_report_close. */
const char *embed_report_log_error(const embed_report *r);
/* Writes path (EMBED_INDEX_NAME in --out-dir) atomically ("<path>.tmp.<pid>",
 * renamed): one JSON line per input, in input order, whose output is complete
 * after the run, from the outcomes embed_report_done (and, with --shard,
 * embed_report_complete) was given ("ok" embedded now, "skipped" by --resume):
 * {"path", "output", "duration_s", "tokens",
 * "model_hash", "status"}; a skipped input's duration and tokens come from its
 * output's metadata (null when absent). Call before embed_report_close. */
rv_status embed_report_index(const embed_report *r, const char *path);
/* An input another job (--shard) handled, whose output is complete, for the
 * index: status EMBED_OK (embedded in this run) or EMBED_SKIPPED (earlier),
 * its duration and tokens read from its output. Ignored for an input this job
 * handled. */
void embed_report_complete(embed_report *r, int index, const embed_input *in,
                           embed_status status);
void embed_report_close(embed_report **r);

/* ---- embed_shard.c: --shard I/N, claim files in --out-dir -------------------------- */

/* World rank 0's process, before the batch: job set->shard_index of
 * set->shard_count over in[0..n), outputs and claims in dir (messages through
 * report); starts the thread that keeps its claims alive. */
rv_status embed_shard_open(const embed_settings *set, const embed_input *in, int n,
                           const char *dir, embed_report *report, embed_shard **out);
/* Under the batch's lock: the next input this job takes (its claim "<output>.claim"
 * won, or with --resume a complete output of its share, to skip), -1 when the
 * scan is over; inputs held or done by other jobs are passed (counted, see
 * embed_shard_left). An error when a claim cannot be created or written. */
rv_status embed_shard_next(embed_shard *s, int *index);
/* Under the batch's lock: index ended (its output in place when ok): the claim
 * is removed, or rewritten "failed" (with error) for a failed input. */
void embed_shard_done(embed_shard *s, int index, embed_status status, const char *error);
/* Inputs passed to other jobs. */
int embed_shard_left(const embed_shard *s);
/* Tells r of the complete outputs of inputs this job did not handle (the index
 * lists every complete output, whichever job wrote it). */
void embed_shard_report_others(const embed_shard *s, embed_report *r);
/* Around the index's rewrite: one job at a time ("<index>.lock", O_EXCL; waited
 * for up to 10 s, then written without), so the last written lists every
 * output the other jobs had finished. */
void embed_shard_index_lock(embed_shard *s, const char *index_path);
void embed_shard_index_unlock(embed_shard *s);
/* Stops the refresher and releases the claims of inputs not ended (a signal,
 * a broken batch, inputs claimed ahead). */
void embed_shard_close(embed_shard **s);

#endif
