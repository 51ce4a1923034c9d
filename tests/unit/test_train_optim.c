/* test_train_optim.c: the optimizer half of rv_vit_train.h (encoder/train/train_adamw.c,
 * train_decay.c): the default options; rv_lr_at's warm-up and cosine values
 * against closed forms; AdamW against a double-precision textbook AdamW written
 * here (several steps, decay mask, bias correction, schedule) and against
 * torch.optim.AdamW itself, run by the peer script tests/peer/adamw_golden.py at
 * test time; the step's independence of the thread count; rv_grad_norm against
 * a double sum; and the decay mask against the tensor names of the saved model
 * and head (1 exactly on the weight matrices). */
#include <criterion/criterion.h>

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ref_ops.h"
#include "rv_safetensors.h"
#include "rv_vit.h"
#include "rv_vit_train.h"

#ifndef RV_TESTS_SOURCE_DIR
#error "RV_TESTS_SOURCE_DIR must name tests/ (tests/CMakeLists.txt sets it)"
#endif

/* Tolerances, all relative.
 * The schedule, in double, against closed forms and the peer's: a cosine and a few
 * products of values up to the peak rate, relative to that peak (its scale); double
 * epsilon is 2.2e-16. */
#define TOL_SCHEDULE 1e-12
/* AdamW (f32 state and parameters, as torch keeps them) against the double
 * reference and against torch: normalised error (rv_rel_err) after each step, a
 * few f32 roundings (epsilon 1.2e-7) per element per step, over at most 8 steps. */
#define TOL_STEP 1e-6
/* rv_grad_norm (a double sum of f32 squares, about 125 000 of them) against the
 * double sum in another order: sqrt(n) double roundings, far under. */
#define TOL_NORM 1e-12

/* ---- options and schedule --------------------------------------------------------- */

Test(adamw, defaults)
{
    rv_adamw_opts o;
    memset(&o, 0x5a, sizeof o);
    rv_adamw_opts_default(&o);
    cr_assert_eq(o.lr, 1e-4);
    cr_assert_eq(o.beta1, 0.9);
    cr_assert_eq(o.beta2, 0.999);
    cr_assert_eq(o.eps, 1e-8);
    cr_assert_eq(o.wd, 0.05);
    cr_assert_eq(o.warmup, 0);
    cr_assert_eq(o.total, 0);
    cr_assert_eq(o.min_lr, 0.0);
    cr_assert_eq(o.clip, 1.0);
    /* No warm-up, no total: the peak rate at every step. */
    for (int64_t s = 0; s < 1000; s += 97)
        cr_assert_eq(rv_lr_at(&o, s), 1e-4);
}

/* The rate of step s within TOL_SCHEDULE of the peak rate o->lr, the scale. */
static void assert_lr(const rv_adamw_opts *o, int64_t s, double want, const char *what)
{
    double got = rv_lr_at(o, s);
    cr_assert(fabs(got - want) <= TOL_SCHEDULE * o->lr, "%s: got %.17g, want %.17g", what, got,
              want);
}

Test(adamw, schedule_warmup_then_cosine)
{
    rv_adamw_opts o;
    rv_adamw_opts_default(&o);
    o.lr = 2.0;
    o.min_lr = 0.2;
    o.warmup = 4;
    o.total = 12;
    /* Warm-up: lr * (step + 1) / warmup. */
    assert_lr(&o, 0, 0.5, "step 0");
    assert_lr(&o, 1, 1.0, "step 1");
    assert_lr(&o, 3, 2.0, "step 3");
    /* Cosine over [4, 12): the peak at 4, the midpoint at 8, a quarter at 6. */
    assert_lr(&o, 4, 2.0, "step 4");
    assert_lr(&o, 8, 1.1, "step 8");
    assert_lr(&o, 6, 0.2 + 1.8 * 0.5 * (1 + sqrt(0.5)), "step 6");
    assert_lr(&o, 10, 0.2 + 1.8 * 0.5 * (1 - sqrt(0.5)), "step 10");
    assert_lr(&o, 11, 0.2 + 1.8 * 0.5 * (1 + cos(M_PI * 7.0 / 8.0)), "step 11");
    /* From total on: min_lr. */
    assert_lr(&o, 12, 0.2, "step 12");
    assert_lr(&o, 1000, 0.2, "step 1000");
    /* Monotone: up during warm-up, down after. */
    for (int64_t s = 1; s < 20; s++) {
        if (s < 4)
            cr_assert_gt(rv_lr_at(&o, s), rv_lr_at(&o, s - 1));
        else
            cr_assert_leq(rv_lr_at(&o, s), rv_lr_at(&o, s - 1));
    }
    /* total <= warmup: warm-up, then constant. */
    o.total = 3;
    assert_lr(&o, 2, 1.5, "short total, step 2");
    assert_lr(&o, 4, 2.0, "short total, step 4");
    assert_lr(&o, 100, 2.0, "short total, step 100");
    /* No warm-up: cosine from the first step. */
    o.warmup = 0;
    o.total = 10;
    assert_lr(&o, 0, 2.0, "no warm-up, step 0");
    assert_lr(&o, 5, 1.1, "no warm-up, step 5");
}

