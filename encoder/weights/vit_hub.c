/* vit_hub.c: a model folder in the Hugging Face hub layout -> rv_vit_model
 * (vit_hub.h): the tensor names of each family as transformers stores them
 * (ViTModel, Dinov2Model, VideoMAEModel, ASTModel, CLIP's vision tower, with or
 * without the prefix their task models add: "vit.", "dinov2.", "videomae.",
 * "audio_spectrogram_transformer.", "vision_model."), mapped onto ringvit's
 * tensors:
 *   q, k, v Linear weights (and biases)  -> the (3D, D) in_proj weight (3D bias);
 *                                           VideoMAE's q_bias / v_bias with k 0
 *   patch Conv2d / Conv3d weight         -> the (D, T*P*P*3) patch weight (a 2D
 *                                           weight inflated to a wanted tubelet)
 *   cls (+ AST's distillation) token     -> the special token rows
 *   position table                       -> pos (special slots, grid) and, for
 *                                           AST, audio_pos (its band x time grid)
 *   pooler / fc_norm / post_layernorm / visual_projection -> the pooling head
 *   classifier (AST: classifier.layernorm, classifier.dense) -> the classifier
 *                                           head, its labels from config.json's
 *                                           id2label, multi-label from problem_type
 * Every tensor is checked against the shape config.json implies before the
 * model is even allocated (a config that disagrees with the weights, or claims
 * more than the files hold, fails naming the tensor, both shapes and "as
 * config.json says"); F16 and BF16 are converted, NaN and Inf refused. Tensors
 * the encoder does not use are sorted into known extras (a classifier ringvit
 * cannot apply, the MAE decoder, CLIP's text tower, buffers; listed in the load
 * info) and unknown ones (warned, named). Weights come from model.safetensors, or from the shards
 * model.safetensors.index.json lists. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rv_safetensors.h"
#include "vit_hub.h"
#include "vit_internal.h"
#include "st_convert.h"
#include "vit_load_util.h"
#include "vit_tensors.h"

#define MAX_SHARDS 64
#define HUB_NAME 192

/* The weight files of a folder. */
typedef struct hub_files {
    rv_safetensors *st[MAX_SHARDS];
    int n;
    unsigned char *used[MAX_SHARDS]; /* (count of st[i]) 1: read into the model */
    char name[MAX_SHARDS][256];      /* the file names in the folder */
} hub_files;

static void files_free(hub_files *f)
{
    for (int i = 0; i < f->n; i++) {
        rv_st_free(&f->st[i]);
        free(f->used[i]);
    }
    f->n = 0;
}

