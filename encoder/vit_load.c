/* vit_load.c: reads an encoder's weights from safetensors (rv_vit_load).
 *
 * The config comes from the "ringvit.config" metadata when present, else from
 * the tensor shapes (a torchvision VisionTransformer file: D and P from
 * conv_proj.weight, layers from the names, M from mlp.0, grid from the
 * pos_embedding length - 1, heads D / 64). Then every tensor of vit_tensors.h is
 * looked up and checked (dtype F32, F16 or BF16; exact shape) before its values
 * are converted into the model: torchvision names are required, ringvit.* ones
 * are zero when absent. A 2D patch weight is inflated to the tubelet asked for
 * (each frame gets weight / T). Every failure is RV_ERR_FORMAT naming the file
 * and the tensor (RV_ERR_INVALID for a request the file cannot meet, such as a
 * head count that does not divide D). Unknown tensors (a classifier head, ...)
 * are ignored with one warning; the training state a checkpoint adds
 * (rv_vit_train.h: optim.*, ringvit.mask_token, ringvit.mae_*, and heads.* in a
 * file ringvit wrote, i.e. one with the config metadata) is known and ignored
 * silently, so a checkpoint loads as a model. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rv_safetensors.h"
#include "rv_vit.h"
#include "vit_tensors.h"

/* Names come from hostile files: cap how much of one goes into a message. */
#define NAME_FMT "%.200s"
/* Largest extent taken from a file before the config check bounds it. */
#define MAX_EXTENT (1 << 24)
#define MAX_LAYER_INDEX 1024

static int dtype_ok(rv_dtype d)
{
    return d == RV_F32 || d == RV_F16 || d == RV_BF16;
}

static void format_shape(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
}

/* The tensor called name; missing is an error naming it. */
static rv_status need(const rv_safetensors *st, const char *name, const rv_st_tensor **out)
{
    *out = rv_st_find(st, name);
    if (!*out)
        return rv_fail(RV_ERR_FORMAT, "weights file '%s': missing tensor '" NAME_FMT "'",
                       rv_st_label(st), name);
    return RV_OK;
}

static rv_status check_dtype(const rv_safetensors *st, const rv_st_tensor *t)
{
    if (!dtype_ok(t->dtype))
        return rv_fail(RV_ERR_FORMAT,
                       "weights file '%s': tensor '" NAME_FMT "' has dtype %s; expected F32 "
                       "(or F16, BF16)",
                       rv_st_label(st), t->name, rv_dtype_name(t->dtype));
    return RV_OK;
}

/* dtype, then the exact shape; why says where the expected shape comes from. */
static rv_status check_tensor(const rv_safetensors *st, const rv_st_tensor *t, int ndim,
                              const int64_t *shape, const char *why)
{
    rv_status s = check_dtype(st, t);
    if (s != RV_OK)
        return s;
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = t->shape[i] == shape[i];
    if (!ok) {
        char got[160], want[160];
        format_shape(got, sizeof got, t->ndim, t->shape);
        format_shape(want, sizeof want, ndim, shape);
        return rv_fail(RV_ERR_FORMAT,
                       "weights file '%s': tensor '" NAME_FMT "' has shape %s; expected %s%s",
                       rv_st_label(st), t->name, got, want, why);
    }
    return RV_OK;
}

/* A size read from a tensor's shape, bounded so it fits an int. */
static rv_status extent(const rv_safetensors *st, const rv_st_tensor *t, int dim, int *out)
{
    int64_t v = t->shape[dim];
    if (v < 1 || v > MAX_EXTENT)
        return rv_fail(RV_ERR_FORMAT,
                       "weights file '%s': tensor '" NAME_FMT "' has extent %" PRId64
                       " in dimension %d (expected 1 .. %d)",
                       rv_st_label(st), t->name, v, dim, MAX_EXTENT);
    *out = (int)v;
    return RV_OK;
}

