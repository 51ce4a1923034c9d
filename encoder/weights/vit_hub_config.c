/* vit_hub_config.c: a Hugging Face model folder's config.json and
 * preprocessor_config.json -> rv_vit_config (vit_hub.h).
 *
 * Keys missing from config.json take the defaults of the transformers config
 * class of the model_type (ViTConfig, Dinov2Config, VideoMAEConfig, ASTConfig,
 * CLIPVisionConfig), since the hub's files may hold only what differs. The
 * processor file gives the input normalisation and the frame side the model
 * was trained on (crop_size after a centre crop, else the resize size); a
 * folder without one gets the defaults of that family's processor. Every value
 * read is checked for type and range; the message names the folder, the file
 * and the key. A task model's problem_type and id2label are kept for the
 * classifier (vit_hub_labels). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "vit_hub.h"
#include "vit_load_util.h"

/* Defaults of a family's transformers config class and processor. */
typedef struct family_defaults {
    const char *model_type;
    int family;
    int dim, layers, heads, mlp, image_size, patch;
    double eps;
    const char *act;
    float mean[3], std[3];
} family_defaults;

static const family_defaults known[] = {
    {"vit", RV_FAMILY_VIT, 768, 12, 12, 3072, 224, 16, 1e-12, "gelu",
     {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}},
    {"dinov2", RV_FAMILY_DINOV2, 768, 12, 12, 3072, 224, 14, 1e-6, "gelu",
     {0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}},
    {"videomae", RV_FAMILY_VIDEOMAE, 768, 12, 12, 3072, 224, 16, 1e-12, "gelu",
     {0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}},
    {"audio-spectrogram-transformer", RV_FAMILY_AST, 768, 12, 12, 3072, 0, 16, 1e-12, "gelu",
     {0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}}, /* no video: ImageNet's, unused */
    {"clip_vision_model", RV_FAMILY_CLIP, 768, 12, 12, 3072, 224, 32, 1e-5, "quick_gelu",
     {0.48145466f, 0.4578275f, 0.40821073f}, {0.26862954f, 0.26130258f, 0.27577711f}},
    {"clip", RV_FAMILY_CLIP, 768, 12, 12, 3072, 224, 32, 1e-5, "quick_gelu",
     {0.48145466f, 0.4578275f, 0.40821073f}, {0.26862954f, 0.26130258f, 0.27577711f}},
};

typedef struct json_src {
    const char *dir, *file; /* for messages */
} json_src;

static rv_status bad_key(const json_src *js, const char *key, const char *what)
{
    return rv_fail(RV_ERR_FORMAT, "model folder '%s': %s: \"%s\" %s", js->dir, js->file, key,
                   what);
}

/* o[key] as an int in [lo, hi]; *out keeps its value when the key is missing. */
static rv_status get_int(const json_src *js, const json_t *o, const char *key, int lo, int hi,
                         int *out)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return RV_OK;
    if (!json_is_integer(v))
        return bad_key(js, key, "is not an integer");
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) {
        char what[96];
        snprintf(what, sizeof what, "is %lld, outside [%d, %d]", (long long)x, lo, hi);
        return bad_key(js, key, what);
    }
    *out = (int)x;
    return RV_OK;
}

static rv_status get_num(const json_src *js, const json_t *o, const char *key, double *out)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return RV_OK;
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        return bad_key(js, key, "is not a finite number");
    *out = json_number_value(v);
    return RV_OK;
}

static rv_status get_bool(const json_src *js, const json_t *o, const char *key, int *out)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return RV_OK;
    if (!json_is_boolean(v))
        return bad_key(js, key, "is not true or false");
    *out = json_is_true(v);
    return RV_OK;
}

static rv_status get_float3(const json_src *js, const json_t *o, const char *key, float out[3])
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return RV_OK;
    if (json_is_number(v)) { /* one value for every channel */
        out[0] = out[1] = out[2] = (float)json_number_value(v);
        return RV_OK;
    }
    if (!json_is_array(v) || json_array_size(v) != 3)
        return bad_key(js, key, "is not a list of 3 numbers (one per RGB channel)");
    for (int k = 0; k < 3; k++) {
        const json_t *e = json_array_get(v, (size_t)k);
        if (!json_is_number(e))
            return bad_key(js, key, "holds something that is not a number");
        out[k] = (float)json_number_value(e);
    }
    return RV_OK;
}

