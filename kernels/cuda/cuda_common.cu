/* cuda_common.cu: what the "cuda" backend's files share (cuda_internal.h): CUDA and
 * cuBLAS errors as rv_status, device blocks from the stream-ordered pool or plain
 * cudaMalloc, and the ops' scratch memory. The bottom of kernels/cuda/: it calls no
 * other file of the folder, so the op files and the backend table (cuda_backend.cu)
 * depend on it and not on each other's plumbing. */
#include "cuda_internal.h"

/* ---- errors ------------------------------------------------------------------- */

rv_status cuda_check(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return RV_OK;
    cudaGetLastError(); /* clear a non-sticky error so later calls do not see it */
    rv_status st = e == cudaErrorMemoryAllocation ? RV_ERR_NOMEM : RV_ERR_BACKEND;
    return rv_fail(st, "cuda %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

rv_status cuda_check_launch(const char *what)
{
    return cuda_check(cudaGetLastError(), what);
}

rv_status cublas_check(cublasStatus_t s, const char *what)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return RV_OK;
    rv_status st = s == CUBLAS_STATUS_ALLOC_FAILED ? RV_ERR_NOMEM : RV_ERR_BACKEND;
    return rv_fail(st, "cublas %s: %s", what, cublasGetStatusString(s));
}

/* ---- device blocks: the stream-ordered pool, or plain cudaMalloc -------------- */

/* A block for the work queued next on ctx->stream. */
cudaError_t cuda_block_alloc(cuda_ctx *ctx, void **p, size_t bytes)
{
    return ctx->pool ? cudaMallocAsync(p, bytes, ctx->stream) : cudaMalloc(p, bytes);
}

/* Gives p back once the work queued so far on ctx->stream is done with it: the
 * pool orders the free on the stream; cudaFree knows no stream, so wait for it. */
cudaError_t cuda_block_free(cuda_ctx *ctx, void *p)
{
    if (ctx->pool)
        return cudaFreeAsync(p, ctx->stream);
    cudaError_t e = cudaStreamSynchronize(ctx->stream);
    cudaError_t f = cudaFree(p); /* freed even when the stream reported an error */
    return e != cudaSuccess ? e : f;
}

/* ---- scratch ------------------------------------------------------------------ */

rv_status cuda_scratch(rv_backend *be, size_t bytes, void **ptr)
{
    *ptr = NULL;
    if (bytes == 0)
        return RV_OK;
    return cuda_check(cuda_block_alloc(cuda_ctx_of(be), ptr, bytes), "scratch alloc");
}

void cuda_scratch_free(rv_backend *be, void *ptr)
{
    if (ptr && cuda_block_free(cuda_ctx_of(be), ptr) != cudaSuccess)
        cudaGetLastError(); /* nothing to report to: a void cleanup path */
}
