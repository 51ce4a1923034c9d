/* test_train_step.c: the training step of rv_vit_train.h (encoder/train/train_step.c):
 * rv_train_step on a tiny model and classify head over a 2 x 2 (dp x cp) mesh of
 * local ranks, each rank adding its own known gradient, for three steps (two
 * clipped, one under the clip; warm-up then cosine; the head at its own
 * learning rate; weight decay on the decay mask), against a double-precision
 * computation written here: the gradients summed over the four ranks, the
 * global norm, the clip, and textbook AdamW (bias-corrected moments, decoupled
 * decay p *= 1 - lr * wd before the update). Compared: the parameters, the
 * moments, the summed and clipped gradients left in the buffers, the reported
 * norm, clip flag and learning rates; every rank's parameters bit-identical.
 * Also: the model alone (no head, no communicators); a non-finite gradient
 * failing before any parameter changes; mismatched sizes refused;
 * rv_adamw_new_model's size and decay mask; rv_adamw_copy. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_ops.h"
#include "rv_comm.h"
#include "rv_vit.h"
#include "rv_vit_train.h"

/* Tolerances, against the double computation written here: per element
 * |got - want| <= rtol * |want| + atol * max|want| (assert_near), the atol tied to
 * the tensor's scale for entries near zero.
 *   parameters: three f32 AdamW steps (epsilon 1.2e-7), a few roundings each;
 *   moments and the summed clipped gradient: sums over 4 ranks' f32 gradients in
 *   another order, then the clip's scaling: their small entries lose more. */
#define PARAMS_RTOL 1e-5
#define PARAMS_ATOL 2e-6
#define MOMENTS_RTOL 1e-4
#define MOMENTS_ATOL 1e-6
/* The first moments of one rank alone: no sum over ranks, no clip. */
#define ALONE_RTOL 1e-5
#define ALONE_ATOL 1e-7
/* The global norm: a double sum of f32 squares after an f32 allreduce over the
 * mesh (4 ranks), or over one rank. */
#define TOL_NORM_MESH 1e-5
#define TOL_NORM 1e-6
/* Learning rates (double) against the closed form, relative to the peak rate. */
#define TOL_LR 1e-12

#define CP 2
#define DP 2
#define RANKS (CP * DP)
#define STEPS 3
#define CLASSES 3

static rv_vit_config tiny_cfg(void)
{
    rv_vit_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.preset, sizeof c.preset, "custom");
    c.dim = 16;
    c.layers = 2;
    c.heads = 2;
    c.mlp = 32;
    c.eps = 1e-6f;
    c.tubelet = 2;
    c.patch = 4;
    c.grid = 2;
    c.audio_freq = 16;
    c.audio_time = 4;
    c.cls = 1;
    rv_vit_family_defaults(&c);
    return c;
}

/* The options: eps large enough that the update depends on the gradient's scale
 * (so a skipped clip shows in the parameters, not only in the moments). */
static void make_opts(rv_adamw_opts *mo, rv_adamw_opts *ho, double clip)
{
    rv_adamw_opts_default(mo);
    mo->lr = 0.05;
    mo->beta1 = 0.8;
    mo->beta2 = 0.95;
    mo->eps = 1e-2;
    mo->wd = 0.1;
    mo->warmup = 2;
    mo->total = 5;
    mo->min_lr = 0.005;
    mo->clip = clip;
    *ho = *mo;
    ho->lr = 0.2;
    ho->min_lr = 0.02;
}

/* The gradient rank r adds at step s: uniform in [-1, 1), times 1e-4 at step 1
 * (whose summed norm is then under the clip). */
static void rank_grad(int s, int r, float *x, size_t n, uint64_t salt)
{
    ref_rng g = ref_rng_make(salt + 1000 * (uint64_t)s + (uint64_t)r);
    ref_fill_uniform(&g, x, n, -1.0f, 1.0f);
    if (s == 1)
        for (size_t i = 0; i < n; i++)
            x[i] *= 1e-4f;
}

/* The schedule, written out: linear warm-up from lr / warmup, cosine to min_lr. */
static double naive_lr(const rv_adamw_opts *o, int64_t s)
{
    if (s < o->warmup)
        return o->lr * (double)(s + 1) / (double)o->warmup;
    const double t = (double)(s - o->warmup) / (double)(o->total - o->warmup);
    return o->min_lr + (o->lr - o->min_lr) * 0.5 * (1.0 + cos(M_PI * t));
}

/* ---- the double-precision reference ------------------------------------------------ */

