/* test_train_ckpt.c: training checkpoints (rv_ckpt_save / rv_ckpt_load of
 * rv_vit_train.h, encoder/train/train_ckpt.c): bit-exact round trips of the model
 * (T 1 and 2), the head (classify, mae, none), the optimizer moments (odd bit
 * patterns included) and the info (a seed above 2^63, settings text with
 * quotes and UTF-8); the file read as a model by rv_vit_load without a warning;
 * the file's own layout (tensor names, optim.* shape, metadata JSON); every
 * mismatch (config field, head task and classes, optimizer size, a tensor of
 * another shape or dtype, missing metadata) failing with the right status and
 * a message naming what differs, and leaving the caller's state untouched;
 * truncated files failing cleanly; the write replacing a file atomically. */
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
#include "rv_vit_train.h"

/* ---- helpers ------------------------------------------------------------------------ */

static char dir[64];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/rv_ckpt_XXXXXX");
    cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

static const char *tpath(const char *name)
{
    static char buf[8][128];
    static int next;
    char *p = buf[next++ % 8];
    snprintf(p, 128, "%s/%s", dir, name);
    return p;
}

static rv_vit_config tiny_cfg(int T, int mlp)
{
    rv_vit_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.preset, sizeof c.preset, "custom");
    c.dim = 16;
    c.layers = 2;
    c.heads = 2;
    c.mlp = mlp;
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

/* A training state with every value distinct and some odd bit patterns in the moments. */
typedef struct state {
    rv_vit_model *m;
    rv_train_head *h; /* NULL: no head */
    rv_adamw *o;
    rv_ckpt_info info;
} state;

static void fill_bits(float *x, int64_t n, uint64_t seed)
{
    ref_rng r = ref_rng_make(seed);
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)ref_rng_u64(&r);
        if ((u >> 23 & 0xff) == 0xff)
            u ^= 1u << 30; /* no inf/NaN: they would compare oddly, not wrongly */
        memcpy(&x[i], &u, 4);
    }
}

static state make_state(int T, int mlp, int task, int classes, uint64_t seed)
{
    state s;
    memset(&s, 0, sizeof s);
    rv_vit_config c = tiny_cfg(T, mlp);
    cr_assert_eq(rv_vit_new(&c, &s.m), RV_OK, "%s", rv_last_error());
    cr_assert_eq(rv_vit_init_random(s.m, seed), RV_OK, "%s", rv_last_error());
    int64_t n = rv_vit_params(s.m);
    if (task >= 0) {
        cr_assert_eq(rv_train_head_new(&c, (rv_task)task, classes, &s.h), RV_OK, "%s",
                     rv_last_error());
        cr_assert_eq(rv_train_head_init(s.h, seed + 1), RV_OK);
        s.h->arena[0] = -0.0f;
        n += (int64_t)s.h->arena_floats;
    }
    cr_assert_eq(rv_adamw_new(n, NULL, &s.o), RV_OK, "%s", rv_last_error());
    fill_bits(s.o->m, n, seed + 2);
    fill_bits(s.o->v, n, seed + 3);
    s.o->m[0] = -0.0f;
    s.o->v[1] = 1e-45f; /* a denormal */
    s.o->step = 17;
    s.info.step = 17;
    s.info.data_pos = 12345678901LL;
    s.info.seed = 0xFEDCBA9876543210ull; /* above 2^63 and 2^53 */
    snprintf(s.info.settings, sizeof s.info.settings,
             "{\"task\": \"classify\", \"lr\": 1e-4, \"name\": \"caf\xc3\xa9 \\\"q\\\"\"}");
    return s;
}