/* ---- AdamW against a double-precision reference ----------------------------------- */

/* Textbook AdamW (Loshchilov & Hutter, torch's form), all in double. */
typedef struct ref_adamw {
    int64_t n;
    double *p, *m, *v;
    int64_t t;
} ref_adamw;

static void ref_step(ref_adamw *r, const float *g, const uint8_t *decay, double lr, double b1,
                     double b2, double eps, double wd)
{
    r->t++;
    for (int64_t i = 0; i < r->n; i++) {
        if (decay[i])
            r->p[i] -= lr * wd * r->p[i];
        r->m[i] = b1 * r->m[i] + (1 - b1) * g[i];
        r->v[i] = b2 * r->v[i] + (1 - b2) * (double)g[i] * g[i];
        double mhat = r->m[i] / (1 - pow(b1, (double)r->t));
        double vhat = r->v[i] / (1 - pow(b2, (double)r->t));
        r->p[i] -= lr * mhat / (sqrt(vhat) + eps);
    }
}

/* Parameters and gradients of mixed sizes; every 13th gradient is zero. */
static void make_problem(int64_t n, uint64_t seed, float *p, float *g, int steps,
                         uint8_t *decay)
{
    ref_rng r = ref_rng_make(seed);
    ref_fill_normal(&r, p, (size_t)n, 0.0f, 1.0f);
    for (int64_t i = 0; i < n; i++)
        decay[i] = ref_rng_uniform(&r) < 0.5;
    for (int s = 0; s < steps; s++) {
        float *gs = g + (size_t)s * n;
        ref_fill_normal(&r, gs, (size_t)n, 0.0f, 1.0f);
        for (int64_t i = 0; i < n; i++) {
            gs[i] *= (float)exp(-5.0 + 6.0 * (double)(i % 7) / 6.0);
            if (i % 13 == 0)
                gs[i] = 0.0f;
        }
    }
}

