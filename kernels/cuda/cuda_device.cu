/* cuda_device.cu: CUDA runtime queries the rest of ringvit needs before any GPU
 * kernel runs: how many devices this process can use, and the name of one. GPU
 * tests use the count to report themselves skipped where there is no GPU. */
#include <cuda_runtime.h>
#include <stdio.h>

#include "rv_cuda.h"

extern "C" const char *rv_cuda_build_archs(void)
{
    return RINGVIT_CUDA_ARCHS;
}

extern "C" int rv_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no device" error */
        return 0;
    }
    return n;
}

extern "C" rv_status rv_cuda_device_name(int device, char *buf, size_t len)
{
    cudaDeviceProp prop;
    cudaError_t err = cudaGetDeviceProperties(&prop, device);
    if (err != cudaSuccess)
        return rv_fail(RV_ERR_BACKEND, "cuda device %d: %s", device, cudaGetErrorString(err));
    snprintf(buf, len, "%s (sm_%d%d, %.0f GiB)", prop.name, prop.major, prop.minor,
             prop.totalGlobalMem / 1073741824.0);
    return RV_OK;
}
