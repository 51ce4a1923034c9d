/* backend_precision.c: a backend's number format (rv_precision, rv_backend.h): its
 * names, the check the commands make before any work, and setting it on a backend
 * of either device. The CUDA backend computes its attention in bf16 whatever its
 * GEMMs do (RINGVIT_CUDA_GEMM), so it is bf16, and f32 is refused there. */
#include <string.h>

#include "cpu/cpu_bf16.h"
#include "cpu/cpu_ops.h"
#include "rv_backend.h"

static const char *const names[] = {
    [RV_PRECISION_AUTO] = "auto", [RV_PRECISION_F32] = "f32", [RV_PRECISION_BF16] = "bf16"};

rv_status rv_precision_parse(const char *name, rv_precision *out)
{
    for (int p = RV_PRECISION_AUTO; name && p <= RV_PRECISION_BF16; p++)
        if (strcmp(name, names[p]) == 0) {
            *out = (rv_precision)p;
            return RV_OK;
        }
    return rv_fail(RV_ERR_INVALID, "precision wants auto, f32 or bf16, got '%s'",
                   name ? name : "");
}

const char *rv_precision_name(rv_precision p)
{
    return p >= RV_PRECISION_AUTO && p <= RV_PRECISION_BF16 ? names[p] : NULL;
}

rv_status rv_precision_check(const char *device, rv_precision p)
{
    if (!rv_precision_name(p))
        return rv_fail(RV_ERR_INVALID, "precision %d: not auto, f32 or bf16", (int)p);
    if (device && strcmp(device, "cpu") == 0)
        return p == RV_PRECISION_BF16 ? cpu_bf16_check() : RV_OK;
    if (device && strcmp(device, "cuda") == 0) {
        if (p == RV_PRECISION_F32)
            return rv_fail(RV_ERR_UNSUPPORTED,
                           "precision f32: the cuda device computes attention in bf16 "
                           "(precision auto or bf16; RINGVIT_CUDA_GEMM=f32 keeps its GEMMs "
                           "in f32)");
        return RV_OK;
    }
    return rv_fail(RV_ERR_INVALID, "device '%s': known devices are cpu and cuda",
                   device ? device : "(null)");
}

rv_status rv_backend_set_precision(rv_backend *be, rv_precision p)
{
    if (!be)
        return rv_fail(RV_ERR_INVALID, "set precision: no backend");
    rv_status st = rv_precision_check(be->name, p);
    if (st != RV_OK || strcmp(be->name, "cpu") != 0)
        return st;
    return cpu_set_precision(be, p);
}

rv_precision rv_backend_precision(const rv_backend *be)
{
    if (!be || strcmp(be->name, "cpu") == 0)
        return be && cpu_is_bf16(be) ? RV_PRECISION_BF16 : RV_PRECISION_F32;
    return RV_PRECISION_BF16;
}
