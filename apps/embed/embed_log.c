/* embed_log.c: what `ringvit embed` tells about its inputs, all from rank 0:
 *   - the JSON-lines log (DIR/embed-log.jsonl, appended): one object per input,
 *     {"time", "path", "output", "status": ok|failed|skipped, "error", "seconds",
 *     "tokens", "group"[, "note"]}, in the order inputs finish, each written
 *     with one write(2), so a run killed at any moment leaves whole lines;
 *   - standard error: when it is a terminal, a progress line redrawn in place
 *     twice a second (stage, recording seconds done of total, tokens, rate, ETA),
 *     then one line per input; otherwise the line per input and, once an input
 *     has taken --progress seconds, a heartbeat line at most every --progress
 *     seconds (which input of how many, its stage, tokens made of all, elapsed),
 *     so a long recording in a batch log is not silent; nothing but errors with
 *     --quiet;
 *   - standard output with --json: one JSON object per input and line;
 *   - the index (--out-dir: DIR/index.jsonl), written at the end from the
 *     outcomes: one line per input whose output is complete (with --shard also
 *     those other jobs wrote, embed_report_complete). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "embed.h"
#include "out_path.h"
#include "rv_clock.h"

struct embed_report {
    const embed_settings *set;
    int log_fd;               /* -1: no log */
    char *log_path;
    char log_error[320];      /* the first failed log write ("" none): the run fails */
    int progress;             /* redraw a progress line (terminal, not quiet) */
    double beat_s;            /* else a heartbeat line this often (0: none) */
    double last_beat;         /* when the last heartbeat line was printed */
    int nfiles;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int thread_on, quit;
    /* the input in progress (under mu) */
    int index;
    char name[256];
    char stage[24];
    double total_s;
    int64_t seq;
    double t_stage;
    int line_shown;
    double flops;             /* the forward's FLOPs (encode stage), 0 unknown */
    double rate;              /* FLOP/s of the last encode, for its ETA; 0 none yet */
    atomic_llong done;        /* tokens made so far in this input */
    /* Each input's outcome, for the index (nfiles, indexed as the inputs). */
    struct outcome {
        double started;        /* its first stage (monotonic s; 0: not yet) */
        const embed_input *in; /* NULL: not handled */
        embed_status status;
        double recording_s;
        int64_t tokens;
        int other;             /* handled by another job (--shard): read its output */
    } *outcomes;
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

/* Redraws the progress line (mu held). */
static void draw(embed_report *r)
{
    if (!r->progress || !r->stage[0])
        return;
    double el = rv_clock_s() - r->t_stage;
    long long done = atomic_load(&r->done);
    char line[512], eta[32], elapsed[32];
    clock_text(el, elapsed, sizeof elapsed);
    int n = snprintf(line, sizeof line, "[%d/%d] %s: %s", r->index + 1, r->nfiles, r->name,
                     r->stage);
    if (strcmp(r->stage, "tokenize") == 0 && r->seq > 0) {
        double frac = (double)done / (double)r->seq;
        if (frac > 1)
            frac = 1;
        double rate = el > 0 ? done / el : 0;
        clock_text(rate > 0 ? (r->seq - done) / rate : NAN, eta, sizeof eta);
        snprintf(line + n, sizeof line - (size_t)n,
                 "  %.0f/%.0f s  %lld/%lld tokens  %.0f tokens/s  ETA %s", frac * r->total_s,
                 r->total_s, done, (long long)r->seq, rate, eta);
    } else if (strcmp(r->stage, "encode") == 0 && r->flops > 0 && r->rate > 0) {
        /* The forward reports nothing until it ends: the ETA comes from the
         * rate of the previous input's. */
        clock_text(r->flops / r->rate - el, eta, sizeof eta);
        snprintf(line + n, sizeof line - (size_t)n, "  %.0f s recording  %lld tokens  %s  ETA %s",
                 r->total_s, (long long)r->seq, elapsed, eta);
    } else if (r->seq > 0) {
        snprintf(line + n, sizeof line - (size_t)n, "  %.0f s recording  %lld tokens  %s",
                 r->total_s, (long long)r->seq, elapsed);
    } else {
        snprintf(line + n, sizeof line - (size_t)n, "  %s", elapsed);
    }
    fprintf(stderr, "\r\033[K%s", line);
    fflush(stderr);
    r->line_shown = 1;
}

