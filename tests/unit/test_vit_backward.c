/* test_vit_backward.c: the encoder's training forward and backward
 * (rv_vit_train.h) on a tiny model (D 32, 2 or 4 heads, 2 layers, M 64, T 2,
 * P 4, grid 3, F 16, W 4) with random weights (ringvit.* included) and token
 * sequences of ~60-200 interleaved CLS/video/audio tokens (rv_tok_layout_make),
 * about 30% of the video/audio tokens hidden behind a random mask token:
 *   - the training forward's outputs equal rv_vit_forward's (no hidden tokens)
 *     and the double reference's (hidden tokens);
 *   - cp = 1 gradients of L = sum <y, R> against central differences of the
 *     double reference forward (ref_vit_grad.c) for a random sample of entries
 *     of EVERY weight tensor and of the mask token: stored grid non-causal, and
 *     a resampled grid (16 px frames: grid 4 against the stored 3) causal;
 *   - cp = 2, 3, 4 x every applicable strategy (ring, allgather, ulysses with 4
 *     heads at 2 and 4): gradients summed over the ranks equal cp = 1's per
 *     tensor, causal (zigzag) and not (contiguous), with a rank left empty too;
 *   - a second backward adds the same again; FLOP counts; activation memory
 *     per rank falls with the rank count; argument errors. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_ops.h"
#include "ref_vit.h"
#include "ref_vit_grad.h"
#include "rv_tokens.h"
#include "rv_vit.h"
#include "vit_slice.h"
#include "rv_vit_train.h"

/* Tolerances, on normalised errors (rv_rel_err: max |got - want| / max |want|).
 * Same computations compare exactly: the training forward against rv_vit_forward
 * without hidden tokens (one block function), and a second backward into the same
 * buffers against twice the first (the same gradient added again: g + g = 2 g).
 * The f32 forward with hidden tokens against the naive double forward (as
 * test_vit_forward.c's TOL_REF: two layers of f32 roundings through LayerNorms). */
#define TOL_REF 1e-4
/* Analytic gradients (f32) against central differences (step 1e-6) of the double
 * forward: the f32 backward's rounding relative to entries of a sampled tensor
 * whose largest is >= MIN_GRAD, truncation ~1e-12. */
#define TOL_FD 1e-3
#define MIN_GRAD 1e-4
/* cp N against cp 1: outputs as test_vit_forward.c's TOL_CP; gradients summed over
 * ranks in f32 in another order (and dK/dV carried round the ring): ten times. */
#define TOL_CP_Y 1e-5
#define TOL_CP_GRAD 1e-4
/* What a real change (hiding tokens, a wrong entry, one rank's share) must change
 * at least; the wrong entry is moved by 1% of the largest. */
#define MIN_CHANGE_HIDE 1e-2
#define MIN_CHANGE 1e-3

/* ---- the model and the sequence ------------------------------------------------------ */

static rv_vit_config tiny_config(int heads)
{
    rv_vit_config c = {0};
    strcpy(c.preset, "custom");
    c.dim = 32, c.layers = 2, c.heads = heads, c.mlp = 64, c.eps = 1e-6f;
    c.tubelet = 2, c.patch = 4, c.grid = 3, c.audio_freq = 16, c.audio_time = 4, c.cls = 1;
    rv_vit_family_defaults(&c); /* ringvit's own family */
    return c;
}

/* Every weight random (LayerNorm weights near 1), ringvit.* tensors included. */
static rv_vit_model *random_model(const rv_vit_config *c, uint64_t seed)
{
    rv_vit_model *m = NULL;
    cr_assert_eq(rv_vit_new(c, &m), RV_OK, "%s", rv_last_error());
    ref_rng r = ref_rng_make(seed);
    ref_fill_uniform(&r, m->arena, m->arena_floats, -0.3f, 0.3f);
    for (int l = 0; l < c->layers; l++) {
        ref_fill_uniform(&r, m->layer[l].ln1_w, (size_t)c->dim, 0.8f, 1.2f);
        ref_fill_uniform(&r, m->layer[l].ln2_w, (size_t)c->dim, 0.8f, 1.2f);
    }
    ref_fill_uniform(&r, m->ln_w, (size_t)c->dim, 0.8f, 1.2f);
    return m;
}

/* The weight tensors of a model as (name, offset in the arena, length). */
typedef struct tensor {
    char name[32];
    size_t off, n;
} tensor;

