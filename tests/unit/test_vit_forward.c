/* test_vit_forward.c: the encoder forward with context parallelism (rv_vit.h)
 * on a tiny model (D 32, 2 heads, 2 layers, M 64, T 2, P 4, grid 3, F 16, W 4)
 * and token sequences of ~150-300 interleaved CLS/video/audio tokens laid out by
 * rv_tok_layout_make, random patches and random weights (ringvit.* included):
 *   - cp = 1 against the naive double forward of the whole sequence (ref_vit.c),
 *     causal or not, with or without CLS, stored grid or a resampled one;
 *   - cp = 1..4 x every applicable strategy (ring, allgather; ulysses where the
 *     4 heads divide): per-token and pooled outputs equal cp = 1's; sequences
 *     shorter than the rank count (empty ranks);
 *   - pooling against the reference pooling (segments of 10 s and 1.5 s, tokens
 *     past the last segment, empty segments, end_s);
 *   - the time code against its formula, and equal times giving equal temporal
 *     contributions to audio and video tokens;
 *   - FLOP counts, activation memory scaling and argument errors. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_ops.h"
#include "ref_vit.h"
#include "rv_tokens.h"
#include "rv_vit.h"
#include "vit_slice.h"

/* Tolerances, on normalised errors (rv_rel_err: max |got - want| / max |want|).
 * The f32 forward against the naive double forward: two layers of D = 32 GEMMs,
 * attention over S <= 300 tokens, LayerNorms and GELUs, each a few f32 roundings
 * (epsilon 1.2e-7) amplified through the residual stream and the LayerNorms. */
#define TOL_REF 1e-4
/* With every block weight zero (only the time code and a LayerNorm): one GEMM. */
#define TOL_REF_TIME_ONLY 1e-5
/* cp N (any strategy, any span) against cp 1 or another strategy: attention's
 * key sums split into per-rank blocks merged by log-sum-exp, sqrt(S) * eps per
 * layer, about 2e-6 at S = 300; the pooled means add sqrt(S) * eps more. */
#define TOL_CP 1e-5
/* The library's pooling of the very outputs against the double pooling: f32 means
 * of at most a few hundred rows, sqrt(n) * eps. */
#define TOL_POOL 1e-6
/* Two tokens with the same time and no other input: the same arithmetic, in
 * other rows of the GEMMs (whose blocking may differ by row). */
#define TOL_SAME_TIME 1e-6
/* The time code (sin and cos, amplitude 1: its scale) against the double formula:
 * the phase 2 pi t / period rounded for t up to 86 400 s, then sin in f32. */
#define TOL_TIME_CODE 2e-6
/* Segment bounds in seconds: relative to the time, floored at 1 s. */
#define TOL_TIME 1e-12
#define TIME_TOL(t) (TOL_TIME * fmax(fabs(t), 1.0))
/* What a real change of the inputs (a weight, a span) must change at least. */
#define MIN_CHANGE 1e-3

/* ---- the model and the sequence ------------------------------------------------------ */

static rv_vit_config tiny_config(int cls)
{
    rv_vit_config c = {0};
    strcpy(c.preset, "custom");
    c.dim = 32, c.layers = 2, c.heads = 2, c.mlp = 64, c.eps = 1e-6f;
    c.tubelet = 2, c.patch = 4, c.grid = 3, c.audio_freq = 16, c.audio_time = 4, c.cls = cls;
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

/* A whole sequence: its layout, per-token arrays, patches in token order, and the
 * index of each token's patch. */
typedef struct seq {
    rv_tok_layout L;
    rv_vit_tokens all;
    uint8_t *mod;
    int64_t *pos;
    double *time;
    float *video, *audio;
    int64_t *patch_of; /* (S) index into video or audio, -1 for CLS */
    double end_s;
} seq;

/* size: frame side in pixels (12 gives the stored grid 3, 16 a grid of 4). */
static void seq_make(seq *s, int cls, int size, int64_t nframes, double audio_s, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    rv_tok_opts to;
    rv_tok_opts_default(&to);
    to.tubelet = 2, to.patch = 4, to.audio_freq = 16, to.audio_time = 4;
    to.audio_stride = 100; /* one audio step per second */
    to.window_s = 2.0, to.cls = cls;
    rv_ingest_opts io;
    rv_ingest_opts_default(&io);
    io.fps_num = 1, io.fps_den = 1, io.size = size;
    cr_assert_eq(rv_tok_layout_make(&to, &io, nframes, (int64_t)(audio_s * 16000), &s->L),
                 RV_OK, "%s", rv_last_error());
    const int64_t S = s->L.seq;
    s->mod = malloc((size_t)S);
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
        s->end_s = fmax(s->end_s, t.seq_time[1]);
    }
    cr_assert_eq(nv, s->L.nvideo);
    cr_assert_eq(na, s->L.naudio);
    s->all = (rv_vit_tokens){.len = S, .modality = s->mod, .pos = s->pos, .seq_time = s->time, .nvideo = nv, .video = s->video, .naudio = na, .audio = s->audio, .grid = s->L.grid, .audio_steps = s->L.steps};
}

static void seq_free(seq *s)
{
    free(s->mod), free(s->pos), free(s->time), free(s->patch_of), free(s->video), free(s->audio);
}

