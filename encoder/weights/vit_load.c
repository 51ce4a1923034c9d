/* vit_load.c: reads an encoder's weights from safetensors (rv_vit_load).
 *
 * The config comes from the "ringvit.config" metadata when present, else from
 * the tensor shapes (a torchvision VisionTransformer file: D and P from
 * conv_proj.weight, layers from the names, M from mlp.0, grid from the
 * pos_embedding length - 1, heads D / 64). Then every tensor of vit_tensors.h is
 * looked up and checked (dtype F32, F16 or BF16; exact shape) before its values
 * are converted into the model: torchvision names are required, ringvit.* ones
 * are zero when absent. A 2D patch weight is inflated to the tubelet asked for
 * (each frame gets weight / T). The config is checked against the file before
 * the model is allocated (its required tensors must fit in the file's data and
 * be there with their shapes), so sizes in the metadata are never trusted; a
 * NaN or infinite weight is refused naming the tensor and index. Every failure
 * is RV_ERR_FORMAT naming the file and the tensor (RV_ERR_INVALID for a request
 * the file cannot meet, such as a head count that does not divide D). A
 * classifier head (the config's head) needs its ringvit.head* tensors, whatever
 * the family, and its labels (metadata "ringvit.labels", C strings); a finetune
 * classify output's head (heads.head.*, ringvit.classes) is the model's head.
 * Unknown tensors (a torchvision classifier, ...)
 * are ignored with one warning; the training state a checkpoint adds
 * (rv_vit_train.h: optim.*, ringvit.mask_token, ringvit.mae_*, and heads.* in a
 * file ringvit wrote, i.e. one with the config metadata) is known and ignored
 * silently, so a checkpoint loads as a model. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rv_safetensors.h"
#include "rv_vit.h"
#include "vit_hub.h"
#include "vit_internal.h"
#include "st_convert.h"
#include "vit_load_util.h"
#include "vit_tensors.h"

#define MAX_LAYER_INDEX 1024
/* A finetune classify output's head (rv_vit_train.h) and class names. */
#define FT_HEAD_W "heads.head.weight"
#define FT_HEAD_B "heads.head.bias"
#define FT_CLASSES "ringvit.classes"

