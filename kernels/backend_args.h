/* backend_args.h: the argument checks every backend runs before an op, so the CPU
 * and CUDA backends reject the same inputs with the same messages. Each returns
 * RV_OK for valid arguments, else RV_ERR_INVALID naming the op and the argument;
 * where it takes `none`, *none is set to 1 when the op has nothing to do (its NULL
 * checks are then skipped, as an empty op reads nothing). Internal to kernels/. */
#ifndef RV_BACKEND_ARGS_H
#define RV_BACKEND_ARGS_H

#include <stddef.h>

#include "rv_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* BLAS rules for row-major storage: a stored matrix with w columns needs a leading
 * dimension >= max(1, w); c must exist when the result is not empty, a and b when
 * k > 0. */
rv_status rv_args_gemm(int trans_a, int trans_b, int m, int n, int k, const float *a, int lda,
                       const float *b, int ldb, const float *c, int ldc);
/* Row ops on (rows, cols) tensors x and y (bias_add: x and bias; softmax: x and y). */
rv_status rv_args_rows(const char *op, int rows, int cols, const void *x, const char *x_name,
                       const void *y, const char *y_name, int *none);
rv_status rv_args_layernorm_fwd(const float *x, const float *w, const float *b, int rows,
                                int cols, float eps, const float *y, const float *mean,
                                const float *rstd, int *none);
rv_status rv_args_layernorm_bwd(const float *dy, const float *x, const float *w,
                                const float *mean, const float *rstd, int rows, int cols,
                                const float *dx, const float *dw, const float *db, int *none);
/* Activations: act must be one of rv_act (checked even when n == 0, so a bad value
 * shows at once); the arrays must exist when n > 0. */
rv_status rv_args_act_fwd(rv_act act, const float *x, const float *y, size_t n);
rv_status rv_args_act_bwd(rv_act act, const float *x, const float *dy, const float *dx,
                          size_t n);
/* The activation's name ("gelu", "gelu_tanh", "quick_gelu"), NULL for an unknown value. */
const char *rv_act_name(rv_act act);
/* Layer scale ops on (rows, cols) tensors with gamma (cols). */
rv_status rv_args_scale_add(const float *y, const float *x, const float *gamma, int rows,
                            int cols, int *none);
rv_status rv_args_scale_cols(const float *x, const float *gamma, int rows, int cols,
                             int *none);
rv_status rv_args_colsum_mul_add(const float *a, const float *b, int rows, int cols,
                                 const float *dst, int *none);
/* Attention shapes: sq, sk >= 0, heads, dim > 0, heads * dim at most 2^20. */
rv_status rv_attn_check_dims(int sq, int sk, int heads, int dim, const char *op);
/* The mask: a known kind; RV_MASK_SPAN wants a finite reach >= 0, q_key when sq > 0
 * and k_key when sk > 0 (and the times with causal). */
rv_status rv_args_attn_mask(const rv_attn_mask *m, int sq, int sk, const char *op);
rv_status rv_args_attn_fwd(const rv_attn_fwd_args *a, int *none);
rv_status rv_args_attn_merge(const float *o, const float *lse, const float *o2,
                             const float *lse2, int sq, int heads, int dim, int *none);

#ifdef __cplusplus
}
#endif

#endif