Test(adamw, matches_double_reference)
{
    const int64_t n = 70001; /* above the threaded-step threshold */
    const int steps = 8;
    float *p = ref_alloc_f((size_t)n), *g = ref_alloc_f((size_t)n * steps);
    uint8_t *decay = malloc((size_t)n);
    make_problem(n, 7, p, g, steps, decay);
    rv_adamw_opts o;
    rv_adamw_opts_default(&o);
    o.lr = 1e-2;
    o.wd = 0.1;
    o.warmup = 2;
    o.total = 6; /* steps 6, 7 at min_lr */
    o.min_lr = 1e-3;
    ref_adamw r = {n, ref_dup_d(p, (size_t)n), ref_alloc_d((size_t)n), ref_alloc_d((size_t)n), 0};
    float *p0 = ref_dup_f(p, (size_t)n);
    rv_adamw *a = NULL;
    cr_assert_eq(rv_adamw_new(n, decay, &a), RV_OK, "%s", rv_last_error());
    cr_assert_eq(a->n, n);
    cr_assert_eq(a->step, 0);
    for (int s = 0; s < steps; s++) {
        const float *gs = g + (size_t)s * n;
        cr_assert_eq(rv_adamw_step(a, &o, p, gs), RV_OK, "%s", rv_last_error());
        cr_assert_eq(a->step, s + 1);
        ref_step(&r, gs, decay, rv_lr_at(&o, s), o.beta1, o.beta2, o.eps, o.wd);
        double ep = rv_rel_err(p, r.p, (size_t)n);
        double em = rv_rel_err(a->m, r.m, (size_t)n);
        double ev = rv_rel_err(a->v, r.v, (size_t)n);
        cr_log_info("step %d: lr %.3g, err p %.2e m %.2e v %.2e", s, rv_lr_at(&o, s), ep, em, ev);
        cr_assert_leq(ep, TOL_STEP, "step %d: params err %g", s, ep);
        cr_assert_leq(em, TOL_STEP, "step %d: m err %g", s, em);
        cr_assert_leq(ev, TOL_STEP, "step %d: v err %g", s, ev);
    }
    /* Without decay and without a gradient an element never moves; with decay
     * it shrinks by exactly the product of (1 - lr wd). */
    double shrink = 1.0;
    for (int s = 0; s < steps; s++)
        shrink *= 1.0 - rv_lr_at(&o, s) * o.wd;
    int checked = 0;
    for (int64_t i = 0; i < n; i += 13) {
        if (!decay[i])
            cr_assert_eq(p[i], p0[i], "element %lld moved without gradient or decay",
                         (long long)i);
        else
            cr_assert(fabs(p[i] - p0[i] * shrink) <= TOL_STEP * fabs(p0[i]) + 1e-30);
        checked++;
    }
    cr_assert_gt(checked, 5000);
    rv_adamw_free(&a);
    cr_assert_null(a);
    free(r.p);
    free(r.m);
    free(r.v);
    free(p0);
    free(p);
    free(g);
    free(decay);
}

/* The error the reference would see without bias correction (so the test can fail). */
Test(adamw, first_step_is_bias_corrected)
{
    const int64_t n = 64;
    float p[64], g[64];
    for (int i = 0; i < n; i++) {
        p[i] = 1.0f;
        g[i] = (float)(i - 32) * 0.25f;
    }
    rv_adamw_opts o;
    rv_adamw_opts_default(&o);
    o.lr = 0.5;
    o.wd = 0.0;
    rv_adamw *a = NULL;
    cr_assert_eq(rv_adamw_new(n, NULL, &a), RV_OK);
    cr_assert_eq(rv_adamw_step(a, &o, p, g), RV_OK);
    /* Step 1 of Adam moves every element with a gradient by lr * sign(g) (up to eps). */
    for (int i = 0; i < n; i++) {
        double want = g[i] == 0 ? 1.0 : 1.0 - 0.5 * (g[i] > 0 ? 1 : -1) * fabs(g[i]) /
                                                   (fabs(g[i]) + 1e-8);
        cr_assert(fabs(p[i] - want) <= TOL_STEP * fabs(want), "element %d: %g, want %g", i, p[i], want);
    }
    rv_adamw_free(&a);
}

Test(adamw, thread_count_does_not_change_bits)
{
    const int64_t n = 200003;
    const int steps = 3;
    float *p1 = ref_alloc_f((size_t)n), *g = ref_alloc_f((size_t)n * steps);
    uint8_t *decay = malloc((size_t)n);
    make_problem(n, 11, p1, g, steps, decay);
    float *p2 = ref_dup_f(p1, (size_t)n);
    rv_adamw_opts o;
    rv_adamw_opts_default(&o);
    o.lr = 3e-3;
    rv_adamw *a1 = NULL, *a2 = NULL;
    cr_assert_eq(rv_adamw_new(n, decay, &a1), RV_OK);
    cr_assert_eq(rv_adamw_new(n, decay, &a2), RV_OK);
    const int saved = omp_get_max_threads();
    for (int s = 0; s < steps; s++) {
        omp_set_num_threads(1);
        cr_assert_eq(rv_adamw_step(a1, &o, p1, g + (size_t)s * n), RV_OK);
        omp_set_num_threads(4);
        cr_assert_eq(rv_adamw_step(a2, &o, p2, g + (size_t)s * n), RV_OK);
    }
    const float *gv[1] = {g};
    const int64_t nn[1] = {n * steps};
    omp_set_num_threads(1);
    double n1 = rv_grad_norm(gv, nn, 1);
    omp_set_num_threads(3);
    double n3 = rv_grad_norm(gv, nn, 1);
    omp_set_num_threads(saved);
    cr_assert_eq(memcmp(p1, p2, (size_t)n * 4), 0);
    cr_assert_eq(memcmp(a1->m, a2->m, (size_t)n * 4), 0);
    cr_assert_eq(memcmp(a1->v, a2->v, (size_t)n * 4), 0);
    cr_assert_eq(memcmp(&n1, &n3, sizeof n1), 0, "norm %.17g vs %.17g", n1, n3);
    rv_adamw_free(&a1);
    rv_adamw_free(&a2);
    free(p1);
    free(p2);
    free(g);
    free(decay);
}

