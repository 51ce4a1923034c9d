/* test_vit_weights.c: the encoder's model half (rv_vit.h; encoder/model/vit_config.c,
 * vit_model.c, vit_init.c, vit_load.c, vit_save.c): presets and config checks,
 * config JSON round trip, save -> load bit-exact round trips (T 1 and 2, with and
 * without CLS) with the saved layout checked by an independent index formula, a
 * torchvision-only file written here by hand (ringvit.* zero, sizes from shapes,
 * heads D / 64 or --heads), 2D -> tubelet inflation, seeded initialisation
 * (determinism and the statistics torchvision's init gives), F16/BF16 inputs, and
 * every malformed-weights case, each RV_ERR_FORMAT naming the tensor and file;
 * the hostile-input cases: configs claiming more than the file holds (refused
 * fast, before allocating), a header length one byte short, NaN/Inf weights. */
#include <criterion/criterion.h>

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ref_ops.h"
#include "rv_clock.h"
#include "rv_safetensors.h"
#include "rv_vit.h"

/* A torchvision patch weight inflated to T frames (each frame w / T in f32) summed
 * back in double against w: T roundings of w / T, each half an ulp, so within
 * 2 FLT_EPSILON of |w| for T <= 3 (relative, element by element). The other
 * comparisons of this file are exact (memcmp) or of random initialisations'
 * moments, which are statistics, not two computations of one value. */
#define TOL_INFLATE_SUM (2 * FLT_EPSILON)

/* ---- helpers ------------------------------------------------------------------ */

static struct {
    char dir[64];
    int n;
} td;
static char td_path[8][128];

static void td_setup(void)
{
    snprintf(td.dir, sizeof td.dir, "/tmp/rv_vitw_XXXXXX");
    cr_assert_not_null(mkdtemp(td.dir), "mkdtemp: %s", strerror(errno));
    td.n = 0;
}

static void td_teardown(void)
{
    for (int i = 0; i < td.n; i++)
        unlink(td_path[i]);
    rmdir(td.dir);
}

/* A file name inside the test's directory (removed at teardown). */
static const char *tpath(const char *name)
{
    char want[128];
    snprintf(want, sizeof want, "%s/%s", td.dir, name);
    for (int i = 0; i < td.n; i++)
        if (strcmp(td_path[i], want) == 0)
            return td_path[i];
    cr_assert_lt(td.n, 8);
    snprintf(td_path[td.n], sizeof td_path[0], "%s/%s", td.dir, name);
    return td_path[td.n++];
}

static rv_vit_config small_cfg(int D, int L, int heads, int M, int T, int P, int grid, int cls)
{
    rv_vit_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.preset, sizeof c.preset, "custom");
    c.dim = D;
    c.layers = L;
    c.heads = heads;
    c.mlp = M;
    c.eps = 1e-6f;
    c.tubelet = T;
    c.patch = P;
    c.grid = grid;
    c.audio_freq = 16;
    c.audio_time = 4;
    c.cls = cls;
    rv_vit_family_defaults(&c); /* ringvit's own family */
    return c;
}

static void assert_cfg_eq(const rv_vit_config *a, const rv_vit_config *b)
{
    cr_assert_str_eq(a->preset, b->preset);
    cr_assert_eq(a->dim, b->dim);
    cr_assert_eq(a->layers, b->layers);
    cr_assert_eq(a->heads, b->heads);
    cr_assert_eq(a->mlp, b->mlp);
    cr_assert_eq(a->eps, b->eps);
    cr_assert_eq(a->tubelet, b->tubelet);
    cr_assert_eq(a->patch, b->patch);
    cr_assert_eq(a->grid, b->grid);
    cr_assert_eq(a->audio_freq, b->audio_freq);
    cr_assert_eq(a->audio_time, b->audio_time);
    cr_assert_eq(a->cls, b->cls);
}

static int all_eq(const float *x, int64_t n, float v)
{
    for (int64_t i = 0; i < n; i++)
        if (x[i] != v)
            return 0;
    return 1;
}

/* Independent index formulas of the two video layouts (rv_vit.h). */
static int64_t file_idx(int d, int c, int t, int y, int x, int T, int P)
{
    return (int64_t)d * 3 * T * P * P + (int64_t)c * T * P * P + (int64_t)t * P * P +
           (int64_t)y * P + x;
}
static int64_t mem_idx(int d, int t, int y, int x, int c, int T, int P)
{
    return (int64_t)d * T * P * P * 3 + (int64_t)t * P * P * 3 + (int64_t)y * P * 3 +
           (int64_t)x * 3 + c;
}

/* The tensor as f32 (the test's own reader: little-endian F32 only). */
static float *st_floats(const rv_safetensors *st, const char *name, int64_t *numel)
{
    const rv_st_tensor *t = rv_st_find(st, name);
    cr_assert_not_null(t, "file lacks '%s'", name);
    cr_assert_eq(t->dtype, RV_F32, "'%s' is not F32", name);
    float *x = ref_alloc_f((size_t)t->numel);
    memcpy(x, t->data, t->nbytes);
    if (numel)
        *numel = t->numel;
    return x;
}

/* Error check: status and a message naming each given text (tensor, file). */
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

/* ---- a torchvision-only file built by hand ---------------------------------------- */

#define TV_MAX 96

typedef struct tv_entry {
    char name[96];
    rv_dtype dtype;
    int ndim;
    int64_t shape[5];
    int64_t numel;
    float *data; /* (numel) values (I32 entries hold raw ints of the same size) */
} tv_entry;

typedef struct tv_file {
    int n;
    tv_entry e[TV_MAX];
    ref_rng rng;
} tv_file;

static tv_entry *tv_add(tv_file *f, const char *name, int ndim, int64_t s0, int64_t s1,
                        int64_t s2, int64_t s3)
{
    cr_assert_lt(f->n, TV_MAX);
    tv_entry *e = &f->e[f->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->dtype = RV_F32;
    e->ndim = ndim;
    int64_t s[4] = {s0, s1, s2, s3};
    e->numel = 1;
    for (int i = 0; i < ndim; i++) {
        e->shape[i] = s[i];
        e->numel *= s[i];
    }
    e->data = ref_alloc_f((size_t)e->numel);
    ref_fill_normal(&f->rng, e->data, (size_t)e->numel, 0.0f, 1.0f);
    return e;
}

static tv_entry *tv_get(tv_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->e[i].name, name) == 0)
            return &f->e[i];
    cr_assert_fail("test file has no '%s'", name);
    return NULL;
}

static void tv_drop(tv_file *f, const char *name)
{
    tv_entry *e = tv_get(f, name);
    free(e->data);
    *e = f->e[--f->n];
}

/* Replaces an entry's shape (fresh random data). */
static void tv_reshape(tv_file *f, const char *name, int ndim, int64_t s0, int64_t s1,
                       int64_t s2, int64_t s3)
{
    tv_drop(f, name);
    tv_add(f, name, ndim, s0, s1, s2, s3);
}

/* torchvision's VisionTransformer names (no classifier head). */
static void tv_make(tv_file *f, int D, int L, int M, int P, int grid, uint64_t seed)
{
    memset(f, 0, sizeof *f);
    f->rng = ref_rng_make(seed);
    char nm[96];
    tv_add(f, "conv_proj.weight", 4, D, 3, P, P);
    tv_add(f, "conv_proj.bias", 1, D, 0, 0, 0);
    tv_add(f, "class_token", 3, 1, 1, D, 0);
    tv_add(f, "encoder.pos_embedding", 3, 1, 1 + grid * grid, D, 0);
    for (int i = 0; i < L; i++) {
#define LN(sfx, nd, a, b)                                                             \
    do {                                                                              \
        snprintf(nm, sizeof nm, "encoder.layers.encoder_layer_%d.%s", i, sfx);        \
        tv_add(f, nm, nd, a, b, 0, 0);                                                \
    } while (0)
        LN("ln_1.weight", 1, D, 0);
        LN("ln_1.bias", 1, D, 0);
        LN("self_attention.in_proj_weight", 2, 3 * D, D);
        LN("self_attention.in_proj_bias", 1, 3 * D, 0);
        LN("self_attention.out_proj.weight", 2, D, D);
        LN("self_attention.out_proj.bias", 1, D, 0);
        LN("ln_2.weight", 1, D, 0);
        LN("ln_2.bias", 1, D, 0);
        LN("mlp.0.weight", 2, M, D);
        LN("mlp.0.bias", 1, M, 0);
        LN("mlp.3.weight", 2, D, M);
        LN("mlp.3.bias", 1, D, 0);
#undef LN
    }
    tv_add(f, "encoder.ln.weight", 1, D, 0, 0, 0);
    tv_add(f, "encoder.ln.bias", 1, D, 0, 0, 0);
}

