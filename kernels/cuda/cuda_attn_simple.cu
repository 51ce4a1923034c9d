/* cuda_attn_simple.cu: plain f32 SIMT attention forward and backward, the CUDA
 * reference. Written to be obviously right rather than fast: every score is a
 * full f32 dot product, exponentials are expf in natural-log units, nothing is
 * rounded to bf16. It runs for head dims the tensor-core kernels do not cover
 * (cuda_attn_fwd.cu, cuda_attn_bwd.cu), for misaligned tensors, and for every
 * call when RINGVIT_CUDA_ATTN=simple, so a device check can tell a tensor-core
 * kernel bug from a harness bug. Contracts as kernels/cpu/cpu_attention_fwd.c and
 * cpu_attention_bwd.c.
 *
 * One warp per row: lanes split the channels of the dot products (reduced by
 * xor-shuffles, so every lane holds the sum) and own channels lane + 32 u of the
 * output accumulators, kept in registers for a chunk of CHUNK channels; heads
 * with more channels run the key loop once per chunk (recomputing the scores).
 *   forward:  warp per (head, query): online softmax over the keys it sees.
 *   backward: Di = rowsum(dO * O) per (head, query) into scratch; then a warp per
 *             (head, key) accumulates dK, dV over the queries that see the key,
 *             and a warp per (head, query) accumulates dQ over its keys. No
 *             atomics: each output row has one owner.
 * Span masks (RV_MASK_SPAN): a row's box (its own key and time) is searched among
 * the boxes of the other side's tiles of SPAN_TILE rows (attn_span.h), and only the
 * tiles it meets are walked, pair by pair: the same tile skipping as the
 * tensor-core kernels, at the granularity of one row. */
#include <math.h>

#include "cuda_attn.h"

#define SIMPLE_WARPS 8        /* warps per block */
#define CHUNK_PER_LANE 8      /* accumulators per lane */
#define CHUNK (32 * CHUNK_PER_LANE) /* channels per pass */
#define SPAN_TILE 64          /* rows per tile box of a span mask */

/* Global warp id and warp count of a grid-stride loop over rows. */
#define WARP_ID ((size_t)blockIdx.x * SIMPLE_WARPS + (threadIdx.x >> 5))
#define WARP_STRIDE ((size_t)gridDim.x * SIMPLE_WARPS)

struct simple_args {
    const float *q, *k, *v; /* (sq | sk, heads, dim) */
    const float *o, *dout;  /* (sq, heads, dim), backward */
    const float *lse_in;    /* (heads, sq), backward */
    const float *di;        /* (heads, sq) rowsum(dO * O), backward scratch */
    float *out;             /* forward o */
    float *lse;             /* forward lse (heads, sq) */
    float *dq, *dk, *dv;
    int sq, sk, heads, dim;
    int64_t off; /* q_start - k_start */
    int causal, accumulate;
    float scale;
    cuda_span sp; /* span mask: query and key tiles of SPAN_TILE rows */
};

/* f(j) for every key j query i sees under the span mask, in increasing order: only
 * the key tiles whose boxes meet the row's. */
template <typename F>
__device__ static void simple_span_keys(const simple_args &p, int i, F f)
{
    const cuda_span &sp = p.sp;
    const span_box b = cuda_span_row_box(sp.q_key, sp.q_time, i);
    const int first = span_first(sp.kt.pre_hi, sp.kt.n, b.lo, sp.reach);
    const int end = max(first, span_end(sp.kt.suf_lo, sp.kt.n, b.hi, sp.reach));
    for (int u = cuda_span_next(sp, sp.kt, b, 1, first, end); u < end;
         u = cuda_span_next(sp, sp.kt, b, 1, u + 1, end))
        for (int j = u * SPAN_TILE; j < min((u + 1) * SPAN_TILE, p.sk); j++)
            if (cuda_span_pair(sp, p.off, i, j))
                f(j);
}

/* f(i) for every query i that sees key j under the span mask, in increasing order. */
template <typename F>
__device__ static void simple_span_queries(const simple_args &p, int j, F f)
{
    const cuda_span &sp = p.sp;
    const span_box b = cuda_span_row_box(sp.k_key, sp.k_time, j);
    const int first = span_first(sp.qt.pre_hi, sp.qt.n, b.lo, sp.reach);
    const int end = max(first, span_end(sp.qt.suf_lo, sp.qt.n, b.hi, sp.reach));
    for (int u = cuda_span_next(sp, sp.qt, b, 0, first, end); u < end;
         u = cuda_span_next(sp, sp.qt, b, 0, u + 1, end))
        for (int i = u * SPAN_TILE; i < min((u + 1) * SPAN_TILE, p.sq); i++)
            if (cuda_span_pair(sp, p.off, i, j))
                f(i);
}