/* The tensor called name; missing is an error naming it. */
static rv_status need(const rv_safetensors *st, const char *name, const rv_st_tensor **out)
{
    *out = rv_st_find(st, name);
    if (!*out)
        return rv_fail(RV_ERR_FORMAT, "weights file '%s': missing tensor '" VIT_NAME_FMT "'",
                       rv_st_label(st), name);
    return RV_OK;
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
                        "weights file '%s': tensor '" VIT_NAME_FMT "' names layer %ld; at most %d "
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
    if ((s = vit_extent(st, video, 0, &c->dim)) != RV_OK ||
        (s = vit_extent(st, video, video->ndim - 1, &c->patch)) != RV_OK)
        return s;
    if (video->ndim == 5 && (s = vit_extent(st, video, 2, &c->tubelet)) != RV_OK)
        return s;
    if (layers < 1)
        return rv_fail(RV_ERR_FORMAT, "weights file '%s': missing tensor '" VIT_LAYER_PREFIX
                                      "0.ln_1.weight' (no encoder layers)",
                       lb);
    c->layers = layers;
    if ((s = need(st, VIT_LAYER_PREFIX "0.mlp.0.weight", &t)) != RV_OK ||
        (s = vit_check_dtype(st, t)) != RV_OK)
        return s;
    if (t->ndim != 2)
        return rv_fail(RV_ERR_FORMAT,
                       "weights file '%s': tensor '%s' has %d dimensions; expected 2 (M, D)",
                       lb, t->name, t->ndim);
    if ((s = vit_extent(st, t, 0, &c->mlp)) != RV_OK)
        return s;
    if ((s = need(st, "encoder.pos_embedding", &t)) != RV_OK ||
        (s = vit_check_dtype(st, t)) != RV_OK)
        return s;
    if (t->ndim != 3 || t->shape[1] < 2 || t->shape[1] > VIT_MAX_EXTENT)
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
        if ((s = vit_check_dtype(st, t)) != RV_OK)
            return s;
        if (t->ndim != 4 || t->shape[1] != 1)
            return rv_fail(RV_ERR_FORMAT,
                           "weights file '%s': tensor 'ringvit.audio_proj.weight' must be "
                           "(D, 1, F, W)",
                           lb);
        if ((s = vit_extent(st, t, 2, &c->audio_freq)) != RV_OK ||
            (s = vit_extent(st, t, 3, &c->audio_time)) != RV_OK)
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
    rv_vit_family_defaults(c);
    /* Modalities follow the weights: a torchvision file is an image model, so
     * its recordings are embedded without audio (whose tensors would be zero). */
    c->audio = rv_st_find(st, "ringvit.audio_proj.weight") != NULL;
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
static int training_state(const char *name, int ringvit_file, int ft)
{
    return strncmp(name, "optim.", 6) == 0 || strcmp(name, "ringvit.mask_token") == 0 ||
           strncmp(name, "ringvit.mae_", 12) == 0 ||
           (ringvit_file && strncmp(name, "heads.", 6) == 0) ||
           (ft && strncmp(name, "ringvit.head", 12) == 0);
}

/* A finetune classify output (rv_vit_train.h: heads.head.weight (C, D),
 * heads.head.bias (C), the class names as metadata ringvit.classes) is a model
 * with that head: W mean + b, the logits finetune trained. It replaces a head the
 * encoder came with (whose ringvit.head* tensors are then ignored). *ft: 1 when
 * so. */
static rv_status finetune_head(const rv_safetensors *st, rv_vit_config *c, int *ft,
                               rv_vit_load_info *info)
{
    const rv_st_tensor *w = rv_st_find(st, FT_HEAD_W);
    *ft = 0;
    if (!w || !rv_st_meta(st, FT_CLASSES))
        return RV_OK;
    rv_status s = vit_check_dtype(st, w);
    if (s != RV_OK)
        return s;
    if (w->ndim != 2 || w->shape[1] != c->dim || w->shape[0] < 1 ||
        w->shape[0] > RV_VIT_MAX_CLASSES) {
        char got[160];
        vit_format_shape(got, sizeof got, w->ndim, w->shape);
        return rv_fail(RV_ERR_FORMAT, "weights file '%s': tensor '" FT_HEAD_W "' has shape %s; "
                       "a finetune classify head is (classes, %d)", rv_st_label(st), got,
                       c->dim);
    }
    if (c->head != RV_HEAD_NONE)
        vit_info_add(&info->notes, &info->nnotes, "the finetune classify head (%lld classes) "
                     "replaces the model's %s head", (long long)w->shape[0],
                     rv_vit_head_name(c->head));
    c->head = RV_HEAD_MEAN;
    c->classes = (int)w->shape[0];
    c->multi_label = 0;
    *ft = 1;
    vit_info_add(&info->notes, &info->nnotes, "logits = %s, %d classes (" FT_CLASSES ")",
                 rv_vit_head_text(RV_HEAD_MEAN), c->classes);
    return RV_OK;
}

/* Copies the checked file tensor t into entry e of the model. */
static rv_status read_tensor(const rv_st_tensor *t, const vit_tensor *e,
                             const rv_vit_config *c, int file_T, const char *lb)
{
    if (e->layout == VIT_PLAIN) {
        st_to_f32(t, e->data);
        return RV_OK;
    }
    return vit_read_video(t, c, file_T, e->data, lb);
}

rv_status rv_vit_load(const char *path, const rv_vit_load_opts *opts, rv_vit_model **out)
{
    return rv_vit_load_ex(path, opts, out, NULL);
}

/* The patch weight of a ringvit or torchvision file: 2D (torchvision's) or the
 * tubelet one, not both; *video NULL when there is none. */
static rv_status find_video(const rv_safetensors *st, const rv_st_tensor **video, int *file_T)
{
    const char *lb = rv_st_label(st);
    const rv_st_tensor *v2 = rv_st_find(st, VIT_VIDEO_2D), *v3 = rv_st_find(st, VIT_VIDEO_3D);
    *video = v2 ? v2 : v3;
    *file_T = 1;
    if (v2 && v3)
        return rv_fail(RV_ERR_FORMAT,
                       "weights file '%s' holds both '" VIT_VIDEO_2D "' and '" VIT_VIDEO_3D
                       "'; which patch weight to use is ambiguous",
                       lb);
    if (!*video)
        return RV_OK;
    rv_status s = vit_check_dtype(st, *video);
    if (s != RV_OK)
        return s;
    if (v2 ? (v2->ndim != 4 || v2->shape[1] != RV_VIT_CHANNELS || v2->shape[2] != v2->shape[3])
           : (v3->ndim != 5 || v3->shape[1] != RV_VIT_CHANNELS || v3->shape[3] != v3->shape[4])) {
        char got[160];
        vit_format_shape(got, sizeof got, (*video)->ndim, (*video)->shape);
        return rv_fail(RV_ERR_FORMAT, "weights file '%s': tensor '%s' has shape %s; expected %s",
                       lb, (*video)->name, got, v2 ? "(D, 3, P, P)" : "(D, 3, T, P, P)");
    }
    return v3 ? vit_extent(st, v3, 2, file_T) : RV_OK;
}

/* The config of a file from its ringvit.config metadata, checked against the
 * patch weight and the layers the file names. */
static rv_status config_from_meta(const rv_safetensors *st, const char *meta,
                                  const rv_st_tensor *video, int file_T, int layers,
                                  rv_vit_config *c)
{
    const char *lb = rv_st_label(st);
    rv_status s = rv_vit_config_from_json(meta, c);
    if (s != RV_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", rv_last_error());
        return rv_fail(RV_ERR_FORMAT, "weights file '%s': metadata '%s': %s", lb,
                       RV_VIT_META_CONFIG, msg);
    }
    if (c->video && !video)
        return rv_fail(RV_ERR_FORMAT,
                       "weights file '%s': missing tensor '" VIT_VIDEO_2D "' (or '" VIT_VIDEO_3D
                       "')", lb);
    if (video && c->tubelet != file_T)
        return rv_fail(RV_ERR_FORMAT,
                       "weights file '%s': tensor '%s' holds tubelet %d, but the %s metadata "
                       "says tubelet %d",
                       lb, video->name, file_T, RV_VIT_META_CONFIG, c->tubelet);
    if (layers > c->layers)
        return rv_fail(RV_ERR_FORMAT,
                       "weights file '%s': tensor '" VIT_LAYER_PREFIX "%d.*' is beyond the %d "
                       "layer%s the %s metadata says",
                       lb, layers - 1, c->layers, c->layers == 1 ? "" : "s", RV_VIT_META_CONFIG);
    return RV_OK;
}

/* The file name, rank and shape entry e of a model of config c has in a file
 * whose patch weight is video (tubelet file_T): e's own, except the patch
 * weight's, which keeps the file's name and tubelet (before any inflation), and
 * with ft the head's, a finetune classify head's heads.head.* names. */
static const char *file_shape(const vit_tensor *e, const rv_vit_config *c,
                              const rv_st_tensor *video, int file_T, int ft, int *ndim,
                              int64_t shape[5])
{
    *ndim = e->ndim;
    memcpy(shape, e->shape, 5 * sizeof *shape);
    if (ft && (e->role == VR_HEAD_W || e->role == VR_HEAD_B)) /* finetune's own names */
        return e->role == VR_HEAD_W ? FT_HEAD_W : FT_HEAD_B;
    if (e->layout != VIT_VIDEO)
        return e->name;
    *ndim = file_T == 1 && strcmp(video->name, VIT_VIDEO_2D) == 0 ? 4 : 5;
    int64_t s4[4] = {c->dim, RV_VIT_CHANNELS, c->patch, c->patch};
    int64_t s5[5] = {c->dim, RV_VIT_CHANNELS, file_T, c->patch, c->patch};
    memcpy(shape, *ndim == 4 ? s4 : s5, (size_t)*ndim * sizeof *shape);
    return video->name;
}

/* Checks config c against the file before the model is allocated: the tensors
 * it requires must fit in the file's tensor data, and each of them must be
 * there with its dtype and shape. Without this, sizes from the metadata were
 * trusted: a 352-byte file could make the loader allocate and zero-fill
 * gigabytes before finding that no tensor matches. */
static rv_status check_against_file(const rv_safetensors *st, const rv_vit_config *c,
                                    const rv_st_tensor *video, int file_T, int ft,
                                    int all_required, const char *source, const char *why)
{
    rv_status s = RV_OK;
    const char *lb = rv_st_label(st);
    const int n = vit_tensor_count(c);
    vit_tensor *list = malloc((size_t)n * sizeof *list);
    rv_vit_model *probe = calloc(1, sizeof *probe); /* no arena: names and shapes only */
    if (!list || !probe) {
        s = rv_fail(RV_ERR_NOMEM, "loading '%s': out of memory", lb);
        goto end;
    }
    probe->cfg = *c;
    vit_tensor_list(probe, list);
    uint64_t need = 0, have = 0;
    for (int k = 0; k < rv_st_count(st); k++)
        have += rv_st_at(st, k)->nbytes;
    for (int i = 0; i < n; i++) {
        int ndim;
        int64_t shape[5], numel = 1;
        file_shape(&list[i], c, video, file_T, ft, &ndim, shape);
        for (int d = 0; d < ndim; d++)
            numel *= shape[d];
        if (list[i].torchvision || all_required || vit_is_head_role(list[i].role))
            need += (uint64_t)numel;
    }
    /* The tensors present first (a shape naming the tensor says most), then the
     * size, then what is missing (the size says more about a config bomb). */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            char what[4200];
            snprintf(what, sizeof what, "weights file '%.4000s'", lb);
            if ((s = vit_check_fits(what, source, c, need, have)) != RV_OK)
                goto end;
        }
        for (int i = 0; i < n; i++) {
            int ndim;
            int64_t shape[5];
            const char *name = file_shape(&list[i], c, video, file_T, ft, &ndim, shape);
            const rv_st_tensor *t = rv_st_find(st, name);
            if (pass == 0 && t && (s = vit_check_tensor(st, t, ndim, shape, why)) != RV_OK)
                goto end;
            if (pass == 1 && !t &&
                (list[i].torchvision || all_required || vit_is_head_role(list[i].role))) {
                s = rv_fail(RV_ERR_FORMAT, "weights file '%s': missing tensor '%s'%s", lb, name,
                            why);
                goto end;
            }
        }
    }