Test(adamw, state_and_arguments)
{
    rv_adamw *a = NULL;
    uint8_t d[5] = {0, 1, 7, 0, 255};
    cr_assert_eq(rv_adamw_new(5, d, &a), RV_OK);
    cr_assert_eq(a->decay[0], 0);
    cr_assert_eq(a->decay[1], 1);
    cr_assert_eq(a->decay[2], 1);
    cr_assert_eq(a->decay[4], 1);
    for (int i = 0; i < 5; i++)
        cr_assert(a->m[i] == 0 && a->v[i] == 0);
    d[1] = 0; /* copied, not borrowed */
    cr_assert_eq(a->decay[1], 1);
    rv_adamw_opts o;
    rv_adamw_opts_default(&o);
    float p[5] = {0}, g[5] = {0};
    cr_assert_eq(rv_adamw_step(a, &o, NULL, g), RV_ERR_INVALID);
    o.beta1 = 1.0;
    cr_assert_eq(rv_adamw_step(a, &o, p, g), RV_ERR_INVALID);
    cr_assert_eq(a->step, 0);
    rv_adamw_free(&a);
    rv_adamw_free(&a); /* NULL: no-op */
    rv_adamw_free(NULL);
    cr_assert_eq(rv_adamw_new(-1, NULL, &a), RV_ERR_INVALID);
    cr_assert_eq(rv_adamw_new(0, NULL, &a), RV_OK);
    rv_adamw_opts_default(&o);
    cr_assert_eq(rv_adamw_step(a, &o, NULL, NULL), RV_OK);
    cr_assert_eq(a->step, 1);
    rv_adamw_free(&a);
}

/* ---- against torch.optim.AdamW ------------------------------------------------------ */

static rv_safetensors *run_golden(void)
{
    char path[] = "/tmp/rv_adamw_golden_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 '" RV_TESTS_SOURCE_DIR "/peer/adamw_golden.py' '%s' 2>'%s.err'",
             path, path);
    int rc = system(cmd);
    rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
    cr_assert_eq(rc, 0, "adamw_golden.py failed (exit %d); see %s.err", rc, path);
    rv_safetensors *g = NULL;
    cr_assert_eq(rv_st_open(path, &g), RV_OK, "%s", rv_last_error());
    unlink(path);
    snprintf(cmd, sizeof cmd, "%s.err", path);
    unlink(cmd);
    return g;
}

/* A copy of the tensor's bytes (the file's data may be unaligned). */
static void *golden(const rv_safetensors *st, const char *name, rv_dtype dt, int64_t numel)
{
    const rv_st_tensor *t = rv_st_find(st, name);
    cr_assert_not_null(t, "golden file lacks '%s'", name);
    cr_assert_eq(t->dtype, dt, "'%s' dtype", name);
    cr_assert_eq(t->numel, numel, "'%s' has %lld elements, want %lld", name,
                 (long long)t->numel, (long long)numel);
    void *x = malloc(t->nbytes ? t->nbytes : 1);
    memcpy(x, t->data, t->nbytes);
    return x;
}

