/* cpu_gemm.c: PLACEHOLDER being written now. */
#include "cpu_ops.h"
#pragma GCC diagnostic ignored "-Wunused-parameter"
rv_status cpu_gemm(rv_backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc) { return rv_fail(RV_ERR_UNSUPPORTED, "placeholder"); }
rv_status cpu_bias_add(rv_backend *be, float *x, const float *bias, int rows, int cols) { return rv_fail(RV_ERR_UNSUPPORTED, "placeholder"); }