/* A zeroed state of the same sizes (what a resuming run builds before loading). */
static state blank_like(const state *a, int mlp)
{
    state s;
    memset(&s, 0, sizeof s);
    rv_vit_config c = a->m->cfg;
    if (mlp)
        c.mlp = mlp;
    cr_assert_eq(rv_vit_new(&c, &s.m), RV_OK, "%s", rv_last_error());
    int64_t n = rv_vit_params(s.m);
    if (a->h) {
        cr_assert_eq(rv_train_head_new(&c, a->h->task, a->h->classes ? a->h->classes : 1, &s.h),
                     RV_OK);
        n += (int64_t)s.h->arena_floats;
    }
    cr_assert_eq(rv_adamw_new(n, NULL, &s.o), RV_OK);
    return s;
}

static void state_free(state *s)
{
    rv_vit_free(&s->m);
    rv_train_head_free(&s->h);
    rv_adamw_free(&s->o);
}

static void assert_same(const state *a, const state *b)
{
    cr_assert_eq(a->m->arena_floats, b->m->arena_floats);
    cr_assert_eq(memcmp(a->m->arena, b->m->arena, a->m->arena_floats * 4), 0,
                 "model weights differ");
    if (a->h) {
        cr_assert_eq(a->h->arena_floats, b->h->arena_floats);
        cr_assert_eq(memcmp(a->h->arena, b->h->arena, a->h->arena_floats * 4), 0,
                     "head weights differ");
    }
    cr_assert_eq(a->o->n, b->o->n);
    cr_assert_eq(memcmp(a->o->m, b->o->m, (size_t)a->o->n * 4), 0, "optim.m differs");
    cr_assert_eq(memcmp(a->o->v, b->o->v, (size_t)a->o->n * 4), 0, "optim.v differs");
    cr_assert_eq(a->o->step, b->o->step);
}

static int warnings;
static void count_warnings(rv_log_level level, const char *msg, void *user)
{
    (void)user;
    if (level <= RV_LOG_WARN) {
        warnings++;
        cr_log_info("log: %s", msg);
    }
}

static void assert_fails(rv_status got, rv_status want, const char *a, const char *b)
{
    const char *msg = rv_last_error();
    cr_log_info("expected failure: %s", msg);
    cr_assert_eq(got, want, "status %d, want %d (%s)", got, want, msg);
    if (a)
        cr_assert_not_null(strstr(msg, a), "message lacks '%s': %s", a, msg);
    if (b)
        cr_assert_not_null(strstr(msg, b), "message lacks '%s': %s", b, msg);
}

/* ---- round trips -------------------------------------------------------------------- */

static void round_trip(int T, int task)
{
    state a = make_state(T, 32, task, 7, 100 + (uint64_t)T);
    const char *path = tpath("ck.safetensors");
    cr_assert_eq(rv_ckpt_save(path, a.m, a.h, a.o, &a.info), RV_OK, "%s", rv_last_error());
    state b = blank_like(&a, 0);
    rv_ckpt_info info;
    memset(&info, 0x33, sizeof info);
    cr_assert_eq(rv_ckpt_load(path, b.m, b.h, b.o, &info), RV_OK, "%s", rv_last_error());
    assert_same(&a, &b);
    cr_assert_eq(info.step, a.info.step);
    cr_assert_eq(info.data_pos, a.info.data_pos);
    cr_assert_eq(info.seed, a.info.seed);
    cr_assert_str_eq(info.settings, a.info.settings);

    /* Read as a model: the same weights, and not one warning about the rest. */
    warnings = 0;
    rv_log_set(count_warnings, NULL, RV_LOG_DEBUG);
    rv_vit_model *m = NULL;
    rv_status s = rv_vit_load(path, NULL, &m);
    rv_log_set(NULL, NULL, RV_LOG_ERROR);
    cr_assert_eq(s, RV_OK, "%s", rv_last_error());
    cr_assert_eq(warnings, 0, "rv_vit_load warned about a checkpoint");
    cr_assert_eq(memcmp(m->arena, a.m->arena, a.m->arena_floats * 4), 0);
    char h1[17], h2[17];
    rv_vit_hash(m, h1);
    rv_vit_hash(a.m, h2);
    cr_assert_str_eq(h1, h2);
    rv_vit_free(&m);

    /* Saved again from the loaded state: the same bytes. */
    const char *again = tpath("again.safetensors");
    cr_assert_eq(rv_ckpt_save(again, b.m, b.h, b.o, &info), RV_OK, "%s", rv_last_error());
    FILE *f1 = fopen(path, "rb"), *f2 = fopen(again, "rb");
    cr_assert(f1 && f2);
    int c1, c2;
    long at = 0;
    do {
        c1 = fgetc(f1);
        c2 = fgetc(f2);
        cr_assert_eq(c1, c2, "the re-saved checkpoint differs at byte %ld", at);
        at++;
    } while (c1 != EOF);
    fclose(f1);
    fclose(f2);
    state_free(&a);
    state_free(&b);
}

