/* rv_cuda.h: CUDA runtime queries, declared in every build. Without CUDA support
 * compiled in (RINGVIT_HAVE_CUDA undefined) they are not linked: test with
 * RINGVIT_HAVE_CUDA before calling. */
#ifndef RV_CUDA_H
#define RV_CUDA_H

#include <stddef.h>

#include "rv_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices usable by this process; 0 when there is none or the
 * driver is missing. */
int rv_cuda_device_count(void);

/* "NVIDIA H200 (sm_90, 140 GiB)" into buf. */
rv_status rv_cuda_device_name(int device, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
