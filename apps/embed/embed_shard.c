/* embed_shard.c: `ringvit embed --shard I/N`, jobs started separately (on
 * other machines, sharing --out-dir over NFS) that divide one list of inputs
 * through a claim file per input beside its output, "<output>.claim":
 *   - a job takes an input by creating its claim with O_CREAT | O_EXCL, so
 *     exactly one job wins it; the claim is a JSON line (host, pid, shard,
 *     started, path, output, status "running"|"failed", error);
 *   - job I scans the inputs from floor(I x N_inputs / N) and wraps around, so
 *     the jobs start apart and contend only at the end; an input whose claim
 *     another job holds is left to it, and the scan goes on;
 *   - while the job works on its claims a thread refreshes their mtime every
 *     --claim-stale / 4 s; a claim not refreshed for --claim-stale s belongs to
 *     a job that died: it is renamed aside (rename is atomic: one taker wins),
 *     checked to be the claim judged stale, and claimed anew;
 *   - an input that ends ok (or skipped) has its claim removed, after its
 *     output is in place; one that failed keeps it, rewritten "failed", so the
 *     other jobs of this run do not retry it;
 *   - every job keeps a file of its own in the folder, ".embed-job.HOST.PID",
 *     refreshed with its claims and removed at its end: the jobs alive
 *     together are one run, which began when the first of them did (a job
 *     takes the earliest "run_since" of the live job files it finds, and
 *     writes it in its own, so a job started hours after the first still
 *     joins its run while any job of it lives). Times are the file server's
 *     (the job file's mtime, which NFS sets from the server's clock), so
 *     machines whose clocks differ still agree;
 *   - a complete output or a failed claim written since the run began is
 *     another job's work in this run, left to it; one written before is an
 *     earlier run's: a complete output is skipped with --resume (logged by the
 *     job whose share of the list holds it, so once over the jobs) and redone
 *     without, a failed claim is retried (as a run without shards retries a
 *     failed input).
 * Everything here runs in world rank 0's process: the dispatch asks for the next
 * input and reports outcomes under the batch's lock (embed_dispatch.c). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "embed.h"
#include "rv_clock.h"

#define CLAIM_SUFFIX ".claim"
#define CLAIM_TRIES 4          /* takeovers raced before an input is left */
#define INDEX_LOCK_WAIT_S 10.0 /* how long a job waits for another's index */

struct embed_shard {
    const embed_settings *set;
    const embed_input *in;
    int n;
    int index, count;         /* this job: I of N */
    int start;                /* the first input it looks at: floor(I x n / N) */
    int home_lo, home_hi;     /* its share [lo, hi): the skipped inputs it logs */
    int scanned;              /* inputs looked at so far */
    int left;                 /* left to other jobs */
    char dir[4096];           /* the outputs' folder: claims, job files */
    char host[256];
    char started[32];         /* the job's start, UTC text (in its claims) */
    struct timespec run_since; /* the run's start on the file server's clock */
    int job_fd;               /* the job's own file (-1: none), its clock */
    char job_path[4400];
    unsigned seq;             /* unique names of claims moved aside */
    embed_report *report;
    /* the claims held, and their refresher (under mu) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int thread_on, quit;
    int *fd;                  /* (n) the held claim's descriptor, -1 none */
    unsigned char *taken;     /* (n) handed out by this job */
    char index_lock[4200];    /* held index lock ("" none) */
};

static void claim_path(const embed_shard *s, int i, char *buf, size_t len)
{
    snprintf(buf, len, "%s" CLAIM_SUFFIX, s->in[i].output);
}

static int ts_before(struct timespec a, struct timespec b)
{
    return a.tv_sec < b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec < b.tv_nsec);
}

static double ts_diff(struct timespec a, struct timespec b)
{
    return (double)(a.tv_sec - b.tv_sec) + (a.tv_nsec - b.tv_nsec) * 1e-9;
}

/* Now on the clock of the server holding the folder: the job file's mtime set
 * to now (NFS sets it from the server's clock), the local clock without one. */
static struct timespec folder_now(const embed_shard *s)
{
    struct timespec now;
    struct stat sb;
    clock_gettime(CLOCK_REALTIME, &now);
    if (s->job_fd >= 0 && futimens(s->job_fd, NULL) == 0 && fstat(s->job_fd, &sb) == 0)
        now = sb.st_mtim;
    return now;
}

