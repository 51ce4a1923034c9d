/* test_vit_gpu.c: the encoder on the "cuda" backend (rv_vit.h, rv_vit_train.h)
 * against the "cpu" backend, on synthetic sequences that need no media (video
 * tubelets on a 3 x 3 grid, audio patches in 8 bands, a CLS token; random
 * patches, random weights): the forward's per-token outputs, and the gradient of
 * every weight after forward_train and backward with a random output gradient,
 * for cp 1 and for 2 and 3 ranks as streams on one GPU (ring, allgather,
 * ulysses; causal zigzag too). Tolerances are bf16's (the GPU rounds GEMM and
 * attention inputs to bf16): normalised error <= TOL_BF16. Exits 77 (skipped) when
 * the build has no CUDA or the machine no GPU. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rv_cuda.h"
#include "rv_tokens.h"
#include "rv_vit.h"
#include "rv_vit_train.h"

/* Normalised error (max |gpu - cpu| / max |cpu|) of the outputs and of every
 * weight's gradient: the GPU rounds each GEMM's and attention's inputs to bf16
 * (2^-8 = 3.9e-3 a rounding) with f32 sums, through the layers of the model
 * forward and back. */
#define TOL_BF16 5e-2

#ifdef RINGVIT_HAVE_CUDA

#define GRID 3
#define BANDS 8

static float rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)(*s >> 40) / (float)(1ull << 24) * 2.0f - 1.0f;
}

static rv_vit_config small_config(void)
{
    rv_vit_config c = {0};
    strcpy(c.preset, "custom");
    c.dim = 96, c.layers = 2, c.heads = 3, c.mlp = 192, c.eps = 1e-6f;
    c.tubelet = 2, c.patch = 4, c.grid = GRID, c.audio_freq = 128 / BANDS, c.audio_time = 4;
    c.cls = 1;
    rv_vit_family_defaults(&c); /* ringvit's own family */
    return c;
}

/* The whole sequence, global order: CLS, then per second one tubelet's 9 video
 * tokens followed by 8 audio bands. */
typedef struct seq {
    int64_t len, nvideo, naudio;
    uint8_t *mod;
    int64_t *pos;
    double *time;
    float *video, *audio; /* patches of each token in global order (video, audio rows) */
    int64_t *row;         /* (len) row of token i in video or audio, -1 for CLS */
} seq;

static void seq_make(const rv_vit_config *c, int seconds, seq *s)
{
    memset(s, 0, sizeof *s);
    s->len = 1 + (int64_t)seconds * (GRID * GRID + BANDS);
    const size_t vd = (size_t)c->tubelet * c->patch * c->patch * 3, ad = (size_t)c->audio_freq * c->audio_time;
    s->mod = malloc((size_t)s->len);
    s->pos = calloc((size_t)s->len * 3, sizeof *s->pos);
    s->time = calloc((size_t)s->len * 2, sizeof *s->time);
    s->row = malloc(sizeof *s->row * (size_t)s->len);
    s->video = malloc(sizeof(float) * vd * (size_t)seconds * GRID * GRID);
    s->audio = malloc(sizeof(float) * ad * (size_t)seconds * BANDS);
    cr_assert(s->mod && s->pos && s->time && s->row && s->video && s->audio);
    uint64_t r = 12345;
    int64_t i = 0;
    s->mod[i] = RV_MOD_CLS, s->row[i] = -1, i++;
    for (int t = 0; t < seconds; t++) {
        for (int y = 0; y < GRID; y++)
            for (int x = 0; x < GRID; x++, i++) {
                s->mod[i] = RV_MOD_VIDEO;
                s->pos[3 * i] = t, s->pos[3 * i + 1] = y, s->pos[3 * i + 2] = x;
                s->time[2 * i] = t, s->time[2 * i + 1] = t + 1.0;
                s->row[i] = s->nvideo++;
            }
        for (int b = 0; b < BANDS; b++, i++) {
            s->mod[i] = RV_MOD_AUDIO;
            s->pos[3 * i] = t, s->pos[3 * i + 1] = b;
            s->time[2 * i] = t, s->time[2 * i + 1] = t + 1.0;
            s->row[i] = s->naudio++;
        }
    }
    for (size_t k = 0; k < vd * (size_t)s->nvideo; k++)
        s->video[k] = rnd(&r);
    for (size_t k = 0; k < ad * (size_t)s->naudio; k++)
        s->audio[k] = rnd(&r);
}