/* Rank r's slice of s in local order (vit_slice.h). */
typedef vit_slice slice;

static void slice_make(const seq *s, const rv_shard_plan *p, int r, slice *out)
{
    vit_slice_make(&s->all, s->patch_of, NULL, s->L.video_dim, s->L.audio_dim, p, r, out);
}

static void slice_free(slice *s)
{
    vit_slice_free(s);
}

/* ---- running the forward on N local ranks ---------------------------------------------- */

typedef struct job {
    const rv_vit_model *m;
    const seq *s;
    rv_shard_plan plan;
    rv_cp_strategy strategy;
    int causal;
    rv_span span;          /* attention span (zero: full) */
    rv_vit_pool_opts pool;
    float *y;              /* (S, D) global order, written by every rank */
    rv_vit_pooled *pooled; /* (N) each rank's */
    rv_vit_stats *stats;   /* (N) */
} job;

static rv_status rank_fn(rv_comm *comm, void *arg)
{
    job *j = arg;
    const int r = comm->rank, D = j->m->cfg.dim;
    slice sl;
    slice_make(j->s, &j->plan, r, &sl);
    rv_backend *be = NULL;
    float *y = ref_alloc_f((size_t)(sl.t.len * D));
    rv_status st = rv_backend_cpu_create(1, &be);
    if (st == RV_OK) {
        rv_vit_run run = {.be = be, .comm = comm, .plan = j->plan, .strategy = j->strategy,
                          .causal = j->causal, .weights = NULL, .span = j->span};
        st = rv_vit_forward(j->m, &run, &sl.t, y, &j->stats[r]);
    }
    if (st == RV_OK)
        st = rv_vit_pool(comm, &sl.t, y, D, &j->pool, &j->pooled[r]);
    if (st == RV_OK)
        for (int64_t k = 0; k < sl.t.len; k++)
            memcpy(j->y + sl.global[k] * D, y + k * D, sizeof(float) * D);
    rv_backend_free(&be);
    free(y);
    slice_free(&sl);
    return st;
}

/* Runs the forward and pooling of s on n ranks (segments every hop_s, 0: adjacent);
 * j->y etc. are allocated here. */
static void run_job_span(job *j, const rv_vit_model *m, const seq *s, int n,
                         rv_cp_strategy strategy, int causal, rv_span span, double segment_s,
                         double hop_s, double end_s)
{
    memset(j, 0, sizeof *j);
    j->m = m, j->s = s, j->strategy = strategy, j->causal = causal, j->span = span;
    j->pool = (rv_vit_pool_opts){.segment_s = segment_s, .end_s = end_s, .hop_s = hop_s};
    int zigzag = causal && span.kind == RV_SPAN_FULL;
    cr_assert_eq(rv_shard_plan_make(zigzag ? RV_SHARD_ZIGZAG : RV_SHARD_CONTIGUOUS, n, s->all.len,
                                    &j->plan), RV_OK);
    j->y = ref_alloc_f((size_t)(s->all.len * m->cfg.dim));
    j->pooled = calloc((size_t)n, sizeof(rv_vit_pooled));
    j->stats = calloc((size_t)n, sizeof(rv_vit_stats));
    rv_status st = rv_local_run(n, rank_fn, j);
    cr_assert_eq(st, RV_OK, "%s cp=%d causal=%d S=%lld: %s", rv_cp_strategy_name(strategy), n,
                 causal, (long long)s->all.len, rv_last_error());
}

static void run_job_hop(job *j, const rv_vit_model *m, const seq *s, int n,
                        rv_cp_strategy strategy, int causal, double segment_s, double hop_s,
                        double end_s)
{
    run_job_span(j, m, s, n, strategy, causal, (rv_span){RV_SPAN_FULL, 0}, segment_s, hop_s,
                 end_s);
}

static void run_job(job *j, const rv_vit_model *m, const seq *s, int n, rv_cp_strategy strategy,
                    int causal, double segment_s, double end_s)
{
    run_job_hop(j, m, s, n, strategy, causal, segment_s, 0.0, end_s);
}

static void job_free(job *j)
{
    for (int r = 0; j->pooled && r < j->plan.ranks; r++)
        rv_vit_pooled_free(&j->pooled[r]);
    free(j->y), free(j->pooled), free(j->stats);
}

/* ---- comparisons ------------------------------------------------------------------------- */

/* Relative error of a float array against another float array taken as truth. */
static double rel_f(const float *got, const float *want, size_t n)
{
    double *w = ref_dup_d(want, n);
    double e = rv_rel_err(got, w, n);
    free(w);
    return e;
}