static rv_status files_add(hub_files *f, const char *dir, const char *name)
{
    char path[4400];
    for (int i = 0; i < f->n; i++) /* a shard named twice in the index */
        if (strcmp(f->name[i], name) == 0)
            return RV_OK;
    if (f->n == MAX_SHARDS)
        return rv_fail(RV_ERR_UNSUPPORTED, "model folder '%s': more than %d weight shards", dir,
                       MAX_SHARDS);
    if (!name[0] || strlen(name) >= sizeof f->name[0] || strchr(name, '/') ||
        strcmp(name, "..") == 0 || strcmp(name, ".") == 0)
        return rv_fail(RV_ERR_FORMAT, "model folder '%s': model.safetensors.index.json names "
                       "the shard '%.100s', which is not a file name in the folder", dir, name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    rv_status s = rv_st_open(path, &f->st[f->n]);
    if (s != RV_OK)
        return s;
    snprintf(f->name[f->n], sizeof f->name[0], "%s", name);
    f->used[f->n] = calloc((size_t)rv_st_count(f->st[f->n]) + 1, 1);
    f->n++;
    if (!f->used[f->n - 1])
        return rv_fail(RV_ERR_NOMEM, "model folder '%s': out of memory", dir);
    return RV_OK;
}

/* model.safetensors, else the shards of model.safetensors.index.json. */
static rv_status files_open(hub_files *f, const char *dir, char *weights, size_t cap)
{
    char path[4400];
    struct stat sb;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (stat(path, &sb) == 0) {
        snprintf(weights, cap, "%.4000s", path);
        return files_add(f, dir, "model.safetensors");
    }
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (stat(path, &sb) != 0) {
        snprintf(path, sizeof path, "%s/pytorch_model.bin", dir);
        if (stat(path, &sb) == 0)
            return rv_fail(RV_ERR_UNSUPPORTED, "model folder '%s' holds pytorch_model.bin but no "
                           "model.safetensors: ringvit reads safetensors only (pickles run "
                           "code); in Python: transformers.AutoModel.from_pretrained(dir)"
                           ".save_pretrained(dir, safe_serialization=True)", dir);
        return rv_fail(RV_ERR_FORMAT, "model folder '%s': no model.safetensors (nor "
                       "model.safetensors.index.json)", dir);
    }
    snprintf(weights, cap, "%.4000s", path);
    if (!S_ISREG(sb.st_mode) || sb.st_size > VIT_HUB_JSON_MAX)
        return rv_fail(RV_ERR_FORMAT, "model folder '%s': model.safetensors.index.json is not a "
                       "regular file of at most %d bytes", dir, VIT_HUB_JSON_MAX);
    json_error_t err;
    json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    rv_status s = RV_OK;
    const json_t *map = o ? json_object_get(o, "weight_map") : NULL;
    if (!map || !json_is_object(map)) {
        s = rv_fail(RV_ERR_FORMAT, "model folder '%s': model.safetensors.index.json has no "
                    "\"weight_map\" object%s%.200s", dir, o ? "" : ": ", o ? "" : err.text);
        goto end;
    }
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)map, key, v) {
        if (!json_is_string(v)) {
            s = rv_fail(RV_ERR_FORMAT, "model folder '%s': model.safetensors.index.json: the "
                        "shard of '%.100s' is not a file name", dir, key);
            goto end;
        }
        if ((s = files_add(f, dir, json_string_value(v))) != RV_OK)
            goto end;
    }
    if (f->n == 0)
        s = rv_fail(RV_ERR_FORMAT, "model folder '%s': model.safetensors.index.json lists no "
                    "weights", dir);
end:
    json_decref(o);
    return s;
}

static const rv_st_tensor *files_find(hub_files *f, const char *name, int *file)
{
    for (int i = 0; i < f->n; i++) {
        const rv_st_tensor *t = rv_st_find(f->st[i], name);
        if (t) {
            *file = i;
            return t;
        }
    }
    return NULL;
}

static void files_mark(hub_files *f, int file, const rv_st_tensor *t)
{
    for (int k = 0; k < rv_st_count(f->st[file]); k++)
        if (rv_st_at(f->st[file], k) == t)
            f->used[file][k] = 1;
}

/* ---- names ------------------------------------------------------------------------ */

/* The prefix a task model puts before the base model's names, and the name of a
 * tensor every checkpoint of the family has (to find which prefix is used). */
static const char *family_prefix(int family)
{
    switch (family) {
    case RV_FAMILY_VIT: return "vit.";
    case RV_FAMILY_DINOV2: return "dinov2.";
    case RV_FAMILY_VIDEOMAE: return "videomae.";
    case RV_FAMILY_AST: return "audio_spectrogram_transformer.";
    default: return "vision_model.";
    }
}

static const char *patch_name(int family)
{
    return family == RV_FAMILY_CLIP ? "embeddings.patch_embedding.weight"
                                    : "embeddings.patch_embeddings.projection.weight";
}

/* The classifier's weight in the family's task model (ASTMLPHead: its dense). */
static const char *head_weight_name(int family)
{
    return family == RV_FAMILY_AST ? "classifier.dense.weight" : "classifier.weight";
}

/* One piece of a ringvit tensor: count floats from a hub tensor starting at its
 * element offset (name "" fills zeros), checked against the hub shape. */
typedef struct hub_part {
    char name[2 * HUB_NAME];
    int ndim;
    int64_t shape[5];
    int64_t offset, count;
} hub_part;

static void part(hub_part *p, const char *prefix, const char *name, int64_t offset, int64_t count,
                 int ndim, int64_t s0, int64_t s1, int64_t s2)
{
    memset(p, 0, sizeof *p);
    if (name)
        snprintf(p->name, sizeof p->name, "%s%s", prefix, name);
    p->ndim = ndim;
    p->shape[0] = s0, p->shape[1] = s1, p->shape[2] = s2;
    p->offset = offset, p->count = count;
}