static void tv_write(tv_file *f, const char *path, const char *meta_config)
{
    rv_st_writer *w = NULL;
    cr_assert_eq(rv_st_writer_new(&w), RV_OK);
    for (int i = 0; i < f->n; i++)
        cr_assert_eq(rv_st_writer_add(w, f->e[i].name, f->e[i].dtype, f->e[i].ndim,
                                      f->e[i].shape, f->e[i].data),
                     RV_OK, "%s", rv_last_error());
    if (meta_config)
        cr_assert_eq(rv_st_writer_meta(w, RV_VIT_META_CONFIG, meta_config), RV_OK);
    cr_assert_eq(rv_st_writer_write(w, path), RV_OK, "%s", rv_last_error());
    rv_st_writer_free(&w);
}

static void tv_free(tv_file *f)
{
    for (int i = 0; i < f->n; i++)
        free(f->e[i].data);
    f->n = 0;
}

static void assert_same(const float *got, const float *want, int64_t n, const char *what)
{
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(got[i], want[i], "%s[%lld]: %g != %g", what, (long long)i,
                     (double)got[i], (double)want[i]);
}

/* ---- config ------------------------------------------------------------------- */

Test(vit_config, presets)
{
    static const struct {
        const char *name;
        int D, L, H;
    } want[] = {{"tiny", 192, 12, 3}, {"small", 384, 12, 6}, {"base", 768, 12, 12}};
    for (int i = 0; i < 3; i++) {
        rv_vit_config c;
        cr_assert_eq(rv_vit_preset(want[i].name, &c), RV_OK);
        cr_assert_str_eq(c.preset, want[i].name);
        cr_assert_eq(c.dim, want[i].D);
        cr_assert_eq(c.layers, want[i].L);
        cr_assert_eq(c.heads, want[i].H);
        cr_assert_eq(c.mlp, 4 * want[i].D);
        cr_assert_eq(c.eps, 1e-6f);
        cr_assert_eq(c.tubelet, 2);
        cr_assert_eq(c.patch, 16);
        cr_assert_eq(c.grid, 14);
        cr_assert_eq(c.audio_freq, 16);
        cr_assert_eq(c.audio_time, 16);
        cr_assert_eq(c.cls, 1);
        cr_assert_eq(rv_vit_config_check(&c), RV_OK);
    }
    rv_vit_config c;
    assert_fails(rv_vit_preset("huge", &c), RV_ERR_INVALID, "huge", NULL);
}

Test(vit_config, params_match_torchvision_counts)
{
    /* torchvision vit_b_16 has 86,567,656 parameters with its 1000-class head
     * (768 * 1000 + 1000); the image part must agree, plus ringvit's own
     * tensors. base, T 1: video (768*3*16*16) + ringvit.* (audio 768*256 + 768,
     * band 8*768, time 768*768, modality 3*768). */
    rv_vit_config c;
    cr_assert_eq(rv_vit_preset("base", &c), RV_OK);
    c.tubelet = 1;
    rv_vit_model *m = NULL;
    cr_assert_eq(rv_vit_new(&c, &m), RV_OK, "%s", rv_last_error());
    int64_t tv = 86567656LL - (768LL * 1000 + 1000);
    int64_t own = 768LL * 256 + 768 + 8 * 768 + 768LL * 768 + 3 * 768;
    cr_assert_eq(rv_vit_params(m), tv + own, "params %lld", (long long)rv_vit_params(m));
    rv_vit_free(&m);
    cr_assert_null(m);
    rv_vit_free(&m); /* NULL is a no-op */
    rv_vit_free(NULL);
}

Test(vit_config, check_rejects_bad_combinations)
{
    rv_vit_config good = small_cfg(32, 2, 2, 64, 2, 4, 3, 1);
    cr_assert_eq(rv_vit_config_check(&good), RV_OK, "%s", rv_last_error());
    rv_vit_config c;
#define BAD(field, value, text)                                                       \
    do {                                                                              \
        c = good;                                                                     \
        c.field = value;                                                              \
        assert_fails(rv_vit_config_check(&c), RV_ERR_INVALID, text, NULL);             \
    } while (0)
    BAD(heads, 3, "heads 3");
    BAD(heads, 0, "heads");
    BAD(dim, 0, "dim");
    BAD(layers, 0, "layers");
    BAD(mlp, -1, "mlp");
    BAD(tubelet, 0, "tubelet");
    BAD(patch, 0, "patch");
    BAD(grid, 0, "grid");
    BAD(audio_freq, 0, "audio_freq 0");
    BAD(audio_freq, 256, "audio_freq");
    BAD(audio_fstride, 0, "audio_fstride 0");
    BAD(audio_time, 0, "audio_time");
    BAD(cls, 2, "cls");
    BAD(eps, 0.0f, "eps");
    BAD(eps, NAN, "eps");
#undef BAD
    rv_vit_model *m = NULL;
    c = good;
    c.heads = 5;
    cr_assert_eq(rv_vit_new(&c, &m), RV_ERR_INVALID);
    cr_assert_null(m);
}

Test(vit_config, json_round_trip)
{
    rv_vit_config c = small_cfg(48, 3, 4, 80, 3, 5, 7, 0), back;
    c.eps = 1e-5f;
    c.audio_freq = 32;
    c.audio_time = 9;
    char *j = rv_vit_config_to_json(&c);
    cr_assert_not_null(j);
    cr_assert_eq(rv_vit_config_from_json(j, &back), RV_OK, "%s", rv_last_error());
    assert_cfg_eq(&back, &c);
    cr_assert(strstr(j, "\"eps\":1e-05,") || strstr(j, "\"eps\":1e-5,"),
              "eps written as the shortest decimal: %s", j);
    free(j);
    /* Presets too, and eps 1e-6 exactly. */
    cr_assert_eq(rv_vit_preset("small", &c), RV_OK);
    j = rv_vit_config_to_json(&c);
    cr_assert_eq(rv_vit_config_from_json(j, &back), RV_OK);
    assert_cfg_eq(&back, &c);
    free(j);
    /* Hand-written: preset and eps optional. */
    cr_assert_eq(rv_vit_config_from_json(
                     "{\"dim\":64,\"layers\":1,\"heads\":1,\"mlp\":8,\"tubelet\":1,"
                     "\"patch\":2,\"grid\":2,\"audio_freq\":128,\"audio_time\":1,\"cls\":0}",
                     &back),
                 RV_OK, "%s", rv_last_error());
    cr_assert_str_eq(back.preset, "custom");
    cr_assert_eq(back.eps, 1e-6f);
    /* Rejects. */
    assert_fails(rv_vit_config_from_json("[1]", &back), RV_ERR_FORMAT, "object", NULL);
    assert_fails(rv_vit_config_from_json("{\"dim\":", &back), RV_ERR_FORMAT, NULL, NULL);
    assert_fails(rv_vit_config_from_json("{\"layers\":1}", &back), RV_ERR_FORMAT, "dim", NULL);
    assert_fails(rv_vit_config_from_json(
                     "{\"dim\":\"64\",\"layers\":1,\"heads\":1,\"mlp\":8,\"tubelet\":1,"
                     "\"patch\":2,\"grid\":2,\"audio_freq\":128,\"audio_time\":1,\"cls\":0}",
                     &back),
                 RV_ERR_FORMAT, "dim", NULL);
    assert_fails(rv_vit_config_from_json(
                     "{\"dim\":64,\"layers\":1,\"heads\":5,\"mlp\":8,\"tubelet\":1,"
                     "\"patch\":2,\"grid\":2,\"audio_freq\":128,\"audio_time\":1,\"cls\":0}",
                     &back),
                 RV_ERR_FORMAT, "heads 5", NULL);
}

/* ---- model -------------------------------------------------------------------- */