/* A heartbeat line, when stderr is not a terminal (mu held): once the input in
 * progress has taken beat_s, then at most every beat_s. */
static void beat(embed_report *r)
{
    const double now = rv_clock_s();
    if (r->beat_s <= 0 || !r->stage[0] || r->index < 0 || r->index >= r->nfiles)
        return;
    const double started = r->outcomes[r->index].started;
    if (now - started < r->beat_s || now - r->last_beat < r->beat_s)
        return;
    char elapsed[32], stage[32], tokens[96] = "";
    clock_text(now - started, elapsed, sizeof elapsed);
    clock_text(now - r->t_stage, stage, sizeof stage);
    long long done = atomic_load(&r->done);
    if (r->seq > 0 && strcmp(r->stage, "tokenize") == 0)
        snprintf(tokens, sizeof tokens, ", %lld/%lld tokens, %.0f s of recording",
                 done < r->seq ? done : (long long)r->seq, (long long)r->seq, r->total_s);
    else if (r->seq > 0)
        snprintf(tokens, sizeof tokens, ", %lld tokens, %.0f s of recording", (long long)r->seq,
                 r->total_s);
    fprintf(stderr, RV_CLI_PROG ": embed: progress [%d/%d] %s: %s for %s%s, %s elapsed\n",
            r->index + 1, r->nfiles, r->name, r->stage, stage, tokens, elapsed);
    fflush(stderr);
    r->last_beat = now;
}

static void clear_line(embed_report *r)
{
    if (r->line_shown) {
        fputs("\r\033[K", stderr);
        r->line_shown = 0;
    }
}

static void *progress_main(void *arg)
{
    embed_report *r = arg;
    pthread_mutex_lock(&r->mu);
    while (!r->quit) {
        struct timespec t = rv_clock_realtime_after(0.5);
        pthread_cond_timedwait(&r->cv, &r->mu, &t);
        if (!r->quit && r->progress)
            draw(r);
        else if (!r->quit)
            beat(r);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

rv_status embed_report_open(const embed_settings *set, const char *log_path, int nfiles,
                            embed_report **out)
{
    embed_report *r = calloc(1, sizeof *r);
    *out = NULL;
    if (!r)
        return rv_fail(RV_ERR_NOMEM, "embed: out of memory");
    r->set = set;
    r->nfiles = nfiles;
    r->log_fd = -1;
    atomic_init(&r->done, 0);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    if (log_path) {
        rv_status st = out_open_log(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644,
                                       &r->log_fd);
        if (st == RV_OK && !(r->log_path = strdup(log_path)))
            st = rv_fail(RV_ERR_NOMEM, "embed: out of memory");
        if (st != RV_OK) {
            embed_report_close(&r);
            return st;
        }
    }
    if (!(r->outcomes = calloc((size_t)(nfiles > 0 ? nfiles : 1), sizeof *r->outcomes))) {
        embed_report_close(&r);
        return rv_fail(RV_ERR_NOMEM, "embed: out of memory");
    }
    r->progress = !set->quiet && isatty(STDERR_FILENO);
    r->beat_s = !set->quiet && !r->progress ? set->progress_s : 0;
    if ((r->progress || r->beat_s > 0) &&
        pthread_create(&r->thread, NULL, progress_main, r) == 0)
        r->thread_on = 1;
    *out = r;
    return RV_OK;
}

void embed_report_stage(embed_report *r, int index, const char *path, const char *stage,
                        double total_s, int64_t tokens)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    if (index != r->index || strcmp(stage, "probe") == 0)
        atomic_store(&r->done, 0);
    if (index >= 0 && index < r->nfiles && r->outcomes[index].started == 0)
        r->outcomes[index].started = rv_clock_s();
    r->index = index;
    const char *base = strrchr(path, '/');
    snprintf(r->name, sizeof r->name, "%s", base ? base + 1 : path);
    snprintf(r->stage, sizeof r->stage, "%s", stage);
    r->total_s = total_s;
    r->seq = tokens;
    r->t_stage = rv_clock_s();
    draw(r);
    pthread_mutex_unlock(&r->mu);
}

void embed_report_plan(embed_report *r, const char *path, int64_t tokens, int64_t video,
                       int64_t audio, double seconds, double flops)
{
    if (!r || r->set->quiet)
        return;
    char eta[96] = "";
    pthread_mutex_lock(&r->mu);
    const double rate = r->rate;
    pthread_mutex_unlock(&r->mu);
    if (flops > 0 && rate > 0) {
        char when[32];
        clock_text(flops / rate, when, sizeof when);
        snprintf(eta, sizeof eta, "; about %s to encode at the last input's rate", when);
    }
    char cost[192] = "";
    if (flops > 0)
        snprintf(cost, sizeof cost, ", %.1f TFLOP to encode%s", flops * 1e-12, eta);
    embed_report_message(r, "embed: %s: %lld tokens (%lld video, %lld audio) for %.0f s of "
                         "recording%s",
                         path, (long long)tokens, (long long)video, (long long)audio, seconds,
                         cost);
}

void embed_report_flops(embed_report *r, double flops)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->flops = flops;
    pthread_mutex_unlock(&r->mu);
}