/* The hub tensors of a layer role: suffix of each family's layer naming. */
static const char *layer_suffix(int family, vit_role r, int *has_bias_name)
{
    const int clip = family == RV_FAMILY_CLIP, dino = family == RV_FAMILY_DINOV2;
    *has_bias_name = 1;
    switch (r) {
    case VR_LN1_W: case VR_LN1_B:
        return clip ? "layer_norm1" : dino ? "norm1" : "layernorm_before";
    case VR_PROJ_W: case VR_PROJ_B:
        return clip ? "self_attn.out_proj" : "attention.output.dense";
    case VR_LN2_W: case VR_LN2_B:
        return clip ? "layer_norm2" : dino ? "norm2" : "layernorm_after";
    case VR_FC1_W: case VR_FC1_B:
        return clip || dino ? "mlp.fc1" : "intermediate.dense";
    case VR_FC2_W: case VR_FC2_B:
        return clip || dino ? "mlp.fc2" : "output.dense";
    case VR_LS1: *has_bias_name = 0; return "layer_scale1.lambda1";
    case VR_LS2: *has_bias_name = 0; return "layer_scale2.lambda1";
    default: return NULL;
    }
}

static int is_weight_role(vit_role r)
{
    return r == VR_LN1_W || r == VR_PROJ_W || r == VR_LN2_W || r == VR_FC1_W || r == VR_FC2_W ||
           r == VR_QKV_W;
}

/* The parts of ringvit tensor e (not the patch weight) in a checkpoint of h's
 * family whose base names start with prefix. Returns how many (0: unmapped). */