static void expect_pooled_equal(const rv_vit_pooled *a, const rv_vit_pooled *b, double tol,
                                const char *what)
{
    const size_t D = (size_t)b->dim, G = (size_t)b->segments;
    cr_assert_eq(a->dim, b->dim, "%s", what);
    cr_assert_eq(a->segments, b->segments, "%s", what);
    cr_assert_eq(a->tokens, b->tokens, "%s", what);
    cr_assert_eq(a->has_cls, b->has_cls, "%s", what);
    cr_assert_eq(a->modality_tokens[0], b->modality_tokens[0], "%s", what);
    cr_assert_eq(a->modality_tokens[1], b->modality_tokens[1], "%s", what);
    for (size_t g = 0; g < G; g++) {
        cr_assert_eq(a->segment_tokens[g], b->segment_tokens[g], "%s segment %zu", what, g);
        cr_assert_eq(a->segment_start[g], b->segment_start[g], "%s", what);
        cr_assert_eq(a->segment_end[g], b->segment_end[g], "%s", what);
    }
    double e[4] = {rel_f(a->global, b->global, D), rel_f(a->segment, b->segment, G * D),
                   rel_f(a->modality_mean, b->modality_mean, 2 * D), rel_f(a->cls, b->cls, D)};
    for (int i = 0; i < 4; i++)
        cr_assert_leq(e[i], tol, "%s: pooled part %d differs by %.3g", what, i, e[i]);
}

static void expect_pooled_ref(const rv_vit_pooled *a, const ref_vit_pooled *w, int dim,
                              double tol, const char *what)
{
    const size_t D = (size_t)dim, G = (size_t)w->segments;
    cr_assert_eq(a->dim, dim);
    cr_assert_eq(a->segments, w->segments, "%s: %lld segments, want %lld", what,
                 (long long)a->segments, (long long)w->segments);
    cr_assert_eq(a->tokens, w->tokens, "%s", what);
    cr_assert_eq(a->has_cls, w->has_cls, "%s", what);
    for (int k = 0; k < 2; k++)
        cr_assert_eq(a->modality_tokens[k], w->modality_tokens[k], "%s", what);
    for (size_t g = 0; g < G; g++) {
        cr_assert_eq(a->segment_tokens[g], w->segment_tokens[g], "%s: segment %zu has %lld "
                     "tokens, want %lld", what, g, (long long)a->segment_tokens[g],
                     (long long)w->segment_tokens[g]);
        cr_assert_float_eq(a->segment_start[g], w->segment_start[g],
                           TIME_TOL(w->segment_start[g]), "%s", what);
        cr_assert_float_eq(a->segment_end[g], w->segment_end[g], TIME_TOL(w->segment_end[g]),
                           "%s seg %zu end %g want %g",
                           what, g, a->segment_end[g], w->segment_end[g]);
        if (w->segment_tokens[g] == 0)
            for (size_t c = 0; c < D; c++)
                cr_assert_eq(a->segment[g * D + c], 0.0f, "%s: empty segment %zu not zero", what, g);
    }
    double e[4] = {rv_rel_err(a->global, w->global, D), rv_rel_err(a->segment, w->segment, G * D),
                   rv_rel_err(a->modality_mean, w->modality_mean, 2 * D),
                   rv_rel_err(a->cls, w->cls, D)};
    for (int i = 0; i < 4; i++)
        cr_assert_leq(e[i], tol, "%s: pooled part %d err %.3g", what, i, e[i]);
}

/* ---- 1. cp = 1 against the double reference ---------------------------------------------- */

Test(vit_forward, single_rank_matches_double_reference)
{
    for (int cls = 0; cls <= 1; cls++) {
        rv_vit_config c = tiny_config(cls);
        rv_vit_model *m = random_model(&c, 11 + cls);
        for (int size = 12; size <= 16; size += 4) { /* grid 3 (stored), grid 4 (resampled) */
            seq s;
            seq_make(&s, cls, size, 9, 8.5, 100 + size);
            const size_t n = (size_t)s.all.len * c.dim;
            double *want = ref_alloc_d(n);
            for (int causal = 0; causal <= 1; causal++) {
                ref_vit_forward(m, &s.all, causal, want);
                job j;
                run_job(&j, m, &s, 1, RV_CP_RING, causal, 10.0, s.end_s);
                double e = rv_rel_err(j.y, want, n);
                cr_log_info("cls %d grid %d causal %d S=%lld (video %lld, audio %lld): err %.3g",
                            cls, s.all.grid, causal, (long long)s.all.len,
                            (long long)s.all.nvideo, (long long)s.all.naudio, e);
                cr_expect_leq(e, TOL_REF, "cls %d grid %d causal %d: error %.3g against double",
                              cls, s.all.grid, causal, e);
                job_free(&j);
            }
            free(want);
            seq_free(&s);
        }
        rv_vit_free(&m);
    }
}

/* The reference is sensitive to what is tested: a model differing in one ringvit.*
 * weight (the band table) gives clearly different outputs. */
Test(vit_forward, reference_sees_audio_band_weights)
{
    rv_vit_config c = tiny_config(1);
    rv_vit_model *m = random_model(&c, 5);
    seq s;
    seq_make(&s, 1, 12, 4, 4.5, 7);
    const size_t n = (size_t)s.all.len * c.dim;
    double *want = ref_alloc_d(n);
    job j;
    run_job(&j, m, &s, 1, RV_CP_RING, 0, 10.0, s.end_s);
    m->band[3 * c.dim + 1] += 0.5f;
    ref_vit_forward(m, &s.all, 0, want);
    cr_expect_gt(rv_rel_err(j.y, want, n), MIN_CHANGE, "changing a band weight went unnoticed");
    job_free(&j);
    free(want);
    seq_free(&s);
    rv_vit_free(&m);
}

