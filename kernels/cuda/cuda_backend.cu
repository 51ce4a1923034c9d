/* cuda_backend.cu: the "cuda" backend table and its plumbing: creation on a device
 * (a non-blocking compute stream, a cuBLAS handle bound to it with its own
 * workspace, the device's stream-ordered memory pool kept from shrinking), memory
 * (alloc, free, copy), synchronize and destroy; and rv_cuda_copy_sync, the
 * blocking copy of the local communicator. The error conversions, device blocks
 * and scratch memory it shares with the op files are cuda_common.cu's.
 *
 * Device memory comes from the device's stream-ordered pool (cudaMallocAsync /
 * cudaFreeAsync on the stream) where the device supports memory pools
 * (cudaDevAttrMemoryPoolsSupported; some virtualised or older setups do not), else
 * from plain cudaMalloc/cudaFree, a free then waiting for the stream first.
 * RINGVIT_CUDA_NO_POOL=1 forces the plain path, so the GPU tests can cover it; the
 * creation log line says which one a backend uses.
 *
 * Every op only enqueues work on ctx->stream. The exceptions are the calls whose
 * result the host may use at once: alloc (the block may come from memory freed
 * earlier on this stream and be handed to another stream) and host-involved copies
 * (the host reads or reuses its buffer after return) wait for the stream. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

/* cuBLAS workspace: enough for its split-K and tensor-core kernels without it
 * allocating behind our back (cuBLAS would otherwise draw from its own pool). */
#define BLAS_WORKSPACE_BYTES ((size_t)32 << 20)

/* ---- memory ------------------------------------------------------------------- */

static rv_status cuda_alloc(rv_backend *be, size_t bytes, void **ptr)
{
    cuda_ctx *ctx = cuda_ctx_of(be);
    *ptr = NULL;
    if (bytes == 0)
        return RV_OK;
    rv_status st = cuda_check(cudaSetDevice(ctx->device), "alloc: set device");
    if (st != RV_OK)
        return st;
    void *p = NULL;
    cudaError_t e = cuda_block_alloc(ctx, &p, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return rv_fail(e == cudaErrorMemoryAllocation ? RV_ERR_NOMEM : RV_ERR_BACKEND,
                       "cuda backend: cannot allocate %zu bytes on device %d: %s", bytes,
                       ctx->device, cudaGetErrorString(e));
    }
    /* The pool may hand back a block freed earlier on this stream whose last use
     * is still queued; waiting makes it safe on any stream and for any copy. */
    st = cuda_check(cudaStreamSynchronize(ctx->stream), "alloc: synchronize");
    if (st != RV_OK) {
        cuda_block_free(ctx, p);
        cudaGetLastError();
        return st;
    }
    *ptr = p;
    return RV_OK;
}

static void cuda_free(rv_backend *be, void *ptr)
{
    if (!ptr)
        return;
    cuda_ctx *ctx = cuda_ctx_of(be);
    cudaSetDevice(ctx->device);
    /* Stream-ordered: the block goes back to the pool once the ops queued before
     * this point (the last users of the buffer) have finished (without a pool,
     * cuda_block_free waits for them). */
    if (cuda_block_free(ctx, ptr) != cudaSuccess)
        cudaGetLastError();
}

static rv_status cuda_copy(rv_backend *be, void *dst, const void *src, size_t bytes,
                           rv_copy_kind kind)
{
    cuda_ctx *ctx = cuda_ctx_of(be);
    if (bytes == 0)
        return RV_OK;
    if (!dst || !src)
        return rv_fail(RV_ERR_INVALID, "copy: %s is NULL with %zu bytes", !dst ? "dst" : "src",
                       bytes);
    if (kind != RV_COPY_HOST_TO_DEVICE && kind != RV_COPY_DEVICE_TO_HOST &&
        kind != RV_COPY_DEVICE_TO_DEVICE)
        return rv_fail(RV_ERR_INVALID, "copy: unknown kind %d", (int)kind);
    rv_status st = cuda_check(cudaSetDevice(ctx->device), "copy: set device");
    if (st != RV_OK)
        return st;
    /* cudaMemcpyDefault: unified addressing tells host from device memory, so a
     * host buffer passed as "device" (or the reverse) still copies correctly. */
    st = cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx->stream), "copy");
    if (st != RV_OK)
        return st;
    /* The host reads dst (device to host) or may reuse src (host to device) as soon
     * as this returns; a device-to-device copy stays ordered on the stream. */
    if (kind != RV_COPY_DEVICE_TO_DEVICE)
        st = cuda_check(cudaStreamSynchronize(ctx->stream), "copy: synchronize");
    return st;
}

/* ---- synchronize, destroy ------------------------------------------------------ */

static rv_status cuda_synchronize(rv_backend *be)
{
    cuda_ctx *ctx = cuda_ctx_of(be);
    rv_status st = cuda_check(cudaSetDevice(ctx->device), "synchronize: set device");
    if (st != RV_OK)
        return st;
    /* Also where the errors of kernels that failed while running surface. */
    return cuda_check(cudaStreamSynchronize(ctx->stream), "synchronize");
}