static int plan(const vit_hub_model *h, const char *prefix, const vit_tensor *e, hub_part p[3])
{
    const rv_vit_config *c = &h->cfg;
    const int64_t D = c->dim, G2 = (int64_t)c->grid * c->grid;
    const int fam = c->family, clip = fam == RV_FAMILY_CLIP;
    char lp[HUB_NAME], nm[HUB_NAME];
    snprintf(lp, sizeof lp, "%sencoder.%s.%d.", prefix, clip ? "layers" : "layer", e->layer);
    const int64_t n = e->numel;
    switch (e->role) {
    case VR_VIDEO_B:
        part(&p[0], prefix, "embeddings.patch_embeddings.projection.bias", 0, n, 1, D, 0, 0);
        return 1;
    case VR_AUDIO_W:
        part(&p[0], prefix, "embeddings.patch_embeddings.projection.weight", 0, n, 4, D, 1,
             c->audio_freq);
        p[0].shape[3] = c->audio_time;
        return 1;
    case VR_AUDIO_B:
        part(&p[0], prefix, "embeddings.patch_embeddings.projection.bias", 0, n, 1, D, 0, 0);
        return 1;
    case VR_CLS:
        if (clip) {
            part(&p[0], prefix, "embeddings.class_embedding", 0, D, 1, D, 0, 0);
            return 1;
        }
        part(&p[0], prefix, "embeddings.cls_token", 0, D, 3, 1, 1, D);
        if (c->cls < 2)
            return 1;
        part(&p[1], prefix, "embeddings.distillation_token", 0, D, 3, 1, 1, D);
        return 2;
    case VR_POS:
        if (clip) {
            part(&p[0], prefix, "embeddings.position_embedding.weight", 0, n, 2, 1 + G2, D, 0);
            return 1;
        }
        if (fam == RV_FAMILY_AST) { /* rows 0, 1 of (1, 2 + bands*Td, D) */
            part(&p[0], prefix, "embeddings.position_embeddings", 0, n, 3, 1,
                 2 + (int64_t)rv_vit_bands(c) * c->audio_grid_t, D);
            return 1;
        }
        part(&p[0], prefix, "embeddings.position_embeddings", 0, n, 3, 1, 1 + G2, D);
        return 1;
    case VR_AUDIO_POS:
        part(&p[0], prefix, "embeddings.position_embeddings", 2 * D, n, 3, 1,
             2 + (int64_t)rv_vit_bands(c) * c->audio_grid_t, D);
        return 1;
    case VR_PRE_LN_W: case VR_PRE_LN_B:
        part(&p[0], prefix, e->role == VR_PRE_LN_W ? "pre_layrnorm.weight" : "pre_layrnorm.bias",
             0, n, 1, D, 0, 0);
        return 1;
    case VR_LN_W: case VR_LN_B:
        part(&p[0], prefix, e->role == VR_LN_W ? "layernorm.weight" : "layernorm.bias", 0, n, 1,
             D, 0, 0);
        return 1;
    case VR_POOL_LN_W: case VR_POOL_LN_B: {
        const int w = e->role == VR_POOL_LN_W;
        if (clip)
            part(&p[0], prefix, w ? "post_layernorm.weight" : "post_layernorm.bias", 0, n, 1, D,
                 0, 0);
        else /* VideoMAE's fc_norm sits beside the base model, without its prefix */
            part(&p[0], "", w ? "fc_norm.weight" : "fc_norm.bias", 0, n, 1, D, 0, 0);
        return 1;
    }
    case VR_POOLER_W:
        part(&p[0], prefix, "pooler.dense.weight", 0, n, 2, D, D, 0);
        return 1;
    case VR_POOLER_B:
        part(&p[0], prefix, "pooler.dense.bias", 0, n, 1, D, 0, 0);
        return 1;
    case VR_PROJ_OUT:
        part(&p[0], "", "visual_projection.weight", 0, n, 2, c->proj_dim, D, 0);
        return 1;
    case VR_HEAD_W: /* the task model's head sits beside the base model, unprefixed */
        part(&p[0], "", head_weight_name(fam), 0, n, 2, c->classes, rv_vit_head_in(c), 0);
        return 1;
    case VR_HEAD_B:
        part(&p[0], "", fam == RV_FAMILY_AST ? "classifier.dense.bias" : "classifier.bias", 0,
             n, 1, c->classes, 0, 0);
        return 1;
    case VR_HEAD_LN_W: case VR_HEAD_LN_B:
        part(&p[0], "", e->role == VR_HEAD_LN_W ? "classifier.layernorm.weight"
                                                : "classifier.layernorm.bias", 0, n, 1, D, 0, 0);
        return 1;
    case VR_QKV_W: case VR_QKV_B: {
        static const char *const vit_qkv[3] = {"attention.attention.query",
                                               "attention.attention.key",
                                               "attention.attention.value"};
        static const char *const clip_qkv[3] = {"self_attn.q_proj", "self_attn.k_proj",
                                                "self_attn.v_proj"};
        const int w = e->role == VR_QKV_W;
        for (int j = 0; j < 3; j++) {
            if (w) {
                snprintf(nm, sizeof nm, "%s.weight", clip ? clip_qkv[j] : vit_qkv[j]);
                part(&p[j], lp, nm, 0, D * D, 2, D, D, 0);
            } else if (fam == RV_FAMILY_VIDEOMAE) { /* q_bias, (k: 0), v_bias */
                part(&p[j], lp, j == 0 ? "attention.attention.q_bias"
                                : j == 2 ? "attention.attention.v_bias" : NULL, 0, D, 1, D, 0, 0);
            } else {
                snprintf(nm, sizeof nm, "%s.bias", clip ? clip_qkv[j] : vit_qkv[j]);
                part(&p[j], lp, nm, 0, D, 1, D, 0, 0);
            }
        }
        return 3;
    }
    default: {
        int bias_name;
        const char *sfx = layer_suffix(fam, e->role, &bias_name);
        if (!sfx || e->layer < 0)
            return 0;
        if (bias_name)
            snprintf(nm, sizeof nm, "%s.%s", sfx, is_weight_role(e->role) ? "weight" : "bias");
        else
            snprintf(nm, sizeof nm, "%s", sfx);
        part(&p[0], lp, nm, 0, n, e->ndim, e->shape[0], e->shape[1], 0);
        return 1;
    }
    }
}

/* Known tensors the encoder does not use. */
static int known_extra(const char *name, const char *prefix)
{
    static const char *const starts[] = {"classifier.", "encoder_to_decoder.", "decoder.",
                                         "text_model.", "text_projection.", "head.", "lm_head.",
                                         "fc_norm.", "mask_token", "logit_scale"};
    for (size_t i = 0; i < sizeof starts / sizeof starts[0]; i++)
        if (strncmp(name, starts[i], strlen(starts[i])) == 0)
            return 1;
    size_t pl = strlen(prefix);
    const char *base = strncmp(name, prefix, pl) == 0 ? name + pl : name;
    return strcmp(base, "embeddings.mask_token") == 0 ||
           strcmp(base, "embeddings.position_ids") == 0 || strncmp(base, "pooler.", 7) == 0;
}

