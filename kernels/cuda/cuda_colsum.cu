/* cuda_colsum.cu: column sums in double, added to a float vector: colsum_add,
 * dst (cols) += the column sums of x (rows, cols) (a bias gradient), and
 * colsum_mul_add, dst += the column sums of a * b (a layer scale's gradient).
 * Each block takes 32 adjacent columns (one per lane, so a warp reads 128
 * contiguous bytes of a row) and a chunk of rows spread over 8 warps; the warps'
 * partial sums meet in shared memory and one atomicAdd per column and block lands
 * in a double scratch vector, added to dst at the end. A product of two floats is
 * exact in double, so only the sums round. */
#include "cuda_internal.h"

#define COLS_PER_BLOCK 32
#define WARPS 8
#define ROWS_PER_BLOCK 1024

/* grid (ceil(cols / 32), ceil(rows / ROWS_PER_BLOCK)), block (32, WARPS). Sums x,
 * or x * y when MUL. */
template <bool MUL>
__global__ void colsum_partial_kernel(const float *__restrict__ x, const float *__restrict__ y,
                                      int rows, int cols, double *__restrict__ acc)
{
    __shared__ double part[WARPS][COLS_PER_BLOCK];
    const int col = blockIdx.x * COLS_PER_BLOCK + threadIdx.x;
    const int r0 = blockIdx.y * ROWS_PER_BLOCK;
    const int r1 = min(rows, r0 + ROWS_PER_BLOCK);
    double s = 0.0;
    if (col < cols)
        for (int r = r0 + threadIdx.y; r < r1; r += WARPS)
            s += MUL ? (double)x[(size_t)r * cols + col] * (double)y[(size_t)r * cols + col]
                     : (double)x[(size_t)r * cols + col];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && col < cols) {
        double t = 0.0;
        for (int w = 0; w < WARPS; w++)
            t += part[w][threadIdx.x];
        atomicAdd(&acc[col], t);
    }
}

__global__ void colsum_finish_kernel(const double *__restrict__ acc, int cols,
                                     float *__restrict__ dst)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < cols)
        dst[j] += (float)acc[j];
}

/* dst += the column sums of x (y NULL) or of x * y, for the op named what. */
static rv_status colsum_run(rv_backend *be, const float *x, const float *y, int rows, int cols,
                            float *dst, const char *what)
{
    cudaStream_t stream = cuda_ctx_of(be)->stream;
    double *acc = NULL;
    rv_status st = cuda_scratch(be, sizeof(double) * (size_t)cols, (void **)&acc);
    if (st != RV_OK)
        return st;
    if ((st = cuda_check(cudaMemsetAsync(acc, 0, sizeof(double) * (size_t)cols, stream),
                         what)) == RV_OK) {
        dim3 grid((unsigned)((cols + COLS_PER_BLOCK - 1) / COLS_PER_BLOCK),
                  (unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK));
        dim3 block(COLS_PER_BLOCK, WARPS);
        if (y)
            colsum_partial_kernel<true><<<grid, block, 0, stream>>>(x, y, rows, cols, acc);
        else
            colsum_partial_kernel<false><<<grid, block, 0, stream>>>(x, NULL, rows, cols, acc);
        if ((st = cuda_check_launch(what)) == RV_OK) {
            colsum_finish_kernel<<<(cols + 255) / 256, 256, 0, stream>>>(acc, cols, dst);
            st = cuda_check_launch(what);
        }
    }
    cuda_scratch_free(be, acc);
    return st;
}

rv_status cuda_colsum_add(rv_backend *be, const float *x, int rows, int cols, float *dst)
{
    if (rows < 0 || cols < 0)
        return rv_fail(RV_ERR_INVALID, "colsum_add: bad shape rows=%d cols=%d", rows, cols);
    if (rows == 0 || cols == 0)
        return RV_OK;
    return colsum_run(be, x, NULL, rows, cols, dst, "colsum_add");
}

rv_status cuda_colsum_mul_add(rv_backend *be, const float *a, const float *b, int rows,
                              int cols, float *dst)
{
    int none = 0;
    rv_status st = rv_args_colsum_mul_add(a, b, rows, cols, dst, &none);
    if (st != RV_OK || none)
        return st;
    return colsum_run(be, a, b, rows, cols, dst, "colsum_mul_add");
}