/* Frees whatever part of ctx exists (creation cleans up through here too). */
static void cuda_ctx_release(cuda_ctx *ctx)
{
    if (!ctx)
        return;
    cudaSetDevice(ctx->device);
    if (ctx->stream)
        cudaStreamSynchronize(ctx->stream);
    if (ctx->blas)
        cublasDestroy(ctx->blas);
    if (ctx->blas_workspace)
        cudaFree(ctx->blas_workspace);
    if (ctx->stream)
        cudaStreamDestroy(ctx->stream);
    cudaGetLastError(); /* destroy reports nothing */
    free(ctx);
}

static void cuda_destroy(rv_backend *be)
{
    if (!be)
        return;
    cuda_ctx_release(cuda_ctx_of(be));
    free(be);
}

static const rv_backend cuda_table = {
    /* .name           = */ "cuda",
    /* .ctx            = */ NULL,
    /* .threads        = */ 1,
    /* .host_memory    = */ 0,
    /* .alloc          = */ cuda_alloc,
    /* .free           = */ cuda_free,
    /* .copy           = */ cuda_copy,
    /* .gemm           = */ cuda_gemm,
    /* .bias_add       = */ cuda_bias_add,
    /* .layernorm_fwd  = */ cuda_layernorm_fwd,
    /* .layernorm_bwd  = */ cuda_layernorm_bwd,
    /* .act_fwd        = */ cuda_act_fwd,
    /* .act_bwd        = */ cuda_act_bwd,
    /* .scale_add      = */ cuda_scale_add,
    /* .scale_cols     = */ cuda_scale_cols,
    /* .softmax_fwd    = */ cuda_softmax_fwd,
    /* .attn_fwd       = */ cuda_attn_fwd,
    /* .attn_bwd       = */ cuda_attn_bwd,
    /* .attn_merge     = */ cuda_attn_merge,
    /* .fill           = */ cuda_fill,
    /* .copy2d         = */ cuda_copy2d,
    /* .add            = */ cuda_add,
    /* .colsum_add     = */ cuda_colsum_add,
    /* .colsum_mul_add = */ cuda_colsum_mul_add,
    /* .synchronize    = */ cuda_synchronize,
    /* .destroy        = */ cuda_destroy,
};

/* ---- creation ------------------------------------------------------------------ */

/* The device of rv_backend_cuda_create(-1): RINGVIT_CUDA_DEVICE, else 0. */
static rv_status env_device(int *device)
{
    const char *s = getenv("RINGVIT_CUDA_DEVICE");
    *device = 0;
    if (!s || !*s)
        return RV_OK;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || v < 0 || v > INT_MAX)
        return rv_fail(RV_ERR_INVALID, "RINGVIT_CUDA_DEVICE='%s' is not a device number", s);
    *device = (int)v;
    return RV_OK;
}

/* RINGVIT_CUDA_GEMM: unset, "" or "bf16" (tensor cores, bf16 inputs), "f32". */
static rv_status env_gemm_f32(int *gemm_f32)
{
    const char *s = getenv("RINGVIT_CUDA_GEMM");
    *gemm_f32 = 0;
    if (!s || !*s || strcmp(s, "bf16") == 0)
        return RV_OK;
    if (strcmp(s, "f32") == 0) {
        *gemm_f32 = 1;
        return RV_OK;
    }
    return rv_fail(RV_ERR_INVALID, "RINGVIT_CUDA_GEMM='%s' (known: bf16, f32)", s);
}

/* RINGVIT_CUDA_NO_POOL: unset, "" or "0" (the pool where the device has one), "1"
 * (plain cudaMalloc/cudaFree even so). */
static rv_status env_no_pool(int *no_pool)
{
    const char *s = getenv("RINGVIT_CUDA_NO_POOL");
    *no_pool = 0;
    if (!s || !*s || strcmp(s, "0") == 0)
        return RV_OK;
    if (strcmp(s, "1") == 0) {
        *no_pool = 1;
        return RV_OK;
    }
    return rv_fail(RV_ERR_INVALID, "RINGVIT_CUDA_NO_POOL='%s' (known: 0, 1)", s);
}

