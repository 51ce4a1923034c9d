/* cp_common.c: the helpers the context-parallel strategies and the dispatcher
 * share (cp_common.h): segments, re-ordering between a rank's slice and global
 * order, buffers, statistics, and the visible-pair count of full attention
 * (rv_cp_visible_pairs). Buffers are the backend's memory and every move goes
 * through its table (fill, copy2d, add), so the strategies run unchanged on host
 * (cpu) and device (cuda) memory. */
#include "cp_common.h"

cp_segs cp_segs_of(const rv_shard_plan *p, int rank)
{
    cp_segs s = {0};
    s.n = rv_shard_segments(p, rank, s.seg);
    for (int i = 0; i < s.n; i++) {
        s.off[i] = s.len;
        s.len += s.seg[i].len;
    }
    return s;
}

int cp_fully_masked(const rv_cp_attn *cp, rv_shard_seg q, rv_shard_seg k)
{
    if (q.len == 0 || k.len == 0)
        return 1;
    return cp->causal && k.start > q.start + q.len - 1;
}

double rv_cp_visible_pairs(rv_shard_seg q, rv_shard_seg k, int causal)
{
    if (q.len <= 0 || k.len <= 0)
        return 0;
    if (!causal)
        return (double)q.len * (double)k.len;
    /* Rows p see min(max(p - k.start + 1, 0), k.len) keys: a ramp, then full rows. */
    int64_t qa = q.start, qb = q.start + q.len - 1;
    int64_t a = qa > k.start ? qa : k.start;
    int64_t kend = k.start + k.len - 1;
    int64_t b = qb < kend ? qb : kend;
    double pairs = 0;
    if (a <= b)
        pairs += (double)(b - a + 1) * (double)((a - k.start + 1) + (b - k.start + 1)) / 2.0;
    int64_t f = qa > k.start + k.len ? qa : k.start + k.len;
    if (f <= qb)
        pairs += (double)(qb - f + 1) * (double)k.len;
    return pairs;
}

rv_status cp_alloc(rv_cp_attn *cp, size_t floats, float **p)
{
    *p = NULL;
    return cp->be->alloc(cp->be, sizeof(float) * (floats > 0 ? floats : 1), (void **)p);
}

void cp_free(rv_cp_attn *cp, float **p)
{
    if (*p)
        cp->be->free(cp->be, *p);
    *p = NULL;
}

rv_status cp_copy(rv_cp_attn *cp, float *dst, const float *src, size_t floats)
{
    if (!floats)
        return RV_OK;
    const size_t b = sizeof(float) * floats;
    return cp->be->copy2d(cp->be, dst, b, src, b, b, 1);
}

rv_status cp_lse_to_slice(rv_cp_attn *cp, const float *seg_lse, int64_t seg_len, float *lse,
                          int64_t len, int64_t off)
{
    if (seg_len <= 0)
        return RV_OK;
    /* heads rows: row h of the segment's (heads, seg_len) to row h of (heads, len). */
    return cp->be->copy2d(cp->be, lse + off, sizeof(float) * (size_t)len, seg_lse,
                          sizeof(float) * (size_t)seg_len, sizeof(float) * (size_t)seg_len,
                          (size_t)cp->heads);
}

rv_status cp_lse_from_slice(rv_cp_attn *cp, const float *lse, int64_t len, int64_t off,
                            float *seg_lse, int64_t seg_len)
{
    if (seg_len <= 0)
        return RV_OK;
    return cp->be->copy2d(cp->be, seg_lse, sizeof(float) * (size_t)seg_len, lse + off,
                          sizeof(float) * (size_t)len, sizeof(float) * (size_t)seg_len,
                          (size_t)cp->heads);
}

rv_status cp_unpad_to_global(rv_cp_attn *cp, const float *padded, int64_t max_len,
                             size_t width, float *out)
{
    rv_status st = RV_OK;
    for (int r = 0; r < cp->plan.ranks && st == RV_OK; r++) {
        cp_segs s = cp_segs_of(&cp->plan, r);
        for (int i = 0; i < s.n && st == RV_OK; i++)
            st = cp_copy(cp, out + (size_t)s.seg[i].start * width,
                         padded + ((size_t)r * max_len + s.off[i]) * width,
                         width * (size_t)s.seg[i].len);
    }
    return st;
}

rv_status cp_global_to_padded(rv_cp_attn *cp, const float *global, int64_t max_len,
                              size_t width, float *padded)
{
    rv_status st = RV_OK;
    for (int r = 0; r < cp->plan.ranks && st == RV_OK; r++) {
        cp_segs s = cp_segs_of(&cp->plan, r);
        for (int i = 0; i < s.n && st == RV_OK; i++)
            st = cp_copy(cp, padded + ((size_t)r * max_len + s.off[i]) * width,
                         global + (size_t)s.seg[i].start * width,
                         width * (size_t)s.seg[i].len);
    }
    return st;
}

rv_status cp_busy_end(rv_cp_attn *cp, double t0)
{
    rv_status st = cp->be->synchronize(cp->be);
    cp->stats.busy_s += rv_clock_s() - t0;
    return st;
}

rv_status cp_wait(rv_cp_attn *cp, rv_comm_request **reqs, int n)
{
    double t0 = rv_clock_s();
    rv_status st = rv_comm_waitall(reqs, n);
    cp->stats.wait_s += rv_clock_s() - t0;
    return st;
}

void cp_note_peak(rv_cp_attn *cp, size_t bytes)
{
    if (bytes > cp->stats.peak_bytes)
        cp->stats.peak_bytes = bytes;
}
