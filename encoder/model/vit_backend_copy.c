/* vit_backend_copy.c: a model's weights in a backend's memory (rv_vit.h): one
 * arena of the backend holding a copy of the host arena, and a model struct whose
 * pointers are the host ones moved by the same offset, so code that walks
 * rv_vit_model (the forward's blocks) runs unchanged on device weights. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vit_internal.h"
#include "vit_tensors.h"

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
    /* Every field, whatever the family: the per-model roles once, the per-layer
     * ones for each layer (vit_slot gives NULL for a layer role without a layer). */
    rv_vit_model *hm = (rv_vit_model *)m; /* vit_slot reads m's fields only */
    for (int r = 0; r < VR_COUNT; r++)
        for (int l = -1; l < m->cfg.layers; l++) {
            float **src = vit_slot(hm, (vit_role)r, l), **dst = vit_slot(d, (vit_role)r, l);
            if (src && dst && (l >= 0) == (r >= VR_LN1_W && r <= VR_LS2))
                *dst = rebase(m, d->arena, *src);
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