extern "C" rv_status rv_backend_cuda_create(int device, rv_backend **out)
{
    *out = NULL;
    rv_backend *be = NULL;
    cuda_ctx *ctx = NULL;
    cudaMemPool_t pool;
    uint64_t threshold = UINT64_MAX;
    int count = 0, pools = 0;
    rv_status st = RV_OK;

    if (device < -1)
        return rv_fail(RV_ERR_INVALID, "cuda backend: device %d", device);
    if (device == -1 && (st = env_device(&device)) != RV_OK)
        return st;
    int gemm_f32 = 0, no_pool = 0;
    if ((st = env_gemm_f32(&gemm_f32)) != RV_OK || (st = env_no_pool(&no_pool)) != RV_OK)
        return st;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
        cudaGetLastError();
        return rv_fail(RV_ERR_UNSUPPORTED, "cuda backend: no usable GPU (%s)",
                       cudaGetErrorString(e));
    }
    if ((st = cuda_check(e, "device count")) != RV_OK)
        return st;
    if (device >= count)
        return rv_fail(RV_ERR_INVALID, "cuda backend: device %d, but %d device%s visible",
                       device, count, count == 1 ? " is" : "s are");

    be = (rv_backend *)malloc(sizeof *be);
    ctx = (cuda_ctx *)calloc(1, sizeof *ctx);
    if (!be || !ctx) {
        st = rv_fail(RV_ERR_NOMEM, "cuda backend: out of memory");
        goto end;
    }
    ctx->device = device;
    ctx->gemm_f32 = gemm_f32;
    if ((st = cuda_check(cudaSetDevice(device), "set device")) != RV_OK)
        goto end;
    if ((st = cuda_check(cudaDeviceGetAttribute(&ctx->sm_count,
                                                cudaDevAttrMultiProcessorCount, device),
                         "multiprocessor count")) != RV_OK)
        goto end;

    /* cudaMallocAsync on a device without memory pools fails at the first alloc:
     * ask first, and use plain cudaMalloc there. */
    if ((st = cuda_check(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported,
                                                device),
                         "memory pools supported")) != RV_OK)
        goto end;
    ctx->pool = pools && !no_pool;

    /* Keep freed blocks in the device's pool instead of returning them to the
     * driver at every synchronize: cudaMallocAsync then costs no system call. */
    if (ctx->pool &&
        ((st = cuda_check(cudaDeviceGetDefaultMemPool(&pool, device), "default mem pool")) !=
             RV_OK ||
         (st = cuda_check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold,
                                                  &threshold),
                          "mem pool release threshold")) != RV_OK))
        goto end;

    if ((st = cuda_check(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking),
                         "stream create")) != RV_OK)
        goto end;
    if ((st = cublas_check(cublasCreate(&ctx->blas), "create")) != RV_OK) {
        ctx->blas = NULL;
        goto end;
    }
    /* cublasSetStream resets the workspace to cuBLAS's own: set the stream first. */
    if ((st = cublas_check(cublasSetStream(ctx->blas, ctx->stream), "set stream")) != RV_OK)
        goto end;
    ctx->blas_workspace_bytes = BLAS_WORKSPACE_BYTES;
    if ((st = cuda_check(cudaMalloc(&ctx->blas_workspace, ctx->blas_workspace_bytes),
                         "cublas workspace alloc")) != RV_OK) {
        ctx->blas_workspace = NULL;
        goto end;
    }
    if ((st = cublas_check(cublasSetWorkspace(ctx->blas, ctx->blas_workspace,
                                              ctx->blas_workspace_bytes),
                           "set workspace")) != RV_OK)
        goto end;

    *be = cuda_table;
    be->ctx = ctx;
    *out = be;
    /* The plain path is slower (a free waits for the stream): say so where it is
     * in use; the usual pool only at debug level, once per backend. */
    rv_log(ctx->pool ? RV_LOG_DEBUG : RV_LOG_INFO, "cuda backend: device %d: device memory "
           "from %s", device,
           ctx->pool ? "the stream-ordered pool (cudaMallocAsync)"
           : no_pool ? "cudaMalloc/cudaFree (RINGVIT_CUDA_NO_POOL=1)"
                     : "cudaMalloc/cudaFree (the device has no memory pools)");
    return RV_OK;

end:
    cuda_ctx_release(ctx);
    free(be);
    return st;
}

/* 1 when p is host memory, pageable or pinned (or CUDA cannot tell, as without a
 * driver, where no device pointer can exist). */
static int is_host_pointer(const void *p)
{
    cudaPointerAttributes at;
    if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
        cudaGetLastError();
        return 1;
    }
    return at.type == cudaMemoryTypeUnregistered || at.type == cudaMemoryTypeHost;
}

extern "C" int rv_cuda_copy_sync(void *dst, const void *src, size_t bytes)
{
    if (bytes == 0)
        return 0;
    if (!dst || !src) {
        rv_fail(RV_ERR_INVALID, "cuda copy: %s is NULL with %zu bytes", !dst ? "dst" : "src",
                bytes);
        return -1;
    }
    /* Host to host (a local run's votes and control messages): no driver needed. */
    if (is_host_pointer(dst) && is_host_pointer(src)) {
        memmove(dst, src, bytes);
        return 0;
    }
    /* The calling thread's own default stream: no ordering against any backend's
     * stream (the caller synchronized those), nor against other threads' copies. */
    if (cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cudaStreamPerThread),
                   "copy") != RV_OK ||
        cuda_check(cudaStreamSynchronize(cudaStreamPerThread), "copy: synchronize") != RV_OK)
        return -1;
    return 0;
}