/* Sum over the warp, result in every lane. */
__device__ static float simple_warp_sum(float x)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* a . b over d channels, in every lane. */
__device__ static float simple_dot(const float *a, const float *b, int d, int lane)
{
    float s = 0.f;
    for (int c = lane; c < d; c += 32)
        s += a[c] * b[c];
    return simple_warp_sum(s);
}

/* Pointer to row t, head h of a (tokens, heads, dim) tensor. */
__device__ static inline const float *simple_row(const float *x, int t, int h, const simple_args &p)
{
    return x + ((size_t)t * p.heads + h) * p.dim;
}

__device__ static inline float *simple_row_w(float *x, int t, int h, const simple_args &p)
{
    return x + ((size_t)t * p.heads + h) * p.dim;
}

/* Forward: warp per (head h, query i), r = h * sq + i. The old (o, lse) of
 * accumulate is read before anything is written (lse after every chunk). */
__global__ static void simple_fwd_kernel(const simple_args p)
{
    const int lane = threadIdx.x & 31;
    const size_t rows = (size_t)p.heads * p.sq;
    for (size_t r = WARP_ID; r < rows; r += WARP_STRIDE) {
        const int h = (int)(r / (size_t)p.sq), i = (int)(r % (size_t)p.sq);
        const int nk = cuda_attn_visible(p.causal, p.off, p.sk, i);
        const float *qr = simple_row(p.q, i, h, p);
        float *orow = simple_row_w(p.out, i, h, p);
        const float lse_old = p.accumulate ? p.lse[r] : -INFINITY;
        float lse_new = -INFINITY;
        __syncwarp(); /* every lane holds lse_old before lane 0 may overwrite it */
        for (int c0 = 0; c0 < p.dim; c0 += CHUNK) {
            float acc[CHUNK_PER_LANE];
#pragma unroll
            for (int u = 0; u < CHUNK_PER_LANE; u++)
                acc[u] = 0.f;
            float m = -INFINITY, l = 0.f;
            auto key = [&](int j) {
                const float *vr = simple_row(p.v, j, h, p);
                const float s = simple_dot(qr, simple_row(p.k, j, h, p), p.dim, lane) * p.scale;
                const float mnew = fmaxf(m, s);
                const float corr = expf(m - mnew); /* m = -inf: 0 (mnew is finite) */
                const float pj = expf(s - mnew);
                l = l * corr + pj;
#pragma unroll
                for (int u = 0; u < CHUNK_PER_LANE; u++) {
                    const int c = c0 + lane + 32 * u;
                    if (c < p.dim)
                        acc[u] = acc[u] * corr + pj * vr[c];
                }
                m = mnew;
            };
            if (p.sp.on)
                simple_span_keys(p, i, key);
            else
                for (int j = 0; j < nk; j++)
                    key(j);
            lse_new = l > 0.f ? m + logf(l) : -INFINITY;
            const float inv = l > 0.f ? 1.f / l : 0.f;
            /* Merge weights: overwrite unless both sides saw keys. */
            float a1 = 0.f, a2 = 1.f;
            if (p.accumulate && lse_old != -INFINITY) {
                if (lse_new == -INFINITY)
                    break; /* nothing seen here: (o, lse) is already the union */
                const float mx = fmaxf(lse_old, lse_new);
                const float w1 = expf(lse_old - mx), w2 = expf(lse_new - mx);
                a1 = w1 / (w1 + w2);
                a2 = w2 / (w1 + w2);
            }
#pragma unroll
            for (int u = 0; u < CHUNK_PER_LANE; u++) {
                const int c = c0 + lane + 32 * u;
                if (c < p.dim)
                    orow[c] = (a1 != 0.f ? a1 * orow[c] : 0.f) + a2 * acc[u] * inv;
            }
        }
        if (lane == 0) {
            if (p.accumulate && lse_old != -INFINITY) {
                if (lse_new != -INFINITY) {
                    const float mx = fmaxf(lse_old, lse_new);
                    p.lse[r] = mx + logf(expf(lse_old - mx) + expf(lse_new - mx));
                }
            } else {
                p.lse[r] = lse_new;
            }
        }
    }
}