Test(vit_model, new_is_zero_with_unit_layernorms)
{
    rv_vit_config c = small_cfg(32, 2, 2, 64, 2, 4, 3, 1);
    rv_vit_model *m = NULL;
    cr_assert_eq(rv_vit_new(&c, &m), RV_OK, "%s", rv_last_error());
    const int64_t D = 32, M = 64, npos = 10, bands = 128 / 16;
    int64_t want = D * 2 * 4 * 4 * 3 + D + D * 16 * 4 + D + D + npos * D + bands * D + D * D +
                   3 * D + 2 * (4 * D + 3 * D * D + 3 * D + D * D + D + M * D + M + D * M + D) +
                   2 * D;
    cr_assert_eq(rv_vit_params(m), want);
    cr_assert_eq((int64_t)m->arena_floats, want);
    /* Every pointer inside the arena, the tensors tiling it without overlap. */
    struct {
        const float *p;
        int64_t n;
    } t[9 + 12 * 2 + 2] = {
        {m->video_w, D * 96}, {m->video_b, D}, {m->audio_w, D * 64}, {m->audio_b, D},
        {m->cls, D},          {m->pos, npos * D}, {m->band, bands * D}, {m->time_w, D * D},
        {m->modality, 3 * D},
    };
    int k = 9;
    for (int i = 0; i < 2; i++) {
        const rv_vit_layer *l = &m->layer[i];
        const float *p[12] = {l->ln1_w, l->ln1_b, l->qkv_w, l->qkv_b, l->proj_w, l->proj_b,
                              l->ln2_w, l->ln2_b, l->fc1_w, l->fc1_b, l->fc2_w, l->fc2_b};
        int64_t n[12] = {D, D, 3 * D * D, 3 * D, D * D, D, D, D, M * D, M, D * M, D};
        for (int j = 0; j < 12; j++) {
            t[k].p = p[j];
            t[k++].n = n[j];
        }
        cr_assert(all_eq(l->ln1_w, D, 1.0f) && all_eq(l->ln2_w, D, 1.0f));
        cr_assert(all_eq(l->ln1_b, D, 0.0f) && all_eq(l->qkv_w, 3 * D * D, 0.0f));
    }
    t[k].p = m->ln_w;
    t[k++].n = D;
    t[k].p = m->ln_b;
    t[k++].n = D;
    unsigned char *cover = calloc((size_t)want, 1);
    for (int i = 0; i < k; i++) {
        int64_t off = t[i].p - m->arena;
        cr_assert(off >= 0 && off + t[i].n <= want, "tensor %d outside the arena", i);
        for (int64_t j = 0; j < t[i].n; j++)
            cover[off + j]++;
    }
    for (int64_t j = 0; j < want; j++)
        cr_assert_eq(cover[j], 1, "arena float %lld covered %d times", (long long)j, cover[j]);
    free(cover);
    cr_assert(all_eq(m->ln_w, D, 1.0f) && all_eq(m->ln_b, D, 0.0f));
    cr_assert(all_eq(m->video_w, D * 96, 0.0f) && all_eq(m->pos, npos * D, 0.0f));
    rv_vit_free(&m);
}

/* ---- init --------------------------------------------------------------------- */

static void stats(const float *x, int64_t n, double *mean, double *std, double *amax)
{
    double s = 0, s2 = 0, a = 0;
    for (int64_t i = 0; i < n; i++) {
        s += x[i];
        s2 += (double)x[i] * x[i];
        if (fabs(x[i]) > a)
            a = fabs(x[i]);
    }
    *mean = s / (double)n;
    *std = sqrt(s2 / (double)n - *mean * *mean);
    *amax = a;
}

static void assert_normal(const float *x, int64_t n, double std, double tol, const char *what)
{
    double mu, sd, amax;
    stats(x, n, &mu, &sd, &amax);
    cr_assert(fabs(sd / std - 1) < tol, "%s: std %g, want %g", what, sd, std);
    cr_assert(fabs(mu) < 4 * std / sqrt((double)n), "%s: mean %g", what, mu);
}

static void assert_uniform(const float *x, int64_t n, double bound, const char *what)
{
    double mu, sd, amax;
    stats(x, n, &mu, &sd, &amax);
    cr_assert(amax <= bound, "%s: |x| %g beyond the bound %g", what, amax, bound);
    cr_assert(amax > 0.95 * bound, "%s: |x| max %g, bound %g", what, amax, bound);
    cr_assert(fabs(sd / (bound / sqrt(3.0)) - 1) < 0.05, "%s: std %g, want %g", what, sd,
              bound / sqrt(3.0));
}

Test(vit_init, deterministic_and_seed_dependent)
{
    rv_vit_config c = small_cfg(32, 2, 2, 64, 2, 4, 3, 1);
    rv_vit_model *a = NULL, *b = NULL, *o = NULL;
    cr_assert_eq(rv_vit_new(&c, &a), RV_OK);
    cr_assert_eq(rv_vit_new(&c, &b), RV_OK);
    cr_assert_eq(rv_vit_new(&c, &o), RV_OK);
    cr_assert_eq(rv_vit_init_random(a, 7), RV_OK);
    cr_assert_eq(rv_vit_init_random(b, 7), RV_OK);
    cr_assert_eq(rv_vit_init_random(o, 8), RV_OK);
    cr_assert_eq(memcmp(a->arena, b->arena, a->arena_floats * 4), 0, "same seed differs");
    char ha[17], hb[17], ho[17];
    rv_vit_hash(a, ha);
    rv_vit_hash(b, hb);
    rv_vit_hash(o, ho);
    cr_assert_str_eq(ha, hb);
    cr_assert_str_neq(ha, ho);
    cr_assert_eq(strlen(ha), 16);
    int64_t same = 0;
    for (size_t i = 0; i < a->arena_floats; i++)
        same += a->arena[i] == o->arena[i];
    /* Only the constant tensors (biases 0, LayerNorms) may agree. */
    cr_assert_lt(same, (int64_t)a->arena_floats / 10, "%lld of %zu equal across seeds",
                 (long long)same, a->arena_floats);
    rv_vit_free(&a);
    rv_vit_free(&b);
    rv_vit_free(&o);
}

Test(vit_init, statistics_as_torchvision)
{
    const int D = 64, M = 128, T = 2, P = 4, G = 8, L = 2;
    rv_vit_config c = small_cfg(D, L, 4, M, T, P, G, 1);
    rv_vit_model *m = NULL;
    cr_assert_eq(rv_vit_new(&c, &m), RV_OK);
    cr_assert_eq(rv_vit_init_random(m, 12345), RV_OK);
    const int64_t vin = 3 * T * P * P, ain = 16 * 4;
    assert_normal(m->video_w, D * vin, sqrt(1.0 / vin), 0.10, "conv_proj");
    assert_normal(m->audio_w, D * ain, sqrt(1.0 / ain), 0.10, "audio_proj");
    assert_normal(m->pos, (1 + G * G) * D, 0.02, 0.10, "pos_embedding");
    assert_normal(m->time_w, D * D, 0.02, 0.10, "time_proj");
    assert_normal(m->band, 8 * D, 0.02, 0.15, "audio_band");
    assert_normal(m->modality, 3 * D, 0.02, 0.25, "modality");
    cr_assert(all_eq(m->video_b, D, 0.0f) && all_eq(m->audio_b, D, 0.0f));
    cr_assert(all_eq(m->cls, D, 0.0f), "class token starts at 0");
    for (int i = 0; i < L; i++) {
        const rv_vit_layer *l = &m->layer[i];
        assert_uniform(l->qkv_w, 3 * D * D, sqrt(6.0 / (D + 3 * D)), "in_proj");
        assert_uniform(l->proj_w, D * D, sqrt(1.0 / D), "out_proj");
        assert_uniform(l->fc1_w, M * D, sqrt(6.0 / (D + M)), "mlp.0");
        assert_uniform(l->fc2_w, D * M, sqrt(6.0 / (D + M)), "mlp.3");
        assert_normal(l->fc1_b, M, 1e-6, 0.25, "mlp.0.bias");
        assert_normal(l->fc2_b, D, 1e-6, 0.3, "mlp.3.bias");
        cr_assert(all_eq(l->qkv_b, 3 * D, 0.0f) && all_eq(l->proj_b, D, 0.0f));
        cr_assert(all_eq(l->ln1_w, D, 1.0f) && all_eq(l->ln1_b, D, 0.0f));
        cr_assert(all_eq(l->ln2_w, D, 1.0f) && all_eq(l->ln2_b, D, 0.0f));
    }
    cr_assert(all_eq(m->ln_w, D, 1.0f) && all_eq(m->ln_b, D, 0.0f));
    rv_vit_free(&m);
}

/* ---- save -> load ------------------------------------------------------------- */

static void round_trip(int T, int cls)
{
    rv_vit_config c = small_cfg(32, 2, 2, 64, T, 4, 3, cls);
    rv_vit_model *m = NULL, *back = NULL;
    const char *path = tpath("rt.safetensors");
    cr_assert_eq(rv_vit_new(&c, &m), RV_OK);
    cr_assert_eq(rv_vit_init_random(m, 99), RV_OK);
    /* Give every tensor nonzero values so a misplaced one cannot hide. */
    ref_rng r = ref_rng_make(5);
    for (size_t i = 0; i < m->arena_floats; i++)
        if (m->arena[i] == 0.0f)
            m->arena[i] = (float)ref_rng_uniform(&r) + 0.5f;
    cr_assert_eq(rv_vit_save(m, path), RV_OK, "%s", rv_last_error());
    cr_assert_eq(rv_vit_load(path, NULL, &back), RV_OK, "%s", rv_last_error());
    assert_cfg_eq(&back->cfg, &m->cfg);
    cr_assert_eq(back->arena_floats, m->arena_floats);
    cr_assert_eq(memcmp(back->arena, m->arena, m->arena_floats * 4), 0, "weights differ");
    char h1[17], h2[17];
    rv_vit_hash(m, h1);
    rv_vit_hash(back, h2);
    cr_assert_str_eq(h1, h2);

    /* The file itself: names, the Conv layout of the patch weight, metadata. */
    rv_safetensors *st = NULL;
    cr_assert_eq(rv_st_open(path, &st), RV_OK, "%s", rv_last_error());
    cr_assert_eq(rv_st_count(st), 9 + 12 * 2 + 2);
    cr_assert_str_eq(rv_st_meta(st, "format"), "pt");
    rv_vit_config meta;
    cr_assert_eq(rv_vit_config_from_json(rv_st_meta(st, RV_VIT_META_CONFIG), &meta), RV_OK);
    assert_cfg_eq(&meta, &m->cfg);
    const char *vname = T == 1 ? "conv_proj.weight" : "ringvit.tubelet_proj.weight";
    cr_assert_null(rv_st_find(st, T == 1 ? "ringvit.tubelet_proj.weight" : "conv_proj.weight"));
    const rv_st_tensor *vt = rv_st_find(st, vname);
    cr_assert_not_null(vt);
    cr_assert_eq(vt->ndim, T == 1 ? 4 : 5);
    float *fv = st_floats(st, vname, NULL);
    for (int d = 0; d < 32; d++)
        for (int ch = 0; ch < 3; ch++)
            for (int t = 0; t < T; t++)
                for (int y = 0; y < 4; y++)
                    for (int x = 0; x < 4; x++)
                        cr_assert_eq(fv[file_idx(d, ch, t, y, x, T, 4)],
                                     m->video_w[mem_idx(d, t, y, x, ch, T, 4)]);
    free(fv);
    float *q = st_floats(st, "encoder.layers.encoder_layer_1.self_attention.in_proj_weight",
                         NULL);
    assert_same(q, m->layer[1].qkv_w, 3 * 32 * 32, "in_proj_weight");
    free(q);
    float *au = st_floats(st, "ringvit.audio_proj.weight", NULL);
    assert_same(au, m->audio_w, 32 * 16 * 4, "audio_proj");
    free(au);
    rv_st_free(&st);
    rv_vit_free(&m);
    rv_vit_free(&back);
}

