/* vit_backend_copy.c: a model's weights in a backend's memory (rv_vit.h): one
 * arena of the backend holding a copy of the host arena, and a model struct whose
 * pointers are the host ones moved by the same offset, so code that walks
 * rv_vit_model (the forward's blocks) runs unchanged on device weights. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vit_internal.h"

/* The pointer at p's offset in the host arena, moved into the device arena. */
static float *rebase(const rv_vit_model *m, float *dev_arena, const float *p)
{
    return p ? dev_arena + (p - m->arena) : NULL;
}

rv_status rv_vit_to_backend(const rv_vit_model *m, rv_backend *be, rv_vit_model **out)
{
    if (!m || !be || !out)
        return rv_fail(RV_ERR_INVALID, "vit to backend: model, backend and output are required");
    *out = NULL;
    rv_vit_model *d = calloc(1, sizeof *d);
    rv_status st = RV_OK;
    if (!d || !(d->layer = calloc((size_t)m->cfg.layers, sizeof *d->layer))) {
        st = rv_fail(RV_ERR_NOMEM, "vit to backend: out of memory");
        goto end;
    }
    const size_t bytes = sizeof(float) * m->arena_floats;
    if ((st = be->alloc(be, bytes, (void **)&d->arena)) != RV_OK ||
        (st = be->copy(be, d->arena, m->arena, bytes, RV_COPY_HOST_TO_DEVICE)) != RV_OK) {
        rv_fail(st, "vit to backend: %.1f MiB of weights into %s memory: %s", bytes / 1048576.0,
                be->name, rv_last_error());
        goto end;
    }
    d->cfg = m->cfg;
    d->arena_floats = m->arena_floats;
    float *a = d->arena;
    d->video_w = rebase(m, a, m->video_w), d->video_b = rebase(m, a, m->video_b);
    d->audio_w = rebase(m, a, m->audio_w), d->audio_b = rebase(m, a, m->audio_b);
    d->cls = rebase(m, a, m->cls), d->pos = rebase(m, a, m->pos);
    d->band = rebase(m, a, m->band), d->time_w = rebase(m, a, m->time_w);
    d->modality = rebase(m, a, m->modality);
    d->ln_w = rebase(m, a, m->ln_w), d->ln_b = rebase(m, a, m->ln_b);
    for (int l = 0; l < m->cfg.layers; l++) {
        const rv_vit_layer *s = &m->layer[l];
        rv_vit_layer *t = &d->layer[l];
        t->ln1_w = rebase(m, a, s->ln1_w), t->ln1_b = rebase(m, a, s->ln1_b);
        t->qkv_w = rebase(m, a, s->qkv_w), t->qkv_b = rebase(m, a, s->qkv_b);
        t->proj_w = rebase(m, a, s->proj_w), t->proj_b = rebase(m, a, s->proj_b);
        t->ln2_w = rebase(m, a, s->ln2_w), t->ln2_b = rebase(m, a, s->ln2_b);
        t->fc1_w = rebase(m, a, s->fc1_w), t->fc1_b = rebase(m, a, s->fc1_b);
        t->fc2_w = rebase(m, a, s->fc2_w), t->fc2_b = rebase(m, a, s->fc2_b);
    }
    *out = d;
    d = NULL;
end:
    rv_vit_backend_free(be, &d);
    return st;
}

void rv_vit_backend_free(rv_backend *be, rv_vit_model **dm)
{
    if (!dm || !*dm)
        return;
    rv_vit_model *d = *dm;
    if (d->arena && be)
        be->free(be, d->arena);
    free(d->layer);
    free(d);
    *dm = NULL;
}
