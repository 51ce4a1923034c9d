/* vit_model.c: an encoder's weights in memory (rv_vit.h): one arena holding
 * every tensor, the pointers into it, the tensor list shared by load and save
 * (vit_tensors.h), the parameter count and the model hash.
 *
 * Arena order (no padding, so the parameter count is the arena length):
 * video_w, video_b, audio_w, audio_b, cls, pos, band, time_w, modality, then per
 * layer ln1 w/b, qkv w/b, proj w/b, ln2 w/b, fc1 w/b, fc2 w/b, then ln w/b. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rv_vit.h"
#include "vit_tensors.h"

#define ARENA_ALIGN 64

int vit_tensor_count(const rv_vit_config *c)
{
    return 9 + 12 * c->layers + 2;
}

/* Records one tensor in t[*n] (or only counts it when t is NULL) and returns
 * its length; the shape is given as up to 5 extents (ndim of them used). */
static int64_t add(vit_tensor *t, int *n, float *at, const char *name, vit_layout layout,
                   int torchvision, int ndim, int64_t s0, int64_t s1, int64_t s2, int64_t s3,
                   int64_t s4)
{
    const int64_t s[5] = {s0, s1, s2, s3, s4};
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++)
        numel *= s[i];
    if (t) {
        vit_tensor *e = &t[*n];
        memset(e, 0, sizeof *e);
        snprintf(e->name, sizeof e->name, "%s", name);
        e->data = at;
        e->ndim = ndim;
        for (int i = 0; i < ndim; i++)
            e->shape[i] = s[i];
        e->numel = numel;
        e->layout = layout;
        e->torchvision = torchvision;
    }
    (*n)++;
    return numel;
}

/* Walks the arena layout of config c starting at base (may be NULL): fills t
 * (vit_tensor_count entries) when given, and returns the floats used. */
static int64_t walk(const rv_vit_config *c, float *base, vit_tensor *t)
{
    const int64_t D = c->dim, M = c->mlp, T = c->tubelet, P = c->patch;
    const int64_t F = c->audio_freq, W = c->audio_time, G = c->grid;
    const int64_t bands = RV_VIT_MEL_BINS / c->audio_freq;
    int n = 0;
    int64_t off = 0;
    char name[VIT_NAME_MAX];
#define AT (base ? base + off : NULL)
    if (T == 1)
        off += add(t, &n, AT, VIT_VIDEO_2D, VIT_VIDEO, 1, 4, D, 3, P, P, 0);
    else
        off += add(t, &n, AT, VIT_VIDEO_3D, VIT_VIDEO, 0, 5, D, 3, T, P, P);
    off += add(t, &n, AT, "conv_proj.bias", VIT_PLAIN, 1, 1, D, 0, 0, 0, 0);
    off += add(t, &n, AT, "ringvit.audio_proj.weight", VIT_PLAIN, 0, 4, D, 1, F, W, 0);
    off += add(t, &n, AT, "ringvit.audio_proj.bias", VIT_PLAIN, 0, 1, D, 0, 0, 0, 0);
    off += add(t, &n, AT, "class_token", VIT_PLAIN, 1, 3, 1, 1, D, 0, 0);
    off += add(t, &n, AT, "encoder.pos_embedding", VIT_PLAIN, 1, 3, 1, 1 + G * G, D, 0, 0);
    off += add(t, &n, AT, "ringvit.audio_band", VIT_PLAIN, 0, 2, bands, D, 0, 0, 0);
    off += add(t, &n, AT, "ringvit.time_proj.weight", VIT_PLAIN, 0, 2, D, D, 0, 0, 0);
    off += add(t, &n, AT, "ringvit.modality", VIT_PLAIN, 0, 2, 3, D, 0, 0, 0);
    static const struct {
        const char *suffix;
        char rows, cols; /* 'D', 'M', '3' (3D), 0 (1D) */
    } lt[12] = {
        {"ln_1.weight", 'D', 0},
        {"ln_1.bias", 'D', 0},
        {"self_attention.in_proj_weight", '3', 'D'},
        {"self_attention.in_proj_bias", '3', 0},
        {"self_attention.out_proj.weight", 'D', 'D'},
        {"self_attention.out_proj.bias", 'D', 0},
        {"ln_2.weight", 'D', 0},
        {"ln_2.bias", 'D', 0},
        {"mlp.0.weight", 'M', 'D'},
        {"mlp.0.bias", 'M', 0},
        {"mlp.3.weight", 'D', 'M'},
        {"mlp.3.bias", 'D', 0},
    };
    for (int i = 0; i < c->layers; i++)
        for (int k = 0; k < 12; k++) {
            int64_t r = lt[k].rows == 'D' ? D : lt[k].rows == 'M' ? M : 3 * D;
            int64_t cl = lt[k].cols == 'D' ? D : M;
            snprintf(name, sizeof name, VIT_LAYER_PREFIX "%d.%s", i, lt[k].suffix);
            if (lt[k].cols)
                off += add(t, &n, AT, name, VIT_PLAIN, 1, 2, r, cl, 0, 0, 0);
            else
                off += add(t, &n, AT, name, VIT_PLAIN, 1, 1, r, 0, 0, 0, 0);
        }
    off += add(t, &n, AT, "encoder.ln.weight", VIT_PLAIN, 1, 1, D, 0, 0, 0, 0);
    off += add(t, &n, AT, "encoder.ln.bias", VIT_PLAIN, 1, 1, D, 0, 0, 0, 0);
#undef AT
    return off;
}

void vit_tensor_list(const rv_vit_model *m, vit_tensor *t)
{
    walk(&m->cfg, m->arena, t);
}

