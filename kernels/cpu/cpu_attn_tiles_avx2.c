/* cpu_attn_tiles_avx2.c: the attention tile steps and backward on the AVX2/FMA
 * register-blocked kernels (cpu_tile_kernels_avx2.h), compiled for AVX2 whatever
 * the build's -march and called only where the CPU has AVX2 and FMA
 * (cpu_kernels_select.c). */
#if defined(__x86_64__) && defined(__GNUC__)
/* AVX2 only, even in a -march=native build on an AVX-512 machine: the kernels are
 * then the ones an AVX2 CPU runs (16 registers), testable there. */
#pragma GCC target("avx2,fma,no-avx512f")

#include "cpu_tile_kernels_avx2.h"

#define RV_ISA_NAME "avx2"
#define RV_ISA_TABLE rv_attn_tiles_avx2
#define RV_ISA_QK_TILE rv8_qk_tile
#define RV_ISA_PV_TILE rv8_pv_tile
#define RV_VF rv_v8
#define RV_VI rv_i8
#define RV_VL 8
#define RV_VOP(op) rv_v8_##op
#include "cpu_attn_tiles_isa.h"
#endif
