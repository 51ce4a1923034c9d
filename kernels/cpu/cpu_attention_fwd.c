/* cpu_attention_fwd.c: PLACEHOLDER being written now. */
#include "cpu_ops.h"
#pragma GCC diagnostic ignored "-Wunused-parameter"
rv_status cpu_attn_fwd(rv_backend *be, const rv_attn_fwd_args *a) { return rv_fail(RV_ERR_UNSUPPORTED, "placeholder"); }
