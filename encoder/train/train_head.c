/* train_head.c: the trainable weights beside the encoder (rv_vit_train.h): the
 * task names, the head of each task in one arena, its fresh weights from a
 * seed, and its tensors in a safetensors file.
 *
 * Arena order (no padding, so the optimizer's flat vector [model | head] counts
 * exactly the head's parameters):
 *   classify: cls_w (C, D), cls_b (C)
 *   mae:      mask_token (D), mae_video_w (video_dim, D), mae_video_b (video_dim),
 *             mae_audio_w (audio_dim, D), mae_audio_b (audio_dim)
 * The other task's pointers are NULL and its sizes 0.
 *
 * The generator is vit_init.c's (vit_rng.h), but the seed is first mixed with
 * a constant of its own, so a head initialised with the same
 * seed as its encoder does not repeat the encoder's stream. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rv_vit_train.h"
#include "vit_rng.h"

#define MAX_CLASSES (1 << 24)
#define HEAD_SEED_SALT 0x6865616473656564ull /* "headseed" */
#define ARENA_ALIGN 64

/* ---- task names --------------------------------------------------------------------- */

const char *rv_task_name(rv_task t)
{
    switch (t) {
    case RV_TASK_CLASSIFY:
        return "classify";
    case RV_TASK_MAE:
        return "mae";
    }
    return "?";
}

rv_status rv_task_parse(const char *text, rv_task *out)
{
    if (!out)
        return rv_fail(RV_ERR_INVALID, "rv_task_parse: out is NULL");
    if (text && strcmp(text, "classify") == 0) {
        *out = RV_TASK_CLASSIFY;
        return RV_OK;
    }
    if (text && strcmp(text, "mae") == 0) {
        *out = RV_TASK_MAE;
        return RV_OK;
    }
    return rv_fail(RV_ERR_INVALID, "unknown task '%.64s' (expected classify or mae)",
                   text ? text : "(null)");
}

/* ---- the head's tensors ------------------------------------------------------------- */

typedef struct head_tensor {
    const char *name;
    float *data;
    int ndim;
    int64_t shape[2];
} head_tensor;

/* The task's tensors of h in arena order (at most 5); returns their count. */
static int head_tensors(const rv_train_head *h, head_tensor t[5])
{
    const int64_t D = h->dim;
    if (h->task == RV_TASK_CLASSIFY) {
        t[0] = (head_tensor){.name = "heads.head.weight", .data = h->cls_w,
                             .ndim = 2, .shape = {h->classes, D}};
        t[1] = (head_tensor){.name = "heads.head.bias", .data = h->cls_b,
                             .ndim = 1, .shape = {h->classes, 0}};
        return 2;
    }
    t[0] = (head_tensor){.name = "ringvit.mask_token", .data = h->mask_token,
                         .ndim = 1, .shape = {D, 0}};
    t[1] = (head_tensor){.name = "ringvit.mae_video.weight", .data = h->mae_video_w,
                         .ndim = 2, .shape = {h->video_dim, D}};
    t[2] = (head_tensor){.name = "ringvit.mae_video.bias", .data = h->mae_video_b,
                         .ndim = 1, .shape = {h->video_dim, 0}};
    t[3] = (head_tensor){.name = "ringvit.mae_audio.weight", .data = h->mae_audio_w,
                         .ndim = 2, .shape = {h->audio_dim, D}};
    t[4] = (head_tensor){.name = "ringvit.mae_audio.bias", .data = h->mae_audio_b,
                         .ndim = 1, .shape = {h->audio_dim, 0}};
    return 5;
}

static int64_t numel(const head_tensor *t)
{
    return t->ndim == 1 ? t->shape[0] : t->shape[0] * t->shape[1];
}

/* ---- creation ------------------------------------------------------------------------ */

