/* test_vit_heads.c: classifier heads (rv_vit.h).
 *   - rv_vit_classify against each head's formula computed here in double from
 *     the weights (ViT's classifier on CLS, VideoMAE's fc_norm of the mean, AST's
 *     layernorm of (CLS + dist) / 2, DINOv2's [CLS; mean], the finetune head on
 *     the mean), and the inputs each head refuses to go without;
 *   - rv_vit_pool_head's logits are rv_vit_classify of the pooled CLS, distillation
 *     token and global mean (the same computation: compared exactly);
 *   - ringvit files whose head is broken (a missing, misshapen or NaN head tensor;
 *     labels metadata missing, of the wrong count, not strings): RV_ERR_FORMAT
 *     naming the file and the tensor or key;
 *   - hub folders with a classifier: the head, labels and multi_label as
 *     config.json says; a misshapen or NaN classifier, id2label gaps, bad keys,
 *     labels that are not strings, ids past the rows: RV_ERR_FORMAT naming the
 *     folder, the file and the key or tensor. */
#include <criterion/criterion.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ref_ops.h"
#include "rv_safetensors.h"
#include "rv_vit.h"

#define D 8

/* A config of family fam with head kind and C classes (sizes D 8, one layer). */
static rv_vit_config head_cfg(int fam, int head, int C)
{
    rv_vit_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.preset, sizeof c.preset, "custom");
    c.dim = D, c.layers = 1, c.heads = 2, c.mlp = 16, c.eps = 1e-6f, c.tubelet = 1;
    c.patch = 2, c.grid = 2, c.audio_freq = 16, c.audio_time = 4;
    c.cls = head == RV_HEAD_CLS_DIST_NORM ? 2 : head == RV_HEAD_MEAN_NORM ? 0 : 1;
    rv_vit_family_defaults(&c);
    c.family = fam;
    if (fam != RV_FAMILY_RINGVIT) {
        c.time_code = 0;
        c.audio = 0;
        c.audio_pos = RV_APOS_NONE;
        c.pos = RV_POS_GRID_BICUBIC;
    }
    if (head == RV_HEAD_MEAN_NORM)
        c.pool = RV_POOL_MEAN_NORM, c.pool_eps = 1e-5f;
    if (head == RV_HEAD_CLS_DIST_NORM)
        c.pool = RV_POOL_CLS_DIST, c.eps = 1e-12f;
    c.head = head;
    c.classes = C;
    return c;
}

static rv_vit_model *random_model(const rv_vit_config *c, uint64_t seed)
{
    rv_vit_model *m = NULL;
    cr_assert_eq(rv_vit_new(c, &m), RV_OK, "%s", rv_last_error());
    ref_rng r = ref_rng_make(seed);
    ref_fill_normal(&r, m->arena, m->arena_floats, 0.0f, 1.0f);
    return m;
}

/* LayerNorm of x (D) in double. */
static void ln_ref(const double *x, const float *w, const float *b, double eps, double *y)
{
    double mu = 0, var = 0;
    for (int j = 0; j < D; j++)
        mu += x[j] / D;
    for (int j = 0; j < D; j++)
        var += (x[j] - mu) * (x[j] - mu) / D;
    for (int j = 0; j < D; j++)
        y[j] = (x[j] - mu) / sqrt(var + eps) * w[j] + b[j];
}

