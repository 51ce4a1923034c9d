/* vit_model.c: an encoder's weights in memory (rv_vit.h): one arena holding
 * every tensor the config's family has, the pointers into it, the tensor list
 * shared by load and save (vit_tensors.h), the parameter count and the model
 * hash.
 *
 * Arena order (no padding, so the parameter count is the arena length), each
 * tensor only where the family has it: video_w, video_b, audio_w, audio_b, cls,
 * pos, band, time_w, modality, audio_pos, pre_ln w/b, then per layer ln1 w/b,
 * qkv w/b, proj w/b, ln2 w/b, fc1 w/b, fc2 w/b, ls1, ls2, then ln w/b, pool_ln
 * w/b, pooler w/b, proj, head w/b, head_ln w/b. ringvit's own models have the
 * first nine, the layers without layer scale and the final norm: the order their
 * checkpoints (and the optimizer moments laid out over the arena) have always
 * had; a classifier head comes last, so a model without one keeps that layout.
 * The head's labels live beside the arena (vit_labels.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rv_vit.h"
#include "vit_internal.h"
#include "vit_tensors.h"

#define ARENA_ALIGN 64

/* Records one tensor in t[*n] (or only counts it when t is NULL) and returns
 * its length; the shape is given as up to 5 extents (ndim of them used). */
static int64_t add(vit_tensor *t, int *n, float *at, const char *name, vit_layout layout,
                   int torchvision, vit_role role, int layer, int ndim, int64_t s0, int64_t s1,
                   int64_t s2, int64_t s3, int64_t s4)
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
        e->role = role;
        e->layer = layer;
    }
    (*n)++;
    return numel;
}

/* Walks the arena layout of config c starting at base (may be NULL): fills t
 * when given, counts the entries in *count, and returns the floats used. */
