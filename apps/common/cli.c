/* cli.c: the shared command-line helpers of cli.h: error and usage messages,
 * checked number parsing that names the offending flag, the stderr log sink and
 * JSON output. */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "rv_backend.h"
#include "rv_cuda.h"
#include "rv_ingest.h"

void cli_error(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, RV_CLI_PROG ": %s\n", msg);
}

/* The "see 'ringvit CMD --help'" tail, with or without a command. */
static void print_usage_error(const char *cmd, const char *msg)
{
    if (cmd && cmd[0])
        fprintf(stderr, RV_CLI_PROG ": %s: %s; see '" RV_CLI_PROG " %s --help'\n", cmd,
                msg, cmd);
    else
        fprintf(stderr, RV_CLI_PROG ": %s; see '" RV_CLI_PROG " --help'\n", msg);
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    print_usage_error(cmd, msg);
    return RV_EXIT_USAGE;
}

int cli_unknown_arg(const char *cmd, const char *arg)
{
    if (arg[0] == '-' && arg[1] != '\0')
        return cli_usage_error(cmd, "unknown flag '%s'", arg);
    return cli_usage_error(cmd, "unknown argument '%s'", arg);
}

int cli_fail(rv_status s, const char *what)
{
    const char *why = rv_last_error();
    if (!why || !why[0])
        why = rv_status_name(s);
    if (what && what[0])
        fprintf(stderr, RV_CLI_PROG ": %s: %s\n", what, why);
    else
        fprintf(stderr, RV_CLI_PROG ": %s\n", why);
    return RV_EXIT_FAIL;
}

int cli_check_precision(const char *cmd, const char *device, int p)
{
    rv_status st = rv_precision_check(device, (rv_precision)p);
    return st == RV_OK ? 0 : cli_fail(st, cmd);
}

int cli_is_help(const char *arg)
{
    return arg && (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0);
}

/* Flag name without a "=value" tail, for messages. */
static void flag_name(const char *flag, char *buf, size_t size)
{
    size_t n = strcspn(flag, "=");
    if (n >= size)
        n = size - 1;
    memcpy(buf, flag, n);
    buf[n] = '\0';
}

int cli_parse_i64(const char *cmd, const char *flag, const char *text, int64_t min,
                     int64_t max, int64_t *out)
{
    char name[128];
    flag_name(flag, name, sizeof name);
    char *end = NULL;
    errno = 0;
    long long v = text ? strtoll(text, &end, 10) : 0;
    int ok = text && text[0] && end && *end == '\0' && errno == 0;
    if (!ok || v < min || v > max)
        return cli_usage_error(cmd, "%s wants an integer in [%" PRId64 ", %" PRId64
                                  "], got '%s'",
                                  name, min, max, text ? text : "");
    *out = (int64_t)v;
    return 0;
}

int cli_parse_int(const char *cmd, const char *flag, const char *text, int min,
                     int max, int *out)
{
    int64_t v = 0;
    int rc = cli_parse_i64(cmd, flag, text, min, max, &v);
    if (rc == 0)
        *out = (int)v;
    return rc;
}

int cli_parse_double(const char *cmd, const char *flag, const char *text,
                        double min, double max, double *out)
{
    char name[128];
    flag_name(flag, name, sizeof name);
    char *end = NULL;
    errno = 0;
    double v = text ? strtod(text, &end) : 0.0;
    int ok = text && text[0] && end && *end == '\0' && errno == 0 && isfinite(v);
    if (!ok || v < min || v > max)
        return cli_usage_error(cmd, "%s wants a number in [%g, %g], got '%s'", name,
                                  min, max, text ? text : "");
    *out = v;
    return 0;
}

int cli_parse_float(const char *cmd, const char *flag, const char *text, float min,
                       float max, float *out)
{
    double v = 0.0;
    int rc = cli_parse_double(cmd, flag, text, min, max, &v);
    if (rc == 0)
        *out = (float)v;
    return rc;
}

void cli_log_stderr(rv_log_level level, const char *msg, void *user)
{
    (void)user;
    const char *tag = "";
    switch (level) {
    case RV_LOG_ERROR: tag = "error: "; break;
    case RV_LOG_WARN: tag = "warning: "; break;
    case RV_LOG_INFO: tag = ""; break;
    case RV_LOG_DEBUG: tag = "debug: "; break;
    }
    /* One write per message, so lines from several threads do not interleave. */
    char line[2304];
    size_t n = strlen(msg);
    int nl = n > 0 && msg[n - 1] == '\n';
    snprintf(line, sizeof line, RV_CLI_PROG ": %s%s%s", tag, msg, nl ? "" : "\n");
    fputs(line, stderr);
}

void cli_log_init(int verbosity)
{
    int level = RV_LOG_INFO;
    const char *env = getenv("RINGVIT_LOG");
    if (env && env[0]) {
        if (strcasecmp(env, "error") == 0)
            level = RV_LOG_ERROR;
        else if (strcasecmp(env, "warn") == 0 || strcasecmp(env, "warning") == 0)
            level = RV_LOG_WARN;
        else if (strcasecmp(env, "info") == 0)
            level = RV_LOG_INFO;
        else if (strcasecmp(env, "debug") == 0)
            level = RV_LOG_DEBUG;
        else
            cli_error("warning: RINGVIT_LOG='%s' is not error, warn, info or debug; "
                         "using info",
                         env);
    }
    level += verbosity;
    if (level < RV_LOG_ERROR)
        level = RV_LOG_ERROR;
    if (level > RV_LOG_DEBUG)
        level = RV_LOG_DEBUG;
    rv_log_set(cli_log_stderr, NULL, (rv_log_level)level);
}

int cli_json_print(const json_t *root)
{
    if (json_dumpf(root, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(9)) != 0 ||
        fputc('\n', stdout) == EOF || fflush(stdout) != 0) {
        cli_error("could not write JSON to standard output");
        return RV_EXIT_FAIL;
    }
    return RV_EXIT_OK;
}

int cli_threads_per_rank(int threads, int ranks, int mpi)
{
    return rv_cpu_threads_per_rank(threads, ranks, mpi);
}

rv_status cli_backend_create(int cuda, int threads, int rank, rv_backend **be)
{
    return rv_backend_create(cuda ? "cuda" : "cpu", threads, rank, be);
}

rv_status cli_device_check(int cuda)
{
    return rv_backend_check(cuda ? "cuda" : "cpu");
}

rv_comm_copy_fn cli_device_copy(int cuda)
{
    return rv_backend_copy(cuda ? "cuda" : "cpu");
}

void cli_on_stop_signals(void (*handler)(int sig))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

char *cli_utf8_text(const char *text)
{
    return rv_utf8_text(text);
}

json_t *cli_json_path(const char *path)
{
    json_t *j = json_string(path);
    if (j || !path)
        return j;
    char *text = cli_utf8_text(path);
    j = text ? json_string(text) : NULL;
    free(text);
    return j;
}