/* ---- 2. cp = 1..4 x strategies equal cp = 1 ------------------------------------------------ */

static void cp_sweep(int causal)
{
    rv_vit_config c = tiny_config(1);
    c.heads = 4; /* ulysses at cp 2 and 4 */
    rv_vit_model *m = random_model(&c, 21 + causal);
    seq s;
    seq_make(&s, 1, 16, 8, 10.5, 33 + causal); /* grid 4: resampled positions */
    const size_t n = (size_t)s.all.len * c.dim;
    job base;
    run_job(&base, m, &s, 1, RV_CP_RING, causal, 10.0, s.end_s);
    for (int N = 2; N <= 4; N++)
        for (int st = RV_CP_RING; st <= RV_CP_ULYSSES; st++) {
            if (st == RV_CP_ULYSSES && c.heads % N != 0)
                continue;
            job j;
            run_job(&j, m, &s, N, (rv_cp_strategy)st, causal, 10.0, s.end_s);
            double e = rel_f(j.y, base.y, n);
            cr_log_info("causal %d cp %d %s: per-token err %.3g", causal, N,
                        rv_cp_strategy_name((rv_cp_strategy)st), e);
            cr_expect_leq(e, TOL_CP, "causal %d cp %d %s: per-token outputs differ by %.3g", causal,
                          N, rv_cp_strategy_name((rv_cp_strategy)st), e);
            char what[96];
            for (int r = 0; r < N; r++) {
                snprintf(what, sizeof what, "causal %d cp %d %s rank %d", causal, N,
                         rv_cp_strategy_name((rv_cp_strategy)st), r);
                expect_pooled_equal(&j.pooled[r], &base.pooled[0], TOL_CP, what);
            }
            job_free(&j);
        }
    job_free(&base);
    seq_free(&s);
    rv_vit_free(&m);
}

Test(vit_forward, cp_ranks_and_strategies_match_single_rank) { cp_sweep(0); }
Test(vit_forward, cp_ranks_and_strategies_match_single_rank_causal) { cp_sweep(1); }

/* ---- 3. pooling against the reference ------------------------------------------------------ */

static void pool_case(const rv_vit_model *m, const seq *s, int N, double seg, double end_s,
                      double ref_end)
{
    job j;
    run_job(&j, m, s, N, RV_CP_RING, 0, seg, end_s);
    const size_t n = (size_t)s->all.len * m->cfg.dim;
    double *y = ref_dup_d(j.y, n); /* pool the very outputs: the check is the pooling */
    ref_vit_pooled w;
    ref_vit_pool(&s->all, y, m->cfg.dim, seg, ref_end, &w);
    char what[96];
    for (int r = 0; r < N; r++) {
        snprintf(what, sizeof what, "cp %d seg %g end %g rank %d", N, seg, end_s, r);
        expect_pooled_ref(&j.pooled[r], &w, m->cfg.dim, TOL_POOL, what);
    }
    ref_vit_pooled_free(&w);
    free(y);
    job_free(&j);
}

Test(vit_forward, pooling_matches_reference)
{
    rv_vit_config c = tiny_config(1);
    rv_vit_model *m = random_model(&c, 41);
    seq s;
    seq_make(&s, 1, 12, 24, 23.5, 43); /* ~24 s: tubelets every 2 s, audio steps every 1 s */
    for (int N = 1; N <= 3; N += 2) {
        pool_case(m, &s, N, 10.0, s.end_s, s.end_s);  /* 3 segments, the last shorter */
        pool_case(m, &s, N, 1.5, s.end_s, s.end_s);   /* a short window */
        pool_case(m, &s, N, 10.0, 15.0, 15.0);        /* tokens past 2 x 10 s go in the last */
        pool_case(m, &s, N, 1.5, 40.0, 40.0);         /* empty segments after the end */
        pool_case(m, &s, N, 10.0, 0.0, s.end_s);      /* end_s 0: the latest token end */
    }
    /* The segment bookkeeping itself. */
    job j;
    run_job(&j, m, &s, 1, RV_CP_RING, 0, 10.0, 15.0);
    cr_expect_eq(j.pooled[0].segments, 2);
    cr_expect_eq(j.pooled[0].segment_end[0], 10.0);
    cr_expect_eq(j.pooled[0].segment_end[1], 15.0);
    cr_expect_eq(j.pooled[0].tokens, s.all.nvideo + s.all.naudio);
    cr_expect_eq(j.pooled[0].has_cls, 1);
    /* The CLS output is the CLS token's row (global position 0). */
    cr_expect_leq(rel_f(j.pooled[0].cls, j.y, (size_t)c.dim), 0.0);
    job_free(&j);
    seq_free(&s);
    rv_vit_free(&m);
}

/* Segments every hop s, seg s long (overlapping when hop < seg, gaps when hop > seg),
 * against the definition in double: segment g averages the non-special tokens
 * starting in [g hop, g hop + seg), and one starting at or after the last
 * segment's start counts in the last; G = ceil(end / hop). */
