/* cp_internal.h: what the context-parallel strategies share (cp_ring_forward.c,
 * cp_ring_backward.c, cp_allgather.c, cp_ulysses.c, cp_attention.c). Internal to
 * encoder/. */
#ifndef RV_CP_INTERNAL_H
#define RV_CP_INTERNAL_H

#include "rv_clock.h"
#include "rv_cp_attention.h"

/* A rank's segments with their offsets in its local slice. */
typedef struct cp_segs {
    int n;
    rv_shard_seg seg[RV_SHARD_MAX_SEGS];
    int64_t off[RV_SHARD_MAX_SEGS]; /* first row of segment i in the local slice */
    int64_t len;                    /* rows in the slice */
} cp_segs;

cp_segs cp_segs_of(const rv_shard_plan *p, int rank);

/* The mask of query segment q against key segment k (global positions); with a
 * span, over the span's global keys (cp_span.c), which allgather, ulysses and a
 * single rank have. */
rv_attn_mask cp_mask(const rv_cp_attn *cp, rv_shard_seg q, rv_shard_seg k);

/* Visible pairs of a strategy's call for the statistics: my segment i (or, i < 0,
 * the whole sequence) against every key. */
double cp_pairs_all(const rv_cp_attn *cp, int i, rv_shard_seg q);

/* cp_span.c: exactly the pairs a span mask lets through (host arrays); the span
 * mask over global keys; the cached counts of cp_pairs_all; the span ring. */
double cp_span_pairs(const double *qk, const double *qt, int64_t q_start, int64_t n,
                     const double *kk, const double *kt, int64_t k_start, int64_t m,
                     double reach, int causal);
rv_attn_mask cp_span_mask_global(const rv_cp_attn *cp, rv_shard_seg q, rv_shard_seg k);
double cp_span_pairs_of(const rv_cp_attn *cp, int seg);
/* The span ring in query rows, for a forward that keeps only K and V of its whole
 * slice: exchange receives the peers' runs of this call's K/V (and sends ours),
 * completely; rows computes o, lse (n, heads, dim), (heads, n) of my query rows
 * [r0, r0 + n) (q holds those rows) against my k, v and the received runs. */
rv_status cp_span_exchange(rv_cp_attn *cp, const float *k, const float *v);
rv_status cp_span_rows(rv_cp_attn *cp, const float *q, int64_t r0, int64_t n, const float *k,
                       const float *v, float *o, float *lse);
rv_status cp_span_ring_forward(rv_cp_attn *cp, const float *q, const float *k, const float *v,
                               float *o, float *lse);
rv_status cp_span_ring_backward(rv_cp_attn *cp, const float *q, const float *k,
                                const float *v, const float *o, const float *lse,
                                const float *dout, float *dq, float *dk, float *dv);

/* 1 when no query of q sees any key of k. */
int cp_fully_masked(const rv_cp_attn *cp, rv_shard_seg q, rv_shard_seg k);

/* Buffers in the backend's memory (at least one float, so never NULL on
 * success); cp_free takes NULL and clears the pointer. */
rv_status cp_alloc(rv_cp_attn *cp, size_t floats, float **p);
void cp_free(rv_cp_attn *cp, float **p);
/* floats from src to dst, both the backend's memory (asynchronous on a device). */
rv_status cp_copy(rv_cp_attn *cp, float *dst, const float *src, size_t floats);

/* lse of a whole slice (heads, len) <-> of one segment (heads, seg_len). */
rv_status cp_lse_to_slice(rv_cp_attn *cp, const float *seg_lse, int64_t seg_len, float *lse,
                          int64_t len, int64_t off);
rv_status cp_lse_from_slice(rv_cp_attn *cp, const float *lse, int64_t len, int64_t off,
                            float *seg_lse, int64_t seg_len);

/* Gathers every rank's rows (len, width floats) into global order: out (S, width),
 * from a buffer holding every rank's slice padded to max_len rows, rank r's at
 * r * max_len * width. */
rv_status cp_unpad_to_global(rv_cp_attn *cp, const float *padded, int64_t max_len,
                             size_t width, float *out);
/* The inverse: global rows (S, width) into per-rank padded blocks. */
rv_status cp_global_to_padded(rv_cp_attn *cp, const float *global, int64_t max_len,
                              size_t width, float *padded);

/* Ends a compute section begun at t0: waits for the backend's queued ops (a
 * no-op on CPU), so their results may be sent and their inputs reused, and adds
 * the time to busy_s. */
rv_status cp_busy_end(rv_cp_attn *cp, double t0);

/* rv_comm_waitall of reqs[0..n) (NULL entries are done), its time added to wait_s. */
rv_status cp_wait(rv_cp_attn *cp, rv_comm_request **reqs, int n);

/* Ring message tags of a K and a V block (both ring directions use them). */
enum { CP_TAG_K = 11, CP_TAG_V = 12 };

void cp_note_peak(rv_cp_attn *cp, size_t bytes);

rv_status cp_ring_forward(rv_cp_attn *cp, const float *q, const float *k, const float *v,
                          float *o, float *lse);
rv_status cp_ring_backward(rv_cp_attn *cp, const float *q, const float *k, const float *v,
                           const float *o, const float *lse, const float *dout, float *dq,
                           float *dk, float *dv);
rv_status cp_allgather_forward(rv_cp_attn *cp, const float *q, const float *k,
                               const float *v, float *o, float *lse);
rv_status cp_allgather_backward(rv_cp_attn *cp, const float *q, const float *k,
                                const float *v, const float *o, const float *lse,
                                const float *dout, float *dq, float *dk, float *dv);
rv_status cp_ulysses_forward(rv_cp_attn *cp, const float *q, const float *k, const float *v,
                             float *o, float *lse);
rv_status cp_ulysses_backward(rv_cp_attn *cp, const float *q, const float *k,
                              const float *v, const float *o, const float *lse,
                              const float *dout, float *dq, float *dk, float *dv);

#endif
