/* test_tokenize_fbank.c: the log-mel filterbank (tokenize/fbank.c) against
 * torchaudio.compliance.kaldi.fbank with the AST settings, on signals made by
 * the peer script tests/peer/fbank_golden.py at test time (tones, a chord, a
 * chirp, noise, silence, clipping, DC, a quiet tone, an impulse, lengths that
 * are not a whole number of frames); that frames do not depend on how the
 * signal is cut; and the speed (>= 500x real time on one core). */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ref_ops.h"
#include "rv_clock.h"
#include "rv_fbank.h"
#include "rv_safetensors.h"

#ifndef RV_TESTS_SOURCE_DIR
#error "RV_TESTS_SOURCE_DIR must name tests/ (tests/CMakeLists.txt sets it)"
#endif

/* Against torchaudio, on the log-mel outputs: a difference of logs is the
 * relative difference of the mel energies, so max |ours - torchaudio| in the log
 * is already a relative measure (scaling it by the logs' own magnitude would tie
 * it to the energy's unit). Ours runs in f32 (an FFT of 512 points, 128 mel sums,
 * a log): its energies within 1e-3 relative of float64 torchaudio's, except where
 * a band's energy is many decades below the frame's strongest (float32 torchaudio
 * loses those too; its own distance from float64 is allowed on top). */
#define TOL_LOG_MEL 1e-3

static rv_safetensors *run_golden(void)
{
    char path[] = "/tmp/rv_fbank_golden_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 '" RV_TESTS_SOURCE_DIR "/peer/fbank_golden.py' '%s' 2>'%s.err'",
             path, path);
    int rc = system(cmd);
    rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
    cr_assert_eq(rc, 0, "fbank_golden.py failed (exit %d); see %s.err", rc, path);
    rv_safetensors *g = NULL;
    cr_assert_eq(rv_st_open(path, &g), RV_OK, "%s", rv_last_error());
    unlink(path);
    snprintf(cmd, sizeof cmd, "%s.err", path);
    unlink(cmd);
    return g;
}

static float f32_at(const rv_st_tensor *t, int64_t i)
{
    float v;
    memcpy(&v, (const char *)t->data + 4 * i, 4);
    return v;
}

static double f64_at(const rv_st_tensor *t, int64_t i)
{
    double v;
    memcpy(&v, (const char *)t->data + 8 * i, 8);
    return v;
}

/* Every signal: the same frame count, max |ours - torchaudio(float64)| <= TOL_LOG_MEL,
 * and against torchaudio in float32 within TOL_LOG_MEL plus float32 torchaudio's own
 * distance from its float64 result (its FFT loses the small mel energies far
 * from a strong tone; on the chirp by up to ~0.02 in the log). */
Test(fbank, matches_torchaudio)
{
    rv_safetensors *g = run_golden();
    rv_fbank *fb = NULL;
    cr_assert_eq(rv_fbank_new(&fb), RV_OK, "%s", rv_last_error());
    int signals = 0;
    for (int i = 0; i < rv_st_count(g); i++) {
        const rv_st_tensor *w = rv_st_at(g, i);
        size_t len = strlen(w->name);
        if (len < 5 || strcmp(w->name + len - 5, "/wave") != 0)
            continue;
        char name[256];
        snprintf(name, sizeof name, "%.*s/fbank", (int)(len - 5), w->name);
        const rv_st_tensor *f32 = rv_st_find(g, name);
        snprintf(name, sizeof name, "%.*s/fbank64", (int)(len - 5), w->name);
        const rv_st_tensor *f64 = rv_st_find(g, name);
        cr_assert(f32 && f64, "golden lacks the fbank of %s", w->name);
        int64_t n = w->numel, frames = rv_fbank_frames(n);
        cr_assert_eq(frames, f32->shape[0], "%s: %lld frames, torchaudio %lld", w->name,
                     (long long)frames, (long long)f32->shape[0]);
        cr_assert_eq(f32->ndim, 2);
        cr_assert_eq(f32->shape[1], 128);
        float *x = ref_alloc_f((size_t)n);
        memcpy(x, w->data, sizeof(float) * (size_t)n);
        float *out = ref_alloc_f((size_t)(frames * 128));
        rv_fbank_compute(fb, x, n, out);
        double e64 = 0, e32 = 0, excess = 0;
        for (int64_t k = 0; k < frames * 128; k++) {
            double d64 = fabs(out[k] - f64_at(f64, k));
            double d32 = fabs(out[k] - f32_at(f32, k));
            double own = fabs(f32_at(f32, k) - f64_at(f64, k));
            e64 = fmax(e64, d64);
            e32 = fmax(e32, d32);
            excess = fmax(excess, d32 - own);
        }
        cr_log_info("%-16s %6lld samples %4lld frames: max |diff| %.2e vs float64, %.2e vs "
                    "float32", w->name, (long long)n, (long long)frames, e64, e32);
        cr_expect_leq(e64, TOL_LOG_MEL, "%s: max |ours - torchaudio float64| = %g", w->name, e64);
        cr_expect_leq(excess, TOL_LOG_MEL, "%s: float32 torchaudio differs by %g beyond its own error",
                      w->name, excess);
        free(x);
        free(out);
        signals++;
    }
    cr_assert_geq(signals, 12, "the golden file holds only %d signals", signals);
    rv_fbank_free(&fb);
    rv_st_free(&g);
}

