/* cpu_tile_kernels.h: register-blocked micro-kernels for the attention tiles on
 * AVX-512 (16 floats per vector: one AVX-512 register; 32 registers hold an 8 x 32
 * block), written with GCC vector extensions and included from a file compiled for
 * AVX-512 (cpu_attn_tiles_avx512.c), with the 16-lane row operations of the
 * softmax (cpu_vec_rows.h). They replace BLAS
 * calls on the thin products attention is made of (inner dimension = head dim,
 * often 64), where a general GEMM spends much of its time packing.
 * cpu_tile_kernels_avx2.h has the same kernels for AVX2's 16 registers.
 *
 * Operands are packed by the caller into 64-byte aligned, zero-padded buffers:
 *   qp  (rows, d)     query tile, pre-scaled, rows a multiple of 8
 *   ktp (d, ldk)      key tile transposed, ldk a multiple of 32
 *   vp  (bk, ldv)     value tile, ldv a multiple of 16
 *   acc (rows, ldv)   output accumulator                                       */
#ifndef RV_CPU_TILE_KERNELS_H
#define RV_CPU_TILE_KERNELS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu_vec_rows.h"

typedef float rv_v16 __attribute__((vector_size(64), aligned(64)));
typedef int32_t rv_i16 __attribute__((vector_size(64), aligned(64)));

#define RV_V16(p) (*(rv_v16 *)(p))
#define RV_CV16(p) (*(const rv_v16 *)(p))

/* s (8, 32) = qp (8, d) @ ktp (d, 32): 16 accumulators stay in registers. */
static inline __attribute__((always_inline)) void rv_qk_8x32(const float *qp, int d,
                                                             const float *ktp, int ldk,
                                                             float *s, int lds)
{
    rv_v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, a4 = {0}, a5 = {0}, a6 = {0}, a7 = {0};
    rv_v16 b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0}, b4 = {0}, b5 = {0}, b6 = {0}, b7 = {0};
    for (int c = 0; c < d; c++) {
        rv_v16 k0 = RV_CV16(ktp + (size_t)c * ldk), k1 = RV_CV16(ktp + (size_t)c * ldk + 16);
        const float *q = qp + c;
        a0 += q[0 * d] * k0, b0 += q[0 * d] * k1;
        a1 += q[1 * d] * k0, b1 += q[1 * d] * k1;
        a2 += q[2 * d] * k0, b2 += q[2 * d] * k1;
        a3 += q[3 * d] * k0, b3 += q[3 * d] * k1;
        a4 += q[4 * d] * k0, b4 += q[4 * d] * k1;
        a5 += q[5 * d] * k0, b5 += q[5 * d] * k1;
        a6 += q[6 * d] * k0, b6 += q[6 * d] * k1;
        a7 += q[7 * d] * k0, b7 += q[7 * d] * k1;
    }
    RV_V16(s + 0 * lds) = a0, RV_V16(s + 0 * lds + 16) = b0;
    RV_V16(s + 1 * lds) = a1, RV_V16(s + 1 * lds + 16) = b1;
    RV_V16(s + 2 * lds) = a2, RV_V16(s + 2 * lds + 16) = b2;
    RV_V16(s + 3 * lds) = a3, RV_V16(s + 3 * lds + 16) = b3;
    RV_V16(s + 4 * lds) = a4, RV_V16(s + 4 * lds + 16) = b4;
    RV_V16(s + 5 * lds) = a5, RV_V16(s + 5 * lds + 16) = b5;
    RV_V16(s + 6 * lds) = a6, RV_V16(s + 6 * lds + 16) = b6;
    RV_V16(s + 7 * lds) = a7, RV_V16(s + 7 * lds + 16) = b7;
}

static inline __attribute__((always_inline)) void rv_qk_rows(const float *qp, int d,
                                                             const float *ktp, int ldk,
                                                             int rows, int cols, float *s,
                                                             int lds)
{
    for (int i = 0; i < rows; i += 8)
        for (int j = 0; j < cols; j += 32)
            rv_qk_8x32(qp + (size_t)i * d, d, ktp + j, ldk, s + (size_t)i * lds + j, lds);
}