typedef struct ref_run {
    int64_t nm, nh, n;
    double *p, *m, *v;   /* (n) over [model | head] */
    double *g;           /* (n) the last step's summed, clipped gradient */
    double norm[STEPS];
    int clipped[STEPS];
} ref_run;

/* steps of the step on [model | head] (p0: initial floats) with ranks ranks' gradients. */
static void reference(ref_run *R, const float *p0m, int64_t nm, const float *p0h, int64_t nh,
                      const uint8_t *decay, int ranks, int steps, const rv_adamw_opts *mo,
                      const rv_adamw_opts *ho, uint64_t salt)
{
    const int64_t n = nm + nh;
    R->nm = nm, R->nh = nh, R->n = n;
    R->p = calloc((size_t)n, sizeof(double));
    R->m = calloc((size_t)n, sizeof(double));
    R->v = calloc((size_t)n, sizeof(double));
    R->g = calloc((size_t)n, sizeof(double));
    float *gm = malloc(sizeof(float) * (size_t)(nm > 0 ? nm : 1));
    float *gh = malloc(sizeof(float) * (size_t)(nh > 0 ? nh : 1));
    cr_assert(R->p && R->m && R->v && R->g && gm && gh);
    for (int64_t i = 0; i < nm; i++)
        R->p[i] = p0m[i];
    for (int64_t i = 0; i < nh; i++)
        R->p[nm + i] = p0h[i];
    for (int s = 0; s < steps; s++) {
        memset(R->g, 0, sizeof(double) * (size_t)n);
        for (int r = 0; r < ranks; r++) {
            rank_grad(s, r, gm, (size_t)nm, salt);
            rank_grad(s, r, gh, (size_t)nh, salt + 77);
            for (int64_t i = 0; i < nm; i++)
                R->g[i] += gm[i];
            for (int64_t i = 0; i < nh; i++)
                R->g[nm + i] += gh[i];
        }
        double ss = 0;
        for (int64_t i = 0; i < n; i++)
            ss += R->g[i] * R->g[i];
        const double norm = sqrt(ss);
        R->norm[s] = norm;
        R->clipped[s] = mo->clip > 0 && norm > mo->clip;
        if (R->clipped[s])
            for (int64_t i = 0; i < n; i++)
                R->g[i] *= mo->clip / norm;
        for (int64_t i = 0; i < n; i++) {
            const rv_adamw_opts *o = i < nm ? mo : ho;
            const double lr = naive_lr(o, s), t = s + 1;
            if (decay[i])
                R->p[i] *= 1.0 - lr * o->wd;
            R->m[i] = o->beta1 * R->m[i] + (1 - o->beta1) * R->g[i];
            R->v[i] = o->beta2 * R->v[i] + (1 - o->beta2) * R->g[i] * R->g[i];
            const double mhat = R->m[i] / (1 - pow(o->beta1, t));
            const double vhat = R->v[i] / (1 - pow(o->beta2, t));
            R->p[i] -= lr * mhat / (sqrt(vhat) + o->eps);
        }
    }
    free(gm);
    free(gh);
}

static void ref_free(ref_run *R)
{
    free(R->p), free(R->m), free(R->v), free(R->g);
}

/* |got - want| <= rtol * |want| + atol * max|want| over x (n). */
static void assert_near(const char *what, const float *got, const double *want, int64_t n,
                        double rtol, double atol)
{
    double big = 0;
    for (int64_t i = 0; i < n; i++)
        big = fmax(big, fabs(want[i]));
    for (int64_t i = 0; i < n; i++) {
        const double tol = rtol * fabs(want[i]) + atol * big;
        cr_assert(fabs((double)got[i] - want[i]) <= tol, "%s[%lld]: got %.9g, want %.9g", what,
                  (long long)i, (double)got[i], want[i]);
    }
}

/* ---- the mesh ------------------------------------------------------------------------ */

typedef struct shared {
    const rv_vit_model *m0;
    const rv_train_head *h0;
    rv_adamw_opts mo, ho;
    uint64_t salt;
    /* per world rank, after the last step */
    float *p[RANKS], *mom[RANKS], *vel[RANKS], *g[RANKS];
    rv_train_step_info info[RANKS][STEPS];
} shared;