Test(ckpt, round_trip_t2_classify, .init = setup, .fini = teardown)
{
    round_trip(2, RV_TASK_CLASSIFY);
}

Test(ckpt, round_trip_t1_mae, .init = setup, .fini = teardown)
{
    round_trip(1, RV_TASK_MAE);
}

Test(ckpt, round_trip_no_head, .init = setup, .fini = teardown)
{
    round_trip(2, -1);
}

/* The file itself: rv_vit_save's names and config, the head's names, optim.* (n) F32
 * equal to the moments, and the metadata JSON with the seed as a decimal string. */
Test(ckpt, file_layout, .init = setup, .fini = teardown)
{
    state a = make_state(2, 32, RV_TASK_CLASSIFY, 7, 5);
    const char *path = tpath("ck.safetensors"), *model = tpath("model.safetensors");
    cr_assert_eq(rv_ckpt_save(path, a.m, a.h, a.o, &a.info), RV_OK, "%s", rv_last_error());
    cr_assert_eq(rv_vit_save(a.m, model), RV_OK, "%s", rv_last_error());
    rv_safetensors *ck = NULL, *mo = NULL;
    cr_assert_eq(rv_st_open(path, &ck), RV_OK, "%s", rv_last_error());
    cr_assert_eq(rv_st_open(model, &mo), RV_OK, "%s", rv_last_error());
    /* Every model tensor, byte for byte as rv_vit_save writes it. */
    for (int i = 0; i < rv_st_count(mo); i++) {
        const rv_st_tensor *t = rv_st_at(mo, i), *u = rv_st_find(ck, t->name);
        cr_assert_not_null(u, "checkpoint lacks '%s'", t->name);
        cr_assert_eq(u->dtype, t->dtype);
        cr_assert_eq(u->ndim, t->ndim);
        cr_assert_eq(memcmp(u->shape, t->shape, sizeof t->shape), 0);
        cr_assert_eq(memcmp(u->data, t->data, t->nbytes), 0, "'%s' differs", t->name);
    }
    cr_assert_str_eq(rv_st_meta(ck, RV_VIT_META_CONFIG), rv_st_meta(mo, RV_VIT_META_CONFIG));
    const int64_t n = a.o->n;
    const rv_st_tensor *hw = rv_st_find(ck, "heads.head.weight");
    const rv_st_tensor *hb = rv_st_find(ck, "heads.head.bias");
    const rv_st_tensor *om = rv_st_find(ck, "optim.m"), *ov = rv_st_find(ck, "optim.v");
    cr_assert(hw && hb && om && ov);
    cr_assert(hw->ndim == 2 && hw->shape[0] == 7 && hw->shape[1] == 16);
    cr_assert_eq(memcmp(hw->data, a.h->cls_w, 7 * 16 * 4), 0);
    cr_assert(om->dtype == RV_F32 && om->ndim == 1 && om->shape[0] == n);
    cr_assert(ov->dtype == RV_F32 && ov->ndim == 1 && ov->shape[0] == n);
    cr_assert_eq(memcmp(om->data, a.o->m, (size_t)n * 4), 0);
    cr_assert_eq(memcmp(ov->data, a.o->v, (size_t)n * 4), 0);
    cr_assert_eq(rv_st_count(ck), rv_st_count(mo) + 4, "unexpected extra tensors");
    const char *meta = rv_st_meta(ck, "ringvit.checkpoint");
    cr_assert_not_null(meta);
    cr_log_info("ringvit.checkpoint = %s", meta);
    cr_assert_not_null(strstr(meta, "\"seed\":\"18364758544493064720\""), "%s", meta);
    cr_assert_not_null(strstr(meta, "\"data_pos\":12345678901"), "%s", meta);
    cr_assert_not_null(strstr(meta, "\"adam_step\":17"), "%s", meta);
    char want_n[64];
    snprintf(want_n, sizeof want_n, "\"n\":%lld", (long long)n);
    cr_assert_not_null(strstr(meta, want_n), "%s", meta);
    cr_assert_not_null(strstr(meta, "\"settings\":\"{\\\"task\\\": \\\"classify\\\""), "%s",
                       meta);
    rv_st_free(&ck);
    rv_st_free(&mo);
    state_free(&a);
}