static int tensors_of(const rv_vit_model *m, tensor *t)
{
    const rv_vit_config *c = &m->cfg;
    const size_t D = (size_t)c->dim, M = (size_t)c->mlp, G = (size_t)c->grid;
    const size_t vdim = (size_t)c->tubelet * c->patch * c->patch * 3;
    const size_t adim = (size_t)c->audio_freq * c->audio_time, bands = 128 / c->audio_freq;
    int n = 0;
#define T(nm, f, len) (snprintf(t[n].name, sizeof t[n].name, "%s", nm), \
                       t[n].off = (size_t)((f) - m->arena), t[n].n = (len), n++)
    T("video_w", m->video_w, D * vdim);
    T("video_b", m->video_b, D);
    T("audio_w", m->audio_w, D * adim);
    T("audio_b", m->audio_b, D);
    T("cls", m->cls, D);
    T("pos", m->pos, (1 + G * G) * D);
    T("band", m->band, bands * D);
    T("time_w", m->time_w, D * D);
    T("modality", m->modality, 3 * D);
    for (int l = 0; l < c->layers; l++) {
        const rv_vit_layer *w = &m->layer[l];
        const struct {
            const char *nm;
            const float *f;
            size_t len;
        } lt[12] = {{"ln1_w", w->ln1_w, D},          {"ln1_b", w->ln1_b, D},
                    {"qkv_w", w->qkv_w, 3 * D * D},  {"qkv_b", w->qkv_b, 3 * D},
                    {"proj_w", w->proj_w, D * D},    {"proj_b", w->proj_b, D},
                    {"ln2_w", w->ln2_w, D},          {"ln2_b", w->ln2_b, D},
                    {"fc1_w", w->fc1_w, M * D},      {"fc1_b", w->fc1_b, M},
                    {"fc2_w", w->fc2_w, D * M},      {"fc2_b", w->fc2_b, D}};
        for (int i = 0; i < 12; i++) {
            char nm[32];
            snprintf(nm, sizeof nm, "layer%d.%s", l, lt[i].nm);
            T(nm, lt[i].f, lt[i].len);
        }
    }
    T("ln_w", m->ln_w, D);
    T("ln_b", m->ln_b, D);
#undef T
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += t[i].n;
    cr_assert_eq(total, m->arena_floats, "the tensor list misses part of the arena");
    return n;
}

/* A whole sequence: its layout, per-token arrays, patches in token order, the
 * index of each token's patch, and which tokens are hidden. */
typedef struct seq {
    rv_tok_layout L;
    rv_vit_tokens all;
    uint8_t *mod, *hidden;
    int64_t *pos;
    double *time;
    float *video, *audio;
    int64_t *patch_of; /* (S) index into video or audio, -1 for CLS */
} seq;

/* size: frame side in pixels (12 gives the stored grid 3, 16 a grid of 4);
 * hide: the fraction of video/audio tokens hidden. */
static void seq_make(seq *s, int size, int64_t nframes, double audio_s, double hide,
                     uint64_t seed)
{
    memset(s, 0, sizeof *s);
    rv_tok_opts to;
    rv_tok_opts_default(&to);
    to.tubelet = 2, to.patch = 4, to.audio_freq = 16, to.audio_time = 4;
    to.audio_stride = 100; /* one audio step per second */
    to.window_s = 2.0, to.cls = 1;
    rv_ingest_opts io;
    rv_ingest_opts_default(&io);
    io.fps_num = 1, io.fps_den = 1, io.size = size;
    cr_assert_eq(rv_tok_layout_make(&to, &io, nframes, (int64_t)(audio_s * 16000), &s->L),
                 RV_OK, "%s", rv_last_error());
    const int64_t S = s->L.seq;
    s->mod = malloc((size_t)S);
    s->hidden = calloc((size_t)S, 1);
    s->pos = malloc(sizeof(int64_t) * 3 * (size_t)S);
    s->time = malloc(sizeof(double) * 2 * (size_t)S);
    s->patch_of = malloc(sizeof(int64_t) * (size_t)S);
    s->video = ref_alloc_f((size_t)(s->L.nvideo * s->L.video_dim));
    s->audio = ref_alloc_f((size_t)(s->L.naudio * s->L.audio_dim));
    ref_rng r = ref_rng_make(seed);
    ref_fill_normal(&r, s->video, (size_t)(s->L.nvideo * s->L.video_dim), 0.0f, 1.0f);
    ref_fill_normal(&r, s->audio, (size_t)(s->L.naudio * s->L.audio_dim), 0.0f, 1.0f);
    int64_t nv = 0, na = 0;
    for (int64_t i = 0; i < S; i++) {
        rv_token t;
        cr_assert_eq(rv_tok_info(&s->L, i, &t), RV_OK);
        s->mod[i] = (uint8_t)t.modality;
        memcpy(s->pos + 3 * i, t.pos, sizeof t.pos);
        memcpy(s->time + 2 * i, t.seq_time, sizeof t.seq_time);
        s->patch_of[i] = t.modality == RV_MOD_VIDEO ? nv++ : t.modality == RV_MOD_AUDIO ? na++ : -1;
        s->hidden[i] = t.modality != RV_MOD_CLS && ref_rng_uniform(&r) < hide;
    }
    s->all = (rv_vit_tokens){.len = S, .modality = s->mod, .pos = s->pos, .seq_time = s->time, .nvideo = nv, .video = s->video, .naudio = na, .audio = s->audio, .grid = s->L.grid, .audio_steps = s->L.steps};
}