/* ---- reading ---------------------------------------------------------------------- */

/* The hub tensor of named part p of ringvit tensor e, checked against the shape
 * config.json implies (*file: its shard). */
static rv_status find_part(hub_files *f, const vit_hub_model *h, const vit_tensor *e,
                           const hub_part *p, int *file, const rv_st_tensor **out)
{
    const rv_st_tensor *t = files_find(f, p->name, file);
    *out = NULL;
    if (!t)
        return rv_fail(RV_ERR_FORMAT, "model folder '%s': missing tensor '" VIT_NAME_FMT
                       "' (a %s checkpoint%s)", h->label, p->name,
                       rv_vit_family_name(h->cfg.family),
                       e->layer >= 0 ? " with the layers config.json says" : "");
    rv_status s = vit_check_tensor(f->st[*file], t, p->ndim, p->shape, " (as config.json says)");
    if (s != RV_OK)
        return s;
    if (p->offset + p->count > t->numel)
        return rv_fail(RV_ERR_INTERNAL, "hub: part of '%s' beyond its end", p->name);
    *out = t;
    return RV_OK;
}

static rv_status read_parts(hub_files *f, const vit_hub_model *h, const vit_tensor *e,
                            const hub_part *p, int np)
{
    int64_t at = 0;
    for (int j = 0; j < np; j++) {
        if (!p[j].name[0]) { /* a bias the family fixes at zero */
            memset(e->data + at, 0, sizeof(float) * (size_t)p[j].count);
            at += p[j].count;
            continue;
        }
        int file = 0;
        const rv_st_tensor *t;
        rv_status s = find_part(f, h, e, &p[j], &file, &t);
        if (s == RV_OK)
            s = vit_check_finite(f->st[file], t);
        if (s != RV_OK)
            return s;
        if (p[j].offset == 0 && p[j].count == t->numel) {
            st_to_f32(t, e->data + at);
        } else {
            float *tmp = malloc(sizeof(float) * (size_t)t->numel);
            if (!tmp)
                return rv_fail(RV_ERR_NOMEM, "model folder '%s': out of memory for '%s'",
                               h->label, p[j].name);
            st_to_f32(t, tmp);
            memcpy(e->data + at, tmp + p[j].offset, sizeof(float) * (size_t)p[j].count);
            free(tmp);
        }
        files_mark(f, file, t);
        at += p[j].count;
    }
    if (at != e->numel)
        return rv_fail(RV_ERR_INTERNAL, "hub: '%s' filled %lld of %lld floats", e->name,
                       (long long)at, (long long)e->numel);
    return RV_OK;
}

/* The patch weight, checked against the shape config.json implies; *count: its
 * values (the file's tubelet, before any inflation). */
static rv_status find_video(hub_files *f, const vit_hub_model *h, const char *prefix,
                            const rv_vit_config *c, int *file, const rv_st_tensor **out,
                            int64_t *count)
{
    char name[HUB_NAME];
    snprintf(name, sizeof name, "%s%s", prefix, patch_name(c->family));
    const rv_st_tensor *t = files_find(f, name, file);
    const int T = h->file_tubelet;
    int64_t shape[5] = {c->dim, RV_VIT_CHANNELS, T, c->patch, c->patch};
    if (T == 1)
        shape[2] = c->patch, shape[3] = c->patch;
    *out = NULL;
    *count = (int64_t)c->dim * RV_VIT_CHANNELS * T * c->patch * c->patch;
    if (!t)
        return rv_fail(RV_ERR_FORMAT, "model folder '%s': missing tensor '%s'", h->label, name);
    rv_status s = vit_check_tensor(f->st[*file], t, T == 1 ? 4 : 5, shape,
                                   " (as config.json says)");
    if (s == RV_OK)
        *out = t;
    return s;
}

static rv_status read_video(hub_files *f, const vit_hub_model *h, const char *prefix,
                            const rv_vit_config *c, const vit_tensor *e)
{
    int file = 0;
    int64_t count;
    const rv_st_tensor *t;
    rv_status s = find_video(f, h, prefix, c, &file, &t, &count);
    if (s == RV_OK)
        s = vit_check_finite(f->st[file], t);
    if (s == RV_OK)
        s = vit_read_video(t, c, h->file_tubelet, e->data, h->label);
    if (s == RV_OK)
        files_mark(f, file, t);
    return s;
}