/* A side length: an int, or {"height", "width"} (equal), or {"shortest_edge"};
 * *out keeps its value when the key is missing. */
static rv_status get_side(const json_src *js, const json_t *o, const char *key, int *out)
{
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return RV_OK;
    if (json_is_integer(v))
        return get_int(js, o, key, 1, 1 << 16, out);
    if (json_is_array(v) && json_array_size(v) == 2 && json_is_integer(json_array_get(v, 0)) &&
        json_is_integer(json_array_get(v, 1))) {
        json_int_t h = json_integer_value(json_array_get(v, 0));
        json_int_t w = json_integer_value(json_array_get(v, 1));
        if (h != w || h < 1 || h > (1 << 16))
            return bad_key(js, key, "is not a square side (ringvit's frames are square)");
        *out = (int)h;
        return RV_OK;
    }
    if (!json_is_object(v))
        return bad_key(js, key, "is not a size");
    int h = 0, w = 0, se = 0;
    rv_status s;
    if ((s = get_int(js, v, "height", 1, 1 << 16, &h)) != RV_OK ||
        (s = get_int(js, v, "width", 1, 1 << 16, &w)) != RV_OK ||
        (s = get_int(js, v, "shortest_edge", 1, 1 << 16, &se)) != RV_OK)
        return s;
    if (h && w && h != w)
        return bad_key(js, key, "is not square (ringvit's frames are square)");
    if (h || se)
        *out = h ? h : se;
    return RV_OK;
}

/* dir/name parsed; *out NULL (and RV_OK) when optional and absent. */
static rv_status load_json(const char *dir, const char *name, int optional, json_t **out)
{
    char path[4400];
    *out = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (optional)
            return RV_OK;
        return rv_fail(RV_ERR_FORMAT, "model folder '%s': no %s (a Hugging Face model folder "
                       "holds config.json and model.safetensors, as the hub stores them)",
                       dir, name);
    }
    if (!S_ISREG(sb.st_mode) || sb.st_size > VIT_HUB_JSON_MAX)
        return rv_fail(RV_ERR_FORMAT, "model folder '%s': %s is not a regular file of at most "
                       "%d bytes", dir, name, VIT_HUB_JSON_MAX);
    json_error_t err;
    json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (!o)
        return rv_fail(RV_ERR_FORMAT, "model folder '%s': %s: %.200s (line %d, column %d)", dir,
                       name, err.text, err.line, err.column);
    if (!json_is_object(o)) {
        json_decref(o);
        return rv_fail(RV_ERR_FORMAT, "model folder '%s': %s is not a JSON object", dir, name);
    }
    *out = o;
    return RV_OK;
}

static rv_status parse_act(const json_src *js, const char *act, int *out)
{
    if (strcmp(act, "gelu") == 0)
        *out = RV_ACT_GELU;
    else if (strcmp(act, "gelu_new") == 0 || strcmp(act, "gelu_pytorch_tanh") == 0 ||
             strcmp(act, "gelu_fast") == 0 || strcmp(act, "gelu_python_tanh") == 0)
        *out = RV_ACT_GELU_TANH;
    else if (strcmp(act, "quick_gelu") == 0)
        *out = RV_ACT_QUICK_GELU;
    else
        return rv_fail(RV_ERR_UNSUPPORTED, "model folder '%s': %s: hidden_act '%.64s' is not "
                       "supported (gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, quick_gelu)",
                       js->dir, js->file, act);
    return RV_OK;
}

