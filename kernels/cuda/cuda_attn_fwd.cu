/* cuda_attn_fwd.cu: attention forward of the CUDA backend on tensor cores,
 * FlashAttention-2 style: bf16 operands, f32 accumulation, the softmax online in
 * registers; never an (Sq x Sk) buffer. Same contract as kernels/cpu/
 * cpu_attention_fwd.c (masks by global position, -inf lse for rows that see no
 * key, accumulate = merge into (o, lse) by log-sum-exp).
 *
 * Two launches on the backend's stream:
 *   1. fwd_pack_kv: K, V (sk, heads, D) f32 -> (heads, kpad, D) bf16 scratch, only
 *      the keys some query sees, zero rows up to a whole key tile (kpad), so the
 *      main loop copies tiles with cp.async and no bounds checks.
 *   2. fwd_kernel<D>: grid (query tiles, heads), 4 warps; a CTA owns BM = 64 * MT
 *      query rows (16 * MT per warp), converts them to bf16 in shared memory once
 *      and walks the key tiles of BN keys the tile's last row can see:
 *        S = Q K^T (m16n8k16 mma, Q and K through ldmatrix)
 *        scores * scale * log2 e, masked to -inf, online max/sum, P = exp2(s - m)
 *        O = O * corr + P V (P straight from the S registers, V via ldmatrix.trans)
 *      K(t+1) streams in while P V(t) runs, V(t) while S(t) and the softmax run
 *      (one buffer each, as FlashAttention-2 does).
 * Span masks (RV_MASK_SPAN): two more launches first build the boxes of the query
 * tiles (BM rows) and key tiles (BN keys) (cuda_attn_span.cu); a CTA walks only
 * the key tiles its box meets (binary search, then box by box, attn_span.h), K of
 * the next such tile streaming in as above, masks pair by pair (keys and times of
 * the tile's rows in shared memory) only where the boxes partly meet, and a CTA
 * that meets no key tile exits after writing its empty rows.
 * Head dims other than 32, 64, 128 (and misaligned pointers, and
 * RINGVIT_CUDA_ATTN=simple) go to the f32 reference in cuda_attn_simple.cu. */
#include <math.h>

#include "cuda_attn.h"

#define FWD_WARPS 4
#define FWD_THREADS (FWD_WARPS * 32)

/* Tiles per head dim: BN keys per step, MT 16-row m-tiles per warp (BM = 64 * MT
 * query rows per CTA). Register use per thread is about 4 * MT * (BN + D) / 8 f32
 * accumulators (scores + output) and must stay under 255 without spilling. */
template <int D> struct fwd_cfg;
template <> struct fwd_cfg<32> {
    static constexpr int BN = 128, MT = 2;
};
template <> struct fwd_cfg<64> {
    static constexpr int BN = 64, MT = 2;
};
template <> struct fwd_cfg<128> {
    static constexpr int BN = 64, MT = 2;
};

struct fwd_params {
    const float *q;       /* (sq, heads, D) f32 */
    const bf16 *kb, *vb;  /* (heads, kpad, D) bf16, rows >= kvis zero */
    float *o;             /* (sq, heads, D) */
    float *lse;           /* (heads, sq) natural log */
    int sq, kvis, kpad, heads;
    int64_t off;          /* q_start - k_start */
    int causal, accumulate;
    float scale2;         /* scale * log2 e: scores in base-2 units */
};

/* Last key (chunk-local) query row i sees, -1 for none. kvis is the number of
 * keys the last query row sees, so no row sees a key past it. */
__device__ static __forceinline__ int fwd_last_key(const fwd_params &p, int i)
{
    if (!p.causal)
        return p.kvis - 1;
    int64_t l = (int64_t)i + p.off;
    return l < -1 ? -1 : (l >= (int64_t)p.kvis ? p.kvis - 1 : (int)l);
}

/* K, V (sk, heads, d) f32 -> kb, vb (heads, kpad, d) bf16; rows kvis..kpad-1 are
 * zero. One thread per 4 channels, grid-stride (heads * kpad * d may pass 2^31). */
