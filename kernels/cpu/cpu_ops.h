/* cpu_ops.h: the CPU backend's op implementations, one file each, gathered into
 * the backend table by cpu_backend.c. Internal to kernels/. */
#ifndef RV_CPU_OPS_H
#define RV_CPU_OPS_H

#include "../backend_args.h"
#include "../rv_backend.h"

/* The CPU backend's private state (be->ctx). */
typedef struct cpu_ctx {
    rv_precision precision; /* RV_PRECISION_F32 or RV_PRECISION_BF16 */
} cpu_ctx;

/* 1 when be computes in bf16. */
static inline int cpu_is_bf16(const rv_backend *be)
{
    return be->ctx && ((const cpu_ctx *)be->ctx)->precision == RV_PRECISION_BF16;
}

/* Sets a CPU backend's precision (rv_backend_set_precision): bf16 refused as
 * cpu_bf16_check says, auto is f32. */
rv_status cpu_set_precision(rv_backend *be, rv_precision p);
rv_status cpu_gemm(rv_backend *be, int trans_a, int trans_b, int m, int n, int k,
                   float alpha, const float *a, int lda, const float *b, int ldb,
                   float beta, float *c, int ldc);
rv_status cpu_bias_add(rv_backend *be, float *x, const float *bias, int rows, int cols);
rv_status cpu_layernorm_fwd(rv_backend *be, const float *x, const float *w,
                            const float *b, int rows, int cols, float eps, float *y,
                            float *mean, float *rstd);
rv_status cpu_layernorm_bwd(rv_backend *be, const float *dy, const float *x,
                            const float *w, const float *mean, const float *rstd,
                            int rows, int cols, float *dx, float *dw, float *db);
rv_status cpu_act_fwd(rv_backend *be, rv_act act, const float *x, float *y, size_t n);
rv_status cpu_act_bwd(rv_backend *be, rv_act act, const float *x, const float *dy, float *dx,
                      size_t n);
rv_status cpu_scale_add(rv_backend *be, float *y, const float *x, const float *gamma,
                        int rows, int cols);
rv_status cpu_scale_cols(rv_backend *be, float *x, const float *gamma, int rows, int cols);
rv_status cpu_softmax_fwd(rv_backend *be, const float *x, float *y, int rows, int cols);
rv_status cpu_attn_fwd(rv_backend *be, const rv_attn_fwd_args *a);
rv_status cpu_attn_bwd(rv_backend *be, const rv_attn_bwd_args *a);
rv_status cpu_attn_merge(rv_backend *be, float *o, float *lse, const float *o2,
                         const float *lse2, int sq, int heads, int dim);
rv_status cpu_fill(rv_backend *be, float *x, float value, size_t n);
rv_status cpu_copy2d(rv_backend *be, void *dst, size_t dpitch, const void *src, size_t spitch,
                     size_t width, size_t rows);
rv_status cpu_add(rv_backend *be, float *y, const float *x, size_t n);
rv_status cpu_colsum_add(rv_backend *be, const float *x, int rows, int cols, float *dst);
rv_status cpu_colsum_mul_add(rv_backend *be, const float *a, const float *b, int rows,
                             int cols, float *dst);

#endif