/* The sizes and the family description from config.json's object o. */
static rv_status read_model(const json_src *js, const json_t *o, const family_defaults *fd,
                            vit_hub_model *h, rv_vit_load_info *info)
{
    rv_vit_config *c = &h->cfg;
    rv_status s;
    double eps = fd->eps, mlp_ratio = 4.0;
    int qkv_bias = 1, channels = 3, swiglu = 0, mels = 128, max_length = 1024;
    int fstride = 10, tstride = 10, frames = 16, tubelet = 2;
    c->dim = fd->dim, c->layers = fd->layers, c->heads = fd->heads, c->mlp = fd->mlp;
    c->patch = fd->patch;
    c->image_size = fd->image_size;
    const json_t *act = json_object_get(o, "hidden_act");
    if (act && !json_is_string(act))
        return bad_key(js, "hidden_act", "is not a string");
    if ((s = get_int(js, o, "hidden_size", 1, 65536, &c->dim)) != RV_OK ||
        (s = get_int(js, o, "num_hidden_layers", 1, 1024, &c->layers)) != RV_OK ||
        (s = get_int(js, o, "num_attention_heads", 1, 65536, &c->heads)) != RV_OK ||
        (s = get_int(js, o, "intermediate_size", 1, 1 << 20, &c->mlp)) != RV_OK ||
        (s = get_num(js, o, "layer_norm_eps", &eps)) != RV_OK ||
        (s = get_side(js, o, "image_size", &c->image_size)) != RV_OK ||
        (s = get_int(js, o, "patch_size", 1, 1024, &c->patch)) != RV_OK ||
        (s = get_int(js, o, "num_channels", 1, 64, &channels)) != RV_OK ||
        (s = get_bool(js, o, "qkv_bias", &qkv_bias)) != RV_OK ||
        (s = parse_act(js, act ? json_string_value(act) : fd->act, &c->act)) != RV_OK)
        return s;
    if (!(eps > 0 && eps <= 1))
        return bad_key(js, "layer_norm_eps", "is not in (0, 1]");
    c->eps = (float)eps;
    if (channels != 3 && fd->family != RV_FAMILY_AST)
        return rv_fail(RV_ERR_UNSUPPORTED, "model folder '%s': %s: num_channels %d; ringvit's "
                       "frames are RGB (3)", js->dir, js->file, channels);
    c->family = fd->family;
    c->qkv_bias = qkv_bias ? RV_VIT_BIAS_Q | RV_VIT_BIAS_K | RV_VIT_BIAS_V : 0;
    c->pos = RV_POS_GRID_BICUBIC;
    c->audio_pos = RV_APOS_NONE;
    c->time_code = 0;
    c->video = 1, c->audio = 0;
    c->cls = 1;
    c->tubelet = 1;
    c->pool = RV_POOL_CLS;
    switch (fd->family) {
    case RV_FAMILY_DINOV2:
        if ((s = get_num(js, o, "mlp_ratio", &mlp_ratio)) != RV_OK ||
            (s = get_bool(js, o, "use_swiglu_ffn", &swiglu)) != RV_OK)
            return s;
        if (swiglu)
            return rv_fail(RV_ERR_UNSUPPORTED, "model folder '%s': %s: use_swiglu_ffn (DINOv2 "
                           "giant's SwiGLU MLP) is not supported; the small, base and large "
                           "DINOv2 models are", js->dir, js->file);
        if (!(mlp_ratio > 0 && mlp_ratio * c->dim < (1 << 20)))
            return bad_key(js, "mlp_ratio", "is out of range");
        c->mlp = (int)(c->dim * mlp_ratio);
        c->layer_scale = 1;
        break;
    case RV_FAMILY_VIDEOMAE:
        h->use_mean_pooling = 1;
        if ((s = get_int(js, o, "tubelet_size", 1, 64, &tubelet)) != RV_OK ||
            (s = get_int(js, o, "num_frames", 1, 1 << 20, &frames)) != RV_OK ||
            (s = get_bool(js, o, "use_mean_pooling", &h->use_mean_pooling)) != RV_OK)
            return s;
        c->tubelet = tubelet;
        /* VideoMAE's attention has q and v biases; its k bias is fixed at zero. */
        c->qkv_bias = qkv_bias ? RV_VIT_BIAS_Q | RV_VIT_BIAS_V : 0;
        c->pos = RV_POS_SINUSOID;
        c->cls = 0;
        c->final_norm = !h->use_mean_pooling;
        c->pool = RV_POOL_MEAN; /* vit_hub.c: MEAN_NORM when fc_norm is stored */
        vit_info_add(&info->notes, &info->nnotes, "positions: the fixed sinusoid table over "
                     "(tubelet, row, column), extended to any number of frames (trained on %d "
                     "frames = %d tubelets)", frames, frames / tubelet);
        break;
    case RV_FAMILY_AST:
        c->patch = 16;
        if ((s = get_int(js, o, "num_mel_bins", 1, 4096, &mels)) != RV_OK ||
            (s = get_int(js, o, "max_length", 1, 1 << 24, &max_length)) != RV_OK ||
            (s = get_int(js, o, "frequency_stride", 1, 128, &fstride)) != RV_OK ||
            (s = get_int(js, o, "time_stride", 1, 4096, &tstride)) != RV_OK ||
            (s = get_int(js, o, "patch_size", 1, 128, &c->patch)) != RV_OK)
            return s;
        if (mels != RV_VIT_MEL_BINS)
            return rv_fail(RV_ERR_UNSUPPORTED, "model folder '%s': %s: num_mel_bins %d; "
                           "ringvit's filterbank has %d bins", js->dir, js->file, mels,
                           RV_VIT_MEL_BINS);
        if (max_length < c->patch)
            return bad_key(js, "max_length", "is shorter than one patch");
        c->video = 0, c->audio = 1;
        c->audio_freq = c->audio_time = c->patch;
        c->audio_fstride = fstride, c->audio_tstride = tstride;
        c->audio_pos = RV_APOS_GRID;
        h->ast_steps = c->audio_grid_t = (max_length - c->patch) / tstride + 1;
        c->pos = RV_POS_NONE;
        c->cls = 2;
        c->pool = RV_POOL_CLS_DIST;
        c->grid = 1;
        c->image_size = 0;
        vit_info_add(&info->notes, &info->nnotes, "audio only: positions on a %d x %d (band x "
                     "time step) grid, resampled along time for recordings over %d fbank "
                     "frames (%.2f s)", rv_vit_bands(c), c->audio_grid_t, max_length,
                     (max_length - 1) * 0.01 + 0.025);
        break;
    case RV_FAMILY_CLIP:
        c->patch_bias = 0;
        c->pre_norm = 1;
        c->final_norm = 0;
        c->pool = RV_POOL_CLS_NORM;
        break;
    default:
        break;
    }
    h->file_tubelet = c->tubelet;
    c->pool_eps = c->family == RV_FAMILY_VIDEOMAE ? 1e-5f : c->eps; /* fc_norm: nn.LayerNorm's */
    if (c->video) {
        if (c->image_size < c->patch)
            return bad_key(js, "image_size", "is smaller than one patch");
        c->grid = c->image_size / c->patch;
        c->image_size = 0; /* the processor decides; rv_vit_frame_size falls back */
    }
    return RV_OK;
}

