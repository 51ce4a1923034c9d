/* cli.h: small helpers shared by the subcommands of the `ringvit` command, so
 * every subcommand reports usage errors, parses numbers, logs and prints JSON the
 * same way. Only apps/ includes this; the library never prints (see rv_status.h).
 *
 * Conventions every subcommand follows:
 *   - exit codes: RV_EXIT_OK (0), RV_EXIT_FAIL (1, runtime failure),
 *     RV_EXIT_USAGE (2, bad command line);
 *   - every message to stderr starts with "ringvit: ";
 *   - a usage error names the command and ends "; see 'ringvit CMD --help'";
 *   - results go to stdout (a table, or one JSON object with --json), everything
 *     else to stderr.
 * The parse helpers print their own message and return RV_EXIT_USAGE on error,
 * so a caller writes `if ((rc = cli_parse_int(...)) != 0) return rc;`. */
#ifndef RV_CLI_H
#define RV_CLI_H

#include <stdint.h>

#include <jansson.h>

#include "rv_backend.h"
#include "rv_comm.h"
#include "rv_status.h"

#define RV_CLI_PROG "ringvit"

enum {
    RV_EXIT_OK = 0,
    RV_EXIT_FAIL = 1,  /* runtime failure: I/O, backend, bad input file */
    RV_EXIT_USAGE = 2, /* the command line was wrong */
};

/* "ringvit: <message>" on stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "ringvit: <cmd>: <message>; see 'ringvit <cmd> --help'" on stderr; returns
 * RV_EXIT_USAGE. cmd is the full command ("bench attention"); NULL or "" for the
 * top level. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Usage error for an argument the command does not know ("unknown flag '--x'",
 * "unknown argument 'x'"); returns RV_EXIT_USAGE. */
int cli_unknown_arg(const char *cmd, const char *arg);

/* Reports a failed library call, "ringvit: <what>: <rv_last_error()>" (or the
 * status name when no message was set), and returns RV_EXIT_FAIL. */
int cli_fail(rv_status s, const char *what);

/* Whether device computes at precision p here (rv_precision_check), before any
 * work: 0, or "ringvit: <cmd>: precision bf16: <why>" and RV_EXIT_FAIL. */
int cli_check_precision(const char *cmd, const char *device, int p);

/* 1 when arg is "-h" or "--help". */
int cli_is_help(const char *arg);

/* Parse text as a whole base-10 number within [min, max]; on error print
 * "ringvit: <cmd>: <flag> wants an integer in [min, max], got 'text'; see ..."
 * and return RV_EXIT_USAGE, else store it and return 0. */
int cli_parse_int(const char *cmd, const char *flag, const char *text, int min,
                     int max, int *out);
int cli_parse_i64(const char *cmd, const char *flag, const char *text, int64_t min,
                     int64_t max, int64_t *out);
/* As above for a finite floating-point number (no NaN, no inf). */
int cli_parse_double(const char *cmd, const char *flag, const char *text,
                        double min, double max, double *out);
int cli_parse_float(const char *cmd, const char *flag, const char *text, float min,
                       float max, float *out);

/* Log sink for rv_log_set: one line per message on stderr, "ringvit: warning: ..."
 * (user is unused). */
void cli_log_stderr(rv_log_level level, const char *msg, void *user);

/* Installs cli_log_stderr at the level named by the environment variable
 * RINGVIT_LOG (error, warn, info, debug; default info), raised or lowered by
 * verbosity (+1 per -v, -1 for -q). */
void cli_log_init(int verbosity);

/* Compute threads per rank: local ranks (threads of this process) share
 * `threads` (<= 0: every core); an MPI rank gets `threads` when given, else the
 * machine's cores over the ranks on it (OpenMPI and MPICH say how many). At
 * least 1. */
int cli_threads_per_rank(int threads, int ranks, int mpi);
/* The most --threads a command takes: beyond the largest machines' hardware
 * threads, OpenMP teams only slow each other down. */
#define RV_CLI_MAX_THREADS 1024
/* --max-tokens by default (embed, tokens): 2^24, above the ~13 million tokens of a
 * 24-hour recording at the default settings (about 150 tokens a second). */
#define RV_CLI_MAX_TOKENS (INT64_C(1) << 24)
/* --max-frames by default (frames): 2^20, 9.7 hours at 30 fps. */
#define RV_CLI_MAX_FRAMES (INT64_C(1) << 20)

/* The compute backend of a rank: cpu with `threads` threads, or with cuda the
 * GPU rank % (GPUs of this process); RV_ERR_UNSUPPORTED naming the reason in a
 * build without CUDA or on a machine without a GPU. */
rv_status cli_backend_create(int cuda, int threads, int rank, rv_backend **be);

/* RV_OK when the backend of --device (cuda or not) can be created here, else its
 * error: the commands check before any work. */
rv_status cli_device_check(int cuda);

/* The move of a local run's communicator: device copies with cuda, else memcpy. */
rv_comm_copy_fn cli_device_copy(int cuda);

/* Installs handler for SIGINT and SIGTERM (SA_RESTART), the commands' graceful
 * stop: the handler notes the first signal and stops at once on the second. */
void cli_on_stop_signals(void (*handler)(int sig));

/* Writes root as indented JSON plus a newline to stdout and flushes; does not
 * take the reference. Returns RV_EXIT_OK, or RV_EXIT_FAIL after a message. */
int cli_json_print(const json_t *root);

/* A path (or any text) as a JSON string: itself where it is UTF-8, else with each
 * byte that is not part of a UTF-8 character written as \xNN (a file name on Linux
 * is any bytes; JSON and safetensors metadata hold UTF-8 only). Never NULL but when
 * out of memory. cli_utf8_text: the same text as a malloc'd C string. */
json_t *cli_json_path(const char *path);
char *cli_utf8_text(const char *text);

#endif
