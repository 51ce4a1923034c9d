/* cpu_scale.c: the CPU backend's layer-scale ops (CaiT / DINOv2 style
 * per-channel gammas on a residual branch): scale_add (y += x * gamma) and
 * scale_cols (x *= gamma) in the forward, colsum_mul_add (dgamma += the column
 * sums of dy * x, in double) in the backward. Rows are split over be->threads. */
#include <stddef.h>

#include "cpu_ops.h"

/* Below this many elements an OpenMP team costs more than it saves. */
#define PAR_MIN_ELEMS (64 * 1024)
/* colsum_mul_add gives each thread whole blocks of this many columns, so every
 * column is summed by one thread in row order: the result does not depend on the
 * thread count, and the accumulators fit on the stack (no allocation to fail). */
#define COL_BLOCK 64

rv_status cpu_scale_add(rv_backend *be, float *y, const float *x, const float *gamma,
                        int rows, int cols)
{
    int none = 0;
    rv_status st = rv_args_scale_add(y, x, gamma, rows, cols, &none);
    if (st != RV_OK || none)
        return st;
    size_t n = (size_t)rows * (size_t)cols;
#pragma omp parallel for num_threads(be->threads) schedule(static) if (n > PAR_MIN_ELEMS)
    for (int i = 0; i < rows; i++) {
        float *yr = y + (size_t)i * (size_t)cols;
        const float *xr = x + (size_t)i * (size_t)cols;
        for (int j = 0; j < cols; j++)
            yr[j] += xr[j] * gamma[j];
    }
    return RV_OK;
}

rv_status cpu_scale_cols(rv_backend *be, float *x, const float *gamma, int rows, int cols)
{
    int none = 0;
    rv_status st = rv_args_scale_cols(x, gamma, rows, cols, &none);
    if (st != RV_OK || none)
        return st;
    size_t n = (size_t)rows * (size_t)cols;
#pragma omp parallel for num_threads(be->threads) schedule(static) if (n > PAR_MIN_ELEMS)
    for (int i = 0; i < rows; i++) {
        float *xr = x + (size_t)i * (size_t)cols;
        for (int j = 0; j < cols; j++)
            xr[j] *= gamma[j];
    }
    return RV_OK;
}

rv_status cpu_colsum_mul_add(rv_backend *be, const float *a, const float *b, int rows,
                             int cols, float *dst)
{
    int none = 0;
    rv_status st = rv_args_colsum_mul_add(a, b, rows, cols, dst, &none);
    if (st != RV_OK || none)
        return st;
    int blocks = (cols + COL_BLOCK - 1) / COL_BLOCK;
    size_t n = (size_t)rows * (size_t)cols;
#pragma omp parallel for num_threads(be->threads) schedule(static) if (n > PAR_MIN_ELEMS && blocks > 1)
    for (int blk = 0; blk < blocks; blk++) {
        const int c0 = blk * COL_BLOCK;
        const int nc = cols - c0 < COL_BLOCK ? cols - c0 : COL_BLOCK;
        double acc[COL_BLOCK] = {0};
        for (int i = 0; i < rows; i++) {
            const float *ar = a + (size_t)i * (size_t)cols + c0;
            const float *br = b + (size_t)i * (size_t)cols + c0;
            /* float * float is exact in double, so only the sum rounds */
            for (int j = 0; j < nc; j++)
                acc[j] += (double)ar[j] * (double)br[j];
        }
        /* added as colsum_add does: the column sum rounded to float, then added */
        for (int j = 0; j < nc; j++)
            dst[c0 + j] += (float)acc[j];
    }
    return RV_OK;
}
