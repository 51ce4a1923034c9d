/* test_vit_golden.c: the encoder (rv_vit.h) against torchvision's
 * VisionTransformer, on models and pictures made at test time by the peer
 * script tests/peer/vit_golden.py (tiny 2-layer ViTs saved with torchvision
 * names only, PNG pictures, and torchvision's per-token outputs after
 * encoder.ln in float64). Each picture goes the whole way: ingest + tokenizer
 * (a still image is a one-frame video; its patches are checked against the
 * normalised picture torchvision saw), rv_vit_load of the torchvision-only
 * file, rv_vit_forward on the CPU backend with a local communicator, and the
 * outputs, CLS first, compared with torchvision's (normalised error <= TOL_TORCH).
 * Covered:
 *   - a torchvision file is that image ViT: sizes from the shapes, heads D / 64
 *     (model A: D 128, 2 heads, patch 16), the ringvit.* tensors zero;
 *   - the heads override (model B: D 96 loaded with heads = 3; with 2 heads the
 *     outputs must differ; without an override D / 64 is not whole);
 *   - inflation: the 2D file loaded with tubelet 2 and a still clip (the
 *     tokenizer repeats the single frame) gives the T = 1 outputs (TOL_INFLATE);
 *   - context parallelism: the same outputs over 2 local ranks (ring);
 *   - position resampling: 80 x 80 and 48 x 48 pictures with the 64-grid
 *     weights against torchvision's encoder run on the position table resampled
 *     by torch.nn.functional.interpolate(bilinear, align_corners = False). */
#include <criterion/criterion.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ref_ops.h"
#include "rv_backend.h"
#include "rv_comm.h"
#include "rv_safetensors.h"
#include "rv_tokenize.h"
#include "rv_vit.h"

#ifndef RV_TESTS_SOURCE_DIR
#error "RV_TESTS_SOURCE_DIR must name tests/ (tests/CMakeLists.txt sets it)"
#endif

/* Tolerances, on normalised errors (max |got - want| / max |want|):
 * ringvit (float32) vs torchvision (float64): a ViT of a few layers, f32 roundings
 * (epsilon 1.2e-7) through GEMMs, attention and LayerNorms; */
#define TOL_TORCH 1e-4
/* tubelet 2 on a still clip vs tubelet 1 (the inflated patch weight sums two
 * halves in f32, attention the same); */
#define TOL_INFLATE 1e-5
/* tokenizer patches vs the normalised picture: (x / 255 - mean) / std in f32,
 * a few roundings of the largest value; */
#define TOL_PIXELS 1e-6
/* and what the 2-head model must differ from the 3-head one by at least. */
#define MIN_CHANGE 1e-2

/* ---- the peer script's output --------------------------------------------------- */

typedef struct golden {
    char dir[64];        /* the temporary directory the script wrote */
    rv_safetensors *g;   /* dir/golden.safetensors */
} golden;

static void golden_make(golden *gd)
{
    snprintf(gd->dir, sizeof gd->dir, "/tmp/rv_vit_golden_XXXXXX");
    cr_assert_not_null(mkdtemp(gd->dir));
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 '" RV_TESTS_SOURCE_DIR "/peer/vit_golden.py' '%s' 2>'%s/err'",
             gd->dir, gd->dir);
    int rc = system(cmd);
    rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
    cr_assert_eq(rc, 0, "vit_golden.py failed (exit %d); see %s/err", rc, gd->dir);
    char path[256];
    snprintf(path, sizeof path, "%s/golden.safetensors", gd->dir);
    gd->g = NULL;
    cr_assert_eq(rv_st_open(path, &gd->g), RV_OK, "%s", rv_last_error());
}

