/* cpu_attn_span.h: span masks (RV_MASK_SPAN) in the CPU attention kernels: the
 * boxes of every tile of a query or key chunk (attn_span.h), the search for the
 * tiles a box can meet, and the counters of tile pairs the kernels computed, which
 * the tests read to see that tile skipping is real. Internal to kernels/cpu. */
#ifndef RV_CPU_ATTN_SPAN_H
#define RV_CPU_ATTN_SPAN_H

#include <math.h>
#include <stdint.h>

#include "../attn_span.h"
#include "../rv_backend.h"

/* A chunk of rows cut into tiles of `size` rows (the last may be shorter). */
typedef struct rv_span_tiles {
    int n, size;
    span_box *box;  /* (n) */
    double *pre_hi; /* (n) max of box[0..t].hi */
    double *suf_lo; /* (n) min of box[t..n-1].lo */
} rv_span_tiles;

/* The tiles of rows 0..rows-1 of key (and time, NULL when the mask is not causal). */
rv_status rv_span_tiles_make(const double *key, const double *time, int rows, int size,
                             int threads, rv_span_tiles *t);
void rv_span_tiles_free(rv_span_tiles *t);

/* The tiles [*first, *end) of `other` that box b may meet; the others cannot. */
static inline void rv_span_candidates(const rv_span_tiles *other, const span_box *b,
                                      double reach, int *first, int *end)
{
    *first = span_first(other->pre_hi, other->n, b->lo, reach);
    *end = span_end(other->suf_lo, other->n, b->hi, reach);
    if (*end < *first)
        *end = *first;
}

/* Whether query row i sees key row j (chunk-local) under span mask m. */
static inline int rv_span_pair(const rv_attn_mask *m, int64_t i, int64_t j)
{
    return span_sees(m->q_key[i], m->causal ? m->q_time[i] : 0.0, m->q_start + i,
                     m->k_key[j], m->causal ? m->k_time[j] : 0.0, m->k_start + j, m->reach,
                     m->causal);
}

/* Scores s[0..bk) of query row i against keys j0..j0+bk-1 (chunk-local) under
 * span mask m: those of keys it does not see become -inf. Returns how many it sees.
 * The rule of span_sees, written as a loop GCC vectorizes. */
static inline int rv_span_mask_row(const rv_attn_mask *m, int64_t i, int j0, int bk, float *s)
{
    const double qk = m->q_key[i], r = m->reach, *kk = m->k_key + j0;
    int n = 0;
    if (!m->causal) {
        for (int j = 0; j < bk; j++) {
            int v = fabs(qk - kk[j]) <= r;
            s[j] = v ? s[j] : -INFINITY;
            n += v;
        }
        return n;
    }
    const double qt = m->q_time[i], *kt = m->k_time + j0;
    const int64_t last = m->q_start + i - m->k_start - j0; /* keys j <= last: no later */
    for (int j = 0; j < bk; j++) {
        int v = (fabs(qk - kk[j]) <= r) & ((kt[j] < qt) | ((kt[j] == qt) & (j <= last)));
        s[j] = v ? s[j] : -INFINITY;
        n += v;
    }
    return n;
}

/* Counters of the CPU attention kernels since the process started, for tests
 * (tile skipping): tile pairs computed per head, the forward's (RV_FWD_BQ x
 * RV_FWD_BK) tiles and the backward's (RV_BWD_BQ x RV_BWD_BK), every mask counted;
 * and the tile boxes span masks compared while searching (the candidates of
 * rv_span_candidates), forward and backward together. */
void rv_cpu_attn_tile_counts(uint64_t *fwd, uint64_t *bwd, uint64_t *boxes);
void rv_cpu_attn_tiles_add(int bwd, uint64_t tiles, uint64_t boxes);

#endif
