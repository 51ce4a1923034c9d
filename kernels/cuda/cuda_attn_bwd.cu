/* cuda_attn_bwd.cu: attention backward of the CUDA backend on tensor cores,
 * FlashAttention-2 style: the probabilities are recomputed tile by tile from Q, K
 * and the saved log-sum-exp, bf16 operands, f32 accumulation. Same contract as
 * kernels/cpu/cpu_attention_bwd.c: o and lse are the final (merged) ones,
 *   P  = exp(scale * Q K^T - lse)        dV += P^T dO
 *   dP = dO V^T                          dS  = P * (dP - Di),  Di = rowsum(dO * O)
 *   dQ += scale * dS K                   dK += scale * dS^T Q
 * accumulate = 0 overwrites dq, dk, dv; 1 adds into them.
 *
 * Three steps on the backend's stream:
 *   1. dq is zeroed (cudaMemsetAsync) unless the call accumulates.
 *   2. bwd_prep: one warp per (head, query row): Q, dO -> (heads, sq_pad, D) bf16
 *      scratch, Di and lse * log2 e -> (heads, sq_pad) f32 scratch; rows past sq
 *      are zero with lse2 = +inf (as are rows whose lse is -inf), so their
 *      probabilities are exactly 0 and the main loop needs no bounds checks.
 *   3. bwd_kernel<D>: grid (key tiles of BN = 128, heads), 8 warps; warp w owns
 *      keys 16w..16w+15 of the tile, keeps their dK, dV in registers and walks the
 *      query tiles (BM = 64 rows) that see the key tile, working on transposed
 *      scores so every product but one takes its A operand from registers:
 *        S^T = K Q^T, P^T = exp2(S^T * scale log2e - lse2)   (keys x queries)
 *        dV += P^T dO                       (A = P^T from the S^T registers)
 *        dP^T = V dO^T, dS^T = P^T (dP^T - Di)
 *        dK += dS^T Q                       (A = dS^T from registers)
 *        dS^T -> shared memory; dQ(tile) = dS K, split over the 8 warps, added
 *        to dq with float2 atomics (every key tile adds into the same rows).
 *      The next query tile's Q, dO, lse2, Di stream in (cp.async, double buffer)
 *      while the current one is computed. Causal: query tiles before the first
 *      one that sees the key tile are never visited, warps whose 16 keys no query
 *      of the tile sees skip the products, and partial tiles are masked per
 *      element.
 * Span masks (RV_MASK_SPAN): two more launches first build the boxes of the query
 * tiles (BM rows) and of every 16 keys (a warp's) (cuda_attn_span.cu); a CTA walks
 * only the query tiles its keys' box meets (binary search, then box by box,
 * attn_span.h), streaming in the next such tile as above; a warp whose 16 keys
 * meet none of the tile's queries skips the products, one they partly meet masks
 * pair by pair (the keys and times of the query tile and of the CTA's keys in
 * shared memory).
 * Head dims other than 32, 64, 128 (and misaligned pointers, and
 * RINGVIT_CUDA_ATTN=simple) go to the f32 reference in cuda_attn_simple.cu. */
#include <math.h>

#include "cuda_attn.h"

#define BWD_WARPS 8
#define BWD_THREADS (BWD_WARPS * 32)
#define BWD_BN (BWD_WARPS * 16) /* keys per CTA: 16 per warp */
#define BWD_BM 64               /* query rows per step */
#define PREP_WARPS 8

struct bwd_params {
    const float *k, *v;   /* (sk, heads, D) f32 */
    const bf16 *qb, *dob; /* (heads, sq_pad, D) bf16, rows >= sq zero */
    const float *lse2;    /* (heads, sq_pad) lse * log2 e; +inf for rows that see nothing */
    const float *di;      /* (heads, sq_pad) rowsum(dO * O), 0 past sq */
    float *dq;            /* (sq, heads, D), added to atomically */
    float *dk, *dv;       /* (sk, heads, D) */
    int sq, sq_pad, sk, heads;
    int64_t off; /* q_start - k_start */
    int causal, accumulate;
    float scale, scale2; /* scale, scale * log2 e */
};