/* The head's formula here: its input vector, then W x + b. */
static void logits_ref(const rv_vit_model *m, const float *cls, const float *dist,
                       const float *mean, double *out)
{
    double x[2 * D], t[D];
    const rv_vit_config *c = &m->cfg;
    int in = D;
    for (int j = 0; j < D; j++)
        switch (c->head) {
        case RV_HEAD_CLS: x[j] = cls[j]; break;
        case RV_HEAD_MEAN: x[j] = mean[j]; break;
        case RV_HEAD_MEAN_NORM: t[j] = mean[j]; break;
        case RV_HEAD_CLS_DIST_NORM: t[j] = 0.5 * cls[j] + 0.5 * dist[j]; break;
        default: x[j] = cls[j], x[D + j] = mean[j], in = 2 * D; break;
        }
    if (c->head == RV_HEAD_MEAN_NORM)
        ln_ref(t, m->pool_ln_w, m->pool_ln_b, c->pool_eps, x);
    if (c->head == RV_HEAD_CLS_DIST_NORM)
        ln_ref(t, m->head_ln_w, m->head_ln_b, c->eps, x);
    for (int k = 0; k < c->classes; k++) {
        out[k] = m->head_b[k];
        for (int j = 0; j < in; j++)
            out[k] += (double)m->head_w[k * in + j] * x[j];
    }
}

Test(vit_heads, classify_matches_each_formula)
{
    static const struct {
        int fam, head;
    } cases[] = {{RV_FAMILY_VIT, RV_HEAD_CLS}, {RV_FAMILY_VIDEOMAE, RV_HEAD_MEAN_NORM},
                 {RV_FAMILY_AST, RV_HEAD_CLS_DIST_NORM}, {RV_FAMILY_DINOV2, RV_HEAD_CLS_MEAN},
                 {RV_FAMILY_RINGVIT, RV_HEAD_MEAN}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rv_vit_config c = head_cfg(cases[i].fam, cases[i].head, 5);
        if (cases[i].fam == RV_FAMILY_VIDEOMAE)
            c.pos = RV_POS_SINUSOID;
        if (cases[i].fam == RV_FAMILY_AST) {
            c.video = 0, c.audio = 1, c.pos = RV_POS_NONE, c.audio_pos = RV_APOS_GRID;
            c.audio_grid_t = 3;
        }
        rv_vit_model *m = random_model(&c, 10 + i);
        cr_assert_eq(rv_vit_head_in(&m->cfg), cases[i].head == RV_HEAD_CLS_MEAN ? 2 * D : D);
        float cls[D], dist[D], mean[D], got[5];
        ref_rng r = ref_rng_make(77 + i);
        ref_fill_normal(&r, cls, D, 0.3f, 1.0f);
        ref_fill_normal(&r, dist, D, -0.2f, 1.0f);
        ref_fill_normal(&r, mean, D, 0.1f, 2.0f);
        double want[5];
        logits_ref(m, cls, dist, mean, want);
        cr_assert_eq(rv_vit_classify(m, cls, dist, mean, got), RV_OK, "%s", rv_last_error());
        for (int k = 0; k < 5; k++)
            cr_expect_leq(fabs(got[k] - want[k]), 1e-6 * (1 + fabs(want[k])),
                          "head %s logit %d: %g, want %g", rv_vit_head_name(cases[i].head), k,
                          (double)got[k], want[k]);
        /* The inputs a head does not read may be NULL; the ones it reads may not. */
        const int h = cases[i].head;
        const int cls_used =
            h == RV_HEAD_CLS || h == RV_HEAD_CLS_DIST_NORM || h == RV_HEAD_CLS_MEAN;
        const int mean_used = h == RV_HEAD_MEAN_NORM || h == RV_HEAD_CLS_MEAN || h == RV_HEAD_MEAN;
        float again[5];
        cr_assert_eq(rv_vit_classify(m, cls_used ? cls : NULL,
                                     h == RV_HEAD_CLS_DIST_NORM ? dist : NULL,
                                     mean_used ? mean : NULL, again), RV_OK, "%s",
                     rv_last_error());
        cr_expect_eq(memcmp(again, got, sizeof got), 0, "head %s: unread inputs changed it",
                     rv_vit_head_name(h));
        if (cls_used) {
            cr_expect_eq(rv_vit_classify(m, NULL, dist, mean, again), RV_ERR_INVALID);
            cr_expect_not_null(strstr(rv_last_error(), "CLS"), "%s", rv_last_error());
        }
        if (mean_used) {
            cr_expect_eq(rv_vit_classify(m, cls, dist, NULL, again), RV_ERR_INVALID);
            cr_expect_not_null(strstr(rv_last_error(), "mean"), "%s", rv_last_error());
        }
        if (h == RV_HEAD_CLS_DIST_NORM) {
            cr_expect_eq(rv_vit_classify(m, cls, NULL, mean, again), RV_ERR_INVALID);
            cr_expect_not_null(strstr(rv_last_error(), "distillation"), "%s", rv_last_error());
        }
        rv_vit_free(&m);
    }
    /* A model without a head has no logits to give. */
    rv_vit_config c = head_cfg(RV_FAMILY_VIT, RV_HEAD_CLS, 3);
    c.head = RV_HEAD_NONE, c.classes = 0;
    rv_vit_model *m = random_model(&c, 3);
    float z[3], x[D] = {0};
    cr_expect_eq(rv_vit_classify(m, x, x, x, z), RV_ERR_INVALID);
    cr_expect_not_null(strstr(rv_last_error(), "no classifier head"), "%s", rv_last_error());
    cr_expect_null(m->labels);
    rv_vit_free(&m);
}