/* ---- mismatches ---------------------------------------------------------------------- */

/* A failed load leaves the model and the moments as they were. */
static void assert_untouched(const state *b, const float *marena, const float *mom)
{
    cr_assert_eq(memcmp(b->m->arena, marena, b->m->arena_floats * 4), 0, "model changed");
    cr_assert_eq(memcmp(b->o->m, mom, (size_t)b->o->n * 4), 0, "optim.m changed");
}

Test(ckpt, mismatched_sizes, .init = setup, .fini = teardown)
{
    state a = make_state(2, 32, RV_TASK_CLASSIFY, 7, 9);
    const char *path = tpath("ck.safetensors");
    cr_assert_eq(rv_ckpt_save(path, a.m, a.h, a.o, &a.info), RV_OK, "%s", rv_last_error());
    rv_ckpt_info info;

    /* Another MLP width: the config field is named. */
    state b = blank_like(&a, 48);
    float *marena = ref_dup_f(b.m->arena, b.m->arena_floats);
    float *mom = ref_dup_f(b.o->m, (size_t)b.o->n);
    assert_fails(rv_ckpt_load(path, b.m, b.h, b.o, &info), RV_ERR_FORMAT, "mlp 32 (model 48)",
                 path);
    assert_untouched(&b, marena, mom);
    free(marena);
    free(mom);
    state_free(&b);

    /* Another class count. */
    b = blank_like(&a, 0);
    rv_train_head_free(&b.h);
    rv_adamw_free(&b.o);
    cr_assert_eq(rv_train_head_new(&b.m->cfg, RV_TASK_CLASSIFY, 9, &b.h), RV_OK);
    cr_assert_eq(rv_adamw_new(rv_vit_params(b.m) + (int64_t)b.h->arena_floats, NULL, &b.o),
                 RV_OK);
    marena = ref_dup_f(b.m->arena, b.m->arena_floats);
    mom = ref_dup_f(b.o->m, (size_t)b.o->n);
    rv_status s = rv_ckpt_load(path, b.m, b.h, b.o, &info);
    assert_fails(s, RV_ERR_FORMAT, "heads.head.weight", path);
    assert_untouched(&b, marena, mom);
    free(marena);
    free(mom);
    state_free(&b);

    /* Another task's head. */
    b = blank_like(&a, 0);
    rv_train_head_free(&b.h);
    rv_adamw_free(&b.o);
    cr_assert_eq(rv_train_head_new(&b.m->cfg, RV_TASK_MAE, 0, &b.h), RV_OK);
    cr_assert_eq(rv_adamw_new(rv_vit_params(b.m) + (int64_t)b.h->arena_floats, NULL, &b.o),
                 RV_OK);
    assert_fails(rv_ckpt_load(path, b.m, b.h, b.o, &info), RV_ERR_FORMAT, "classify", "mae");
    rv_train_head_free(&b.h);
    rv_adamw_free(&b.o);
    /* No head where the file has one. */
    cr_assert_eq(rv_adamw_new(rv_vit_params(b.m), NULL, &b.o), RV_OK);
    assert_fails(rv_ckpt_load(path, b.m, NULL, b.o, &info), RV_ERR_FORMAT, "classify", path);
    state_free(&b);

    /* An optimizer that does not match the model and head is the caller's error. */
    b = blank_like(&a, 0);
    rv_adamw_free(&b.o);
    cr_assert_eq(rv_adamw_new(a.o->n - 1, NULL, &b.o), RV_OK);
    assert_fails(rv_ckpt_load(path, b.m, b.h, b.o, &info), RV_ERR_INVALID, "optimizer", NULL);
    assert_fails(rv_ckpt_save(path, b.m, b.h, b.o, &info), RV_ERR_INVALID, "optimizer", NULL);
    state_free(&b);

    /* A model file is not a checkpoint. */
    const char *model = tpath("model.safetensors");
    cr_assert_eq(rv_vit_save(a.m, model), RV_OK);
    b = blank_like(&a, 0);
    assert_fails(rv_ckpt_load(model, b.m, b.h, b.o, &info), RV_ERR_FORMAT,
                 "ringvit.checkpoint", model);
    state_free(&b);
    state_free(&a);
}