Test(vit_weights, round_trip_t1_cls, .init = td_setup, .fini = td_teardown)
{
    round_trip(1, 1);
}
Test(vit_weights, round_trip_t1_nocls, .init = td_setup, .fini = td_teardown)
{
    round_trip(1, 0);
}
Test(vit_weights, round_trip_t2_cls, .init = td_setup, .fini = td_teardown)
{
    round_trip(2, 1);
}
Test(vit_weights, round_trip_t2_nocls, .init = td_setup, .fini = td_teardown)
{
    round_trip(2, 0);
}

/* A classifier head and its labels survive the round trip (ringvit.head.* and the
 * ringvit.labels metadata); the head, its labels and multi_label are in the hash. */
Test(vit_weights, round_trip_head, .init = td_setup, .fini = td_teardown)
{
    rv_vit_config c = small_cfg(32, 1, 2, 64, 1, 4, 3, 1);
    c.head = RV_HEAD_MEAN;
    c.classes = 3;
    c.multi_label = 1;
    rv_vit_model *m = NULL, *back = NULL;
    const char *path = tpath("head.safetensors");
    cr_assert_eq(rv_vit_new(&c, &m), RV_OK, "%s", rv_last_error());
    cr_assert_eq(rv_vit_init_random(m, 4), RV_OK);
    ref_rng r = ref_rng_make(6);
    ref_fill_normal(&r, m->head_w, 3 * 32, 0, 1);
    ref_fill_normal(&r, m->head_b, 3, 0, 1);
    const char *names[3] = {"Speech", "B\xc3\xa4r \"quoted\"", "rain, heavy"};
    cr_assert_eq(rv_vit_set_labels(m, names, 3), RV_OK, "%s", rv_last_error());
    cr_assert_eq(rv_vit_save(m, path), RV_OK, "%s", rv_last_error());
    cr_assert_eq(rv_vit_load(path, NULL, &back), RV_OK, "%s", rv_last_error());
    assert_cfg_eq(&back->cfg, &m->cfg);
    cr_assert_eq(back->cfg.head, RV_HEAD_MEAN);
    cr_assert_eq(back->cfg.classes, 3);
    cr_assert_eq(back->cfg.multi_label, 1);
    cr_assert_eq(back->arena_floats, m->arena_floats);
    cr_assert_eq(memcmp(back->arena, m->arena, m->arena_floats * 4), 0, "weights differ");
    cr_assert_eq(memcmp(back->head_w, m->head_w, 3 * 32 * 4), 0);
    for (int i = 0; i < 3; i++)
        cr_assert_str_eq(back->labels[i], names[i]);
    char h1[17], h2[17], h3[17];
    rv_vit_hash(m, h1);
    rv_vit_hash(back, h2);
    cr_assert_str_eq(h1, h2);
    rv_safetensors *st = NULL;
    cr_assert_eq(rv_st_open(path, &st), RV_OK, "%s", rv_last_error());
    float *hw = st_floats(st, "ringvit.head.weight", NULL);
    assert_same(hw, m->head_w, 3 * 32, "ringvit.head.weight");
    free(hw);
    cr_assert_str_eq(rv_st_meta(st, RV_VIT_META_LABELS),
                     "[\"Speech\",\"B\xc3\xa4r \\\"quoted\\\"\",\"rain, heavy\"]");
    rv_st_free(&st);
    /* the labels and multi_label are part of what the hash names */
    const char *other[3] = {"Speech", "B\xc3\xa4r \"quoted\"", "rain,heavy"};
    cr_assert_eq(rv_vit_set_labels(back, other, 3), RV_OK);
    rv_vit_hash(back, h3);
    cr_assert_str_neq(h1, h3, "a label changed, the hash did not");
    cr_assert_eq(rv_vit_set_labels(back, names, 3), RV_OK);
    back->cfg.multi_label = 0;
    rv_vit_hash(back, h3);
    cr_assert_str_neq(h1, h3, "multi_label changed, the hash did not");
    rv_vit_free(&m);
    rv_vit_free(&back);
}