static void seq_free(seq *s)
{
    free(s->mod), free(s->hidden), free(s->pos), free(s->time), free(s->patch_of);
    free(s->video), free(s->audio);
}

/* Rank r's slice of s in local order (vit_slice.h). */
typedef vit_slice slice;

static void slice_make(const seq *s, const rv_shard_plan *p, int r, slice *out)
{
    vit_slice_make(&s->all, s->patch_of, s->hidden, s->L.video_dim, s->L.audio_dim, p, r, out);
}

static void slice_free(slice *s)
{
    vit_slice_free(s);
}

/* ---- running forward_train + backward on N local ranks --------------------------------- */

typedef struct job {
    const rv_vit_model *m;
    const seq *s;
    rv_shard_plan plan;
    rv_cp_strategy strategy;
    int causal;
    int use_hidden;         /* pass s->hidden and the mask token */
    const float *mask;      /* (D) mask token */
    const float *R;         /* (S, D) dL/dy, global order */
    int backwards;          /* backward calls (0: forward only) */
    int plain_forward;      /* also run rv_vit_forward into y_plain */
    float *y, *y_plain;     /* (S, D) global order */
    rv_vit_model **grad;    /* (N) each rank's gradient */
    float *dmask;           /* (N, D) */
    rv_vit_stats *fstats, *bstats; /* (N) */
} job;

static rv_status rank_fn(rv_comm *comm, void *arg)
{
    job *j = arg;
    const int r = comm->rank, D = j->m->cfg.dim;
    slice sl;
    slice_make(j->s, &j->plan, r, &sl);
    const size_t n = (size_t)(sl.t.len * D);
    rv_backend *be = NULL;
    rv_vit_acts *acts = NULL;
    float *y = ref_alloc_f(n), *dy = ref_alloc_f(n);
    for (int64_t k = 0; k < sl.t.len; k++)
        memcpy(dy + k * D, j->R + sl.global[k] * D, sizeof(float) * D);
    rv_status st = rv_backend_cpu_create(1, &be);
    rv_vit_run run = {.be = be, .comm = comm, .plan = j->plan, .strategy = j->strategy, .causal = j->causal, .weights = NULL};
    if (st == RV_OK && j->plain_forward) {
        st = rv_vit_forward(j->m, &run, &sl.t, y, NULL);
        for (int64_t k = 0; st == RV_OK && k < sl.t.len; k++)
            memcpy(j->y_plain + sl.global[k] * D, y + k * D, sizeof(float) * D);
    }
    if (st == RV_OK)
        st = rv_vit_forward_train(j->m, &run, &sl.t, j->use_hidden ? sl.hidden : NULL,
                                  j->use_hidden ? j->mask : NULL, y, &acts, &j->fstats[r]);
    for (int b = 0; st == RV_OK && b < j->backwards; b++)
        st = rv_vit_backward(j->m, &run, &sl.t, acts, dy, j->grad[r], j->dmask + r * D,
                             &j->bstats[r]);
    if (st == RV_OK)
        for (int64_t k = 0; k < sl.t.len; k++)
            memcpy(j->y + sl.global[k] * D, y + k * D, sizeof(float) * D);
    rv_vit_acts_free(&acts);
    cr_assert_null(acts);
    rv_backend_free(&be);
    free(y), free(dy);
    slice_free(&sl);
    return st;
}

static void run_job(job *j, const rv_vit_model *m, const seq *s, int n, rv_cp_strategy strategy,
                    int causal, int use_hidden, const float *mask, const float *R, int backwards)
{
    memset(j, 0, sizeof *j);
    j->m = m, j->s = s, j->strategy = strategy, j->causal = causal;
    j->use_hidden = use_hidden, j->mask = mask, j->R = R, j->backwards = backwards;
    cr_assert_eq(rv_shard_plan_make(causal ? RV_SHARD_ZIGZAG : RV_SHARD_CONTIGUOUS, n, s->all.len,
                                    &j->plan), RV_OK);
    const size_t D = (size_t)m->cfg.dim;
    j->y = ref_alloc_f((size_t)s->all.len * D);
    j->y_plain = ref_alloc_f((size_t)s->all.len * D);
    j->grad = calloc((size_t)n, sizeof *j->grad);
    for (int r = 0; r < n; r++) {
        cr_assert_eq(rv_vit_new(&m->cfg, &j->grad[r]), RV_OK);
        ref_rng g = ref_rng_make(7 + r); /* garbage first: grad_zero must clear it all */
        ref_fill_uniform(&g, j->grad[r]->arena, j->grad[r]->arena_floats, -1.0f, 1.0f);
        rv_vit_grad_zero(j->grad[r]);
    }
    j->dmask = ref_alloc_f((size_t)n * D);
    j->fstats = calloc((size_t)n, sizeof(rv_vit_stats));
    j->bstats = calloc((size_t)n, sizeof(rv_vit_stats));
}