static void golden_free(golden *gd)
{
    rv_st_free(&gd->g);
    DIR *d = opendir(gd->dir);
    if (d) {
        struct dirent *e;
        char path[512];
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            snprintf(path, sizeof path, "%s/%s", gd->dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(gd->dir);
}

/* A copy of golden tensor CASE/what as double, checking it holds n values. */
static double *golden_d(const golden *gd, const char *name, const char *what, int64_t n)
{
    char key[128];
    snprintf(key, sizeof key, "%s/%s", name, what);
    const rv_st_tensor *t = rv_st_find(gd->g, key);
    cr_assert_not_null(t, "golden lacks %s", key);
    cr_assert_eq(t->numel, n, "%s: %lld values, expected %lld", key, (long long)t->numel,
                 (long long)n);
    double *out = ref_alloc_d((size_t)n);
    for (int64_t i = 0; i < n; i++) {
        if (t->dtype == RV_F64) {
            memcpy(&out[i], (const char *)t->data + 8 * i, 8);
        } else {
            cr_assert_eq(t->dtype, RV_F32, "%s: dtype %s", key, rv_dtype_name(t->dtype));
            float v;
            memcpy(&v, (const char *)t->data + 4 * i, 4);
            out[i] = v;
        }
    }
    return out;
}

/* ---- tokens of a picture --------------------------------------------------------- */

typedef struct tok_seq {
    int64_t vdim;        /* T * P * P * 3 */
    int64_t len, nvideo; /* tokens, video tokens */
    uint8_t *mod;        /* (len) */
    int64_t *pos;        /* (len, 3) */
    double *time;        /* (len, 2) */
    float *video;        /* (nvideo, vdim) */
} tok_seq;

static rv_status collect(const rv_tok_batch *b, void *user)
{
    tok_seq *s = user;
    cr_assert_eq(b->naudio, 0);
    int64_t len = s->len + b->count, nv = s->nvideo + b->nvideo;
    s->mod = realloc(s->mod, (size_t)len + 1);
    s->pos = realloc(s->pos, sizeof(int64_t) * (size_t)(3 * len + 3));
    s->time = realloc(s->time, sizeof(double) * (size_t)(2 * len + 2));
    s->video = realloc(s->video, sizeof(float) * (size_t)(nv * s->vdim + 1));
    cr_assert(s->mod && s->pos && s->time && s->video);
    if (b->count > 0) { /* an empty batch's pointers may be NULL */
        memcpy(s->mod + s->len, b->modality, (size_t)b->count);
        memcpy(s->pos + 3 * s->len, b->pos, sizeof(int64_t) * 3 * (size_t)b->count);
        memcpy(s->time + 2 * s->len, b->seq_time, sizeof(double) * 2 * (size_t)b->count);
    }
    if (b->nvideo > 0)
        memcpy(s->video + s->nvideo * s->vdim, b->video,
               sizeof(float) * (size_t)(b->nvideo * s->vdim));
    s->len = len;
    s->nvideo = nv;
    return RV_OK;
}

static void tok_seq_free(tok_seq *s)
{
    free(s->mod);
    free(s->pos);
    free(s->time);
    free(s->video);
    memset(s, 0, sizeof *s);
}

/* Tokenizes DIR/image.png (size S, no resize) with tubelet T, patch P and a CLS
 * token, and checks the sequence: CLS, then the G x G patches row by row, every
 * value (t, y, x, c) equal to the normalised picture's (input (S, S, 3)). */
static void tokenize_picture(const golden *gd, const char *image, int S, int T, int P,
                             const double *input, tok_seq *s)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s.png", gd->dir, image);
    rv_ingest_opts io;
    rv_ingest_opts_default(&io);
    io.size = S;
    rv_tok_opts to;
    rv_tok_opts_default(&to);
    to.tubelet = T;
    to.patch = P;
    to.cls = 1;
    to.audio = 0;
    memset(s, 0, sizeof *s);
    s->vdim = (int64_t)T * P * P * 3;
    rv_tok_stats st;
    cr_assert_eq(rv_tokenize_file(path, &io, &to, collect, s, &st), RV_OK, "%s: %s", path,
                 rv_last_error());
    const int G = S / P;
    cr_assert_eq(st.ingest.frames, 1, "%s: %lld frames, a still picture is one",
                 path, (long long)st.ingest.frames);
    cr_assert_eq(s->len, 1 + G * G, "%s: %lld tokens, expected %d", path, (long long)s->len,
                 1 + G * G);
    cr_assert_eq(s->nvideo, G * G);
    cr_assert_eq(s->mod[0], RV_MOD_CLS);
    double worst = 0, big = 1e-30;
    for (int i = 0; i < G * G; i++) {
        int y = i / G, x = i % G;
        const int64_t *p = s->pos + 3 * (1 + i);
        cr_assert_eq(s->mod[1 + i], RV_MOD_VIDEO);
        cr_assert(p[0] == 0 && p[1] == y && p[2] == x, "%s token %d at (%lld %lld %lld)", path,
                  1 + i, (long long)p[0], (long long)p[1], (long long)p[2]);
        const float *v = s->video + i * s->vdim;
        for (int t = 0; t < T; t++)
            for (int py = 0; py < P; py++)
                for (int px = 0; px < P; px++)
                    for (int c = 0; c < 3; c++) {
                        double want = input[((y * P + py) * S + x * P + px) * 3 + c];
                        double got = v[((t * P + py) * P + px) * 3 + c];
                        worst = fmax(worst, fabs(got - want));
                        big = fmax(big, fabs(want));
                    }
    }
    worst /= big;
    cr_log_info("%s (S %d, T %d, P %d): tokenizer patches vs the normalised picture: "
                "normalised error %.2e", image, S, T, P, worst);
    printf("vit_golden: %s patches vs the normalised picture: normalised error %.3g\n", image,
           worst);
    cr_assert_leq(worst, TOL_PIXELS,
                  "%s: the tokenizer's patches differ from the picture torchvision saw by %g",
                  path, worst);
}

/* ---- the forward ------------------------------------------------------------------ */

typedef struct fwd_job {
    const rv_vit_model *m;
    const tok_seq *s;
    int grid;
    rv_cp_strategy strategy;
    float *y; /* (len, D): every rank writes its own rows */
} fwd_job;

static rv_status fwd_rank(rv_comm *comm, void *arg)
{
    fwd_job *j = arg;
    rv_backend *be = NULL;
    rv_status st = rv_backend_cpu_create(1, &be);
    if (st != RV_OK)
        return st;
    rv_vit_run run = {.be = be, .comm = comm, .strategy = j->strategy, .causal = 0};
    st = rv_shard_plan_make(RV_SHARD_CONTIGUOUS, comm->size, j->s->len, &run.plan);
    if (st != RV_OK)
        goto end;
    rv_shard_seg seg[RV_SHARD_MAX_SEGS];
    /* (no cr_assert here: this runs on the rank's thread) */
    if (rv_shard_segments(&run.plan, comm->rank, seg) != 1) {
        st = rv_fail(RV_ERR_INTERNAL, "rank %d: a contiguous plan with %d segments", comm->rank,
                     rv_shard_segments(&run.plan, comm->rank, seg));
        goto end;
    }
    int64_t first = seg[0].start, v0 = 0;
    for (int64_t i = 0; i < first; i++)
        v0 += j->s->mod[i] == RV_MOD_VIDEO;
    int64_t nv = 0;
    for (int64_t i = first; i < first + seg[0].len; i++)
        nv += j->s->mod[i] == RV_MOD_VIDEO;
    rv_vit_tokens in = {
        .len = seg[0].len,
        .modality = j->s->mod + first,
        .pos = j->s->pos + 3 * first,
        .seq_time = j->s->time + 2 * first,
        .nvideo = nv,
        .video = j->s->video + v0 * j->s->vdim,
        .naudio = 0,
        .audio = NULL,
        .grid = j->grid,
    };
    st = rv_vit_forward(j->m, &run, &in, j->y + first * j->m->cfg.dim, NULL);
end:
    rv_backend_free(&be);
    return st;
}

/* The outputs (len, D) of m on s over cp local ranks. */
static float *forward(const rv_vit_model *m, const tok_seq *s, int grid, int cp)
{
    fwd_job j = {.m = m, .s = s, .grid = grid, .strategy = RV_CP_RING,
                 .y = ref_alloc_f((size_t)(s->len * m->cfg.dim))};
    cr_assert_eq(rv_local_run(cp, fwd_rank, &j), RV_OK, "forward on %d rank(s): %s", cp,
                 rv_last_error());
    return j.y;
}

static rv_vit_model *load(const golden *gd, const char *model, int heads, int tubelet)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s.safetensors", gd->dir, model);
    rv_vit_load_opts o = {.heads = heads, .tubelet = tubelet};
    rv_vit_model *m = NULL;
    cr_assert_eq(rv_vit_load(path, &o, &m), RV_OK, "%s: %s", path, rv_last_error());
    cr_assert_not_null(m);
    return m;
}

