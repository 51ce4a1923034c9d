/* cpu_kernels_select.c: which attention kernels the CPU backend runs, in one place.
 * The order is AVX-512, then AVX2 with FMA, then the portable BLAS tiles: the first
 * the CPU has (checked at run time, so a build without -march=native still runs the
 * best kernels). RINGVIT_CPU_KERNELS=avx512|avx2|blas forces one, and is refused
 * with a message when the CPU (or build) cannot run it. */
#include <stdlib.h>
#include <string.h>

#include "cpu_attn_tiles.h"

typedef struct kernel_set {
    const char *name;
    const rv_attn_tile_ops *ops;
    const char *needs; /* CPU features, as /proc/cpuinfo names them */
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
#endif
    return i == 2;
}

/* Best first. */
static const kernel_set sets[] = {
#if defined(__x86_64__) && defined(__GNUC__)
    {"avx512", &rv_attn_tiles_avx512, "avx512f, avx512vl, avx512dq, avx512bw and fma"},
    {"avx2", &rv_attn_tiles_avx2, "avx2 and fma"},
#else
    {"avx512", NULL, "an x86-64 build with GCC"},
    {"avx2", NULL, "an x86-64 build with GCC"},
#endif
    {"blas", &rv_attn_tiles_blas, ""},
};
#define NSETS (int)(sizeof sets / sizeof sets[0])

static int usable(int i)
{
    return sets[i].ops && cpu_has(i);
}

rv_status rv_attn_tiles_select(const rv_attn_tile_ops **ops)
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
                       "auto)",
                       force);
    }
    for (int i = 0; i < NSETS; i++)
        if (usable(i)) {
            *ops = sets[i].ops;
            break;
        }
    return RV_OK;
}

const char *rv_cpu_kernels_best(void)
{
    for (int i = 0; i < NSETS; i++)
        if (usable(i))
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

const char *rv_cpu_kernels(void)
{
    const rv_attn_tile_ops *ops;
    return rv_attn_tiles_select(&ops) == RV_OK ? ops->name : NULL;
}