Test(adamw, matches_torch)
{
    rv_safetensors *st = run_golden();
    const rv_st_tensor *tg = rv_st_find(st, "grads");
    cr_assert_not_null(tg);
    cr_assert_eq(tg->ndim, 2);
    const int steps = (int)tg->shape[0];
    const int64_t n = tg->shape[1];
    double *opt = golden(st, "opts", RV_F64, 8);
    uint8_t *mask = golden(st, "mask", RV_U8, n);
    float *p = golden(st, "params0", RV_F32, n);
    float *g = golden(st, "grads", RV_F32, n * steps);
    float *want = golden(st, "params", RV_F32, n * steps);
    float *wm = golden(st, "m", RV_F32, n), *wv = golden(st, "v", RV_F32, n);
    double *lrs = golden(st, "lrs", RV_F64, steps);
    rv_adamw_opts o;
    rv_adamw_opts_default(&o);
    o.lr = opt[0];
    o.beta1 = opt[1];
    o.beta2 = opt[2];
    o.eps = opt[3];
    o.wd = opt[4];
    o.warmup = (int64_t)opt[5];
    o.total = (int64_t)opt[6];
    o.min_lr = opt[7];
    cr_assert_gt(steps, o.total, "the golden run must reach the min_lr phase");
    rv_adamw *a = NULL;
    cr_assert_eq(rv_adamw_new(n, mask, &a), RV_OK);
    double *wd = ref_alloc_d((size_t)n);
    for (int s = 0; s < steps; s++) {
        assert_lr(&o, s, lrs[s], "schedule vs the peer's");
        cr_assert_eq(rv_adamw_step(a, &o, p, g + (size_t)s * n), RV_OK, "%s", rv_last_error());
        ref_to_double(want + (size_t)s * n, wd, (size_t)n);
        double e = rv_rel_err(p, wd, (size_t)n);
        cr_log_info("step %d vs torch: %.2e", s, e);
        cr_assert_leq(e, TOL_STEP, "step %d: params differ from torch by %g", s, e);
    }
    ref_to_double(wm, wd, (size_t)n);
    double em = rv_rel_err(a->m, wd, (size_t)n);
    ref_to_double(wv, wd, (size_t)n);
    double ev = rv_rel_err(a->v, wd, (size_t)n);
    cr_assert_leq(em, TOL_STEP, "m differs from torch's exp_avg by %g", em);
    cr_assert_leq(ev, TOL_STEP, "v differs from torch's exp_avg_sq by %g", ev);
    rv_adamw_free(&a);
    free(wd);
    free(opt);
    free(mask);
    free(p);
    free(g);
    free(want);
    free(wm);
    free(wv);
    free(lrs);
    rv_st_free(&st);
}

/* ---- gradient norm ------------------------------------------------------------------ */

Test(adamw, grad_norm_matches_double)
{
    const int64_t len[4] = {3 * 8192 + 5, 0, 1, 100000};
    float *x[4];
    ref_rng r = ref_rng_make(3);
    double sum = 0;
    for (int k = 0; k < 4; k++) {
        x[k] = ref_alloc_f((size_t)len[k]);
        ref_fill_uniform(&r, x[k], (size_t)len[k], -2.0f, 2.0f);
        for (int64_t i = 0; i < len[k]; i++)
            sum += (double)x[k][i] * x[k][i];
    }
    const float *const gv[4] = {x[0], x[1], x[2], x[3]};
    double got = rv_grad_norm(gv, len, 4);
    cr_assert(fabs(got - sqrt(sum)) <= TOL_NORM * sqrt(sum), "norm %.17g, want %.17g", got,
              sqrt(sum));
    cr_assert_eq(rv_grad_norm(gv, len, 0), 0.0);
    double one = rv_grad_norm(gv + 2, len + 2, 1);
    cr_assert_eq(one, fabs((double)x[2][0]));
    for (int k = 0; k < 4; k++)
        free(x[k]);
}

/* ---- decay mask ----------------------------------------------------------------------- */

static rv_vit_config tiny_cfg(int T)
{
    rv_vit_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.preset, sizeof c.preset, "custom");
    c.dim = 8;
    c.layers = 2;
    c.heads = 2;
    c.mlp = 16;
    c.eps = 1e-6f;
    c.tubelet = T;
    c.patch = 4;
    c.grid = 2;
    c.audio_freq = 16;
    c.audio_time = 4;
    c.cls = 1;
    rv_vit_family_defaults(&c); /* ringvit's own family */
    return c;
}

