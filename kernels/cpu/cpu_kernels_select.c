/* cpu_kernels_select.c: which attention kernels the CPU backend runs, in one place.
 * At f32 the order is AVX-512, then AVX2 with FMA, then the portable BLAS tiles:
 * the first the CPU has (checked at run time, so a build without -march=native
 * still runs the best kernels). A bf16 backend runs the AVX-512 BF16 tiles
 * (avx512bf16: bf16 operands, f32 accumulation), which only a CPU allowed bf16
 * runs (cpu_bf16.h). RINGVIT_CPU_KERNELS=avx512|avx2|blas|avx512bf16 forces one
 * at either precision (an f32 set at bf16 computes the attention in f32, the bf16
 * set at f32 in bf16: how the tests reach every set), and is refused with a
 * message when the CPU (or build) cannot run it. */
#include <stdlib.h>
#include <string.h>

#include "cpu_attn_tiles.h"
#include "cpu_bf16.h"

typedef struct kernel_set {
    const char *name;
    const rv_attn_tile_ops *ops;
    const char *needs; /* CPU features, as /proc/cpuinfo names them */
    int bf16;          /* 1: the bf16 set */
} kernel_set;

/* 1 when the CPU has what set i needs. */
static int cpu_has(int i)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (i == 0)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("fma");
    if (i == 1)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (i == 3)
        return cpu_has(0) && cpu_bf16_usable();
#endif
    return i == 2;
}

/* The f32 sets best first, then the bf16 one. */
static const kernel_set sets[] = {
#if defined(__x86_64__) && defined(__GNUC__)
    {"avx512", &rv_attn_tiles_avx512, "avx512f, avx512vl, avx512dq, avx512bw and fma", 0},
    {"avx2", &rv_attn_tiles_avx2, "avx2 and fma", 0},
    {"blas", &rv_attn_tiles_blas, "", 0},
    {"avx512bf16", &rv_attn_tiles_avx512bf16,
     "avx512f, avx512vl, avx512dq, avx512bw, fma and avx512_bf16, with RINGVIT_CPU_BF16 not 0",
     1},
#else
    {"avx512", NULL, "an x86-64 build with GCC", 0},
    {"avx2", NULL, "an x86-64 build with GCC", 0},
    {"blas", &rv_attn_tiles_blas, "", 0},
    {"avx512bf16", NULL, "an x86-64 build with GCC", 1},
#endif
};
#define NSETS (int)(sizeof sets / sizeof sets[0])

static int usable(int i)
{
    return sets[i].ops && cpu_has(i);
}

rv_status rv_attn_tiles_select(rv_precision precision, const rv_attn_tile_ops **ops)
{
    const char *force = getenv("RINGVIT_CPU_KERNELS");
    *ops = &rv_attn_tiles_blas;
    if (force && force[0] && strcmp(force, "auto") != 0) {
        for (int i = 0; i < NSETS; i++) {
            if (strcmp(force, sets[i].name) != 0)
                continue;
            if (!usable(i))
                return rv_fail(RV_ERR_UNSUPPORTED,
                               "RINGVIT_CPU_KERNELS=%s: this CPU cannot run them (they need %s); "
                               "unset it to use the best this CPU has (%s)",
                               force, sets[i].needs, rv_cpu_kernels_best());
            *ops = sets[i].ops;
            return RV_OK;
        }
        return rv_fail(RV_ERR_INVALID,
                       "RINGVIT_CPU_KERNELS=%s: unknown kernel set (known: avx512, avx2, blas, "
                       "avx512bf16, auto)",
                       force);
    }
    for (int i = 0; i < NSETS; i++)
        if (sets[i].bf16 == (precision == RV_PRECISION_BF16) && usable(i)) {
            *ops = sets[i].ops;
            return RV_OK;
        }
    if (precision == RV_PRECISION_BF16) /* a bf16 backend exists only where it runs */
        return rv_fail(RV_ERR_INTERNAL, "bf16 attention kernels: none this CPU runs");
    return RV_OK;
}

const char *rv_cpu_kernels_best(void)
{
    for (int i = 0; i < NSETS; i++)
        if (!sets[i].bf16 && usable(i))
            return sets[i].name;
    return "blas";
}

int rv_cpu_kernels_supported(const char *name)
{
    for (int i = 0; name && i < NSETS; i++)
        if (strcmp(name, sets[i].name) == 0)
            return usable(i);
    return 0;
}

const char *rv_cpu_kernels_at(rv_precision p)
{
    const rv_attn_tile_ops *ops;
    return rv_attn_tiles_select(p, &ops) == RV_OK ? ops->name : NULL;
}

const char *rv_cpu_kernels(void)
{
    return rv_cpu_kernels_at(RV_PRECISION_F32);
}
