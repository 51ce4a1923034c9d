/* vit_config.c: the encoder's configuration (rv_vit.h): the named presets and
 * the check of sizes, of the family description and of their relations. The
 * JSON form is vit_config_json.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rv_vit.h"

/* Upper bounds: far above any real model, low enough that every size product in
 * vit_model.c fits an int64 without overflow checks at each step. */
#define MAX_DIM 65536
#define MAX_LAYERS 1024
#define MAX_MLP (1 << 20)
#define MAX_TUBELET 64
#define MAX_PATCH 1024
#define MAX_GRID 1024
#define MAX_AUDIO_TIME 4096
#define MAX_AUDIO_GRID (1 << 20)
#define MAX_IMAGE (MAX_GRID * MAX_PATCH)

rv_status rv_vit_preset(const char *name, rv_vit_config *out)
{
    static const struct {
        const char *name;
        int dim, layers, heads;
    } presets[] = {
        {"tiny", 192, 12, 3},
        {"small", 384, 12, 6},
        {"base", 768, 12, 12},
    };
    if (!out)
        return rv_fail(RV_ERR_INVALID, "rv_vit_preset: out is NULL");
    if (!name)
        return rv_fail(RV_ERR_INVALID, "rv_vit_preset: name is NULL");
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(name, presets[i].name) != 0)
            continue;
        rv_vit_config c;
        memset(&c, 0, sizeof c);
        snprintf(c.preset, sizeof c.preset, "%s", presets[i].name);
        c.dim = presets[i].dim;
        c.layers = presets[i].layers;
        c.heads = presets[i].heads;
        c.mlp = 4 * c.dim;
        c.eps = 1e-6f;
        c.tubelet = 2;
        c.patch = 16;
        c.grid = 14;
        c.audio_freq = 16;
        c.audio_time = 16;
        c.cls = 1;
        rv_vit_family_defaults(&c);
        *out = c;
        return RV_OK;
    }
    return rv_fail(RV_ERR_INVALID, "unknown model preset '%.64s' (tiny, small or base)", name);
}

static rv_status check_range(const char *what, int v, int lo, int hi)
{
    if (v < lo || v > hi)
        return rv_fail(RV_ERR_INVALID, "vit config: %s %d is outside [%d, %d]", what, v, lo,
                       hi);
    return RV_OK;
}

static rv_status check_enum(const char *what, int v, int count)
{
    if (v < 0 || v >= count)
        return rv_fail(RV_ERR_INVALID, "vit config: %s %d is not one of the %d known values",
                       what, v, count);
    return RV_OK;
}

static int finite_positive(float v) { return isfinite(v) && v > 0.0f; }

/* The classifier head: its kind, classes, and the tokens and tensors it reads. */
static rv_status check_head(const rv_vit_config *c)
{
    rv_status s;
    if ((s = check_enum("head", c->head, RV_HEAD_MEAN + 1)) != RV_OK ||
        (s = check_range("multi_label", c->multi_label, 0, 1)) != RV_OK)
        return s;
    if (c->head == RV_HEAD_NONE) {
        if (c->classes != 0 || c->multi_label)
            return rv_fail(RV_ERR_INVALID, "vit config: classes %d%s without a head",
                           c->classes, c->multi_label ? " and multi_label" : "");
        return RV_OK;
    }
    if ((s = check_range("classes", c->classes, 1, RV_VIT_MAX_CLASSES)) != RV_OK)
        return s;
    if ((c->head == RV_HEAD_CLS || c->head == RV_HEAD_CLS_MEAN) && c->cls < 1)
        return rv_fail(RV_ERR_INVALID, "vit config: head %s needs a CLS token (cls %d)",
                       rv_vit_head_name(c->head), c->cls);
    if (c->head == RV_HEAD_CLS_DIST_NORM && c->cls != 2)
        return rv_fail(RV_ERR_INVALID, "vit config: head cls_dist_norm needs the CLS and "
                       "distillation tokens (cls 2, got %d)", c->cls);
    if (c->head == RV_HEAD_MEAN_NORM && c->pool != RV_POOL_MEAN_NORM)
        return rv_fail(RV_ERR_INVALID, "vit config: head mean_norm reads the pooling "
                       "LayerNorm of pool mean_norm (pool %s)", rv_vit_pool_name(c->pool));
    return RV_OK;
}