/* ---- claim files ------------------------------------------------------------------- */

/* The JSON line of a claim of input i (status "running" or "failed"). */
static char *claim_text(const embed_shard *s, int i, const char *status, const char *error)
{
    char when[32], shard[32];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(shard, sizeof shard, "%d/%d", s->index, s->count);
    json_t *j = json_object();
    json_object_set_new(j, "host", json_string(s->host));
    json_object_set_new(j, "pid", json_integer((json_int_t)getpid()));
    json_object_set_new(j, "shard", json_string(shard));
    json_object_set_new(j, "started", json_string(s->started));
    json_object_set_new(j, "time", json_string(when));
    json_object_set_new(j, "path", cli_json_path(s->in[i].path));
    json_object_set_new(j, "output", cli_json_path(s->in[i].output));
    json_object_set_new(j, "status", json_string(status));
    if (error)
        json_object_set_new(j, "error", cli_json_path(error));
    char *text = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_PRESERVE_ORDER);
    json_decref(j);
    return text;
}

static int write_line(int fd, const char *text)
{
    size_t n = strlen(text), done = 0;
    while (done < n) {
        ssize_t w = write(fd, text + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        done += (size_t)w;
    }
    return write(fd, "\n", 1) == 1 ? 0 : -1;
}

/* What a claim says: 1 "failed", 0 otherwise (running, being written, or made
 * by hand); who holds it in who. */
static int claim_failed(const char *path, char *who, size_t len)
{
    int failed = 0;
    snprintf(who, len, "another job");
    json_t *j = json_load_file(path, 0, NULL); /* NULL: gone, empty or being written */
    if (!j)
        return 0;
    const char *st = json_string_value(json_object_get(j, "status"));
    const char *host = json_string_value(json_object_get(j, "host"));
    const char *shard = json_string_value(json_object_get(j, "shard"));
    json_int_t pid = json_integer_value(json_object_get(j, "pid"));
    failed = st && strcmp(st, "failed") == 0;
    if (host)
        snprintf(who, len, "%s pid %lld (shard %s)", host, (long long)pid, shard ? shard : "?");
    json_decref(j);
    return failed;
}

/* 1 while path is still the file fd holds: no other job took it over. */
static int still_ours(const char *path, int fd)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

/* Moves the claim judged stale (seen) aside and removes it; put back when what
 * was moved is not that claim (its job refreshed it, or another job claimed the
 * input anew in between). Either way the caller tries to claim again. */
static void take_over(embed_shard *s, int i, const char *path, const struct stat *seen,
                      const char *who, double age, int failed)
{
    char aside[4600];
    struct stat now;
    snprintf(aside, sizeof aside, "%s.stale.%s.%ld.%u", path, s->host, (long)getpid(), s->seq++);
    if (rename(path, aside) != 0)
        return; /* another job took it first */
    if (stat(aside, &now) != 0 || now.st_dev != seen->st_dev || now.st_ino != seen->st_ino ||
        now.st_mtim.tv_sec != seen->st_mtim.tv_sec || now.st_mtim.tv_nsec != seen->st_mtim.tv_nsec) {
        /* link, not rename: a claim made meanwhile is not replaced */
        if (link(aside, path) != 0 && !s->set->quiet)
            embed_report_message(s->report, "embed: %s: a claim moved aside by mistake could not "
                                 "be put back (%s)", path, strerror(errno));
        unlink(aside);
        return;
    }
    unlink(aside);
    if (s->set->quiet)
        return;
    if (failed)
        embed_report_message(s->report, "embed: %s: retrying it (it failed in an earlier run, "
                             "on %s; %s)", s->in[i].path, who, path);
    else
        embed_report_message(s->report, "embed: %s: taking over the claim %s of %s, silent for "
                             "%.0f s (--claim-stale %g)", s->in[i].path, path, who, age,
                             s->set->claim_stale_s);
}

enum { OUT_NONE = 0, OUT_EARLIER = 1, OUT_THIS_RUN = 2 };

/* Input i's output: not complete, complete before the run began, or since. */
static int output_state(const embed_shard *s, int i)
{
    struct stat sb;
    if (stat(s->in[i].output, &sb) != 0 || !embed_output_complete(s->in[i].output, s->set))
        return OUT_NONE;
    return ts_before(sb.st_mtim, s->run_since) ? OUT_EARLIER : OUT_THIS_RUN;
}

enum { TRY_LEAVE = 0, TRY_TAKE = 1 };

/* Input i for this job: taken (its claim won, or a complete output of its
 * share to skip with --resume) or left to another job. RV_OK, or an error
 * when the claim cannot be written. */
static rv_status try_input(embed_shard *s, int i, int *take)
{
    char path[4200], who[400];
    *take = TRY_LEAVE;
    const int out = output_state(s, i);
    if (out == OUT_THIS_RUN)
        return RV_OK;
    if (out == OUT_EARLIER && s->set->resume) {
        *take = i >= s->home_lo && i < s->home_hi; /* logged once, by its share's job */
        return RV_OK;
    }
    claim_path(s, i, path, sizeof path);
    for (int tries = 0; tries < CLAIM_TRIES; tries++) {
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0) {
            char *text = claim_text(s, i, "running", NULL);
            int bad = !text || write_line(fd, text) != 0;
            int e = errno;
            free(text);
            if (bad) {
                close(fd);
                unlink(path);
                return rv_fail(RV_ERR_IO, "cannot write the claim %s: %s", path,
                               e ? strerror(e) : "out of memory");
            }
            pthread_mutex_lock(&s->mu);
            s->fd[i] = fd;
            pthread_mutex_unlock(&s->mu);
            /* The job that held it may have finished it just before. */
            if (output_state(s, i) == OUT_THIS_RUN) {
                embed_shard_done(s, i, EMBED_SKIPPED, NULL);
                return RV_OK;
            }
            /* A temporary file beside the output is a dead writer's now. */
            embed_output_clean_stale(&s->in[i], 1);
            *take = TRY_TAKE;
            return RV_OK;
        }
        if (errno != EEXIST)
            return rv_fail(RV_ERR_IO, "cannot create the claim %s: %s", path, strerror(errno));
        struct stat sb;
        if (stat(path, &sb) != 0)
            continue; /* released meanwhile: try again */
        const int failed = claim_failed(path, who, sizeof who);
        const double age = ts_diff(folder_now(s), sb.st_mtim);
        if (failed ? !ts_before(sb.st_mtim, s->run_since) : age <= s->set->claim_stale_s)
            return RV_OK; /* another job's, alive or failed in this run */
        take_over(s, i, path, &sb, who, age, failed);
    }
    return RV_OK;
}