__global__ static void fwd_pack_kv(const float *k, const float *v, bf16 *kb, bf16 *vb,
                                   int kvis, int kpad, int heads, int d)
{
    const size_t d4 = (size_t)d / 4, n = (size_t)heads * kpad * d4;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t x = (size_t)blockIdx.x * blockDim.x + threadIdx.x; x < n; x += stride) {
        size_t c = (x % d4) * 4, row = x / d4; /* row = h * kpad + j */
        int j = (int)(row % (size_t)kpad), h = (int)(row / (size_t)kpad);
        float4 kx = make_float4(0.f, 0.f, 0.f, 0.f), vx = kx;
        if (j < kvis) {
            size_t src = ((size_t)j * heads + h) * d + c;
            kx = __ldg(reinterpret_cast<const float4 *>(k + src));
            vx = __ldg(reinterpret_cast<const float4 *>(v + src));
        }
        attn_store_bf16x4(kb + row * d + c, kx);
        attn_store_bf16x4(vb + row * d + c, vx);
    }
}

/* BN rows of D bf16 from src (row-major, stride D) into dst (stride LD), async. */
template <int D, int BN, int LD>
__device__ static __forceinline__ void fwd_load_tile(bf16 *dst, const bf16 *src)
{
    constexpr int CH = D / 8; /* 16-byte chunks per row */
#pragma unroll
    for (int c = threadIdx.x; c < BN * CH; c += FWD_THREADS) {
        int r = c / CH, cc = c % CH;
        attn_cp_async16(dst + r * LD + cc * 8, src + (size_t)r * D + cc * 8);
    }
}

/* SPAN: the instantiation for span masks, sp its query tiles of BM rows and key tiles
 * of BN keys; the others never read sp. (A separate parameter: in fwd_params it
 * changes the register allocation of the other instantiations.) */
template <int D, int BN, int MT, bool SPAN>
__global__ static void __launch_bounds__(FWD_THREADS, 2) fwd_kernel(const fwd_params p,
                                                                    const cuda_span sp)
{
    constexpr int BM = FWD_WARPS * 16 * MT; /* query rows per CTA */
    constexpr int LD = D + 8;  /* smem row stride (bf16): +16 bytes, ldmatrix conflict-free */
    constexpr int NT = BN / 8; /* score n-tiles (8 keys) per m-tile */
    constexpr int DT = D / 8;  /* output n-tiles (8 channels) per m-tile */
    extern __shared__ __align__(16) unsigned char fwd_smem[];
    bf16 *sQ = reinterpret_cast<bf16 *>(fwd_smem); /* (BM, LD) */
    bf16 *sK = sQ + BM * LD;                        /* (BN, LD) */
    bf16 *sV = sK + BN * LD;                        /* (BN, LD) */
    /* Span masks only: keys and times of the CTA's rows and of the key tile. */
    double *sQk = reinterpret_cast<double *>(sV + BN * LD); /* (BM) */
    double *sQt = sQk + BM;                                  /* (BM) */
    double *sKk = sQt + BM;                                  /* (BN) */
    double *sKt = sKk + BN;                                  /* (BN) */
    span_box *sBox = reinterpret_cast<span_box *>(sKt + BN); /* the CTA's query box */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int h = blockIdx.y;
    const int i0 = (int)(gridDim.x - 1 - blockIdx.x) * BM; /* causal: long rows first */
    const int sq = p.sq;
    const size_t ldq = (size_t)p.heads * D; /* row stride of q, o (floats) */

    /* Keys the CTA visits: what its last row sees. Tiles wholly inside what its
     * first row sees need no mask. */
    const int i_last = min(i0 + BM, sq) - 1;
    const int kend = fwd_last_key(p, i_last) + 1;
    const int ntiles = (kend + BN - 1) / BN;
    const int clean_end = fwd_last_key(p, i0) + 1;

    /* This thread's rows: wrow + mt * 16 + g + 8 * hh (CTA-local). */
    const int wrow = warp * 16 * MT;
    int lim[MT][2]; /* last key each row sees */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++)
            lim[mt][hh] = fwd_last_key(p, i0 + wrow + mt * 16 + g + 8 * hh);
    /* A warp skips key tiles none of its rows sees (causal diagonal). */
    const int wlim = i0 + wrow < sq ? fwd_last_key(p, min(i0 + wrow + 16 * MT - 1, sq - 1)) : -1;

    const bf16 *kb = p.kb + (size_t)h * p.kpad * D;
    const bf16 *vb = p.vb + (size_t)h * p.kpad * D;

    /* The key tiles [jfirst, jend) to visit. A span mask (whose kernel runs with
     * causal = 0, so the prefix logic above sees every key) narrows them to those
     * its box may meet and steps from one that does to the next. */
    const span_box &qbox = *sBox;
    int jfirst = 0, jend = 0;
    if (SPAN) {
        if (tid == 0)
            *sBox = sp.qt.box[i0 / BM];
        __syncthreads();
        jfirst = span_first(sp.kt.pre_hi, sp.kt.n, qbox.lo, sp.reach);
        jend = max(jfirst, span_end(sp.kt.suf_lo, sp.kt.n, qbox.hi, sp.reach));
        jfirst = cuda_span_next(sp, sp.kt, qbox, 1, jfirst, jend);
        /* Keys and times of the CTA's rows (NaN past sq: they see nothing) and of
         * the first key tile; the loop's first barrier publishes them. */
        for (int c = tid; c < BM; c += FWD_THREADS) {
            const bool in = i0 + c < sq;
            sQk[c] = in ? sp.q_key[i0 + c] : (double)NAN;
            sQt[c] = in && sp.causal ? sp.q_time[i0 + c] : 0.0;
        }
        if (jfirst < jend)
            for (int c = tid; c < BN; c += FWD_THREADS) {
                const int j = jfirst * BN + c;
                sKk[c] = j < p.kvis ? sp.k_key[j] : (double)NAN;
                sKt[c] = j < p.kvis && sp.causal ? sp.k_time[j] : 0.0;
            }
    }

    float m[MT][2], l[MT][2]; /* running max (base 2, scaled), this thread's partial sum */
    float acc[MT][DT][4];     /* unnormalised output, C layout */
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            m[mt][hh] = -INFINITY;
            l[mt][hh] = 0.f;
        }
