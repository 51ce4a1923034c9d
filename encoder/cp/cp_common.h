/* cp_common.h: the helpers every context-parallel strategy and the dispatcher
 * share (cp_common.c): a rank's segments, buffers in the backend's memory, copies
 * between a rank's slice and global order, the lse layouts, and the statistics
 * (compute and wait time, peak bytes). The bottom of encoder/cp/: it calls no
 * other file of the folder. Internal to encoder/. */
#ifndef RV_CP_COMMON_H
#define RV_CP_COMMON_H

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

/* 1 when no query of q sees any key of k (full attention, causal or not). */
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

/* Raises stats.peak_bytes to bytes when that is more. */
void cp_note_peak(rv_cp_attn *cp, size_t bytes);

#endif