rv_status embed_shard_next(embed_shard *s, int *index)
{
    *index = -1;
    while (s->scanned < s->n) {
        const int i = (s->start + s->scanned++) % s->n;
        int take;
        rv_status st = try_input(s, i, &take);
        if (st != RV_OK)
            return st;
        if (take) {
            s->taken[i] = 1;
            *index = i;
            return RV_OK;
        }
        s->left++;
    }
    return RV_OK;
}

void embed_shard_done(embed_shard *s, int index, embed_status status, const char *error)
{
    char path[4200], tmp[4600];
    if (!s || index < 0 || index >= s->n)
        return;
    pthread_mutex_lock(&s->mu);
    const int fd = s->fd[index];
    s->fd[index] = -1;
    pthread_mutex_unlock(&s->mu);
    if (fd < 0)
        return;
    claim_path(s, index, path, sizeof path);
    if (still_ours(path, fd)) {
        if (status != EMBED_FAILED) {
            unlink(path);
        } else {
            /* Rewritten whole, to a temporary name renamed onto it. */
            snprintf(tmp, sizeof tmp, "%s.tmp.%s.%ld", path, s->host, (long)getpid());
            char *text = claim_text(s, index, "failed", error);
            int t = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
            int bad = t < 0 || !text || write_line(t, text) != 0;
            if (t >= 0 && close(t) != 0)
                bad = 1;
            if (bad || rename(tmp, path) != 0) {
                if (t >= 0)
                    unlink(tmp);
                /* It stays "running": stale after --claim-stale, then retried. */
                embed_report_message(s->report, "embed: cannot mark the claim %s failed: %s",
                                     path, strerror(errno));
            }
            free(text);
        }
    }
    close(fd);
}