static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
    if (e == 0x1f) {
        u = sign | 0x7f800000u | (m << 13); /* inf, nan */
    } else if (e != 0) {
        u = sign | ((e + 112) << 23) | (m << 13);
    } else if (m == 0) {
        u = sign;
    } else { /* subnormal: normalise */
        int sh = 0;
        while (!(m & 0x400)) {
            m <<= 1;
            sh++;
        }
        u = sign | ((uint32_t)(113 - sh) << 23) | ((m & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The tensor's values as f32 (data may be unaligned; bytes little-endian). */
static void to_f32(const rv_st_tensor *t, float *out)
{
    const unsigned char *p = t->data;
    if (t->dtype == RV_F32) {
        for (int64_t i = 0; i < t->numel; i++, p += 4) {
            uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                         (uint32_t)p[3] << 24;
            memcpy(&out[i], &u, 4);
        }
    } else {
        for (int64_t i = 0; i < t->numel; i++, p += 2) {
            uint16_t h = (uint16_t)(p[0] | p[1] << 8);
            if (t->dtype == RV_BF16) {
                uint32_t u = (uint32_t)h << 16;
                memcpy(&out[i], &u, 4);
            } else {
                out[i] = half_to_float(h);
            }
        }
    }
}

/* Index of a layer tensor's name ("encoder.layers.encoder_layer_12.ln_1.weight"
 * -> 12), or -1 when name is not of that form (leading zeros are not). */
static long layer_index(const char *name)
{
    size_t n = strlen(VIT_LAYER_PREFIX);
    if (strncmp(name, VIT_LAYER_PREFIX, n) != 0)
        return -1;
    const char *p = name + n;
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] != '.'))
        return -1;
    long v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        v = v * 10 + (*p - '0');
        if (v > 100000000L)
            return -1;
    }
    return *p == '.' ? v : -1;
}

/* Layers named in the file: *count = highest index + 1; a gap is an error. */
static rv_status scan_layers(const rv_safetensors *st, int *count)
{
    rv_status s = RV_OK;
    unsigned char *seen = calloc(MAX_LAYER_INDEX, 1);
    long top = -1;
    if (!seen)
        return rv_fail(RV_ERR_NOMEM, "loading '%s': out of memory", rv_st_label(st));
    for (int i = 0; i < rv_st_count(st); i++) {
        const char *name = rv_st_at(st, i)->name;
        long k = layer_index(name);
        if (k < 0)
            continue;
        if (k >= MAX_LAYER_INDEX) {
            s = rv_fail(RV_ERR_FORMAT,
                        "weights file '%s': tensor '" NAME_FMT "' names layer %ld; at most %d "
                        "layers are supported",
                        rv_st_label(st), name, k, MAX_LAYER_INDEX);
            goto end;
        }
        seen[k] = 1;
        if (k > top)
            top = k;
    }
    for (long k = 0; k < top; k++)
        if (!seen[k]) {
            s = rv_fail(RV_ERR_FORMAT,
                        "weights file '%s': layer %ld is missing (layers up to %ld are "
                        "present): no tensor '" VIT_LAYER_PREFIX "%ld.ln_1.weight'",
                        rv_st_label(st), k, top, k);
            goto end;
        }
    *count = (int)(top + 1);
end:
    free(seen);
    return s;
}

