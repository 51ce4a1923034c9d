/* ingest_media.h: test media for the ingest tests, made at test time with the
 * ffmpeg command into a temporary directory that lives for one run of the test
 * executable (created by the PRE_ALL hook in the runner process, inherited by the
 * forked tests through RV_INGEST_MEDIA, removed by POST_ALL). Each file is made
 * once per run, on first use, under a lock, so tests running in parallel share
 * it. Also runs the peer reference (tests/peer/ingest_golden.py) and compares.
 * Header-only: every test_ingest_*.c executable includes it once. */
#ifndef RV_TEST_INGEST_MEDIA_H
#define RV_TEST_INGEST_MEDIA_H

#include <criterion/criterion.h>
#include <criterion/hooks.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rv_ingest.h"
#include "rv_safetensors.h"

#ifndef RV_TESTS_SOURCE_DIR
#error "RV_TESTS_SOURCE_DIR must name tests/ (tests/CMakeLists.txt sets it)"
#endif

/* Tolerances of expect_golden, ringvit's decoding against the peer's (PyAV frames,
 * the ffmpeg command's audio), different scalers and resamplers:
 *   pixels: the mean absolute difference of a frame, in levels of the 8-bit full
 *   scale (0..255): the two swscale paths round a level apart here and there;
 *   audio: the RMS of the difference relative to the peer's own RMS (the RMS of
 *   each signal is its scale: a tone at -18 dBFS or noise). */
#define TOL_PIXEL_MAD 1.0
#define TOL_AUDIO_RMS 1e-3

/* Not every test file uses every helper. */
#define HELPER __attribute__((unused)) static

#define PYTHON "/usr/bin/python3"
#define FFMPEG "ffmpeg -nostdin -hide_banner -loglevel error -y"
/* testsrc2 at a small size and 30 fps: moving content, so a wrong frame shows. */
#define SRC(w, h, rate, secs) \
    "-f lavfi -i testsrc2=size=" #w "x" #h ":rate=" #rate " -t " #secs

typedef struct media_recipe {
    const char *name;
    const char *args; /* between "ffmpeg ... -y" and the output path; may use {DIR} */
    const char *dep;  /* media this one is made from (NULL: none) */
} media_recipe;

/* Each test file defines its table of media. */
extern const media_recipe rv_test_media[];

static char media_root[512];

ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
    (void)set;
    char tmpl[] = "/tmp/rv_ingest_media_XXXXXX";
    const char *d = mkdtemp(tmpl);
    if (d) {
        snprintf(media_root, sizeof media_root, "%s", d);
        setenv("RV_INGEST_MEDIA", media_root, 1);
    }
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    (void)stats;
    if (media_root[0] && !getenv("RV_KEEP_MEDIA")) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", media_root);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", media_root);
    }
}

HELPER const char *media_dir(void)
{
    const char *d = getenv("RV_INGEST_MEDIA");
    cr_assert(d && d[0], "RV_INGEST_MEDIA is not set (the PRE_ALL hook did not run)");
    return d;
}