static void hop_case(const rv_vit_model *m, const seq *s, int N, double seg, double hop)
{
    job j;
    run_job_hop(&j, m, s, N, RV_CP_RING, 0, seg, hop, s->end_s);
    const int D = m->cfg.dim;
    const int64_t G = (int64_t)ceil(s->end_s / hop);
    double *want = calloc((size_t)D, sizeof(double));
    for (int r = 0; r < N; r++) {
        const rv_vit_pooled *p = &j.pooled[r];
        cr_assert_eq(p->segments, G, "seg %g hop %g: %lld segments, want %lld", seg, hop,
                     (long long)p->segments, (long long)G);
        for (int64_t g = 0; g < G; g++) {
            int64_t count = 0;
            memset(want, 0, sizeof(double) * (size_t)D);
            for (int64_t i = 0; i < s->all.len; i++) {
                double t = s->all.seq_time[2 * i];
                int in = s->all.modality[i] != RV_MOD_CLS &&
                         ((t >= g * hop && t < g * hop + seg) || (g == G - 1 && t >= g * hop));
                if (!in)
                    continue;
                count++;
                for (int k = 0; k < D; k++)
                    want[k] += j.y[i * D + k];
            }
            cr_expect_eq(p->segment_tokens[g], count, "seg %g hop %g cp %d: segment %lld holds "
                         "%lld tokens, want %lld", seg, hop, N, (long long)g,
                         (long long)p->segment_tokens[g], (long long)count);
            cr_expect_eq(p->segment_start[g], g * hop);
            cr_expect_eq(p->segment_end[g], fmin(g * hop + seg, s->end_s));
            double err = 0, scale = 1e-30;
            for (int k = 0; k < D; k++) {
                double w = count ? want[k] / count : 0.0;
                err = fmax(err, fabs(p->segment[g * D + k] - w));
                scale = fmax(scale, fabs(w));
            }
            cr_expect(err <= TOL_POOL * scale, "seg %g hop %g cp %d segment "
                      "%lld: error %.3g", seg, hop, N, (long long)g, err / scale);
        }
    }
    free(want);
    job_free(&j);
}

Test(vit_forward, pooling_with_a_hop)
{
    rv_vit_config c = tiny_config(1);
    rv_vit_model *m = random_model(&c, 47);
    seq s;
    seq_make(&s, 1, 12, 24, 23.5, 49);
    for (int N = 1; N <= 3; N += 2) {
        hop_case(m, &s, N, 6.0, 2.0);  /* overlapping: a token in up to 3 segments */
        hop_case(m, &s, N, 5.0, 3.5);  /* overlapping, hop not dividing the segment */
        hop_case(m, &s, N, 2.0, 5.0);  /* gaps between segments */
        hop_case(m, &s, N, 4.0, 4.0);  /* adjacent, as without a hop */
    }
    seq_free(&s);
    rv_vit_free(&m);
}

/* ---- attention spans ------------------------------------------------------------------ */

/* A recording of ~460 s (~5 800 tokens): under a span, one rank and the ring run
 * the blocks in query chunks of 2048 rows, each against only the key rows its
 * keys reach (vit_forward_rows.c, cp_span_rows), while allgather and ulysses run
 * whole slices under the mask; the two paths must agree, and differ from full
 * attention. Blocks take each token's window from its time (floor(t / 30)). */
static void span_case(const rv_vit_model *m, seq *s, rv_span span, int causal)
{
    job base, j;
    run_job_span(&base, m, s, 2, RV_CP_ALLGATHER, causal, span, 10.0, 0.0, s->end_s);
    const size_t n = (size_t)s->all.len * m->cfg.dim;
    static const struct { int n; rv_cp_strategy st; } runs[] = {
        {1, RV_CP_RING}, {3, RV_CP_RING}, {2, RV_CP_ULYSSES}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        run_job_span(&j, m, s, runs[i].n, runs[i].st, causal, span, 10.0, 0.0, s->end_s);
        double e = rel_f(j.y, base.y, n);
        cr_expect_leq(e, TOL_CP, "span %d (%g s) causal %d, %s cp %d: %.3g against allgather cp 2",
                      span.kind, span.seconds, causal, rv_cp_strategy_name(runs[i].st),
                      runs[i].n, e);
        job_free(&j);
    }
    run_job(&j, m, s, 1, RV_CP_RING, causal, 10.0, s->end_s);
    double e = rel_f(base.y, j.y, n);
    cr_expect_geq(e, MIN_CHANGE, "span %d (%g s): outputs as full attention's (%.3g)", span.kind,
                  span.seconds, e);
    job_free(&j);
    job_free(&base);
}

Test(vit_forward, span_row_chunks_match_whole_slices)
{
    rv_vit_config c = tiny_config(1);
    rv_vit_model *m = random_model(&c, 61);
    seq s;
    seq_make(&s, 1, 12, 460, 460.0, 63);
    cr_assert_gt(s.all.len, 2 * 2048 + 1000, "%lld tokens", (long long)s.all.len);
    int64_t *window = malloc(sizeof(int64_t) * (size_t)s.all.len);
    for (int64_t i = 0; i < s.all.len; i++)
        window[i] = (int64_t)floor(s.time[2 * i] / 30.0);
    s.all.window = window;
    span_case(m, &s, (rv_span){RV_SPAN_WINDOW, 20.0}, 0);
    span_case(m, &s, (rv_span){RV_SPAN_WINDOW, 7.0}, 1);
    span_case(m, &s, (rv_span){RV_SPAN_BLOCK, 30.0}, 0);
    free(window);
    seq_free(&s);
    rv_vit_free(&m);
}