Test(vit_weights, hash_covers_config_and_weights)
{
    rv_vit_config c = small_cfg(32, 1, 2, 64, 1, 4, 3, 1);
    rv_vit_model *m = NULL;
    cr_assert_eq(rv_vit_new(&c, &m), RV_OK);
    char h0[17], h1[17], h2[17];
    rv_vit_hash(m, h0);
    m->layer[0].fc2_b[31] = 1e-30f;
    rv_vit_hash(m, h1);
    cr_assert_str_neq(h0, h1, "one weight changed, hash did not");
    m->cfg.heads = 4; /* the config is hashed too */
    rv_vit_hash(m, h2);
    cr_assert_str_neq(h1, h2);
    /* An independent FNV-1a 64 over the JSON and the little-endian bytes. */
    m->cfg.heads = 2;
    char *j = rv_vit_config_to_json(&m->cfg);
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = j; *p; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    const unsigned char *b = (const unsigned char *)m->arena;
    for (size_t i = 0; i < m->arena_floats * 4; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    char want[17];
    snprintf(want, sizeof want, "%016llx", (unsigned long long)h);
    cr_assert_str_eq(h1, want);
    free(j);
    rv_vit_free(&m);
}

/* ---- torchvision-only files --------------------------------------------------- */

static void assert_matches_tv(const rv_vit_model *m, tv_file *f, int T)
{
    const rv_vit_config *c = &m->cfg;
    const int D = c->dim, P = c->patch;
    const tv_entry *cw = tv_get(f, "conv_proj.weight");
    for (int d = 0; d < D; d++)
        for (int ch = 0; ch < 3; ch++)
            for (int y = 0; y < P; y++)
                for (int x = 0; x < P; x++) {
                    float w = cw->data[file_idx(d, ch, 0, y, x, 1, P)];
                    for (int t = 0; t < T; t++)
                        cr_assert_eq(m->video_w[mem_idx(d, t, y, x, ch, T, P)], w / (float)T,
                                     "video_w d %d c %d t %d y %d x %d", d, ch, t, y, x);
                }
    assert_same(m->video_b, tv_get(f, "conv_proj.bias")->data, D, "conv_proj.bias");
    assert_same(m->cls, tv_get(f, "class_token")->data, D, "class_token");
    assert_same(m->pos, tv_get(f, "encoder.pos_embedding")->data,
                (1 + (int64_t)c->grid * c->grid) * D, "pos");
    char nm[96];
    for (int i = 0; i < c->layers; i++) {
        const rv_vit_layer *l = &m->layer[i];
#define CMP(field, sfx, n)                                                             \
    do {                                                                               \
        snprintf(nm, sizeof nm, "encoder.layers.encoder_layer_%d.%s", i, sfx);         \
        assert_same(l->field, tv_get(f, nm)->data, n, nm);                             \
    } while (0)
        CMP(ln1_w, "ln_1.weight", D);
        CMP(ln1_b, "ln_1.bias", D);
        CMP(qkv_w, "self_attention.in_proj_weight", 3 * D * D);
        CMP(qkv_b, "self_attention.in_proj_bias", 3 * D);
        CMP(proj_w, "self_attention.out_proj.weight", D * D);
        CMP(proj_b, "self_attention.out_proj.bias", D);
        CMP(ln2_w, "ln_2.weight", D);
        CMP(ln2_b, "ln_2.bias", D);
        CMP(fc1_w, "mlp.0.weight", (int64_t)c->mlp * D);
        CMP(fc1_b, "mlp.0.bias", c->mlp);
        CMP(fc2_w, "mlp.3.weight", (int64_t)c->mlp * D);
        CMP(fc2_b, "mlp.3.bias", D);
#undef CMP
    }
    assert_same(m->ln_w, tv_get(f, "encoder.ln.weight")->data, D, "encoder.ln.weight");
    assert_same(m->ln_b, tv_get(f, "encoder.ln.bias")->data, D, "encoder.ln.bias");
    /* The ringvit.* tensors are absent: zero. */
    cr_assert(all_eq(m->audio_w, (int64_t)D * c->audio_freq * c->audio_time, 0.0f));
    cr_assert(all_eq(m->audio_b, D, 0.0f));
    cr_assert(all_eq(m->band, (int64_t)(128 / c->audio_freq) * D, 0.0f));
    cr_assert(all_eq(m->time_w, (int64_t)D * D, 0.0f));
    cr_assert(all_eq(m->modality, 3 * D, 0.0f));
}

static int warnings;
static char last_warning[512];
static void count_warnings(rv_log_level level, const char *msg, void *user)
{
    (void)user;
    if (level == RV_LOG_WARN) {
        warnings++;
        snprintf(last_warning, sizeof last_warning, "%s", msg);
    }
}

Test(vit_tv, image_vit_loads_as_is, .init = td_setup, .fini = td_teardown)
{
    tv_file f;
    const char *path = tpath("tv.safetensors");
    tv_make(&f, 128, 2, 96, 4, 3, 1);
    tv_write(&f, path, NULL);
    rv_vit_model *m = NULL;
    cr_assert_eq(rv_vit_load(path, NULL, &m), RV_OK, "%s", rv_last_error());
    cr_assert_eq(m->cfg.dim, 128);
    cr_assert_eq(m->cfg.layers, 2);
    cr_assert_eq(m->cfg.heads, 2, "heads default to D / 64");
    cr_assert_eq(m->cfg.mlp, 96);
    cr_assert_eq(m->cfg.patch, 4);
    cr_assert_eq(m->cfg.grid, 3);
    cr_assert_eq(m->cfg.tubelet, 1);
    cr_assert_eq(m->cfg.cls, 1);
    cr_assert_eq(m->cfg.eps, 1e-6f);
    cr_assert_str_eq(m->cfg.preset, "custom");
    assert_matches_tv(m, &f, 1);
    rv_vit_free(&m);

    /* --heads overrides; a tubelet of 1 asked for changes nothing. */
    rv_vit_load_opts o = {.heads = 8, .tubelet = 1};
    cr_assert_eq(rv_vit_load(path, &o, &m), RV_OK, "%s", rv_last_error());
    cr_assert_eq(m->cfg.heads, 8);
    assert_matches_tv(m, &f, 1);
    rv_vit_free(&m);
    o.heads = 3;
    assert_fails(rv_vit_load(path, &o, &m), RV_ERR_INVALID, "3", "128");
    cr_assert_null(m);
    tv_free(&f);
}

Test(vit_tv, heads_unknown_without_metadata, .init = td_setup, .fini = td_teardown)
{
    tv_file f;
    const char *path = tpath("tv96.safetensors");
    tv_make(&f, 96, 1, 32, 2, 2, 2);
    tv_write(&f, path, NULL);
    rv_vit_model *m = NULL;
    assert_fails(rv_vit_load(path, NULL, &m), RV_ERR_INVALID, "--heads", path);
    rv_vit_load_opts o = {.heads = 3};
    cr_assert_eq(rv_vit_load(path, &o, &m), RV_OK, "%s", rv_last_error());
    cr_assert_eq(m->cfg.heads, 3);
    assert_matches_tv(m, &f, 1);
    rv_vit_free(&m);
    tv_free(&f);
}

Test(vit_tv, inflation_to_tubelets, .init = td_setup, .fini = td_teardown)
{
    tv_file f;
    const char *path = tpath("tv.safetensors"), *again = tpath("again.safetensors");
    tv_make(&f, 64, 1, 64, 4, 2, 3);
    tv_write(&f, path, NULL);
    for (int T = 2; T <= 3; T++) {
        rv_vit_load_opts o = {.tubelet = T};
        rv_vit_model *m = NULL, *back = NULL;
        cr_assert_eq(rv_vit_load(path, &o, &m), RV_OK, "%s", rv_last_error());
        cr_assert_eq(m->cfg.tubelet, T);
        assert_matches_tv(m, &f, T);
        /* A still clip embeds as the image: the frames sum to the 2D weight. */
        const tv_entry *cw = tv_get(&f, "conv_proj.weight");
        for (int d = 0; d < 64; d += 7)
            for (int x = 0; x < 4; x++) {
                double s = 0;
                for (int t = 0; t < T; t++)
                    s += m->video_w[mem_idx(d, t, 1, x, 2, T, 4)];
                const double w = cw->data[file_idx(d, 2, 0, 1, x, 1, 4)];
                cr_assert(fabs(s - w) <= TOL_INFLATE_SUM * fabs(w), "T %d: frames sum to %.9g, "
                          "the 2D weight is %.9g", T, s, w);
            }
        /* Saved as a tubelet model, it reloads as such (and refuses another T). */
        cr_assert_eq(rv_vit_save(m, again), RV_OK, "%s", rv_last_error());
        cr_assert_eq(rv_vit_load(again, NULL, &back), RV_OK, "%s", rv_last_error());
        cr_assert_eq(memcmp(back->arena, m->arena, m->arena_floats * 4), 0);
        rv_vit_free(&back);
        o.tubelet = 5;
        assert_fails(rv_vit_load(again, &o, &back), RV_ERR_INVALID, "5", "ringvit.tubelet_proj");
        rv_vit_free(&m);
    }
    tv_free(&f);
}

Test(vit_tv, unknown_tensors_warn_once, .init = td_setup, .fini = td_teardown)
{
    tv_file f;
    const char *path = tpath("head.safetensors");
    tv_make(&f, 64, 1, 32, 2, 2, 4);
    tv_add(&f, "heads.head.weight", 2, 10, 64, 0, 0);
    tv_add(&f, "heads.head.bias", 1, 10, 0, 0, 0);
    tv_write(&f, path, NULL);
    warnings = 0;
    rv_log_set(count_warnings, NULL, RV_LOG_DEBUG);
    rv_vit_model *m = NULL;
    cr_assert_eq(rv_vit_load(path, NULL, &m), RV_OK, "%s", rv_last_error());
    rv_log_set(NULL, NULL, RV_LOG_ERROR);
    cr_assert_eq(warnings, 1);
    cr_assert_not_null(strstr(last_warning, "2 unknown"), "%s", last_warning);
    cr_assert_not_null(strstr(last_warning, "heads.head"), "%s", last_warning);
    assert_matches_tv(m, &f, 1);
    rv_vit_free(&m);
    tv_free(&f);
}

static uint16_t to_bf16(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    return (uint16_t)(u >> 16); /* the values below are exact in bf16 */
}

Test(vit_tv, half_precision_inputs, .init = td_setup, .fini = td_teardown)
{
    tv_file f;
    const char *path = tpath("half.safetensors");
    tv_make(&f, 64, 1, 32, 2, 2, 5);
    /* encoder.ln.weight as BF16, conv_proj.bias as F16 (hand-encoded values). */
    tv_entry *lw = tv_get(&f, "encoder.ln.weight");
    uint16_t *b = (uint16_t *)lw->data;
    const float bvals[4] = {1.5f, -2.25f, 0.0f, 0x1p127f};
    for (int i = 0; i < 64; i++)
        b[i] = to_bf16(i < 4 ? bvals[i] : (float)i);
    lw->dtype = RV_BF16;
    tv_entry *cb = tv_get(&f, "conv_proj.bias");
    uint16_t *h = (uint16_t *)cb->data;
    /* 1.0, -2.0, 65504 (max), 2^-24 (smallest subnormal), 2^-14 (smallest normal),
     * 0.333251953125 (0x3555), -0.0 */
    const uint16_t hbits[7] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x0400, 0x3555, 0x8000};
    const float hvals[7] = {1.0f, -2.0f, 65504.0f, 0x1p-24f, 0x1p-14f, 0.333251953125f, -0.0f};
    for (int i = 0; i < 64; i++)
        h[i] = i < 7 ? hbits[i] : 0x3c00;
    cb->dtype = RV_F16;
    tv_write(&f, path, NULL);
    rv_vit_model *m = NULL;
    cr_assert_eq(rv_vit_load(path, NULL, &m), RV_OK, "%s", rv_last_error());
    for (int i = 0; i < 64; i++) {
        cr_assert_eq(m->ln_w[i], i < 4 ? bvals[i] : (float)i, "bf16 [%d] %g", i,
                     (double)m->ln_w[i]);
        cr_assert_eq(m->video_b[i], i < 7 ? hvals[i] : 1.0f, "f16 [%d] %g", i,
                     (double)m->video_b[i]);
    }
    cr_assert(signbit(m->video_b[6]));
    rv_vit_free(&m);
    tv_free(&f);
}