/* The config of a file without metadata, from its tensor shapes. */
static rv_status config_from_shapes(const rv_safetensors *st, const rv_st_tensor *video,
                                    int layers, int heads, rv_vit_config *c)
{
    rv_status s = RV_OK;
    const char *lb = rv_st_label(st);
    const rv_st_tensor *t;
    memset(c, 0, sizeof *c);
    snprintf(c->preset, sizeof c->preset, "custom");
    c->eps = 1e-6f;
    c->cls = 1;
    c->tubelet = 1;
    if ((s = extent(st, video, 0, &c->dim)) != RV_OK ||
        (s = extent(st, video, video->ndim - 1, &c->patch)) != RV_OK)
        return s;
    if (video->ndim == 5 && (s = extent(st, video, 2, &c->tubelet)) != RV_OK)
        return s;
    if (layers < 1)
        return rv_fail(RV_ERR_FORMAT, "weights file '%s': missing tensor '" VIT_LAYER_PREFIX
                                      "0.ln_1.weight' (no encoder layers)",
                       lb);
    c->layers = layers;
    if ((s = need(st, VIT_LAYER_PREFIX "0.mlp.0.weight", &t)) != RV_OK ||
        (s = check_dtype(st, t)) != RV_OK)
        return s;
    if (t->ndim != 2)
        return rv_fail(RV_ERR_FORMAT,
                       "weights file '%s': tensor '%s' has %d dimensions; expected 2 (M, D)",
                       lb, t->name, t->ndim);
    if ((s = extent(st, t, 0, &c->mlp)) != RV_OK)
        return s;
    if ((s = need(st, "encoder.pos_embedding", &t)) != RV_OK ||
        (s = check_dtype(st, t)) != RV_OK)
        return s;
    if (t->ndim != 3 || t->shape[1] < 2 || t->shape[1] > MAX_EXTENT)
        return rv_fail(RV_ERR_FORMAT,
                       "weights file '%s': tensor 'encoder.pos_embedding' must be (1, 1 + "
                       "grid*grid, D), with at least one patch position",
                       lb);
    int64_t n = t->shape[1] - 1, g = 0;
    while ((g + 1) * (g + 1) <= n)
        g++;
    if (g * g != n)
        return rv_fail(RV_ERR_FORMAT,
                       "weights file '%s': tensor 'encoder.pos_embedding' holds %" PRId64
                       " positions after the CLS slot, which is not a square grid",
                       lb, n);
    c->grid = (int)g;
    c->audio_freq = 16;
    c->audio_time = 16;
    t = rv_st_find(st, "ringvit.audio_proj.weight");
    if (t) {
        if ((s = check_dtype(st, t)) != RV_OK)
            return s;
        if (t->ndim != 4 || t->shape[1] != 1)
            return rv_fail(RV_ERR_FORMAT,
                           "weights file '%s': tensor 'ringvit.audio_proj.weight' must be "
                           "(D, 1, F, W)",
                           lb);
        if ((s = extent(st, t, 2, &c->audio_freq)) != RV_OK ||
            (s = extent(st, t, 3, &c->audio_time)) != RV_OK)
            return s;
    }
    if (heads > 0) {
        c->heads = heads;
    } else {
        if (c->dim % 64 != 0)
            return rv_fail(RV_ERR_INVALID,
                           "weights file '%s' has no ringvit.config metadata and its width D "
                           "%d is not a multiple of 64, so the head count (D / 64 by "
                           "default) is unknown: give it (--heads H)",
                           lb, c->dim);
        c->heads = c->dim / 64;
    }
    /* Name a preset only when every size is the preset's. */
    static const char *const presets[] = {"tiny", "small", "base"};
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        rv_vit_config p;
        if (rv_vit_preset(presets[i], &p) != RV_OK)
            continue;
        memcpy(p.preset, c->preset, sizeof p.preset);
        if (p.dim == c->dim && p.layers == c->layers && p.heads == c->heads &&
            p.mlp == c->mlp && p.tubelet == c->tubelet && p.patch == c->patch &&
            p.grid == c->grid && p.audio_freq == c->audio_freq &&
            p.audio_time == c->audio_time && p.cls == c->cls)
            snprintf(c->preset, sizeof c->preset, "%s", presets[i]);
    }
    return RV_OK;
}

/* 1 for a tensor of a training checkpoint that is not part of the encoder
 * (rv_vit_train.h). heads.* counts only in a file ringvit wrote (ringvit_file):
 * in a torchvision file it is the image classifier, worth a warning. */
static int training_state(const char *name, int ringvit_file)
{
    return strncmp(name, "optim.", 6) == 0 || strcmp(name, "ringvit.mask_token") == 0 ||
           strncmp(name, "ringvit.mae_", 12) == 0 ||
           (ringvit_file && strncmp(name, "heads.", 6) == 0);
}