static void expect_config(const rv_vit_model *m, const char *model, int D, int H, int M, int P,
                          int grid, int T)
{
    const rv_vit_config *c = &m->cfg;
    cr_expect(c->dim == D && c->heads == H && c->mlp == M && c->patch == P && c->grid == grid &&
                  c->tubelet == T && c->layers == 2 && c->cls == 1,
              "%s: loaded as D %d heads %d M %d P %d grid %d T %d L %d cls %d; expected D %d "
              "heads %d M %d P %d grid %d T %d L 2 cls 1",
              model, c->dim, c->heads, c->mlp, c->patch, c->grid, c->tubelet, c->layers, c->cls,
              D, H, M, P, grid, T);
    cr_expect_eq(c->eps, 1e-6f, "%s: eps %g, torchvision's is 1e-6", model, c->eps);
}

/* The ringvit.* tensors a torchvision file lacks are zero. */
static void expect_ringvit_zero(const rv_vit_model *m, const char *model)
{
    const rv_vit_config *c = &m->cfg;
    const int64_t D = c->dim, F = c->audio_freq, W = c->audio_time;
    cr_assert(F > 0 && W > 0 && RV_VIT_MEL_BINS % F == 0, "%s: audio patch %lld x %lld", model,
              (long long)F, (long long)W);
    struct {
        const char *name;
        const float *p;
        int64_t n;
    } t[] = {{"time_w", m->time_w, D * D}, {"modality", m->modality, 3 * D},
             {"band", m->band, RV_VIT_MEL_BINS / F * D}, {"audio_w", m->audio_w, D * F * W},
             {"audio_b", m->audio_b, D}};
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
        int64_t nonzero = 0;
        for (int64_t i = 0; i < t[k].n; i++)
            nonzero += t[k].p[i] != 0.0f;
        cr_expect_eq(nonzero, 0, "%s: %lld of the %lld values of %s are not zero, the file "
                     "has no such tensor", model, (long long)nonzero, (long long)t[k].n,
                     t[k].name);
    }
}

