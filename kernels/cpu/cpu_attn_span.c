/* cpu_attn_span.c: the tile boxes of span masks and the tile-pair counters of the
 * CPU attention kernels (cpu_attn_span.h). */
#include <stdlib.h>

#include "cpu_attn_span.h"

static uint64_t tiles_fwd, tiles_bwd, boxes_all; /* updated with atomic adds */

void rv_cpu_attn_tiles_add(int bwd, uint64_t tiles, uint64_t boxes)
{
    __atomic_fetch_add(bwd ? &tiles_bwd : &tiles_fwd, tiles, __ATOMIC_RELAXED);
    __atomic_fetch_add(&boxes_all, boxes, __ATOMIC_RELAXED);
}

void rv_cpu_attn_tile_counts(uint64_t *fwd, uint64_t *bwd, uint64_t *boxes)
{
    *fwd = __atomic_load_n(&tiles_fwd, __ATOMIC_RELAXED);
    *bwd = __atomic_load_n(&tiles_bwd, __ATOMIC_RELAXED);
    *boxes = __atomic_load_n(&boxes_all, __ATOMIC_RELAXED);
}

rv_status rv_span_tiles_make(const double *key, const double *time, int rows, int size,
                             int threads, rv_span_tiles *t)
{
    t->size = size;
    t->n = (rows + size - 1) / size;
    size_t n = t->n > 0 ? (size_t)t->n : 1;
    t->box = malloc(sizeof(span_box) * n);
    t->pre_hi = malloc(sizeof(double) * n);
    t->suf_lo = malloc(sizeof(double) * n);
    if (!t->box || !t->pre_hi || !t->suf_lo) {
        rv_span_tiles_free(t);
        return rv_fail(RV_ERR_NOMEM, "attention span mask: cannot allocate %d tile bounds",
                       (int)n);
    }
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int u = 0; u < t->n; u++) {
        span_box b = span_box_empty();
        int end = (u + 1) * size < rows ? (u + 1) * size : rows;
        for (int r = u * size; r < end; r++)
            span_box_add(&b, key[r], time ? time[r] : 0.0);
        t->box[u] = b;
    }
    double hi = -INFINITY, lo = INFINITY;
    for (int u = 0; u < t->n; u++) {
        hi = t->box[u].hi > hi ? t->box[u].hi : hi;
        t->pre_hi[u] = hi;
    }
    for (int u = t->n - 1; u >= 0; u--) {
        lo = t->box[u].lo < lo ? t->box[u].lo : lo;
        t->suf_lo[u] = lo;
    }
    return RV_OK;
}

void rv_span_tiles_free(rv_span_tiles *t)
{
    free(t->box);
    free(t->pre_hi);
    free(t->suf_lo);
    t->box = NULL;
    t->pre_hi = t->suf_lo = NULL;
    t->n = 0;
}