static void job_run(job *j, int n)
{
    rv_status st = rv_local_run(n, rank_fn, j);
    cr_assert_eq(st, RV_OK, "%s cp=%d causal=%d S=%lld: %s", rv_cp_strategy_name(j->strategy), n,
                 j->causal, (long long)j->s->all.len, rv_last_error());
}

static void job_free(job *j)
{
    for (int r = 0; r < j->plan.ranks; r++)
        rv_vit_free(&j->grad[r]);
    free(j->grad), free(j->y), free(j->y_plain), free(j->dmask), free(j->fstats), free(j->bstats);
}

/* The gradient summed over the ranks, (arena_floats) doubles. */
static double *grad_sum(const job *j)
{
    const size_t n = j->m->arena_floats;
    double *g = ref_alloc_d(n);
    for (int r = 0; r < j->plan.ranks; r++)
        for (size_t i = 0; i < n; i++)
            g[i] += j->grad[r]->arena[i];
    return g;
}

static double *dmask_sum(const job *j)
{
    const int D = j->m->cfg.dim;
    double *g = ref_alloc_d((size_t)D);
    for (int r = 0; r < j->plan.ranks; r++)
        for (int i = 0; i < D; i++)
            g[i] += j->dmask[r * D + i];
    return g;
}

static float *random_f(size_t n, uint64_t seed, float lo, float hi)
{
    float *x = ref_alloc_f(n);
    ref_rng r = ref_rng_make(seed);
    ref_fill_uniform(&r, x, n, lo, hi);
    return x;
}

static int count_hidden(const seq *s)
{
    int n = 0;
    for (int64_t i = 0; i < s->all.len; i++)
        n += s->hidden[i];
    return n;
}

/* ---- 1. the training forward's outputs -------------------------------------------------- */

Test(vit_backward, forward_train_matches_forward)
{
    rv_vit_config c = tiny_config(2);
    rv_vit_model *m = random_model(&c, 11);
    seq s;
    seq_make(&s, 16, 6, 5.5, 0.3, 13); /* grid 4: resampled positions */
    const size_t n = (size_t)s.all.len * c.dim;
    float *mask = random_f((size_t)c.dim, 15, -0.5f, 0.5f);
    float *R = random_f(n, 17, -1.0f, 1.0f);
    for (int causal = 0; causal <= 1; causal++)
        for (int N = 1; N <= 3; N += 2) {
            job j;
            run_job(&j, m, &s, N, RV_CP_RING, causal, 0, NULL, R, 0);
            j.plain_forward = 1;
            job_run(&j, N);
            double *want = ref_dup_d(j.y_plain, n);
            double e = rv_rel_err(j.y, want, n);
            cr_expect_arr_eq(j.y, j.y_plain, n * sizeof(float), "causal %d cp %d: forward_train "
                             "differs from forward by %.3g", causal, N, e);
            free(want);
            job_free(&j);
        }
    /* Hidden tokens: against the double reference with the same mask token. */
    cr_assert_gt(count_hidden(&s), 10);
    double *maskd = ref_dup_d(mask, (size_t)c.dim), *w = ref_dup_d(m->arena, m->arena_floats);
    double *want = ref_alloc_d(n), *plain = ref_alloc_d(n);
    for (int causal = 0; causal <= 1; causal++) {
        ref_vit_forward_w(m, w, &s.all, causal, s.hidden, maskd, want);
        ref_vit_forward(m, &s.all, causal, plain);
        job j;
        run_job(&j, m, &s, 2, RV_CP_ALLGATHER, causal, 1, mask, R, 0);
        job_run(&j, 2);
        double e = rv_rel_err(j.y, want, n);
        cr_expect_leq(e, TOL_REF, "causal %d hidden: error %.3g against double", causal, e);
        cr_expect_gt(rv_rel_err(j.y, plain, n), MIN_CHANGE_HIDE, "hiding tokens changed nothing");
        job_free(&j);
    }
    free(maskd), free(w), free(want), free(plain), free(mask), free(R);
    seq_free(&s);
    rv_vit_free(&m);
}

/* ---- 2. gradients against finite differences of the double reference -------------------- */

#define FD_SAMPLES 10