Test(vit_forward, pooling_without_cls_or_audio)
{
    rv_vit_config c = tiny_config(0);
    rv_vit_model *m = random_model(&c, 51);
    seq s;
    seq_make(&s, 0, 12, 12, 0.0, 53); /* video only */
    cr_assert_eq(s.all.naudio, 0);
    job j;
    run_job(&j, m, &s, 2, RV_CP_ALLGATHER, 0, 10.0, s.end_s);
    for (int r = 0; r < 2; r++) {
        cr_expect_eq(j.pooled[r].has_cls, 0);
        cr_expect_eq(j.pooled[r].modality_tokens[1], 0);
        for (int k = 0; k < c.dim; k++) {
            cr_expect_eq(j.pooled[r].cls[k], 0.0f);
            cr_expect_eq(j.pooled[r].modality_mean[c.dim + k], 0.0f);
        }
    }
    job_free(&j);
    pool_case(m, &s, 2, 10.0, s.end_s, s.end_s);
    seq_free(&s);
    rv_vit_free(&m);
}

/* ---- 4. the time code ----------------------------------------------------------------------- */

Test(vit_forward, time_code_matches_formula)
{
    const double ts[] = {0.0, 0.04, 0.5, 3.7, 59.99, 1234.5, 3600.0, 86400.25};
    const int dims[] = {1, 2, 3, 32, 33, 192, 768};
    for (size_t a = 0; a < sizeof dims / sizeof dims[0]; a++) {
        int d = dims[a];
        float *got = ref_alloc_f((size_t)d);
        double *want = ref_alloc_d((size_t)d);
        for (size_t b = 0; b < sizeof ts / sizeof ts[0]; b++) {
            for (int i = 0; i < d; i++)
                got[i] = 7.0f; /* every entry must be written */
            rv_vit_time_code(ts[b], d, got);
            ref_vit_time_code(ts[b], d, want);
            for (int i = 0; i < d; i++)
                cr_assert_float_eq(got[i], want[i], TOL_TIME_CODE, "dim %d t %g entry %d: %g, "
                                   "want %g", d, ts[b], i, got[i], want[i]);
        }
        if (d % 2)
            cr_expect_eq(got[d - 1], 0.0f);
        free(got), free(want);
    }
    /* The shortest period is 0.1 s: entry 0 is sin(2 pi t / 0.1), entry 1 its cos. */
    float code[4];
    rv_vit_time_code(0.025, 4, code);
    cr_expect_float_eq(code[0], 1.0f, TOL_TIME_CODE);
    cr_expect_float_eq(code[1], 0.0f, TOL_TIME_CODE);
    /* The longest, 10000 s, on the last pair. */
    rv_vit_time_code(2500.0, 4, code);
    cr_expect_float_eq(code[2], 1.0f, TOL_TIME_CODE);
}

/* With every weight zero but the time projection, blocks that change nothing and
 * LayerNorms of weight 1, a token's output is LN(time_w @ code(t)): an audio and a
 * video token starting at the same moment get the same output. */
Test(vit_forward, equal_times_equal_temporal_code)
{
    rv_vit_config c = tiny_config(1);
    rv_vit_model *m = NULL;
    cr_assert_eq(rv_vit_new(&c, &m), RV_OK, "%s", rv_last_error());
    ref_rng r = ref_rng_make(61);
    ref_fill_normal(&r, m->time_w, (size_t)c.dim * c.dim, 0.0f, 0.5f);
    seq s;
    seq_make(&s, 1, 12, 8, 8.5, 63);
    job j;
    run_job(&j, m, &s, 2, RV_CP_RING, 0, 10.0, s.end_s);
    double *want = ref_alloc_d((size_t)s.all.len * c.dim);
    ref_vit_forward(m, &s.all, 0, want);
    cr_expect_leq(rv_rel_err(j.y, want, (size_t)s.all.len * c.dim), TOL_REF_TIME_ONLY);
    int pairs = 0, differ = 0;
    for (int64_t a = 0; a < s.all.len; a++)
        for (int64_t b = 0; b < s.all.len; b++) {
            if (s.mod[a] != RV_MOD_VIDEO || s.mod[b] != RV_MOD_AUDIO)
                continue;
            double e = rel_f(j.y + a * c.dim, j.y + b * c.dim, (size_t)c.dim);
            if (s.time[2 * a] == s.time[2 * b]) {
                pairs++;
                cr_expect_leq(e, TOL_SAME_TIME, "video token %lld and audio token %lld at %g s differ by %.3g",
                              (long long)a, (long long)b, s.time[2 * a], e);
            } else if (e > MIN_CHANGE) {
                differ++;
            }
        }
    cr_expect_geq(pairs, 8, "only %d video/audio pairs share a start time", pairs);
    cr_expect_gt(differ, 0, "different times gave the same outputs");
    free(want);
    job_free(&j);
    seq_free(&s);
    rv_vit_free(&m);
}

