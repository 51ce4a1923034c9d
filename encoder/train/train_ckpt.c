/* train_ckpt.c: training checkpoints (rv_ckpt_save / rv_ckpt_load of
 * rv_vit_train.h), one safetensors file holding
 *   every encoder tensor under rv_vit_save's names (vit_tensors.h), so
 *     rv_vit_load reads a checkpoint as a model;
 *   the head's tensors (rv_train_head_write / _read; h may be NULL: none);
 *   optim.m, optim.v (n) F32: AdamW's moments over [model arena | head arena];
 *   metadata "ringvit.config" and, with a classifier head, "ringvit.labels"
 *     (as rv_vit_save), "format": "pt", and
 *   "ringvit.checkpoint": {"step", "data_pos", "seed" (a decimal string: JSON
 *     numbers do not hold 64 bits everywhere), "adam_step", "n", "task",
 *     "classes", "settings" (the caller's JSON text as a string)}.
 * Values are stored as their exact f32 bits, so a round trip is bit-exact and a
 * resumed run continues as the uninterrupted one would.
 *
 * Loading checks everything before changing anything: the config against the
 * model's (naming each field that differs), every tensor's dtype and shape
 * (naming the tensor), the metadata; then the head is read (all or nothing) and
 * only then are the model and the moments overwritten. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rv_safetensors.h"
#include "rv_vit_train.h"
#include "vit_load_util.h"
#include "vit_tensors.h"

#define META_CKPT "ringvit.checkpoint"
#define OPTIM_M "optim.m"
#define OPTIM_V "optim.v"

static int64_t head_floats(const rv_train_head *h)
{
    return h ? (int64_t)h->arena_floats : 0;
}

/* The "ringvit.checkpoint" JSON (malloc'd) or NULL when out of memory. */
static char *ckpt_json(const rv_train_head *h, const rv_adamw *o, const rv_ckpt_info *info)
{
    char seed[24];
    snprintf(seed, sizeof seed, "%" PRIu64, info->seed);
    json_t *j = json_pack("{s:I, s:I, s:s, s:I, s:I, s:s, s:i, s:s}", "step",
                          (json_int_t)info->step, "data_pos", (json_int_t)info->data_pos,
                          "seed", seed, "adam_step", (json_int_t)o->step, "n",
                          (json_int_t)o->n, "task", h ? rv_task_name(h->task) : "none",
                          "classes", h && h->task == RV_TASK_CLASSIFY ? h->classes : 0,
                          "settings", info->settings);
    if (!j)
        return NULL;
    char *text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(j);
    return text;
}