/* The pooled CLS, distillation token and global mean feed rv_vit_classify. */
Test(vit_heads, pool_head_fills_logits)
{
    rv_vit_config c = head_cfg(RV_FAMILY_DINOV2, RV_HEAD_CLS_MEAN, 4);
    c.layer_scale = 1;
    rv_vit_model *m = random_model(&c, 21);
    rv_vit_pooled p;
    memset(&p, 0, sizeof p);
    p.dim = D;
    p.global = calloc(D, sizeof(float));
    p.cls = calloc(D, sizeof(float));
    p.dist = calloc(D, sizeof(float));
    ref_rng r = ref_rng_make(5);
    ref_fill_normal(&r, p.global, D, 0, 1);
    ref_fill_normal(&r, p.cls, D, 0, 1);
    p.has_cls = 1;
    cr_assert_eq(rv_vit_pool_head(m, &p), RV_OK, "%s", rv_last_error());
    cr_assert_eq(p.classes, 4);
    float want[4];
    cr_assert_eq(rv_vit_classify(m, p.cls, NULL, p.global, want), RV_OK);
    cr_expect_eq(memcmp(p.logits, want, sizeof want), 0);
    /* Without a CLS in the sequence the head cannot be applied. */
    p.has_cls = 0;
    c.pool = RV_POOL_MEAN; /* so that pooling itself needs no CLS */
    m->cfg.pool = RV_POOL_MEAN;
    cr_expect_eq(rv_vit_pool_head(m, &p), RV_ERR_INVALID);
    cr_expect_not_null(strstr(rv_last_error(), "CLS"), "%s", rv_last_error());
    rv_vit_pooled_free(&p);
    rv_vit_free(&m);
}

/* ---- ringvit files with a broken head ---------------------------------------------- */

static char dir[64];

static void dir_setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/rv_heads_XXXXXX");
    cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

static void dir_teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

/* src's tensors and metadata into dst: tensor drop left out, tensor reshape (when
 * not NULL) given shape (n0, n1) over its data prefix, element nan_at of tensor
 * poison set to NaN, metadata labels replaced by labels ("" drops it). */
typedef struct rewrite_opts {
    const char *drop, *reshape, *poison, *labels;
    int64_t n0, n1;
} rewrite_opts;

