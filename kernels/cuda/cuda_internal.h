/* cuda_internal.h: what the CUDA backend's files share: the backend context
 * (stream, cuBLAS handle, memory mode), error conversion, device blocks and scratch
 * memory (cuda_common.cu), and the op entry points gathered into the table by
 * cuda_backend.cu. Internal to kernels/cuda/. Every op only enqueues work on the
 * backend's stream. */
#ifndef RV_CUDA_INTERNAL_H
#define RV_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "../backend_args.h"
#include "../rv_backend.h"
#include "../rv_cuda.h"

typedef struct cuda_ctx {
    int device;
    int sm_count;         /* multiprocessors, for grid sizing */
    cudaStream_t stream;  /* non-blocking compute stream; every op runs on it */
    cublasHandle_t blas;  /* bound to stream */
    void *blas_workspace; /* (blas_workspace_bytes) cuBLAS workspace */
    size_t blas_workspace_bytes;
    int gemm_f32;         /* RINGVIT_CUDA_GEMM=f32: no bf16 tensor-core rounding */
    int pool;             /* 1: the device's stream-ordered pool (cudaMallocAsync);
                           * 0: plain cudaMalloc/cudaFree, where the device has no
                           * memory pools or RINGVIT_CUDA_NO_POOL=1 */
} cuda_ctx;

static inline cuda_ctx *cuda_ctx_of(rv_backend *be) { return (cuda_ctx *)be->ctx; }

/* RV_OK, or RV_ERR_BACKEND naming `what` and CUDA's message (the error is cleared). */
rv_status cuda_check(cudaError_t e, const char *what);
/* The launch error of the kernel just launched (cudaGetLastError), as cuda_check. */
rv_status cuda_check_launch(const char *what);
rv_status cublas_check(cublasStatus_t s, const char *what);

/* A block for the work queued next on ctx->stream (the pool, or cudaMalloc); free
 * gives it back once the work queued so far is done with it (the pool orders the
 * free on the stream; cudaFree knows no stream, so it waits for it). */
cudaError_t cuda_block_alloc(cuda_ctx *ctx, void **p, size_t bytes);
cudaError_t cuda_block_free(cuda_ctx *ctx, void *p);

/* Scratch for the ops queued next on the backend's stream: stream-ordered from the
 * device pool (cudaMallocAsync), or cudaMalloc without one; free it with
 * cuda_scratch_free once those ops are queued (without a pool that waits for them). */
rv_status cuda_scratch(rv_backend *be, size_t bytes, void **ptr);
void cuda_scratch_free(rv_backend *be, void *ptr);

/* Blocks of `threads` covering n items, capped for grid-stride loops. */
static inline unsigned cuda_blocks(size_t n, int threads)
{
    size_t b = (n + (size_t)threads - 1) / (size_t)threads;
    if (b > 65535u * 16u)
        b = 65535u * 16u;
    return b > 0 ? (unsigned)b : 1u;
}

/* ---- ops, same contracts as rv_backend.h ----------------------------------------- */
rv_status cuda_gemm(rv_backend *be, int trans_a, int trans_b, int m, int n, int k,
                    float alpha, const float *a, int lda, const float *b, int ldb,
                    float beta, float *c, int ldc);
rv_status cuda_bias_add(rv_backend *be, float *x, const float *bias, int rows, int cols);
rv_status cuda_layernorm_fwd(rv_backend *be, const float *x, const float *w,
                             const float *b, int rows, int cols, float eps, float *y,
                             float *mean, float *rstd);
rv_status cuda_layernorm_bwd(rv_backend *be, const float *dy, const float *x,
                             const float *w, const float *mean, const float *rstd,
                             int rows, int cols, float *dx, float *dw, float *db);
rv_status cuda_act_fwd(rv_backend *be, rv_act act, const float *x, float *y, size_t n);
rv_status cuda_act_bwd(rv_backend *be, rv_act act, const float *x, const float *dy, float *dx,
                       size_t n);
rv_status cuda_scale_add(rv_backend *be, float *y, const float *x, const float *gamma,
                         int rows, int cols);
rv_status cuda_scale_cols(rv_backend *be, float *x, const float *gamma, int rows, int cols);
rv_status cuda_softmax_fwd(rv_backend *be, const float *x, float *y, int rows, int cols);
rv_status cuda_attn_fwd(rv_backend *be, const rv_attn_fwd_args *a);
rv_status cuda_attn_bwd(rv_backend *be, const rv_attn_bwd_args *a);
rv_status cuda_attn_merge(rv_backend *be, float *o, float *lse, const float *o2,
                          const float *lse2, int sq, int heads, int dim);
rv_status cuda_fill(rv_backend *be, float *x, float value, size_t n);
rv_status cuda_copy2d(rv_backend *be, void *dst, size_t dpitch, const void *src,
                      size_t spitch, size_t width, size_t rows);
rv_status cuda_add(rv_backend *be, float *y, const float *x, size_t n);
rv_status cuda_colsum_add(rv_backend *be, const float *x, int rows, int cols, float *dst);
rv_status cuda_colsum_mul_add(rv_backend *be, const float *a, const float *b, int rows,
                              int cols, float *dst);

#endif