void vit_video_to_file(const float *mem, int dim, int T, int P, float *file)
{
    const int64_t per = (int64_t)T * P * P * RV_VIT_CHANNELS;
    for (int64_t d = 0; d < dim; d++)
        for (int c = 0; c < RV_VIT_CHANNELS; c++)
            for (int t = 0; t < T; t++)
                for (int y = 0; y < P; y++)
                    for (int x = 0; x < P; x++)
                        file[d * per + (((int64_t)c * T + t) * P + y) * P + x] =
                            mem[d * per + (((int64_t)t * P + y) * P + x) * RV_VIT_CHANNELS + c];
}

void vit_video_from_file(const float *file, int dim, int T, int P, float *mem)
{
    const int64_t per = (int64_t)T * P * P * RV_VIT_CHANNELS;
    for (int64_t d = 0; d < dim; d++)
        for (int c = 0; c < RV_VIT_CHANNELS; c++)
            for (int t = 0; t < T; t++)
                for (int y = 0; y < P; y++)
                    for (int x = 0; x < P; x++)
                        mem[d * per + (((int64_t)t * P + y) * P + x) * RV_VIT_CHANNELS + c] =
                            file[d * per + (((int64_t)c * T + t) * P + y) * P + x];
}

rv_status rv_vit_new(const rv_vit_config *c, rv_vit_model **out)
{
    rv_status s = RV_OK;
    rv_vit_model *m = NULL;
    vit_tensor *list = NULL;
    if (!out)
        return rv_fail(RV_ERR_INVALID, "rv_vit_new: out is NULL");
    *out = NULL;
    if ((s = rv_vit_config_check(c)) != RV_OK)
        return s;
    int64_t floats = walk(c, NULL, NULL);
    if ((uint64_t)floats > (SIZE_MAX - ARENA_ALIGN) / sizeof(float)) {
        s = rv_fail(RV_ERR_NOMEM, "vit model of %lld parameters does not fit in memory",
                    (long long)floats);
        goto end;
    }
    m = calloc(1, sizeof *m);
    if (!m) {
        s = rv_fail(RV_ERR_NOMEM, "vit model: out of memory");
        goto end;
    }
    m->cfg = *c;
    m->arena_floats = (size_t)floats;
    size_t bytes = (m->arena_floats * sizeof(float) + ARENA_ALIGN - 1) / ARENA_ALIGN *
                   ARENA_ALIGN;
    m->arena = aligned_alloc(ARENA_ALIGN, bytes);
    m->layer = calloc((size_t)c->layers, sizeof *m->layer);
    list = malloc((size_t)vit_tensor_count(c) * sizeof *list);
    if (!m->arena || !m->layer || !list) {
        s = rv_fail(RV_ERR_NOMEM, "vit model: out of memory for %lld parameters (%.1f MiB)",
                    (long long)floats, (double)bytes / (1 << 20));
        goto end;
    }
    memset(m->arena, 0, bytes);
    walk(c, m->arena, list);
    /* The list is in arena order (see the top of this file). */
    m->video_w = list[0].data;
    m->video_b = list[1].data;
    m->audio_w = list[2].data;
    m->audio_b = list[3].data;
    m->cls = list[4].data;
    m->pos = list[5].data;
    m->band = list[6].data;
    m->time_w = list[7].data;
    m->modality = list[8].data;
    for (int i = 0; i < c->layers; i++) {
        const vit_tensor *e = &list[9 + 12 * i];
        rv_vit_layer *ly = &m->layer[i];
        ly->ln1_w = e[0].data;
        ly->ln1_b = e[1].data;
        ly->qkv_w = e[2].data;
        ly->qkv_b = e[3].data;
        ly->proj_w = e[4].data;
        ly->proj_b = e[5].data;
        ly->ln2_w = e[6].data;
        ly->ln2_b = e[7].data;
        ly->fc1_w = e[8].data;
        ly->fc1_b = e[9].data;
        ly->fc2_w = e[10].data;
        ly->fc2_b = e[11].data;
    }
    m->ln_w = list[9 + 12 * c->layers].data;
    m->ln_b = list[10 + 12 * c->layers].data;
    const size_t D = (size_t)c->dim;
    for (int i = 0; i < c->layers; i++)
        for (size_t j = 0; j < D; j++)
            m->layer[i].ln1_w[j] = m->layer[i].ln2_w[j] = 1.0f;
    for (size_t j = 0; j < D; j++)
        m->ln_w[j] = 1.0f;
    *out = m;
    m = NULL;
end:
    free(list);
    rv_vit_free(&m);
    return s;
}

int64_t rv_vit_params(const rv_vit_model *m)
{
    return m ? (int64_t)m->arena_floats : 0;
}

void rv_vit_hash(const rv_vit_model *m, char out[17])
{
    uint64_t h = 0xcbf29ce484222325ull;
    const uint64_t prime = 0x100000001b3ull;
    if (m) {
        char *json = rv_vit_config_to_json(&m->cfg);
        if (json)
            for (const unsigned char *p = (const unsigned char *)json; *p; p++)
                h = (h ^ *p) * prime;
        free(json);
        /* Bytes little-endian whatever the host, so the hash names the weights. */
        for (size_t i = 0; i < m->arena_floats; i++) {
            uint32_t u;
            memcpy(&u, &m->arena[i], 4);
            for (int b = 0; b < 4; b++)
                h = (h ^ ((u >> (8 * b)) & 0xffu)) * prime;
        }
    }
    snprintf(out, 17, "%016llx", (unsigned long long)h);
}

void rv_vit_free(rv_vit_model **pm)
{
    if (!pm || !*pm)
        return;
    rv_vit_model *m = *pm;
    free(m->arena);
    free(m->layer);
    free(m);
    *pm = NULL;
}
