/* test_train_heads.c: the task heads and losses of rv_vit_train.h on a tiny head
 * (D 16, 5 classes; MAE patches of 24 video and 32 audio values) and synthetic
 * token sequences (an optional CLS first, then video and audio tokens mixed at
 * random), sliced over 1-3 local ranks by contiguous and zigzag plans:
 *   - task names; head creation, init determinism and spreads (xavier bounds,
 *     zero biases, mask token std 0.02); write/read round trip bit-exact; missing,
 *     misshapen and wrongly typed tensors are RV_ERR_FORMAT naming the tensor;
 *   - classify: loss and argmax against a double reference; dy, dW, db against
 *     central finite differences of that reference; the head gradient only on
 *     rank 0; label range; the same on 1, 2 and 3 ranks;
 *   - mae_hidden: deterministic, the fraction respected on 10000 tokens, CLS
 *     never hidden, the same decision for a token whichever rank holds it;
 *   - mae_loss: loss against a double reference, dy and head gradients against
 *     finite differences, cp 1 against cp 3 (losses and summed gradients), a
 *     single hidden token on one rank of three, nothing hidden (loss 0). */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ref_ops.h"
#include "rv_tokens.h"
#include "rv_vit_train.h"

#define D 16
#define C 5

/* Tolerances, all relative. A loss (f32 head outputs, summed in double) against
 * its double reference: D-term dot products and a mean over at most a few
 * hundred values, a few f32 roundings (epsilon 1.2e-7) of the loss. */
#define TOL_LOSS 1e-6
/* An analytic gradient (f32) against central differences of the double loss
 * (step 1e-5, truncation ~1e-10): normalised error (rv_rel_err) of the f32
 * products and sums, a few hundred terms. */
#define TOL_FD 1e-4
/* cp 3 against cp 1: partial losses and head gradients summed over ranks in
 * another order, by an allreduce in f32. */
#define TOL_CP 1e-5
/* Losses of exactly known logits (0 and 50), computed in double: a few roundings
 * of the logits' scale; the reference log1p(4 exp(-50)) = 7.7e-22 is far below. */
#define TOL_LOGIT_LOSS (4 * DBL_EPSILON)
#define LOGIT_SCALE 50.0

static rv_vit_config tiny_config(int dim)
{
    rv_vit_config c = {0};
    strcpy(c.preset, "custom");
    c.dim = dim, c.layers = 1, c.heads = 2, c.mlp = 2 * dim, c.eps = 1e-6f;
    c.tubelet = 2, c.patch = 2, c.grid = 3, c.audio_freq = 16, c.audio_time = 2, c.cls = 1;
    rv_vit_family_defaults(&c); /* ringvit's own family */
    return c; /* video_dim 24, audio_dim 32 */
}

static rv_train_head *head_make(rv_task task, int dim, int classes)
{
    rv_vit_config c = tiny_config(dim);
    rv_train_head *h = NULL;
    cr_assert_eq(rv_train_head_new(&c, task, classes, &h), RV_OK, "%s", rv_last_error());
    return h;
}

/* A head with every value random (biases included), so no gradient is trivially 0. */
static rv_train_head *head_random(rv_task task, uint64_t seed)
{
    rv_train_head *h = head_make(task, D, C);
    ref_rng r = ref_rng_make(seed);
    ref_fill_uniform(&r, h->arena, h->arena_floats, -0.4f, 0.4f);
    return h;
}

/* ---- sequences and slices --------------------------------------------------------------- */

typedef struct seq {
    int64_t S, nv, na, vd, ad;
    uint8_t *mod;
    int64_t *pos;
    double *time;
    float *video, *audio; /* (nv, vd), (na, ad) in token order */
    int64_t *patch_of;    /* (S) row in video or audio, -1 for CLS */
    float *y;             /* (S, D) the encoder's outputs */
} seq;

static void seq_make(seq *s, int64_t S, int cls, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    s->S = S, s->vd = 24, s->ad = 32;
    s->mod = malloc((size_t)S);
    s->pos = calloc(3 * (size_t)S, sizeof(int64_t));
    s->time = malloc(sizeof(double) * 2 * (size_t)S);
    s->patch_of = malloc(sizeof(int64_t) * (size_t)S);
    ref_rng r = ref_rng_make(seed);
    for (int64_t i = 0; i < S; i++) {
        int m = cls && i == 0 ? RV_MOD_CLS : ref_rng_uniform(&r) < 0.6 ? RV_MOD_VIDEO : RV_MOD_AUDIO;
        s->mod[i] = (uint8_t)m;
        s->time[2 * i] = 0.1 * (double)i, s->time[2 * i + 1] = 0.1 * (double)i + 0.5;
        s->patch_of[i] = m == RV_MOD_VIDEO ? s->nv++ : m == RV_MOD_AUDIO ? s->na++ : -1;
    }
    s->video = ref_alloc_f((size_t)(s->nv * s->vd));
    s->audio = ref_alloc_f((size_t)(s->na * s->ad));
    s->y = ref_alloc_f((size_t)(S * D));
    /* Patches with an offset and a spread of their own, so normalising matters. */
    for (int64_t k = 0; k < s->nv; k++)
        ref_fill_normal(&r, s->video + k * s->vd, (size_t)s->vd, (float)(ref_rng_uniform(&r) - 0.5),
                        (float)(0.5 + ref_rng_uniform(&r)));
    for (int64_t k = 0; k < s->na; k++)
        ref_fill_normal(&r, s->audio + k * s->ad, (size_t)s->ad, (float)(2 * ref_rng_uniform(&r)),
                        (float)(0.2 + ref_rng_uniform(&r)));
    ref_fill_normal(&r, s->y, (size_t)(S * D), 0.0f, 1.0f);
}

static void seq_free(seq *s)
{
    free(s->mod), free(s->pos), free(s->time), free(s->video), free(s->audio);
    free(s->patch_of), free(s->y);
}