/* Row r of the (heads, sq_pad) prep tensors: h = r / sq_pad, query i = r % sq_pad.
 * One warp per row, lanes over channels in float4s (d is a multiple of 4). */
__global__ static void bwd_prep(const float *q, const float *dout, const float *o,
                                const float *lse, bf16 *qb, bf16 *dob, float *lse2,
                                float *di, int sq, int sq_pad, int heads, int d)
{
    const int lane = threadIdx.x & 31;
    const size_t rows = (size_t)heads * sq_pad;
    const size_t stride = (size_t)gridDim.x * PREP_WARPS;
    for (size_t r = (size_t)blockIdx.x * PREP_WARPS + (threadIdx.x >> 5); r < rows;
         r += stride) {
        const int h = (int)(r / (size_t)sq_pad), i = (int)(r % (size_t)sq_pad);
        bf16 *qd = qb + r * d, *dod = dob + r * d;
        float dsum = 0.f;
        if (i < sq) {
            const size_t src = ((size_t)i * heads + h) * d; /* row i, head h */
            for (int c = lane * 4; c < d; c += 128) {
                float4 qx = __ldg(reinterpret_cast<const float4 *>(q + src + c));
                float4 gx = __ldg(reinterpret_cast<const float4 *>(dout + src + c));
                float4 ox = __ldg(reinterpret_cast<const float4 *>(o + src + c));
                attn_store_bf16x4(qd + c, qx);
                attn_store_bf16x4(dod + c, gx);
                dsum += gx.x * ox.x + gx.y * ox.y + gx.z * ox.z + gx.w * ox.w;
            }
        } else {
            const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
            for (int c = lane * 4; c < d; c += 128) {
                attn_store_bf16x4(qd + c, z);
                attn_store_bf16x4(dod + c, z);
            }
        }
#pragma unroll
        for (int o2 = 16; o2 > 0; o2 >>= 1)
            dsum += __shfl_xor_sync(0xffffffffu, dsum, o2);
        if (lane == 0) {
            float l = i < sq ? lse[(size_t)h * sq + i] : -INFINITY;
            di[r] = dsum;
            lse2[r] = l == -INFINITY ? INFINITY : l * CUDA_ATTN_LOG2E;
        }
    }
}

/* Query tile `it` of Q, dO (BM rows of D bf16) and its lse2, Di into one buffer. */
template <int D, int LD>
__device__ static __forceinline__ void bwd_load_qtile(bf16 *sQ, bf16 *sdO, float *sL, float *sDi,
                                                      const bf16 *qb, const bf16 *dob,
                                                      const float *lse2, const float *di, int it)
{
    constexpr int CH = D / 8; /* 16-byte chunks per row */
    const size_t row0 = (size_t)it * BWD_BM;
#pragma unroll
    for (int c = threadIdx.x; c < BWD_BM * CH; c += BWD_THREADS) {
        int r = c / CH, cc = c % CH;
        attn_cp_async16(sQ + r * LD + cc * 8, qb + (row0 + r) * D + cc * 8);
        attn_cp_async16(sdO + r * LD + cc * 8, dob + (row0 + r) * D + cc * 8);
    }
    if (threadIdx.x < BWD_BM / 4)
        attn_cp_async16f(sL + threadIdx.x * 4, lse2 + row0 + threadIdx.x * 4);
    else if (threadIdx.x < BWD_BM / 2)
        attn_cp_async16f(sDi + (threadIdx.x - BWD_BM / 4) * 4,
                         di + row0 + (threadIdx.x - BWD_BM / 4) * 4);
}

/* SPAN: the instantiation for span masks, sp its query tiles of BM rows and key tiles
 * of 16 keys (a warp's); the others never read sp. (A separate parameter, as in
 * cuda_attn_fwd.cu.) */
