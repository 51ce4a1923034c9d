/* attn_span.h: the span mask of attention (RV_MASK_SPAN, rv_backend.h) for one
 * (query, key) pair and for whole tiles of rows, written once for the CPU kernels
 * (kernels/cpu) and the CUDA kernels (kernels/cuda), so both backends see the
 * same pairs and skip the same tiles. Internal to kernels/.
 *
 * A tile's rows are summarised by a box: the lowest and highest key and time
 * (NaN values left out) and whether any key or time is NaN. Two boxes decide, for
 * every pair of their rows at once, one of
 *   SPAN_NONE  no pair can be visible: the tile pair is skipped, its memory untouched
 *   SPAN_ALL   every pair is visible: no per-element mask
 *   SPAN_SOME  anything else: the pairs are masked one by one
 * The box tests are the pair test applied to the extreme values, and rounding of
 * a difference is monotone, so NONE and ALL are never wrong for a single pair.
 *
 * Finding the key tiles a query tile meets without scanning them all: over the
 * key tiles in order, the prefix maximum of the tile maxima (pre_hi) and the
 * suffix minimum of the tile minima (suf_lo) are both non-decreasing, so the
 * tiles before span_first() all lie below the query box by more than reach and
 * those from span_end() on all lie above it: a binary search each. The same holds
 * with queries and keys swapped (the backward walks query tiles per key tile).
 * When nearby rows hold nearby keys (token times rise window by window), the
 * range in between is about the tiles that do meet. */
#ifndef RV_ATTN_SPAN_H
#define RV_ATTN_SPAN_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define SPAN_FN static __host__ __device__ __forceinline__
#else
#define SPAN_FN static inline
#endif

enum { SPAN_NONE = 0, SPAN_SOME = 1, SPAN_ALL = 2 };

/* Rows of a tile: keys in [lo, hi], times in [tlo, thi] (an empty or all-NaN set
 * has lo = +inf, hi = -inf); clean = no key or time is NaN. */
typedef struct span_box {
    double lo, hi, tlo, thi;
    int clean;
} span_box;

SPAN_FN span_box span_box_empty(void)
{
    span_box b = {INFINITY, -INFINITY, INFINITY, -INFINITY, 1};
    return b;
}

/* Adds one row (time 0 when the mask is not causal). */
SPAN_FN void span_box_add(span_box *b, double key, double time)
{
    b->lo = key < b->lo ? key : b->lo;
    b->hi = key > b->hi ? key : b->hi;
    b->tlo = time < b->tlo ? time : b->tlo;
    b->thi = time > b->thi ? time : b->thi;
    if (key != key || time != time)
        b->clean = 0;
}

SPAN_FN void span_box_merge(span_box *b, const span_box *x)
{
    b->lo = x->lo < b->lo ? x->lo : b->lo;
    b->hi = x->hi > b->hi ? x->hi : b->hi;
    b->tlo = x->tlo < b->tlo ? x->tlo : b->tlo;
    b->thi = x->thi > b->thi ? x->thi : b->thi;
    b->clean = b->clean && x->clean;
}

/* SPAN_NONE, SPAN_SOME or SPAN_ALL for the pairs (query of box q, key of box k). */
SPAN_FN int span_meet(const span_box *q, const span_box *k, double reach, int causal)
{
    if (q->lo - k->hi > reach || k->lo - q->hi > reach)
        return SPAN_NONE;
    if (causal && k->tlo > q->thi)
        return SPAN_NONE; /* every key starts after every query */
    if (q->clean && k->clean && q->hi - k->lo <= reach && k->hi - q->lo <= reach &&
        (!causal || k->thi < q->tlo))
        return SPAN_ALL;
    return SPAN_SOME;
}

/* The pair rule of rv_backend.h: |qk - kk| <= reach and, with causal, the key
 * starts earlier, or at the same time and no later in the sequence (global
 * positions qpos, kpos). NaN keys and times see nothing. */
SPAN_FN int span_sees(double qk, double qt, int64_t qpos, double kk, double kt, int64_t kpos,
                      double reach, int causal)
{
    if (!(fabs(qk - kk) <= reach))
        return 0;
    return !causal || kt < qt || (kt == qt && kpos <= qpos);
}

/* First tile of a tiling (pre_hi: its prefix maxima of tile maxima, n tiles) that
 * a box with lowest key lo can meet: every tile before it lies below lo - reach. */
SPAN_FN int span_first(const double *pre_hi, int n, double lo, double reach)
{
    int a = 0, b = n;
    while (a < b) {
        int m = a + (b - a) / 2;
        if (lo - pre_hi[m] > reach)
            a = m + 1;
        else
            b = m;
    }
    return a;
}

/* One past the last tile (suf_lo: suffix minima of tile minima) that a box with
 * highest key hi can meet: every tile from it on lies above hi + reach. */
SPAN_FN int span_end(const double *suf_lo, int n, double hi, double reach)
{
    int a = 0, b = n;
    while (a < b) {
        int m = a + (b - a) / 2;
        if (suf_lo[m] - hi > reach)
            b = m;
        else
            a = m + 1;
    }
    return a;
}

#endif