static void seq_free(seq *s)
{
    free(s->mod), free(s->pos), free(s->time), free(s->row), free(s->video), free(s->audio);
}

/* Rank r's slice: its plan segments in order, as an rv_vit_tokens. */
typedef struct slice {
    rv_vit_tokens t;
    int64_t *global;
    uint8_t *mod;
    int64_t *pos;
    double *time;
    float *video, *audio;
} slice;

static void slice_make(const rv_vit_config *c, const seq *s, const rv_shard_plan *p, int r,
                       slice *out)
{
    memset(out, 0, sizeof *out);
    const size_t vd = (size_t)c->tubelet * c->patch * c->patch * 3, ad = (size_t)c->audio_freq * c->audio_time;
    const int64_t len = rv_shard_len(p, r), cap = len > 0 ? len : 1;
    out->global = malloc(sizeof(int64_t) * (size_t)cap);
    out->mod = malloc((size_t)cap);
    out->pos = malloc(sizeof(int64_t) * 3 * (size_t)cap);
    out->time = malloc(sizeof(double) * 2 * (size_t)cap);
    out->video = malloc(sizeof(float) * vd * (size_t)cap);
    out->audio = malloc(sizeof(float) * ad * (size_t)cap);
    rv_shard_seg seg[RV_SHARD_MAX_SEGS];
    int n = rv_shard_segments(p, r, seg);
    int64_t k = 0, nv = 0, na = 0;
    for (int j = 0; j < n; j++)
        for (int64_t g = seg[j].start; g < seg[j].start + seg[j].len; g++, k++) {
            out->global[k] = g;
            out->mod[k] = s->mod[g];
            memcpy(out->pos + 3 * k, s->pos + 3 * g, 3 * sizeof(int64_t));
            memcpy(out->time + 2 * k, s->time + 2 * g, 2 * sizeof(double));
            if (s->mod[g] == RV_MOD_VIDEO)
                memcpy(out->video + vd * (size_t)nv++, s->video + vd * (size_t)s->row[g], vd * 4);
            else if (s->mod[g] == RV_MOD_AUDIO)
                memcpy(out->audio + ad * (size_t)na++, s->audio + ad * (size_t)s->row[g], ad * 4);
        }
    out->t = (rv_vit_tokens){.len = len, .modality = out->mod, .pos = out->pos, .seq_time = out->time, .nvideo = nv, .video = out->video, .naudio = na, .audio = out->audio, .grid = GRID, .audio_steps = 0};
}

static void slice_free(slice *s)
{
    free(s->global), free(s->mod), free(s->pos), free(s->time), free(s->video), free(s->audio);
}

/* One run: every rank's forward (y in global order) and, with train, the sum of
 * the ranks' weight gradients for the output gradient dy (global order). */
typedef struct job {
    const rv_vit_model *m;
    const seq *s;
    rv_shard_plan plan;
    rv_cp_strategy strategy;
    int causal, cuda, train;
    const float *dy; /* (len, D) global */
    float *y;        /* (len, D) global */
    rv_vit_model **grads; /* (ranks) */
} job;