static void fd_case(int size, int64_t nframes, double audio_s, int causal, uint64_t seed)
{
    rv_vit_config c = tiny_config(2);
    rv_vit_model *m = random_model(&c, seed);
    seq s;
    seq_make(&s, size, nframes, audio_s, 0.3, seed + 1);
    const int64_t S = s.all.len;
    const size_t n = (size_t)S * c.dim;
    cr_assert(S >= 50 && S <= 120, "S = %lld", (long long)S);
    cr_assert_gt(count_hidden(&s), 5);
    float *mask = random_f((size_t)c.dim, seed + 2, -0.5f, 0.5f);
    float *R = random_f(n, seed + 3, -1.0f, 1.0f);
    job j;
    run_job(&j, m, &s, 1, RV_CP_RING, causal, 1, mask, R, 1);
    job_run(&j, 1);

    double *w = ref_dup_d(m->arena, m->arena_floats), *maskd = ref_dup_d(mask, (size_t)c.dim);
    double *Rd = ref_dup_d(R, n);
    tensor t[64];
    int nt = tensors_of(m, t);
    /* The mask token as one more "tensor", past the arena. */
    snprintf(t[nt].name, sizeof t[nt].name, "mask_token");
    t[nt].off = m->arena_floats, t[nt].n = (size_t)c.dim;
    nt++;
    ref_rng r = ref_rng_make(seed + 4);
    for (int i = 0; i < nt; i++) {
        int64_t idx[FD_SAMPLES];
        double num[FD_SAMPLES], ana[FD_SAMPLES];
        int k = t[i].n < FD_SAMPLES ? (int)t[i].n : FD_SAMPLES;
        for (int e = 0; e < k; e++) {
            idx[e] = (int64_t)(t[i].off + (size_t)(ref_rng_u64(&r) % t[i].n));
            ana[e] = idx[e] < (int64_t)m->arena_floats ? j.grad[0]->arena[idx[e]]
                                                       : j.dmask[idx[e] - m->arena_floats];
        }
        ref_vit_fd_grad(m, w, maskd, &s.all, causal, s.hidden, Rd, idx, k, 1e-6, num);
        double e = rv_rel_err_d(ana, num, (size_t)k), big = 0;
        for (int q = 0; q < k; q++)
            big = fmax(big, fabs(num[q]));
        cr_log_info("grid %d causal %d %-14s err %.3g (|grad| up to %.3g)", s.all.grid, causal,
                    t[i].name, e, big);
        cr_expect_gt(big, MIN_GRAD, "grid %d causal %d %s: the sampled gradient is zero", s.all.grid,
                     causal, t[i].name);
        cr_expect_leq(e, TOL_FD, "grid %d causal %d %s: analytic vs numeric error %.3g "
                      "(first entry %.6g vs %.6g)", s.all.grid, causal, t[i].name, e, ana[0],
                      num[0]);
    }
    free(w), free(maskd), free(Rd), free(mask), free(R);
    job_free(&j);
    seq_free(&s);
    rv_vit_free(&m);
}

/* 12 px frames: the stored 3 x 3 grid; not causal. */
Test(vit_backward, gradients_match_finite_differences) { fd_case(12, 6, 3.0, 0, 21); }
/* 16 px frames: a 4 x 4 grid resampled from the stored 3 x 3; causal. */
Test(vit_backward, gradients_match_finite_differences_resampled_causal)
{
    fd_case(16, 4, 3.0, 1, 31);
}

/* The check can fail: a wrong gradient (one entry moved) is caught. */
Test(vit_backward, finite_difference_check_sees_a_wrong_entry)
{
    rv_vit_config c = tiny_config(2);
    rv_vit_model *m = random_model(&c, 41);
    seq s;
    seq_make(&s, 12, 4, 2.0, 0.0, 43);
    const size_t n = (size_t)s.all.len * c.dim;
    float *R = random_f(n, 45, -1.0f, 1.0f);
    job j;
    run_job(&j, m, &s, 1, RV_CP_RING, 0, 0, NULL, R, 1);
    job_run(&j, 1);
    double *w = ref_dup_d(m->arena, m->arena_floats), *Rd = ref_dup_d(R, n);
    int64_t idx[3] = {m->layer[1].fc1_w - m->arena, m->layer[1].fc1_w - m->arena + 5,
                      m->layer[1].fc1_w - m->arena + 77};
    double num[3], ana[3];
    ref_vit_fd_grad(m, w, NULL, &s.all, 0, NULL, Rd, idx, 3, 1e-6, num);
    for (int e = 0; e < 3; e++)
        ana[e] = j.grad[0]->arena[idx[e]];
    cr_expect_leq(rv_rel_err_d(ana, num, 3), TOL_FD);
    double big = fmax(fabs(num[0]), fmax(fabs(num[1]), fabs(num[2])));
    ana[1] += 0.01 * big; /* one entry off by 1% of the largest */
    cr_expect_gt(rv_rel_err_d(ana, num, 3), TOL_FD);
    free(w), free(Rd), free(R);
    job_free(&j);
    seq_free(&s);
    rv_vit_free(&m);
}

