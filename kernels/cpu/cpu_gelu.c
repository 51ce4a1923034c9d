/* cpu_gelu.c: PLACEHOLDER being written now. */
#include "cpu_ops.h"
#pragma GCC diagnostic ignored "-Wunused-parameter"
rv_status cpu_gelu_fwd(rv_backend *be, const float *x, float *y, size_t n) { return rv_fail(RV_ERR_UNSUPPORTED, "placeholder"); }
rv_status cpu_gelu_bwd(rv_backend *be, const float *x, const float *dy, float *dx, size_t n) { return rv_fail(RV_ERR_UNSUPPORTED, "placeholder"); }