rv_status rv_ckpt_save(const char *path, const rv_vit_model *m, const rv_train_head *h,
                       const rv_adamw *o, const rv_ckpt_info *info)
{
    rv_status s = RV_OK;
    rv_st_writer *w = NULL;
    vit_tensor *list = NULL;
    float *video = NULL; /* (D, 3, T, P, P) the file's layout */
    char *config = NULL, *ckpt = NULL, *labels = NULL;
    if (!path || !m || !o || !info) {
        s = rv_fail(RV_ERR_INVALID, "rv_ckpt_save: NULL argument");
        goto end;
    }
    const int64_t n = rv_vit_params(m) + head_floats(h);
    if (o->n != n) {
        s = rv_fail(RV_ERR_INVALID,
                    "checkpoint '%s': the optimizer holds %" PRId64 " parameters, but the "
                    "model (%" PRId64 ") and head (%" PRId64 ") hold %" PRId64,
                    path, o->n, rv_vit_params(m), head_floats(h), n);
        goto end;
    }
    if (memchr(info->settings, 0, sizeof info->settings) == NULL) {
        s = rv_fail(RV_ERR_INVALID, "checkpoint '%s': settings text is not terminated within "
                                    "%zu bytes",
                    path, sizeof info->settings);
        goto end;
    }
    json_t *probe = json_string(info->settings); /* NULL for text that is not UTF-8 */
    if (!probe) {
        s = rv_fail(RV_ERR_INVALID, "checkpoint '%s': settings text is not valid UTF-8", path);
        goto end;
    }
    json_decref(probe);
    const rv_vit_config *c = &m->cfg;
    if ((s = rv_vit_config_check(c)) != RV_OK)
        goto end;
    const int count = vit_tensor_count(c);
    list = malloc((size_t)count * sizeof *list);
    config = rv_vit_config_to_json(c);
    ckpt = ckpt_json(h, o, info);
    labels = c->head != RV_HEAD_NONE ? vit_labels_json(m) : NULL;
    if (!list || !config || !ckpt || (c->head != RV_HEAD_NONE && !labels)) {
        s = rv_fail(RV_ERR_NOMEM, "saving checkpoint '%s': out of memory", path);
        goto end;
    }
    vit_tensor_list(m, list);
    if ((s = rv_st_writer_new(&w)) != RV_OK)
        goto end;
    for (int i = 0; i < count; i++) {
        const float *data = list[i].data;
        if ((s = vit_floats_finite("saving checkpoint", path, list[i].name, data, list[i].numel)) != RV_OK)
            goto end;
        if (list[i].layout == VIT_VIDEO) {
            video = malloc((size_t)list[i].numel * sizeof *video);
            if (!video) {
                s = rv_fail(RV_ERR_NOMEM, "saving checkpoint '%s': out of memory", path);
                goto end;
            }
            vit_video_to_file(m->video_w, c->dim, c->tubelet, c->patch, video);
            data = video;
        }
        if ((s = rv_st_writer_add(w, list[i].name, RV_F32, list[i].ndim, list[i].shape,
                                  data)) != RV_OK)
            goto end;
    }
    if (h && (s = rv_train_head_write(h, w)) != RV_OK)
        goto end;
    const int64_t shape[1] = {n};
    if ((s = rv_st_writer_add(w, OPTIM_M, RV_F32, 1, shape, o->m)) != RV_OK ||
        (s = rv_st_writer_add(w, OPTIM_V, RV_F32, 1, shape, o->v)) != RV_OK ||
        (s = rv_st_writer_meta(w, RV_VIT_META_CONFIG, config)) != RV_OK ||
        (s = rv_st_writer_meta(w, "format", "pt")) != RV_OK ||
        (s = rv_st_writer_meta(w, META_CKPT, ckpt)) != RV_OK ||
        (labels && (s = rv_st_writer_meta(w, RV_VIT_META_LABELS, labels)) != RV_OK))
        goto end;
    s = rv_st_writer_write(w, path);
end:
    rv_st_writer_free(&w);
    free(video);
    free(list);
    free(config);
    free(ckpt);
    free(labels);
    return s;
}