/* Checks config c (config.json's, with the caller's options) against the
 * weights before the model is allocated: the tensors it maps from must fit in
 * the shards' tensor data, and each must be there with its shape. Without this,
 * sizes from config.json were trusted and a tiny model.safetensors could make
 * the loader allocate gigabytes before any tensor was looked at. */
static rv_status check_against_files(hub_files *f, const vit_hub_model *h, const char *prefix,
                                     const rv_vit_config *c)
{
    rv_status s = RV_OK;
    const int n = vit_tensor_count(c);
    vit_tensor *list = malloc((size_t)n * sizeof *list);
    rv_vit_model *probe = calloc(1, sizeof *probe); /* no arena: names and shapes only */
    if (!list || !probe) {
        s = rv_fail(RV_ERR_NOMEM, "model folder '%s': out of memory", h->label);
        goto end;
    }
    probe->cfg = *c;
    vit_tensor_list(probe, list);
    uint64_t need = 0, have = 0;
    for (int i = 0; i < f->n; i++)
        for (int k = 0; k < rv_st_count(f->st[i]); k++)
            have += rv_st_at(f->st[i], k)->nbytes;
    for (int i = 0; i < n; i++) {
        hub_part p[3];
        if (list[i].role == VR_VIDEO_W) {
            need += (uint64_t)c->dim * RV_VIT_CHANNELS * (uint64_t)h->file_tubelet *
                    (uint64_t)c->patch * (uint64_t)c->patch;
            continue;
        }
        int np = plan(h, prefix, &list[i], p);
        for (int j = 0; j < np; j++)
            if (p[j].name[0])
                need += (uint64_t)p[j].count;
    }
    /* The tensors present first (a shape naming the tensor says most), then the
     * size, then what is missing (the size says more about a config bomb). */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            char what[4200];
            snprintf(what, sizeof what, "model folder '%.4000s'", h->label);
            if ((s = vit_check_fits(what, "config.json", c, need, have)) != RV_OK)
                goto end;
        }
        for (int i = 0; i < n; i++) {
            hub_part p[3];
            int file;
            int64_t count;
            const rv_st_tensor *t;
            if (list[i].role == VR_VIDEO_W) {
                snprintf(p[0].name, sizeof p[0].name, "%s%s", prefix, patch_name(c->family));
                if ((pass == 1 || files_find(f, p[0].name, &file)) &&
                    (s = find_video(f, h, prefix, c, &file, &t, &count)) != RV_OK)
                    goto end;
                continue;
            }
            int np = plan(h, prefix, &list[i], p); /* 0: reported by the read loop */
            for (int j = 0; j < np; j++)
                if (p[j].name[0] && (pass == 1 || files_find(f, p[j].name, &file)) &&
                    (s = find_part(f, h, &list[i], &p[j], &file, &t)) != RV_OK)
                    goto end;
        }
    }
end:
    free(probe);
    free(list);
    return s;
}

/* The prefix the checkpoint uses (with the family's, or none). */
static rv_status find_prefix(hub_files *f, const vit_hub_model *h, const char **prefix)
{
    const int fam = h->cfg.family;
    const char *cands[2] = {family_prefix(fam), ""};
    char name[HUB_NAME];
    int file;
    for (int i = 0; i < 2; i++) {
        snprintf(name, sizeof name, "%s%s", cands[i], patch_name(fam));
        if (files_find(f, name, &file)) {
            *prefix = cands[i];
            return RV_OK;
        }
    }
    return rv_fail(RV_ERR_FORMAT, "model folder '%s': no tensor '%s%s' (nor '%s'): the "
                   "weights are not a %s checkpoint as config.json's model_type '%s' says",
                   h->label, cands[0], patch_name(fam), patch_name(fam),
                   rv_vit_family_name(fam), h->model_type);
}

/* The classifier of a task model (ViTForImageClassification,
 * Dinov2ForImageClassification, VideoMAEForVideoClassification,
 * ASTForAudioClassification): its kind, from the family, and its classes, from
 * the weight's rows (the rest of its shape is checked with every tensor). */