/* Rank r's slice in local order (plan segments, segment 0 first). Plain malloc
 * only: it runs on rank threads, where Criterion asserts must not be used. */
typedef struct slice {
    rv_vit_tokens t;
    int64_t *global; /* (len) */
    uint8_t *mod;
    int64_t *pos;
    double *time;
    float *video, *audio, *y;
} slice;

static void slice_make(const seq *s, const rv_shard_plan *p, int r, slice *o)
{
    memset(o, 0, sizeof *o);
    const int64_t len = rv_shard_len(p, r), n = len + 1;
    o->global = malloc(sizeof(int64_t) * (size_t)n);
    o->mod = malloc((size_t)n);
    o->pos = malloc(sizeof(int64_t) * 3 * (size_t)n);
    o->time = malloc(sizeof(double) * 2 * (size_t)n);
    o->video = malloc(sizeof(float) * (size_t)(n * s->vd));
    o->audio = malloc(sizeof(float) * (size_t)(n * s->ad));
    o->y = malloc(sizeof(float) * (size_t)(n * D));
    rv_shard_seg seg[RV_SHARD_MAX_SEGS];
    int ns = rv_shard_segments(p, r, seg);
    int64_t k = 0, nv = 0, na = 0;
    for (int j = 0; j < ns; j++)
        for (int64_t g = seg[j].start; g < seg[j].start + seg[j].len; g++, k++) {
            o->global[k] = g;
            o->mod[k] = s->mod[g];
            memcpy(o->pos + 3 * k, s->pos + 3 * g, 3 * sizeof(int64_t));
            memcpy(o->time + 2 * k, s->time + 2 * g, 2 * sizeof(double));
            memcpy(o->y + k * D, s->y + g * D, sizeof(float) * D);
            if (s->mod[g] == RV_MOD_VIDEO)
                memcpy(o->video + nv++ * s->vd, s->video + s->patch_of[g] * s->vd,
                       sizeof(float) * (size_t)s->vd);
            else if (s->mod[g] == RV_MOD_AUDIO)
                memcpy(o->audio + na++ * s->ad, s->audio + s->patch_of[g] * s->ad,
                       sizeof(float) * (size_t)s->ad);
        }
    o->t = (rv_vit_tokens){.len = len, .modality = o->mod, .pos = o->pos, .seq_time = o->time, .nvideo = nv, .video = o->video, .naudio = na, .audio = o->audio, .grid = 3, .audio_steps = 0};
}

static void slice_free(slice *o)
{
    free(o->global), free(o->mod), free(o->pos), free(o->time);
    free(o->video), free(o->audio), free(o->y);
}

/* ---- double references ------------------------------------------------------------------- */

/* Cross-entropy of W mean(y over non-CLS) + b; *pred the argmax. */
static double ref_classify(const seq *s, const double *y, const double *W, const double *b,
                           int label, int *pred)
{
    double p[D] = {0}, z[C];
    int64_t n = 0;
    for (int64_t i = 0; i < s->S; i++)
        if (s->mod[i] != RV_MOD_CLS) {
            for (int d = 0; d < D; d++)
                p[d] += y[i * D + d];
            n++;
        }
    for (int d = 0; d < D; d++)
        p[d] /= (double)n;
    double zmax = -INFINITY, sum = 0;
    for (int c = 0; c < C; c++) {
        z[c] = b[c];
        for (int d = 0; d < D; d++)
            z[c] += W[c * D + d] * p[d];
        if (z[c] > zmax) {
            zmax = z[c];
            if (pred)
                *pred = c;
        }
    }
    for (int c = 0; c < C; c++)
        sum += exp(z[c] - zmax);
    return zmax + log(sum) - z[label];
}

/* The masked-reconstruction loss of the hidden tokens (global order). */
static double ref_mae(const seq *s, const uint8_t *hidden, const double *y, const double *Wv,
                      const double *bv, const double *Wa, const double *ba)
{
    double sse = 0, n = 0, t[64];
    for (int64_t i = 0; i < s->S; i++) {
        if (!hidden[i] || s->mod[i] == RV_MOD_CLS)
            continue;
        const int video = s->mod[i] == RV_MOD_VIDEO;
        const int64_t pd = video ? s->vd : s->ad;
        const float *x = video ? s->video + s->patch_of[i] * pd : s->audio + s->patch_of[i] * pd;
        double mean = 0, var = 0;
        for (int64_t j = 0; j < pd; j++)
            mean += x[j] / (double)pd;
        for (int64_t j = 0; j < pd; j++)
            var += (x[j] - mean) * (x[j] - mean) / (double)pd;
        for (int64_t j = 0; j < pd; j++)
            t[j] = (x[j] - mean) / sqrt(var + 1e-6);
        const double *W = video ? Wv : Wa, *b = video ? bv : ba;
        for (int64_t j = 0; j < pd; j++) {
            double q = b[j];
            for (int d = 0; d < D; d++)
                q += W[j * D + d] * y[i * D + d];
            sse += (q - t[j]) * (q - t[j]);
        }
        n += (double)pd;
    }
    return n > 0 ? sse / n : 0;
}

/* The analytic gradient got (n floats) against central differences of f over x
 * (n doubles, changed in place and restored). */
typedef double (*loss_fn)(void *ctx);
static double fd_check(const float *got, double *x, size_t n, double scale, loss_fn f, void *ctx)
{
    const double eps = 1e-5;
    double *want = ref_alloc_d(n);
    for (size_t i = 0; i < n; i++) {
        const double keep = x[i];
        x[i] = keep + eps;
        double lp = f(ctx);
        x[i] = keep - eps;
        double lm = f(ctx);
        x[i] = keep;
        want[i] = scale * (lp - lm) / (2 * eps);
    }
    double e = rv_rel_err(got, want, n);
    free(want);
    return e;
}

/* ---- task names and heads --------------------------------------------------------------------- */