static rv_status rank_fn(rv_comm *comm, void *arg)
{
    job *j = arg;
    const int r = comm->rank, D = j->m->cfg.dim;
    rv_backend *be = NULL, *hb = NULL; /* hb: odd ranks pass their own (rv_vit_run.host) */
    rv_vit_model *w = NULL, *g = NULL;
    rv_vit_acts *acts = NULL;
    slice sl;
    slice_make(&j->m->cfg, j->s, &j->plan, r, &sl);
    const int64_t len = sl.t.len, cap = len > 0 ? len : 1;
    float *y = malloc(sizeof(float) * (size_t)cap * D), *dy = malloc(sizeof(float) * (size_t)cap * D);
    rv_status st = j->cuda ? rv_backend_cuda_create(-1, &be) : rv_backend_cpu_create(1, &be);
    if (st != RV_OK || (j->cuda && (st = rv_vit_to_backend(j->m, be, &w)) != RV_OK) ||
        (j->cuda && r % 2 == 1 && (st = rv_backend_cpu_create(1, &hb)) != RV_OK))
        goto end;
    rv_vit_run run = {.be = be, .comm = comm, .plan = j->plan, .strategy = j->strategy, .causal = j->causal, .weights = w,
                      .host = hb};
    if (!j->train) {
        st = rv_vit_forward(j->m, &run, &sl.t, y, NULL);
    } else if ((st = rv_vit_new(&j->m->cfg, &g)) == RV_OK) {
        rv_vit_grad_zero(g);
        for (int64_t k = 0; k < len; k++)
            memcpy(dy + k * D, j->dy + sl.global[k] * D, sizeof(float) * D);
        if ((st = rv_vit_forward_train(j->m, &run, &sl.t, NULL, NULL, y, &acts, NULL)) == RV_OK)
            st = rv_vit_backward(j->m, &run, &sl.t, acts, dy, g, NULL, NULL);
    }
    if (st != RV_OK)
        goto end;
    for (int64_t k = 0; k < len; k++)
        memcpy(j->y + sl.global[k] * D, y + k * D, sizeof(float) * D);
    if (j->train)
        j->grads[r] = g, g = NULL;
end:
    rv_vit_acts_free(&acts);
    rv_vit_free(&g);
    rv_vit_backend_free(be, &w);
    rv_backend_free(&be);
    rv_backend_free(&hb);
    free(y), free(dy);
    slice_free(&sl);
    return st;
}

/* max |a - b| / max |b| */
static double norm_err(const float *a, const float *b, size_t n)
{
    double e = 0, m = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        e = d > e || isnan(d) ? d : e;
        m = fabs(b[i]) > m ? fabs(b[i]) : m;
    }
    return e / m;
}

/* Runs the job on n ranks; y (len, D) and, with train, the summed gradient arena. */
static void run(job *j, int n, float *y, float *grad)
{
    rv_shard_kind kind = j->causal ? RV_SHARD_ZIGZAG : RV_SHARD_CONTIGUOUS;
    cr_assert_eq(rv_shard_plan_make(kind, n, j->s->len, &j->plan), RV_OK, "%s", rv_last_error());
    j->y = y;
    rv_vit_model *gr[8] = {0};
    j->grads = gr;
    rv_status st = rv_local_run_copy(n, rank_fn, j, j->cuda ? rv_cuda_copy_sync : NULL);
    cr_assert_eq(st, RV_OK, "%s ranks %d: %s", j->cuda ? "cuda" : "cpu", n, rv_last_error());
    if (j->train) {
        const size_t nf = j->m->arena_floats;
        memset(grad, 0, sizeof(float) * nf);
        for (int r = 0; r < n; r++) {
            for (size_t k = 0; k < nf; k++)
                grad[k] += gr[r]->arena[k];
            rv_vit_free(&gr[r]);
        }
    }
}

/* family 0: ringvit's own blocks; 1: the other families' block features at once
 * (layer scale, a pre-norm, QuickGELU, q and v biases only, no final norm), so
 * the device's activation and layer-scale ops run forward and backward. */