void embed_report_tokens(embed_report *r, int64_t n)
{
    if (r)
        atomic_fetch_add(&r->done, (long long)n);
}

void embed_report_message(embed_report *r, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r)
        pthread_mutex_lock(&r->mu);
    if (r)
        clear_line(r);
    fprintf(stderr, RV_CLI_PROG ": %s\n", msg);
    fflush(stderr);
    if (r)
        pthread_mutex_unlock(&r->mu);
}

static const char *status_name(embed_status s)
{
    return s == EMBED_OK ? "ok" : s == EMBED_SKIPPED ? "skipped" : "failed";
}

static void log_line(embed_report *r, const embed_input *in, const embed_result *res)
{
    if (r->log_fd < 0)
        return;
    char when[32];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_t *j = json_object();
    json_object_set_new(j, "time", json_string(when));
    json_object_set_new(j, "path", cli_json_path(in->path));
    json_object_set_new(j, "output", cli_json_path(in->output));
    json_object_set_new(j, "status", json_string(status_name(res->status)));
    json_object_set_new(j, "error", res->status == EMBED_FAILED ? cli_json_path(res->error) : json_null());
    json_object_set_new(j, "seconds", json_real(res->seconds));
    json_object_set_new(j, "tokens", json_integer(res->tokens));
    json_object_set_new(j, "group", json_integer(res->group));
    if (in->note)
        json_object_set_new(j, "note", cli_json_path(in->note));
    char *text = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6) | JSON_ENSURE_ASCII);
    json_decref(j);
    if (!text)
        return;
    size_t n = strlen(text);
    char *line = malloc(n + 2);
    if (line) {
        memcpy(line, text, n);
        line[n] = '\n';
        /* One write: the line lands whole or not at all. */
        ssize_t put = write(r->log_fd, line, n + 1);
        if (put != (ssize_t)(n + 1) && !r->log_error[0]) {
            snprintf(r->log_error, sizeof r->log_error, "writing the log %s failed: %s",
                     r->log_path, put < 0 ? strerror(errno) : "short write (disk full?)");
            embed_report_message(r, "embed: %s", r->log_error);
        }
        free(line);
    }
    free(text);
}

