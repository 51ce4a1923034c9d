/* cpu_tile_kernels_avx2.h: register-blocked micro-kernels for the attention tiles
 * on 256-bit vectors (8 floats: one AVX register), for CPUs with AVX2 and FMA but
 * no AVX-512. AVX has 16 vector registers, so a block keeps 12 accumulators
 * (6 rows x 16 columns), two loaded vectors and a broadcast. Same operands and
 * two-level summation as the AVX-512 kernels of cpu_tile_kernels.h, and the 8-lane
 * row operations of the softmax (cpu_vec_rows.h); include it
 * from a file compiled for AVX2 and FMA (cpu_attn_tiles_avx2.c).
 *
 * Operands (64-byte aligned, zero padded by the caller):
 *   qk: s (rows, cols) = qp (rows, d) @ ktp (d, ldk); rows % 2 == 0, cols % 16 == 0
 *   pv: acc (rows, cols) += p (rows, k) @ vp (k, ldv); rows % 2 == 0, cols % 16 == 0 */
#ifndef RV_CPU_TILE_KERNELS_AVX2_H
#define RV_CPU_TILE_KERNELS_AVX2_H

#include <stddef.h>
#include <stdint.h>

#include "cpu_vec_rows.h"

typedef float rv_v8 __attribute__((vector_size(32), aligned(32)));
typedef int32_t rv_i8 __attribute__((vector_size(32), aligned(32)));

#define RV_V8(p) (*(rv_v8 *)(p))
#define RV_CV8(p) (*(const rv_v8 *)(p))

/* s (R, 16) = qp (R, d) @ ktp (d, 16): R x 2 accumulators in registers. */
#define RV8_QK_KERNEL(NAME, R)                                                            \
    static inline __attribute__((always_inline)) void NAME(                               \
        const float *qp, int d, const float *ktp, int ldk, float *s, int lds)             \
    {                                                                                     \
        rv_v8 c0[R], c1[R];                                                               \
        for (int r = 0; r < R; r++)                                                       \
            c0[r] = c1[r] = (rv_v8){0};                                                   \
        for (int k = 0; k < d; k++) {                                                     \
            rv_v8 x0 = RV_CV8(ktp + (size_t)k * ldk), x1 = RV_CV8(ktp + (size_t)k * ldk + 8); \
            for (int r = 0; r < R; r++) {                                                 \
                float q = qp[(size_t)r * d + k];                                          \
                c0[r] += q * x0, c1[r] += q * x1;                                         \
            }                                                                             \
        }                                                                                 \
        for (int r = 0; r < R; r++)                                                       \
            RV_V8(s + (size_t)r * lds) = c0[r], RV_V8(s + (size_t)r * lds + 8) = c1[r];   \
    }
RV8_QK_KERNEL(rv8_qk_6x16, 6)
RV8_QK_KERNEL(rv8_qk_4x16, 4)
RV8_QK_KERNEL(rv8_qk_2x16, 2)
#undef RV8_QK_KERNEL

/* s (rows, cols) = qp (rows, d) @ ktp (d, cols); rows % 2 == 0, cols % 16 == 0. Column
 * blocks outermost: a block of ktp (d x 16) stays in L1 while every row passes. */
static inline void rv8_qk_tile(const float *qp, int d, const float *ktp, int ldk, int rows,
                               int cols, float *s, int lds)
{
    for (int j = 0; j < cols; j += 16) {
        int i = 0;
        for (; i + 6 <= rows; i += 6)
            rv8_qk_6x16(qp + (size_t)i * d, d, ktp + j, ldk, s + (size_t)i * lds + j, lds);
        if (rows - i == 4)
            rv8_qk_4x16(qp + (size_t)i * d, d, ktp + j, ldk, s + (size_t)i * lds + j, lds);
        else if (rows - i == 2)
            rv8_qk_2x16(qp + (size_t)i * d, d, ktp + j, ldk, s + (size_t)i * lds + j, lds);
    }
}

/* acc (R, 16) += p (R, k) @ vp (k, 16): the block's products are summed from zero
 * and then added to acc (two-level summation: rounding grows with the tile width,
 * not with the whole key count). */
#define RV8_PV_KERNEL(NAME, R)                                                            \
    static inline __attribute__((always_inline)) void NAME(                               \
        const float *p, int ldp, const float *vp, int ldv, int k, float *acc, int lda)    \
    {                                                                                     \
        rv_v8 c0[R], c1[R];                                                               \
        for (int r = 0; r < R; r++)                                                       \
            c0[r] = c1[r] = (rv_v8){0};                                                   \
        for (int j = 0; j < k; j++) {                                                     \
            rv_v8 x0 = RV_CV8(vp + (size_t)j * ldv), x1 = RV_CV8(vp + (size_t)j * ldv + 8); \
            for (int r = 0; r < R; r++) {                                                 \
                float w = p[(size_t)r * ldp + j];                                         \
                c0[r] += w * x0, c1[r] += w * x1;                                         \
            }                                                                             \
        }                                                                                 \
        for (int r = 0; r < R; r++) {                                                     \
            RV_V8(acc + (size_t)r * lda) += c0[r];                                        \
            RV_V8(acc + (size_t)r * lda + 8) += c1[r];                                    \
        }                                                                                 \
    }
RV8_PV_KERNEL(rv8_pv_6x16, 6)
RV8_PV_KERNEL(rv8_pv_4x16, 4)
RV8_PV_KERNEL(rv8_pv_2x16, 2)
#undef RV8_PV_KERNEL

/* acc (rows, cols) += p (rows, k) @ vp (k, ldv); rows % 2 == 0, cols % 16 == 0. */
static inline void rv8_pv_tile(const float *p, int ldp, const float *vp, int ldv, int k,
                               int rows, int cols, float *acc, int lda)
{
    for (int c = 0; c < cols; c += 16) {
        int i = 0;
        for (; i + 6 <= rows; i += 6)
            rv8_pv_6x16(p + (size_t)i * ldp, ldp, vp + c, ldv, k, acc + (size_t)i * lda + c,
                        lda);
        if (rows - i == 4)
            rv8_pv_4x16(p + (size_t)i * ldp, ldp, vp + c, ldv, k, acc + (size_t)i * lda + c,
                        lda);
        else if (rows - i == 2)
            rv8_pv_2x16(p + (size_t)i * ldp, ldp, vp + c, ldv, k, acc + (size_t)i * lda + c,
                        lda);
    }
}

/* ---- row operations of the online softmax, 8 lanes at a time -------------------- */

RV_VEC_ROW_OPS(rv_v8, rv_v8, rv_i8, 8)

#endif
