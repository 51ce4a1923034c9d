/* cuda_gemm.cu: matrix multiply on cuBLAS with the CPU backend's row-major
 * contract (kernels/cpu/cpu_gemm.c):
 *
 *   C (m, n) = alpha * op(A) @ op(B) + beta * C,  op(A) (m, k), op(B) (k, n),
 *   lda, ldb, ldc the row strides of the stored A, B, C.
 *
 * cuBLAS is column-major. A row-major (r, c) matrix with row stride ld is, read
 * column-major, its transpose: a (c, r) matrix with leading dimension ld. So the
 * row-major C is the column-major C^T (n, m), and
 *
 *   C^T = alpha * op(B)^T @ op(A)^T + beta * C^T
 *
 * is one column-major GEMM with the operands swapped (B first), m and n swapped,
 * and each operand's transpose flag kept: B stored (k, n) row-major is already
 * op(B)^T (n, k) column-major (CUBLAS_OP_N), and B stored (n, k) (trans_b) reads
 * as (k, n) column-major and needs CUBLAS_OP_T to become (n, k); same for A.
 *
 * Tensors stay f32 in memory; by default the product runs on tensor cores with the
 * inputs rounded to bf16 and f32 accumulation (CUBLAS_COMPUTE_32F_FAST_16BF);
 * RINGVIT_CUDA_GEMM=f32 selects plain f32 (CUBLAS_COMPUTE_32F). */
#include "cuda_internal.h"

/* C (m, n), row stride ldc: C = beta * C. beta == 0 writes zeros without reading C
 * (BLAS convention: C may hold NaN on entry). Rows stride over grid.y, columns over
 * grid.x. */
__global__ static void scale_c_kernel(int m, int n, float beta, float *c, int ldc)
{
    for (int i = blockIdx.y; i < m; i += gridDim.y) {
        float *row = c + (size_t)i * (size_t)ldc;
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x)
            row[j] = beta == 0.0f ? 0.0f : beta * row[j];
    }
}

rv_status cuda_gemm(rv_backend *be, int trans_a, int trans_b, int m, int n, int k,
                    float alpha, const float *a, int lda, const float *b, int ldb,
                    float beta, float *c, int ldc)
{
    rv_status st = rv_args_gemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
    if (st != RV_OK)
        return st;
    if (m == 0 || n == 0)
        return RV_OK;
    cuda_ctx *ctx = cuda_ctx_of(be);

    if (k == 0 || alpha == 0.0f) {
        if (beta == 1.0f)
            return RV_OK;
        dim3 block(256);
        dim3 grid((unsigned)((n + 255) / 256), (unsigned)(m < 65535 ? m : 65535));
        scale_c_kernel<<<grid, block, 0, ctx->stream>>>(m, n, beta, c, ldc);
        return cuda_check_launch("gemm: scale C");
    }

    cublasComputeType_t compute =
        ctx->gemm_f32 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_16BF;
    /* Column-major C^T (n, m) = op(B)^T (n, k) @ op(A)^T (k, m); see the top. */
    cublasStatus_t s = cublasGemmEx(ctx->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
                                    CUDA_R_32F, ldb, a, CUDA_R_32F, lda, &beta, c, CUDA_R_32F,
                                    ldc, compute, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
        return rv_fail(RV_ERR_BACKEND,
                       "cublas gemm (m=%d n=%d k=%d trans_a=%d trans_b=%d lda=%d ldb=%d "
                       "ldc=%d): %s",
                       m, n, k, trans_a, trans_b, lda, ldb, ldc, cublasGetStatusString(s));
    return RV_OK;
}