template <int D, bool SPAN>
__global__ static void __launch_bounds__(BWD_THREADS, 1) bwd_kernel(const bwd_params p,
                                                                    const cuda_span sp)
{
    constexpr int BN = BWD_BN, BM = BWD_BM;
    constexpr int LD = D + 8;   /* smem row stride (bf16) of K, V, Q, dO: ldmatrix conflict-free */
    constexpr int LDS = BM + 8; /* smem row stride of dS^T */
    constexpr int NT = BM / 8;  /* n-tiles (8 queries) of the warp's S^T */
    constexpr int DT = D / 8;   /* n-tiles (8 channels) of dK, dV */
    constexpr int RG = BM / 16;        /* dQ: 16-row groups ... */
    constexpr int CG = BWD_WARPS / RG; /* ... times channel groups = warps */
    constexpr int DQ = D / CG;         /* channels per warp in dQ */
    static_assert(DQ % 16 == 0, "dQ channel split");
    extern __shared__ __align__(16) unsigned char bwd_smem[];
    bf16 *sK = reinterpret_cast<bf16 *>(bwd_smem); /* (BN, LD) */
    bf16 *sV = sK + BN * LD;                        /* (BN, LD) */
    bf16 *sQ = sV + BN * LD;                        /* (2, BM, LD) double buffer */
    bf16 *sdO = sQ + 2 * BM * LD;                   /* (2, BM, LD) */
    bf16 *sdS = sdO + 2 * BM * LD;                  /* (BN, LDS) dS^T of the step, bf16 */
    float *sL = reinterpret_cast<float *>(sdS + BN * LDS); /* (2, BM) lse2 */
    float *sDi = sL + 2 * BM;                              /* (2, BM) Di */
    double *sQk = reinterpret_cast<double *>(sDi + 2 * BM); /* (2, BM) span: query keys */
    double *sQt = sQk + 2 * BM;                             /* (2, BM) span: query times */
    double *sKk = sQt + 2 * BM;                             /* (BN) span: the tile's keys */
    double *sKt = sKk + BN;                                 /* (BN) span: their times */
    span_box *sBox = reinterpret_cast<span_box *>(sKt + BN); /* (1 + warps) span: the
                                                                 CTA's and each warp's key box */

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int h = blockIdx.y;
    const int j0 = blockIdx.x * BN;
    const int sq = p.sq, sk = p.sk;
    const size_t ldg = (size_t)p.heads * D; /* row stride of the (tokens, heads, D) tensors */
    const bf16 *qb = p.qb + (size_t)h * p.sq_pad * D;
    const bf16 *dob = p.dob + (size_t)h * p.sq_pad * D;
    const float *lse2 = p.lse2 + (size_t)h * p.sq_pad;
    const float *di = p.di + (size_t)h * p.sq_pad;

    /* First query that sees a key (sq for keys past sk or seen by none). Queries
     * that see a key are a suffix, so the CTA starts at its first key's tile. */
    auto first_query = [&](int j) -> int {
        return j >= sk ? sq : cuda_attn_first_query(p.causal, p.off, sq, j);
    };
    const int nqt = p.sq_pad / BM;
    const int qf0 = first_query(j0);
    int it0 = qf0 >= sq ? nqt : qf0 / BM;
    const int kw = warp * 16; /* the warp's first key row in the tile */
    const int qf[2] = {first_query(j0 + kw + g), first_query(j0 + kw + g + 8)};
    const int qf_wfirst = first_query(j0 + kw);    /* ... of the warp's first key */
    const int qf_wlast = first_query(j0 + kw + 15); /* ... and of its last */

    /* The query tiles [it0, iend) to visit. A span mask (whose kernel runs with
     * causal = 0, so the suffix logic above sees every query) narrows them to those
     * the box of the CTA's keys may meet and steps from one that does to the next;
     * each warp then meets a tile with the box of its own 16 keys. */
    const span_box &cbox = sBox[0], &wbox = sBox[1 + warp];
    int iend = nqt;
    if (SPAN) {
        /* Boxes in shared memory, not registers: the loop keeps them all along. */
        if (tid == 0) {
            const int u0 = j0 / 16;
            span_box c = span_box_empty();
            for (int w = 0; w < BWD_WARPS; w++) {
                const span_box x = u0 + w < sp.kt.n ? sp.kt.box[u0 + w] : span_box_empty();
                span_box_merge(&c, &x);
                sBox[1 + w] = x;
            }
            sBox[0] = c;
        }
        __syncthreads();
        it0 = span_first(sp.qt.pre_hi, sp.qt.n, cbox.lo, sp.reach);
        iend = max(it0, span_end(sp.qt.suf_lo, sp.qt.n, cbox.hi, sp.reach));
        it0 = cuda_span_next(sp, sp.qt, cbox, 0, it0, iend);
        /* The tile's keys and times (NaN past sk: they see nothing); the loop's
         * first barrier publishes them. */
        for (int c = tid; c < BN; c += BWD_THREADS) {
            const int j = j0 + c;
            sKk[c] = j < sk ? sp.k_key[j] : (double)NAN;
            sKt[c] = j < sk && sp.causal ? sp.k_time[j] : 0.0;
        }
    }
    /* Span: the keys and times of query tile `it` into buffer b (plain stores: the
     * buffer is not read until after the next barrier). */
    auto span_load = [&](int b, int it) {
        if (SPAN)
            for (int c = tid; c < BM; c += BWD_THREADS) {
                const int i = it * BM + c;
                sQk[b * BM + c] = i < sq ? sp.q_key[i] : (double)NAN;
                sQt[b * BM + c] = i < sq && sp.causal ? sp.q_time[i] : 0.0;
            }
    };

    if (it0 < iend) {
        bwd_load_qtile<D, LD>(sQ, sdO, sL, sDi, qb, dob, lse2, di, it0);
        attn_cp_async_commit();
        span_load(0, it0);
    }
    /* K, V rows of the tile -> bf16, zero past sk (overlaps the first copy). */
    for (int c = tid; c < BN * D / 4; c += BWD_THREADS) {
        int r = c / (D / 4), cc = (c % (D / 4)) * 4;
        float4 kx = make_float4(0.f, 0.f, 0.f, 0.f), vx = kx;
        if (j0 + r < sk) {
            size_t src = (size_t)(j0 + r) * ldg + (size_t)h * D + cc;
            kx = __ldg(reinterpret_cast<const float4 *>(p.k + src));
            vx = __ldg(reinterpret_cast<const float4 *>(p.v + src));
        }
        attn_store_bf16x4(sK + r * LD + cc, kx);
        attn_store_bf16x4(sV + r * LD + cc, vx);
    }

    float dk[DT][4], dv[DT][4]; /* C layout: rows = the warp's keys, cols = channels */
#pragma unroll
    for (int dt = 0; dt < DT; dt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            dk[dt][e] = 0.f;
            dv[dt][e] = 0.f;
        }

    for (int it = it0, step = 0; it < iend; step++) {
        const int buf = step & 1;
        /* Span: how the warp's keys meet the tile, and the next tile the CTA's do. */
        int whow = SPAN_SOME, inext = it + 1;
        if (SPAN) {
            const span_box qbox = sp.qt.box[it];
            whow = span_meet(&qbox, &wbox, sp.reach, sp.causal);
            inext = cuda_span_next(sp, sp.qt, cbox, 0, it + 1, iend);
        }
        /* Tile `it` has landed; every warp is done with the previous step (its
         * buffers and its dS^T reads), so the other buffer may be refilled. */
        attn_cp_async_wait_all();
        __syncthreads();
        if (inext < iend) {
            bwd_load_qtile<D, LD>(sQ + (buf ^ 1) * BM * LD, sdO + (buf ^ 1) * BM * LD,
                                  sL + (buf ^ 1) * BM, sDi + (buf ^ 1) * BM, qb, dob, lse2, di,
                                  inext);
            attn_cp_async_commit();
            span_load(buf ^ 1, inext);
        }
        const int i0 = it * BM;
        const bf16 *cQ = sQ + buf * BM * LD, *cdO = sdO + buf * BM * LD;
        const float *cL = sL + buf * BM, *cDi = sDi + buf * BM;
        const double *cQk = sQk + buf * BM, *cQt = sQt + buf * BM;

        uint32_t ds[BM / 16][4]; /* dS^T as bf16 A fragments (k = queries) */
#pragma unroll
        for (int kk = 0; kk < BM / 16; kk++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                ds[kk][e] = 0u;

        /* Some query of the tile sees a key of the warp. */
        if (i0 + BM - 1 >= qf_wfirst && whow != SPAN_NONE) {
            /* S^T = K Q^T: A = K rows (plain ldmatrix), B(k = channel, n = query) =
             * Q rows (plain ldmatrix, matrices (q 0-7, ch 0-7), (q 0-7, ch 8-15),
             * (q 8-15, ch 0-7), (q 8-15, ch 8-15) = b0, b1 of two n-tiles). */
            float s[NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    s[nt][e] = 0.f;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                uint32_t a[4];
                attn_ldsm_x4(a, sK + (kw + (lane & 15)) * LD + kk * 16 + (lane >> 4) * 8);
#pragma unroll
                for (int np = 0; np < NT / 2; np++) {
                    uint32_t b[4];
                    attn_ldsm_x4(b, cQ + (np * 16 + ((lane >> 4) << 3) + (lane & 7)) * LD +
                                        kk * 16 + ((lane >> 3) & 1) * 8);
                    attn_mma(s[2 * np], a, b[0], b[1]);
                    attn_mma(s[2 * np + 1], a, b[2], b[3]);
                }
            }
            /* P^T. Element e of n-tile nt: key kw + g + 8 * (e / 2), query
             * nt * 8 + 2 * t4 + e % 2 of the tile. lse2 = +inf (rows that see no
             * key, rows past sq) gives exp2(-inf) = 0. */
            /* Some (key, query) pair unseen; span: keys past sk are masked too. */
            const bool need_mask = SPAN ? whow == SPAN_SOME || j0 + kw + 16 > sk
                                        : i0 < qf_wlast;
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int ic = nt * 8 + 2 * t4 + (e & 1);
                    float pv = attn_exp2(s[nt][e] * p.scale2 - cL[ic]);
                    if (need_mask) {
                        if (!SPAN) {
                            if (i0 + ic < qf[e >> 1])
                                pv = 0.f;
                        } else {
                            const int kr = kw + g + 8 * (e >> 1); /* the key's tile row */
                            if (!span_sees(cQk[ic], cQt[ic], (int64_t)i0 + ic + p.off, sKk[kr],
                                           sKt[kr], (int64_t)j0 + kr, sp.reach, sp.causal))
                                pv = 0.f;
                        }
                    }
                    s[nt][e] = pv;
                }

            /* P^T as bf16 A fragments (two n-tiles each, see cuda_attn.h); the f32
             * scores die here, which keeps dK, dV, P and dP^T within the registers. */
            uint32_t pk[BM / 16][4];
#pragma unroll
            for (int kk = 0; kk < BM / 16; kk++) {
                pk[kk][0] = attn_pack_bf16(s[2 * kk][0], s[2 * kk][1]);
                pk[kk][1] = attn_pack_bf16(s[2 * kk][2], s[2 * kk][3]);
                pk[kk][2] = attn_pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
                pk[kk][3] = attn_pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
            }

            /* dV += P^T dO: B(k = query, n = channel) = dO rows via ldmatrix.trans. */
#pragma unroll
            for (int kk = 0; kk < BM / 16; kk++) {
#pragma unroll
                for (int dp = 0; dp < D / 16; dp++) {
                    uint32_t b[4];
                    attn_ldsm_x4_trans(b, cdO + (kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * LD +
                                              dp * 16 + (lane >> 4) * 8);
                    attn_mma(dv[2 * dp], pk[kk], b[0], b[1]);
                    attn_mma(dv[2 * dp + 1], pk[kk], b[2], b[3]);
                }
            }

            /* dP^T = V dO^T: as S^T with V for K and dO for Q. */
            float dpt[NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    dpt[nt][e] = 0.f;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                uint32_t a[4];
                attn_ldsm_x4(a, sV + (kw + (lane & 15)) * LD + kk * 16 + (lane >> 4) * 8);
#pragma unroll
                for (int np = 0; np < NT / 2; np++) {
                    uint32_t b[4];
                    attn_ldsm_x4(b, cdO + (np * 16 + ((lane >> 4) << 3) + (lane & 7)) * LD +
                                        kk * 16 + ((lane >> 3) & 1) * 8);
                    attn_mma(dpt[2 * np], a, b[0], b[1]);
                    attn_mma(dpt[2 * np + 1], a, b[2], b[3]);
                }
            }

            /* dS^T = P^T (dP^T - Di) with the bf16 P^T of dV (the same P both
             * products see), packed as A fragments: pk[kk][r] holds the pairs of
             * n-tile 2 kk + r / 2, elements 2 (r % 2) and 2 (r % 2) + 1. */
#pragma unroll
            for (int kk = 0; kk < BM / 16; kk++) {
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int nt = 2 * kk + (r >> 1), e0 = 2 * (r & 1);
                    const int ic = nt * 8 + 2 * t4; /* query of the pair's first element */
                    const float p0 = __uint_as_float(pk[kk][r] << 16);
                    const float p1 = __uint_as_float(pk[kk][r] & 0xffff0000u);
                    ds[kk][r] = attn_pack_bf16(p0 * (dpt[nt][e0] - cDi[ic]),
                                               p1 * (dpt[nt][e0 + 1] - cDi[ic + 1]));
                }
            }

            /* dK += dS^T Q: B(k = query, n = channel) = Q rows via ldmatrix.trans. */
#pragma unroll
            for (int kk = 0; kk < BM / 16; kk++) {
#pragma unroll
                for (int dp = 0; dp < D / 16; dp++) {
                    uint32_t b[4];
                    attn_ldsm_x4_trans(b, cQ + (kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * LD +
                                              dp * 16 + (lane >> 4) * 8);
                    attn_mma(dk[2 * dp], ds[kk], b[0], b[1]);
                    attn_mma(dk[2 * dp + 1], ds[kk], b[2], b[3]);
                }
            }
        }

        /* dS^T (keys x queries) to shared memory: fragment kk covers queries
         * kk*16..kk*16+15; ds[kk][0] = (key g, queries 2t, 2t+1), [1] = key g+8,
         * [2], [3] the same 8 queries further. Zeros for a warp that skipped. */
#pragma unroll
        for (int kk = 0; kk < BM / 16; kk++) {
            bf16 *d0 = sdS + (kw + g) * LDS + kk * 16 + 2 * t4;
            *reinterpret_cast<uint32_t *>(d0) = ds[kk][0];
            *reinterpret_cast<uint32_t *>(d0 + 8 * LDS) = ds[kk][1];
            *reinterpret_cast<uint32_t *>(d0 + 8) = ds[kk][2];
            *reinterpret_cast<uint32_t *>(d0 + 8 * LDS + 8) = ds[kk][3];
        }
        __syncthreads();

        /* dQ(tile) = dS K for query rows rg*16.. and channels cg*DQ..: A(i, j) =
         * dS^T[j][i] via ldmatrix.trans of sdS (matrices (keys 0-7, q 0-7),
         * (keys 0-7, q 8-15), (keys 8-15, q 0-7), (keys 8-15, q 8-15) = a0..a3),
         * B(k = key, n = channel) = K rows via ldmatrix.trans. */
        {
            const int rg = warp % RG, cg = warp / RG;
            float dqa[DQ / 8][4];
#pragma unroll
            for (int nt = 0; nt < DQ / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    dqa[nt][e] = 0.f;
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) {
                uint32_t a[4];
                attn_ldsm_x4_trans(a, sdS + (kk * 16 + ((lane >> 4) << 3) + (lane & 7)) * LDS +
                                          rg * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
                for (int dp = 0; dp < DQ / 16; dp++) {
                    uint32_t b[4];
                    attn_ldsm_x4_trans(b, sK + (kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * LD +
                                              cg * DQ + dp * 16 + (lane >> 4) * 8);
                    attn_mma(dqa[2 * dp], a, b[0], b[1]);
                    attn_mma(dqa[2 * dp + 1], a, b[2], b[3]);
                }
            }
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                const int row = i0 + rg * 16 + g + 8 * hh;
                if (row >= sq)
                    continue;
                float *dst = p.dq + (size_t)row * ldg + (size_t)h * D + cg * DQ + 2 * t4;
#pragma unroll
                for (int nt = 0; nt < DQ / 8; nt++)
                    atomicAdd(reinterpret_cast<float2 *>(dst + nt * 8),
                              make_float2(dqa[nt][2 * hh] * p.scale, dqa[nt][2 * hh + 1] * p.scale));
            }
        }
        it = inext;
    }

    /* dK (scaled), dV of the warp's keys: each key row belongs to one CTA. */
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const int j = j0 + kw + g + 8 * hh;
        if (j >= sk)
            continue;
        const size_t base = (size_t)j * ldg + (size_t)h * D + 2 * t4;
#pragma unroll
        for (int dt = 0; dt < DT; dt++) {
            float2 *kp = reinterpret_cast<float2 *>(p.dk + base + dt * 8);
            float2 *vp = reinterpret_cast<float2 *>(p.dv + base + dt * 8);
            float2 kx = make_float2(dk[dt][2 * hh] * p.scale, dk[dt][2 * hh + 1] * p.scale);
            float2 vx = make_float2(dv[dt][2 * hh], dv[dt][2 * hh + 1]);
            if (p.accumulate) {
                float2 ko = *kp, vo = *vp;
                kx.x += ko.x;
                kx.y += ko.y;
                vx.x += vo.x;
                vx.y += vo.y;
            }
            *kp = kx;
            *vp = vx;
        }
    }
}

template <int D>
static rv_status bwd_launch(rv_backend *be, const rv_attn_bwd_args *a, float scale)
{
    constexpr int BN = BWD_BN, BM = BWD_BM, LD = D + 8, LDS = BM + 8;
    cudaStream_t stream = cuda_ctx_of(be)->stream;
    const int sq_pad = (a->sq + BM - 1) / BM * BM;
    const size_t rows = (size_t)a->heads * sq_pad;
    const size_t elems = rows * D; /* one bf16 tensor */
    const int span = a->mask.kind == RV_MASK_SPAN;
    const size_t smem = (size_t)(2 * BN + 4 * BM) * LD * sizeof(bf16) +
                        (size_t)BN * LDS * sizeof(bf16) + 4 * BM * sizeof(float) +
                        (span ? (4 * BM + 2 * BN) * sizeof(double) +
                                    (1 + BWD_WARPS) * sizeof(span_box)
                              : 0);
    void *scr = NULL, *qmem = NULL, *kmem = NULL;
    bwd_params p;
    cuda_span sp;
    rv_status st;

    if ((st = cuda_span_make(be, &a->mask, a->sq, a->sk, BM, 16, &qmem, &kmem, &sp)) != RV_OK)
        goto end;

    /* Scratch: qb, dob (rows, D) bf16, then lse2, di (rows) f32; every part starts
     * 16-byte aligned (rows is a multiple of 64). */
    if ((st = cuda_scratch(be, 2 * elems * sizeof(bf16) + 2 * rows * sizeof(float), &scr)) != RV_OK)
        goto end;
    p.k = a->k;
    p.v = a->v;
    p.qb = (const bf16 *)scr;
    p.dob = p.qb + elems;
    p.lse2 = (const float *)(p.dob + elems);
    p.di = p.lse2 + rows;
    p.dq = a->dq;
    p.dk = a->dk;
    p.dv = a->dv;
    p.sq = a->sq;
    p.sq_pad = sq_pad;
    p.sk = a->sk;
    p.heads = a->heads;
    p.off = cuda_attn_off(&a->mask);
    p.causal = a->mask.kind == RV_MASK_CAUSAL;
    p.accumulate = a->accumulate != 0;
    p.scale = scale;
    p.scale2 = scale * CUDA_ATTN_LOG2E;

    if (!a->accumulate) {
        st = cuda_check(cudaMemsetAsync(a->dq, 0, sizeof(float) * (size_t)a->sq * a->heads * D,
                                        stream),
                        "attn_bwd: clear dq");
        if (st != RV_OK)
            goto end;
    }
    bwd_prep<<<cuda_blocks(rows, PREP_WARPS), PREP_WARPS * 32, 0, stream>>>(
        a->q, a->dout, a->o, a->lse, (bf16 *)p.qb, (bf16 *)p.dob, (float *)p.lse2,
        (float *)p.di, a->sq, sq_pad, a->heads, D);
    if ((st = cuda_check_launch("attn_bwd: prepare rows")) != RV_OK)
        goto end;
    {
        void (*kern)(const bwd_params, const cuda_span) = span ? bwd_kernel<D, true>
                                                               : bwd_kernel<D, false>;
        st = cuda_check(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)smem),
                        "attn_bwd: shared memory size");
        if (st != RV_OK)
            goto end;
        kern<<<dim3((unsigned)((a->sk + BN - 1) / BN), (unsigned)a->heads), BWD_THREADS, smem,
               stream>>>(p, sp);
    }
    st = cuda_check_launch("attn_bwd");
