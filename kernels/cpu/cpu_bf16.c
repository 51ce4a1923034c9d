/* cpu_bf16.c: whether the CPU backend may compute in bf16, and f32 -> bf16
 * rounding of whole matrices (cpu_bf16.h).
 *
 * bf16 needs the CPU's bf16 instructions: AVX-512 BF16 (vcvtne2ps2bf16 rounds,
 * vdpbf16ps multiplies: the attention tiles of cpu_attn_tiles_avx512bf16.c) and
 * oneDNN dispatching to AVX-512 BF16 or AMX for the matmuls. Every AMX CPU has
 * AVX-512 BF16 too. RINGVIT_CPU_BF16=0 refuses bf16 whatever the CPU has, so the
 * refusal can be run anywhere. The rounding is the instruction's: to nearest even,
 * NaN kept (quiet), denormal inputs as zero. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_bf16.h"
#include "cpu_dnnl.h"

/* Rows of at least this many elements in all go over the threads. */
#define PAR_MIN_ELEMS (64 * 1024)

static int cpu_has_bf16(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

/* Why bf16 cannot run here: 0 (it can), 1 RINGVIT_CPU_BF16=0, 2 a value of it
 * unknown, 3 the CPU lacks the instructions, 4 oneDNN does not dispatch to them,
 * 5 RINGVIT_CPU_KERNELS=avx2 (the backend behaves as on an AVX2-only CPU). */
static int bf16_refusal(void)
{
    const char *env = getenv("RINGVIT_CPU_BF16");
    if (env && env[0] && strcmp(env, "1") != 0 && strcmp(env, "auto") != 0)
        return strcmp(env, "0") == 0 ? 1 : 2;
    if (!cpu_has_bf16())
        return 3;
    if (cpu_dnnl_isa_capped())
        return 5;
    return cpu_dnnl_has_bf16() ? 0 : 4;
}

int cpu_bf16_usable(void)
{
    return bf16_refusal() == 0;
}

rv_status cpu_bf16_check(void)
{
    switch (bf16_refusal()) {
    case 0:
        return RV_OK;
    case 1:
        return rv_fail(RV_ERR_UNSUPPORTED,
                       "precision bf16: turned off on the CPU by RINGVIT_CPU_BF16=0 "
                       "(use precision f32, or unset the variable)");
    case 2:
        return rv_fail(RV_ERR_INVALID, "RINGVIT_CPU_BF16='%s' (known: 0, 1, auto)",
                       getenv("RINGVIT_CPU_BF16"));
    case 3:
        return rv_fail(RV_ERR_UNSUPPORTED,
                       "precision bf16: this CPU has neither AVX-512 BF16 nor AMX, the "
                       "instructions bf16 products need on the CPU (use precision f32)");
    case 5:
        return rv_fail(RV_ERR_UNSUPPORTED,
                       "precision bf16: RINGVIT_CPU_KERNELS=avx2 runs the CPU backend as on "
                       "an AVX2-only CPU, which has no bf16 products (use precision f32)");
    default:
        return rv_fail(RV_ERR_UNSUPPORTED,
                       "precision bf16: %s dispatches to %s here, without bf16 products "
                       "(is ONEDNN_MAX_CPU_ISA set?); use precision f32",
                       cpu_dnnl_version(), cpu_dnnl_isa());
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")
#include <immintrin.h>

static void round_row(const float *src, int cols, uint16_t *dst)
{
    int c = 0;
    for (; c + 32 <= cols; c += 32) {
        __m512bh r = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + c + 16), _mm512_loadu_ps(src + c));
        _mm512_storeu_si512((void *)(dst + c), (__m512i)r);
    }
    if (c < cols) { /* the last 1..31: masked loads (zeros past the end), masked store */
        const int n = cols - c;
        const __mmask16 lo = n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);
        const __mmask16 hi = n > 16 ? (__mmask16)((1u << (n - 16)) - 1) : 0;
        __m512bh r = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, src + c + 16),
                                         _mm512_maskz_loadu_ps(lo, src + c));
        const __mmask32 keep = n >= 32 ? 0xffffffffu : (__mmask32)((1u << n) - 1);
        _mm512_mask_storeu_epi16(dst + c, keep, (__m512i)r);
    }
}
#pragma GCC pop_options

void cpu_bf16_round(const float *src, int rows, int cols, int lds, uint16_t *dst, int ldd,
                    int threads)
{
    const size_t total = (size_t)rows * (size_t)cols;
#pragma omp parallel for num_threads(threads) schedule(static) if (total >= PAR_MIN_ELEMS)
    for (int i = 0; i < rows; i++)
        round_row(src + (size_t)i * lds, cols, dst + (size_t)i * ldd);
}
#else
/* The same rounding in plain C (no CPU of this build passes cpu_bf16_check). */
static uint16_t round_one(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet, sign kept */
        return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

void cpu_bf16_round(const float *src, int rows, int cols, int lds, uint16_t *dst, int ldd,
                    int threads)
{
    const size_t total = (size_t)rows * (size_t)cols;
#pragma omp parallel for num_threads(threads) schedule(static) if (total >= PAR_MIN_ELEMS)
    for (int i = 0; i < rows; i++)
        for (int c = 0; c < cols; c++)
            dst[(size_t)i * ldd + c] = round_one(src[(size_t)i * lds + c]);
}
#endif