#pragma unroll
        for (int dt = 0; dt < DT; dt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[mt][dt][e] = 0.f;
    }

    if (SPAN ? jfirst < jend : ntiles > 0) {
        fwd_load_tile<D, BN, LD>(sK, SPAN ? kb + (size_t)jfirst * BN * D : kb);
        attn_cp_async_commit();
        /* Q rows -> bf16, zero past sq (overlaps the first key tile's copy). */
        for (int c = tid; c < BM * D / 4; c += FWD_THREADS) {
            int r = c / (D / 4), cc = (c % (D / 4)) * 4;
            float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
            if (i0 + r < sq)
                x = __ldg(reinterpret_cast<const float4 *>(p.q + (size_t)(i0 + r) * ldq +
                                                           (size_t)h * D + cc));
            attn_store_bf16x4(sQ + r * LD + cc, x);
        }
    }

    int jnext = 0; /* span: the next tile to visit */
    for (int jt = SPAN ? jfirst : 0; jt < (SPAN ? jend : ntiles); jt = SPAN ? jnext : jt + 1) {
        const int j0 = jt * BN;
        /* Span: how the tile meets the CTA's box, and the next tile that does. */
        int how = SPAN_SOME;
        if (SPAN) {
            const span_box kbox = sp.kt.box[jt];
            how = span_meet(&qbox, &kbox, sp.reach, sp.causal);
            jnext = cuda_span_next(sp, sp.kt, qbox, 1, jt + 1, jend);
        }
        /* K(jt) has landed and every warp is done with V(jt-1): refill V. */
        attn_cp_async_wait_all();
        __syncthreads();
        fwd_load_tile<D, BN, LD>(sV, vb + (size_t)j0 * D);
        attn_cp_async_commit();

        const bool active = j0 <= wlim;
        float s[MT][NT][4]; /* scores, then probabilities; C layout, cols = keys */
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    s[mt][nt][e] = 0.f;

        if (active) {
            /* S = Q K^T: A = Q rows (plain ldmatrix), B(k = channel, n = key) = K
             * rows (plain ldmatrix: matrices (keys 0-7, ch 0-7), (keys 0-7, ch 8-15),
             * (keys 8-15, ch 0-7), (keys 8-15, ch 8-15) = b0, b1 of two n-tiles). */
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                uint32_t a[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
                    attn_ldsm_x4(a[mt], sQ + (wrow + mt * 16 + (lane & 15)) * LD + kk * 16 +
                                            (lane >> 4) * 8);
#pragma unroll
                for (int np = 0; np < NT / 2; np++) {
                    uint32_t b[4];
                    attn_ldsm_x4(b, sK + (np * 16 + ((lane >> 4) << 3) + (lane & 7)) * LD +
                                        kk * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        attn_mma(s[mt][2 * np], a[mt], b[0], b[1]);
                        attn_mma(s[mt][2 * np + 1], a[mt], b[2], b[3]);
                    }
                }
            }

            /* Online softmax. Element e of n-tile nt is row g + 8 * (e / 2), key
             * j0 + nt * 8 + 2 * t4 + e % 2; a row's keys are spread over the 4
             * lanes of a group, so the row max is reduced over lanes xor 1, 2. */
            const bool need_mask = SPAN ? how == SPAN_SOME || j0 + BN > p.kvis
                                        : j0 + BN > clean_end;
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    float mx = -INFINITY;
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            float x = s[mt][nt][2 * hh + e] * p.scale2;
                            if (!SPAN) {
                                if (need_mask && j0 + nt * 8 + 2 * t4 + e > lim[mt][hh])
                                    x = -INFINITY;
                            } else if (need_mask) {
                                const int c = nt * 8 + 2 * t4 + e;
                                const int r = wrow + mt * 16 + g + 8 * hh;
                                if (!span_sees(sQk[r], sQt[r], (int64_t)i0 + r + p.off, sKk[c],
                                               sKt[c], (int64_t)j0 + c, sp.reach, sp.causal))
                                    x = -INFINITY;
                            }
                            s[mt][nt][2 * hh + e] = x;
                            mx = fmaxf(mx, x);
                        }
                    }
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    const float mnew = fmaxf(m[mt][hh], mx);
                    /* A row that has seen no key yet keeps m = -inf: subtract 0
                     * instead so nothing computes -inf - -inf; its p are exp2(-inf) = 0. */
                    const float muse = mnew == -INFINITY ? 0.f : mnew;
                    const float corr = attn_exp2(m[mt][hh] - muse); /* 0 while m = -inf */
                    m[mt][hh] = mnew;
                    float sum = 0.f;
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            float pv = attn_exp2(s[mt][nt][2 * hh + e] - muse);
                            s[mt][nt][2 * hh + e] = pv;
                            sum += pv;
                        }
                    }
                    l[mt][hh] = l[mt][hh] * corr + sum;