static void rewrite(const char *src, const char *dst, rewrite_opts o)
{
    rv_safetensors *st = NULL;
    rv_st_writer *w = NULL;
    cr_assert_eq(rv_st_open(src, &st), RV_OK, "%s", rv_last_error());
    cr_assert_eq(rv_st_writer_new(&w), RV_OK);
    float *bufs[64];
    int nb = 0;
    for (int i = 0; i < rv_st_count(st); i++) {
        const rv_st_tensor *t = rv_st_at(st, i);
        if (o.drop && strcmp(t->name, o.drop) == 0)
            continue;
        float *b = malloc(t->nbytes + 4);
        memcpy(b, t->data, t->nbytes);
        bufs[nb++] = b;
        int ndim = t->ndim;
        int64_t shape[8];
        memcpy(shape, t->shape, sizeof shape);
        if (o.reshape && strcmp(t->name, o.reshape) == 0)
            ndim = 2, shape[0] = o.n0, shape[1] = o.n1;
        if (o.poison && strcmp(t->name, o.poison) == 0)
            b[1] = NAN;
        cr_assert_eq(rv_st_writer_add(w, t->name, t->dtype, ndim, shape, b), RV_OK, "%s",
                     rv_last_error());
    }
    static const char *const keys[] = {RV_VIT_META_CONFIG, "format", RV_VIT_META_LABELS};
    for (int k = 0; k < 3; k++) {
        const char *v = k == 2 && o.labels ? o.labels : rv_st_meta(st, keys[k]);
        if (v && v[0])
            cr_assert_eq(rv_st_writer_meta(w, keys[k], v), RV_OK);
    }
    cr_assert_eq(rv_st_writer_write(w, dst), RV_OK, "%s", rv_last_error());
    rv_st_writer_free(&w);
    rv_st_free(&st);
    for (int i = 0; i < nb; i++)
        free(bufs[i]);
}

static void load_fails(const char *path, const char *a, const char *b)
{
    rv_vit_model *m = NULL;
    rv_status s = rv_vit_load(path, NULL, &m);
    const char *msg = rv_last_error();
    cr_log_info("expected failure: %s", msg);
    cr_expect_eq(s, RV_ERR_FORMAT, "status %d: %s", s, msg);
    cr_expect_null(m);
    if (a)
        cr_expect_not_null(strstr(msg, a), "message lacks '%s': %s", a, msg);
    if (b)
        cr_expect_not_null(strstr(msg, b), "message lacks '%s': %s", b, msg);
    rv_vit_free(&m);
}

Test(vit_heads, ringvit_file_head_errors, .init = dir_setup, .fini = dir_teardown)
{
    char good[128], bad[128];
    snprintf(good, sizeof good, "%s/good.safetensors", dir);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
    rv_vit_config c = head_cfg(RV_FAMILY_RINGVIT, RV_HEAD_MEAN, 3);
    rv_vit_model *m = random_model(&c, 8);
    const char *names[3] = {"speech", "music", "dog"};
    cr_assert_eq(rv_vit_set_labels(m, names, 3), RV_OK);
    cr_assert_eq(rv_vit_save(m, good), RV_OK, "%s", rv_last_error());
    rv_vit_free(&m);
    cr_assert_eq(rv_vit_load(good, NULL, &m), RV_OK, "%s", rv_last_error());
    cr_assert_str_eq(m->labels[2], "dog");
    rv_vit_free(&m);

    /* ringvit's own family leaves missing ringvit.* tensors zero, but not the head's */
    rewrite(good, bad, (rewrite_opts){.drop = "ringvit.head.weight"});
    load_fails(bad, "missing tensor 'ringvit.head.weight'", bad);
    rewrite(good, bad, (rewrite_opts){.drop = "ringvit.head.bias"});
    load_fails(bad, "ringvit.head.bias", bad);
    rewrite(good, bad, (rewrite_opts){.reshape = "ringvit.head.weight", .n0 = 4, .n1 = 6});
    load_fails(bad, "ringvit.head.weight", "[4, 6]");
    rewrite(good, bad, (rewrite_opts){.poison = "ringvit.head.bias"});
    load_fails(bad, "tensor 'ringvit.head.bias' holds NaN at index 1", bad);
    rewrite(good, bad, (rewrite_opts){.labels = ""});
    load_fails(bad, "no 'ringvit.labels' metadata", bad);
    rewrite(good, bad, (rewrite_opts){.labels = "[\"a\", \"b\"]"});
    load_fails(bad, "'ringvit.labels' holds 2 labels; the head has 3 classes", bad);
    rewrite(good, bad, (rewrite_opts){.labels = "[\"a\", 2, \"c\"]"});
    load_fails(bad, "label 1 is not a string", bad);
    rewrite(good, bad, (rewrite_opts){.labels = "{\"0\": \"a\"}"});
    load_fails(bad, "'ringvit.labels' is not a JSON list", bad);
    rewrite(good, bad, (rewrite_opts){.labels = "[\"a\", \"b\", \"c\""});
    load_fails(bad, "'ringvit.labels' is not a JSON list", bad);
}