/* Rewrites src to dst with tensor `name` replaced (by a tensor of another shape or
 * dtype) or dropped (shape NULL), or metadata key `mkey` set to mval. */
static void rewrite(const char *src, const char *dst, const char *name, rv_dtype dt, int ndim,
                    const int64_t *shape, const char *mkey, const char *mval)
{
    rv_safetensors *st = NULL;
    rv_st_writer *w = NULL;
    cr_assert_eq(rv_st_open(src, &st), RV_OK, "%s", rv_last_error());
    cr_assert_eq(rv_st_writer_new(&w), RV_OK);
    void *fill = calloc(1, 1 << 20);
    for (int i = 0; i < rv_st_count(st); i++) {
        const rv_st_tensor *t = rv_st_at(st, i);
        if (name && strcmp(t->name, name) == 0) {
            if (shape)
                cr_assert_eq(rv_st_writer_add(w, t->name, dt, ndim, shape, fill), RV_OK);
            continue;
        }
        cr_assert_eq(rv_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data), RV_OK);
    }
    static const char *const keys[] = {"ringvit.config", "ringvit.checkpoint", "format"};
    for (int k = 0; k < 3; k++) {
        const char *v = rv_st_meta(st, keys[k]);
        if (mkey && strcmp(mkey, keys[k]) == 0)
            v = mval;
        if (v)
            cr_assert_eq(rv_st_writer_meta(w, keys[k], v), RV_OK);
    }
    cr_assert_eq(rv_st_writer_write(w, dst), RV_OK, "%s", rv_last_error());
    rv_st_writer_free(&w);
    rv_st_free(&st);
    free(fill);
}

