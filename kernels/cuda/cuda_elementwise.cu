/* cuda_elementwise.cu: the elementwise ops of the "cuda" backend: bias add, the
 * MLP activations (rv_act) forward and backward, the layer-scale ops scale_add and
 * scale_cols, fill, add, and the strided 2-D copy. Same contracts as the CPU ops
 * (kernels/cpu/cpu_gemm.c, cpu_act.c, cpu_scale.c, cpu_memops.c).
 *
 * Flat ops run grid-stride loops with size_t indices, so n may exceed 2^31 while
 * the grid stays capped (cuda_blocks). In-place use (y == x, dx == dy) is allowed:
 * each element is read and then written by the same thread.
 *
 * GELU, exact (erf) form:
 *   y     = x * Phi(x),            Phi(x) = erfc(-x / sqrt 2) / 2
 *   dy/dx = Phi(x) + x * phi(x),   phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
 * Phi through the scaled complementary error function (erfcxf) rather than
 * (1 + erff(x / sqrt 2)) / 2, which cancels to noise for negative x; see gelu_cdf.
 * The tanh form and quick GELU are the CPU backend's own formulas (act_math.h),
 * compiled here as device functions. */
#include "../act_math.h"
#include "cuda_internal.h"

#define THREADS 256
#define INV_SQRT2 0.70710678118654752440f
#define INV_SQRT_2PI 0.39894228040143267794f

/* First index of this thread and the grid's stride, both as size_t. */
#define GRID_STRIDE_LOOP(i, n)                                                            \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);             \
         i += (size_t)gridDim.x * blockDim.x)

/* ---- bias add ------------------------------------------------------------------- */

/* x (rows, cols) += bias (cols): rows stride over grid.y, columns over grid.x, so
 * no index needs a division. */
__global__ static void bias_add_kernel(float *x, const float *bias, int rows, int cols)
{
    for (int i = blockIdx.y; i < rows; i += gridDim.y) {
        float *row = x + (size_t)i * (size_t)cols;
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < cols;
             j += gridDim.x * blockDim.x)
            row[j] += bias[j];
    }
}

/* The grid of the row ops: columns over grid.x (capped: wide rows loop; 64 blocks
 * x 256 covers 16k columns per pass), rows over grid.y. */
static dim3 row_grid(int rows, int cols)
{
    unsigned gx = (unsigned)((cols + THREADS - 1) / THREADS);
    if (gx > 64)
        gx = 64;
    return dim3(gx, (unsigned)(rows < 65535 ? rows : 65535));
}

rv_status cuda_bias_add(rv_backend *be, float *x, const float *bias, int rows, int cols)
{
    int none = 0;
    rv_status st = rv_args_rows("bias_add", rows, cols, x, "x", bias, "bias", &none);
    if (st != RV_OK || none)
        return st;
    bias_add_kernel<<<row_grid(rows, cols), THREADS, 0, cuda_ctx_of(be)->stream>>>(x, bias,
                                                                                  rows, cols);
    return cuda_check_launch("bias_add");
}

/* ---- layer scale ---------------------------------------------------------------- */

/* y (rows, cols) += x * gamma (cols), laid out as bias_add. */
__global__ static void scale_add_kernel(float *y, const float *x, const float *gamma,
                                        int rows, int cols)
{
    for (int i = blockIdx.y; i < rows; i += gridDim.y) {
        float *yr = y + (size_t)i * (size_t)cols;
        const float *xr = x + (size_t)i * (size_t)cols;
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < cols;
             j += gridDim.x * blockDim.x)
            yr[j] += xr[j] * gamma[j];
    }
}

/* x (rows, cols) *= gamma (cols). */
__global__ static void scale_cols_kernel(float *x, const float *gamma, int rows, int cols)
{
    for (int i = blockIdx.y; i < rows; i += gridDim.y) {
        float *xr = x + (size_t)i * (size_t)cols;
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < cols;
             j += gridDim.x * blockDim.x)
            xr[j] *= gamma[j];
    }
}

rv_status cuda_scale_add(rv_backend *be, float *y, const float *x, const float *gamma,
                         int rows, int cols)
{
    int none = 0;
    rv_status st = rv_args_scale_add(y, x, gamma, rows, cols, &none);
    if (st != RV_OK || none)
        return st;
    scale_add_kernel<<<row_grid(rows, cols), THREADS, 0, cuda_ctx_of(be)->stream>>>(
        y, x, gamma, rows, cols);
    return cuda_check_launch("scale_add");
}