/* rv_vit_set_labels checks what it is given. */
Test(vit_heads, set_labels_checks)
{
    rv_vit_config c = head_cfg(RV_FAMILY_RINGVIT, RV_HEAD_MEAN, 2);
    rv_vit_model *m = random_model(&c, 1);
    cr_expect_str_eq(m->labels[0], "0"); /* the ids until named */
    cr_expect_str_eq(m->labels[1], "1");
    const char *two[2] = {"a", "\xff\xfe"};
    cr_expect_eq(rv_vit_set_labels(m, two, 2), RV_ERR_INVALID);
    cr_expect_not_null(strstr(rv_last_error(), "not UTF-8"), "%s", rv_last_error());
    cr_expect_eq(rv_vit_set_labels(m, two, 1), RV_ERR_INVALID);
    const char *null1[2] = {"a", NULL};
    cr_expect_eq(rv_vit_set_labels(m, null1, 2), RV_ERR_INVALID);
    cr_expect_str_eq(m->labels[1], "1", "a refused call changed the labels");
    rv_vit_free(&m);
    c.head = RV_HEAD_NONE, c.classes = 0;
    m = random_model(&c, 1);
    cr_expect_eq(rv_vit_set_labels(m, two, 2), RV_ERR_INVALID);
    rv_vit_free(&m);
    /* config checks: classes without a head, a head without classes, kinds that
     * need a token or a pooling the config lacks */
    rv_vit_config bad = head_cfg(RV_FAMILY_VIT, RV_HEAD_NONE, 0);
    bad.classes = 3;
    cr_expect_eq(rv_vit_config_check(&bad), RV_ERR_INVALID);
    bad = head_cfg(RV_FAMILY_VIT, RV_HEAD_CLS, 0);
    cr_expect_eq(rv_vit_config_check(&bad), RV_ERR_INVALID);
    bad = head_cfg(RV_FAMILY_VIT, RV_HEAD_CLS, RV_VIT_MAX_CLASSES + 1);
    cr_expect_eq(rv_vit_config_check(&bad), RV_ERR_INVALID);
    bad = head_cfg(RV_FAMILY_VIT, RV_HEAD_CLS, 3);
    bad.cls = 0, bad.pool = RV_POOL_MEAN;
    cr_expect_eq(rv_vit_config_check(&bad), RV_ERR_INVALID);
    bad = head_cfg(RV_FAMILY_VIT, RV_HEAD_MEAN_NORM, 3);
    bad.pool = RV_POOL_MEAN;
    cr_expect_eq(rv_vit_config_check(&bad), RV_ERR_INVALID);
    bad = head_cfg(RV_FAMILY_VIT, RV_HEAD_NONE, 0);
    bad.multi_label = 1;
    cr_expect_eq(rv_vit_config_check(&bad), RV_ERR_INVALID);
}

/* ---- hub folders with a classifier --------------------------------------------------- */

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(text, 1, strlen(text), f), strlen(text));
    fclose(f);
}

/* A ViTForImageClassification folder (D 8, one layer, patch 2, image 4) whose
 * config.json adds task (the id2label / problem_type keys, or ""); classifier of
 * rows x cols, NaN at element 1 when poison. */