end:
    free(probe);
    free(list);
    return s;
}

rv_status rv_vit_load_ex(const char *path, const rv_vit_load_opts *opts, rv_vit_model **out,
                         rv_vit_load_info *info)
{
    rv_status s = RV_OK;
    rv_safetensors *st = NULL;
    rv_vit_model *m = NULL;
    vit_tensor *list = NULL;
    unsigned char *used = NULL; /* (file tensors) 1: read into the model */
    rv_vit_load_info scratch;
    if (!info) {
        memset(&scratch, 0, sizeof scratch);
        info = &scratch;
    } else {
        memset(info, 0, sizeof *info);
    }
    if (!out) {
        s = rv_fail(RV_ERR_INVALID, "rv_vit_load: out is NULL");
        goto end;
    }
    *out = NULL;
    if (!path) {
        s = rv_fail(RV_ERR_INVALID, "rv_vit_load: path is NULL");
        goto end;
    }
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        s = vit_hub_load(path, opts, out, info);
        goto end;
    }
    if ((s = rv_st_open(path, &st)) != RV_OK)
        goto end;
    const char *lb = rv_st_label(st);
    snprintf(info->weights, sizeof info->weights, "%s", path);
    info->file_tensors = rv_st_count(st);

    const rv_st_tensor *video = NULL;
    int file_T = 1, layers = 0;
    if ((s = find_video(st, &video, &file_T)) != RV_OK || (s = scan_layers(st, &layers)) != RV_OK)
        goto end;
    rv_vit_config c;
    const char *meta = rv_st_meta(st, RV_VIT_META_CONFIG);
    const char *why = meta ? " (as the ringvit.config metadata says)" : "";
    snprintf(info->format, sizeof info->format, "%s", meta ? "ringvit" : "torchvision");
    if (meta) {
        if ((s = config_from_meta(st, meta, video, file_T, layers, &c)) != RV_OK)
            goto end;
    } else {
        if (!video) {
            s = rv_fail(RV_ERR_FORMAT,
                        "weights file '%s': missing tensor '" VIT_VIDEO_2D "' (or '" VIT_VIDEO_3D
                        "'); not a torchvision ViT or a ringvit model",
                        lb);
            goto end;
        }
        if ((s = config_from_shapes(st, video, layers, opts ? opts->heads : 0, &c)) != RV_OK)
            goto end;
        if (!c.audio)
            vit_info_add(&info->notes, &info->nnotes, "video only: a torchvision image ViT "
                         "(no ringvit.audio_proj.weight)");
    }
    int ft = 0;
    if (meta && (s = finetune_head(st, &c, &ft, info)) != RV_OK)
        goto end;
    /* A model saved by ringvit for another family has every tensor it needs;
     * ringvit's own may lack its ringvit.* tensors (zero: a torchvision file). */
    const int all_required = c.family != RV_FAMILY_RINGVIT;
    if ((s = vit_apply_load_opts(opts, lb, file_T, video ? video->name : NULL, &c)) != RV_OK ||
        (s = check_against_file(st, &c, video, file_T, ft, all_required,
                                meta ? RV_VIT_META_CONFIG " metadata" : "tensor shapes",
                                why)) != RV_OK ||
        (s = rv_vit_new(&c, &m)) != RV_OK)
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
        int ndim;
        int64_t shape[5];
        const char *name = file_shape(e, &c, video, file_T, ft, &ndim, shape);
        const rv_st_tensor *t = rv_st_find(st, name);
        if (!t) {
            if (e->torchvision || all_required || vit_is_head_role(e->role)) {
                s = rv_fail(RV_ERR_FORMAT, "weights file '%s': missing tensor '%s'", lb, name);
                goto end;
            }
            vit_info_add(&info->zeroed, &info->nzeroed, "%s", name); /* ringvit.*: zero */
            continue;
        }
        if ((s = vit_check_tensor(st, t, ndim, shape, why)) != RV_OK ||
            (s = vit_check_finite(st, t)) != RV_OK ||
            (s = read_tensor(t, e, &c, file_T, lb)) != RV_OK)
            goto end;
        for (int k = 0; k < rv_st_count(st); k++)
            if (rv_st_at(st, k) == t)
                used[k] = 1;
        info->used++;
    }
    for (int k = 0; k < rv_st_count(st); k++) {
        const char *name = rv_st_at(st, k)->name;
        if (used[k])
            continue;
        if (training_state(name, meta != NULL, ft))
            vit_info_add(&info->ignored, &info->nignored, "%s", name);
        else
            vit_info_add(&info->unknown, &info->nunknown, "%s", name);
    }
    char what[4200];
    snprintf(what, sizeof what, "weights file '%.4000s'", lb);
    if (c.head != RV_HEAD_NONE &&
        (s = vit_labels_from_json(what, ft ? FT_CLASSES : RV_VIT_META_LABELS,
                                  rv_st_meta(st, ft ? FT_CLASSES : RV_VIT_META_LABELS),
                                  m)) != RV_OK)
        goto end;
    vit_warn_unknown(what, info);
    *out = m;
    m = NULL;
end:
    free(used);
    free(list);
    rv_vit_free(&m);
    rv_st_free(&st);
    if (info == &scratch)
        rv_vit_load_info_free(&scratch);
    return s;
}