rv_status cuda_scale_cols(rv_backend *be, float *x, const float *gamma, int rows, int cols)
{
    int none = 0;
    rv_status st = rv_args_scale_cols(x, gamma, rows, cols, &none);
    if (st != RV_OK || none)
        return st;
    scale_cols_kernel<<<row_grid(rows, cols), THREADS, 0, cuda_ctx_of(be)->stream>>>(
        x, gamma, rows, cols);
    return cuda_check_launch("scale_cols");
}

/* ---- activations ---------------------------------------------------------------- */

/* Phi(x), and phi(x) through *pdf, in the CPU backend's form (cpu_act.c): with
 * a = min(|x|, 15) and z = a / sqrt 2,
 *   erfc(z) = erfcx(z) * exp(-z^2),   Phi(x) = erfc(z)/2 (x < 0), 1 - erfc(z)/2 else.
 * z^2 = a^2 / 2 is split exactly into hi + lo (fma) and exp(-(hi + lo)) taken as
 * exp(-hi) * (1 - lo), so rounding a^2 or z costs no relative accuracy deep in the
 * tail (erfcx varies slowly); tiny outputs for negative x stay accurate. The clamp
 * at 15 keeps a^2 finite, and there exp(-a^2/2) = e^-112.5 is exactly 0 in float,
 * so Phi and phi are exactly 1 (or 0) and 0 beyond it: a clamp where e is still
 * subnormal (14: e^-98) would make x * phi(x) of a huge x (3e38) come out as
 * 3e-5, not 0. NaN becomes 15 here and stays NaN in x * Phi(x). */
__device__ static inline float gelu_cdf(float x, float *pdf)
{
    float a = fabsf(x);
    a = a < 15.0f ? a : 15.0f;
    float aa = a * a;
    float hi = 0.5f * aa;
    float lo = 0.5f * fmaf(a, a, -aa);
    float e = expf(-hi) * (1.0f - lo); /* exp(-z^2) */
    float half_erfc = 0.5f * erfcxf(a * INV_SQRT2) * e;
    *pdf = INV_SQRT_2PI * e;
    return x < 0.0f ? half_erfc : 1.0f - half_erfc;
}

/* One kernel per activation (the template argument), so the loop body has no
 * branch on it. */
template <rv_act ACT> __device__ static inline float act_fwd_one(float v)
{
    if (ACT == RV_ACT_GELU_TANH)
        return act_gelu_tanh_fwd(v);
    if (ACT == RV_ACT_QUICK_GELU)
        return act_quick_gelu_fwd(v);
    float pdf;
    return v * gelu_cdf(v, &pdf);
}

template <rv_act ACT> __device__ static inline float act_bwd_one(float v, float g)
{
    if (ACT == RV_ACT_GELU_TANH)
        return act_gelu_tanh_bwd(v, g);
    if (ACT == RV_ACT_QUICK_GELU)
        return act_quick_gelu_bwd(v, g);
    float pdf;
    float cdf = gelu_cdf(v, &pdf);
    return g * (cdf + v * pdf);
}

template <rv_act ACT> __global__ static void act_fwd_kernel(const float *x, float *y, size_t n)
{
    GRID_STRIDE_LOOP(i, n) { y[i] = act_fwd_one<ACT>(x[i]); }
}

template <rv_act ACT>
__global__ static void act_bwd_kernel(const float *x, const float *dy, float *dx, size_t n)
{
    GRID_STRIDE_LOOP(i, n) { dx[i] = act_bwd_one<ACT>(x[i], dy[i]); }
}

rv_status cuda_act_fwd(rv_backend *be, rv_act act, const float *x, float *y, size_t n)
{
    rv_status st = rv_args_act_fwd(act, x, y, n);
    if (st != RV_OK || n == 0)
        return st;
    unsigned blocks = cuda_blocks(n, THREADS);
    cudaStream_t stream = cuda_ctx_of(be)->stream;
    switch (act) {
    case RV_ACT_GELU:
        act_fwd_kernel<RV_ACT_GELU><<<blocks, THREADS, 0, stream>>>(x, y, n);
        break;
    case RV_ACT_GELU_TANH:
        act_fwd_kernel<RV_ACT_GELU_TANH><<<blocks, THREADS, 0, stream>>>(x, y, n);
        break;
    case RV_ACT_QUICK_GELU:
        act_fwd_kernel<RV_ACT_QUICK_GELU><<<blocks, THREADS, 0, stream>>>(x, y, n);
        break;
    }
    return cuda_check_launch("act_fwd");
}

