/* cpu_attention_merge.c: PLACEHOLDER being written now. */
#include "cpu_ops.h"
#pragma GCC diagnostic ignored "-Wunused-parameter"
rv_status cpu_attn_merge(rv_backend *be, float *o, float *lse, const float *o2, const float *lse2, int sq, int heads, int dim) { return rv_fail(RV_ERR_UNSUPPORTED, "placeholder"); }