static rv_status settle_classifier(hub_files *f, vit_hub_model *h, rv_vit_load_info *info)
{
    rv_vit_config *c = &h->cfg;
    const char *name = head_weight_name(c->family);
    int file;
    const rv_st_tensor *t = files_find(f, name, &file);
    if (!t || c->family == RV_FAMILY_CLIP || c->family == RV_FAMILY_RINGVIT)
        return RV_OK;
    int kind = c->family == RV_FAMILY_VIT        ? RV_HEAD_CLS
               : c->family == RV_FAMILY_DINOV2   ? RV_HEAD_CLS_MEAN
               : c->family == RV_FAMILY_AST      ? RV_HEAD_CLS_DIST_NORM
                                                 : RV_HEAD_MEAN_NORM;
    if (kind == RV_HEAD_MEAN_NORM && c->pool != RV_POOL_MEAN_NORM) {
        vit_info_add(&info->notes, &info->nnotes, "classifier not used: without fc_norm "
                     "(use_mean_pooling false, or no fc_norm stored) VideoMAE's classifier "
                     "reads the first token's output, which ringvit does not pool");
        return RV_OK;
    }
    const int in = kind == RV_HEAD_CLS_MEAN ? 2 * c->dim : c->dim;
    if (t->ndim != 2 || t->shape[0] < 1 || t->shape[0] > RV_VIT_MAX_CLASSES ||
        t->shape[1] != in) {
        char got[160];
        vit_format_shape(got, sizeof got, t->ndim, t->shape);
        return rv_fail(RV_ERR_FORMAT, "model folder '%s': tensor '%s' has shape %s; a %s "
                       "classifier is (classes, %d), with 1 .. %d classes", h->label, name,
                       got, rv_vit_family_name(c->family), in, RV_VIT_MAX_CLASSES);
    }
    c->head = kind;
    c->classes = (int)t->shape[0];
    c->multi_label = h->multi_label;
    vit_info_add(&info->notes, &info->nnotes, "logits = %s, %d classes%s",
                 rv_vit_head_text(kind), c->classes,
                 h->multi_label ? ", multi-label (problem_type multi_label_classification: "
                                  "sigmoid)" : "");
    return RV_OK;
}

/* What the tensors decide: the pooling head, the projection and the classifier. */
static rv_status settle_head(hub_files *f, vit_hub_model *h, const char *prefix,
                             rv_vit_load_info *info)
{
    rv_vit_config *c = &h->cfg;
    char name[HUB_NAME];
    int file;
    const rv_st_tensor *t;
    switch (c->family) {
    case RV_FAMILY_VIT:
        snprintf(name, sizeof name, "%spooler.dense.weight", prefix);
        if (files_find(f, name, &file)) {
            c->pool = RV_POOL_CLS_TANH;
            vit_info_add(&info->notes, &info->nnotes, "pooled = tanh(pooler.dense(CLS)) (the "
                         "stored pooler)");
        } else {
            vit_info_add(&info->notes, &info->nnotes, "pooled = the final-norm CLS (no pooler "
                         "stored)");
        }
        break;
    case RV_FAMILY_VIDEOMAE:
        if (h->use_mean_pooling && files_find(f, "fc_norm.weight", &file)) {
            c->pool = RV_POOL_MEAN_NORM;
            vit_info_add(&info->notes, &info->nnotes, "pooled = fc_norm(mean of the tokens) "
                         "(use_mean_pooling; tokens without a final norm)");
        } else {
            vit_info_add(&info->notes, &info->nnotes, "pooled = mean of the tokens (%s)",
                         h->use_mean_pooling ? "use_mean_pooling without a stored fc_norm"
                                             : "final layernorm on every token");
        }
        break;
    case RV_FAMILY_CLIP:
        t = files_find(f, "visual_projection.weight", &file);
        if (t) {
            if (t->ndim != 2 || t->shape[1] != c->dim || t->shape[0] < 1 || t->shape[0] > 65536)
                return rv_fail(RV_ERR_FORMAT, "model folder '%s': tensor "
                               "'visual_projection.weight' is not (projection_dim, %d)",
                               h->label, c->dim);
            c->proj_dim = (int)t->shape[0];
        }
        vit_info_add(&info->notes, &info->nnotes, "pooled = post_layernorm(CLS)%s; tokens "
                     "without a final norm (last_hidden_state)",
                     c->proj_dim ? ", projected = visual_projection(pooled)" : "");
        break;
    case RV_FAMILY_DINOV2:
        vit_info_add(&info->notes, &info->nnotes, "pooled = the final-norm CLS");
        break;
    case RV_FAMILY_AST:
        vit_info_add(&info->notes, &info->nnotes, "pooled = (CLS + distillation) / 2 after the "
                     "final norm");
        break;
    default:
        break;
    }
    if (c->video && !c->audio)
        vit_info_add(&info->notes, &info->nnotes, "video only: the weights have no audio "
                     "encoder");
    return settle_classifier(f, h, info);
}