static rv_status rank_body(rv_comm *world, void *arg)
{
    shared *S = arg;
    const int wr = world->rank;
    rv_comm *cp = NULL, *dp = NULL;
    rv_vit_model *m = NULL, *g = NULL;
    rv_train_head *h = NULL, *dh = NULL;
    rv_adamw *st8 = NULL;
    rv_status st;
    if ((st = rv_comm_mesh_split(world, CP, &cp, &dp)) != RV_OK ||
        (st = rv_vit_new(&S->m0->cfg, &m)) != RV_OK ||
        (st = rv_vit_new(&S->m0->cfg, &g)) != RV_OK ||
        (st = rv_train_head_new(&S->m0->cfg, RV_TASK_CLASSIFY, CLASSES, &h)) != RV_OK ||
        (st = rv_train_head_new(&S->m0->cfg, RV_TASK_CLASSIFY, CLASSES, &dh)) != RV_OK ||
        (st = rv_adamw_new_model(m, h, &st8)) != RV_OK)
        goto end;
    memcpy(m->arena, S->m0->arena, sizeof(float) * m->arena_floats);
    memcpy(h->arena, S->h0->arena, sizeof(float) * h->arena_floats);
    const rv_train_step_opts so = {.model = &S->mo, .head = &S->ho};
    for (int s = 0; s < STEPS; s++) {
        rank_grad(s, wr, g->arena, g->arena_floats, S->salt);
        rank_grad(s, wr, dh->arena, dh->arena_floats, S->salt + 77);
        if ((st = rv_train_step(st8, m, g, h, dh, cp, dp, &so, &S->info[wr][s])) != RV_OK)
            goto end;
    }
    const size_t nm = m->arena_floats, nh = h->arena_floats, n = nm + nh;
    S->p[wr] = malloc(sizeof(float) * n);
    S->g[wr] = malloc(sizeof(float) * n);
    S->mom[wr] = malloc(sizeof(float) * n);
    S->vel[wr] = malloc(sizeof(float) * n);
    if (!S->p[wr] || !S->g[wr] || !S->mom[wr] || !S->vel[wr]) {
        st = rv_fail(RV_ERR_NOMEM, "out of memory");
        goto end;
    }
    memcpy(S->p[wr], m->arena, sizeof(float) * nm);
    memcpy(S->p[wr] + nm, h->arena, sizeof(float) * nh);
    memcpy(S->g[wr], g->arena, sizeof(float) * nm);
    memcpy(S->g[wr] + nm, dh->arena, sizeof(float) * nh);
    memcpy(S->mom[wr], st8->m, sizeof(float) * n);
    memcpy(S->vel[wr], st8->v, sizeof(float) * n);
    if (st8->step != STEPS)
        st = rv_fail(RV_ERR_INTERNAL, "rank %d: step %lld after %d steps", wr,
                     (long long)st8->step, STEPS);
end:
    rv_adamw_free(&st8);
    rv_train_head_free(&h), rv_train_head_free(&dh);
    rv_vit_free(&m), rv_vit_free(&g);
    rv_comm_free(&cp), rv_comm_free(&dp);
    return st;
}

static void make_model(rv_vit_model **m, rv_train_head **h)
{
    rv_vit_config c = tiny_cfg();
    cr_assert_eq(rv_vit_new(&c, m), RV_OK, "%s", rv_last_error());
    cr_assert_eq(rv_vit_init_random(*m, 5), RV_OK, "%s", rv_last_error());
    if (h) {
        cr_assert_eq(rv_train_head_new(&c, RV_TASK_CLASSIFY, CLASSES, h), RV_OK);
        cr_assert_eq(rv_train_head_init(*h, 6), RV_OK);
        /* Non-zero biases, so that their (absent) decay would show. */
        for (int i = 0; i < CLASSES; i++)
            (*h)->cls_b[i] = 0.1f * (float)(i + 1);
    }
}