/* ---- 4. cp = 2..4 x strategies: summed gradients equal cp = 1's -------------------------- */

static void cp_sweep(int causal)
{
    rv_vit_config c = tiny_config(4); /* ulysses at cp 2 and 4 */
    rv_vit_model *m = random_model(&c, 51 + causal);
    seq s;
    seq_make(&s, 16, 6, 7.5, 0.3, 53 + causal); /* grid 4: resampled positions */
    const size_t n = (size_t)s.all.len * c.dim, P = m->arena_floats;
    float *mask = random_f((size_t)c.dim, 55, -0.5f, 0.5f);
    float *R = random_f(n, 57, -1.0f, 1.0f);
    job base;
    run_job(&base, m, &s, 1, RV_CP_RING, causal, 1, mask, R, 1);
    job_run(&base, 1);
    double *want = ref_dup_d(base.grad[0]->arena, P), *want_mask = ref_dup_d(base.dmask, (size_t)c.dim);
    double *want_y = ref_dup_d(base.y, n);
    tensor t[64];
    int nt = tensors_of(m, t);
    for (int N = 2; N <= 4; N++)
        for (int st = RV_CP_RING; st <= RV_CP_ULYSSES; st++) {
            if (st == RV_CP_ULYSSES && c.heads % N != 0)
                continue;
            const char *sn = rv_cp_strategy_name((rv_cp_strategy)st);
            job j;
            run_job(&j, m, &s, N, (rv_cp_strategy)st, causal, 1, mask, R, 1);
            job_run(&j, N);
            cr_expect_leq(rv_rel_err(j.y, want_y, n), TOL_CP_Y, "causal %d cp %d %s: outputs differ",
                          causal, N, sn);
            double *g = grad_sum(&j), *gm = dmask_sum(&j), worst = 0;
            for (int i = 0; i < nt; i++) {
                double e = rv_rel_err_d(g + t[i].off, want + t[i].off, t[i].n);
                worst = fmax(worst, e);
                cr_expect_leq(e, TOL_CP_GRAD, "causal %d cp %d %s: %s differs by %.3g", causal, N, sn,
                              t[i].name, e);
            }
            double em = rv_rel_err_d(gm, want_mask, (size_t)c.dim);
            cr_expect_leq(em, TOL_CP_GRAD, "causal %d cp %d %s: dmask_token differs by %.3g", causal, N,
                          sn, em);
            cr_log_info("causal %d cp %d %s: worst tensor err %.3g, mask %.3g", causal, N, sn,
                        worst, em);
            /* Every rank holds a share: no rank's gradient is the whole. */
            for (int r = 0; r < N; r++)
                cr_expect_gt(rv_rel_err(j.grad[r]->arena, want, P), MIN_CHANGE, "rank %d holds all", r);
            free(g), free(gm);
            job_free(&j);
        }
    free(want), free(want_mask), free(want_y), free(mask), free(R);
    job_free(&base);
    seq_free(&s);
    rv_vit_free(&m);
}

Test(vit_backward, cp_gradients_match_single_rank) { cp_sweep(0); }
Test(vit_backward, cp_gradients_match_single_rank_causal) { cp_sweep(1); }

/* Fewer tokens than ranks: an empty rank still takes part in every collective. */
Test(vit_backward, short_sequence_leaves_a_rank_empty)
{
    rv_vit_config c = tiny_config(2);
    rv_vit_model *m = random_model(&c, 61);
    seq s;
    seq_make(&s, 12, 2, 0.0, 0.3, 63);
    s.all.len = 3, s.all.nvideo = 2, s.all.naudio = 0;
    s.hidden[1] = 1, s.hidden[2] = 0;
    const size_t n = (size_t)s.all.len * c.dim;
    float *mask = random_f((size_t)c.dim, 65, -0.5f, 0.5f);
    float *R = random_f(n, 67, -1.0f, 1.0f);
    for (int causal = 0; causal <= 1; causal++) {
        job base, j;
        run_job(&base, m, &s, 1, RV_CP_RING, causal, 1, mask, R, 1);
        job_run(&base, 1);
        run_job(&j, m, &s, 4, RV_CP_RING, causal, 1, mask, R, 1);
        job_run(&j, 4);
        double *want = ref_dup_d(base.grad[0]->arena, m->arena_floats), *g = grad_sum(&j);
        double e = rv_rel_err_d(g, want, m->arena_floats);
        cr_expect_leq(e, TOL_CP_GRAD, "causal %d: cp 4 with empty ranks differs by %.3g", causal, e);
        double *wm = ref_dup_d(base.dmask, (size_t)c.dim), *gm = dmask_sum(&j);
        cr_expect_leq(rv_rel_err_d(gm, wm, (size_t)c.dim), TOL_CP_GRAD);
        free(want), free(g), free(wm), free(gm);
        job_free(&base);
        job_free(&j);
    }
    free(mask), free(R);
    seq_free(&s);
    rv_vit_free(&m);
}