/* ---- malformed files ---------------------------------------------------------- */

#define L0 "encoder.layers.encoder_layer_0."
#define L1 "encoder.layers.encoder_layer_1."

/* A valid torchvision file (D 64, 2 layers, M 32, P 2, grid 3) with one change
 * applied by fn, loaded: must fail with RV_ERR_FORMAT naming text and the file. */
static void bad_tv(void (*fn)(tv_file *), const char *meta, const char *text)
{
    tv_file f;
    const char *path = tpath("bad.safetensors");
    tv_make(&f, 64, 2, 32, 2, 3, 11);
    fn(&f);
    tv_write(&f, path, meta);
    rv_vit_model *m = NULL;
    assert_fails(rv_vit_load(path, NULL, &m), RV_ERR_FORMAT, text, path);
    cr_assert_null(m);
    tv_free(&f);
}

static void drop_conv(tv_file *f) { tv_drop(f, "conv_proj.weight"); }
static void drop_conv_bias(tv_file *f) { tv_drop(f, "conv_proj.bias"); }
static void drop_cls(tv_file *f) { tv_drop(f, "class_token"); }
static void drop_pos(tv_file *f) { tv_drop(f, "encoder.pos_embedding"); }
static void drop_inproj1(tv_file *f) { tv_drop(f, L1 "self_attention.in_proj_weight"); }
static void drop_mlp3_bias0(tv_file *f) { tv_drop(f, L0 "mlp.3.bias"); }
static void drop_ln_bias(tv_file *f) { tv_drop(f, "encoder.ln.bias"); }
static void drop_layers(tv_file *f)
{
    char nm[96];
    for (int i = 0; i < 2; i++) {
        static const char *sfx[12] = {
            "ln_1.weight", "ln_1.bias", "self_attention.in_proj_weight",
            "self_attention.in_proj_bias", "self_attention.out_proj.weight",
            "self_attention.out_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.0.weight",
            "mlp.0.bias", "mlp.3.weight", "mlp.3.bias"};
        for (int k = 0; k < 12; k++) {
            snprintf(nm, sizeof nm, "encoder.layers.encoder_layer_%d.%s", i, sfx[k]);
            tv_drop(f, nm);
        }
    }
}

Test(vit_bad, missing_tensors, .init = td_setup, .fini = td_teardown)
{
    bad_tv(drop_conv, NULL, "conv_proj.weight");
    bad_tv(drop_conv_bias, NULL, "conv_proj.bias");
    bad_tv(drop_cls, NULL, "class_token");
    bad_tv(drop_pos, NULL, "encoder.pos_embedding");
    bad_tv(drop_inproj1, NULL, L1 "self_attention.in_proj_weight");
    bad_tv(drop_mlp3_bias0, NULL, L0 "mlp.3.bias");
    bad_tv(drop_ln_bias, NULL, "encoder.ln.bias");
    bad_tv(drop_layers, NULL, "encoder_layer_0");
}

static void shape_inproj(tv_file *f)
{
    tv_reshape(f, L0 "self_attention.in_proj_weight", 2, 3 * 64 + 1, 64, 0, 0);
}
static void shape_pos_nonsquare(tv_file *f)
{
    tv_reshape(f, "encoder.pos_embedding", 3, 1, 11, 64, 0);
}
static void shape_pos_width(tv_file *f) { tv_reshape(f, "encoder.pos_embedding", 3, 1, 10, 63, 0); }
static void shape_conv_rect(tv_file *f) { tv_reshape(f, "conv_proj.weight", 4, 64, 3, 2, 3); }
static void shape_conv_gray(tv_file *f) { tv_reshape(f, "conv_proj.weight", 4, 64, 1, 2, 2); }
static void shape_mlp_rank(tv_file *f) { tv_reshape(f, L1 "mlp.0.weight", 1, 32 * 64, 0, 0, 0); }
static void shape_ln(tv_file *f) { tv_reshape(f, L1 "ln_2.weight", 2, 1, 64, 0, 0); }
static void shape_cls(tv_file *f) { tv_reshape(f, "class_token", 2, 1, 64, 0, 0); }

Test(vit_bad, wrong_shapes, .init = td_setup, .fini = td_teardown)
{
    bad_tv(shape_inproj, NULL, L0 "self_attention.in_proj_weight");
    bad_tv(shape_pos_nonsquare, NULL, "encoder.pos_embedding");
    bad_tv(shape_pos_width, NULL, "encoder.pos_embedding");
    bad_tv(shape_conv_rect, NULL, "conv_proj.weight");
    bad_tv(shape_conv_gray, NULL, "conv_proj.weight");
    bad_tv(shape_mlp_rank, NULL, L1 "mlp.0.weight");
    bad_tv(shape_ln, NULL, L1 "ln_2.weight");
    bad_tv(shape_cls, NULL, "class_token");
}

static void dtype_i32(tv_file *f) { tv_get(f, L0 "ln_1.weight")->dtype = RV_I32; }
static void dtype_f64_conv(tv_file *f)
{
    tv_entry *e = tv_get(f, "conv_proj.weight");
    free(e->data);
    e->data = ref_alloc_f((size_t)e->numel * 2); /* F64 bytes */
    e->dtype = RV_F64;
}
static void dtype_u8_pos(tv_file *f) { tv_get(f, "encoder.pos_embedding")->dtype = RV_U8; }

Test(vit_bad, wrong_dtypes, .init = td_setup, .fini = td_teardown)
{
    bad_tv(dtype_i32, NULL, L0 "ln_1.weight");
    bad_tv(dtype_f64_conv, NULL, "conv_proj.weight");
    bad_tv(dtype_u8_pos, NULL, "encoder.pos_embedding");
}

static void gap_layer(tv_file *f)
{
    /* Layers 0 and 2, no 1: rename layer 1's tensors to layer 2. */
    for (int i = 0; i < f->n; i++)
        if (strncmp(f->e[i].name, L1, strlen(L1)) == 0) {
            char nm[96];
            snprintf(nm, sizeof nm, "encoder.layers.encoder_layer_2.%s",
                     f->e[i].name + strlen(L1));
            snprintf(f->e[i].name, sizeof f->e[i].name, "%s", nm);
        }
}
static void both_patch_weights(tv_file *f)
{
    tv_add(f, "ringvit.tubelet_proj.weight", 4, 64, 3, 2, 2);
    f->e[f->n - 1].ndim = 5;
    f->e[f->n - 1].shape[4] = 2;
    f->e[f->n - 1].shape[2] = 1;
    f->e[f->n - 1].shape[3] = 2;
}
static void bad_audio(tv_file *f) { tv_add(f, "ringvit.audio_band", 2, 7, 64, 0, 0); }
static void bad_time(tv_file *f) { tv_add(f, "ringvit.time_proj.weight", 2, 64, 32, 0, 0); }
static void nothing(tv_file *f) { (void)f; }

Test(vit_bad, structure, .init = td_setup, .fini = td_teardown)
{
    bad_tv(gap_layer, NULL, "encoder_layer_1");
    bad_tv(both_patch_weights, NULL, "ringvit.tubelet_proj.weight");
    bad_tv(bad_audio, NULL, "ringvit.audio_band");
    bad_tv(bad_time, NULL, "ringvit.time_proj.weight");
    /* Metadata disagreeing with the shapes. */
    char meta[512];
    rv_vit_config c = small_cfg(64, 2, 2, 32, 1, 2, 3, 1);
    char *j;
    c.grid = 4; /* pos_embedding holds 1 + 3*3 */
    j = rv_vit_config_to_json(&c);
    snprintf(meta, sizeof meta, "%s", j);
    free(j);
    bad_tv(nothing, meta, "encoder.pos_embedding");
    c.grid = 3;
    c.mlp = 48;
    j = rv_vit_config_to_json(&c);
    snprintf(meta, sizeof meta, "%s", j);
    free(j);
    bad_tv(nothing, meta, "mlp.0.weight");
    c.mlp = 32;
    c.dim = 128;
    j = rv_vit_config_to_json(&c);
    snprintf(meta, sizeof meta, "%s", j);
    free(j);
    bad_tv(nothing, meta, "conv_proj.weight");
    c.dim = 64;
    c.layers = 1;
    j = rv_vit_config_to_json(&c);
    snprintf(meta, sizeof meta, "%s", j);
    free(j);
    bad_tv(nothing, meta, "encoder_layer_1");
    c.layers = 3;
    j = rv_vit_config_to_json(&c);
    snprintf(meta, sizeof meta, "%s", j);
    free(j);
    bad_tv(nothing, meta, "encoder_layer_2");
    c.layers = 2;
    c.tubelet = 2;
    j = rv_vit_config_to_json(&c);
    snprintf(meta, sizeof meta, "%s", j);
    free(j);
    bad_tv(nothing, meta, "conv_proj.weight");
    bad_tv(nothing, "{\"dim\":64", RV_VIT_META_CONFIG);
    bad_tv(nothing, "{\"dim\":64,\"layers\":2}", RV_VIT_META_CONFIG);
    /* ... and agreeing: loads. */
    c.tubelet = 1;
    j = rv_vit_config_to_json(&c);
    tv_file f;
    const char *path = tpath("ok.safetensors");
    tv_make(&f, 64, 2, 32, 2, 3, 11);
    tv_write(&f, path, j);
    free(j);
    rv_vit_model *m = NULL;
    cr_assert_eq(rv_vit_load(path, NULL, &m), RV_OK, "%s", rv_last_error());
    assert_matches_tv(m, &f, 1);
    rv_vit_free(&m);
    tv_free(&f);
}