/* Runs the case MODEL/IMAGE (picture side S) with m (tubelet T) over cp ranks and
 * compares with torchvision. Returns the outputs (caller frees). */
static float *run_case(const golden *gd, const rv_vit_model *m, const char *model,
                       const char *image, int S, int cp, double tol, double *err_out)
{
    const int D = m->cfg.dim, P = m->cfg.patch, T = m->cfg.tubelet, G = S / P;
    const int64_t len = 1 + (int64_t)G * G;
    char name[64];
    snprintf(name, sizeof name, "%s/%s", model, image);
    double *input = golden_d(gd, name, "input", (int64_t)S * S * 3);
    double *want = golden_d(gd, name, "out", len * D);
    double *want32 = golden_d(gd, name, "out32", len * D);
    tok_seq s;
    tokenize_picture(gd, image, S, T, P, input, &s);
    float *y = forward(m, &s, G, cp);
    double err = rv_rel_err(y, want, (size_t)(len * D));
    float *y32 = ref_alloc_f((size_t)(len * D));
    ref_to_float(want32, y32, (size_t)(len * D));
    double err32 = rv_rel_err(y32, want, (size_t)(len * D));
    double err_cls = rv_rel_err(y, want, (size_t)D);
    cr_log_info("%-10s T %d cp %d grid %2d heads %d: rel err %.2e (CLS %.2e); torchvision "
                "float32 itself %.2e", name, T, cp, G, m->cfg.heads, err, err_cls, err32);
    cr_expect_leq(err, tol, "%s (T %d, cp %d, heads %d): ringvit vs torchvision rel err %g > %g "
                  "(CLS row %g)", name, T, cp, m->cfg.heads, err, tol, err_cls);
    if (err_out)
        *err_out = err;
    free(input);
    free(want);
    free(want32);
    free(y32);
    tok_seq_free(&s);
    return y;
}

/* ---- tests ------------------------------------------------------------------------- */

/* Model A (D 128, patch 16) read from a torchvision-only file: 2 heads = D / 64
 * by default; three pictures, then one over 2 ranks. */
Test(vit_golden, torchvision_file_default_heads)
{
    golden gd;
    golden_make(&gd);
    rv_vit_model *m = load(&gd, "A", 0, 1);
    expect_config(m, "A", 128, 2, 256, 16, 4, 1);
    expect_ringvit_zero(m, "A");
    const char *images[] = {"img0", "img1", "img2"};
    for (int i = 0; i < 3; i++)
        free(run_case(&gd, m, "A", images[i], 64, 1, TOL_TORCH, NULL));
    free(run_case(&gd, m, "A", "img1", 64, 2, TOL_TORCH, NULL));
    rv_vit_free(&m);
    cr_assert_null(m);
    golden_free(&gd);
}

/* Model B (D 96, patch 8) has 3 heads: loaded with heads = 3 it matches; with
 * heads = 2 (also a divisor of 96) it must not. Without an override the
 * default D / 64 is not a whole number: rv_vit_load refuses, naming the
 * head count. */
