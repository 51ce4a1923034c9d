/* cuda_layernorm.cu: layer normalisation over the last axis on the GPU, forward and
 * backward, with the contracts of kernels/cpu/cpu_layernorm.c:
 *
 * forward:  y = (x - mean) * rstd * w + b,  rstd = 1 / sqrt(var + eps), per row;
 *           mean and rstd (rows) are saved. y may alias x (the encoder's final
 *           LayerNorm runs in place).
 * backward: with xhat = (x - mean) * rstd and g = dy * w,
 *           dx = rstd * (g - mean(g) - xhat * mean(g * xhat))   (overwritten)
 *           dw += sum_rows dy * xhat,  db += sum_rows dy          (accumulated)
 *           dx may alias dy.
 *
 * Rows: one warp per row (grid-stride over rows), lanes stride over the columns;
 * the forward takes two passes (mean, then squared deviations) like the CPU, so a
 * large mean does not cancel the variance.
 *
 * dw, db: deterministic, no atomics. Pass 1 gives each block a tile of 32 columns
 * and a chunk of rows and writes that chunk's column sums (in double) to scratch
 * (nchunks, cols); pass 2 adds the chunks of each column in a fixed order into dw
 * and db. Both run before the dx kernel, which is what lets dx alias dy. */
#include "cuda_internal.h"

#define WARPS 4               /* warps (rows) per block of the row kernels */
#define COL_TILE 32           /* columns per block of the dw/db pass: one per lane */
#define ROW_LANES 8           /* row phases per block of the dw/db pass (blockDim.y) */

__device__ static inline float warp_sum(float v)
{
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v; /* every lane holds the total */
}

/* ---- forward ------------------------------------------------------------------- */

/* x, y (rows, cols), w, b (cols), mean, rstd (rows). Warp `warp` of block blockIdx.x
 * takes rows blockIdx.x * WARPS + warp, + gridDim.x * WARPS, ...; the row is the same
 * for all 32 lanes, so the shuffles see the full warp. No __restrict__: y may be x. */
__global__ static void layernorm_fwd_kernel(const float *x, const float *w, const float *b,
                                            int rows, int cols, float eps, float *y,
                                            float *mean, float *rstd)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float inv_cols = 1.0f / (float)cols;
    for (int i = blockIdx.x * WARPS + warp; i < rows; i += gridDim.x * WARPS) {
        const float *xr = x + (size_t)i * (size_t)cols;
        float *yr = y + (size_t)i * (size_t)cols;

        float sum = 0.0f;
        for (int j = lane; j < cols; j += 32)
            sum += xr[j];
        float m = warp_sum(sum) * inv_cols;

        float sq = 0.0f;
        for (int j = lane; j < cols; j += 32) {
            float d = xr[j] - m;
            sq += d * d;
        }
        float s = 1.0f / sqrtf(warp_sum(sq) * inv_cols + eps);

        /* Element j is read and written by the same lane, after the reductions
         * above (the shuffles order them): in place is safe. */
        for (int j = lane; j < cols; j += 32)
            yr[j] = (xr[j] - m) * s * w[j] + b[j];
        if (lane == 0) {
            mean[i] = m;
            rstd[i] = s;
        }
    }
}

rv_status cuda_layernorm_fwd(rv_backend *be, const float *x, const float *w,
                             const float *b, int rows, int cols, float eps, float *y,
                             float *mean, float *rstd)
{
    int none = 0;
    rv_status st = rv_args_layernorm_fwd(x, w, b, rows, cols, eps, y, mean, rstd, &none);
    if (st != RV_OK || none)
        return st;
    layernorm_fwd_kernel<<<cuda_blocks((size_t)rows, WARPS), WARPS * 32, 0,
                           cuda_ctx_of(be)->stream>>>(x, w, b, rows, cols, eps, y, mean, rstd);
    return cuda_check_launch("layernorm_fwd");
}

/* ---- backward: dw, db ------------------------------------------------------------ */

/* Block (blockIdx.x, blockIdx.y) = (column tile, row chunk), threads (COL_TILE,
 * ROW_LANES). Thread (tx, ty) sums column j = blockIdx.x * COL_TILE + tx over rows
 * r0 + ty, r0 + ty + ROW_LANES, ... of the chunk [r0, r1) (a warp reads 32
 * consecutive floats of one row), then the ROW_LANES partial sums of the column are
 * added in order. part_w, part_b: (nchunks, cols), row blockIdx.y. */