Test(ckpt, bad_tensors_and_metadata, .init = setup, .fini = teardown)
{
    state a = make_state(2, 32, RV_TASK_CLASSIFY, 7, 21);
    const char *path = tpath("ck.safetensors"), *bad = tpath("bad.safetensors");
    cr_assert_eq(rv_ckpt_save(path, a.m, a.h, a.o, &a.info), RV_OK, "%s", rv_last_error());
    state b = blank_like(&a, 0);
    float *marena = ref_dup_f(b.m->arena, b.m->arena_floats);
    float *mom = ref_dup_f(b.o->m, (size_t)b.o->n);
    rv_ckpt_info info;
    const char *bias = "encoder.layers.encoder_layer_1.mlp.0.bias";
    const int64_t s31[1] = {31}, s32[1] = {32}, sn[1] = {a.o->n + 1}, s2[2] = {a.o->n, 1};

    rewrite(path, bad, bias, RV_F32, 1, s31, NULL, NULL);
    assert_fails(rv_ckpt_load(bad, b.m, b.h, b.o, &info), RV_ERR_FORMAT, bias, "[31]");
    assert_untouched(&b, marena, mom);
    rewrite(path, bad, bias, RV_F16, 1, s32, NULL, NULL);
    assert_fails(rv_ckpt_load(bad, b.m, b.h, b.o, &info), RV_ERR_FORMAT, bias, "F16");
    rewrite(path, bad, bias, RV_F32, 0, NULL, NULL, NULL);
    assert_fails(rv_ckpt_load(bad, b.m, b.h, b.o, &info), RV_ERR_FORMAT, bias, bad);
    rewrite(path, bad, "optim.v", RV_F32, 1, sn, NULL, NULL);
    assert_fails(rv_ckpt_load(bad, b.m, b.h, b.o, &info), RV_ERR_FORMAT, "optim.v", bad);
    rewrite(path, bad, "optim.m", RV_F32, 2, s2, NULL, NULL);
    assert_fails(rv_ckpt_load(bad, b.m, b.h, b.o, &info), RV_ERR_FORMAT, "optim.m", bad);
    rewrite(path, bad, "heads.head.bias", RV_F32, 0, NULL, NULL, NULL);
    assert_fails(rv_ckpt_load(bad, b.m, b.h, b.o, &info), RV_ERR_FORMAT, "heads.head.bias", bad);
    assert_untouched(&b, marena, mom);

    /* Metadata. */
    static const struct {
        const char *key, *value, *named;
    } meta[] = {
        {"ringvit.checkpoint", NULL, "ringvit.checkpoint"},
        {"ringvit.checkpoint", "[1, 2]", "ringvit.checkpoint"},
        {"ringvit.checkpoint", "{not json", "ringvit.checkpoint"},
        {"ringvit.checkpoint",
         "{\"step\":1,\"data_pos\":2,\"seed\":\"5\",\"adam_step\":1,\"n\":0,\"task\":"
         "\"classify\",\"classes\":7,\"settings\":\"\"}",
         "n 0"},
        {"ringvit.config", NULL, "ringvit.config"},
        {"ringvit.config", "{\"dim\": \"x\"}", "ringvit.config"},
    };
    for (size_t k = 0; k < sizeof meta / sizeof meta[0]; k++) {
        rewrite(path, bad, NULL, RV_F32, 0, NULL, meta[k].key, meta[k].value);
        assert_fails(rv_ckpt_load(bad, b.m, b.h, b.o, &info), RV_ERR_FORMAT, meta[k].named, bad);
    }
    /* Each field of the metadata is checked. */
    char good[8192];
    rv_safetensors *st = NULL;
    cr_assert_eq(rv_st_open(path, &st), RV_OK);
    snprintf(good, sizeof good, "%s", rv_st_meta(st, "ringvit.checkpoint"));
    rv_st_free(&st);
    static const struct {
        const char *from, *to, *named;
    } edit[] = {
        {"\"seed\":\"18364758544493064720\"", "\"seed\":\"18446744073709551616\"", "seed"},
        {"\"seed\":\"18364758544493064720\"", "\"seed\":18", "seed"},
        {"\"seed\":\"18364758544493064720\"", "\"seed\":\"12x\"", "seed"},
        {"\"seed\":\"18364758544493064720\"", "\"seed\":\"-5\"", "seed"},
        {"\"step\":17", "\"step\":-1", "step"},
        {"\"data_pos\":12345678901", "\"data_pos\":1.5", "data_pos"},
        {"\"adam_step\":17", "\"adam_step\":\"17\"", "adam_step"},
        /* Counters past what a run reaches: step x batch and adam_step + 1 would
         * overflow (the hostile-input issue: UBSan found both). */
        {"\"adam_step\":17", "\"adam_step\":9223372036854775807", "adam_step"},
        {"\"step\":17", "\"step\":4611686018427387904", "step"},
        {"\"data_pos\":12345678901", "\"data_pos\":1099511627777", "data_pos"},
        {"\"classes\":7", "\"classes\":8", "classes"},
        {"\"settings\":\"", "\"settings\":5,\"x\":\"", "settings"},
    };
    for (size_t k = 0; k < sizeof edit / sizeof edit[0]; k++) {
        char text[8192];
        const char *at = strstr(good, edit[k].from);
        cr_assert_not_null(at, "'%s' not in %s", edit[k].from, good);
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - good), good, edit[k].to,
                 at + strlen(edit[k].from));
        rewrite(path, bad, NULL, RV_F32, 0, NULL, "ringvit.checkpoint", text);
        assert_fails(rv_ckpt_load(bad, b.m, b.h, b.o, &info), RV_ERR_FORMAT, edit[k].named, bad);
    }
    assert_untouched(&b, marena, mom);
    /* The untouched rewrite still loads (the edits above are what failed). */
    rewrite(path, bad, NULL, RV_F32, 0, NULL, NULL, NULL);
    cr_assert_eq(rv_ckpt_load(bad, b.m, b.h, b.o, &info), RV_OK, "%s", rv_last_error());
    assert_same(&a, &b);
    free(marena);
    free(mom);
    state_free(&b);
    state_free(&a);
}

