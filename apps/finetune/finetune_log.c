/* finetune_log.c: what `ringvit finetune` tells, all from world rank 0:
 *   - the JSON-lines log (--log, default OUT.log.jsonl): one object per step,
 *     {"step", "epoch", "loss", "lr", "grad_norm", "tokens", "tokens_per_s",
 *     "seconds"[, "accuracy"]}, one per evaluation {"eval": "val", "step",
 *     "epoch", "loss", ["accuracy",] "count", "seconds"}, and events
 *     {"event": "start"|"resume"|"checkpoint", "step"[, "path"]}; each line is one
 *     write(2), so a killed run leaves whole lines. A resumed run appends.
 *   - standard error: on a terminal one line redrawn after every step (step/total,
 *     loss, tokens/s, ETA); otherwise a line every 10 steps or 10 s; evaluations
 *     always get a line; nothing but errors with --quiet. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "finetune.h"
#include "out_path.h"
#include "rv_clock.h"

struct ft_report {
    const ft_settings *set;
    int fd;            /* -1: no log */
    int tty;           /* stderr is a terminal: redraw one line */
    int quiet;
    int line_shown;    /* a progress line waits to be cleared */
    double t_start, t_last_line;
    int64_t steps_run; /* steps in this run */
    double step_s;     /* seconds of those steps */
    int64_t last_line_step;
    char log_error[320]; /* the first failed log write ("" none): the run fails */
};

static void clock_text(double s, char *buf, size_t n)
{
    if (!isfinite(s) || s < 0) {
        snprintf(buf, n, "?");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

static void log_json(ft_report *r, json_t *j)
{
    if (!j)
        return;
    char *text = r->fd >= 0 ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(j);
    if (!text)
        return;
    size_t n = strlen(text);
    char *line = malloc(n + 2);
    if (line) {
        memcpy(line, text, n);
        line[n] = '\n';
        ssize_t w = write(r->fd, line, n + 1);
        if (w != (ssize_t)(n + 1) && !r->log_error[0]) {
            snprintf(r->log_error, sizeof r->log_error, "writing the log failed: %s",
                     w < 0 ? strerror(errno) : "short write (disk full?)");
            ft_report_message(r, "finetune: %s", r->log_error);
        }
        free(line);
    }
    free(text);
}

rv_status ft_report_open(const ft_settings *set, const char *log_path, int append,
                         ft_report **out)
{
    ft_report *r = calloc(1, sizeof *r);
    *out = NULL;
    if (!r)
        return rv_fail(RV_ERR_NOMEM, "finetune: out of memory");
    r->set = set;
    r->fd = -1;
    r->quiet = set->quiet;
    r->tty = !set->quiet && isatty(STDERR_FILENO);
    r->t_start = r->t_last_line = rv_clock_s();
    r->last_line_step = set->step0;
    if (log_path) {
        rv_status st = out_open_log(
            log_path, O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0666, &r->fd);
        if (st != RV_OK) {
            free(r);
            return st;
        }
    }
    *out = r;
    return RV_OK;
}

static void clear_line(ft_report *r)
{
    if (r->line_shown) {
        fputs("\r\033[K", stderr);
        r->line_shown = 0;
    }
}

void ft_report_step(ft_report *r, const ft_step_rec *s)
{
    if (!r)
        return;
    const double tps = s->seconds > 0 ? (double)s->tokens / s->seconds : 0;
    json_t *j = json_pack("{s:I, s:f, s:f, s:f, s:f, s:I, s:f, s:f}", "step", (json_int_t)s->step,
                          "epoch", s->epoch, "loss", s->loss, "lr", s->lr, "grad_norm",
                          s->grad_norm, "tokens", (json_int_t)s->tokens, "tokens_per_s", tps,
                          "seconds", s->seconds);
    if (j && s->accuracy >= 0)
        json_object_set_new(j, "accuracy", json_real(s->accuracy));
    log_json(r, j);
    r->steps_run++;
    r->step_s += s->seconds;
    if (r->quiet)
        return;
    const int64_t total = r->set->stop_at > 0 && r->set->stop_at < r->set->steps
                              ? r->set->stop_at : r->set->steps;
    const double per = r->step_s / (double)r->steps_run;
    char eta[32];
    clock_text(per * (double)(total - s->step), eta, sizeof eta);
    char line[256];
    snprintf(line, sizeof line, "finetune: step %" PRId64 "/%" PRId64 " (epoch %.2f)  loss %.4f  "
             "lr %.2e  %.0f tokens/s  ETA %s", s->step, total, s->epoch, s->loss, s->lr, tps, eta);
    const double t = rv_clock_s();
    if (r->tty) {
        fprintf(stderr, "\r\033[K" RV_CLI_PROG ": %s", line);
        r->line_shown = 1;
        if (s->step == total) {
            fputc('\n', stderr);
            r->line_shown = 0;
        }
    } else if (s->step - r->last_line_step >= 10 || t - r->t_last_line >= 10 ||
               s->step == total || s->step == r->set->step0 + 1) {
        fprintf(stderr, RV_CLI_PROG ": %s\n", line);
        r->t_last_line = t;
        r->last_line_step = s->step;
    }
    fflush(stderr);
}

void ft_report_eval(ft_report *r, int64_t step, double epoch, double loss, double acc,
                    int64_t count, double seconds)
{
    if (!r)
        return;
    json_t *j = json_pack("{s:s, s:I, s:f, s:f, s:I, s:f}", "eval", "val", "step",
                          (json_int_t)step, "epoch", epoch, "loss", loss, "count",
                          (json_int_t)count, "seconds", seconds);
    if (j && acc >= 0)
        json_object_set_new(j, "accuracy", json_real(acc));
    log_json(r, j);
    if (r->quiet)
        return;
    clear_line(r);
    if (acc >= 0)
        fprintf(stderr, RV_CLI_PROG ": finetune: eval at step %" PRId64 " (epoch %.2f): val loss "
                "%.4f, accuracy %.4f (%" PRId64 " recordings)\n", step, epoch, loss, acc, count);
    else
        fprintf(stderr, RV_CLI_PROG ": finetune: eval at step %" PRId64 " (epoch %.2f): val "
                "reconstruction loss %.4f (%" PRId64 " recordings)\n", step, epoch, loss, count);
    fflush(stderr);
}

void ft_report_event(ft_report *r, const char *event, int64_t step, const char *path)
{
    if (!r)
        return;
    json_t *j = json_pack("{s:s, s:I}", "event", event, "step", (json_int_t)step);
    if (j && path)
        json_object_set_new(j, "path", cli_json_path(path));
    log_json(r, j);
}

void ft_report_message(ft_report *r, const char *fmt, ...)
{
    if (r)
        clear_line(r);
    va_list ap;
    va_start(ap, fmt);
    fputs(RV_CLI_PROG ": ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
}

const char *ft_report_log_error(const ft_report *r)
{
    return r && r->log_error[0] ? r->log_error : NULL;
}

void ft_report_close(ft_report **p)
{
    if (!p || !*p)
        return;
    ft_report *r = *p;
    clear_line(r);
    if (r->fd >= 0)
        close(r->fd);
    free(r);
    *p = NULL;
}