/* What the task model's config adds: problem_type and id2label (kept for
 * vit_hub_labels: only a classifier in the weights makes it matter, so a base
 * model's unused id2label is never a reason to refuse it). */
static rv_status read_task(const json_src *js, const json_t *o, vit_hub_model *h)
{
    const json_t *pt = json_object_get(o, "problem_type");
    if (pt && !json_is_null(pt)) {
        if (!json_is_string(pt))
            return bad_key(js, "problem_type", "is not a string");
        h->multi_label = strcmp(json_string_value(pt), "multi_label_classification") == 0;
    }
    const json_t *ids = json_object_get(o, "id2label");
    if (ids && !json_is_null(ids))
        h->id2label = json_incref((json_t *)ids);
    return RV_OK;
}

/* A canonical class id ("0", "17"; no sign, no leading zero) below n, else -1. */
static long class_id(const char *key, int n)
{
    if (key[0] < '0' || key[0] > '9' || (key[0] == '0' && key[1]))
        return -1;
    long v = 0;
    for (const char *p = key; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (*p - '0');
        if (v >= n)
            return -1;
    }
    return v;
}

void vit_hub_model_free(vit_hub_model *h)
{
    if (!h)
        return;
    json_decref(h->id2label);
    h->id2label = NULL;
}

rv_status vit_hub_labels(const vit_hub_model *h, const char *head_name, rv_vit_model *m,
                         rv_vit_load_info *info)
{
    const int C = m->cfg.classes;
    const char *dir = h->label;
    rv_status s = RV_OK;
    const char **v = calloc((size_t)C + 1, sizeof *v);
    char *names = NULL;
    if (!v) {
        s = rv_fail(RV_ERR_NOMEM, "model folder '%s': out of memory for %d labels", dir, C);
        goto end;
    }
    if (!h->id2label) { /* transformers' PretrainedConfig names them LABEL_i */
        if (!(names = malloc((size_t)C * 20 + 1))) {
            s = rv_fail(RV_ERR_NOMEM, "model folder '%s': out of memory for %d labels", dir, C);
            goto end;
        }
        for (int i = 0; i < C; i++) {
            snprintf(names + (size_t)i * 20, 20, "LABEL_%d", i);
            v[i] = names + (size_t)i * 20;
        }
        vit_info_add(&info->notes, &info->nnotes, "labels: config.json has no id2label; "
                     "LABEL_0 .. LABEL_%d (transformers' defaults)", C - 1);
        s = rv_vit_set_labels(m, v, C);
        goto end;
    }
    if (!json_is_object(h->id2label)) {
        s = rv_fail(RV_ERR_FORMAT, "model folder '%s': config.json: \"id2label\" is not an "
                    "object of class ids and labels", dir);
        goto end;
    }
    /* Every key a class id with a string; then a label for each of the C rows
     * (a gap names the first id without one); then no id past the rows. */
    const char *key, *extra = NULL;
    json_t *val;
    json_object_foreach(h->id2label, key, val) {
        const long id = class_id(key, RV_VIT_MAX_CLASSES);
        if (id < 0) {
            s = rv_fail(RV_ERR_FORMAT, "model folder '%s': config.json: \"id2label\" key "
                        "'%.64s' is not a class id (0, 1, ...)", dir, key);
            goto end;
        }
        if (!json_is_string(val)) {
            s = rv_fail(RV_ERR_FORMAT, "model folder '%s': config.json: \"id2label\"[\"%s\"] "
                        "is not a string", dir, key);
            goto end;
        }
        if (id < C)
            v[id] = json_string_value(val);
        else if (!extra)
            extra = key;
    }
    for (int i = 0; i < C; i++)
        if (!v[i]) {
            s = rv_fail(RV_ERR_FORMAT, "model folder '%s': config.json: \"id2label\" has no "
                        "label for class %d (the classifier '%s' has %d rows; id2label names "
                        "%zu)", dir, i, head_name, C, json_object_size(h->id2label));
            goto end;
        }
    if (extra) {
        s = rv_fail(RV_ERR_FORMAT, "model folder '%s': config.json: \"id2label\" names class "
                    "%s, beyond the %d rows of the classifier '%s'", dir, extra, C, head_name);
        goto end;
    }
    s = rv_vit_set_labels(m, v, C);
end:
    free(v);
    free(names);
    return s;
}