/* ---- the refresher ------------------------------------------------------------------- */

/* Every --claim-stale / 4 s, the held claims' mtime to now: they stay alive
 * however long an input takes (one encode can take hours). */
static void *refresh_main(void *arg)
{
    embed_shard *s = arg;
    const double period = s->set->claim_stale_s / 4;
    pthread_mutex_lock(&s->mu);
    while (!s->quit) {
        struct timespec t = rv_clock_realtime_after(period);
        pthread_cond_timedwait(&s->cv, &s->mu, &t);
        for (int i = 0; i < s->n && !s->quit; i++)
            if (s->fd[i] >= 0)
                futimens(s->fd[i], NULL); /* a claim taken over meanwhile: harmless */
        if (s->job_fd >= 0 && !s->quit)
            futimens(s->job_fd, NULL);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- the run ------------------------------------------------------------------------ */

#define JOB_PREFIX ".embed-job."

/* The run_since a live job file states; 0 when it states none (being written). */
static int job_run_since(const char *path, struct timespec *t)
{
    json_t *j = json_load_file(path, 0, NULL); /* NULL: gone, empty or being written */
    json_t *sec = json_object_get(j, "run_since_s"), *ns = json_object_get(j, "run_since_ns");
    int ok = json_is_integer(sec) && json_is_integer(ns);
    if (ok) {
        t->tv_sec = (time_t)json_integer_value(sec);
        t->tv_nsec = (long)json_integer_value(ns);
    }
    json_decref(j);
    return ok;
}

/* Makes the job's file, then takes the earliest run_since of the live job files
 * (its own start if none) and writes it there; job files not refreshed for
 * --claim-stale s are dead jobs' and removed. */
static rv_status join_run(embed_shard *s)
{
    rv_status st = RV_OK;
    DIR *d = NULL;
    char *text = NULL;
    json_t *j = NULL;
    snprintf(s->job_path, sizeof s->job_path, "%s/" JOB_PREFIX "%s.%ld", s->dir, s->host,
             (long)getpid());
    s->job_fd = open(s->job_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (s->job_fd < 0) {
        st = rv_fail(RV_ERR_IO, "cannot create the job file %s (--shard): %s", s->job_path,
                     strerror(errno));
        goto end;
    }
    const struct timespec now = folder_now(s);
    s->run_since = now;
    if (!(d = opendir(s->dir))) {
        st = rv_fail(RV_ERR_IO, "cannot read the folder %s: %s", s->dir, strerror(errno));
        goto end;
    }
    const char *mine = strrchr(s->job_path, '/') + 1;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, JOB_PREFIX, strlen(JOB_PREFIX)) != 0 || strcmp(e->d_name, mine) == 0)
            continue;
        char path[4400];
        struct stat sb;
        struct timespec t;
        snprintf(path, sizeof path, "%s/%s", s->dir, e->d_name);
        if (stat(path, &sb) != 0)
            continue;
        if (ts_diff(now, sb.st_mtim) > s->set->claim_stale_s)
            unlink(path); /* its job died */
        else if (job_run_since(path, &t) && ts_before(t, s->run_since))
            s->run_since = t;
    }
    char shard[32];
    snprintf(shard, sizeof shard, "%d/%d", s->index, s->count);
    j = json_pack("{s:s, s:I, s:s, s:s, s:I, s:I}", "host", s->host, "pid", (json_int_t)getpid(),
                  "shard", shard, "started", s->started, "run_since_s",
                  (json_int_t)s->run_since.tv_sec, "run_since_ns", (json_int_t)s->run_since.tv_nsec);
    text = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    if (!text || write_line(s->job_fd, text) != 0)
        st = rv_fail(RV_ERR_IO, "cannot write the job file %s: %s", s->job_path,
                     text ? strerror(errno) : "out of memory");
end:
    if (d)
        closedir(d);
    json_decref(j);
    free(text);
    return st;
}

/* ---- set-up, the end ----------------------------------------------------------------- */