static void json_line(embed_report *r, const embed_input *in, const embed_result *res)
{
    const embed_settings *s = r->set;
    json_t *j = json_object(), *st = json_object();
    json_object_set_new(j, "path", cli_json_path(in->path));
    json_object_set_new(j, "output", cli_json_path(in->output));
    json_object_set_new(j, "status", json_string(status_name(res->status)));
    json_object_set_new(j, "error", res->status == EMBED_FAILED ? cli_json_path(res->error) : json_null());
    json_object_set_new(j, "seconds", json_real(res->seconds));
    json_object_set_new(j, "tokens", json_integer(res->tokens));
    json_object_set_new(j, "video_tokens", json_integer(res->video_tokens));
    json_object_set_new(j, "audio_tokens", json_integer(res->audio_tokens));
    json_object_set_new(j, "recording_s", json_real(res->recording_s));
    json_object_set_new(st, "probe", json_real(res->probe_s));
    json_object_set_new(st, "decode", json_real(res->decode_s));
    json_object_set_new(st, "tokenize", json_real(res->tokenize_s));
    json_object_set_new(st, "encode", json_real(res->encode_s));
    json_object_set_new(st, "write", json_real(res->write_s));
    json_object_set_new(j, "stages_s", st);
    /* How long the encoder stood idle for this input's tokens (--prefetch hides
     * decoding behind the previous input's encode). */
    json_object_set_new(j, "encoder_wait_s", json_real(res->wait_s));
    json_object_set_new(j, "group", json_integer(res->group));
    json_object_set_new(j, "tokens_per_s",
                        res->seconds > 0 && res->status == EMBED_OK
                            ? json_real(res->tokens / res->seconds) : json_null());
    json_object_set_new(j, "encode_gflops_per_s",
                        res->encode_s > 0 && res->flops > 0
                            ? json_real(res->flops / res->encode_s * 1e-9) : json_null());
    json_object_set_new(j, "rank_peak_mb", json_real(res->rank_mb));
    json_object_set_new(j, "peak_rss_mb", json_real(res->rss_mb));
    json_object_set_new(j, "cp", json_integer(s->ranks));
    json_object_set_new(j, "groups", json_integer(s->world / s->ranks));
    json_object_set_new(j, "strategy", json_string(rv_cp_strategy_name(s->opts.strategy)));
    json_object_set_new(j, "model", json_string(s->model_name));
    json_object_set_new(j, "model_hash", json_string(s->model_hash));
    if (in->note)
        json_object_set_new(j, "note", cli_json_path(in->note));
    char *text = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(j);
    if (text) {
        fputs(text, stdout);
        fputc('\n', stdout);
        fflush(stdout);
        free(text);
    }
}

void embed_report_done(embed_report *r, int index, const embed_input *in,
                       const embed_result *res)
{
    if (!r)
        return;
    if (index >= 0 && index < r->nfiles) {
        pthread_mutex_lock(&r->mu);
        struct outcome *o = &r->outcomes[index];
        *o = (struct outcome){o->started, in, res->status, res->recording_s, res->tokens, 0};
        pthread_mutex_unlock(&r->mu);
    }
    log_line(r, in, res);
    pthread_mutex_lock(&r->mu);
    clear_line(r);
    r->stage[0] = '\0';
    r->flops = 0;
    if (res->status == EMBED_OK && res->encode_s > 0 && res->flops > 0)
        r->rate = res->flops / res->encode_s;
    if (res->status == EMBED_FAILED) {
        fprintf(stderr, RV_CLI_PROG ": embed: %s: %s\n", in->path, res->error);
    } else if (!r->set->quiet && res->status == EMBED_SKIPPED) {
        fprintf(stderr, RV_CLI_PROG ": skipped %s: %s is complete (--resume)\n", in->path,
                in->output);
    } else if (!r->set->quiet) {
        fprintf(stderr, RV_CLI_PROG ": embedded %s: %lld tokens, %.1f s -> %s%s%s\n", in->path,
                (long long)res->tokens, res->seconds, in->output, in->note ? " (" : "",
                in->note ? "another input has its name)" : "");
    }
    fflush(stderr);
    pthread_mutex_unlock(&r->mu);
    if (r->set->json)
        json_line(r, in, res);
}