/* ---- 5. FLOPs, memory, errors --------------------------------------------------------------- */

Test(vit_forward, flops_match_the_sum_over_ranks)
{
    rv_vit_config c = tiny_config(1);
    rv_vit_model *m = random_model(&c, 71);
    seq s;
    seq_make(&s, 1, 12, 8, 6.5, 73);
    struct {
        int n, causal;
        rv_cp_strategy st;
    } cases[] = {{1, 0, RV_CP_RING}, {1, 1, RV_CP_RING}, {3, 1, RV_CP_RING},
                 {2, 0, RV_CP_ULYSSES}, {4, 1, RV_CP_ALLGATHER}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        job j;
        run_job(&j, m, &s, cases[i].n, cases[i].st, cases[i].causal, 10.0, s.end_s);
        double sum = 0;
        for (int r = 0; r < cases[i].n; r++)
            sum += j.stats[r].flops;
        double want = rv_vit_forward_flops(&c, s.all.len, s.all.nvideo, s.all.naudio,
                                           cases[i].causal);
        /* Written out: embedding GEMMs, then per layer qkv, out_proj, MLP, attention. */
        double S = (double)s.all.len, D = c.dim, M = c.mlp;
        double pairs = cases[i].causal ? S * (S + 1) / 2 : S * S;
        double hand = 2 * S * D * D + 2.0 * s.all.nvideo * 96 * D + 2.0 * s.all.naudio * 64 * D +
                      c.layers * (2 * S * 3 * D * D + 2 * S * D * D + 4 * S * D * M + 4 * D * pairs);
        /* whole numbers below 2^53: exact */
        cr_expect_eq(want, hand, "flops formula %.17g, by hand %.17g", want, hand);
        cr_expect_eq(sum, want, "case %zu: ranks counted %.17g, formula %.17g", i,
                           sum, want);
        job_free(&j);
    }
    seq_free(&s);
    rv_vit_free(&m);
}

Test(vit_forward, activation_memory_scales_with_the_slice)
{
    rv_vit_config c = tiny_config(1);
    rv_vit_model *m = random_model(&c, 81);
    seq s;
    seq_make(&s, 1, 12, 24, 23.5, 83);
    job one, four;
    run_job(&one, m, &s, 1, RV_CP_RING, 0, 10.0, s.end_s);
    run_job(&four, m, &s, 4, RV_CP_RING, 0, 10.0, s.end_s);
    size_t peak4 = 0;
    for (int r = 0; r < 4; r++)
        peak4 = four.stats[r].peak_bytes > peak4 ? four.stats[r].peak_bytes : peak4;
    size_t peak1 = one.stats[0].peak_bytes;
    /* Our buffers: y, h, q, k, v of (len, D) at least. */
    cr_expect_geq(peak1, 5 * sizeof(float) * (size_t)s.all.len * c.dim);
    cr_expect_leq((double)peak4, 0.5 * (double)peak1, "cp 4 peak %zu vs cp 1 %zu", peak4, peak1);
    cr_expect_gt(four.stats[0].cp.bytes_sent, 0.0);
    job_free(&one);
    job_free(&four);
    seq_free(&s);
    rv_vit_free(&m);
}

typedef struct bad_arg {
    const rv_vit_model *m;
    rv_vit_tokens t;
    rv_status st;
    char msg[256];
} bad_arg;

static rv_status bad_fn(rv_comm *comm, void *arg)
{
    bad_arg *b = arg;
    rv_backend *be = NULL;
    rv_status st = rv_backend_cpu_create(1, &be);
    cr_assert_eq(st, RV_OK);
    rv_shard_plan p;
    rv_shard_plan_make(RV_SHARD_CONTIGUOUS, 1, 20, &p);
    rv_vit_run run = {.be = be, .comm = comm, .plan = p, .strategy = RV_CP_RING, .causal = 0, .weights = NULL};
    float *y = ref_alloc_f(64 * 32);
    b->st = rv_vit_forward(b->m, &run, &b->t, y, NULL);
    snprintf(b->msg, sizeof b->msg, "%s", rv_last_error());
    free(y);
    rv_backend_free(&be);
    return RV_OK;
}

Test(vit_forward, bad_tokens_are_invalid)
{
    rv_vit_config c = tiny_config(0);
    rv_vit_model *m = random_model(&c, 91);
    seq s;
    seq_make(&s, 0, 12, 4, 2.0, 93);
    cr_assert_geq(s.all.len, 20);
    bad_arg b = {m, s.all, RV_OK, ""};
    b.t.len = 20; /* the first 20 tokens */
    b.t.nvideo = 0, b.t.naudio = 0;
    for (int i = 0; i < 20; i++)
        b.t.nvideo += s.mod[i] == RV_MOD_VIDEO, b.t.naudio += s.mod[i] == RV_MOD_AUDIO;
    cr_assert_eq(rv_local_run(1, bad_fn, &b), RV_OK);
    cr_assert_eq(b.st, RV_OK, "%s", b.msg);

    bad_arg w = b;
    w.t.len = 19; /* not the plan's slice */
    rv_local_run(1, bad_fn, &w);
    cr_expect_eq(w.st, RV_ERR_INVALID);
    cr_expect(strstr(w.msg, "19") != NULL, "%s", w.msg);

    w = b;
    w.t.nvideo++; /* counts disagree */
    rv_local_run(1, bad_fn, &w);
    cr_expect_eq(w.st, RV_ERR_INVALID);

    int64_t save = s.pos[3 * 0 + 1];
    s.pos[1] = 3; /* y outside the 3 x 3 grid (token 0 is video) */
    cr_assert_eq(s.mod[0], RV_MOD_VIDEO);
    w = b;
    rv_local_run(1, bad_fn, &w);
    cr_expect_eq(w.st, RV_ERR_INVALID);
    cr_expect(strstr(w.msg, "token 0") != NULL, "%s", w.msg);
    s.pos[1] = save;
    seq_free(&s);
    rv_vit_free(&m);
}