static int64_t walk(const rv_vit_config *c, float *base, vit_tensor *t, int *count)
{
    const int64_t D = c->dim, M = c->mlp, T = c->tubelet, P = c->patch;
    const int64_t F = c->audio_freq, W = c->audio_time;
    const int64_t bands = rv_vit_bands(c), rows = rv_vit_pos_rows(c);
    const int ringvit = c->family == RV_FAMILY_RINGVIT;
    int n = 0;
    int64_t off = 0;
    char name[VIT_NAME_MAX];
#define AT (base ? base + off : NULL)
#define ADD(nm, lay, tv, role, layer, nd, a, b, cc, d, e) \
    (off += add(t, &n, AT, nm, lay, tv, role, layer, nd, a, b, cc, d, e))
    if (c->video) {
        if (T == 1)
            ADD(VIT_VIDEO_2D, VIT_VIDEO, 1, VR_VIDEO_W, -1, 4, D, 3, P, P, 0);
        else
            ADD(VIT_VIDEO_3D, VIT_VIDEO, 0, VR_VIDEO_W, -1, 5, D, 3, T, P, P);
        if (c->patch_bias)
            ADD("conv_proj.bias", VIT_PLAIN, 1, VR_VIDEO_B, -1, 1, D, 0, 0, 0, 0);
    }
    /* ringvit's own models always carry the audio tensors (zero in a torchvision
     * file), so a finetune can learn them. */
    if (c->audio || ringvit) {
        ADD("ringvit.audio_proj.weight", VIT_PLAIN, 0, VR_AUDIO_W, -1, 4, D, 1, F, W, 0);
        ADD("ringvit.audio_proj.bias", VIT_PLAIN, 0, VR_AUDIO_B, -1, 1, D, 0, 0, 0, 0);
    }
    /* ringvit's own table has torchvision's class token even without a CLS in
     * the sequence (files written before special tokens were counted have it). */
    if (c->cls || ringvit)
        ADD("class_token", VIT_PLAIN, 1, VR_CLS, -1, 3, 1, c->cls > 1 ? c->cls : 1, D, 0, 0);
    if (rows > 0)
        ADD("encoder.pos_embedding", VIT_PLAIN, 1, VR_POS, -1, 3, 1, rows, D, 0, 0);
    if (c->audio_pos == RV_APOS_BAND)
        ADD("ringvit.audio_band", VIT_PLAIN, 0, VR_BAND, -1, 2, bands, D, 0, 0, 0);
    if (c->time_code) {
        ADD("ringvit.time_proj.weight", VIT_PLAIN, 0, VR_TIME_W, -1, 2, D, D, 0, 0, 0);
        ADD("ringvit.modality", VIT_PLAIN, 0, VR_MODALITY, -1, 2, 3, D, 0, 0, 0);
    }
    if (c->audio_pos == RV_APOS_GRID)
        ADD("ringvit.audio_pos", VIT_PLAIN, 0, VR_AUDIO_POS, -1, 2, bands * c->audio_grid_t, D,
            0, 0, 0);
    if (c->pre_norm) {
        ADD("ringvit.pre_ln.weight", VIT_PLAIN, 0, VR_PRE_LN_W, -1, 1, D, 0, 0, 0, 0);
        ADD("ringvit.pre_ln.bias", VIT_PLAIN, 0, VR_PRE_LN_B, -1, 1, D, 0, 0, 0, 0);
    }
    static const struct {
        const char *suffix;
        char rows, cols; /* 'D', 'M', '3' (3D), 0 (1D) */
        vit_role role;
    } lt[14] = {
        {"ln_1.weight", 'D', 0, VR_LN1_W},
        {"ln_1.bias", 'D', 0, VR_LN1_B},
        {"self_attention.in_proj_weight", '3', 'D', VR_QKV_W},
        {"self_attention.in_proj_bias", '3', 0, VR_QKV_B},
        {"self_attention.out_proj.weight", 'D', 'D', VR_PROJ_W},
        {"self_attention.out_proj.bias", 'D', 0, VR_PROJ_B},
        {"ln_2.weight", 'D', 0, VR_LN2_W},
        {"ln_2.bias", 'D', 0, VR_LN2_B},
        {"mlp.0.weight", 'M', 'D', VR_FC1_W},
        {"mlp.0.bias", 'M', 0, VR_FC1_B},
        {"mlp.3.weight", 'D', 'M', VR_FC2_W},
        {"mlp.3.bias", 'D', 0, VR_FC2_B},
        {"layer_scale_1", 'D', 0, VR_LS1},
        {"layer_scale_2", 'D', 0, VR_LS2},
    };
    for (int i = 0; i < c->layers; i++)
        for (int k = 0; k < 14; k++) {
            if (lt[k].role == VR_QKV_B && !c->qkv_bias)
                continue;
            if ((lt[k].role == VR_LS1 || lt[k].role == VR_LS2) && !c->layer_scale)
                continue;
            int64_t r = lt[k].rows == 'D' ? D : lt[k].rows == 'M' ? M : 3 * D;
            int64_t cl = lt[k].cols == 'D' ? D : M;
            int tv = lt[k].role != VR_LS1 && lt[k].role != VR_LS2;
            snprintf(name, sizeof name, VIT_LAYER_PREFIX "%d.%s", i, lt[k].suffix);
            if (lt[k].cols)
                ADD(name, VIT_PLAIN, tv, lt[k].role, i, 2, r, cl, 0, 0, 0);
            else
                ADD(name, VIT_PLAIN, tv, lt[k].role, i, 1, r, 0, 0, 0, 0);
        }
    if (c->final_norm) {
        ADD("encoder.ln.weight", VIT_PLAIN, 1, VR_LN_W, -1, 1, D, 0, 0, 0, 0);
        ADD("encoder.ln.bias", VIT_PLAIN, 1, VR_LN_B, -1, 1, D, 0, 0, 0, 0);
    }
    if (c->pool == RV_POOL_MEAN_NORM || c->pool == RV_POOL_CLS_NORM) {
        ADD("ringvit.pool_ln.weight", VIT_PLAIN, 0, VR_POOL_LN_W, -1, 1, D, 0, 0, 0, 0);
        ADD("ringvit.pool_ln.bias", VIT_PLAIN, 0, VR_POOL_LN_B, -1, 1, D, 0, 0, 0, 0);
    }
    if (c->pool == RV_POOL_CLS_TANH) {
        ADD("ringvit.pooler.weight", VIT_PLAIN, 0, VR_POOLER_W, -1, 2, D, D, 0, 0, 0);
        ADD("ringvit.pooler.bias", VIT_PLAIN, 0, VR_POOLER_B, -1, 1, D, 0, 0, 0, 0);
    }
    if (c->proj_dim > 0)
        ADD("ringvit.projection.weight", VIT_PLAIN, 0, VR_PROJ_OUT, -1, 2, c->proj_dim, D, 0, 0,
            0);
    if (c->head != RV_HEAD_NONE) {
        ADD("ringvit.head.weight", VIT_PLAIN, 0, VR_HEAD_W, -1, 2, c->classes, rv_vit_head_in(c),
            0, 0, 0);
        ADD("ringvit.head.bias", VIT_PLAIN, 0, VR_HEAD_B, -1, 1, c->classes, 0, 0, 0, 0);
    }
    if (c->head == RV_HEAD_CLS_DIST_NORM) {
        ADD("ringvit.head_ln.weight", VIT_PLAIN, 0, VR_HEAD_LN_W, -1, 1, D, 0, 0, 0, 0);
        ADD("ringvit.head_ln.bias", VIT_PLAIN, 0, VR_HEAD_LN_B, -1, 1, D, 0, 0, 0, 0);
    }
#undef ADD
#undef AT
    if (count)
        *count = n;
    return off;
}

