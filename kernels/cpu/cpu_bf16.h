/* cpu_bf16.h: bf16 on the CPU backend: whether this CPU computes it (AVX-512 BF16 or
 * AMX, and RINGVIT_CPU_BF16 not 0), and the rounding of f32 matrices to bf16 that
 * the bf16 products take (cpu_bf16.c). Internal to kernels/cpu. */
#ifndef RV_CPU_BF16_H
#define RV_CPU_BF16_H

#include <stdint.h>

#include "../rv_status.h"

/* RV_OK when the CPU backend may compute in bf16 here; else RV_ERR_UNSUPPORTED
 * saying what the CPU lacks (or that RINGVIT_CPU_BF16=0 turns it off), or
 * RV_ERR_INVALID for a value of that variable other than 0, 1 or auto. */
rv_status cpu_bf16_check(void);
/* 1 when cpu_bf16_check() would return RV_OK (and no message is set). */
int cpu_bf16_usable(void);

/* dst (rows, cols), row stride ldd, = src (rows, cols), row stride lds, rounded to
 * bf16 to nearest even (NaN stays NaN). rows over threads when it pays. Only where
 * cpu_bf16_check() is RV_OK. */
void cpu_bf16_round(const float *src, int rows, int cols, int lds, uint16_t *dst, int ldd,
                    int threads);

#endif