Test(train_heads, task_names)
{
    rv_task t;
    cr_assert_str_eq(rv_task_name(RV_TASK_CLASSIFY), "classify");
    cr_assert_str_eq(rv_task_name(RV_TASK_MAE), "mae");
    cr_assert_eq(rv_task_parse("classify", &t), RV_OK);
    cr_assert_eq(t, RV_TASK_CLASSIFY);
    cr_assert_eq(rv_task_parse("mae", &t), RV_OK);
    cr_assert_eq(t, RV_TASK_MAE);
    cr_assert_eq(rv_task_parse("segment", &t), RV_ERR_INVALID);
    cr_assert(strstr(rv_last_error(), "segment"), "%s", rv_last_error());
    cr_assert_eq(rv_task_parse(NULL, &t), RV_ERR_INVALID);
}

Test(train_heads, head_layout)
{
    rv_train_head *h = head_make(RV_TASK_CLASSIFY, D, C);
    cr_assert_eq(h->arena_floats, (size_t)(C * D + C));
    cr_assert_eq(h->cls_w, h->arena);
    cr_assert_eq(h->cls_b, h->arena + C * D);
    cr_assert_null(h->mask_token);
    for (size_t i = 0; i < h->arena_floats; i++)
        cr_assert_eq(h->arena[i], 0.0f);
    rv_train_head_free(&h);
    cr_assert_null(h);
    rv_train_head_free(&h);

    h = head_make(RV_TASK_MAE, D, 0);
    cr_assert_eq(h->video_dim, 24);
    cr_assert_eq(h->audio_dim, 32);
    cr_assert_eq(h->arena_floats, (size_t)(D + 24 * (D + 1) + 32 * (D + 1)));
    cr_assert_eq(h->mask_token, h->arena);
    cr_assert_eq(h->mae_video_w, h->arena + D);
    cr_assert_eq(h->mae_video_b, h->mae_video_w + 24 * D);
    cr_assert_eq(h->mae_audio_w, h->mae_video_b + 24);
    cr_assert_eq(h->mae_audio_b, h->mae_audio_w + 32 * D);
    cr_assert_null(h->cls_w);
    rv_train_head_free(&h);

    rv_vit_config c = tiny_config(D);
    cr_assert_eq(rv_train_head_new(&c, RV_TASK_CLASSIFY, 0, &h), RV_ERR_INVALID);
    cr_assert_null(h);
    c.heads = 3;
    cr_assert_eq(rv_train_head_new(&c, RV_TASK_MAE, 0, &h), RV_ERR_INVALID);
}

static double mean_of(const float *x, size_t n, double *std, float *absmax)
{
    double m = 0, v = 0;
    *absmax = 0;
    for (size_t i = 0; i < n; i++) {
        m += x[i];
        *absmax = fabsf(x[i]) > *absmax ? fabsf(x[i]) : *absmax;
    }
    m /= (double)n;
    for (size_t i = 0; i < n; i++)
        v += (x[i] - m) * (x[i] - m);
    *std = sqrt(v / (double)n);
    return m;
}

static int all_zero(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (x[i] != 0.0f)
            return 0;
    return 1;
}

Test(train_heads, init_determinism_and_spread)
{
    const int dim = 256, classes = 1000;
    rv_train_head *a = head_make(RV_TASK_CLASSIFY, dim, classes);
    rv_train_head *b = head_make(RV_TASK_CLASSIFY, dim, classes);
    cr_assert_eq(rv_train_head_init(a, 7), RV_OK);
    for (size_t i = 0; i < b->arena_floats; i++)
        b->arena[i] = 5.0f; /* init overwrites everything, biases included */
    cr_assert_eq(rv_train_head_init(b, 7), RV_OK);
    cr_assert_eq(memcmp(a->arena, b->arena, a->arena_floats * sizeof(float)), 0);
    cr_assert_eq(rv_train_head_init(b, 8), RV_OK);
    cr_assert_neq(memcmp(a->cls_w, b->cls_w, sizeof(float) * classes * dim), 0);
    double sd, bound = sqrt(6.0 / (dim + classes));
    float mx;
    double m = mean_of(a->cls_w, (size_t)classes * dim, &sd, &mx);
    cr_assert(fabs(m) < 0.01 * bound, "mean %g", m);
    cr_assert(fabs(sd / (bound / sqrt(3.0)) - 1) < 0.01, "std %g, bound %g", sd, bound);
    cr_assert(mx <= bound && mx > 0.999 * bound, "max %g, bound %g", mx, bound);
    cr_assert(all_zero(a->cls_b, classes));
    rv_train_head_free(&a), rv_train_head_free(&b);

    rv_vit_config c = tiny_config(dim);
    c.patch = 8, c.audio_time = 16; /* video_dim 384, audio_dim 256 */
    cr_assert_eq(rv_train_head_new(&c, RV_TASK_MAE, 0, &a), RV_OK);
    cr_assert_eq(rv_train_head_new(&c, RV_TASK_MAE, 0, &b), RV_OK);
    cr_assert_eq(rv_train_head_init(a, 1), RV_OK);
    cr_assert_eq(rv_train_head_init(b, 1), RV_OK);
    cr_assert_eq(memcmp(a->arena, b->arena, a->arena_floats * sizeof(float)), 0);
    m = mean_of(a->mask_token, (size_t)dim, &sd, &mx);
    cr_assert(fabs(m) < 0.005 && fabs(sd / 0.02 - 1) < 0.2, "mask token mean %g std %g", m, sd);
    const int64_t vd = a->video_dim, ad = a->audio_dim;
    cr_assert_eq(vd, 384);
    cr_assert_eq(ad, 256);
    m = mean_of(a->mae_video_w, (size_t)(vd * dim), &sd, &mx);
    bound = sqrt(6.0 / (double)(dim + vd));
    cr_assert(fabs(sd / (bound / sqrt(3.0)) - 1) < 0.02 && mx <= bound, "video std %g", sd);
    m = mean_of(a->mae_audio_w, (size_t)(ad * dim), &sd, &mx);
    bound = sqrt(6.0 / (double)(dim + ad));
    cr_assert(fabs(sd / (bound / sqrt(3.0)) - 1) < 0.02 && mx <= bound, "audio std %g", sd);
    cr_assert(all_zero(a->mae_video_b, (size_t)vd) && all_zero(a->mae_audio_b, (size_t)ad));
    /* The two matrices are not the same stream. */
    cr_assert_neq(memcmp(a->mae_video_w, a->mae_audio_w, sizeof(float) * 64), 0);
    rv_train_head_free(&a), rv_train_head_free(&b);
}

