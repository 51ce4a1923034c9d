/* cpu_attn_tiles_avx512.c: the attention tile steps and backward on the AVX-512
 * register-blocked kernels (cpu_tile_kernels.h), compiled for AVX-512 whatever the
 * build's -march and called only where the CPU has it (cpu_kernels_select.c). */
#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC target("avx512f,avx512vl,avx512dq,avx512bw,fma")

#include "cpu_tile_kernels.h"

#define RV_ISA_NAME "avx512"
#define RV_ISA_TABLE rv_attn_tiles_avx512
#define RV_ISA_QK_TILE rv_qk_tile
#define RV_ISA_PV_TILE rv_pv_tile
#define RV_VF rv_v16
#define RV_VI rv_i16
#define RV_VL 16
#define RV_VOP(op) rv_v16_##op
#include "cpu_attn_tiles_isa.h"
#endif