/* A diverged model (a NaN or an infinity in any parameter) is never written: the
 * checkpoint and weights writers refuse it naming the tensor and index, and the file
 * already there stays as it was. */
Test(ckpt, non_finite_weights_are_not_saved, .init = setup, .fini = teardown)
{
    state a = make_state(1, 32, RV_TASK_CLASSIFY, 5, 41);
    const char *path = tpath("ck.safetensors"), *wpath = tpath("w.safetensors");
    cr_assert_eq(rv_ckpt_save(path, a.m, a.h, a.o, &a.info), RV_OK, "%s", rv_last_error());
    cr_assert_eq(rv_vit_save(a.m, wpath), RV_OK, "%s", rv_last_error());
    struct stat before, wbefore;
    cr_assert_eq(stat(path, &before), 0);
    cr_assert_eq(stat(wpath, &wbefore), 0);
    const float bad[2] = {NAN, -INFINITY};
    const char *what[2] = {"NaN", "-Inf"};
    for (int k = 0; k < 2; k++) {
        const size_t at = a.m->arena_floats / 2 + (size_t)k;
        const float keep = a.m->arena[at];
        a.m->arena[at] = bad[k];
        rv_status st = rv_ckpt_save(path, a.m, a.h, a.o, &a.info);
        cr_assert_eq(st, RV_ERR_INVALID, "a %s weight was saved in a checkpoint", what[k]);
        cr_assert(strstr(rv_last_error(), what[k]) && strstr(rv_last_error(), "not written"),
                  "%s", rv_last_error());
        st = rv_vit_save(a.m, wpath);
        cr_assert_eq(st, RV_ERR_INVALID, "a %s weight was saved", what[k]);
        cr_assert(strstr(rv_last_error(), "tensor '"), "%s", rv_last_error());
        a.m->arena[at] = keep;
    }
    struct stat after, wafter;
    cr_assert_eq(stat(path, &after), 0);
    cr_assert_eq(stat(wpath, &wafter), 0);
    cr_assert(after.st_ino == before.st_ino && after.st_size == before.st_size &&
              wafter.st_ino == wbefore.st_ino, "an output was replaced");
    state_free(&a);
}