/* ---- write / read --------------------------------------------------------------------------- */

static void tmp_path(char *buf, size_t cap, const char *tag)
{
    snprintf(buf, cap, "/tmp/rv_test_train_heads_%ld_%s.safetensors", (long)getpid(), tag);
}

/* Writes h (and optionally one extra tensor) to a file and opens it. */
static rv_safetensors *write_open(const rv_train_head *h, const char *tag, const char *extra,
                                  rv_dtype dt, int ndim, const int64_t *shape, const void *data)
{
    char path[256];
    tmp_path(path, sizeof path, tag);
    rv_st_writer *w = NULL;
    cr_assert_eq(rv_st_writer_new(&w), RV_OK);
    if (h)
        cr_assert_eq(rv_train_head_write(h, w), RV_OK, "%s", rv_last_error());
    if (extra)
        cr_assert_eq(rv_st_writer_add(w, extra, dt, ndim, shape, data), RV_OK, "%s",
                     rv_last_error());
    cr_assert_eq(rv_st_writer_write(w, path), RV_OK, "%s", rv_last_error());
    rv_st_writer_free(&w);
    rv_safetensors *st = NULL;
    cr_assert_eq(rv_st_open(path, &st), RV_OK, "%s", rv_last_error());
    unlink(path);
    return st;
}

Test(train_heads, write_read_round_trip)
{
    for (int task = 0; task < 2; task++) {
        rv_train_head *a = head_random((rv_task)task, 11 + task);
        rv_train_head *b = head_make((rv_task)task, D, C);
        rv_safetensors *st = write_open(a, "rt", NULL, RV_F32, 0, NULL, NULL);
        cr_assert_eq(rv_st_count(st), task == RV_TASK_CLASSIFY ? 2 : 5);
        cr_assert_eq(rv_train_head_read(b, st), RV_OK, "%s", rv_last_error());
        cr_assert_eq(memcmp(a->arena, b->arena, a->arena_floats * sizeof(float)), 0);
        const rv_st_tensor *t = rv_st_find(st, task == RV_TASK_CLASSIFY ? "heads.head.weight"
                                                                         : "ringvit.mae_audio.weight");
        cr_assert_not_null(t);
        cr_assert_eq(t->ndim, 2);
        cr_assert_eq(t->shape[0], task == RV_TASK_CLASSIFY ? C : 32);
        cr_assert_eq(t->shape[1], D);
        rv_st_free(&st);
        rv_train_head_free(&a), rv_train_head_free(&b);
    }
}

Test(train_heads, read_errors_name_the_tensor)
{
    rv_train_head *h = head_random(RV_TASK_CLASSIFY, 3);
    rv_train_head *m = head_random(RV_TASK_MAE, 4);
    float *keep = ref_dup_f(h->arena, h->arena_floats);
    float buf[(C + 1) * D] = {0};
    int64_t shape[2] = {C, D};

    /* Missing bias. */
    rv_safetensors *st = write_open(NULL, "missing", "heads.head.weight", RV_F32, 2, shape, buf);
    cr_assert_eq(rv_train_head_read(h, st), RV_ERR_FORMAT);
    cr_assert(strstr(rv_last_error(), "heads.head.bias"), "%s", rv_last_error());
    cr_assert_eq(memcmp(keep, h->arena, h->arena_floats * sizeof(float)), 0, "changed on failure");
    rv_st_free(&st);

    /* Misshapen weight (C + 1 classes) beside a good bias. */
    rv_train_head *other = head_make(RV_TASK_CLASSIFY, D, C + 1);
    st = write_open(other, "shape", NULL, RV_F32, 0, NULL, NULL);
    cr_assert_eq(rv_train_head_read(h, st), RV_ERR_FORMAT);
    cr_assert(strstr(rv_last_error(), "heads.head.weight"), "%s", rv_last_error());
    cr_assert_eq(memcmp(keep, h->arena, h->arena_floats * sizeof(float)), 0, "changed on failure");
    rv_st_free(&st);
    rv_train_head_free(&other);

    /* A flat (rank 1) weight of the right length; an F64 bias. */
    int64_t flat = (int64_t)C * D;
    st = write_open(NULL, "dtype", "heads.head.weight", RV_F32, 1, &flat, buf);
    cr_assert_eq(rv_train_head_read(h, st), RV_ERR_FORMAT);
    cr_assert(strstr(rv_last_error(), "heads.head.weight"), "%s", rv_last_error());
    rv_st_free(&st);
    int64_t cb = C;
    double dbuf[C] = {0};
    char path[256];
    tmp_path(path, sizeof path, "f64");
    rv_st_writer *w = NULL;
    cr_assert_eq(rv_st_writer_new(&w), RV_OK);
    cr_assert_eq(rv_st_writer_add(w, "heads.head.weight", RV_F32, 2, shape, buf), RV_OK);
    cr_assert_eq(rv_st_writer_add(w, "heads.head.bias", RV_F64, 1, &cb, dbuf), RV_OK);
    cr_assert_eq(rv_st_writer_write(w, path), RV_OK, "%s", rv_last_error());
    rv_st_writer_free(&w);
    cr_assert_eq(rv_st_open(path, &st), RV_OK, "%s", rv_last_error());
    unlink(path);
    cr_assert_eq(rv_train_head_read(h, st), RV_ERR_FORMAT);
    cr_assert(strstr(rv_last_error(), "heads.head.bias") && strstr(rv_last_error(), "F64"), "%s",
              rv_last_error());
    cr_assert_eq(memcmp(keep, h->arena, h->arena_floats * sizeof(float)), 0, "changed on failure");
    rv_st_free(&st);

    /* A classify file read as an MAE head. */
    st = write_open(h, "task", NULL, RV_F32, 0, NULL, NULL);
    cr_assert_eq(rv_train_head_read(m, st), RV_ERR_FORMAT);
    cr_assert(strstr(rv_last_error(), "ringvit.mask_token"), "%s", rv_last_error());
    rv_st_free(&st);
    free(keep);
    rv_train_head_free(&h), rv_train_head_free(&m);
}