/* Host or device memory is the backend's host_memory, not its name: a table named
 * "cpu" that says device memory needs the weights in its memory, cannot embed,
 * and is refused as run->host; the CPU backend itself is host memory. */
typedef struct memory_arg {
    const rv_vit_model *m;
    rv_vit_tokens t;
    rv_status device_run, host_run, embed;
    char msg[3][256];
} memory_arg;

static rv_status memory_fn(rv_comm *comm, void *arg)
{
    memory_arg *a = arg;
    rv_backend *be = NULL;
    cr_assert_eq(rv_backend_cpu_create(1, &be), RV_OK);
    rv_backend device = *be; /* the same table, its memory said to be a device's */
    device.host_memory = 0;
    cr_expect_eq(rv_backend_is_host(be), 1);
    cr_expect_eq(rv_backend_is_host(&device), 0);
    cr_expect_eq(rv_backend_is_host(NULL), 0);
    rv_shard_plan p;
    rv_shard_plan_make(RV_SHARD_CONTIGUOUS, 1, a->t.len, &p);
    float *y = ref_alloc_f((size_t)a->t.len * a->m->cfg.dim);
    rv_vit_run run = {.be = &device, .comm = comm, .plan = p, .strategy = RV_CP_RING};
    a->device_run = rv_vit_forward(a->m, &run, &a->t, y, NULL);
    snprintf(a->msg[0], sizeof a->msg[0], "%s", rv_last_error());
    run = (rv_vit_run){.be = be, .comm = comm, .plan = p, .strategy = RV_CP_RING, .host = &device};
    a->host_run = rv_vit_forward(a->m, &run, &a->t, y, NULL);
    snprintf(a->msg[1], sizeof a->msg[1], "%s", rv_last_error());
    a->embed = rv_vit_embed(a->m, &device, &a->t, y, NULL);
    snprintf(a->msg[2], sizeof a->msg[2], "%s", rv_last_error());
    free(y);
    rv_backend_free(&be);
    return RV_OK;
}

Test(vit_forward, host_memory_is_a_backend_property)
{
    rv_vit_config c = tiny_config(0);
    rv_vit_model *m = random_model(&c, 95);
    seq s;
    seq_make(&s, 0, 12, 4, 2.0, 97);
    memory_arg a = {.m = m, .t = s.all};
    cr_assert_eq(rv_local_run(1, memory_fn, &a), RV_OK);
    cr_expect_eq(a.device_run, RV_ERR_UNSUPPORTED, "%s", a.msg[0]);
    cr_expect(strstr(a.msg[0], "rv_vit_to_backend") != NULL, "%s", a.msg[0]);
    cr_expect_eq(a.host_run, RV_ERR_INVALID, "%s", a.msg[1]);
    cr_expect(strstr(a.msg[1], "run->host") != NULL, "%s", a.msg[1]);
    cr_expect_eq(a.embed, RV_ERR_UNSUPPORTED, "%s", a.msg[2]);
    seq_free(&s);
    rv_vit_free(&m);
}

/* Fewer tokens than ranks (zigzag: fewer than 2N chunks): empty ranks and empty
 * segments still take part in every collective, and the results stay exact. */
Test(vit_forward, short_sequences_leave_ranks_empty)
{
    rv_vit_config c = tiny_config(1);
    rv_vit_model *m = random_model(&c, 101);
    seq s;
    seq_make(&s, 1, 12, 2, 0.0, 103);
    for (int64_t S = 1; S <= 5; S += 2) {
        s.all.len = S, s.all.nvideo = S - 1;
        double *want = ref_alloc_d((size_t)S * c.dim);
        for (int causal = 0; causal <= 1; causal++) {
            ref_vit_forward(m, &s.all, causal, want);
            for (int N = 1; N <= 4; N += 3) {
                job j;
                run_job(&j, m, &s, N, RV_CP_RING, causal, 10.0, 2.0);
                double e = rv_rel_err(j.y, want, (size_t)S * c.dim);
                cr_expect_leq(e, TOL_REF, "S %lld cp %d causal %d: err %.3g", (long long)S, N, causal, e);
                for (int r = 0; r < N; r++)
                    cr_expect_eq(j.pooled[r].tokens, S - 1);
                job_free(&j);
            }
        }
        free(want);
    }
    seq_free(&s);
    rv_vit_free(&m);
}