/* The file's config against the model's: every field that differs is named. */
static rv_status check_config(const char *lb, const rv_vit_config *f, const rv_vit_config *c)
{
    char diff[512] = "";
    size_t len = 0;
#define FIELD(name)                                                                        \
    if (f->name != c->name && len < sizeof diff)                                           \
        len += (size_t)snprintf(diff + len, sizeof diff - len, "%s%s %d (model %d)",        \
                                len ? ", " : "", #name, (int)f->name, (int)c->name);
    FIELD(dim)
    FIELD(layers)
    FIELD(heads)
    FIELD(mlp)
    FIELD(tubelet)
    FIELD(patch)
    FIELD(grid)
    FIELD(audio_freq)
    FIELD(audio_time)
    FIELD(cls)
    FIELD(head)
    FIELD(classes)
#undef FIELD
    if (f->eps != c->eps && len < sizeof diff)
        len += (size_t)snprintf(diff + len, sizeof diff - len, "%seps %g (model %g)",
                                len ? ", " : "", (double)f->eps, (double)c->eps);
    if (len)
        return rv_fail(RV_ERR_FORMAT,
                       "checkpoint '%s': its model config (metadata '%s') differs from the "
                       "model's: %s",
                       lb, RV_VIT_META_CONFIG, diff);
    return RV_OK;
}

/* The largest step, data position or optimizer step a checkpoint may hold: 2^40,
 * far beyond any run, and small enough that step x batch stays in 64 bits. */
#define CKPT_MAX_COUNT (INT64_C(1) << 40)

/* A JSON integer member (>= 0) of the checkpoint metadata. */
static rv_status get_int(const char *lb, json_t *j, const char *key, int64_t *out)
{
    json_t *v = json_object_get(j, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return rv_fail(RV_ERR_FORMAT,
                       "checkpoint '%s': metadata '" META_CKPT "' lacks a non-negative "
                       "integer '%s'",
                       lb, key);
    *out = (int64_t)json_integer_value(v);
    return RV_OK;
}

/* Parses the "ringvit.checkpoint" metadata into info and *adam_step, checking
 * n, task and classes against what the caller holds. */
static rv_status parse_ckpt(const char *lb, const char *text, const rv_train_head *h,
                            int64_t n, rv_ckpt_info *info, int64_t *adam_step)
{
    rv_status s = RV_OK;
    json_error_t err;
    json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, &err);
    if (!json_is_object(j)) {
        s = rv_fail(RV_ERR_FORMAT, "checkpoint '%s': metadata '" META_CKPT "' is not a JSON "
                                   "object: %s",
                    lb, j ? "another JSON value" : err.text);
        goto end;
    }
    int64_t file_n = 0;
    if ((s = get_int(lb, j, "step", &info->step)) != RV_OK ||
        (s = get_int(lb, j, "data_pos", &info->data_pos)) != RV_OK ||
        (s = get_int(lb, j, "adam_step", adam_step)) != RV_OK ||
        (s = get_int(lb, j, "n", &file_n)) != RV_OK)
        goto end;
    /* Counters a run can reach; larger ones would overflow the arithmetic done on
     * them (step x batch, adam_step + 1). */
    if (info->step > CKPT_MAX_COUNT || info->data_pos > CKPT_MAX_COUNT ||
        *adam_step > CKPT_MAX_COUNT) {
        s = rv_fail(RV_ERR_FORMAT,
                    "checkpoint '%s': metadata '" META_CKPT "' has step %" PRId64 ", data_pos "
                    "%" PRId64 ", adam_step %" PRId64 "; each must be at most %" PRId64,
                    lb, info->step, info->data_pos, *adam_step, (int64_t)CKPT_MAX_COUNT);
        goto end;
    }
    const char *seed = json_string_value(json_object_get(j, "seed"));
    char *endp = NULL;
    errno = 0;
    unsigned long long sv = seed ? strtoull(seed, &endp, 10) : 0;
    if (!seed || !seed[0] || seed[0] < '0' || seed[0] > '9' || *endp || errno == ERANGE) {
        s = rv_fail(RV_ERR_FORMAT,
                    "checkpoint '%s': metadata '" META_CKPT "' lacks 'seed' as a decimal "
                    "string of a 64-bit unsigned number",
                    lb);
        goto end;
    }
    info->seed = (uint64_t)sv;
    const char *task = json_string_value(json_object_get(j, "task"));
    const char *want = h ? rv_task_name(h->task) : "none";
    if (!task || strcmp(task, want) != 0) {
        s = rv_fail(RV_ERR_FORMAT, "checkpoint '%s': its head is '%.32s'; the caller's is '%s'",
                    lb, task ? task : "(missing)", want);
        goto end;
    }
    int64_t classes = 0;
    const int64_t want_cl = h && h->task == RV_TASK_CLASSIFY ? h->classes : 0;
    if ((s = get_int(lb, j, "classes", &classes)) != RV_OK)
        goto end;
    if (classes != want_cl) {
        s = rv_fail(RV_ERR_FORMAT,
                    "checkpoint '%s': its head has %" PRId64 " classes (tensor "
                    "'heads.head.weight'); the caller's has %" PRId64,
                    lb, classes, want_cl);
        goto end;
    }
    /* After the head checks, which name the cause of a different n. */
    if (file_n != n) {
        s = rv_fail(RV_ERR_FORMAT,
                    "checkpoint '%s': metadata '" META_CKPT "' says n %" PRId64 " optimizer "
                    "parameters; the model and head hold %" PRId64,
                    lb, file_n, n);
        goto end;
    }
    const char *settings = json_string_value(json_object_get(j, "settings"));
    if (!settings || json_string_length(json_object_get(j, "settings")) != strlen(settings) ||
        strlen(settings) >= sizeof info->settings) {
        s = rv_fail(RV_ERR_FORMAT,
                    "checkpoint '%s': metadata '" META_CKPT "' lacks 'settings' as a string "
                    "shorter than %zu bytes",
                    lb, sizeof info->settings);
        goto end;
    }
    memset(info->settings, 0, sizeof info->settings);
    memcpy(info->settings, settings, strlen(settings));
end:
    json_decref(j);
    return s;
}

rv_status rv_ckpt_load(const char *path, rv_vit_model *m, rv_train_head *h, rv_adamw *o,
                       rv_ckpt_info *info)
{
    rv_status s = RV_OK;
    rv_safetensors *st = NULL;
    vit_tensor *list = NULL;
    const rv_st_tensor **found = NULL; /* (count) the file's tensor of each list entry */
    float *video = NULL;               /* (D, 3, T, P, P) the file's video weight */
    if (!path || !m || !o || !info) {
        s = rv_fail(RV_ERR_INVALID, "rv_ckpt_load: NULL argument");
        goto end;
    }
    const int64_t n = rv_vit_params(m) + head_floats(h);
    if (o->n != n) {
        s = rv_fail(RV_ERR_INVALID,
                    "loading checkpoint '%s': the optimizer holds %" PRId64 " parameters, "
                    "but the model (%" PRId64 ") and head (%" PRId64 ") hold %" PRId64,
                    path, o->n, rv_vit_params(m), head_floats(h), n);
        goto end;
    }
    if ((s = rv_st_open(path, &st)) != RV_OK)
        goto end;
    const char *lb = rv_st_label(st);
    const rv_vit_config *c = &m->cfg;
    const char *meta = rv_st_meta(st, RV_VIT_META_CONFIG);
    if (!meta) {
        s = rv_fail(RV_ERR_FORMAT, "checkpoint '%s': no '%s' metadata (not a ringvit "
                                   "checkpoint?)",
                    lb, RV_VIT_META_CONFIG);
        goto end;
    }
    rv_vit_config fc;
    if ((s = rv_vit_config_from_json(meta, &fc)) != RV_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", rv_last_error());
        s = rv_fail(RV_ERR_FORMAT, "checkpoint '%s': metadata '%s': %s", lb,
                    RV_VIT_META_CONFIG, msg);
        goto end;
    }
    if ((s = check_config(lb, &fc, c)) != RV_OK)
        goto end;
    const char *ck = rv_st_meta(st, META_CKPT);
    if (!ck) {
        s = rv_fail(RV_ERR_FORMAT, "checkpoint '%s': no '" META_CKPT "' metadata (a model "
                                   "file, not a training checkpoint?)",
                    lb);
        goto end;
    }
    rv_ckpt_info got;
    int64_t adam_step = 0;
    memset(&got, 0, sizeof got);
    if ((s = parse_ckpt(lb, ck, h, n, &got, &adam_step)) != RV_OK)
        goto end;

    /* Every tensor checked (dtype F32, exact shape) before anything is copied. */
    const int count = vit_tensor_count(c);
    list = malloc((size_t)count * sizeof *list);
    found = malloc((size_t)count * sizeof *found);
    if (!list || !found) {
        s = rv_fail(RV_ERR_NOMEM, "loading checkpoint '%s': out of memory", lb);
        goto end;
    }
    vit_tensor_list(m, list);
    for (int i = 0; i < count; i++)
        if ((s = rv_st_get(st, list[i].name, RV_F32, list[i].ndim, list[i].shape,
                           &found[i])) != RV_OK)
            goto end;
    const rv_st_tensor *tm, *tv;
    const int64_t shape[1] = {n};
    if ((s = rv_st_get(st, OPTIM_M, RV_F32, 1, shape, &tm)) != RV_OK ||
        (s = rv_st_get(st, OPTIM_V, RV_F32, 1, shape, &tv)) != RV_OK)
        goto end;
    int vidx = -1; /* the video weight's entry (none in an audio-only family) */
    for (int i = 0; i < count; i++)
        if (list[i].layout == VIT_VIDEO)
            vidx = i;
    if (vidx >= 0 && !(video = malloc(found[vidx]->nbytes))) {
        s = rv_fail(RV_ERR_NOMEM, "loading checkpoint '%s': out of memory", lb);
        goto end;
    }
    if (h && (s = rv_train_head_read(h, st)) != RV_OK) /* leaves h as it was on failure */
        goto end;

    /* Nothing can fail from here on. Data are little-endian F32, maybe unaligned. */
    for (int i = 0; i < count; i++) {
        if (list[i].layout == VIT_VIDEO) {
            memcpy(video, found[i]->data, found[i]->nbytes);
            vit_video_from_file(video, c->dim, c->tubelet, c->patch, m->video_w);
        } else {
            memcpy(list[i].data, found[i]->data, found[i]->nbytes);
        }
    }
    memcpy(o->m, tm->data, tm->nbytes);
    memcpy(o->v, tv->data, tv->nbytes);
    o->step = adam_step;
    *info = got;
end:
    free(video);
    free(found);
    free(list);
    rv_st_free(&st);
    return s;
}
