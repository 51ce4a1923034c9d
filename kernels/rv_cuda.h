/* rv_cuda.h: the CUDA backend and runtime queries, declared in every build.
 * Without CUDA support compiled in (RINGVIT_HAVE_CUDA undefined) they are not
 * linked: test with RINGVIT_HAVE_CUDA before calling. */
#ifndef RV_CUDA_H
#define RV_CUDA_H

#include <stddef.h>

#include "rv_api.h"
#include "rv_backend.h"
#include "rv_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices usable by this process; 0 when there is none or the
 * driver is missing. */
RV_API int rv_cuda_device_count(void);

/* The GPU architectures the kernels were compiled for ("90"). */
RV_API const char *rv_cuda_build_archs(void);

/* "NVIDIA H200 (sm_90, 140 GiB)" into buf. */
RV_API rv_status rv_cuda_device_name(int device, char *buf, size_t len);

/* A "cuda" backend on device `device` (-1: RINGVIT_CUDA_DEVICE, else 0). It owns
 * a non-blocking compute stream, a cuBLAS handle and draws device memory from
 * the device's stream-ordered pool (no cudaMalloc per call), or, on a device
 * without memory pools (or with RINGVIT_CUDA_NO_POOL=1), from plain cudaMalloc
 * with each free after the stream is idle. Every op is
 * asynchronous on that stream; be->synchronize waits for them. Several backends
 * may share one GPU (one per local rank, each its own stream). Tensors are f32 in
 * memory; GEMMs and attention run on tensor cores with bf16 inputs and f32
 * accumulation (RINGVIT_CUDA_GEMM=f32 keeps GEMMs in f32). */
RV_API rv_status rv_backend_cuda_create(int device, rv_backend **out);

/* Copies bytes between any two buffers, host or device, and returns when the copy
 * is complete: the move of a local communicator whose ranks hold device memory
 * (rv_local_run_copy). 0 on success; -1 with the message in rv_last_error(). */
RV_API int rv_cuda_copy_sync(void *dst, const void *src, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