Test(train_step, mesh_2x2_against_double_reference)
{
    rv_vit_model *m0 = NULL;
    rv_train_head *h0 = NULL;
    make_model(&m0, &h0);
    shared S;
    memset(&S, 0, sizeof S);
    S.m0 = m0;
    S.h0 = h0;
    S.salt = 42;
    make_opts(&S.mo, &S.ho, 1.0);
    cr_assert_eq(rv_local_run(RANKS, rank_body, &S), RV_OK, "%s", rv_last_error());

    const int64_t nm = rv_vit_params(m0), nh = (int64_t)h0->arena_floats, n = nm + nh;
    uint8_t *decay = malloc((size_t)n);
    cr_assert_not_null(decay);
    rv_train_decay_mask(m0, h0, decay);
    ref_run R;
    reference(&R, m0->arena, nm, h0->arena, nh, decay, RANKS, STEPS, &S.mo, &S.ho, S.salt);
    /* The case is what it means to be: steps 0 and 2 clipped, step 1 not. */
    cr_assert(R.clipped[0] && !R.clipped[1] && R.clipped[2], "norms %g %g %g", R.norm[0],
              R.norm[1], R.norm[2]);
    for (int s = 0; s < STEPS; s++)
        for (int r = 0; r < RANKS; r++) {
            const rv_train_step_info *in = &S.info[r][s];
            cr_assert(fabs(in->grad_norm - R.norm[s]) <= TOL_NORM_MESH * R.norm[s],
                      "step %d rank %d: norm %.9g, want %.9g", s, r, in->grad_norm, R.norm[s]);
            cr_assert_eq(in->clipped, R.clipped[s], "step %d rank %d", s, r);
            cr_assert(fabs(in->lr - naive_lr(&S.mo, s)) <= TOL_LR * S.mo.lr, "step %d: lr %.17g",
                      s, in->lr);
            cr_assert(fabs(in->head_lr - naive_lr(&S.ho, s)) <= TOL_LR * S.ho.lr,
                      "step %d: head lr %.17g",
                      s, in->head_lr);
            cr_assert_eq(in->step, s + 1);
        }
    assert_near("params", S.p[0], R.p, n, PARAMS_RTOL, PARAMS_ATOL);
    assert_near("first moments", S.mom[0], R.m, n, MOMENTS_RTOL, MOMENTS_ATOL);
    assert_near("second moments", S.vel[0], R.v, n, MOMENTS_RTOL, MOMENTS_ATOL);
    assert_near("summed clipped gradient", S.g[0], R.g, n, MOMENTS_RTOL, MOMENTS_ATOL);
    for (int r = 1; r < RANKS; r++) {
        cr_assert_eq(memcmp(S.p[r], S.p[0], sizeof(float) * (size_t)n), 0,
                     "rank %d's parameters differ from rank 0's", r);
        cr_assert_eq(memcmp(S.mom[r], S.mom[0], sizeof(float) * (size_t)n), 0);
        cr_assert_eq(memcmp(S.vel[r], S.vel[0], sizeof(float) * (size_t)n), 0);
    }
    ref_free(&R);
    free(decay);
    for (int r = 0; r < RANKS; r++)
        free(S.p[r]), free(S.g[r]), free(S.mom[r]), free(S.vel[r]);
    rv_train_head_free(&h0);
    rv_vit_free(&m0);
}

/* No head, no communicators (one process training the encoder alone), no clip. */
Test(train_step, model_alone_without_comms)
{
    rv_vit_model *m = NULL, *g = NULL;
    make_model(&m, NULL);
    cr_assert_eq(rv_vit_new(&m->cfg, &g), RV_OK);
    const int64_t nm = rv_vit_params(m);
    float *p0 = malloc(sizeof(float) * (size_t)nm);
    uint8_t *decay = malloc((size_t)nm);
    cr_assert(p0 && decay);
    memcpy(p0, m->arena, sizeof(float) * (size_t)nm);
    rv_train_decay_mask(m, NULL, decay);
    rv_adamw_opts mo, ho;
    make_opts(&mo, &ho, 0.0);
    rv_adamw *o = NULL;
    cr_assert_eq(rv_adamw_new_model(m, NULL, &o), RV_OK, "%s", rv_last_error());
    cr_assert_eq(o->n, nm);
    const rv_train_step_opts so = {.model = &mo};
    rv_train_step_info info;
    for (int s = 0; s < STEPS; s++) {
        rank_grad(s, 0, g->arena, g->arena_floats, 9);
        cr_assert_eq(rv_train_step(o, m, g, NULL, NULL, NULL, NULL, &so, &info), RV_OK, "%s",
                     rv_last_error());
        cr_assert_eq(info.clipped, 0);
        cr_assert_eq(info.head_lr, info.lr);
    }
    ref_run R;
    reference(&R, p0, nm, NULL, 0, decay, 1, STEPS, &mo, &mo, 9);
    cr_assert(fabs(info.grad_norm - R.norm[STEPS - 1]) <= TOL_NORM * R.norm[STEPS - 1]);
    assert_near("params", m->arena, R.p, nm, PARAMS_RTOL, PARAMS_ATOL);
    assert_near("first moments", o->m, R.m, nm, ALONE_RTOL, ALONE_ATOL);
    ref_free(&R);
    free(p0);
    free(decay);
    rv_adamw_free(&o);
    rv_vit_free(&m), rv_vit_free(&g);
}