/* ---- 5. accumulation, FLOPs, memory, errors ------------------------------------------------ */

Test(vit_backward, backward_adds_into_the_gradient)
{
    rv_vit_config c = tiny_config(2);
    rv_vit_model *m = random_model(&c, 71);
    seq s;
    seq_make(&s, 12, 4, 3.5, 0.3, 73);
    const size_t n = (size_t)s.all.len * c.dim, P = m->arena_floats;
    float *mask = random_f((size_t)c.dim, 75, -0.5f, 0.5f);
    float *R = random_f(n, 77, -1.0f, 1.0f);
    job one, two;
    run_job(&one, m, &s, 2, RV_CP_RING, 1, 1, mask, R, 1);
    job_run(&one, 2);
    run_job(&two, m, &s, 2, RV_CP_RING, 1, 1, mask, R, 2);
    job_run(&two, 2);
    for (int r = 0; r < 2; r++) {
        double *want = ref_dup_d(one.grad[r]->arena, P);
        for (size_t i = 0; i < P; i++)
            want[i] *= 2;
        double e = rv_rel_err(two.grad[r]->arena, want, P);
        cr_expect_eq(e, 0.0, "rank %d: two backwards are not twice one (%.3g)", r, e);
        double *wm = ref_dup_d(one.dmask + r * c.dim, (size_t)c.dim);
        for (int i = 0; i < c.dim; i++)
            wm[i] *= 2;
        cr_expect_eq(rv_rel_err(two.dmask + r * c.dim, wm, (size_t)c.dim), 0.0);
        free(want), free(wm);
    }
    free(mask), free(R);
    job_free(&one);
    job_free(&two);
    seq_free(&s);
    rv_vit_free(&m);
}

Test(vit_backward, flops_and_memory)
{
    rv_vit_config c = tiny_config(2);
    rv_vit_model *m = random_model(&c, 81);
    seq s;
    seq_make(&s, 12, 16, 15.5, 0.0, 83);
    const size_t n = (size_t)s.all.len * c.dim;
    float *R = random_f(n, 85, -1.0f, 1.0f);
    size_t peak[2] = {0, 0}, fpeak[2] = {0, 0};
    for (int causal = 0; causal <= 1; causal++)
        for (int k = 0; k < 2; k++) {
            const int N = k ? 4 : 1;
            job j;
            run_job(&j, m, &s, N, k ? RV_CP_ALLGATHER : RV_CP_RING, causal, 0, NULL, R, 1);
            job_run(&j, N);
            double fsum = 0, bsum = 0;
            for (int r = 0; r < N; r++) {
                fsum += j.fstats[r].flops, bsum += j.bstats[r].flops;
                peak[k] = j.bstats[r].peak_bytes > peak[k] ? j.bstats[r].peak_bytes : peak[k];
                fpeak[k] = j.fstats[r].peak_bytes > fpeak[k] ? j.fstats[r].peak_bytes : fpeak[k];
            }
            const rv_vit_tokens *a = &s.all;
            double fw = rv_vit_forward_flops(&c, a->len, a->nvideo, a->naudio, causal);
            double bw = rv_vit_backward_flops(&c, a->len, a->nvideo, a->naudio, causal);
            /* Written out: embedding weight GEMMs (time, video, audio), then per layer
             * twice the forward GEMMs and 10 D per visible pair. */
            double S = (double)a->len, D = c.dim, M = c.mlp;
            double pairs = causal ? S * (S + 1) / 2 : S * S;
            double hand = 2 * S * D * D + 2.0 * a->nvideo * 96 * D + 2.0 * a->naudio * 64 * D +
                          c.layers * (2 * (2 * S * 4 * D * D + 4 * S * D * M) + 10 * D * pairs);
            /* whole numbers below 2^53: exact */
            cr_expect_eq(bw, hand, "backward flops %.17g, by hand %.17g", bw, hand);
            cr_expect_eq(fsum, fw, "cp %d: forward_train counted %.17g, want %.17g", N, fsum, fw);
            cr_expect_eq(bsum, bw, "cp %d causal %d: backward counted %.17g, want %.17g", N,
                         causal, bsum, bw);
            job_free(&j);
        }
    /* The activations are per slice: (L + 1 + L (1 + 3 + 1)) (len, D) + L (len, M) at least. */
    size_t acts = sizeof(float) * (size_t)s.all.len * (size_t)((3 + 2 * 5) * 32 + 2 * 64);
    cr_expect_geq(fpeak[0], acts);
    cr_expect_leq((double)fpeak[1], 0.5 * (double)fpeak[0], "cp 4 forward peak %zu vs cp 1 %zu",
                  fpeak[1], fpeak[0]);
    cr_expect_leq((double)peak[1], 0.5 * (double)peak[0], "cp 4 backward peak %zu vs cp 1 %zu",
                  peak[1], peak[0]);
    free(R);
    seq_free(&s);
    rv_vit_free(&m);
}

