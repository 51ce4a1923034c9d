/* cuda_elementwise.cu: the elementwise ops of the "cuda" backend: bias add, GELU
 * forward and backward, fill, add, and the strided 2-D copy. Same contracts as
 * the CPU ops (kernels/cpu/cpu_gemm.c, cpu_gelu.c, cpu_backend.c).
 *
 * Flat ops run grid-stride loops with size_t indices, so n may exceed 2^31 while
 * the grid stays capped (cuda_blocks). In-place use (y == x, dx == dy) is allowed:
 * each element is read and then written by the same thread.
 *
 * GELU, exact (erf) form:
 *   y     = x * Phi(x),            Phi(x) = erfc(-x / sqrt 2) / 2
 *   dy/dx = Phi(x) + x * phi(x),   phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
 * Phi through the scaled complementary error function (erfcxf) rather than
 * (1 + erff(x / sqrt 2)) / 2, which cancels to noise for negative x; see gelu_cdf. */
#include "cuda_internal.h"

#define THREADS 256
#define INV_SQRT2 0.70710678118654752440f
#define INV_SQRT_2PI 0.39894228040143267794f

/* First index of this thread and the grid's stride, both as size_t. */
#define GRID_STRIDE_LOOP(i, n)                                                            \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);             \
         i += (size_t)gridDim.x * blockDim.x)

/* ---- bias add ------------------------------------------------------------------ */

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

rv_status cuda_bias_add(rv_backend *be, float *x, const float *bias, int rows, int cols)
{
    int none = 0;
    rv_status st = rv_args_rows("bias_add", rows, cols, x, "x", bias, "bias", &none);
    if (st != RV_OK || none)
        return st;
    unsigned gx = (unsigned)((cols + THREADS - 1) / THREADS);
    if (gx > 64)
        gx = 64; /* wide rows loop; 64 blocks x 256 covers 16k columns per pass */
    dim3 grid(gx, (unsigned)(rows < 65535 ? rows : 65535));
    bias_add_kernel<<<grid, THREADS, 0, cuda_ctx_of(be)->stream>>>(x, bias, rows, cols);
    return cuda_check_launch("bias_add");
}

/* ---- GELU ---------------------------------------------------------------------- */

/* Phi(x), and phi(x) through *pdf, in the CPU backend's form (cpu_gelu.c): with
 * a = min(|x|, 14) and z = a / sqrt 2,
 *   erfc(z) = erfcx(z) * exp(-z^2),   Phi(x) = erfc(z)/2 (x < 0), 1 - erfc(z)/2 else.
 * z^2 = a^2 / 2 is split exactly into hi + lo (fma) and exp(-(hi + lo)) taken as
 * exp(-hi) * (1 - lo), so rounding a^2 or z costs no relative accuracy deep in the
 * tail (erfcx varies slowly); tiny outputs for negative x stay accurate. The clamp
 * at 14 (Phi(-14) < 1e-44) keeps a^2 finite; NaN becomes 14 here and stays NaN in
 * x * Phi(x). */
__device__ static inline float gelu_cdf(float x, float *pdf)
{
    float a = fabsf(x);
    a = a < 14.0f ? a : 14.0f;
    float aa = a * a;
    float hi = 0.5f * aa;
    float lo = 0.5f * fmaf(a, a, -aa);
    float e = expf(-hi) * (1.0f - lo); /* exp(-z^2) */
    float half_erfc = 0.5f * erfcxf(a * INV_SQRT2) * e;
    *pdf = INV_SQRT_2PI * e;
    return x < 0.0f ? half_erfc : 1.0f - half_erfc;
}

__global__ static void gelu_fwd_kernel(const float *x, float *y, size_t n)
{
    GRID_STRIDE_LOOP(i, n)
    {
        float v = x[i], pdf;
        y[i] = v * gelu_cdf(v, &pdf);
    }
}

__global__ static void gelu_bwd_kernel(const float *x, const float *dy, float *dx, size_t n)
{
    GRID_STRIDE_LOOP(i, n)
    {
        float v = x[i], pdf;
        float cdf = gelu_cdf(v, &pdf);
        dx[i] = dy[i] * (cdf + v * pdf);
    }
}

rv_status cuda_gelu_fwd(rv_backend *be, const float *x, float *y, size_t n)
{
    rv_status st = rv_args_gelu_fwd(x, y, n);
    if (st != RV_OK || n == 0)
        return st;
    gelu_fwd_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx_of(be)->stream>>>(x, y, n);
    return cuda_check_launch("gelu_fwd");
}

rv_status cuda_gelu_bwd(rv_backend *be, const float *x, const float *dy, float *dx,
                        size_t n)
{
    rv_status st = rv_args_gelu_bwd(x, dy, dx, n);
    if (st != RV_OK || n == 0)
        return st;
    gelu_bwd_kernel<<<cuda_blocks(n, THREADS), THREADS, 0, cuda_ctx_of(be)->stream>>>(x, dy,
                                                                                      dx, n);
    return cuda_check_launch("gelu_bwd");
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

/* ---- copy2d -------------------------------------------------------------------- */

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