Test(vit_golden, heads_override)
{
    golden gd;
    golden_make(&gd);
    rv_vit_model *m = load(&gd, "B", 3, 1);
    expect_config(m, "B", 96, 3, 192, 8, 8, 1);
    const char *images[] = {"img0", "img1", "img2"};
    for (int i = 0; i < 3; i++)
        free(run_case(&gd, m, "B", images[i], 64, 1, TOL_TORCH, NULL));
    rv_vit_free(&m);

    rv_vit_model *m2 = load(&gd, "B", 2, 1);
    cr_expect_eq(m2->cfg.heads, 2, "B with heads = 2: loaded with %d heads", m2->cfg.heads);
    double err = 0;
    free(run_case(&gd, m2, "B", "img0", 64, 1, INFINITY, &err));
    cr_expect_geq(err, MIN_CHANGE, "B with 2 heads matches the 3-head torchvision model (rel err %g): "
                  "the head count has no effect", err);
    rv_vit_free(&m2);

    char path[256];
    snprintf(path, sizeof path, "%s/B.safetensors", gd.dir);
    rv_vit_model *m0 = NULL;
    rv_status st = rv_vit_load(path, NULL, &m0);
    cr_expect_eq(st, RV_ERR_INVALID, "B without a head count: status %d, not a refusal", st);
    cr_expect_null(m0);
    cr_expect_not_null(strstr(rv_last_error(), "head"),
                       "B without a head count: the refusal does not name the heads: %s",
                       rv_last_error());
    rv_vit_free(&m0);
    golden_free(&gd);
}

/* The 2D files loaded with tubelet 2: a still picture tokenized with tubelet 2
 * (the tokenizer repeats the single frame) embeds as the image does, so the
 * outputs equal the tubelet-1 outputs and torchvision's. */
Test(vit_golden, inflation_still_clip)
{
    golden gd;
    golden_make(&gd);
    struct {
        const char *model;
        int heads, D, M, P, grid;
    } cases[] = {{"A", 0, 128, 256, 16, 4}, {"B", 3, 96, 192, 8, 8}};
    for (int k = 0; k < 2; k++) {
        rv_vit_model *m1 = load(&gd, cases[k].model, cases[k].heads, 1);
        rv_vit_model *m2 = load(&gd, cases[k].model, cases[k].heads, 2);
        expect_config(m2, cases[k].model, cases[k].D, cases[k].heads ? cases[k].heads : 2,
                      cases[k].M, cases[k].P, cases[k].grid, 2);
        const char *image = k == 0 ? "img2" : "img1";
        float *y1 = run_case(&gd, m1, cases[k].model, image, 64, 1, TOL_TORCH, NULL);
        float *y2 = run_case(&gd, m2, cases[k].model, image, 64, 1, TOL_TORCH, NULL);
        size_t n = (size_t)(1 + cases[k].grid * cases[k].grid) * (size_t)cases[k].D;
        double *w = ref_dup_d(y1, n);
        double err = rv_rel_err(y2, w, n);
        cr_log_info("%s/%s: tubelet 2 (still clip) vs tubelet 1: rel err %.2e", cases[k].model,
                    image, err);
        cr_expect_leq(err, TOL_INFLATE, "%s/%s: the inflated model on a still clip differs from "
                      "the image model by %g", cases[k].model, image, err);
        free(w);
        free(y1);
        free(y2);
        rv_vit_free(&m1);
        rv_vit_free(&m2);
    }
    golden_free(&gd);
}

/* Pictures of another size than the stored grid's: 80 x 80 (grid 5 from 4,
 * grid 10 from 8) and 48 x 48 (grid 3 from 4), against torchvision's encoder on
 * the bilinearly resampled position table. */
Test(vit_golden, position_resampling)
{
    golden gd;
    golden_make(&gd);
    rv_vit_model *a = load(&gd, "A", 0, 1);
    rv_vit_model *b = load(&gd, "B", 3, 1);
    free(run_case(&gd, a, "A", "img80", 80, 1, TOL_TORCH, NULL));
    free(run_case(&gd, a, "A", "img48", 48, 1, TOL_TORCH, NULL));
    free(run_case(&gd, b, "B", "img80", 80, 1, TOL_TORCH, NULL));
    rv_vit_free(&a);
    rv_vit_free(&b);
    golden_free(&gd);
}