Test(train_step, non_finite_gradient_changes_nothing)
{
    rv_vit_model *m = NULL, *g = NULL;
    rv_train_head *h = NULL, *dh = NULL;
    make_model(&m, &h);
    cr_assert_eq(rv_vit_new(&m->cfg, &g), RV_OK);
    cr_assert_eq(rv_train_head_new(&m->cfg, RV_TASK_CLASSIFY, CLASSES, &dh), RV_OK);
    rv_adamw *o = NULL;
    cr_assert_eq(rv_adamw_new_model(m, h, &o), RV_OK);
    rv_adamw_opts mo, ho;
    make_opts(&mo, &ho, 1.0);
    rank_grad(0, 0, g->arena, g->arena_floats, 3);
    dh->arena[1] = INFINITY;
    const int64_t nm = rv_vit_params(m);
    float *before = malloc(sizeof(float) * (size_t)nm);
    cr_assert_not_null(before);
    memcpy(before, m->arena, sizeof(float) * (size_t)nm);
    const rv_train_step_opts so = {.model = &mo, .head = &ho};
    rv_train_step_info info;
    cr_assert_eq(rv_train_step(o, m, g, h, dh, NULL, NULL, &so, &info), RV_ERR_INVALID);
    cr_assert(!isfinite(info.grad_norm));
    cr_assert(strstr(rv_last_error(), "not finite"), "%s", rv_last_error());
    cr_assert_eq(memcmp(before, m->arena, sizeof(float) * (size_t)nm), 0);
    cr_assert_eq(o->step, 0);
    for (int64_t i = 0; i < o->n; i++)
        cr_assert(o->m[i] == 0 && o->v[i] == 0);
    free(before);
    rv_adamw_free(&o);
    rv_train_head_free(&h), rv_train_head_free(&dh);
    rv_vit_free(&m), rv_vit_free(&g);
}

Test(train_step, sizes_checked_and_state_helpers)
{
    rv_vit_model *m = NULL, *g = NULL;
    rv_train_head *h = NULL, *dh = NULL;
    make_model(&m, &h);
    cr_assert_eq(rv_vit_new(&m->cfg, &g), RV_OK);
    cr_assert_eq(rv_train_head_new(&m->cfg, RV_TASK_CLASSIFY, CLASSES + 1, &dh), RV_OK);
    rv_adamw *o = NULL, *o2 = NULL, *small = NULL;
    cr_assert_eq(rv_adamw_new_model(m, h, &o), RV_OK);
    const int64_t n = rv_vit_params(m) + (int64_t)h->arena_floats;
    cr_assert_eq(o->n, n);
    uint8_t *mask = malloc((size_t)n);
    cr_assert_not_null(mask);
    rv_train_decay_mask(m, h, mask);
    cr_assert_eq(memcmp(mask, o->decay, (size_t)n), 0);
    rv_adamw_opts mo, ho;
    make_opts(&mo, &ho, 1.0);
    const rv_train_step_opts so = {.model = &mo, .head = &ho};
    /* The head's gradient has another class count. */
    cr_assert_eq(rv_train_step(o, m, g, h, dh, NULL, NULL, &so, NULL), RV_ERR_INVALID);
    /* A state without the head's part. */
    cr_assert_eq(rv_adamw_new_model(m, NULL, &small), RV_OK);
    cr_assert_eq(rv_train_step(small, m, g, h, h, NULL, NULL, &so, NULL), RV_ERR_INVALID);
    cr_assert_eq(rv_train_step(o, m, g, h, NULL, NULL, NULL, &so, NULL), RV_ERR_INVALID);
    cr_assert_eq(rv_train_step(o, m, g, NULL, NULL, NULL, NULL, NULL, NULL), RV_ERR_INVALID);
    /* rv_adamw_copy: moments and step, sizes must agree. */
    cr_assert_eq(rv_adamw_new_model(m, h, &o2), RV_OK);
    for (int64_t i = 0; i < n; i++)
        o->m[i] = (float)i, o->v[i] = (float)(2 * i);
    o->step = 7;
    cr_assert_eq(rv_adamw_copy(o2, o), RV_OK);
    cr_assert_eq(memcmp(o2->m, o->m, sizeof(float) * (size_t)n), 0);
    cr_assert_eq(memcmp(o2->v, o->v, sizeof(float) * (size_t)n), 0);
    cr_assert_eq(o2->step, 7);
    cr_assert_eq(rv_adamw_copy(small, o), RV_ERR_INVALID);
    free(mask);
    rv_adamw_free(&o), rv_adamw_free(&o2), rv_adamw_free(&small);
    rv_train_head_free(&h), rv_train_head_free(&dh);
    rv_vit_free(&m), rv_vit_free(&g);
}