/* Runs a shell command; returns its exit status. */
HELPER int run_shell(const char *fmt, ...)
{
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

HELPER int file_exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Replaces every "{DIR}" in src with the media directory. */
HELPER void expand_dir(const char *src, char *dst, size_t size)
{
    const char *dir = media_dir();
    size_t n = 0;
    while (*src && n + 1 < size) {
        if (strncmp(src, "{DIR}", 5) == 0) {
            n += (size_t)snprintf(dst + n, size - n, "%s", dir);
            src += 5;
        } else {
            dst[n++] = *src++;
        }
    }
    dst[n < size ? n : size - 1] = '\0';
}

/* Path of media `name` (a static buffer per call site is not enough with several
 * files in one test, so the caller gets a heap string to free). Makes it on first
 * use: the recipe's ffmpeg command into a temporary name, then rename. */
HELPER char *media(const char *name)
{
    char lock[1024], tmp[1024], args[4096];
    const char *dir = media_dir();
    size_t plen = strlen(dir) + strlen(name) + 2;
    char *path = malloc(plen);
    cr_assert_not_null(path);
    snprintf(path, plen, "%s/%s", dir, name);
    if (file_exists(path))
        return path;
    const media_recipe *r = rv_test_media;
    while (r->name && strcmp(r->name, name) != 0)
        r++;
    cr_assert(r->name, "no recipe for test media '%s'", name);
    if (r->dep)
        free(media(r->dep));
    snprintf(lock, sizeof lock, "%s/.%s.lock", dir, name);
    int fd = open(lock, O_CREAT | O_RDWR, 0644);
    cr_assert(fd >= 0, "%s: %s", lock, strerror(errno));
    flock(fd, LOCK_EX);
    if (!file_exists(path)) {
        const char *ext = strrchr(name, '.');
        snprintf(tmp, sizeof tmp, "%s/.tmp.%d.%s%s", dir, (int)getpid(), name, ext ? ext : "");
        expand_dir(r->args, args, sizeof args);
        int rc = run_shell(FFMPEG " %s '%s' >'%s/.%s.log' 2>&1", args, tmp, dir, name);
        cr_assert(rc == 0 && file_exists(tmp),
                  "making test media %s failed (ffmpeg exit %d); see %s/.%s.log", name, rc, dir,
                  name);
        cr_assert(rename(tmp, path) == 0, "rename %s: %s", tmp, strerror(errno));
    }
    flock(fd, LOCK_UN);
    close(fd);
    return path;
}

/* Options with fps num/den and size. */
HELPER rv_ingest_opts opts_fps(int num, int den, int size)
{
    rv_ingest_opts o;
    rv_ingest_opts_default(&o);
    o.fps_num = num;
    o.fps_den = den;
    o.size = size;
    return o;
}

HELPER rv_ingest_result *ingest_ok(const char *path, const rv_ingest_opts *o)
{
    rv_ingest_result *r = NULL;
    rv_status st = rv_ingest_read(path, o, &r);
    cr_assert_eq(st, RV_OK, "%s: ingest failed: %s", path, rv_last_error());
    cr_assert_not_null(r);
    return r;
}

/* Runs the peer reference with the same settings; returns the opened golden file. */
HELPER rv_safetensors *golden(const char *path, const rv_ingest_opts *o, const char *tag)
{
    char out[1024], extra[256] = "";
    snprintf(out, sizeof out, "%s/golden-%s-%d.safetensors", media_dir(), tag, (int)getpid());
    size_t n = 0;
    if (o->pad)
        n += (size_t)snprintf(extra + n, sizeof extra - n, " --pad");
    if (o->start_s > 0)
        n += (size_t)snprintf(extra + n, sizeof extra - n, " --start %.17g", o->start_s);
    if (o->duration_s > 0)
        n += (size_t)snprintf(extra + n, sizeof extra - n, " --duration %.17g", o->duration_s);
    if (o->audio_stream == -2)
        n += (size_t)snprintf(extra + n, sizeof extra - n, " --no-audio");
    int rc = run_shell(PYTHON " '" RV_TESTS_SOURCE_DIR "/peer/ingest_golden.py' '%s' '%s' "
                       "--fps %d/%d --size %d%s 2>'%s.err'",
                       path, out, o->fps_num, o->fps_den, o->size, extra, out);
    cr_assert_eq(rc, 0, "ingest_golden.py failed on %s (exit %d); see %s.err", path, rc, out);
    rv_safetensors *g = NULL;
    cr_assert_eq(rv_st_open(out, &g), RV_OK, "%s", rv_last_error());
    unlink(out);
    return g;
}

HELPER const rv_st_tensor *gtensor(const rv_safetensors *g, const char *name)
{
    const rv_st_tensor *t = rv_st_find(g, name);
    cr_assert_not_null(t, "golden file lacks %s", name);
    return t;
}

HELPER double gf64(const rv_st_tensor *t, int64_t i)
{
    double v;
    memcpy(&v, (const char *)t->data + 8 * i, 8);
    return v;
}

HELPER float gf32(const rv_st_tensor *t, int64_t i)
{
    float v;
    memcpy(&v, (const char *)t->data + 4 * i, 4);
    return v;
}

/* ringvit against the peer: the same t0 (the peer's first pts rounded down to
 * the microsecond), the same frame count, frame times and source times on the
 * container's clock exactly equal, mean absolute pixel difference <= 1.0
 * (0..255) per frame, same audio length and relative RMS difference (the
 * tolerances at the top). */
HELPER void expect_golden(const char *path, const rv_ingest_opts *o, const char *tag)
{
    rv_ingest_result *r = ingest_ok(path, o);
    rv_safetensors *g = golden(path, o, tag);
    const rv_st_tensor *gfr = gtensor(g, "frames"), *gt = gtensor(g, "frame_time"),
                       *gs = gtensor(g, "frame_source_time"), *ga = gtensor(g, "audio"),
                       *g0 = gtensor(g, "t0");
    cr_assert_eq(r->stats.t0, gf64(g0, 0), "%s (%s): t0 %.17g, the peer's %.17g", path, tag,
                 r->stats.t0, gf64(g0, 0));
    cr_assert_eq(r->nframes, gt->shape[0], "%s (%s): %lld frames, the peer has %lld", path, tag,
                 (long long)r->nframes, (long long)gt->shape[0]);
    const size_t fsize = (size_t)o->size * o->size * 3;
    for (int64_t k = 0; k < r->nframes; k++) {
        cr_assert_eq(r->frame_time[k], gf64(gt, k), "%s (%s): frame %lld time %.17g, peer %.17g",
                     path, tag, (long long)k, r->frame_time[k], gf64(gt, k));
        cr_assert_eq(r->source_time[k], gf64(gs, k),
                     "%s (%s): frame %lld source time %.17g, peer %.17g", path, tag,
                     (long long)k, r->source_time[k], gf64(gs, k));
        const uint8_t *a = r->frames + (size_t)k * fsize, *b = (const uint8_t *)gfr->data + (size_t)k * fsize;
        double sad = 0;
        for (size_t i = 0; i < fsize; i++)
            sad += abs((int)a[i] - (int)b[i]);
        cr_assert_leq(sad / fsize, TOL_PIXEL_MAD, "%s (%s): frame %lld differs from the peer: mean abs %.3f",
                      path, tag, (long long)k, sad / fsize);
    }
    cr_assert_eq(r->nsamples, ga->shape[0], "%s (%s): %lld audio samples, the peer has %lld",
                 path, tag, (long long)r->nsamples, (long long)ga->shape[0]);
    double se = 0, sr = 0;
    for (int64_t j = 0; j < r->nsamples; j++) {
        double d = (double)r->audio[j] - gf32(ga, j);
        se += d * d;
        sr += (double)gf32(ga, j) * gf32(ga, j);
    }
    /* relative RMS; a silent reference (no samples, or zeros) must be matched exactly */
    double rms = se > 0 ? sqrt(se / (sr > 0 ? sr : 1e-300)) : 0;
    printf("ingest_golden: %s (%s): audio RMS difference %.3g of the peer's RMS %.3g\n", path,
           tag, rms, r->nsamples ? sqrt(sr / (double)r->nsamples) : 0.0);
    cr_assert_leq(rms, TOL_AUDIO_RMS, "%s (%s): audio RMS difference %.3g of the peer's RMS "
                  "against ffmpeg", path, tag, rms);
    rv_st_free(&g);
    rv_ingest_result_free(&r);
}

#endif