static void write_hub(const char *d, const char *task, int64_t rows, int64_t cols, int poison)
{
    static const struct {
        const char *name;
        int ndim;
        int64_t s[4];
    } t[] = {
        {"vit.embeddings.cls_token", 3, {1, 1, 8}},
        {"vit.embeddings.position_embeddings", 3, {1, 5, 8}},
        {"vit.embeddings.patch_embeddings.projection.weight", 4, {8, 3, 2, 2}},
        {"vit.embeddings.patch_embeddings.projection.bias", 1, {8}},
        {"vit.encoder.layer.0.layernorm_before.weight", 1, {8}},
        {"vit.encoder.layer.0.layernorm_before.bias", 1, {8}},
        {"vit.encoder.layer.0.attention.attention.query.weight", 2, {8, 8}},
        {"vit.encoder.layer.0.attention.attention.query.bias", 1, {8}},
        {"vit.encoder.layer.0.attention.attention.key.weight", 2, {8, 8}},
        {"vit.encoder.layer.0.attention.attention.key.bias", 1, {8}},
        {"vit.encoder.layer.0.attention.attention.value.weight", 2, {8, 8}},
        {"vit.encoder.layer.0.attention.attention.value.bias", 1, {8}},
        {"vit.encoder.layer.0.attention.output.dense.weight", 2, {8, 8}},
        {"vit.encoder.layer.0.attention.output.dense.bias", 1, {8}},
        {"vit.encoder.layer.0.layernorm_after.weight", 1, {8}},
        {"vit.encoder.layer.0.layernorm_after.bias", 1, {8}},
        {"vit.encoder.layer.0.intermediate.dense.weight", 2, {16, 8}},
        {"vit.encoder.layer.0.intermediate.dense.bias", 1, {16}},
        {"vit.encoder.layer.0.output.dense.weight", 2, {8, 16}},
        {"vit.encoder.layer.0.output.dense.bias", 1, {8}},
        {"vit.layernorm.weight", 1, {8}},
        {"vit.layernorm.bias", 1, {8}},
    };
    const int n = (int)(sizeof t / sizeof t[0]);
    char file[200], cfg[2048];
    cr_assert(mkdir(d, 0755) == 0 || errno == EEXIST);
    snprintf(file, sizeof file, "%s/config.json", d);
    snprintf(cfg, sizeof cfg, "{\"model_type\": \"vit\", \"hidden_size\": 8, "
             "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"intermediate_size\": 16, "
             "\"image_size\": 4, \"patch_size\": 2%s%s}", task[0] ? ", " : "", task);
    write_text(file, cfg);
    float *vals[32];
    rv_st_writer *w = NULL;
    cr_assert_eq(rv_st_writer_new(&w), RV_OK);
    ref_rng r = ref_rng_make(4);
    for (int i = 0; i < n + 2; i++) {
        const char *name = i < n ? t[i].name : i == n ? "classifier.weight" : "classifier.bias";
        int ndim = i < n ? t[i].ndim : i == n ? 2 : 1;
        int64_t s[4] = {rows, cols, 0, 0};
        if (i < n)
            memcpy(s, t[i].s, sizeof s);
        int64_t numel = 1;
        for (int k = 0; k < ndim; k++)
            numel *= s[k];
        vals[i] = malloc((size_t)numel * sizeof *vals[i]);
        ref_fill_uniform(&r, vals[i], (size_t)numel, 0.25f, 0.75f);
        if (poison && i == n)
            vals[i][1] = NAN;
        cr_assert_eq(rv_st_writer_add(w, name, RV_F32, ndim, s, vals[i]), RV_OK, "%s",
                     rv_last_error());
    }
    snprintf(file, sizeof file, "%s/model.safetensors", d);
    cr_assert_eq(rv_st_writer_write(w, file), RV_OK, "%s", rv_last_error());
    rv_st_writer_free(&w);
    for (int i = 0; i < n + 2; i++)
        free(vals[i]);
}