#pragma unroll
                    for (int dt = 0; dt < DT; dt++) {
                        acc[mt][dt][2 * hh] *= corr;
                        acc[mt][dt][2 * hh + 1] *= corr;
                    }
                }
            }
        }

        /* V(jt) has landed and every warp is done with K(jt) (and the span keys
         * of jt): prefetch K of the next tile. */
        attn_cp_async_wait_all();
        __syncthreads();
        if (SPAN ? jnext < jend : jt + 1 < ntiles) {
            fwd_load_tile<D, BN, LD>(sK, kb + (size_t)(SPAN ? jnext * BN : j0 + BN) * D);
            attn_cp_async_commit();
            if (SPAN)
                for (int c = tid; c < BN; c += FWD_THREADS) {
                    const int j = jnext * BN + c;
                    sKk[c] = j < p.kvis ? sp.k_key[j] : (double)NAN;
                    sKt[c] = j < p.kvis && sp.causal ? sp.k_time[j] : 0.0;
                }
        }

        if (active) {
            /* O += P V: A = P (two score n-tiles = one A fragment, see cuda_attn.h),
             * B(k = key, n = channel) = V rows via ldmatrix.trans: matrices (keys 0-7,
             * ch 0-7), (keys 8-15, ch 0-7), (keys 0-7, ch 8-15), (keys 8-15, ch 8-15)
             * = b0, b1 of channel n-tile 2 dp, then of 2 dp + 1. */
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) {
                uint32_t a[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    a[mt][0] = attn_pack_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                    a[mt][1] = attn_pack_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                    a[mt][2] = attn_pack_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                    a[mt][3] = attn_pack_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
                }
#pragma unroll
                for (int dp = 0; dp < D / 16; dp++) {
                    uint32_t b[4];
                    attn_ldsm_x4_trans(b, sV + (kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * LD +
                                              dp * 16 + (lane >> 4) * 8);
#pragma unroll
                    for (int mt = 0; mt < MT; mt++) {
                        attn_mma(acc[mt][2 * dp], a[mt], b[0], b[1]);
                        attn_mma(acc[mt][2 * dp + 1], a[mt], b[2], b[3]);
                    }
                }
            }
        }
    }

    /* Epilogue. Row sums: the 4 lanes of a group each hold part of a row. The old
     * lse of accumulate is read by all lanes before any lane writes it. */
    float lse_old[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            float t = l[mt][hh];
            t += __shfl_xor_sync(0xffffffffu, t, 1);
            t += __shfl_xor_sync(0xffffffffu, t, 2);
            l[mt][hh] = t;
            const int r = i0 + wrow + mt * 16 + g + 8 * hh;
            lse_old[mt][hh] = -INFINITY;
            if (p.accumulate && r < sq)
                lse_old[mt][hh] = p.lse[(size_t)h * sq + r];
        }
    }
    __syncwarp();