rv_status embed_shard_open(const embed_settings *set, const embed_input *in, int n,
                           const char *dir, embed_report *report, embed_shard **out)
{
    rv_status st = RV_OK;
    embed_shard *s = calloc(1, sizeof *s);
    *out = NULL;
    if (!s)
        return rv_fail(RV_ERR_NOMEM, "embed: out of memory");
    s->set = set;
    s->in = in;
    s->n = n;
    s->index = set->shard_index;
    s->count = set->shard_count;
    s->start = (int)((int64_t)s->index * n / s->count);
    s->home_lo = s->start;
    s->home_hi = (int)((int64_t)(s->index + 1) * n / s->count);
    s->report = report;
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    if (gethostname(s->host, sizeof s->host) != 0 || !s->host[0])
        snprintf(s->host, sizeof s->host, "localhost");
    s->host[sizeof s->host - 1] = '\0';
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(s->started, sizeof s->started, "%Y-%m-%dT%H:%M:%SZ", &tm);
    s->job_fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->fd = malloc((size_t)(n > 0 ? n : 1) * sizeof *s->fd);
    s->taken = calloc((size_t)(n > 0 ? n : 1), 1);
    if (!s->fd || !s->taken) {
        st = rv_fail(RV_ERR_NOMEM, "embed: out of memory");
        goto end;
    }
    for (int i = 0; i < n; i++)
        s->fd[i] = -1;
    if ((st = join_run(s)) != RV_OK)
        goto end;
    int e = pthread_create(&s->thread, NULL, refresh_main, s);
    if (e != 0) {
        st = rv_fail(RV_ERR_NOMEM, "embed: cannot start the thread that keeps the claims "
                     "alive: %s", strerror(e));
        goto end;
    }
    s->thread_on = 1;
end:
    if (st != RV_OK)
        embed_shard_close(&s);
    *out = s;
    return st;
}

int embed_shard_left(const embed_shard *s)
{
    return s ? s->left : 0;
}

void embed_shard_report_others(const embed_shard *s, embed_report *r)
{
    for (int i = 0; s && i < s->n; i++) {
        if (s->taken[i])
            continue;
        const int out = output_state(s, i);
        if (out != OUT_NONE)
            embed_report_complete(r, i, &s->in[i], out == OUT_THIS_RUN ? EMBED_OK : EMBED_SKIPPED);
    }
}

void embed_shard_index_lock(embed_shard *s, const char *index_path)
{
    if (!s)
        return;
    char lock[sizeof s->index_lock];
    snprintf(lock, sizeof lock, "%s.lock", index_path);
    const double deadline = (double)time(NULL) + INDEX_LOCK_WAIT_S;
    for (;;) {
        int fd = open(lock, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0) {
            close(fd);
            snprintf(s->index_lock, sizeof s->index_lock, "%s", lock);
            return;
        }
        if (errno != EEXIST || (double)time(NULL) > deadline)
            return; /* written without it */
        /* A lock older than the wait is a dead job's: no index takes that long. */
        struct stat sb;
        if (stat(lock, &sb) == 0 && ts_diff(folder_now(s), sb.st_mtim) > INDEX_LOCK_WAIT_S) {
            unlink(lock);
            continue;
        }
        struct timespec nap = {0, 50 * 1000000L};
        nanosleep(&nap, NULL);
    }
}

void embed_shard_index_unlock(embed_shard *s)
{
    if (s && s->index_lock[0]) {
        unlink(s->index_lock);
        s->index_lock[0] = '\0';
    }
}

void embed_shard_close(embed_shard **sp)
{
    embed_shard *s = sp ? *sp : NULL;
    if (!s)
        return;
    if (s->thread_on) {
        pthread_mutex_lock(&s->mu);
        s->quit = 1;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    /* Claims of inputs not finished (a signal, a broken batch, inputs claimed
     * ahead): released for the other jobs. */
    for (int i = 0; s->fd && i < s->n; i++) {
        if (s->fd[i] < 0)
            continue;
        char path[4200];
        claim_path(s, i, path, sizeof path);
        if (still_ours(path, s->fd[i]))
            unlink(path);
        close(s->fd[i]);
    }
    embed_shard_index_unlock(s);
    if (s->job_fd >= 0) {
        unlink(s->job_path);
        close(s->job_fd);
    }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->fd);
    free(s->taken);
    free(s);
    *sp = NULL;
}