static void check_family(int family, int n, rv_cp_strategy strategy, int causal, int train)
{
    rv_vit_config c = small_config();
    if (family) {
        c.layer_scale = 1, c.pre_norm = 1, c.act = RV_ACT_QUICK_GELU;
        c.qkv_bias = RV_VIT_BIAS_Q | RV_VIT_BIAS_V, c.final_norm = 0;
    }
    rv_vit_model *m = NULL;
    cr_assert_eq(rv_vit_new(&c, &m), RV_OK, "%s", rv_last_error());
    cr_assert_eq(rv_vit_init_random(m, 7), RV_OK, "%s", rv_last_error());
    uint64_t rs = 5;
    for (int l = 0; family && l < c.layers; l++)
        for (int k = 0; k < c.dim; k++) {
            m->layer[l].ls1[k] = 0.5f + 0.3f * rnd(&rs);
            m->layer[l].ls2[k] = 0.5f + 0.3f * rnd(&rs);
            m->layer[l].qkv_b[k] = 0.1f * rnd(&rs); /* q; v below; k stays 0 */
            m->layer[l].qkv_b[2 * c.dim + k] = 0.1f * rnd(&rs);
        }
    seq s;
    seq_make(&c, 12, &s);
    const size_t nd = (size_t)s.len * c.dim, nf = m->arena_floats;
    float *dy = malloc(sizeof(float) * nd), *y_cpu = malloc(sizeof(float) * nd),
          *y_gpu = malloc(sizeof(float) * nd), *g_cpu = malloc(sizeof(float) * nf),
          *g_gpu = malloc(sizeof(float) * nf);
    cr_assert(dy && y_cpu && y_gpu && g_cpu && g_gpu);
    uint64_t r = 99;
    for (size_t k = 0; k < nd; k++)
        dy[k] = rnd(&r);
    job j = {m, &s, {0}, strategy, causal, 0, train, dy, NULL, NULL};
    run(&j, 1, y_cpu, g_cpu);
    j.cuda = 1;
    run(&j, n, y_gpu, g_gpu);
    double ey = norm_err(y_gpu, y_cpu, nd);
    printf("vit_gpu: %s %-9s cp %d %-6s %-8s y err %.2e", family ? "families" : "ringvit ",
           rv_cp_strategy_name(strategy), n, causal ? "causal" : "full",
           train ? "train" : "forward", ey);
    cr_expect_leq(ey, TOL_BF16, "%s cp %d causal %d: outputs differ by %.3g",
                  rv_cp_strategy_name(strategy), n, causal, ey);
    if (train) {
        double eg = norm_err(g_gpu, g_cpu, nf);
        printf(", gradient err %.2e", eg);
        cr_expect_leq(eg, TOL_BF16, "%s cp %d causal %d: gradients differ by %.3g",
                      rv_cp_strategy_name(strategy), n, causal, eg);
    }
    printf("\n");
    free(dy), free(y_cpu), free(y_gpu), free(g_cpu), free(g_gpu);
    seq_free(&s);
    rv_vit_free(&m);
}

static void check(int n, rv_cp_strategy strategy, int causal, int train)
{
    check_family(0, n, strategy, causal, train);
}

Test(vit_gpu, family_blocks_match_cpu, .timeout = 300)
{
    check_family(1, 1, RV_CP_RING, 0, 0);
    check_family(1, 2, RV_CP_RING, 0, 1);
    check_family(1, 3, RV_CP_ULYSSES, 0, 1);
}

Test(vit_gpu, forward_matches_cpu, .timeout = 300)
{
    check(1, RV_CP_RING, 0, 0);
    check(2, RV_CP_RING, 0, 0);
    check(2, RV_CP_RING, 1, 0);
    check(3, RV_CP_ULYSSES, 0, 0);
    check(2, RV_CP_ALLGATHER, 1, 0);
}

Test(vit_gpu, gradients_match_cpu, .timeout = 300)
{
    check(1, RV_CP_RING, 0, 1);
    check(2, RV_CP_RING, 1, 1);
    check(3, RV_CP_ULYSSES, 0, 1);
    check(2, RV_CP_ALLGATHER, 0, 1);
}

#endif /* RINGVIT_HAVE_CUDA */

#include "gpu_test_main.h"