/* Copies the checked file tensor t into entry e of the model. */
static rv_status read_tensor(const rv_st_tensor *t, const vit_tensor *e,
                             const rv_vit_config *c, int file_T, const char *lb)
{
    if (e->layout == VIT_PLAIN) {
        to_f32(t, e->data);
        return RV_OK;
    }
    float *file = malloc((size_t)t->numel * sizeof *file);
    if (!file)
        return rv_fail(RV_ERR_NOMEM, "loading '%s': out of memory for '%s'", lb, t->name);
    to_f32(t, file);
    if (file_T == c->tubelet) {
        vit_video_from_file(file, c->dim, c->tubelet, c->patch, e->data);
    } else {
        /* Inflation: the 2D (D, 3, P, P) weight, / T, in each of the T frames. */
        const int T = c->tubelet, P = c->patch, C = RV_VIT_CHANNELS;
        const int64_t per_file = (int64_t)C * P * P, per_mem = (int64_t)T * P * P * C;
        for (int64_t d = 0; d < c->dim; d++)
            for (int ch = 0; ch < C; ch++)
                for (int y = 0; y < P; y++)
                    for (int x = 0; x < P; x++) {
                        float v = file[d * per_file + ((int64_t)ch * P + y) * P + x] / (float)T;
                        for (int tt = 0; tt < T; tt++)
                            e->data[d * per_mem + (((int64_t)tt * P + y) * P + x) * C + ch] = v;
                    }
    }
    free(file);
    return RV_OK;
}