#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int r = i0 + wrow + mt * 16 + g + 8 * hh;
            if (r >= sq)
                continue;
            const float sum = l[mt][hh];
            /* sum > 0 iff the row saw a key; then m is finite. */
            const float lse_new = sum > 0.f ? (m[mt][hh] + log2f(sum)) * CUDA_ATTN_LN2 : -INFINITY;
            const float inv = sum > 0.f ? 1.f / sum : 0.f;
            float *orow = p.o + (size_t)r * ldq + (size_t)h * D + 2 * t4;
            float *lp = p.lse + (size_t)h * sq + r;
            const float lo = lse_old[mt][hh];
            if (!p.accumulate || lo == -INFINITY) {
                /* Overwrite; with accumulate the old side saw nothing, so the block's
                 * result is the union (and a row that saw nothing here either stays
                 * o = 0, lse = -inf by contract, written again unchanged). */
#pragma unroll
                for (int dt = 0; dt < DT; dt++)
                    *reinterpret_cast<float2 *>(orow + dt * 8) =
                        make_float2(acc[mt][dt][2 * hh] * inv, acc[mt][dt][2 * hh + 1] * inv);
                if (t4 == 0)
                    *lp = lse_new;
            } else if (lse_new != -INFINITY) {
                /* Merge by log-sum-exp relative to the larger side, as attn_merge. */
                const float mx = fmaxf(lo, lse_new);
                const float w1 = expf(lo - mx), w2 = expf(lse_new - mx);
                const float tot = w1 + w2;
                const float a1 = w1 / tot, a2 = w2 / tot * inv;
#pragma unroll
                for (int dt = 0; dt < DT; dt++) {
                    float2 *op = reinterpret_cast<float2 *>(orow + dt * 8);
                    float2 ov = *op;
                    *op = make_float2(a1 * ov.x + a2 * acc[mt][dt][2 * hh],
                                      a1 * ov.y + a2 * acc[mt][dt][2 * hh + 1]);
                }
                if (t4 == 0)
                    *lp = mx + logf(tot);
            }
            /* accumulate with nothing seen here: (o, lse) is already the union. */
        }
    }
}