int vit_is_head_role(vit_role r)
{
    return r == VR_HEAD_W || r == VR_HEAD_B || r == VR_HEAD_LN_W || r == VR_HEAD_LN_B;
}

int vit_tensor_count(const rv_vit_config *c)
{
    int n = 0;
    walk(c, NULL, NULL, &n);
    return n;
}

void vit_tensor_list(const rv_vit_model *m, vit_tensor *t)
{
    walk(&m->cfg, m->arena, t, NULL);
}

float **vit_slot(rv_vit_model *m, vit_role role, int layer)
{
    rv_vit_layer *ly = layer >= 0 && layer < m->cfg.layers ? &m->layer[layer] : NULL;
    switch (role) {
    case VR_VIDEO_W: return &m->video_w;
    case VR_VIDEO_B: return &m->video_b;
    case VR_AUDIO_W: return &m->audio_w;
    case VR_AUDIO_B: return &m->audio_b;
    case VR_CLS: return &m->cls;
    case VR_POS: return &m->pos;
    case VR_BAND: return &m->band;
    case VR_TIME_W: return &m->time_w;
    case VR_MODALITY: return &m->modality;
    case VR_AUDIO_POS: return &m->audio_pos;
    case VR_PRE_LN_W: return &m->pre_ln_w;
    case VR_PRE_LN_B: return &m->pre_ln_b;
    case VR_LN_W: return &m->ln_w;
    case VR_LN_B: return &m->ln_b;
    case VR_POOL_LN_W: return &m->pool_ln_w;
    case VR_POOL_LN_B: return &m->pool_ln_b;
    case VR_POOLER_W: return &m->pooler_w;
    case VR_POOLER_B: return &m->pooler_b;
    case VR_PROJ_OUT: return &m->proj_w;
    case VR_HEAD_W: return &m->head_w;
    case VR_HEAD_B: return &m->head_b;
    case VR_HEAD_LN_W: return &m->head_ln_w;
    case VR_HEAD_LN_B: return &m->head_ln_b;
    default: break;
    }
    if (!ly)
        return NULL;
    switch (role) {
    case VR_LN1_W: return &ly->ln1_w;
    case VR_LN1_B: return &ly->ln1_b;
    case VR_QKV_W: return &ly->qkv_w;
    case VR_QKV_B: return &ly->qkv_b;
    case VR_PROJ_W: return &ly->proj_w;
    case VR_PROJ_B: return &ly->proj_b;
    case VR_LN2_W: return &ly->ln2_w;
    case VR_LN2_B: return &ly->ln2_b;
    case VR_FC1_W: return &ly->fc1_w;
    case VR_FC1_B: return &ly->fc1_b;
    case VR_FC2_W: return &ly->fc2_w;
    case VR_FC2_B: return &ly->fc2_b;
    case VR_LS1: return &ly->ls1;
    case VR_LS2: return &ly->ls2;
    default: return NULL;
    }
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

/* 1 for a LayerNorm weight or layer scale: ones in a fresh model. */
static int starts_at_one(vit_role r)
{
    return r == VR_LN1_W || r == VR_LN2_W || r == VR_LN_W || r == VR_PRE_LN_W ||
           r == VR_POOL_LN_W || r == VR_HEAD_LN_W || r == VR_LS1 || r == VR_LS2;
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
    int count = 0;
    int64_t floats = walk(c, NULL, NULL, &count);
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
    m->arena = aligned_alloc(ARENA_ALIGN, bytes > 0 ? bytes : ARENA_ALIGN);
    m->layer = calloc((size_t)c->layers, sizeof *m->layer);
    list = malloc((size_t)count * sizeof *list);
    if (!m->arena || !m->layer || !list) {
        s = rv_fail(RV_ERR_NOMEM, "vit model: out of memory for %lld parameters (%.1f MiB)",
                    (long long)floats, (double)bytes / (1 << 20));
        goto end;
    }
    memset(m->arena, 0, bytes);
    walk(c, m->arena, list, NULL);
    for (int i = 0; i < count; i++) {
        *vit_slot(m, list[i].role, list[i].layer) = list[i].data;
        if (starts_at_one(list[i].role))
            for (int64_t j = 0; j < list[i].numel; j++)
                list[i].data[j] = 1.0f;
    }
    if (c->head != RV_HEAD_NONE && (s = vit_labels_default(m)) != RV_OK)
        goto end;
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
        /* Each label with its terminating NUL, so ["ab", "c"] and ["a", "bc"]
         * differ (models without a head hash as they always have). */
        for (int c = 0; m->labels && c < m->cfg.classes; c++) {
            const unsigned char *p = (const unsigned char *)m->labels[c];
            do
                h = (h ^ *p) * prime;
            while (*p++);
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
    free(m->labels);
    free(m);
    *pm = NULL;
}