rv_status rv_train_head_new(const rv_vit_config *c, rv_task task, int classes,
                            rv_train_head **out)
{
    rv_status st = RV_OK;
    rv_train_head *h = NULL;
    if (!out)
        return rv_fail(RV_ERR_INVALID, "rv_train_head_new: out is NULL");
    *out = NULL;
    if (!c)
        return rv_fail(RV_ERR_INVALID, "rv_train_head_new: config is NULL");
    if ((st = rv_vit_config_check(c)) != RV_OK)
        return st;
    if (task != RV_TASK_CLASSIFY && task != RV_TASK_MAE)
        return rv_fail(RV_ERR_INVALID, "rv_train_head_new: unknown task %d", (int)task);
    if (task == RV_TASK_CLASSIFY && (classes < 1 || classes > MAX_CLASSES))
        return rv_fail(RV_ERR_INVALID, "classify head: classes %d must be in [1, %d]",
                       classes, MAX_CLASSES);
    h = calloc(1, sizeof *h);
    if (!h)
        return rv_fail(RV_ERR_NOMEM, "rv_train_head_new: out of memory");
    const int64_t D = c->dim;
    h->task = task;
    h->dim = c->dim;
    int64_t n;
    if (task == RV_TASK_CLASSIFY) {
        h->classes = classes;
        n = (int64_t)classes * D + classes;
    } else {
        h->video_dim = (int64_t)RV_VIT_CHANNELS * c->tubelet * c->patch * c->patch;
        h->audio_dim = (int64_t)c->audio_freq * c->audio_time;
        n = D + (h->video_dim + h->audio_dim) * (D + 1);
    }
    size_t bytes = (size_t)n * sizeof(float);
    bytes = (bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    h->arena = aligned_alloc(ARENA_ALIGN, bytes);
    if (!h->arena) {
        st = rv_fail(RV_ERR_NOMEM, "%s head: out of memory for %lld parameters",
                     rv_task_name(task), (long long)n);
        goto end;
    }
    memset(h->arena, 0, bytes);
    h->arena_floats = (size_t)n;
    float *p = h->arena;
    if (task == RV_TASK_CLASSIFY) {
        h->cls_w = p, p += (size_t)classes * D;
        h->cls_b = p;
    } else {
        h->mask_token = p, p += D;
        h->mae_video_w = p, p += (size_t)(h->video_dim * D);
        h->mae_video_b = p, p += (size_t)h->video_dim;
        h->mae_audio_w = p, p += (size_t)(h->audio_dim * D);
        h->mae_audio_b = p;
    }
    *out = h;
    h = NULL;
end:
    rv_train_head_free(&h);
    return st;
}

void rv_train_head_free(rv_train_head **h)
{
    if (!h || !*h)
        return;
    free((*h)->arena);
    free(*h);
    *h = NULL;
}

/* ---- fresh weights ---------------------------------------------------------------------- */

/* xavier_uniform_ of an (out, in) matrix: U(-b, b), b = sqrt(6 / (in + out)). */
static void fill_xavier(vit_rng *r, float *x, int64_t out, int64_t in)
{
    vit_fill_uniform(r, x, out * in, sqrt(6.0 / (double)(in + out)));
}

rv_status rv_train_head_init(rv_train_head *h, uint64_t seed)
{
    if (!h || !h->arena)
        return rv_fail(RV_ERR_INVALID, "rv_train_head_init: head is NULL");
    vit_rng r;
    vit_rng_seed(&r, seed ^ HEAD_SEED_SALT);
    memset(h->arena, 0, h->arena_floats * sizeof(float)); /* biases 0 */
    const int64_t D = h->dim;
    if (h->task == RV_TASK_CLASSIFY) {
        fill_xavier(&r, h->cls_w, h->classes, D);
    } else {
        vit_fill_normal(&r, h->mask_token, D, 0.02);
        fill_xavier(&r, h->mae_video_w, h->video_dim, D);
        fill_xavier(&r, h->mae_audio_w, h->audio_dim, D);
    }
    return RV_OK;
}

/* ---- safetensors -------------------------------------------------------------------------- */

rv_status rv_train_head_write(const rv_train_head *h, rv_st_writer *w)
{
    if (!h || !h->arena || !w)
        return rv_fail(RV_ERR_INVALID, "rv_train_head_write: NULL argument");
    head_tensor t[5];
    int n = head_tensors(h, t);
    for (int i = 0; i < n; i++) {
        rv_status st = rv_st_writer_add(w, t[i].name, RV_F32, t[i].ndim, t[i].shape, t[i].data);
        if (st != RV_OK)
            return st;
    }
    return RV_OK;
}

/* Every tensor is checked before any is copied, so a failed read leaves h as it was. */
rv_status rv_train_head_read(rv_train_head *h, const rv_safetensors *st)
{
    if (!h || !h->arena || !st)
        return rv_fail(RV_ERR_INVALID, "rv_train_head_read: NULL argument");
    head_tensor t[5];
    const rv_st_tensor *f[5];
    int n = head_tensors(h, t);
    for (int i = 0; i < n; i++) {
        rv_status s = rv_st_get(st, t[i].name, RV_F32, t[i].ndim, t[i].shape, &f[i]);
        if (s != RV_OK)
            return s; /* RV_ERR_FORMAT naming the file, the tensor and what differs */
        if (f[i]->nbytes != (size_t)numel(&t[i]) * sizeof(float))
            return rv_fail(RV_ERR_FORMAT, "%s: tensor '%s': %zu bytes, expected %lld",
                           rv_st_label(st), t[i].name, f[i]->nbytes,
                           (long long)numel(&t[i]) * (long long)sizeof(float));
    }
    /* Data are little-endian F32 and possibly unaligned: memcpy (hosts are little-endian). */
    for (int i = 0; i < n; i++)
        memcpy(t[i].data, f[i]->data, f[i]->nbytes);
    return RV_OK;
}