__global__ static void layernorm_dwdb_partial_kernel(const float *dy, const float *x,
                                                     const float *mean, const float *rstd,
                                                     int rows, int cols, int rows_per_chunk,
                                                     double *part_w, double *part_b)
{
    __shared__ double sw[ROW_LANES][COL_TILE];
    __shared__ double sb[ROW_LANES][COL_TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int j = blockIdx.x * COL_TILE + tx;
    long long r0 = (long long)blockIdx.y * rows_per_chunk;
    long long r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;

    double acc_w = 0.0, acc_b = 0.0;
    if (j < cols) {
        for (long long r = r0 + ty; r < r1; r += ROW_LANES) {
            size_t off = (size_t)r * (size_t)cols + (size_t)j;
            float d = dy[off];
            acc_w += (double)(d * ((x[off] - mean[r]) * rstd[r]));
            acc_b += (double)d;
        }
    }
    sw[ty][tx] = acc_w;
    sb[ty][tx] = acc_b;
    __syncthreads();
    if (ty == 0 && j < cols) {
        double tw = 0.0, tb = 0.0;
        for (int p = 0; p < ROW_LANES; p++) {
            tw += sw[p][tx];
            tb += sb[p][tx];
        }
        part_w[(size_t)blockIdx.y * (size_t)cols + (size_t)j] = tw;
        part_b[(size_t)blockIdx.y * (size_t)cols + (size_t)j] = tb;
    }
}

/* dw[j] += sum over chunks c of part_w[c][j] (likewise db), chunks in order. */
__global__ static void layernorm_dwdb_final_kernel(const double *part_w, const double *part_b,
                                                   int nchunks, int cols, float *dw,
                                                   float *db)
{
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += gridDim.x * blockDim.x) {
        double tw = 0.0, tb = 0.0;
        for (int c = 0; c < nchunks; c++) {
            tw += part_w[(size_t)c * (size_t)cols + (size_t)j];
            tb += part_b[(size_t)c * (size_t)cols + (size_t)j];
        }
        dw[j] += (float)tw;
        db[j] += (float)tb;
    }
}

/* ---- backward: dx ---------------------------------------------------------------- */

/* One warp per row, as the forward. dx may alias dy: element j is read (both
 * passes) and written by the same lane, the write after the reductions. */
__global__ static void layernorm_dx_kernel(const float *dy, const float *x, const float *w,
                                           const float *mean, const float *rstd, int rows,
                                           int cols, float *dx)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float inv_cols = 1.0f / (float)cols;
    for (int i = blockIdx.x * WARPS + warp; i < rows; i += gridDim.x * WARPS) {
        const float *dyr = dy + (size_t)i * (size_t)cols;
        const float *xr = x + (size_t)i * (size_t)cols;
        float *dxr = dx + (size_t)i * (size_t)cols;
        float m = mean[i], s = rstd[i];

        float g_sum = 0.0f, gx_sum = 0.0f;
        for (int j = lane; j < cols; j += 32) {
            float g = dyr[j] * w[j];
            g_sum += g;
            gx_sum += g * ((xr[j] - m) * s);
        }
        float g_mean = warp_sum(g_sum) * inv_cols;
        float gx_mean = warp_sum(gx_sum) * inv_cols;

        for (int j = lane; j < cols; j += 32) {
            float xhat = (xr[j] - m) * s;
            dxr[j] = s * (dyr[j] * w[j] - g_mean - xhat * gx_mean);
        }
    }
}

rv_status cuda_layernorm_bwd(rv_backend *be, const float *dy, const float *x,
                             const float *w, const float *mean, const float *rstd,
                             int rows, int cols, float *dx, float *dw, float *db)
{
    int none = 0;
    rv_status st = rv_args_layernorm_bwd(dy, x, w, mean, rstd, rows, cols, dx, dw, db, &none);
    if (st != RV_OK || none)
        return st;
    cuda_ctx *ctx = cuda_ctx_of(be);
    double *part = NULL; /* (2, nchunks, cols): the dw partials, then the db ones */

    /* Row chunks: enough blocks to fill the GPU (8 blocks of 256 threads per SM),
     * each chunk at least ROW_LANES rows, at most 65535 chunks (grid.y). */
    int tiles = (cols + COL_TILE - 1) / COL_TILE;
    long want = (8L * (ctx->sm_count > 0 ? ctx->sm_count : 1) + tiles - 1) / tiles;
    long max_chunks = (rows + ROW_LANES - 1) / ROW_LANES;
    if (want > max_chunks)
        want = max_chunks;
    if (want > 65535)
        want = 65535;
    if (want < 1)
        want = 1;
    int rows_per_chunk = (int)((rows + want - 1) / want);
    int nchunks = (rows + rows_per_chunk - 1) / rows_per_chunk;

    size_t part_elems = (size_t)nchunks * (size_t)cols;
    if ((st = cuda_scratch(be, 2 * part_elems * sizeof(double), (void **)&part)) != RV_OK)
        return st;

    dim3 pgrid((unsigned)tiles, (unsigned)nchunks), pblock(COL_TILE, ROW_LANES);
    layernorm_dwdb_partial_kernel<<<pgrid, pblock, 0, ctx->stream>>>(
        dy, x, mean, rstd, rows, cols, rows_per_chunk, part, part + part_elems);
    if ((st = cuda_check_launch("layernorm_bwd: dw/db partial sums")) != RV_OK)
        goto end;
    layernorm_dwdb_final_kernel<<<cuda_blocks((size_t)cols, 256), 256, 0, ctx->stream>>>(
        part, part + part_elems, nchunks, cols, dw, db);
    if ((st = cuda_check_launch("layernorm_bwd: dw/db")) != RV_OK)
        goto end;
    layernorm_dx_kernel<<<cuda_blocks((size_t)rows, WARPS), WARPS * 32, 0, ctx->stream>>>(
        dy, x, w, mean, rstd, rows, cols, dx);
    st = cuda_check_launch("layernorm_bwd: dx");

end:
    cuda_scratch_free(be, part);
    return st;
}
