/* cpu_attn_tiles_avx512bf16.c: the attention forward's tile steps in bf16 on the
 * AVX-512 BF16 dot-product instruction (vdpbf16ps: each f32 lane adds the
 * products of two bf16 pairs), compiled for it whatever the build's -march and
 * run only by a CPU backend allowed bf16 (cpu_bf16.h) or forced by
 * RINGVIT_CPU_KERNELS=avx512bf16 (cpu_kernels_select.c).
 *
 * The driver (cpu_attention_fwd.c) hands over its f32 packs; each step rounds what
 * it multiplies to bf16 (to nearest even) in the thread's scratch, in the layouts
 * the instruction takes: the products' inner index in pairs, one pair a 32-bit
 * lane.
 *   qk: S = Q K^T, inner index the head channel c:
 *       qb (rows, d2) bf16 rows of Q (d2 = d rounded up to even, zero padded);
 *       kb (d2 / 2, cols) 32-bit lanes (K[j][c], K[j][c + 1]).
 *   pv: acc += P V, inner index the key j:
 *       pb (rows, bk2) bf16 rows of P (bk2 = bk rounded up to even, zero padded);
 *       vb (bk2 / 2, ldv) lanes (V[j][c], V[j + 1][c]), zero past bk.
 * Rounding costs a pass over the tiles per step, about 1/rows (1/256) of the
 * products' work for K and V, 1/dim for P. Scores, the online softmax (the
 * AVX-512 set's), the running sums and the accumulator stay f32; each tile's
 * products are summed from zero before they are added to the accumulator, as in
 * the f32 kernels. The backward is the AVX-512 f32 one (cpu_attn_tiles_isa.h). */
#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC target("avx512f,avx512vl,avx512dq,avx512bw,avx512bf16,fma")

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu_attention.h"
#include "cpu_attn_tiles.h"

static inline int round_up(int x, int m)
{
    return (x + m - 1) / m * m;
}

/* Scratch regions of one thread, in floats (each a multiple of 16: aligned). */
static size_t qb_floats(int d)
{
    return (size_t)RV_FWD_BQ * round_up(d, 32) / 2;
}

static size_t kb_floats(int d)
{
    return (size_t)round_up(d, 2) / 2 * RV_FWD_BK;
}

static size_t pb_floats(void)
{
    return (size_t)RV_FWD_BQ * RV_FWD_BK / 2;
}

static size_t bf16_ws_floats(int d)
{
    const size_t vb = (size_t)RV_FWD_BK / 2 * round_up(d, 16);
    const size_t qk = qb_floats(d) + kb_floats(d), pv = pb_floats() + vb;
    return qk > pv ? qk : pv; /* qk and pv take turns: one region serves both */
}

/* 32-bit lanes (x0[i], x1[i]) of 16 pairs from two f32 vectors. */
static inline __m512i pairs(__m512 x0, __m512 x1)
{
    /* cvtne2ps: x0's 16 bf16 in the low half, x1's in the high; then interleave. */
    const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                         24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1,
                                         16, 0);
    return _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
}

/* dst (n bf16, then zeros up to n rounded up to 32) = src (n floats) rounded. */
static inline void round_row(const float *src, int n, uint16_t *dst)
{
    int c = 0;
    for (; c + 32 <= n; c += 32)
        _mm512_store_si512((void *)(dst + c), (__m512i)_mm512_cvtne2ps_pbh(
                                                  _mm512_loadu_ps(src + c + 16),
                                                  _mm512_loadu_ps(src + c)));
    if (c < n) {
        const int r = n - c;
        const __mmask16 lo = r >= 16 ? 0xffff : (__mmask16)((1u << r) - 1);
        const __mmask16 hi = r > 16 ? (__mmask16)((1u << (r - 16)) - 1) : 0;
        _mm512_store_si512((void *)(dst + c),
                           (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, src + c + 16),
                                                        _mm512_maskz_loadu_ps(lo, src + c)));
    }
}

/* out (pair rows, cols) lanes = rows r0 = 2i, r1 = 2i + 1 of src (ld floats a row,
 * cols % 16 == 0) for i < (n + 1) / 2; a row at or past n reads as zeros. */
static void round_pairs(const float *src, int ld, int n, int cols, uint32_t *out, int ldo)
{
    const __m512 zero = _mm512_setzero_ps();
    for (int i = 0; 2 * i < n; i++) {
        const float *r0 = src + (size_t)(2 * i) * ld, *r1 = r0 + ld;
        const int second = 2 * i + 1 < n;
        uint32_t *o = out + (size_t)i * ldo;
        for (int j = 0; j < cols; j += 16)
            _mm512_store_si512((void *)(o + j),
                               pairs(_mm512_load_ps(r0 + j),
                                     second ? _mm512_load_ps(r1 + j) : zero));
    }
}

/* s (8, 32) = qb (8 rows of ldq bf16) @ kb (pairs, 32 columns of ldk lanes), over
 * np pairs of the inner index. */