/* Di[h * sq + i] = rowsum(dO * O) of query i, head h. */
__global__ static void simple_di_kernel(const simple_args p, float *di)
{
    const int lane = threadIdx.x & 31;
    const size_t rows = (size_t)p.heads * p.sq;
    for (size_t r = WARP_ID; r < rows; r += WARP_STRIDE) {
        const int h = (int)(r / (size_t)p.sq), i = (int)(r % (size_t)p.sq);
        const float d = simple_dot(simple_row(p.dout, i, h, p), simple_row(p.o, i, h, p), p.dim, lane);
        if (lane == 0)
            di[r] = d;
    }
}

/* P and dS of (query i, key j): p = exp(s - lse), ds = p (dP - Di); lse = -inf
 * (a row that sees no key) gives p = 0. */
__device__ static inline void simple_p_ds(const simple_args &p, int h, int i, int j, int lane,
                                          float *pij, float *dsij)
{
    const size_t r = (size_t)h * p.sq + i;
    const float l = p.lse_in[r];
    if (l == -INFINITY) {
        *pij = 0.f;
        *dsij = 0.f;
        return;
    }
    const float s = simple_dot(simple_row(p.q, i, h, p), simple_row(p.k, j, h, p), p.dim, lane) * p.scale;
    const float pv = expf(s - l);
    const float dp = simple_dot(simple_row(p.dout, i, h, p), simple_row(p.v, j, h, p), p.dim, lane);
    *pij = pv;
    *dsij = pv * (dp - p.di[r]);
}

/* dK, dV: warp per (head h, key j), r = h * sk + j, over the queries that see j. */
__global__ static void simple_dkdv_kernel(const simple_args p)
{
    const int lane = threadIdx.x & 31;
    const size_t rows = (size_t)p.heads * p.sk;
    for (size_t r = WARP_ID; r < rows; r += WARP_STRIDE) {
        const int h = (int)(r / (size_t)p.sk), j = (int)(r % (size_t)p.sk);
        const int i_first = cuda_attn_first_query(p.causal, p.off, p.sq, j);
        float *dkr = simple_row_w(p.dk, j, h, p), *dvr = simple_row_w(p.dv, j, h, p);
        for (int c0 = 0; c0 < p.dim; c0 += CHUNK) {
            float ak[CHUNK_PER_LANE], av[CHUNK_PER_LANE];
#pragma unroll
            for (int u = 0; u < CHUNK_PER_LANE; u++) {
                ak[u] = 0.f;
                av[u] = 0.f;
            }
            auto query = [&](int i) {
                float pij, dsij;
                simple_p_ds(p, h, i, j, lane, &pij, &dsij);
                const float *qr = simple_row(p.q, i, h, p), *gr = simple_row(p.dout, i, h, p);
#pragma unroll
                for (int u = 0; u < CHUNK_PER_LANE; u++) {
                    const int c = c0 + lane + 32 * u;
                    if (c < p.dim) {
                        av[u] += pij * gr[c];
                        ak[u] += dsij * qr[c];
                    }
                }
            };
            if (p.sp.on)
                simple_span_queries(p, j, query);
            else
                for (int i = i_first; i < p.sq; i++)
                    query(i);
#pragma unroll
            for (int u = 0; u < CHUNK_PER_LANE; u++) {
                const int c = c0 + lane + 32 * u;
                if (c < p.dim) {
                    const float kx = ak[u] * p.scale, vx = av[u];
                    dkr[c] = p.accumulate ? dkr[c] + kx : kx;
                    dvr[c] = p.accumulate ? dvr[c] + vx : vx;
                }
            }
        }
    }
}

/* dQ: warp per (head h, query i), over the keys i sees. */
__global__ static void simple_dq_kernel(const simple_args p)
{
    const int lane = threadIdx.x & 31;
    const size_t rows = (size_t)p.heads * p.sq;
    for (size_t r = WARP_ID; r < rows; r += WARP_STRIDE) {
        const int h = (int)(r / (size_t)p.sq), i = (int)(r % (size_t)p.sq);
        const int nk = cuda_attn_visible(p.causal, p.off, p.sk, i);
        float *dqr = simple_row_w(p.dq, i, h, p);
        for (int c0 = 0; c0 < p.dim; c0 += CHUNK) {
            float aq[CHUNK_PER_LANE];
#pragma unroll
            for (int u = 0; u < CHUNK_PER_LANE; u++)
                aq[u] = 0.f;
            auto key = [&](int j) {
                float pij, dsij;
                simple_p_ds(p, h, i, j, lane, &pij, &dsij);
                const float *kr = simple_row(p.k, j, h, p);
#pragma unroll
                for (int u = 0; u < CHUNK_PER_LANE; u++) {
                    const int c = c0 + lane + 32 * u;
                    if (c < p.dim)
                        aq[u] += dsij * kr[c];
                }
            };
            if (p.sp.on)
                simple_span_keys(p, i, key);
            else
                for (int j = 0; j < nk; j++)
                    key(j);
#pragma unroll
            for (int u = 0; u < CHUNK_PER_LANE; u++) {
                const int c = c0 + lane + 32 * u;
                if (c < p.dim) {
                    const float x = aq[u] * p.scale;
                    dqr[c] = p.accumulate ? dqr[c] + x : x;
                }
            }
        }
    }
}