/* ---- classify ---------------------------------------------------------------------------------- */

typedef struct cjob {
    const seq *s;
    const rv_train_head *h;
    rv_shard_plan plan;
    int label;
    float scale;
    double loss[4];
    int pred[4];
    rv_status st[4];
    float *dy;            /* (S, D) global order */
    rv_train_head *dh[4]; /* each rank's head gradient */
} cjob;

static rv_status classify_rank(rv_comm *comm, void *arg)
{
    cjob *j = arg;
    const int r = comm->rank;
    slice sl;
    slice_make(j->s, &j->plan, r, &sl);
    rv_vit_pooled pooled;
    const float pre = 0.25f; /* dy is added to, not overwritten */
    float *dy = malloc(sizeof(float) * (size_t)(sl.t.len * D + 1));
    for (int64_t i = 0; i < sl.t.len * D; i++)
        dy[i] = pre;
    rv_status st = rv_vit_pool(comm, &sl.t, sl.y, D, NULL, &pooled);
    if (st == RV_OK) {
        st = rv_classify_loss(comm, j->h, &sl.t, &pooled, j->label, j->scale, &j->loss[r],
                              &j->pred[r], dy, j->dh[r]);
        rv_vit_pooled_free(&pooled);
    }
    for (int64_t k = 0; st == RV_OK && k < sl.t.len; k++)
        for (int d = 0; d < D; d++)
            j->dy[sl.global[k] * D + d] = dy[k * D + d] - pre;
    j->st[r] = st;
    free(dy);
    slice_free(&sl);
    return st;
}

typedef struct cctx {
    const seq *s;
    double *y, *W, *b;
    int label;
} cctx;

static double classify_fn(void *p)
{
    cctx *c = p;
    return ref_classify(c->s, c->y, c->W, c->b, c->label, NULL);
}

static void classify_case(int64_t S, int cls, int ranks, rv_shard_kind kind, int label)
{
    seq s;
    seq_make(&s, S, cls, 100 + S);
    rv_train_head *h = head_random(RV_TASK_CLASSIFY, 5);
    cjob j = {.s = &s, .h = h, .label = label, .scale = 0.5f};
    cr_assert_eq(rv_shard_plan_make(kind, ranks, S, &j.plan), RV_OK);
    j.dy = ref_alloc_f((size_t)(S * D));
    for (int r = 0; r < ranks; r++)
        j.dh[r] = head_make(RV_TASK_CLASSIFY, D, C);
    cr_assert_eq(rv_local_run(ranks, classify_rank, &j), RV_OK, "%s", rv_last_error());

    cctx cx = {&s, ref_dup_d(s.y, (size_t)(S * D)), ref_dup_d(h->cls_w, C * D),
               ref_dup_d(h->cls_b, C), label};
    int pred = -1;
    double want = ref_classify(&s, cx.y, cx.W, cx.b, label, &pred);
    for (int r = 0; r < ranks; r++) {
        cr_assert(fabs(j.loss[r] - want) <= TOL_LOSS * fabs(want), "rank %d loss %.9g, want %.9g",
                  r, j.loss[r], want);
        cr_assert_eq(j.pred[r], pred, "rank %d pred %d, want %d", r, j.pred[r], pred);
        if (r > 0)
            cr_assert(all_zero(j.dh[r]->arena, j.dh[r]->arena_floats),
                      "rank %d has a head gradient", r);
    }
    double e = fd_check(j.dy, cx.y, (size_t)(S * D), 0.5, classify_fn, &cx);
    cr_assert(e <= TOL_FD, "dy error %g (S %lld, %d ranks)", e, (long long)S, ranks);
    e = fd_check(j.dh[0]->cls_w, cx.W, C * D, 0.5, classify_fn, &cx);
    cr_assert(e <= TOL_FD, "dW error %g", e);
    e = fd_check(j.dh[0]->cls_b, cx.b, C, 0.5, classify_fn, &cx);
    cr_assert(e <= TOL_FD, "db error %g", e);
    if (cls) /* the CLS output does not enter the mean */
        cr_assert(all_zero(j.dy, D));

    free(cx.y), free(cx.W), free(cx.b), free(j.dy);
    for (int r = 0; r < ranks; r++)
        rv_train_head_free(&j.dh[r]);
    rv_train_head_free(&h);
    seq_free(&s);
}

Test(train_heads, classify_one_rank)
{
    classify_case(30, 1, 1, RV_SHARD_CONTIGUOUS, 2);
    classify_case(17, 0, 1, RV_SHARD_CONTIGUOUS, 0);
}

Test(train_heads, classify_ranks)
{
    classify_case(30, 1, 2, RV_SHARD_CONTIGUOUS, 4);
    classify_case(31, 1, 3, RV_SHARD_CONTIGUOUS, 1);
    classify_case(31, 1, 3, RV_SHARD_ZIGZAG, 3);
    classify_case(2, 1, 3, RV_SHARD_CONTIGUOUS, 3); /* an empty rank */
}

