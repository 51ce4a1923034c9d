/* cpu_attn_tiles.h: the three per-tile steps of the attention forward (scores,
 * online-softmax row update, probabilities times values) behind a small table, so
 * one driver (cpu_attention_fwd.c) runs the register-blocked kernels of the best
 * instruction set the CPU has (AVX-512, AVX2), a portable BLAS version, or at bf16
 * the AVX-512 BF16 kernels (which round the f32 operands they are given to bf16 in
 * their scratch), chosen at run time (cpu_kernels_select.c). The table also holds the backward written over
 * the same kernels (NULL for BLAS, whose backward is cpu_attention_bwd.c's).
 * Internal to kernels/cpu.
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

struct rv_span_tiles;

typedef struct rv_attn_tile_ops {
    const char *name;
    /* Floats of per-thread scratch (64-byte aligned) qk and pv take as ws, for
     * tiles of up to RV_FWD_BQ rows and RV_FWD_BK keys at head dim d; NULL: none. */
    size_t (*ws_floats)(int d);
    /* s = qp @ ktp over cols key columns. */
    void (*qk)(const float *qp, int d, const float *ktp, int ldk, int rows, int cols,
               float *s, int lds, float *ws);
    /* One row: scores s[0..n) of the n visible keys (the rest of s up to bk is set
     * to 0), running max *m (base 2) and sum *l updated; returns the factor the
     * row's accumulator must be scaled by before P @ V is added. */
    float (*softmax_row)(float *s, int n, int bk, float *m, float *l);
    /* acc += s @ vp over bk keys. */
    void (*pv)(const float *s, int lds, const float *vp, int ldv, int bk, int rows,
               float *acc, float *ws);
    /* The whole backward, for arguments cpu_attn_bwd has checked and found
     * non-empty; NULL: cpu_attention_bwd.c's BLAS version. Under a span mask qt and
     * kt are the query tiles of RV_BWD_BQ and key tiles of RV_BWD_BK
     * (cpu_attn_span.h), else qt is NULL. */
    rv_status (*bwd)(rv_backend *be, const rv_attn_bwd_args *a,
                     const struct rv_span_tiles *qt, const struct rv_span_tiles *kt);
} rv_attn_tile_ops;

extern const rv_attn_tile_ops rv_attn_tiles_blas;
#if defined(__x86_64__) && defined(__GNUC__)
extern const rv_attn_tile_ops rv_attn_tiles_avx512;
extern const rv_attn_tile_ops rv_attn_tiles_avx2;
extern const rv_attn_tile_ops rv_attn_tiles_avx512bf16;
#endif

/* The kernels a backend of precision computes with (cpu_kernels_select.c):
 * RINGVIT_CPU_KERNELS when set, else the best the CPU has at that precision. Fails
 * (naming the variable and what the CPU lacks) when the variable names a set this
 * CPU or build cannot run. */
rv_status rv_attn_tiles_select(rv_precision precision, const rv_attn_tile_ops **ops);

#endif
