/* cpu_backend.c: the CPU backend table (C + oneDNN + OpenMP), its creation and
 * precision, what it reports of its GEMM library, and the backend-generic helpers
 * (free, is_host). */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../rv_cuda.h"
#include "cpu_attn_tiles.h"
#include "cpu_bf16.h"
#include "cpu_dnnl.h"
#include "cpu_ops.h"

/* A backend and its private state, one allocation (cpu_destroy frees both). */
typedef struct cpu_backend_mem {
    rv_backend be;
    cpu_ctx ctx;
} cpu_backend_mem;

static rv_status cpu_alloc(rv_backend *be, size_t bytes, void **ptr)
{
    (void)be;
    *ptr = NULL;
    if (bytes == 0)
        return RV_OK;
    /* 64-byte alignment: whole cache lines and aligned AVX-512 loads. */
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p)
        return rv_fail(RV_ERR_NOMEM, "cpu backend: cannot allocate %zu bytes", bytes);
    *ptr = p;
    return RV_OK;
}

static void cpu_free(rv_backend *be, void *ptr)
{
    (void)be;
    free(ptr);
}

static rv_status cpu_copy(rv_backend *be, void *dst, const void *src, size_t bytes,
                          rv_copy_kind kind)
{
    (void)be;
    (void)kind; /* host and device memory are the same here */
    if (bytes)
        memmove(dst, src, bytes);
    return RV_OK;
}

static rv_status cpu_synchronize(rv_backend *be)
{
    (void)be;
    return RV_OK;
}

static void cpu_destroy(rv_backend *be)
{
    free(be); /* the cpu_backend_mem holding it */
}

static const rv_backend cpu_table = {
    /* .name           = */ "cpu",
    /* .ctx            = */ NULL,
    /* .threads        = */ 1,
    /* .host_memory    = */ 1,
    /* .alloc          = */ cpu_alloc,
    /* .free           = */ cpu_free,
    /* .copy           = */ cpu_copy,
    /* .gemm           = */ cpu_gemm,
    /* .bias_add       = */ cpu_bias_add,
    /* .layernorm_fwd  = */ cpu_layernorm_fwd,
    /* .layernorm_bwd  = */ cpu_layernorm_bwd,
    /* .act_fwd        = */ cpu_act_fwd,
    /* .act_bwd        = */ cpu_act_bwd,
    /* .scale_add      = */ cpu_scale_add,
    /* .scale_cols     = */ cpu_scale_cols,
    /* .softmax_fwd    = */ cpu_softmax_fwd,
    /* .attn_fwd       = */ cpu_attn_fwd,
    /* .attn_bwd       = */ cpu_attn_bwd,
    /* .attn_merge     = */ cpu_attn_merge,
    /* .fill           = */ cpu_fill,
    /* .copy2d         = */ cpu_copy2d,
    /* .add            = */ cpu_add,
    /* .colsum_add     = */ cpu_colsum_add,
    /* .colsum_mul_add = */ cpu_colsum_mul_add,
    /* .synchronize    = */ cpu_synchronize,
    /* .destroy        = */ cpu_destroy,
};

int rv_cpu_default_threads(void)
{
    int n = omp_get_num_procs();
    return n > 0 ? n : 1;
}

const char *rv_gemm_library(void)
{
    return cpu_dnnl_version();
}

const char *rv_gemm_isa(void)
{
    return cpu_dnnl_isa();
}

rv_status cpu_set_precision(rv_backend *be, rv_precision p)
{
    cpu_ctx *ctx = be->ctx;
    if (p == RV_PRECISION_BF16) {
        rv_status st = cpu_bf16_check();
        if (st != RV_OK)
            return st;
    }
    ctx->precision = p == RV_PRECISION_BF16 ? RV_PRECISION_BF16 : RV_PRECISION_F32;
    return RV_OK;
}

rv_status rv_backend_cpu_create(int threads, rv_backend **out)
{
    *out = NULL;
    const rv_attn_tile_ops *ops; /* RINGVIT_CPU_KERNELS may name kernels this CPU lacks */
    rv_status st = rv_attn_tiles_select(RV_PRECISION_F32, &ops);
    if (st != RV_OK)
        return st;
    cpu_backend_mem *mem = malloc(sizeof *mem);
    if (!mem)
        return rv_fail(RV_ERR_NOMEM, "cpu backend: out of memory");
    mem->be = cpu_table;
    mem->ctx = (cpu_ctx){.precision = RV_PRECISION_F32};
    mem->be.ctx = &mem->ctx;
    mem->be.threads = threads > 0 ? threads : rv_cpu_default_threads();
    *out = &mem->be;
    return RV_OK;
}

void rv_backend_free(rv_backend **be)
{
    if (!be || !*be)
        return;
    (*be)->destroy(*be);
    *be = NULL;
}

int rv_backend_is_host(const rv_backend *be)
{
    return be && be->host_memory;
}