rv_status cuda_act_bwd(rv_backend *be, rv_act act, const float *x, const float *dy, float *dx,
                       size_t n)
{
    rv_status st = rv_args_act_bwd(act, x, dy, dx, n);
    if (st != RV_OK || n == 0)
        return st;
    unsigned blocks = cuda_blocks(n, THREADS);
    cudaStream_t stream = cuda_ctx_of(be)->stream;
    switch (act) {
    case RV_ACT_GELU:
        act_bwd_kernel<RV_ACT_GELU><<<blocks, THREADS, 0, stream>>>(x, dy, dx, n);
        break;
    case RV_ACT_GELU_TANH:
        act_bwd_kernel<RV_ACT_GELU_TANH><<<blocks, THREADS, 0, stream>>>(x, dy, dx, n);
        break;
    case RV_ACT_QUICK_GELU:
        act_bwd_kernel<RV_ACT_QUICK_GELU><<<blocks, THREADS, 0, stream>>>(x, dy, dx, n);
        break;
    }
    return cuda_check_launch("act_bwd");
}

/* ---- fill, add ------------------------------------------------------------------ */

__global__ static void fill_kernel(float *x, float value, size_t n)
{
    GRID_STRIDE_LOOP(i, n) { x[i] = value; }
}

__global__ static void add_kernel(float *y, const float *x, size_t n)
{
    GRID_STRIDE_LOOP(i, n) { y[i] += x[i]; }
}

rv_status cuda_fill(rv_backend *be, float *x, float value, size_t n)
{
    if (n == 0)
        return RV_OK;
    if (!x)
        return rv_fail(RV_ERR_INVALID, "fill: x is NULL with n=%zu", n);
    fill_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx_of(be)->stream>>>(x, value, n);
    return cuda_check_launch("fill");
}

rv_status cuda_add(rv_backend *be, float *y, const float *x, size_t n)
{
    if (n == 0)
        return RV_OK;
    if (!y || !x)
        return rv_fail(RV_ERR_INVALID, "add: %s is NULL with n=%zu", !y ? "y" : "x", n);
    add_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx_of(be)->stream>>>(y, x, n);
    return cuda_check_launch("add");
}

/* ---- copy2d --------------------------------------------------------------------- */

/* rows rows of width bytes, row i from src + i * spitch to dst + i * dpitch, ordered
 * on the stream. cudaMemcpyDefault rather than DeviceToDevice: with unified
 * addressing it is the same copy for device memory and still right for host
 * memory. The regions must not overlap (as for any cudaMemcpy). */
rv_status cuda_copy2d(rv_backend *be, void *dst, size_t dpitch, const void *src,
                      size_t spitch, size_t width, size_t rows)
{
    if (rows == 0 || width == 0)
        return RV_OK;
    if (!dst || !src)
        return rv_fail(RV_ERR_INVALID, "copy2d: %s is NULL (%zu rows of %zu bytes)",
                       !dst ? "dst" : "src", rows, width);
    if (rows > 1 && (dpitch < width || spitch < width))
        return rv_fail(RV_ERR_INVALID, "copy2d: pitch dst=%zu src=%zu below the width %zu",
                       dpitch, spitch, width);
    cudaStream_t stream = cuda_ctx_of(be)->stream;
    if (rows == 1 || (dpitch == width && spitch == width))
        return cuda_check(cudaMemcpyAsync(dst, src, width * rows, cudaMemcpyDefault, stream),
                          "copy2d");
    /* cudaMemcpy2D takes pitches up to cudaDevAttrMaxPitch (2^31 - 1 on current GPUs);
     * beyond that, one copy per row. */
    if (dpitch <= INT32_MAX && spitch <= INT32_MAX)
        return cuda_check(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows,
                                            cudaMemcpyDefault, stream),
                          "copy2d");
    for (size_t i = 0; i < rows; i++) {
        rv_status st = cuda_check(cudaMemcpyAsync((char *)dst + i * dpitch,
                                                  (const char *)src + i * spitch, width,
                                                  cudaMemcpyDefault, stream),
                                  "copy2d");
        if (st != RV_OK)
            return st;
    }
    return RV_OK;
}
