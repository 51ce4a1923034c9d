/* cpu_attention_bwd.c: PLACEHOLDER being written now. */
#include "cpu_ops.h"
#pragma GCC diagnostic ignored "-Wunused-parameter"
rv_status cpu_attn_bwd(rv_backend *be, const rv_attn_bwd_args *a) { return rv_fail(RV_ERR_UNSUPPORTED, "placeholder"); }
