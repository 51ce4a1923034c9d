/* cpu_attn_tiles.h: the three per-tile steps of the attention forward (scores,
 * online-softmax row update, probabilities times values) behind a small table, so
 * one driver (cpu_attention_fwd.c) runs either the AVX-512 register-blocked
 * kernels or a portable BLAS version, chosen at run time. The backward's AVX-512
 * driver is declared here too and chosen the same way. Internal to kernels/cpu.
 *
 * Operand layouts (all 64-byte aligned, zero padded):
 *   qp  (rows, d)     query tile scaled by scale * log2 e; rows % 8 == 0
 *   ktp (d, ldk)      key tile transposed; cols % 32 == 0, ldk >= cols
 *   s   (rows, lds)   scores, then probabilities; lds % 32 == 0
 *   vp  (bk, ldv)     value tile; ldv = d rounded up to 16
 *   acc (rows, ldv)   unnormalised output                                     */
#ifndef RV_CPU_ATTN_TILES_H
#define RV_CPU_ATTN_TILES_H

#include "../rv_backend.h"

typedef struct rv_attn_tile_ops {
    const char *name;
    /* s = qp @ ktp over cols key columns. */
    void (*qk)(const float *qp, int d, const float *ktp, int ldk, int rows, int cols,
               float *s, int lds);
    /* One row: scores s[0..n) of the n visible keys (the rest of s up to bk is set
     * to 0), running max *m (base 2) and sum *l updated; returns the factor the
     * row's accumulator must be scaled by before P @ V is added. */
    float (*softmax_row)(float *s, int n, int bk, float *m, float *l);
    /* acc += s @ vp over bk keys. */
    void (*pv)(const float *s, int lds, const float *vp, int ldv, int bk, int rows,
               float *acc);
} rv_attn_tile_ops;

extern const rv_attn_tile_ops rv_attn_tiles_blas;
extern const rv_attn_tile_ops rv_attn_tiles_avx512;

/* The AVX-512 kernels where the CPU has them, else BLAS. RINGVIT_CPU_KERNELS=blas
 * in the environment forces the BLAS version (for tests and comparisons). */
const rv_attn_tile_ops *rv_attn_tiles_select(void);

/* The attention backward on the AVX-512 tile kernels (cpu_attn_bwd_tiles_avx512.c),
 * for arguments cpu_attn_bwd has checked and found non-empty; call it only where
 * rv_attn_tiles_select() returns &rv_attn_tiles_avx512. Under a span mask qt and
 * kt are the query tiles of RV_BWD_BQ and key tiles of RV_BWD_BK (cpu_attn_span.h),
 * else qt is NULL. */
struct rv_span_tiles;
rv_status rv_attn_bwd_avx512(rv_backend *be, const rv_attn_bwd_args *a,
                             const struct rv_span_tiles *qt, const struct rv_span_tiles *kt);

#endif