rv_status rv_vit_load(const char *path, const rv_vit_load_opts *opts, rv_vit_model **out)
{
    rv_status s = RV_OK;
    rv_safetensors *st = NULL;
    rv_vit_model *m = NULL;
    vit_tensor *list = NULL;
    unsigned char *used = NULL; /* (file tensors) 1: read into the model */
    if (!out) {
        s = rv_fail(RV_ERR_INVALID, "rv_vit_load: out is NULL");
        goto end;
    }
    *out = NULL;
    if (!path) {
        s = rv_fail(RV_ERR_INVALID, "rv_vit_load: path is NULL");
        goto end;
    }
    const int want_heads = opts && opts->heads > 0 ? opts->heads : 0;
    const int want_T = opts && opts->tubelet > 0 ? opts->tubelet : 0;
    if ((s = rv_st_open(path, &st)) != RV_OK)
        goto end;
    const char *lb = rv_st_label(st);

    /* The patch weight: 2D (torchvision's) or the tubelet one, not both. */
    const rv_st_tensor *v2 = rv_st_find(st, VIT_VIDEO_2D), *v3 = rv_st_find(st, VIT_VIDEO_3D);
    const rv_st_tensor *video = v2 ? v2 : v3;
    if (v2 && v3) {
        s = rv_fail(RV_ERR_FORMAT,
                    "weights file '%s' holds both '" VIT_VIDEO_2D "' and '" VIT_VIDEO_3D
                    "'; which patch weight to use is ambiguous",
                    lb);
        goto end;
    }
    if (!video) {
        s = rv_fail(RV_ERR_FORMAT,
                    "weights file '%s': missing tensor '" VIT_VIDEO_2D "' (or '" VIT_VIDEO_3D
                    "')",
                    lb);
        goto end;
    }
    if ((s = check_dtype(st, video)) != RV_OK)
        goto end;
    if (v2 ? (v2->ndim != 4 || v2->shape[1] != RV_VIT_CHANNELS || v2->shape[2] != v2->shape[3])
           : (v3->ndim != 5 || v3->shape[1] != RV_VIT_CHANNELS || v3->shape[3] != v3->shape[4])) {
        char got[160];
        format_shape(got, sizeof got, video->ndim, video->shape);
        s = rv_fail(RV_ERR_FORMAT, "weights file '%s': tensor '%s' has shape %s; expected %s", lb,
                    video->name, got, v2 ? "(D, 3, P, P)" : "(D, 3, T, P, P)");
        goto end;
    }
    int file_T = 1;
    if (v3 && (s = extent(st, v3, 2, &file_T)) != RV_OK)
        goto end;

    int layers = 0;
    if ((s = scan_layers(st, &layers)) != RV_OK)
        goto end;

    rv_vit_config c;
    const char *meta = rv_st_meta(st, RV_VIT_META_CONFIG);
    const char *why = "";
    if (meta) {
        why = " (as the ringvit.config metadata says)";
        if ((s = rv_vit_config_from_json(meta, &c)) != RV_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", rv_last_error());
            s = rv_fail(RV_ERR_FORMAT, "weights file '%s': metadata '%s': %s", lb,
                        RV_VIT_META_CONFIG, msg);
            goto end;
        }
        if (c.tubelet != file_T) {
            s = rv_fail(RV_ERR_FORMAT,
                        "weights file '%s': tensor '%s' holds tubelet %d, but the %s metadata "
                        "says tubelet %d",
                        lb, video->name, file_T, RV_VIT_META_CONFIG, c.tubelet);
            goto end;
        }
        if (layers > c.layers) {
            s = rv_fail(RV_ERR_FORMAT,
                        "weights file '%s': tensor '" VIT_LAYER_PREFIX "%d.*' is beyond the %d "
                        "layer%s the %s metadata says",
                        lb, layers - 1, c.layers, c.layers == 1 ? "" : "s", RV_VIT_META_CONFIG);
            goto end;
        }
        if (want_heads)
            c.heads = want_heads;
    } else {
        if ((s = config_from_shapes(st, video, layers, want_heads, &c)) != RV_OK)
            goto end;
    }
    if (want_heads && c.dim % want_heads != 0) {
        s = rv_fail(RV_ERR_INVALID, "head count %d does not divide the width D %d of '%s'",
                    want_heads, c.dim, lb);
        goto end;
    }
    if (want_T && want_T != c.tubelet) {
        if (c.tubelet != 1) {
            s = rv_fail(RV_ERR_INVALID,
                        "weights file '%s' holds tubelet %d weights ('%s'); tubelet %d was "
                        "asked for (only a 2D patch weight can be inflated)",
                        lb, c.tubelet, video->name, want_T);
            goto end;
        }
        c.tubelet = want_T; /* inflated below */
    }
    if ((s = rv_vit_config_check(&c)) != RV_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", rv_last_error());
        s = rv_fail(want_T ? s : RV_ERR_FORMAT, /* sizes read from the file */
                    "weights file '%s': %s", lb, msg);
        goto end;
    }
    if ((s = rv_vit_new(&c, &m)) != RV_OK)
        goto end;
    int n = vit_tensor_count(&c);
    list = malloc((size_t)n * sizeof *list);
    used = calloc((size_t)rv_st_count(st) + 1, 1);
    if (!list || !used) {
        s = rv_fail(RV_ERR_NOMEM, "loading '%s': out of memory", lb);
        goto end;
    }
    vit_tensor_list(m, list);
    for (int i = 0; i < n; i++) {
        vit_tensor *e = &list[i];
        const char *name = e->name;
        int ndim = e->ndim;
        int64_t shape[5];
        memcpy(shape, e->shape, sizeof shape);
        if (e->layout == VIT_VIDEO) {
            /* The file's own name and tubelet (before any inflation). */
            name = video->name;
            ndim = file_T == 1 && v2 ? 4 : 5;
            int64_t s4[4] = {c.dim, RV_VIT_CHANNELS, c.patch, c.patch};
            int64_t s5[5] = {c.dim, RV_VIT_CHANNELS, file_T, c.patch, c.patch};
            memcpy(shape, ndim == 4 ? s4 : s5, (size_t)ndim * sizeof *shape);
        }
        const rv_st_tensor *t = rv_st_find(st, name);
        if (!t) {
            if (e->torchvision) {
                s = rv_fail(RV_ERR_FORMAT, "weights file '%s': missing tensor '%s'", lb, name);
                goto end;
            }
            continue; /* ringvit.*: zero */
        }
        if ((s = check_tensor(st, t, ndim, shape, why)) != RV_OK ||
            (s = read_tensor(t, e, &c, file_T, lb)) != RV_OK)
            goto end;
        for (int k = 0; k < rv_st_count(st); k++)
            if (rv_st_at(st, k) == t)
                used[k] = 1;
    }
    int unknown = 0;
    const char *first = NULL;
    for (int k = 0; k < rv_st_count(st); k++)
        if (!used[k] && !training_state(rv_st_at(st, k)->name, meta != NULL)) {
            if (!first)
                first = rv_st_at(st, k)->name;
            unknown++;
        }
    if (unknown)
        rv_log(RV_LOG_WARN, "weights file '%s': ignoring %d unknown tensor%s (first: '" NAME_FMT
               "')", lb, unknown, unknown == 1 ? "" : "s", first);
    *out = m;
    m = NULL;
end:
    free(used);
    free(list);
    rv_vit_free(&m);
    rv_st_free(&st);
    return s;
}