const char *embed_report_log_error(const embed_report *r)
{
    return r && r->log_error[0] ? r->log_error : NULL;
}

rv_status embed_report_index(const embed_report *r, const char *path)
{
    char target[4096], tmp[4200];
    rv_status st;
    if (!r)
        return RV_OK;
    if ((st = out_target_path(path, target, sizeof target)) != RV_OK)
        return st;
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", target, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        st = rv_fail(RV_ERR_IO, "cannot create the index %s: %s", tmp, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        return st;
    }
    snprintf(embed_tmp_path, sizeof embed_tmp_path, "%s", tmp); /* for a second signal */
    int err = 0;
    for (int i = 0; i < r->nfiles && !err; i++) {
        const struct outcome *o = &r->outcomes[i];
        if (!o->in || (o->status != EMBED_OK && o->status != EMBED_SKIPPED))
            continue;
        double dur = o->recording_s;
        int64_t tokens = o->tokens;
        if (o->status == EMBED_SKIPPED || o->other) /* not decoded here: what its output says */
            embed_output_info(o->in->output, &dur, &tokens);
        json_t *j = json_object();
        json_object_set_new(j, "path", cli_json_path(o->in->path));
        json_object_set_new(j, "output", cli_json_path(o->in->output));
        json_object_set_new(j, "duration_s", isfinite(dur) ? json_real(dur) : json_null());
        json_object_set_new(j, "tokens", tokens >= 0 ? json_integer(tokens) : json_null());
        json_object_set_new(j, "model_hash", json_string(r->set->model_hash));
        json_object_set_new(j, "status", json_string(status_name(o->status)));
        char *text = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17) | JSON_ENSURE_ASCII |
                                       JSON_PRESERVE_ORDER);
        json_decref(j);
        if (!text)
            err = ENOMEM;
        else if (fprintf(f, "%s\n", text) < 0)
            err = errno;
        free(text);
    }
    if (!err && (fflush(f) != 0 || fsync(fileno(f)) != 0))
        err = errno;
    if (fclose(f) != 0 && !err)
        err = errno;
    if (err)
        st = rv_fail(RV_ERR_IO, "writing the index %s failed: %s", tmp, strerror(err));
    else if (rename(tmp, target) != 0)
        st = rv_fail(RV_ERR_IO, "cannot rename %s onto %s: %s", tmp, target, strerror(errno));
    if (st != RV_OK)
        unlink(tmp);
    embed_tmp_path[0] = '\0';
    return st;
}

void embed_report_complete(embed_report *r, int index, const embed_input *in,
                           embed_status status)
{
    if (!r || index < 0 || index >= r->nfiles)
        return;
    pthread_mutex_lock(&r->mu);
    struct outcome *o = &r->outcomes[index];
    if (!o->in)
        *o = (struct outcome){o->started, in, status, NAN, -1, 1};
    pthread_mutex_unlock(&r->mu);
}

void embed_report_close(embed_report **rp)
{
    embed_report *r = rp ? *rp : NULL;
    if (!r)
        return;
    if (r->thread_on) {
        pthread_mutex_lock(&r->mu);
        r->quit = 1;
        pthread_cond_signal(&r->cv);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->thread, NULL);
    }
    pthread_mutex_lock(&r->mu);
    clear_line(r);
    pthread_mutex_unlock(&r->mu);
    if (r->log_fd >= 0)
        close(r->log_fd);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r->log_path);
    free(r->outcomes);
    free(r);
    *rp = NULL;
}
