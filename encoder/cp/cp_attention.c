/* cp_attention.c: context-parallel attention set-up, dispatch to the strategies,
 * and the helpers they share (segments, masks, re-ordering between a rank's slice
 * and global order, buffers, statistics). Buffers are the backend's memory and
 * every move goes through its table (fill, copy2d, add), so the strategies run
 * unchanged on host (cpu) and device (cuda) memory. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cp_internal.h"

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

rv_attn_mask cp_mask(const rv_cp_attn *cp, rv_shard_seg q, rv_shard_seg k)
{
    if (cp->span)
        return cp_span_mask_global(cp, q, k);
    rv_attn_mask m = {.kind = cp->causal ? RV_MASK_CAUSAL : RV_MASK_NONE, .q_start = q.start, .k_start = k.start};
    return m;
}

double cp_pairs_all(const rv_cp_attn *cp, int i, rv_shard_seg q)
{
    rv_shard_seg all = {.start = 0, .len = cp->plan.seq};
    return cp->span ? cp_span_pairs_of(cp, i) : rv_cp_visible_pairs(q, all, cp->causal);
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

rv_status rv_cp_attn_init(rv_cp_attn *cp, rv_backend *be, rv_comm *comm,
                          const rv_shard_plan *plan, rv_cp_strategy strategy, int heads,
                          int dim, int causal, float scale)
{
    memset(cp, 0, sizeof *cp);
    if (!be || !comm || !plan)
        return rv_fail(RV_ERR_INVALID, "cp attention: backend, communicator and plan are required");
    if (heads <= 0 || dim <= 0)
        return rv_fail(RV_ERR_INVALID, "cp attention: heads=%d dim=%d", heads, dim);
    if (comm->size != plan->ranks)
        return rv_fail(RV_ERR_INVALID,
                       "cp attention: the shard plan is for %d ranks but the communicator "
                       "has %d", plan->ranks, comm->size);
    if (strategy != RV_CP_RING && strategy != RV_CP_ALLGATHER && strategy != RV_CP_ULYSSES)
        return rv_fail(RV_ERR_INVALID, "cp attention: unknown strategy %d", (int)strategy);
    if (strategy == RV_CP_ULYSSES && heads % comm->size != 0)
        return rv_fail(RV_ERR_INVALID,
                       "cp attention: ulysses needs the head count to be a multiple of the "
                       "context-parallel size, but heads=%d and cp=%d", heads, comm->size);
    /* RINGVIT_RING_AHEAD=0: the device schedule on the host too (for comparison). */
    const char *env = getenv("RINGVIT_RING_AHEAD");
    const int ahead = rv_backend_is_host(be) && !(env && strcmp(env, "0") == 0);
    *cp = (rv_cp_attn){.be = be, .comm = comm, .plan = *plan, .strategy = strategy,
                       .heads = heads, .dim = dim, .causal = causal, .scale = scale,
                       .ring_ahead = ahead};
    return RV_OK;
}

rv_status rv_cp_attn_forward(rv_cp_attn *cp, const float *q, const float *k, const float *v,
                             float *o, float *lse)
{
    if (cp->plan.ranks == 1) { /* plain tiled attention, no communication */
        rv_shard_seg all = {.start = 0, .len = cp->plan.seq};
        rv_attn_fwd_args a = {.q = q, .k = k, .v = v, .o = o, .lse = lse, .sq = (int)cp->plan.seq,
                              .sk = (int)cp->plan.seq, .heads = cp->heads, .dim = cp->dim,
                              .scale = cp->scale, .mask = cp_mask(cp, all, all), .accumulate = 0};
        double t0 = rv_clock_s();
        rv_status st = cp->be->attn_fwd(cp->be, &a);
        rv_status st2 = cp_busy_end(cp, t0);
        st = st != RV_OK ? st : st2;
        cp->stats.flops += 4.0 * cp->dim * cp->heads * cp_pairs_all(cp, 0, all);
        return st;
    }
    switch (cp->strategy) {
    case RV_CP_RING:
        return cp->span ? cp_span_ring_forward(cp, q, k, v, o, lse)
                        : cp_ring_forward(cp, q, k, v, o, lse);
    case RV_CP_ALLGATHER: return cp_allgather_forward(cp, q, k, v, o, lse);
    case RV_CP_ULYSSES: return cp_ulysses_forward(cp, q, k, v, o, lse);
    }
    return rv_fail(RV_ERR_INVALID, "cp attention: unknown strategy");
}

rv_status rv_cp_attn_backward(rv_cp_attn *cp, const float *q, const float *k, const float *v,
                              const float *o, const float *lse, const float *dout, float *dq,
                              float *dk, float *dv)
{
    if (cp->plan.ranks == 1) {
        rv_shard_seg all = {.start = 0, .len = cp->plan.seq};
        rv_attn_bwd_args a = {.q = q, .k = k, .v = v, .o = o, .lse = lse, .dout = dout, .dq = dq,
                              .dk = dk, .dv = dv, .sq = (int)cp->plan.seq, .sk = (int)cp->plan.seq,
                              .heads = cp->heads, .dim = cp->dim, .scale = cp->scale,
                              .mask = cp_mask(cp, all, all), .accumulate = 0};
        double t0 = rv_clock_s();
        rv_status st = cp->be->attn_bwd(cp->be, &a);
        rv_status st2 = cp_busy_end(cp, t0);
        st = st != RV_OK ? st : st2;
        cp->stats.flops += 10.0 * cp->dim * cp->heads * cp_pairs_all(cp, 0, all);
        return st;
    }
    switch (cp->strategy) {
    case RV_CP_RING:
        return cp->span ? cp_span_ring_backward(cp, q, k, v, o, lse, dout, dq, dk, dv)
                        : cp_ring_backward(cp, q, k, v, o, lse, dout, dq, dk, dv);
    case RV_CP_ALLGATHER: return cp_allgather_backward(cp, q, k, v, o, lse, dout, dq, dk, dv);
    case RV_CP_ULYSSES: return cp_ulysses_backward(cp, q, k, v, o, lse, dout, dq, dk, dv);
    }
    return rv_fail(RV_ERR_INVALID, "cp attention: unknown strategy");
}

const char *rv_cp_strategy_name(rv_cp_strategy s)
{
    switch (s) {
    case RV_CP_RING: return "ring";
    case RV_CP_ALLGATHER: return "allgather";
    case RV_CP_ULYSSES: return "ulysses";
    }
    return "?";
}

rv_status rv_cp_strategy_parse(const char *text, rv_cp_strategy *out)
{
    if (strcmp(text, "ring") == 0)
        *out = RV_CP_RING;
    else if (strcmp(text, "allgather") == 0)
        *out = RV_CP_ALLGATHER;
    else if (strcmp(text, "ulysses") == 0)
        *out = RV_CP_ULYSSES;
    else
        return rv_fail(RV_ERR_INVALID, "unknown strategy '%s' (ring, allgather or ulysses)", text);
    return RV_OK;
}