Test(train_heads, classify_argmax_and_labels)
{
    seq s;
    seq_make(&s, 8, 1, 9);
    rv_train_head *h = head_make(RV_TASK_CLASSIFY, D, C);
    h->cls_b[3] = 50.0f; /* class 3 wins by far: loss ~0 for it, ~50 for another */
    rv_vit_tokens t = {.len = s.S, .modality = s.mod, .pos = s.pos, .seq_time = s.time, .nvideo = s.nv, .video = s.video, .naudio = s.na, .audio = s.audio, .grid = 3, .audio_steps = 0};
    rv_vit_pooled p = {.dim = D, .tokens = s.S - 1, .global = s.y};
    double loss = -1;
    int pred = -1;
    cr_assert_eq(rv_classify_loss(NULL, h, &t, &p, 3, 1.0f, &loss, &pred, NULL, NULL), RV_OK);
    cr_assert_eq(pred, 3);
    cr_assert(loss >= 0 && fabs(loss - log1p(4 * exp(-50.0))) <= TOL_LOGIT_LOSS * LOGIT_SCALE,
              "loss %g", loss);
    cr_assert_eq(rv_classify_loss(NULL, h, &t, &p, 0, 1.0f, &loss, &pred, NULL, NULL), RV_OK);
    cr_assert(fabs(loss - (50.0 + log1p(4 * exp(-50.0)))) <= TOL_LOGIT_LOSS * LOGIT_SCALE,
              "loss %.17g", loss);
    h->cls_b[3] = 1e30f; /* stable log-softmax: no overflow */
    cr_assert_eq(rv_classify_loss(NULL, h, &t, &p, 3, 1.0f, &loss, &pred, NULL, NULL), RV_OK);
    cr_assert(loss == 0 && isfinite(loss));
    cr_assert_eq(rv_classify_loss(NULL, h, &t, &p, -1, 1.0f, &loss, &pred, NULL, NULL),
                 RV_ERR_INVALID);
    cr_assert_eq(rv_classify_loss(NULL, h, &t, &p, C, 1.0f, &loss, &pred, NULL, NULL),
                 RV_ERR_INVALID);
    cr_assert(strstr(rv_last_error(), "label 5"), "%s", rv_last_error());
    rv_train_head *m = head_make(RV_TASK_MAE, D, 0);
    cr_assert_eq(rv_classify_loss(NULL, m, &t, &p, 0, 1.0f, &loss, &pred, NULL, NULL),
                 RV_ERR_INVALID);
    rv_train_head_free(&m), rv_train_head_free(&h);
    seq_free(&s);
}

/* ---- mae_hidden ------------------------------------------------------------------------------ */

/* The hidden decisions of every token (global order) under a plan of n ranks. */
static void hidden_global(const seq *s, rv_shard_kind kind, int n, uint64_t seed, double frac,
                          uint8_t *out)
{
    rv_shard_plan p;
    cr_assert_eq(rv_shard_plan_make(kind, n, s->S, &p), RV_OK);
    memset(out, 7, (size_t)s->S);
    for (int r = 0; r < n; r++) {
        slice sl;
        slice_make(s, &p, r, &sl);
        uint8_t *h = malloc((size_t)sl.t.len + 1);
        memset(h, 9, (size_t)sl.t.len + 1);
        rv_mae_hidden(seed, frac, &p, r, &sl.t, h);
        for (int64_t k = 0; k < sl.t.len; k++)
            out[sl.global[k]] = h[k];
        cr_assert_eq(h[sl.t.len], 9, "wrote past len");
        free(h);
        slice_free(&sl);
    }
}

Test(train_heads, mae_hidden)
{
    seq s;
    seq_make(&s, 10000, 1, 21);
    uint8_t *a = malloc(10000), *b = malloc(10000);
    hidden_global(&s, RV_SHARD_CONTIGUOUS, 1, 42, 0.75, a);
    int64_t n = 0;
    for (int64_t i = 0; i < s.S; i++) {
        cr_assert(a[i] == 0 || a[i] == 1);
        n += a[i];
    }
    cr_assert_eq(a[0], 0, "CLS hidden");
    double f = (double)n / (double)(s.S - 1);
    cr_assert(f > 0.72 && f < 0.78, "fraction %g", f);
    hidden_global(&s, RV_SHARD_CONTIGUOUS, 1, 42, 0.75, b);
    cr_assert_eq(memcmp(a, b, 10000), 0, "not deterministic");
    hidden_global(&s, RV_SHARD_CONTIGUOUS, 3, 42, 0.75, b);
    cr_assert_eq(memcmp(a, b, 10000), 0, "cp 3 decides otherwise");
    hidden_global(&s, RV_SHARD_ZIGZAG, 3, 42, 0.75, b);
    cr_assert_eq(memcmp(a, b, 10000), 0, "zigzag cp 3 decides otherwise");
    hidden_global(&s, RV_SHARD_CONTIGUOUS, 1, 43, 0.75, b);
    int64_t same = 0;
    for (int64_t i = 0; i < s.S; i++)
        same += a[i] == b[i];
    cr_assert(same < 7000, "seeds 42 and 43 agree on %lld tokens", (long long)same);
    /* Both modalities are hidden at the rate. */
    int64_t hv = 0, ha = 0;
    for (int64_t i = 1; i < s.S; i++)
        s.mod[i] == RV_MOD_VIDEO ? (hv += a[i]) : (ha += a[i]);
    cr_assert(fabs((double)hv / (double)s.nv - 0.75) < 0.03 && fabs((double)ha / (double)s.na - 0.75) < 0.03);
    hidden_global(&s, RV_SHARD_CONTIGUOUS, 2, 42, 0.1, b);
    n = 0;
    for (int64_t i = 0; i < s.S; i++)
        n += b[i];
    cr_assert(n > 0.08 * 9999 && n < 0.12 * 9999, "fraction 0.1: %lld", (long long)n);
    hidden_global(&s, RV_SHARD_CONTIGUOUS, 2, 42, 0.0, b);
    for (int64_t i = 0; i < s.S; i++)
        cr_assert_eq(b[i], 0);
    hidden_global(&s, RV_SHARD_CONTIGUOUS, 2, 42, 1.0, b);
    for (int64_t i = 0; i < s.S; i++)
        cr_assert_eq(b[i], i > 0);
    free(a), free(b);
    seq_free(&s);
}

