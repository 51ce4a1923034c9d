/* embed.h: what the files of `ringvit embed` share. The command is batch policy
 * over the library's embed job (rv_embed.h), which does the work of one input:
 *
 *   cmd_embed.c     flags, help, the model, output names, signals, exit codes
 *   embed_inputs.c  the input list (arguments and --manifest), output names, and
 *                   the output folder's files (stale temporary files, the index's
 *                   facts of a skipped input)
 *   embed_batch.c   one rank's loop: its group's job, the inputs its group claims
 *                   (queued ahead with --prefetch), each run, collected and
 *                   written by the group's rank 0
 *   embed_dispatch.c which group embeds which input: the next unclaimed input to
 *                   the first free group, outcomes to rank 0's report
 *   embed_log.c     the JSON-lines log, progress on standard error, --json
 *   embed_shard.c   --shard I/N: jobs started separately that share --out-dir
 *                   divide the inputs through a claim file per input
 *   embed_signal.c  the stop request (SIGINT/SIGTERM) every part reads
 *
 * The W ranks form W / C groups of C ranks (--ranks W --cp C; under mpiexec W
 * is the process count): data parallel over the inputs, context parallel
 * within a recording. Every rank runs embed_batch_rank with the same
 * embed_batch: the ranks of --backend local are threads sharing it, under
 * --backend mpi or nccl each process has its own copy (the same inputs and
 * settings). Rank 0 of each group writes its outputs; rank 0 of the world
 * hands out the inputs, writes the log and prints; the other ranks compute. */
#ifndef CLI_EMBED_H
#define CLI_EMBED_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>

#include "rv_comm.h"
#include "rv_embed.h"
#include "rv_vit.h"

/* Exit status beyond cli.h's: some inputs failed. */
#define RV_EXIT_SOME_FAILED 3
#define EMBED_LOG_NAME "embed-log.jsonl"
/* The log of job I of N (--shard I/N): the jobs never write one file. */
#define EMBED_SHARD_LOG_FMT "embed-log.shard-%d-of-%d.jsonl"
/* --claim-stale: a claim not refreshed for this many seconds is its dead job's. */
#define EMBED_CLAIM_STALE_S 600.0
/* Under MPI, how long a rank other than 0 waits for rank 0 to end a broken job
 * (rank 0 says why first) before it ends the job itself. */
#define EMBED_ABORT_PAUSE_S 2

/* embed_signal.c: set by the SIGINT/SIGTERM handler: stop after the current stage. */
extern volatile sig_atomic_t embed_stop_signal;
/* The temporary file of the output being written ("" when none), so a second
 * signal, which ends the process at once, can remove it. */
extern char embed_tmp_path[4200];
/* The handler: the first signal asks to stop, the second ends the process at
 * once (removing embed_tmp_path). */
void embed_on_signal(int sig);

typedef struct embed_input {
    char *path;   /* media file (manifest entries resolved against its folder) */
    char *output; /* its output .safetensors */
    char *note;   /* why the output name differs from the input's (NULL) */
} embed_input;

typedef struct embed_settings {
    rv_embed_opts opts;        /* the job's options (rv_embed.h): sampling, the encoder,
                                  the outputs, --prefetch, --timeout */
    const rv_vit_model *model; /* shared read-only by the local ranks */
    const char *model_name;    /* preset name, weights path or model folder */
    int random_weights;        /* 1: a preset's random weights (said in the metadata) */
    char model_hash[17];
    int ranks;                 /* cp size: the ranks of a group */
    int world;                 /* ranks in all (a multiple of ranks) */
    int mpi;                   /* 1: --backend mpi or nccl (one rank per process) */
    int resume;
    int quiet, json;
    double progress_s;         /* --progress: a line every this many s when stderr is not
                                  a terminal (0: none) */
    /* --shard I/N (embed_shard.c): this job's number and the job count (0: no
     * shards), and --claim-stale */
    int shard_index, shard_count;
    double claim_stale_s;
} embed_settings;

/* The index of an --out-dir run, beside its outputs (embed_log.c). */
#define EMBED_INDEX_NAME "index.jsonl"


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

/* ---- embed_inputs.c: the output folder ---------------------------------------- */

/* Removes the temporary files "<out>.tmp.<pid>" that a killed run left beside
 * the outputs in[0..n) (only when process pid is gone). Returns how many. */
int embed_output_clean_stale(const embed_input *in, int n);
/* A complete output's metadata "recording_s" and "tokens" (for the index of an
 * input skipped by --resume): *recording_s NAN and *tokens -1 where absent.
 * Returns 0, or -1 when the file cannot be opened. */
int embed_output_info(const char *path, double *recording_s, int64_t *tokens);
/* 1 when path is a complete output of this run (rv_embed_output_complete). */
int embed_output_complete(const char *path, const embed_settings *set);

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