template <int D>
static rv_status fwd_launch(rv_backend *be, const rv_attn_fwd_args *a, int64_t off, int kvis,
                            float scale)
{
    constexpr int BN = fwd_cfg<D>::BN, MT = fwd_cfg<D>::MT;
    constexpr int BM = FWD_WARPS * 16 * MT, LD = D + 8;
    static_assert((BM + 2 * BN) * LD * sizeof(bf16) % 8 == 0, "span arrays aligned");
    cudaStream_t stream = cuda_ctx_of(be)->stream;
    const int kpad = (kvis + BN - 1) / BN * BN;
    const size_t elems = (size_t)a->heads * kpad * D; /* one packed tensor */
    const int span = a->mask.kind == RV_MASK_SPAN;
    const size_t smem = (size_t)(BM + 2 * BN) * LD * sizeof(bf16) +
                        (span ? (size_t)2 * (BM + BN) * sizeof(double) + sizeof(span_box) : 0);
    void *scr = NULL, *qmem = NULL, *kmem = NULL;
    fwd_params p;
    cuda_span sp;
    rv_status st = RV_OK;

    if ((st = cuda_span_make(be, &a->mask, a->sq, kvis, BM, BN, &qmem, &kmem, &sp)) != RV_OK)
        goto end;

    if (elems > 0) {
        if ((st = cuda_scratch(be, 2 * elems * sizeof(bf16), &scr)) != RV_OK)
            goto end;
        fwd_pack_kv<<<cuda_blocks(elems / 4, 256), 256, 0, stream>>>(
            a->k, a->v, (bf16 *)scr, (bf16 *)scr + elems, kvis, kpad, a->heads, D);
        if ((st = cuda_check_launch("attn_fwd: pack keys")) != RV_OK)
            goto end;
    }
    p.q = a->q;
    p.kb = (const bf16 *)scr;
    p.vb = scr ? (const bf16 *)scr + elems : NULL;
    p.o = a->o;
    p.lse = a->lse;
    p.sq = a->sq;
    p.kvis = kvis;
    p.kpad = kpad;
    p.heads = a->heads;
    p.off = off;
    p.causal = a->mask.kind == RV_MASK_CAUSAL;
    p.accumulate = a->accumulate != 0;
    p.scale2 = scale * CUDA_ATTN_LOG2E;
    {
        void (*kern)(const fwd_params, const cuda_span) = span ? fwd_kernel<D, BN, MT, true>
                                                               : fwd_kernel<D, BN, MT, false>;
        st = cuda_check(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)smem),
                        "attn_fwd: shared memory size");
        if (st != RV_OK)
            goto end;
        kern<<<dim3((unsigned)((a->sq + BM - 1) / BM), (unsigned)a->heads), FWD_THREADS, smem,
               stream>>>(p, sp);
    }
    st = cuda_check_launch("attn_fwd");
end:
    cuda_scratch_free(be, scr);
    cuda_scratch_free(be, qmem);
    cuda_scratch_free(be, kmem);
    return st;
}

rv_status cuda_attn_fwd(rv_backend *be, const rv_attn_fwd_args *a)
{
    int none = 0;
    rv_status st = rv_args_attn_fwd(a, &none);
    if (st != RV_OK || none)
        return st;

    const int causal = a->mask.kind == RV_MASK_CAUSAL;
    const int64_t off = cuda_attn_off(&a->mask);
    /* Keys the last query row sees: no row sees more. */
    const int kvis = cuda_attn_visible(causal, off, a->sk, (int64_t)a->sq - 1);
    if (kvis == 0 && a->accumulate)
        return RV_OK; /* nothing to merge into (o, lse) */

    const int fast = cuda_attn_tc_dim(a->dim) && !cuda_attn_simple_requested() &&
                     cuda_attn_aligned(a->q) && cuda_attn_aligned(a->o) &&
                     (kvis == 0 || (cuda_attn_aligned(a->k) && cuda_attn_aligned(a->v)));
    if (!fast)
        return cuda_attn_fwd_simple(be, a);
    const float scale = cuda_attn_scale(a->scale, a->dim);
    switch (a->dim) {
    case 32:
        return fwd_launch<32>(be, a, off, kvis, scale);
    case 64:
        return fwd_launch<64>(be, a, off, kvis, scale);
    default:
        return fwd_launch<128>(be, a, off, kvis, scale);
    }
}