/* ---- mae_loss ---------------------------------------------------------------------------------- */

typedef struct mjob {
    const seq *s;
    const rv_train_head *h;
    rv_shard_plan plan;
    const uint8_t *mask; /* (S) global; NULL: rv_mae_hidden(seed, frac) */
    uint64_t seed;
    double frac;
    float scale;
    uint8_t *hidden;      /* (S) the decisions, global order */
    double loss[4];
    int64_t total[4];
    float *dy;            /* (S, D) */
    rv_train_head *dh[4];
} mjob;

static rv_status mae_rank(rv_comm *comm, void *arg)
{
    mjob *j = arg;
    const int r = comm->rank;
    slice sl;
    slice_make(j->s, &j->plan, r, &sl);
    uint8_t *hid = malloc((size_t)sl.t.len + 1);
    float *dy = calloc((size_t)(sl.t.len * D + 1), sizeof(float));
    if (j->mask)
        for (int64_t k = 0; k < sl.t.len; k++)
            hid[k] = j->mask[sl.global[k]];
    else
        rv_mae_hidden(j->seed, j->frac, &j->plan, r, &sl.t, hid);
    rv_status st = rv_mae_loss(comm, j->h, &sl.t, hid, sl.y, j->scale, &j->loss[r], &j->total[r],
                               dy, j->dh[r]);
    for (int64_t k = 0; k < sl.t.len; k++) {
        j->hidden[sl.global[k]] = hid[k];
        memcpy(j->dy + sl.global[k] * D, dy + k * D, sizeof(float) * D);
    }
    free(hid), free(dy);
    slice_free(&sl);
    return st;
}

static void mae_run(mjob *j, const seq *s, const rv_train_head *h, int ranks, rv_shard_kind kind,
                    const uint8_t *mask, double frac)
{
    memset(j, 0, sizeof *j);
    j->s = s, j->h = h, j->mask = mask, j->seed = 77, j->frac = frac, j->scale = 0.5f;
    cr_assert_eq(rv_shard_plan_make(kind, ranks, s->S, &j->plan), RV_OK);
    j->hidden = malloc((size_t)s->S);
    j->dy = ref_alloc_f((size_t)(s->S * D));
    for (int r = 0; r < ranks; r++)
        j->dh[r] = head_make(RV_TASK_MAE, D, 0);
    cr_assert_eq(rv_local_run(ranks, mae_rank, j), RV_OK, "%s", rv_last_error());
    for (int r = 1; r < ranks; r++) {
        cr_assert_eq(j->loss[r], j->loss[0], "rank %d loss %.17g, rank 0 %.17g", r, j->loss[r],
                     j->loss[0]);
        cr_assert_eq(j->total[r], j->total[0]);
    }
    /* The head gradients summed over the ranks into dh[0]. */
    for (int r = 1; r < ranks; r++) {
        for (size_t i = 0; i < h->arena_floats; i++)
            j->dh[0]->arena[i] += j->dh[r]->arena[i];
        rv_train_head_free(&j->dh[r]);
    }
}

static void mae_free(mjob *j)
{
    free(j->hidden), free(j->dy);
    rv_train_head_free(&j->dh[0]);
}

typedef struct mctx {
    const seq *s;
    const uint8_t *hidden;
    double *y, *Wv, *bv, *Wa, *ba;
} mctx;

static double mae_fn(void *p)
{
    mctx *c = p;
    return ref_mae(c->s, c->hidden, c->y, c->Wv, c->bv, c->Wa, c->ba);
}

Test(train_heads, mae_loss_gradients)
{
    seq s;
    seq_make(&s, 41, 1, 31);
    rv_train_head *h = head_random(RV_TASK_MAE, 8);
    mjob j;
    mae_run(&j, &s, h, 1, RV_SHARD_CONTIGUOUS, NULL, 0.6);
    int64_t nh = 0;
    for (int64_t i = 0; i < s.S; i++)
        nh += j.hidden[i];
    cr_assert(nh > 10 && nh < 40, "hidden %lld", (long long)nh);
    cr_assert_eq(j.total[0], nh);
    mctx cx = {&s, j.hidden, ref_dup_d(s.y, (size_t)(s.S * D)), ref_dup_d(h->mae_video_w, 24 * D),
               ref_dup_d(h->mae_video_b, 24), ref_dup_d(h->mae_audio_w, 32 * D),
               ref_dup_d(h->mae_audio_b, 32)};
    double want = mae_fn(&cx);
    cr_assert(want > 0.1);
    cr_assert(fabs(j.loss[0] - want) <= TOL_LOSS * want, "loss %.9g, want %.9g", j.loss[0], want);
    double e = fd_check(j.dy, cx.y, (size_t)(s.S * D), 0.5, mae_fn, &cx);
    cr_assert(e <= TOL_FD, "dy error %g", e);
    for (int64_t i = 0; i < s.S; i++)
        if (!j.hidden[i])
            cr_assert(all_zero(j.dy + i * D, D), "visible token %lld has a gradient", (long long)i);
    e = fd_check(j.dh[0]->mae_video_w, cx.Wv, 24 * D, 0.5, mae_fn, &cx);
    cr_assert(e <= TOL_FD, "video dW error %g", e);
    e = fd_check(j.dh[0]->mae_video_b, cx.bv, 24, 0.5, mae_fn, &cx);
    cr_assert(e <= TOL_FD, "video db error %g", e);
    e = fd_check(j.dh[0]->mae_audio_w, cx.Wa, 32 * D, 0.5, mae_fn, &cx);
    cr_assert(e <= TOL_FD, "audio dW error %g", e);
    e = fd_check(j.dh[0]->mae_audio_b, cx.ba, 32, 0.5, mae_fn, &cx);
    cr_assert(e <= TOL_FD, "audio db error %g", e);
    cr_assert(all_zero(j.dh[0]->mask_token, D), "mask token gradient comes from the encoder");

    /* cp 3 (contiguous and zigzag): the same decisions, loss and summed gradients. */
    for (int kind = 0; kind < 2; kind++) {
        mjob k;
        mae_run(&k, &s, h, 3, (rv_shard_kind)kind, NULL, 0.6);
        cr_assert_eq(memcmp(k.hidden, j.hidden, (size_t)s.S), 0);
        cr_assert(fabs(k.loss[0] - j.loss[0]) <= TOL_CP * j.loss[0], "cp 3 loss %.17g, cp 1 %.17g",
                  k.loss[0], j.loss[0]);
        double *ref = ref_dup_d(j.dh[0]->arena, h->arena_floats);
        e = rv_rel_err(k.dh[0]->arena, ref, h->arena_floats);
        cr_assert(e <= TOL_CP, "summed head gradients differ by %g", e);
        free(ref);
        ref = ref_dup_d(j.dy, (size_t)(s.S * D));
        e = rv_rel_err(k.dy, ref, (size_t)(s.S * D));
        cr_assert(e <= TOL_CP, "dy differs by %g", e);
        free(ref);
        mae_free(&k);
    }
    free(cx.y), free(cx.Wv), free(cx.bv), free(cx.Wa), free(cx.ba);
    mae_free(&j);
    rv_train_head_free(&h);
    seq_free(&s);
}