static inline __attribute__((always_inline)) void qk_8x32(const uint16_t *qb, int ldq,
                                                          const uint32_t *kb, int ldk, int np,
                                                          float *s, int lds)
{
    __m512 a[8], b[8];
    for (int r = 0; r < 8; r++)
        a[r] = b[r] = _mm512_setzero_ps();
    for (int p = 0; p < np; p++) {
        const __m512bh k0 = (__m512bh)_mm512_load_si512((const void *)(kb + (size_t)p * ldk));
        const __m512bh k1 =
            (__m512bh)_mm512_load_si512((const void *)(kb + (size_t)p * ldk + 16));
        for (int r = 0; r < 8; r++) {
            const __m512bh q = (__m512bh)_mm512_set1_epi32(
                *(const int32_t *)(qb + (size_t)r * ldq + 2 * p));
            a[r] = _mm512_dpbf16_ps(a[r], q, k0);
            b[r] = _mm512_dpbf16_ps(b[r], q, k1);
        }
    }
    for (int r = 0; r < 8; r++) {
        _mm512_store_ps(s + (size_t)r * lds, a[r]);
        _mm512_store_ps(s + (size_t)r * lds + 16, b[r]);
    }
}

static void bf16_qk(const float *qp, int d, const float *ktp, int ldk, int rows, int cols,
                    float *s, int lds, float *ws)
{
    const int ldq = round_up(d, 32), np = (d + 1) / 2;
    uint16_t *qb = (uint16_t *)ws;
    uint32_t *kb = (uint32_t *)(ws + qb_floats(d));
    for (int i = 0; i < rows; i++)
        round_row(qp + (size_t)i * d, d, qb + (size_t)i * ldq);
    round_pairs(ktp, ldk, d, cols, kb, cols);
    for (int i = 0; i < rows; i += 8)
        for (int j = 0; j < cols; j += 32)
            qk_8x32(qb + (size_t)i * ldq, ldq, kb + j, cols, np, s + (size_t)i * lds + j, lds);
}

/* acc (8, 16 NV) += pb (8 rows of ldp bf16) @ vb (np pairs of keys, 16 NV columns of
 * ldv lanes): the tile's products summed from zero, then added. */
#define PV_KERNEL(NAME, NV)                                                               \
    static inline __attribute__((always_inline)) void NAME(                               \
        const uint16_t *pb, int ldp, const uint32_t *vb, int ldv, int np, float *acc,     \
        int lda)                                                                          \
    {                                                                                     \
        __m512 c[8][NV];                                                                  \
        for (int r = 0; r < 8; r++)                                                       \
            for (int v = 0; v < NV; v++)                                                  \
                c[r][v] = _mm512_setzero_ps();                                            \
        for (int p = 0; p < np; p++) {                                                    \
            __m512bh x[NV];                                                               \
            for (int v = 0; v < NV; v++)                                                  \
                x[v] = (__m512bh)_mm512_load_si512(                                       \
                    (const void *)(vb + (size_t)p * ldv + 16 * v));                       \
            for (int r = 0; r < 8; r++) {                                                 \
                const __m512bh w = (__m512bh)_mm512_set1_epi32(                           \
                    *(const int32_t *)(pb + (size_t)r * ldp + 2 * p));                    \
                for (int v = 0; v < NV; v++)                                              \
                    c[r][v] = _mm512_dpbf16_ps(c[r][v], w, x[v]);                         \
            }                                                                             \
        }                                                                                 \
        for (int r = 0; r < 8; r++)                                                       \
            for (int v = 0; v < NV; v++) {                                                \
                float *o = acc + (size_t)r * lda + 16 * v;                                \
                _mm512_store_ps(o, _mm512_add_ps(_mm512_load_ps(o), c[r][v]));            \
            }                                                                             \
    }
PV_KERNEL(pv_8x32, 2)
PV_KERNEL(pv_8x16, 1)
#undef PV_KERNEL

static void bf16_pv(const float *s, int lds, const float *vp, int ldv, int bk, int rows,
                    float *acc, float *ws)
{
    const int ldp = round_up(bk, 32), np = (bk + 1) / 2;
    uint16_t *pb = (uint16_t *)ws;
    uint32_t *vb = (uint32_t *)(ws + pb_floats());
    for (int i = 0; i < rows; i++)
        round_row(s + (size_t)i * lds, bk, pb + (size_t)i * ldp);
    round_pairs(vp, ldv, bk, ldv, vb, ldv);
    for (int i = 0; i < rows; i += 8) {
        const uint16_t *pi = pb + (size_t)i * ldp;
        float *ai = acc + (size_t)i * ldv;
        int c = 0;
        for (; c + 32 <= ldv; c += 32)
            pv_8x32(pi, ldp, vb + c, ldv, np, ai + c, ldv);
        for (; c < ldv; c += 16)
            pv_8x16(pi, ldp, vb + c, ldv, np, ai + c, ldv);
    }
}

/* The online softmax and the backward are the AVX-512 set's, in f32. */
static float bf16_softmax_row(float *s, int n, int bk, float *m, float *l)
{
    return rv_attn_tiles_avx512.softmax_row(s, n, bk, m, l);
}

static rv_status bf16_bwd(rv_backend *be, const rv_attn_bwd_args *a,
                          const struct rv_span_tiles *qt, const struct rv_span_tiles *kt)
{
    return rv_attn_tiles_avx512.bwd(be, a, qt, kt);
}

const rv_attn_tile_ops rv_attn_tiles_avx512bf16 = {
    .name = "avx512bf16",
    .ws_floats = bf16_ws_floats,
    .qk = bf16_qk,
    .softmax_row = bf16_softmax_row,
    .pv = bf16_pv,
    .bwd = bf16_bwd,
};
#endif