end:
    cuda_scratch_free(be, scr);
    cuda_scratch_free(be, qmem);
    cuda_scratch_free(be, kmem);
    return st;
}

rv_status cuda_attn_bwd(rv_backend *be, const rv_attn_bwd_args *a)
{
    rv_status st = rv_attn_check_dims(a->sq, a->sk, a->heads, a->dim, "attn_bwd");
    if (st == RV_OK)
        st = rv_args_attn_mask(&a->mask, a->sq, a->sk, "attn_bwd");
    if (st != RV_OK)
        return st;
    cudaStream_t stream = cuda_ctx_of(be)->stream;
    const size_t qbytes = sizeof(float) * (size_t)a->sq * a->heads * a->dim;
    const size_t kbytes = sizeof(float) * (size_t)a->sk * a->heads * a->dim;
    if (a->sq == 0 || a->sk == 0) {
        /* No (query, key) pair: the block's gradients are zero. */
        if (!a->accumulate && kbytes > 0) {
            if (!a->dk || !a->dv)
                return rv_fail(RV_ERR_INVALID, "attn_bwd: NULL tensor");
            if ((st = cuda_check(cudaMemsetAsync(a->dk, 0, kbytes, stream), "attn_bwd: clear dk")) != RV_OK ||
                (st = cuda_check(cudaMemsetAsync(a->dv, 0, kbytes, stream), "attn_bwd: clear dv")) != RV_OK)
                return st;
        }
        if (!a->accumulate && qbytes > 0) {
            if (!a->dq)
                return rv_fail(RV_ERR_INVALID, "attn_bwd: NULL tensor");
            return cuda_check(cudaMemsetAsync(a->dq, 0, qbytes, stream), "attn_bwd: clear dq");
        }
        return RV_OK;
    }
    if (!a->q || !a->k || !a->v || !a->o || !a->lse || !a->dout || !a->dq || !a->dk || !a->dv)
        return rv_fail(RV_ERR_INVALID, "attn_bwd: NULL tensor");

    const int fast = cuda_attn_tc_dim(a->dim) && !cuda_attn_simple_requested() &&
                     cuda_attn_aligned(a->q) && cuda_attn_aligned(a->k) &&
                     cuda_attn_aligned(a->v) && cuda_attn_aligned(a->o) &&
                     cuda_attn_aligned(a->dout) && cuda_attn_aligned(a->dq) &&
                     cuda_attn_aligned(a->dk) && cuda_attn_aligned(a->dv);
    if (!fast)
        return cuda_attn_bwd_simple(be, a);
    const float scale = cuda_attn_scale(a->scale, a->dim);
    switch (a->dim) {
    case 32:
        return bwd_launch<32>(be, a, scale);
    case 64:
        return bwd_launch<64>(be, a, scale);
    default:
        return bwd_launch<128>(be, a, scale);
    }
}