typedef struct bad_arg {
    const rv_vit_model *m;
    const seq *s;
    const float *mask;
    rv_status fwd_nomask, bwd_nomask, bwd_len, bwd_cfg;
    char msg[4][256];
} bad_arg;

static rv_status bad_fn(rv_comm *comm, void *arg)
{
    bad_arg *b = arg;
    rv_backend *be = NULL;
    cr_assert_eq(rv_backend_cpu_create(1, &be), RV_OK);
    const rv_vit_tokens *t = &b->s->all;
    rv_shard_plan p;
    rv_shard_plan_make(RV_SHARD_CONTIGUOUS, 1, t->len, &p);
    rv_vit_run run = {.be = be, .comm = comm, .plan = p, .strategy = RV_CP_RING, .causal = 0, .weights = NULL};
    const int D = b->m->cfg.dim;
    float *y = ref_alloc_f((size_t)t->len * D), dmask[64] = {0};
    rv_vit_acts *acts = NULL;
    rv_vit_model *g = NULL, *g2 = NULL;
    cr_assert_eq(rv_vit_new(&b->m->cfg, &g), RV_OK);
    b->fwd_nomask = rv_vit_forward_train(b->m, &run, t, b->s->hidden, NULL, y, &acts, NULL);
    snprintf(b->msg[0], sizeof b->msg[0], "%s", rv_last_error());
    cr_assert_null(acts);
    cr_assert_eq(rv_vit_forward_train(b->m, &run, t, b->s->hidden, b->mask, y, &acts, NULL), RV_OK);
    b->bwd_nomask = rv_vit_backward(b->m, &run, t, acts, y, g, NULL, NULL);
    snprintf(b->msg[1], sizeof b->msg[1], "%s", rv_last_error());
    /* The activations of another slice (a plan and tokens one shorter). */
    rv_vit_tokens t2 = *t;
    t2.len--;
    t2.naudio -= t->modality[t->len - 1] == RV_MOD_AUDIO;
    t2.nvideo -= t->modality[t->len - 1] == RV_MOD_VIDEO;
    rv_vit_run run2 = run;
    rv_shard_plan_make(RV_SHARD_CONTIGUOUS, 1, t2.len, &run2.plan);
    b->bwd_len = rv_vit_backward(b->m, &run2, &t2, acts, y, g, dmask, NULL);
    snprintf(b->msg[2], sizeof b->msg[2], "%s", rv_last_error());
    /* A gradient buffer of another config. */
    rv_vit_config c2 = b->m->cfg;
    c2.mlp = 32;
    cr_assert_eq(rv_vit_new(&c2, &g2), RV_OK);
    b->bwd_cfg = rv_vit_backward(b->m, &run, t, acts, y, g2, dmask, NULL);
    snprintf(b->msg[3], sizeof b->msg[3], "%s", rv_last_error());
    rv_vit_acts_free(&acts);
    rv_vit_acts_free(&acts); /* a no-op */
    rv_vit_free(&g), rv_vit_free(&g2);
    free(y);
    rv_backend_free(&be);
    return RV_OK;
}

Test(vit_backward, bad_arguments_are_invalid)
{
    rv_vit_config c = tiny_config(2);
    rv_vit_model *m = random_model(&c, 91);
    seq s;
    seq_make(&s, 12, 2, 1.0, 0.5, 93);
    cr_assert_gt(count_hidden(&s), 0);
    float *mask = random_f((size_t)c.dim, 95, -0.5f, 0.5f);
    bad_arg b = {m, &s, mask, RV_OK, RV_OK, RV_OK, RV_OK, {""}};
    cr_assert_eq(rv_local_run(1, bad_fn, &b), RV_OK);
    cr_expect_eq(b.fwd_nomask, RV_ERR_INVALID, "%s", b.msg[0]);
    cr_expect(strstr(b.msg[0], "mask_token") != NULL, "%s", b.msg[0]);
    cr_expect_eq(b.bwd_nomask, RV_ERR_INVALID, "%s", b.msg[1]);
    cr_expect(strstr(b.msg[1], "dmask_token") != NULL, "%s", b.msg[1]);
    cr_expect_eq(b.bwd_len, RV_ERR_INVALID, "%s", b.msg[2]);
    cr_expect_eq(b.bwd_cfg, RV_ERR_INVALID, "%s", b.msg[3]);
    free(mask);
    seq_free(&s);
    rv_vit_free(&m);
}