/* Silence gives log(FLT_EPSILON) everywhere; a frame sees only its own 400
 * samples (what makes cutting a recording for ranks exact). */
Test(fbank, floor_and_locality)
{
    rv_fbank *fb = NULL;
    cr_assert_eq(rv_fbank_new(&fb), RV_OK);
    float zero[400] = {0}, out[128];
    rv_fbank_frame(fb, zero, out);
    for (int m = 0; m < 128; m++)
        cr_assert_eq(out[m], logf(1.1920928955078125e-07f), "band %d: %.9g", m, out[m]);

    ref_rng r = ref_rng_make(5);
    const int64_t n = 4000;
    float *x = ref_alloc_f(n), *y = ref_alloc_f(n);
    ref_fill_uniform(&r, x, n, -0.7f, 0.7f);
    memcpy(y, x, sizeof(float) * n);
    /* Change everything outside frame 7's window: frame 7 must not move. */
    for (int64_t j = 0; j < n; j++)
        if (j < 7 * 160 || j >= 7 * 160 + 400)
            y[j] = 0.25f;
    float a[128], b[128];
    rv_fbank_frame(fb, x + 7 * 160, a);
    float *all = ref_alloc_f(rv_fbank_frames(n) * 128);
    rv_fbank_compute(fb, y, n, all); /* frames 0..6 in the same state first */
    rv_fbank_frame(fb, y + 7 * 160, b);
    cr_assert_arr_eq(a, b, sizeof a);
    cr_assert_arr_eq(a, all + 7 * 128, sizeof a);
    free(all);
    cr_assert_eq(rv_fbank_frames(399), 0);
    cr_assert_eq(rv_fbank_frames(400), 1);
    cr_assert_eq(rv_fbank_frames(559), 1);
    cr_assert_eq(rv_fbank_frames(560), 2);
    free(x);
    free(y);
    rv_fbank_free(&fb);
}

/* >= 500x real time on one core (CPU time of this thread, so the load of a
 * shared machine does not count); the rate goes to the log. Sanitizer builds
 * only report it. */
Test(fbank, speed_500x_real_time)
{
    rv_fbank *fb = NULL;
    cr_assert_eq(rv_fbank_new(&fb), RV_OK);
    const int64_t n = 16000 * 120; /* two minutes */
    float *x = ref_alloc_f(n);
    ref_rng r = ref_rng_make(9);
    ref_fill_uniform(&r, x, n, -0.5f, 0.5f);
    float *out = ref_alloc_f(rv_fbank_frames(n) * 128);
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        const double a = rv_clock_thread_cpu_s();
        rv_fbank_compute(fb, x, n, out);
        double s = rv_clock_thread_cpu_s() - a;
        best = s < best ? s : best;
    }
    double rate = 120.0 / best;
    cr_log_info("fbank: %.0fx real time on one core, %.2f s per audio hour, %.2f us per frame",
                rate, 3600.0 / rate, best / (double)rv_fbank_frames(n) * 1e6);
#if defined(__SANITIZE_ADDRESS__)
    cr_log_info("(sanitizer build: speed not checked)");
#else
    cr_expect_geq(rate, 500.0, "fbank runs at %.0fx real time, below 500x", rate);
#endif
    free(x);
    free(out);
    rv_fbank_free(&fb);
}