/* The family's fields, on their own and together. */
static rv_status check_family(const rv_vit_config *c)
{
    rv_status s;
    if ((s = check_enum("family", c->family, RV_FAMILY_DINOV2 + 1)) != RV_OK ||
        (s = check_enum("act", c->act, RV_ACT_QUICK_GELU + 1)) != RV_OK ||
        (s = check_enum("pool", c->pool, RV_POOL_MEAN + 1)) != RV_OK ||
        (s = check_enum("pos", c->pos, RV_POS_SINUSOID + 1)) != RV_OK ||
        (s = check_enum("audio_pos", c->audio_pos, RV_APOS_GRID + 1)) != RV_OK ||
        (s = check_range("qkv_bias", c->qkv_bias, 0, 7)) != RV_OK ||
        (s = check_range("patch_bias", c->patch_bias, 0, 1)) != RV_OK ||
        (s = check_range("layer_scale", c->layer_scale, 0, 1)) != RV_OK ||
        (s = check_range("pre_norm", c->pre_norm, 0, 1)) != RV_OK ||
        (s = check_range("final_norm", c->final_norm, 0, 1)) != RV_OK ||
        (s = check_range("time_code", c->time_code, 0, 1)) != RV_OK ||
        (s = check_range("audio_fstride", c->audio_fstride, 1, RV_VIT_MEL_BINS)) != RV_OK ||
        (s = check_range("audio_tstride", c->audio_tstride, 1, MAX_AUDIO_TIME)) != RV_OK ||
        (s = check_range("audio_grid_t", c->audio_grid_t, 0, MAX_AUDIO_GRID)) != RV_OK ||
        (s = check_range("video", c->video, 0, 1)) != RV_OK ||
        (s = check_range("audio", c->audio, 0, 1)) != RV_OK ||
        (s = check_range("proj_dim", c->proj_dim, 0, MAX_DIM)) != RV_OK ||
        (s = check_range("image_size", c->image_size, 0, MAX_IMAGE)) != RV_OK)
        return s;
    if (!c->video && !c->audio)
        return rv_fail(RV_ERR_INVALID, "vit config: the model covers neither video nor audio");
    if (c->family == RV_FAMILY_RINGVIT && c->cls > 1)
        return rv_fail(RV_ERR_INVALID, "vit config: ringvit's own models have at most one "
                       "special token (cls %d)", c->cls);
    if ((c->pool == RV_POOL_CLS || c->pool == RV_POOL_CLS_NORM || c->pool == RV_POOL_CLS_TANH) &&
        c->cls < 1)
        return rv_fail(RV_ERR_INVALID, "vit config: pool %s needs a CLS token (cls %d)",
                       rv_vit_pool_name(c->pool), c->cls);
    if (c->pool == RV_POOL_CLS_DIST && c->cls != 2)
        return rv_fail(RV_ERR_INVALID, "vit config: pool cls_dist needs the CLS and "
                       "distillation tokens (cls 2, got %d)", c->cls);
    if (c->video && c->pos == RV_POS_NONE && !c->time_code)
        return rv_fail(RV_ERR_INVALID, "vit config: video tokens without positions (pos none "
                       "and no time code)");
    if (c->pos == RV_POS_SINUSOID && rv_vit_pos_special(c) > 0)
        return rv_fail(RV_ERR_INVALID, "vit config: sinusoid positions have no slot for the "
                       "%d special token%s", rv_vit_pos_special(c), c->cls == 1 ? "" : "s");
    if (c->audio && c->audio_pos == RV_APOS_NONE && !c->time_code)
        return rv_fail(RV_ERR_INVALID, "vit config: audio tokens without positions");
    if (c->audio_pos == RV_APOS_GRID && c->audio_grid_t < 1)
        return rv_fail(RV_ERR_INVALID, "vit config: audio_pos grid needs audio_grid_t >= 1");
    if (c->audio_pos != RV_APOS_GRID && c->audio_grid_t != 0)
        return rv_fail(RV_ERR_INVALID, "vit config: audio_grid_t %d without audio_pos grid",
                       c->audio_grid_t);
    if (!isfinite(c->pool_eps) || !(c->pool_eps > 0.0f) || c->pool_eps > 1.0f)
        return rv_fail(RV_ERR_INVALID, "vit config: pooling LayerNorm eps %g is not in (0, 1]",
                       (double)c->pool_eps);
    for (int k = 0; k < 3; k++)
        if (!isfinite(c->mean[k]) || !finite_positive(c->std[k]))
            return rv_fail(RV_ERR_INVALID, "vit config: video mean %g / std %g of channel %d: "
                           "need finite, std > 0", (double)c->mean[k], (double)c->std[k], k);
    if (!isfinite(c->audio_mean) || !finite_positive(c->audio_std))
        return rv_fail(RV_ERR_INVALID, "vit config: audio mean %g / std %g: need finite, std > 0",
                       (double)c->audio_mean, (double)c->audio_std);
    if ((s = check_head(c)) != RV_OK)
        return s;
    if (c->image_size > 0 && c->image_size % c->patch != 0)
        return rv_fail(RV_ERR_INVALID, "vit config: image_size %d is not a multiple of the "
                       "patch %d", c->image_size, c->patch);
    return RV_OK;
}

rv_status rv_vit_config_check(const rv_vit_config *c)
{
    rv_status s = RV_OK;
    if (!c)
        return rv_fail(RV_ERR_INVALID, "vit config: NULL");
    if (memchr(c->preset, '\0', sizeof c->preset) == NULL)
        return rv_fail(RV_ERR_INVALID, "vit config: preset name is not terminated");
    if ((s = check_range("dim", c->dim, 1, MAX_DIM)) != RV_OK ||
        (s = check_range("layers", c->layers, 1, MAX_LAYERS)) != RV_OK ||
        (s = check_range("heads", c->heads, 1, MAX_DIM)) != RV_OK ||
        (s = check_range("mlp", c->mlp, 1, MAX_MLP)) != RV_OK ||
        (s = check_range("tubelet", c->tubelet, 1, MAX_TUBELET)) != RV_OK ||
        (s = check_range("patch", c->patch, 1, MAX_PATCH)) != RV_OK ||
        (s = check_range("grid", c->grid, 1, MAX_GRID)) != RV_OK ||
        (s = check_range("audio_freq", c->audio_freq, 1, RV_VIT_MEL_BINS)) != RV_OK ||
        (s = check_range("audio_time", c->audio_time, 1, MAX_AUDIO_TIME)) != RV_OK ||
        (s = check_range("cls", c->cls, 0, 2)) != RV_OK)
        return s;
    if (c->dim % c->heads != 0)
        return rv_fail(RV_ERR_INVALID, "vit config: dim %d is not divisible by heads %d",
                       c->dim, c->heads);
    if (!isfinite(c->eps) || !(c->eps > 0.0f) || c->eps > 1.0f)
        return rv_fail(RV_ERR_INVALID, "vit config: LayerNorm eps %g is not in (0, 1]",
                       (double)c->eps);
    return check_family(c);
}