static int decayed_name(const char *name)
{
    static const char *const suffix[] = {
        "conv_proj.weight", "ringvit.tubelet_proj.weight", "ringvit.audio_proj.weight",
        "ringvit.time_proj.weight", "self_attention.in_proj_weight",
        "self_attention.out_proj.weight", "mlp.0.weight", "mlp.3.weight",
        "heads.head.weight", "ringvit.mae_video.weight", "ringvit.mae_audio.weight"};
    size_t ln = strlen(name);
    for (size_t i = 0; i < sizeof suffix / sizeof suffix[0]; i++) {
        size_t ls = strlen(suffix[i]);
        if (ln >= ls && strcmp(name + ln - ls, suffix[i]) == 0)
            return 1;
    }
    return 0;
}

/* The expected mask from a saved file's tensor names, in data (= arena) order;
 * returns the floats covered. */
static int64_t mask_from_file(const char *path, uint8_t *mask)
{
    rv_safetensors *st = NULL;
    cr_assert_eq(rv_st_open(path, &st), RV_OK, "%s", rv_last_error());
    int64_t off = 0;
    for (int i = 0; i < rv_st_count(st); i++) {
        const rv_st_tensor *t = rv_st_at(st, i);
        cr_assert_eq(t->dtype, RV_F32);
        memset(mask + off, decayed_name(t->name), (size_t)t->numel);
        off += t->numel;
    }
    rv_st_free(&st);
    unlink(path);
    return off;
}

static void check_mask(int T, rv_task task)
{
    rv_vit_config c = tiny_cfg(T);
    rv_vit_model *m = NULL;
    rv_train_head *h = NULL;
    cr_assert_eq(rv_vit_new(&c, &m), RV_OK, "%s", rv_last_error());
    cr_assert_eq(rv_train_head_new(&c, task, 5, &h), RV_OK, "%s", rv_last_error());
    const int64_t nm = rv_vit_params(m), n = nm + (int64_t)h->arena_floats;
    uint8_t *got = malloc((size_t)n), *want = malloc((size_t)n);
    memset(got, 0x77, (size_t)n);
    memset(want, 0x55, (size_t)n);
    char path[] = "/tmp/rv_decay_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    cr_assert_eq(rv_vit_save(m, path), RV_OK, "%s", rv_last_error());
    cr_assert_eq(mask_from_file(path, want), nm);
    rv_st_writer *w = NULL;
    cr_assert_eq(rv_st_writer_new(&w), RV_OK);
    cr_assert_eq(rv_train_head_write(h, w), RV_OK, "%s", rv_last_error());
    cr_assert_eq(rv_st_writer_write(w, path), RV_OK, "%s", rv_last_error());
    rv_st_writer_free(&w);
    cr_assert_eq(mask_from_file(path, want + nm), (int64_t)h->arena_floats);

    rv_train_decay_mask(m, h, got);
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(got[i], want[i], "T %d task %s: mask[%lld] = %d, want %d", T,
                     rv_task_name(task), (long long)i, got[i], want[i]);
    /* The closed-form count of decayed weights. */
    const int64_t D = c.dim, M = c.mlp, vin = (int64_t)T * 4 * 4 * 3, ain = 16 * 4;
    int64_t ones = 0;
    for (int64_t i = 0; i < n; i++)
        ones += got[i];
    int64_t expect = D * vin + D * ain + D * D + c.layers * (3 * D * D + D * D + 2 * M * D);
    expect += task == RV_TASK_CLASSIFY ? 5 * D : (vin + ain) * D;
    cr_assert_eq(ones, expect);
    /* Without a head: the model's part alone. */
    memset(got, 0x77, (size_t)n);
    rv_train_decay_mask(m, NULL, got);
    cr_assert_eq(memcmp(got, want, (size_t)nm), 0);
    cr_assert_eq(got[nm], 0x77, "wrote past the model's part");
    free(got);
    free(want);
    rv_train_head_free(&h);
    rv_vit_free(&m);
}

Test(decay_mask, classify_t1)
{
    check_mask(1, RV_TASK_CLASSIFY);
}

Test(decay_mask, mae_t2)
{
    check_mask(2, RV_TASK_MAE);
}
