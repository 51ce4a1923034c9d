/* cuda_softmax.cu: row-wise softmax on the GPU, y = exp(x - max) / sum exp(x - max),
 * with the contract of kernels/cpu/cpu_softmax.c: a -inf entry (a masked position)
 * gets 0, a row that is -inf everywhere is written as all 0 rather than 0/0 = NaN.
 * NaN is not screened for. x and y may be the same array.
 *
 * One warp per row (grid-stride over rows), lanes stride over the columns; three
 * passes: the maximum, the exponentials (stored in y) with their sum, the scaling. */
#include "cuda_internal.h"

#define WARPS 4 /* warps (rows) per block */

__device__ static inline float warp_sum(float v)
{
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

__device__ static inline float warp_max(float v)
{
    for (int off = 16; off > 0; off >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

/* x, y (rows, cols). Element j of a row is only ever touched by lane j % 32, and
 * y[j] is written after x[j] was last read, so y may alias x. */
__global__ static void softmax_fwd_kernel(const float *x, float *y, int rows, int cols)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int i = blockIdx.x * WARPS + warp; i < rows; i += gridDim.x * WARPS) {
        const float *xr = x + (size_t)i * (size_t)cols;
        float *yr = y + (size_t)i * (size_t)cols;

        float m = -INFINITY;
        for (int j = lane; j < cols; j += 32)
            m = fmaxf(m, xr[j]);
        m = warp_max(m); /* the same in every lane, so the branch below is uniform */

        if (m == -INFINITY) { /* fully masked row */
            for (int j = lane; j < cols; j += 32)
                yr[j] = 0.0f;
            continue;
        }

        float sum = 0.0f;
        for (int j = lane; j < cols; j += 32) {
            float e = expf(xr[j] - m); /* -inf - m = -inf: e = 0 */
            yr[j] = e;
            sum += e;
        }
        /* sum >= 1: the maximum contributes exp(0) */
        float inv = 1.0f / warp_sum(sum);
        for (int j = lane; j < cols; j += 32)
            yr[j] *= inv;
    }
}

rv_status cuda_softmax_fwd(rv_backend *be, const float *x, float *y, int rows, int cols)
{
    int none = 0;
    rv_status st = rv_args_rows("softmax_fwd", rows, cols, x, "x", y, "y", &none);
    if (st != RV_OK || none)
        return st;
    softmax_fwd_kernel<<<cuda_blocks((size_t)rows, WARPS), WARPS * 32, 0,
                         cuda_ctx_of(be)->stream>>>(x, y, rows, cols);
    return cuda_check_launch("softmax_fwd");
}