static simple_args simple_common(int sq, int sk, int heads, int dim, float scale,
                                 const rv_attn_mask *mask, int accumulate)
{
    simple_args p;
    memset(&p, 0, sizeof p);
    p.sq = sq;
    p.sk = sk;
    p.heads = heads;
    p.dim = dim;
    p.off = cuda_attn_off(mask);
    p.causal = mask->kind == RV_MASK_CAUSAL;
    p.accumulate = accumulate != 0;
    p.scale = cuda_attn_scale(scale, dim);
    return p;
}

/* The caller (cuda_attn_fwd) has checked the shapes and pointers, sq > 0. */
rv_status cuda_attn_fwd_simple(rv_backend *be, const rv_attn_fwd_args *a)
{
    simple_args p = simple_common(a->sq, a->sk, a->heads, a->dim, a->scale, &a->mask,
                                  a->accumulate);
    void *qmem = NULL, *kmem = NULL;
    rv_status st = cuda_span_make(be, &a->mask, a->sq, a->sk, SPAN_TILE, SPAN_TILE, &qmem,
                                  &kmem, &p.sp);
    if (st == RV_OK) {
        p.q = a->q;
        p.k = a->k;
        p.v = a->v;
        p.out = a->o;
        p.lse = a->lse;
        const size_t rows = (size_t)a->heads * a->sq;
        simple_fwd_kernel<<<cuda_blocks(rows, SIMPLE_WARPS), SIMPLE_WARPS * 32, 0,
                            cuda_ctx_of(be)->stream>>>(p);
        st = cuda_check_launch("attn_fwd (simple)");
    }
    cuda_scratch_free(be, qmem);
    cuda_scratch_free(be, kmem);
    return st;
}

/* The caller (cuda_attn_bwd) has checked the shapes and pointers, sq, sk > 0. */
rv_status cuda_attn_bwd_simple(rv_backend *be, const rv_attn_bwd_args *a)
{
    cudaStream_t stream = cuda_ctx_of(be)->stream;
    simple_args p = simple_common(a->sq, a->sk, a->heads, a->dim, a->scale, &a->mask,
                                  a->accumulate);
    const size_t qrows = (size_t)a->heads * a->sq, krows = (size_t)a->heads * a->sk;
    float *di = NULL; /* (heads, sq) */
    void *qmem = NULL, *kmem = NULL;
    rv_status st = cuda_span_make(be, &a->mask, a->sq, a->sk, SPAN_TILE, SPAN_TILE, &qmem,
                                  &kmem, &p.sp);
    if (st != RV_OK || (st = cuda_scratch(be, qrows * sizeof(float), (void **)&di)) != RV_OK)
        goto end;
    p.q = a->q;
    p.k = a->k;
    p.v = a->v;
    p.o = a->o;
    p.dout = a->dout;
    p.lse_in = a->lse;
    p.di = di;
    p.dq = a->dq;
    p.dk = a->dk;
    p.dv = a->dv;
    simple_di_kernel<<<cuda_blocks(qrows, SIMPLE_WARPS), SIMPLE_WARPS * 32, 0, stream>>>(p, di);
    if ((st = cuda_check_launch("attn_bwd (simple): Di")) != RV_OK)
        goto end;
    simple_dkdv_kernel<<<cuda_blocks(krows, SIMPLE_WARPS), SIMPLE_WARPS * 32, 0, stream>>>(p);
    if ((st = cuda_check_launch("attn_bwd (simple): dK, dV")) != RV_OK)
        goto end;
    simple_dq_kernel<<<cuda_blocks(qrows, SIMPLE_WARPS), SIMPLE_WARPS * 32, 0, stream>>>(p);
    st = cuda_check_launch("attn_bwd (simple): dQ");
end:
    cuda_scratch_free(be, di);
    cuda_scratch_free(be, qmem);
    cuda_scratch_free(be, kmem);
    return st;
}
