/* vit_family.c: the family description of rv_vit_config (rv_vit.h): ringvit's
 * own defaults, the names of the enums (the config JSON's values), the sizes
 * derived from a config (audio bands, position rows), and what a model asks of
 * the tokenizer (rv_vit_tok_opts) and of the ingest (rv_vit_frame_size), and
 * both for a run of the model (rv_vit_input_opts). */
#include <string.h>

#include "rv_vit.h"

void rv_vit_family_defaults(rv_vit_config *c)
{
    c->family = RV_FAMILY_RINGVIT;
    c->act = RV_ACT_GELU;
    c->qkv_bias = RV_VIT_BIAS_Q | RV_VIT_BIAS_K | RV_VIT_BIAS_V;
    c->patch_bias = 1;
    c->layer_scale = 0;
    c->pre_norm = 0;
    c->final_norm = 1;
    c->pool = c->cls ? RV_POOL_CLS : RV_POOL_MEAN;
    c->pool_eps = c->eps;
    c->pos = RV_POS_GRID_BILINEAR;
    c->audio_pos = RV_APOS_BAND;
    c->time_code = 1;
    c->audio_fstride = c->audio_freq;
    c->audio_tstride = c->audio_time;
    c->audio_grid_t = 0;
    c->video = 1;
    c->audio = 1;
    c->proj_dim = 0;
    /* ImageNet's mean and std (torchvision's and most processors'), AST's fbank
     * statistics (AudioSet). */
    static const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    memcpy(c->mean, mean, sizeof mean);
    memcpy(c->std, std, sizeof std);
    c->audio_mean = -4.2677393f;
    c->audio_std = 4.5689974f;
    c->image_size = 0;
    c->head = RV_HEAD_NONE;
    c->classes = 0;
    c->multi_label = 0;
}

/* name <-> value tables of the enums */
static const char *const family_names[] = {"ringvit", "vit", "videomae", "ast", "clip", "dinov2"};
static const char *const act_names[] = {"gelu", "gelu_tanh", "quick_gelu"};
static const char *const pool_names[] = {"cls", "cls_dist", "mean_norm", "cls_norm", "cls_tanh",
                                         "mean"};
static const char *const pos_names[] = {"none", "grid_bilinear", "grid_bicubic", "sinusoid"};
static const char *const apos_names[] = {"none", "band", "grid"};
static const char *const head_names[] = {"none", "cls", "mean_norm", "cls_dist_norm",
                                         "cls_mean", "mean"};
static const char *const head_texts[] = {
    "no classifier head",
    "W CLS + b (ViT's classifier)",
    "W fc_norm(mean) + b (VideoMAE's classifier)",
    "W layernorm((CLS + distillation) / 2) + b (AST's MLP head)",
    "W [CLS; mean of the patch tokens] + b (DINOv2's classifier)",
    "W mean + b (ringvit's finetune classify head)"};

#define NAME_OF(table, v) \
    ((v) >= 0 && (size_t)(v) < sizeof table / sizeof table[0] ? table[v] : "?")

const char *rv_vit_family_name(int family) { return NAME_OF(family_names, family); }
const char *rv_vit_act_name(int act) { return NAME_OF(act_names, act); }
const char *rv_vit_pool_name(int pool) { return NAME_OF(pool_names, pool); }
const char *rv_vit_pos_name(int pos) { return NAME_OF(pos_names, pos); }
const char *rv_vit_audio_pos_name(int apos) { return NAME_OF(apos_names, apos); }
const char *rv_vit_head_name(int head) { return NAME_OF(head_names, head); }
const char *rv_vit_head_text(int head) { return NAME_OF(head_texts, head); }

int rv_vit_head_in(const rv_vit_config *c)
{
    if (c->head == RV_HEAD_NONE)
        return 0;
    return c->head == RV_HEAD_CLS_MEAN ? 2 * c->dim : c->dim;
}

int rv_vit_bands(const rv_vit_config *c)
{
    const int fs = c->audio_fstride > 0 ? c->audio_fstride : c->audio_freq;
    if (c->audio_freq < 1 || c->audio_freq > RV_VIT_MEL_BINS || fs < 1)
        return 0;
    return (RV_VIT_MEL_BINS - c->audio_freq) / fs + 1;
}

int rv_vit_pos_special(const rv_vit_config *c)
{
    /* ringvit's table always has torchvision's CLS slot, with or without a CLS
     * token (files written before special tokens were counted have it). */
    return c->family == RV_FAMILY_RINGVIT ? 1 : c->cls;
}

int64_t rv_vit_pos_rows(const rv_vit_config *c)
{
    const int grid = c->pos == RV_POS_GRID_BILINEAR || c->pos == RV_POS_GRID_BICUBIC;
    return rv_vit_pos_special(c) + (grid ? (int64_t)c->grid * c->grid : 0);
}

void rv_vit_tok_opts(const rv_vit_config *c, rv_tok_opts *to)
{
    rv_tok_opts_default(to);
    to->tubelet = c->tubelet;
    to->patch = c->patch;
    memcpy(to->mean, c->mean, sizeof to->mean);
    memcpy(to->std, c->std, sizeof to->std);
    to->audio_freq = c->audio_freq;
    to->audio_time = c->audio_time;
    to->audio_fstride = c->audio_fstride;
    to->audio_stride = c->audio_tstride;
    to->audio_mean = c->audio_mean;
    to->audio_std = c->audio_std;
    to->cls = c->cls;
    to->video = c->video;
    to->audio = c->audio;
}

int rv_vit_frame_size(const rv_vit_config *c)
{
    return c->image_size > 0 ? c->image_size : c->grid * c->patch;
}

rv_status rv_vit_input_opts(const rv_vit_config *c, int size, int no_video, int no_audio,
                            const rv_span *span, rv_tok_opts *to, rv_ingest_opts *io)
{
    rv_vit_tok_opts(c, to);
    io->size = size > 0 ? size : rv_vit_frame_size(c);
    if (io->size % c->patch)
        return rv_fail(RV_ERR_INVALID, "frames of %d px: the side must be a multiple of the "
                       "model's patch (%d)", io->size, c->patch);
    if (!c->audio || no_audio) {
        io->audio_stream = -2;
        to->audio = 0;
    }
    if (!c->video || no_video) {
        io->video_stream = -2;
        to->video = 0;
    }
    if (!to->video && !to->audio)
        return rv_fail(RV_ERR_INVALID, "nothing to read: the model's modalities are all left out");
    if (!span || (span->kind != RV_SPAN_BLOCK && span->kind != RV_SPAN_FRAME))
        return RV_OK;
    if (span->kind == RV_SPAN_FRAME && !to->video)
        return rv_fail(RV_ERR_INVALID, "--attention frame needs video (frames are the blocks)");
    if (span->kind == RV_SPAN_BLOCK)
        to->window_s = span->seconds;
    to->frame_windows = span->kind == RV_SPAN_FRAME;
    to->cls_each_window = 1;
    to->window_positions = 1;
    return RV_OK;
}