Test(ckpt, truncated_files_fail_cleanly, .init = setup, .fini = teardown)
{
    state a = make_state(1, 32, RV_TASK_MAE, 0, 33);
    const char *path = tpath("ck.safetensors"), *cut = tpath("cut.safetensors");
    cr_assert_eq(rv_ckpt_save(path, a.m, a.h, a.o, &a.info), RV_OK, "%s", rv_last_error());
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *bytes = malloc((size_t)size);
    cr_assert_eq(fread(bytes, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    state b = blank_like(&a, 0);
    float *marena = ref_dup_f(b.m->arena, b.m->arena_floats);
    float *mom = ref_dup_f(b.o->m, (size_t)b.o->n);
    const long cuts[] = {0, 4, 8, 100, size / 3, size / 2, size - 4 * a.o->n, size - 1};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        f = fopen(cut, "wb");
        cr_assert_eq(fwrite(bytes, 1, (size_t)cuts[k], f), (size_t)cuts[k]);
        fclose(f);
        rv_ckpt_info info;
        rv_status s = rv_ckpt_load(cut, b.m, b.h, b.o, &info);
        cr_log_info("cut at %ld of %ld: %s", cuts[k], size, rv_last_error());
        cr_assert_eq(s, RV_ERR_FORMAT, "cut at %ld: status %d (%s)", cuts[k], s,
                     rv_last_error());
        cr_assert_not_null(strstr(rv_last_error(), cut));
        assert_untouched(&b, marena, mom);
    }
    /* Missing file: an I/O error naming it. */
    rv_ckpt_info info;
    assert_fails(rv_ckpt_load(tpath("none.safetensors"), b.m, b.h, b.o, &info), RV_ERR_IO,
                 "none.safetensors", NULL);
    free(bytes);
    free(marena);
    free(mom);
    state_free(&b);
    state_free(&a);
}

/* Saving over an old checkpoint replaces it whole; a failed save leaves it. */
Test(ckpt, save_replaces_atomically, .init = setup, .fini = teardown)
{
    state a = make_state(2, 32, RV_TASK_CLASSIFY, 3, 40);
    const char *path = tpath("ck.safetensors");
    cr_assert_eq(rv_ckpt_save(path, a.m, a.h, a.o, &a.info), RV_OK, "%s", rv_last_error());
    a.o->step = 18;
    a.info.step = 18;
    a.m->arena[5] += 1.0f;
    cr_assert_eq(rv_ckpt_save(path, a.m, a.h, a.o, &a.info), RV_OK, "%s", rv_last_error());
    state b = blank_like(&a, 0);
    rv_ckpt_info info;
    cr_assert_eq(rv_ckpt_load(path, b.m, b.h, b.o, &info), RV_OK, "%s", rv_last_error());
    assert_same(&a, &b);
    cr_assert_eq(info.step, 18);
    /* Settings that are not text: refused, the file stays the one before. */
    memset(a.info.settings, 'x', sizeof a.info.settings);
    assert_fails(rv_ckpt_save(path, a.m, a.h, a.o, &a.info), RV_ERR_INVALID, "settings", NULL);
    snprintf(a.info.settings, sizeof a.info.settings, "bad utf-8 \xff");
    assert_fails(rv_ckpt_save(path, a.m, a.h, a.o, &a.info), RV_ERR_INVALID, "UTF-8", NULL);
    /* A directory that does not exist. */
    cr_assert_eq(rv_ckpt_save(tpath("no/such/dir.safetensors"), a.m, a.h, a.o, &info),
                 RV_ERR_IO);
    state c = blank_like(&a, 0);
    cr_assert_eq(rv_ckpt_load(path, c.m, c.h, c.o, &info), RV_OK, "%s", rv_last_error());
    assert_same(&b, &c);
    /* Nothing left behind but the checkpoint. */
    char cmd[160];
    snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq 1", dir);
    cr_assert_eq(system(cmd), 0, "temporary files left in %s", dir);
    state_free(&a);
    state_free(&b);
    state_free(&c);
}