/* s (rows, cols) = qp (rows, d) @ ktp (d, cols); rows % 8 == 0, cols % 32 == 0. The
 * common head sizes get a copy with d known at compile time: the 8 query rows are
 * then constant offsets from one pointer, where a run-time d leaves GCC short of
 * registers and it reloads row pointers from the stack on every step. */
static inline void rv_qk_tile(const float *qp, int d, const float *ktp, int ldk, int rows,
                              int cols, float *s, int lds)
{
    if (d == 64)
        rv_qk_rows(qp, 64, ktp, ldk, rows, cols, s, lds);
    else if (d == 128)
        rv_qk_rows(qp, 128, ktp, ldk, rows, cols, s, lds);
    else
        rv_qk_rows(qp, d, ktp, ldk, rows, cols, s, lds);
}

/* acc (4, 16*NV) += p (4, bk) @ vp (bk, 16*NV), for NV = 4, 2, 1 vectors. The
 * tile's products are summed from zero and then added to acc: two-level summation,
 * so rounding grows with the tile width, not with the whole key count. Each value
 * vector is held in a register (the empty asm) for its four rows: GCC otherwise
 * folds the load into each of the four FMAs, and four loads per FMA group make the
 * loop load-bound rather than FMA-bound. */
#define RV_PV_KERNEL(NAME, NV)                                                            \
    static inline __attribute__((always_inline)) void NAME(                               \
        const float *p, int ldp, const float *vp, int ldv, int bk, float *acc, int lda)   \
    {                                                                                     \
        rv_v16 c[4][NV];                                                                  \
        for (int r = 0; r < 4; r++)                                                       \
            for (int v = 0; v < NV; v++)                                                  \
                c[r][v] = (rv_v16){0};                                                    \
        for (int j = 0; j < bk; j++) {                                                    \
            const float *vr = vp + (size_t)j * ldv;                                       \
            float p0 = p[j], p1 = p[ldp + j], p2 = p[2 * ldp + j], p3 = p[3 * ldp + j];   \
            for (int v = 0; v < NV; v++) {                                                \
                rv_v16 x = RV_CV16(vr + 16 * v);                                          \
                __asm__("" : "+v"(x)); /* one load, not one per row (see above) */        \
                c[0][v] += p0 * x, c[1][v] += p1 * x, c[2][v] += p2 * x,                  \
                    c[3][v] += p3 * x;                                                    \
            }                                                                             \
        }                                                                                 \
        for (int r = 0; r < 4; r++)                                                       \
            for (int v = 0; v < NV; v++)                                                  \
                RV_V16(acc + (size_t)r * lda + 16 * v) += c[r][v];                        \
    }
RV_PV_KERNEL(rv_pv_4x64, 4)
RV_PV_KERNEL(rv_pv_4x32, 2)
RV_PV_KERNEL(rv_pv_4x16, 1)
#undef RV_PV_KERNEL

/* acc (rows, cols) += p (rows, k) @ vp (k, ldv); rows % 4 == 0, cols % 16 == 0. */
static inline void rv_pv_tile(const float *p, int ldp, const float *vp, int ldv, int k,
                              int rows, int cols, float *acc, int lda)
{
    for (int i = 0; i < rows; i += 4) {
        const float *pi = p + (size_t)i * ldp;
        float *ai = acc + (size_t)i * lda;
        int c = 0;
        for (; c + 64 <= cols; c += 64)
            rv_pv_4x64(pi, ldp, vp + c, ldv, k, ai + c, lda);
        for (; c + 32 <= cols; c += 32)
            rv_pv_4x32(pi, ldp, vp + c, ldv, k, ai + c, lda);
        for (; c < cols; c += 16)
            rv_pv_4x16(pi, ldp, vp + c, ldv, k, ai + c, lda);
    }
}

/* ---- row operations of the online softmax, 16 lanes at a time ------------------ */

RV_VEC_ROW_OPS(rv_v16, rv_v16, rv_i16, 16)

#endif