rv_status vit_hub_load(const char *dir, const rv_vit_load_opts *opts, rv_vit_model **out,
                       rv_vit_load_info *info)
{
    rv_status s = RV_OK;
    hub_files f;
    vit_hub_model h;
    rv_vit_model *m = NULL;
    vit_tensor *list = NULL;
    memset(&f, 0, sizeof f);
    memset(&h, 0, sizeof h);
    snprintf(info->format, sizeof info->format, "hub");
    if ((s = vit_hub_read_config(dir, &h, info)) != RV_OK)
        goto end;
    snprintf(info->model_type, sizeof info->model_type, "%s", h.model_type);
    if ((s = files_open(&f, dir, info->weights, sizeof info->weights)) != RV_OK)
        goto end;
    for (int i = 0; i < f.n; i++)
        info->file_tensors += rv_st_count(f.st[i]);
    const char *prefix = "";
    if ((s = find_prefix(&f, &h, &prefix)) != RV_OK || (s = settle_head(&f, &h, prefix, info)) != RV_OK)
        goto end;
    rv_vit_config c = h.cfg;
    if (opts && opts->heads > 0 && opts->heads != c.heads) {
        s = rv_fail(RV_ERR_INVALID, "model folder '%s': config.json says %d heads; a head count "
                    "(%d) is for files without a config", dir, c.heads, opts->heads);
        goto end;
    }
    if ((s = vit_apply_load_opts(opts, dir, h.file_tubelet, patch_name(c.family), &c)) != RV_OK ||
        (s = check_against_files(&f, &h, prefix, &c)) != RV_OK ||
        (s = rv_vit_new(&c, &m)) != RV_OK)
        goto end;
    const int n = vit_tensor_count(&c);
    if (!(list = malloc((size_t)n * sizeof *list))) {
        s = rv_fail(RV_ERR_NOMEM, "model folder '%s': out of memory", dir);
        goto end;
    }
    vit_tensor_list(m, list);
    for (int i = 0; i < n; i++) {
        hub_part p[3];
        if (list[i].role == VR_VIDEO_W) {
            if ((s = read_video(&f, &h, prefix, &c, &list[i])) != RV_OK)
                goto end;
            continue;
        }
        int np = plan(&h, prefix, &list[i], p);
        if (np == 0) {
            s = rv_fail(RV_ERR_INTERNAL, "model folder '%s': no %s tensor maps to '%s'", dir,
                        rv_vit_family_name(c.family), list[i].name);
            goto end;
        }
        if ((s = read_parts(&f, &h, &list[i], p, np)) != RV_OK)
            goto end;
    }
    for (int i = 0; i < f.n; i++)
        for (int k = 0; k < rv_st_count(f.st[i]); k++) {
            const char *name = rv_st_at(f.st[i], k)->name;
            if (f.used[i][k]) { /* a tensor may feed two of ringvit's (AST's positions) */
                info->used++;
                continue;
            }
            if (known_extra(name, prefix))
                vit_info_add(&info->ignored, &info->nignored, "%s", name);
            else
                vit_info_add(&info->unknown, &info->nunknown, "%s", name);
        }
    if (c.head != RV_HEAD_NONE &&
        (s = vit_hub_labels(&h, head_weight_name(c.family), m, info)) != RV_OK)
        goto end;
    char what[4200];
    snprintf(what, sizeof what, "model folder '%.4000s'", dir);
    vit_warn_unknown(what, info);
    *out = m;
    m = NULL;
end:
    free(list);
    rv_vit_free(&m);
    files_free(&f);
    vit_hub_model_free(&h);
    return s;
}