Test(train_heads, mae_one_hidden_token_and_none)
{
    seq s;
    seq_make(&s, 30, 1, 41);
    rv_train_head *h = head_random(RV_TASK_MAE, 9);
    uint8_t mask[30] = {0};
    mask[25] = 1; /* on the last of 3 ranks only */
    mjob j;
    mae_run(&j, &s, h, 3, RV_SHARD_CONTIGUOUS, mask, 0);
    cr_assert_eq(j.total[0], 1);
    mctx cx = {&s, mask, ref_dup_d(s.y, (size_t)(s.S * D)), ref_dup_d(h->mae_video_w, 24 * D),
               ref_dup_d(h->mae_video_b, 24), ref_dup_d(h->mae_audio_w, 32 * D),
               ref_dup_d(h->mae_audio_b, 32)};
    double want = mae_fn(&cx);
    cr_assert(fabs(j.loss[0] - want) <= TOL_LOSS * want, "loss %.9g, want %.9g", j.loss[0], want);
    double e = fd_check(j.dy, cx.y, (size_t)(s.S * D), 0.5, mae_fn, &cx);
    cr_assert(e <= TOL_FD, "dy error %g", e);
    free(cx.y), free(cx.Wv), free(cx.bv), free(cx.Wa), free(cx.ba);
    mae_free(&j);

    /* A hidden flag on the CLS token is ignored; nothing else hidden: loss 0, no gradient. */
    memset(mask, 0, sizeof mask);
    mask[0] = 1;
    for (int pass = 0; pass < 2; pass++) {
        mae_run(&j, &s, h, 2, RV_SHARD_CONTIGUOUS, pass ? NULL : mask, 0.0);
        cr_assert_eq(j.loss[0], 0.0);
        cr_assert_eq(j.total[0], 0);
        cr_assert(all_zero(j.dy, (size_t)(s.S * D)));
        cr_assert(all_zero(j.dh[0]->arena, h->arena_floats));
        mae_free(&j);
    }
    rv_train_head_free(&h);
    seq_free(&s);
}

typedef struct ejob {
    const rv_train_head *h;
    rv_train_head *dh;
    rv_vit_tokens t;
    const uint8_t *hid;
    const float *y;
    rv_status st;
} ejob;

static rv_status err_rank(rv_comm *comm, void *arg)
{
    ejob *e = arg;
    double loss;
    e->st = rv_mae_loss(comm, e->h, &e->t, e->hid, e->y, 1, &loss, NULL, NULL, e->dh);
    return e->st; /* rv_local_run hands the message (thread-local) on */
}

Test(train_heads, mae_argument_errors)
{
    seq s;
    seq_make(&s, 10, 0, 51);
    rv_train_head *h = head_random(RV_TASK_MAE, 10);
    rv_train_head *c = head_make(RV_TASK_CLASSIFY, D, C);
    uint8_t hid[10];
    memset(hid, 1, sizeof hid);
    double loss;
    rv_vit_tokens t = {.len = s.S, .modality = s.mod, .pos = s.pos, .seq_time = s.time, .nvideo = s.nv, .video = s.video, .naudio = s.na, .audio = s.audio, .grid = 3, .audio_steps = 0};
    cr_assert_eq(rv_mae_loss(NULL, h, &t, hid, s.y, 1, &loss, NULL, NULL, NULL), RV_ERR_INVALID);
    ejob e = {c, NULL, t, hid, s.y, RV_OK}; /* a classify head */
    cr_assert_eq(rv_local_run(1, err_rank, &e), RV_ERR_INVALID);
    e = (ejob){h, c, t, hid, s.y, RV_OK}; /* a gradient head of the other task */
    cr_assert_eq(rv_local_run(1, err_rank, &e), RV_ERR_INVALID);
    e = (ejob){h, NULL, t, hid, s.y, RV_OK};
    e.t.nvideo++; /* patch rows that do not match the tokens */
    cr_assert_eq(rv_local_run(1, err_rank, &e), RV_ERR_INVALID);
    cr_assert(strstr(rv_last_error(), "nvideo"), "%s", rv_last_error());
    e = (ejob){h, NULL, t, hid, s.y, RV_OK};
    cr_assert_eq(rv_local_run(1, err_rank, &e), RV_OK, "%s", rv_last_error());
    rv_train_head_free(&h), rv_train_head_free(&c);
    seq_free(&s);
}