/* The processor's normalisation and frame side. */
static rv_status read_processor(const json_src *js, const json_t *o, vit_hub_model *h,
                                rv_vit_load_info *info)
{
    rv_vit_config *c = &h->cfg;
    rv_status s;
    if (c->family == RV_FAMILY_AST) {
        double mean = c->audio_mean, std = c->audio_std;
        int rate = 16000, mels = 128, norm = 1;
        if ((s = get_num(js, o, "mean", &mean)) != RV_OK ||
            (s = get_num(js, o, "std", &std)) != RV_OK ||
            (s = get_int(js, o, "sampling_rate", 1, 1 << 24, &rate)) != RV_OK ||
            (s = get_int(js, o, "num_mel_bins", 1, 4096, &mels)) != RV_OK ||
            (s = get_bool(js, o, "do_normalize", &norm)) != RV_OK)
            return s;
        if (rate != 16000 || mels != RV_VIT_MEL_BINS)
            return rv_fail(RV_ERR_UNSUPPORTED, "model folder '%s': %s: %d Hz, %d mel bins; "
                           "ringvit's filterbank is 16000 Hz, %d bins", js->dir, js->file, rate,
                           mels, RV_VIT_MEL_BINS);
        if (!(std > 0))
            return bad_key(js, "std", "is not positive");
        /* (x - mean) / (2 std): without normalisation that is mean 0, std 1/2. */
        c->audio_mean = norm ? (float)mean : 0.0f;
        c->audio_std = norm ? (float)std : 0.5f;
        return RV_OK;
    }
    int crop = 0, size = 0, do_crop = 1, do_norm = 1, do_rescale = 1;
    double rescale = 1.0 / 255.0;
    if ((s = get_float3(js, o, "image_mean", c->mean)) != RV_OK ||
        (s = get_float3(js, o, "image_std", c->std)) != RV_OK ||
        (s = get_side(js, o, "crop_size", &crop)) != RV_OK ||
        (s = get_side(js, o, "size", &size)) != RV_OK ||
        (s = get_bool(js, o, "do_center_crop", &do_crop)) != RV_OK ||
        (s = get_bool(js, o, "do_normalize", &do_norm)) != RV_OK ||
        (s = get_bool(js, o, "do_rescale", &do_rescale)) != RV_OK ||
        (s = get_num(js, o, "rescale_factor", &rescale)) != RV_OK)
        return s;
    if (!do_rescale || fabs(rescale * 255.0 - 1.0) > 1e-6)
        return rv_fail(RV_ERR_UNSUPPORTED, "model folder '%s': %s: pixels rescaled by %g; "
                       "ringvit feeds pixel / 255", js->dir, js->file, do_rescale ? rescale : 1.0);
    if (!do_norm)
        for (int k = 0; k < 3; k++)
            c->mean[k] = 0.0f, c->std[k] = 1.0f;
    for (int k = 0; k < 3; k++)
        if (!(c->std[k] > 0))
            return bad_key(js, "image_std", "holds a value that is not positive");
    int side = do_crop && crop ? crop : size;
    if (side > 0) {
        int fit = side / c->patch * c->patch;
        if (fit < c->patch)
            return rv_fail(RV_ERR_FORMAT, "model folder '%s': %s: frame side %d is smaller "
                           "than the patch %d", js->dir, js->file, side, c->patch);
        if (fit != side)
            vit_info_add(&info->notes, &info->nnotes, "frame side %d (the processor's %d, down "
                         "to a multiple of the patch %d)", fit, side, c->patch);
        c->image_size = fit;
    }
    return RV_OK;
}