static void write_bytes(const char *path, const void *b, size_t n)
{
    FILE *fp = fopen(path, "wb");
    cr_assert_not_null(fp);
    cr_assert_eq(fwrite(b, 1, n, fp), n);
    fclose(fp);
}

static void write_raw(const char *path, const char *header, size_t data_len)
{
    size_t hl = strlen(header);
    unsigned char *b = calloc(8 + hl + data_len + 1, 1);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, header, hl);
    write_bytes(path, b, 8 + hl + data_len);
    free(b);
}

Test(vit_bad, container_errors_propagate, .init = td_setup, .fini = td_teardown)
{
    const char *path = tpath("raw.safetensors");
    rv_vit_model *m = NULL;
    /* Not JSON. */
    write_raw(path, "{not json", 0);
    assert_fails(rv_vit_load(path, NULL, &m), RV_ERR_FORMAT, path, NULL);
    /* Offsets out of range. */
    write_raw(path, "{\"conv_proj.bias\":{\"dtype\":\"F32\",\"shape\":[64],"
                    "\"data_offsets\":[0,256]}}",
              8);
    assert_fails(rv_vit_load(path, NULL, &m), RV_ERR_FORMAT, path, "conv_proj.bias");
    /* Overlapping tensors. */
    write_raw(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
              12);
    assert_fails(rv_vit_load(path, NULL, &m), RV_ERR_FORMAT, path, NULL);
    /* A valid file, truncated. */
    rv_vit_config c = small_cfg(32, 1, 2, 64, 1, 4, 3, 1);
    cr_assert_eq(rv_vit_new(&c, &m), RV_OK);
    cr_assert_eq(rv_vit_save(m, path), RV_OK);
    rv_vit_free(&m);
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0);
    cr_assert_eq(truncate(path, sb.st_size - 4), 0); /* the last tensor cut short */
    assert_fails(rv_vit_load(path, NULL, &m), RV_ERR_FORMAT, path, "encoder.ln.bias");
    cr_assert_eq(truncate(path, 1000), 0);
    assert_fails(rv_vit_load(path, NULL, &m), RV_ERR_FORMAT, path, NULL);
    cr_assert_eq(truncate(path, 5), 0);
    assert_fails(rv_vit_load(path, NULL, &m), RV_ERR_FORMAT, path, NULL);
    /* An empty but valid file: no patch weight. */
    write_raw(path, "{}", 0);
    assert_fails(rv_vit_load(path, NULL, &m), RV_ERR_FORMAT, path, "conv_proj.weight");
    /* Absent file. */
    cr_assert_eq(rv_vit_load(tpath("absent.safetensors"), NULL, &m), RV_ERR_IO);
    cr_assert_null(m);
}

/* ---- hostile input: config bombs, shifted data, non-finite weights ------------ */

static long max_rss_mb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024;
}

/* Loads path, which must fail naming a and b (and the file), in well under a
 * second and without the model's allocation showing in the peak RSS. */
static void assert_fails_fast(const char *path, const char *a, const char *b)
{
    rv_vit_model *m = NULL;
    long rss0 = max_rss_mb();
    double t0 = rv_clock_s();
    rv_status rc = rv_vit_load(path, NULL, &m);
    double dt = rv_clock_s() - t0;
    long grown = max_rss_mb() - rss0;
    assert_fails(rc, RV_ERR_FORMAT, path, a);
    if (b)
        assert_fails(rc, RV_ERR_FORMAT, b, NULL);
    cr_assert_null(m);
    cr_log_info("refused in %.3f s, peak RSS +%ld MB", dt, grown);
    cr_assert_lt(dt, 1.0, "took %.3f s", dt);
    cr_assert_lt(grown, 200, "peak RSS grew by %ld MB", grown);
}

/* A ringvit file whose metadata claims a D x L (mlp M) model, holding no
 * tensors (video off: no patch weight needed to pass the first checks) or
 * only a patch weight of width patch_dim (video on). */
static void config_bomb(int D, int L, int M, int patch_dim, const char *a, const char *b)
{
    const char *path = tpath("bomb.safetensors");
    rv_vit_config c = small_cfg(D, L, D / 64, M, 1, 16, 14, 1);
    c.video = patch_dim > 0;
    c.audio = 1;
    char *j = rv_vit_config_to_json(&c);
    rv_st_writer *w = NULL;
    float *conv = NULL;
    cr_assert_eq(rv_st_writer_new(&w), RV_OK);
    cr_assert_eq(rv_st_writer_meta(w, RV_VIT_META_CONFIG, j), RV_OK);
    if (patch_dim > 0) {
        const int64_t shape[4] = {patch_dim, 3, 16, 16};
        conv = calloc((size_t)patch_dim * 3 * 16 * 16, sizeof *conv);
        cr_assert_eq(rv_st_writer_add(w, "conv_proj.weight", RV_F32, 4, shape, conv), RV_OK);
    }
    cr_assert_eq(rv_st_writer_write(w, path), RV_OK, "%s", rv_last_error());
    rv_st_writer_free(&w);
    free(conv);
    free(j);
    assert_fails_fast(path, a, b);
}

Test(vit_bad, config_bomb_refused_before_allocating, .init = td_setup, .fini = td_teardown)
{
    /* ~400 MB of model from a 240-byte file (allocated and zero-filled before). */
    config_bomb(1024, 8, 4096, 0, "the ringvit.config metadata describes a model (dim 1024, 8 "
                "layers, mlp 4096)", "but the weights hold only 0 bytes of tensor data");
    /* The size: 155 GB claimed. */
    config_bomb(8192, 48, 32768, 0, "ringvit.config metadata describes a model (dim 8192, 48",
                "refused before allocating");
    /* A patch weight narrower than the metadata says: its shape is named. */
    config_bomb(1024, 8, 4096, 8, "tensor 'conv_proj.weight' has shape [8, 3, 16, 16]; "
                "expected [1024, 3, 16, 16]", NULL);
    /* The right patch weight alone is far short of the model. */
    config_bomb(1024, 8, 4096, 1024, "describes a model (dim 1024, 8 layers, mlp 4096)",
                "hold only 3145728 bytes");
}

static void write_text(const char *path, const char *text)
{
    write_bytes(path, text, strlen(text));
}

/* A Hugging Face folder whose config.json claims a big model next to a
 * model.safetensors holding only a patch weight of width patch_dim. */
static void hub_bomb(int patch_dim, const char *a, const char *b)
{
    char dir[160], file[200];
    snprintf(dir, sizeof dir, "%s", tpath("hub_bomb"));
    cr_assert(mkdir(dir, 0755) == 0 || errno == EEXIST);
    snprintf(file, sizeof file, "%s/config.json", dir);
    write_text(file, "{\"model_type\": \"vit\", \"hidden_size\": 1024, \"num_hidden_layers\": 8, "
                     "\"num_attention_heads\": 16, \"intermediate_size\": 4096, "
                     "\"image_size\": 224, \"patch_size\": 16}");
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    const int64_t shape[4] = {patch_dim, 3, 16, 16};
    uint16_t *conv = calloc((size_t)patch_dim * 3 * 16 * 16, sizeof *conv);
    rv_st_writer *w = NULL;
    cr_assert_eq(rv_st_writer_new(&w), RV_OK);
    cr_assert_eq(rv_st_writer_add(w, "embeddings.patch_embeddings.projection.weight", RV_BF16, 4,
                                  shape, conv), RV_OK);
    cr_assert_eq(rv_st_writer_write(w, file), RV_OK, "%s", rv_last_error());
    rv_st_writer_free(&w);
    free(conv);
    assert_fails_fast(dir, a, b);
    unlink(file);
    snprintf(file, sizeof file, "%s/config.json", dir);
    unlink(file);
    rmdir(dir);
}

Test(vit_bad, hub_config_bomb_refused_before_allocating, .init = td_setup, .fini = td_teardown)
{
    hub_bomb(1024, "config.json describes a model (dim 1024, 8 layers, mlp 4096)",
             "hold only 1572864 bytes");
    hub_bomb(8, "has shape [8, 3, 16, 16]; expected [1024, 3, 16, 16]", "as config.json says");
}

/* The case: a saved model whose header length is one byte short of its
 * (space-padded) header loaded with every tensor shifted by a byte. */