static void hub_fails(const char *task, int64_t rows, int64_t cols, int poison, const char *a,
                      const char *b)
{
    char d[128];
    snprintf(d, sizeof d, "%s/hub", dir);
    write_hub(d, task, rows, cols, poison);
    rv_vit_model *m = NULL;
    rv_status s = rv_vit_load(d, NULL, &m);
    const char *msg = rv_last_error();
    cr_log_info("expected failure: %s", msg);
    cr_expect_eq(s, RV_ERR_FORMAT, "status %d: %s", s, msg);
    cr_expect_null(m);
    cr_expect_not_null(strstr(msg, d), "message lacks the folder: %s", msg);
    cr_expect_not_null(strstr(msg, a), "message lacks '%s': %s", a, msg);
    if (b)
        cr_expect_not_null(strstr(msg, b), "message lacks '%s': %s", b, msg);
    rv_vit_free(&m);
}

#define IDS3 "\"id2label\": {\"0\": \"zero\", \"1\": \"\\u00fcn\", \"2\": \"two, three\"}"

Test(vit_heads, hub_classifier_loads, .init = dir_setup, .fini = dir_teardown)
{
    char d[128];
    snprintf(d, sizeof d, "%s/hub", dir);
    /* id2label in any key order; problem_type multi-label */
    write_hub(d, "\"id2label\": {\"2\": \"two, three\", \"0\": \"zero\", \"1\": \"\\u00fcn\"}, "
              "\"problem_type\": \"multi_label_classification\"", 3, 8, 0);
    rv_vit_model *m = NULL;
    rv_vit_load_info info;
    cr_assert_eq(rv_vit_load_ex(d, NULL, &m, &info), RV_OK, "%s", rv_last_error());
    cr_expect_eq(m->cfg.head, RV_HEAD_CLS);
    cr_expect_eq(m->cfg.classes, 3);
    cr_expect_eq(m->cfg.multi_label, 1);
    cr_expect_str_eq(m->labels[0], "zero");
    cr_expect_str_eq(m->labels[1], "\xc3\xbcn");
    cr_expect_str_eq(m->labels[2], "two, three");
    cr_expect_eq(info.nignored, 0, "the classifier is used, not ignored");
    rv_vit_load_info_free(&info);
    rv_vit_free(&m);
    /* no id2label: transformers' LABEL_i; single-label */
    write_hub(d, "", 2, 8, 0);
    cr_assert_eq(rv_vit_load(d, NULL, &m), RV_OK, "%s", rv_last_error());
    cr_expect_str_eq(m->labels[1], "LABEL_1");
    cr_expect_eq(m->cfg.multi_label, 0);
    rv_vit_free(&m);
}

Test(vit_heads, hub_classifier_errors, .init = dir_setup, .fini = dir_teardown)
{
    hub_fails(IDS3, 3, 9, 0, "tensor 'classifier.weight' has shape [3, 9]", "(classes, 8)");
    hub_fails(IDS3, 3, 8, 1, "tensor 'classifier.weight' holds NaN at index 1", NULL);
    hub_fails("\"id2label\": {\"0\": \"a\", \"2\": \"c\"}", 3, 8, 0,
              "config.json: \"id2label\" has no label for class 1", "'classifier.weight' has 3");
    hub_fails("\"id2label\": {\"0\": \"a\", \"1\": \"b\", \"2\": \"c\", \"3\": \"d\"}", 3, 8, 0,
              "\"id2label\" names class 3, beyond the 3 rows", "config.json");
    hub_fails("\"id2label\": {\"0\": \"a\", \"01\": \"b\", \"2\": \"c\"}", 3, 8, 0,
              "\"id2label\" key '01' is not a class id", "config.json");
    hub_fails("\"id2label\": {\"0\": \"a\", \"1\": 7, \"2\": \"c\"}", 3, 8, 0,
              "\"id2label\"[\"1\"] is not a string", "config.json");
    hub_fails("\"id2label\": [\"a\", \"b\", \"c\"]", 3, 8, 0, "\"id2label\" is not an object",
              "config.json");
    hub_fails(IDS3 ", \"problem_type\": 3", 3, 8, 0, "\"problem_type\" is not a string",
              "config.json");
}