rv_status vit_hub_read_config(const char *dir, vit_hub_model *out, rv_vit_load_info *info)
{
    rv_status s = RV_OK;
    json_t *cfg = NULL, *pre = NULL;
    memset(out, 0, sizeof *out);
    snprintf(out->label, sizeof out->label, "%s", dir);
    json_src js = {dir, "config.json"};
    if ((s = load_json(dir, "config.json", 0, &cfg)) != RV_OK)
        goto end;
    const json_t *mt = json_object_get(cfg, "model_type");
    if (!mt || !json_is_string(mt)) {
        s = rv_fail(RV_ERR_FORMAT, "model folder '%s': config.json has no \"model_type\" (not "
                    "a transformers config)", dir);
        goto end;
    }
    const char *type = json_string_value(mt);
    snprintf(out->model_type, sizeof out->model_type, "%s", type);
    const family_defaults *fd = NULL;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(type, known[i].model_type) == 0)
            fd = &known[i];
    if (!fd) {
        s = rv_fail(RV_ERR_UNSUPPORTED, "model folder '%s': model_type '%.64s' is not one "
                    "ringvit runs (vit, dinov2, videomae, audio-spectrogram-transformer, clip, "
                    "clip_vision_model)", dir, type);
        goto end;
    }
    /* Sizes and the family, over ringvit's defaults for everything else. */
    rv_vit_config *c = &out->cfg;
    memset(c, 0, sizeof *c);
    c->tubelet = 1, c->audio_freq = 16, c->audio_time = 16, c->eps = 1e-6f, c->cls = 1;
    rv_vit_family_defaults(c);
    memcpy(c->mean, fd->mean, sizeof c->mean);
    memcpy(c->std, fd->std, sizeof c->std);
    snprintf(c->preset, sizeof c->preset, "%s", rv_vit_family_name(fd->family));
    const json_t *model = cfg;
    if (strcmp(type, "clip") == 0) {
        model = json_object_get(cfg, "vision_config");
        js.file = "config.json (vision_config)";
        if (!model) {
            model = json_object(); /* CLIPConfig's vision defaults */
            json_object_set_new(cfg, "vision_config", (json_t *)model);
        }
        if (!json_is_object(model)) {
            s = rv_fail(RV_ERR_FORMAT, "model folder '%s': config.json: \"vision_config\" is "
                        "not an object", dir);
            goto end;
        }
    }
    if ((s = read_model(&js, model, fd, out, info)) != RV_OK ||
        (s = read_task(&js, cfg, out)) != RV_OK)
        goto end;
    json_src jp = {dir, "preprocessor_config.json"};
    if ((s = load_json(dir, "preprocessor_config.json", 1, &pre)) != RV_OK)
        goto end;
    out->has_preprocessor = pre != NULL;
    if (pre && (s = read_processor(&jp, pre, out, info)) != RV_OK)
        goto end;
    if (!pre)
        vit_info_add(&info->notes, &info->nnotes, "no preprocessor_config.json: the %s "
                     "processor's defaults", rv_vit_family_name(fd->family));
end:
    json_decref(cfg);
    json_decref(pre);
    return s;
}