Test(vit_bad, header_length_one_byte_short, .init = td_setup, .fini = td_teardown)
{
    const char *path = tpath("short.safetensors");
    rv_vit_config c = small_cfg(32, 1, 2, 64, 1, 4, 3, 1);
    rv_vit_model *m = NULL;
    cr_assert_eq(rv_vit_new(&c, &m), RV_OK);
    cr_assert_eq(rv_vit_init_random(m, 3), RV_OK);
    cr_assert_eq(rv_vit_save(m, path), RV_OK, "%s", rv_last_error());
    rv_vit_free(&m);
    FILE *fp = fopen(path, "rb");
    cr_assert_not_null(fp);
    fseek(fp, 0, SEEK_END);
    size_t len = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *b = malloc(len);
    cr_assert_eq(fread(b, 1, len, fp), len);
    fclose(fp);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n |= (uint64_t)b[i] << (8 * i);
    /* Eight more spaces of padding, and a length that stops one short of them. */
    unsigned char *o = malloc(len + 8);
    memcpy(o, b, 8 + n);
    memset(o + 8 + n, ' ', 8);
    memcpy(o + 8 + n + 8, b + 8 + n, len - 8 - n);
    for (int i = 0; i < 8; i++)
        o[i] = (unsigned char)((n + 7) >> (8 * i));
    write_bytes(path, o, len + 8);
    assert_fails(rv_vit_load(path, NULL, &m), RV_ERR_FORMAT, path,
                 "1 trailing byte");
    cr_assert_null(m);
    /* With the right length (n + 8) the same bytes load. */
    for (int i = 0; i < 8; i++)
        o[i] = (unsigned char)((n + 8) >> (8 * i));
    write_bytes(path, o, len + 8);
    cr_assert_eq(rv_vit_load(path, NULL, &m), RV_OK, "%s", rv_last_error());
    rv_vit_free(&m);
    free(o);
    free(b);
}

static void nan_mlp(tv_file *f) { tv_get(f, L0 "mlp.0.weight")->data[5] = NAN; }
static void inf_pos(tv_file *f) { tv_get(f, "encoder.pos_embedding")->data[7] = INFINITY; }
static void neg_inf_bf16_ln(tv_file *f)
{
    tv_entry *e = tv_get(f, "encoder.ln.weight");
    uint16_t *h = (uint16_t *)e->data;
    for (int i = 0; i < 64; i++)
        h[i] = i == 3 ? 0xff80 : 0x3f80; /* -Inf at 3, else 1.0 */
    e->dtype = RV_BF16;
}
static void nan_f16_bias(tv_file *f)
{
    tv_entry *e = tv_get(f, "conv_proj.bias");
    uint16_t *h = (uint16_t *)e->data;
    for (int i = 0; i < 64; i++)
        h[i] = i == 0 ? 0x7e00 : 0x3c00; /* NaN at 0, else 1.0 */
    e->dtype = RV_F16;
}

/* NaN/Inf weights would turn every embedding into NaN: refused at load, naming
 * the tensor and the first bad index. */
Test(vit_bad, non_finite_weights_refused, .init = td_setup, .fini = td_teardown)
{
    bad_tv(nan_mlp, NULL, "tensor '" L0 "mlp.0.weight' holds NaN at index 5");
    bad_tv(inf_pos, NULL, "tensor 'encoder.pos_embedding' holds +Inf at index 7");
    bad_tv(neg_inf_bf16_ln, NULL, "tensor 'encoder.ln.weight' holds -Inf at index 3");
    bad_tv(nan_f16_bias, NULL, "tensor 'conv_proj.bias' holds NaN at index 0");
    /* Finite extremes still load (F32 max, the smallest subnormal). */
    tv_file f;
    const char *path = tpath("extreme.safetensors");
    tv_make(&f, 64, 2, 32, 2, 3, 11);
    tv_get(&f, L1 "mlp.3.weight")->data[0] = 3.4028235e38f;
    tv_get(&f, L1 "mlp.3.weight")->data[1] = 1e-45f;
    tv_write(&f, path, NULL);
    rv_vit_model *m = NULL;
    cr_assert_eq(rv_vit_load(path, NULL, &m), RV_OK, "%s", rv_last_error());
    rv_vit_free(&m);
    tv_free(&f);
}

/* A minimal ViT folder in the Hugging Face layout (D 8, 1 layer, M 16, P 2,
 * grid 2), every value 0.5 but one: nan_at names a tensor whose element 1 is
 * NaN (NULL: none). */
static void write_hub_vit(const char *dir, const char *nan_at)
{
    static const struct {
        const char *name;
        int ndim;
        int64_t s[4];
    } t[] = {
        {"embeddings.cls_token", 3, {1, 1, 8}},
        {"embeddings.position_embeddings", 3, {1, 5, 8}},
        {"embeddings.patch_embeddings.projection.weight", 4, {8, 3, 2, 2}},
        {"embeddings.patch_embeddings.projection.bias", 1, {8}},
        {"encoder.layer.0.layernorm_before.weight", 1, {8}},
        {"encoder.layer.0.layernorm_before.bias", 1, {8}},
        {"encoder.layer.0.attention.attention.query.weight", 2, {8, 8}},
        {"encoder.layer.0.attention.attention.query.bias", 1, {8}},
        {"encoder.layer.0.attention.attention.key.weight", 2, {8, 8}},
        {"encoder.layer.0.attention.attention.key.bias", 1, {8}},
        {"encoder.layer.0.attention.attention.value.weight", 2, {8, 8}},
        {"encoder.layer.0.attention.attention.value.bias", 1, {8}},
        {"encoder.layer.0.attention.output.dense.weight", 2, {8, 8}},
        {"encoder.layer.0.attention.output.dense.bias", 1, {8}},
        {"encoder.layer.0.layernorm_after.weight", 1, {8}},
        {"encoder.layer.0.layernorm_after.bias", 1, {8}},
        {"encoder.layer.0.intermediate.dense.weight", 2, {16, 8}},
        {"encoder.layer.0.intermediate.dense.bias", 1, {16}},
        {"encoder.layer.0.output.dense.weight", 2, {8, 16}},
        {"encoder.layer.0.output.dense.bias", 1, {8}},
        {"layernorm.weight", 1, {8}},
        {"layernorm.bias", 1, {8}},
    };
    const int n = (int)(sizeof t / sizeof t[0]);
    char file[200];
    cr_assert(mkdir(dir, 0755) == 0 || errno == EEXIST);
    snprintf(file, sizeof file, "%s/config.json", dir);
    write_text(file, "{\"model_type\": \"vit\", \"hidden_size\": 8, \"num_hidden_layers\": 1, "
                     "\"num_attention_heads\": 2, \"intermediate_size\": 16, "
                     "\"image_size\": 4, \"patch_size\": 2}");
    float *vals[32];
    rv_st_writer *w = NULL;
    cr_assert_eq(rv_st_writer_new(&w), RV_OK);
    for (int i = 0; i < n; i++) {
        int64_t numel = 1;
        for (int d = 0; d < t[i].ndim; d++)
            numel *= t[i].s[d];
        vals[i] = malloc((size_t)numel * sizeof *vals[i]);
        for (int64_t k = 0; k < numel; k++)
            vals[i][k] = 0.5f;
        if (nan_at && strcmp(nan_at, t[i].name) == 0)
            vals[i][1] = NAN;
        cr_assert_eq(rv_st_writer_add(w, t[i].name, RV_F32, t[i].ndim, t[i].s, vals[i]), RV_OK,
                     "%s", rv_last_error());
    }
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    cr_assert_eq(rv_st_writer_write(w, file), RV_OK, "%s", rv_last_error());
    rv_st_writer_free(&w);
    for (int i = 0; i < n; i++)
        free(vals[i]);
}

static void remove_hub(const char *dir)
{
    char file[200];
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    unlink(file);
    snprintf(file, sizeof file, "%s/config.json", dir);
    unlink(file);
    rmdir(dir);
}

/* The hub reader refuses non-finite weights too (split q/k/v and the patch
 * weight take their own read paths); the same folder without the NaN loads. */
Test(vit_bad, hub_non_finite_weights_refused, .init = td_setup, .fini = td_teardown)
{
    char dir[160];
    snprintf(dir, sizeof dir, "%s", tpath("hub_nan"));
    rv_vit_model *m = NULL;
    write_hub_vit(dir, NULL);
    cr_assert_eq(rv_vit_load(dir, NULL, &m), RV_OK, "%s", rv_last_error());
    rv_vit_free(&m);
    static const char *const names[] = {"encoder.layer.0.attention.attention.key.weight",
                                        "embeddings.patch_embeddings.projection.weight",
                                        "embeddings.position_embeddings"};
    for (int i = 0; i < 3; i++) {
        char want[200];
        write_hub_vit(dir, names[i]);
        snprintf(want, sizeof want, "tensor '%s' holds NaN at index 1", names[i]);
        assert_fails(rv_vit_load(dir, NULL, &m), RV_ERR_FORMAT, want, dir);
        cr_assert_null(m);
    }
    remove_hub(dir);
}
