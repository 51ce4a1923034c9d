/* cpu_dnnl.h: the CPU backend's matrix products on oneDNN (cpu_dnnl.c): matmul
 * primitives made once per call shape and kept in a small cache, oneDNN's sgemm
 * on the calling thread for the attention's BLAS paths, and what oneDNN says of
 * itself (version, the instruction set it dispatches to). Internal to kernels/cpu.
 *
 * Threads: Debian's libdnnl runs on OpenMP and sizes every product's team from
 * omp_get_max_threads() of the calling thread, when the primitive is made and
 * when it runs; callers set it (cpu_gemm.c), and the cache keys on it, since a
 * primitive splits its work for the count it was made for. Inside an OpenMP
 * parallel region oneDNN runs on the calling thread alone. */
#ifndef RV_CPU_DNNL_H
#define RV_CPU_DNNL_H

#include <stdint.h>

#include "../rv_status.h"

typedef enum cpu_gemm_type {
    CPU_GEMM_F32 = 0,  /* a, b float */
    CPU_GEMM_BF16 = 1, /* a, b bf16 (uint16_t), f32 accumulation */
} cpu_gemm_type;

/* C (m, n) = alpha * op(A) @ op(B) + beta * C, row-major, C f32; op(A) is (m, k),
 * op(B) (k, n); lda, ldb, ldc are the row strides of the stored matrices, in
 * elements of their type. m, n, k > 0. */
typedef struct cpu_gemm_call {
    cpu_gemm_type type;
    int trans_a, trans_b, m, n, k;
    float alpha, beta;
    const void *a;
    int lda;
    const void *b;
    int ldb;
    float *c;
    int ldc;
    int threads; /* the OpenMP count the caller has set: part of the cache key */
} cpu_gemm_call;

/* The call on a matmul primitive, from the cache or made (and kept) now. */
rv_status cpu_dnnl_matmul(const cpu_gemm_call *g);
/* An f32 product on the calling thread alone, for the attention's BLAS paths inside
 * the backend's parallel regions (valid arguments; no status). */
void cpu_sgemm_serial(int trans_a, int trans_b, int m, int n, int k, float alpha,
                      const float *a, int lda, const float *b, int ldb, float beta, float *c,
                      int ldc);

/* "oneDNN 2.6.3". */
const char *cpu_dnnl_version(void);
/* The instruction set oneDNN dispatches to ("avx512_core_bf16", "avx2", ...). */
const char *cpu_dnnl_isa(void);
/* 1 when RINGVIT_CPU_KERNELS=avx2 caps oneDNN at AVX2 (cpu_dnnl.c). */
int cpu_dnnl_isa_capped(void);
/* 1 when oneDNN dispatches to AVX-512 BF16 or AMX (bf16 products in hardware). */
int cpu_dnnl_has_bf16(void);

#endif
