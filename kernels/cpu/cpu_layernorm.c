/* cpu_layernorm.c: layer normalisation over the last axis, forward and backward.
 *
 * forward:  y = (x - mean) * rstd * w + b,  rstd = 1 / sqrt(var + eps), per row;
 *           mean and rstd (rows) are saved for the backward.
 * backward: with xhat = (x - mean) * rstd and g = dy * w,
 *           dx = rstd * (g - mean(g) - xhat * mean(g * xhat))   (overwritten)
 *           dw += sum_rows dy * xhat,  db += sum_rows dy          (accumulated)
 *
 * Rows are independent and split over threads. The dw/db column sums are split by
 * column tiles instead, each summed over all rows in double by one thread, so the
 * result does not depend on the thread count and stays accurate for long sequences. */
#include <math.h>
#include <stddef.h>

#include "cpu_ops.h"

/* Below this many elements an OpenMP team costs more than it saves. */
#define PAR_MIN_ELEMS (32 * 1024)
/* Columns per dw/db tile: 64 doubles of accumulators per array stay in L1. */
#define COL_TILE 64

rv_status cpu_layernorm_fwd(rv_backend *be, const float *x, const float *w,
                            const float *b, int rows, int cols, float eps, float *y,
                            float *mean, float *rstd)
{
    int none = 0;
    rv_status st = rv_args_layernorm_fwd(x, w, b, rows, cols, eps, y, mean, rstd, &none);
    if (st != RV_OK || none)
        return st;

    size_t total = (size_t)rows * (size_t)cols;
#pragma omp parallel for num_threads(be->threads) schedule(static) if (total > PAR_MIN_ELEMS)
    for (int i = 0; i < rows; i++) {
        const float *xr = x + (size_t)i * cols;
        float *yr = y + (size_t)i * cols;

        /* Two passes (mean, then squared deviations): no cancellation when the
         * mean is large against the spread. */
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < cols; j++)
            sum += xr[j];
        float m = sum / (float)cols;

        float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
        for (int j = 0; j < cols; j++) {
            float d = xr[j] - m;
            sq += d * d;
        }
        float s = 1.0f / sqrtf(sq / (float)cols + eps);

        /* y may alias x: each element is read before it is written. */
        for (int j = 0; j < cols; j++)
            yr[j] = (xr[j] - m) * s * w[j] + b[j];
        mean[i] = m;
        rstd[i] = s;
    }
    return RV_OK;
}

rv_status cpu_layernorm_bwd(rv_backend *be, const float *dy, const float *x,
                            const float *w, const float *mean, const float *rstd,
                            int rows, int cols, float *dx, float *dw, float *db)
{
    int none = 0;
    rv_status st = rv_args_layernorm_bwd(dy, x, w, mean, rstd, rows, cols, dx, dw, db, &none);
    if (st != RV_OK || none)
        return st;

    size_t total = (size_t)rows * (size_t)cols;
    int ntiles = (cols + COL_TILE - 1) / COL_TILE;
    float inv_cols = 1.0f / (float)cols;

#pragma omp parallel num_threads(be->threads) if (total > PAR_MIN_ELEMS)
    {
        /* dw, db: one column tile per iteration, summed over every row. Done before
         * dx so that dx may alias dy. */
#pragma omp for schedule(static)
        for (int t = 0; t < ntiles; t++) {
            int j0 = t * COL_TILE;
            int nj = cols - j0 < COL_TILE ? cols - j0 : COL_TILE;
            double acc_w[COL_TILE] = {0}, acc_b[COL_TILE] = {0};
            for (int i = 0; i < rows; i++) {
                const float *dyr = dy + (size_t)i * cols + j0;
                const float *xr = x + (size_t)i * cols + j0;
                float m = mean[i], s = rstd[i];
                for (int j = 0; j < nj; j++) {
                    acc_w[j] += (double)(dyr[j] * ((xr[j] - m) * s));
                    acc_b[j] += (double)dyr[j];
                }
            }
            for (int j = 0; j < nj; j++) {
                dw[j0 + j] += (float)acc_w[j];
                db[j0 + j] += (float)acc_b[j];
            }
        }
        /* implicit barrier: dy is no longer needed by the tiles when dx is written */

#pragma omp for schedule(static)
        for (int i = 0; i < rows; i++) {
            const float *dyr = dy + (size_t)i * cols;
            const float *xr = x + (size_t)i * cols;
            float *dxr = dx + (size_t)i * cols;
            float m = mean[i], s = rstd[i];

            float g_sum = 0.0f, gx_sum = 0.0f;
#pragma omp simd reduction(+ : g_sum, gx_sum)
            for (int j = 0; j < cols; j++) {
                float g = dyr[j] * w[j];
                g_sum += g;
                gx_sum += g * ((xr[j] - m) * s);
            }
            float g_mean = g_sum * inv_cols, gx_mean = gx_sum * inv_cols;

            for (int j = 0; j < cols; j++) {
                float xhat = (xr[j] - m) * s;
                dxr[j] = s * (dyr[j] * w[j] - g_mean - xhat * gx_mean);
            }
        }
    }
    return RV_OK;
}
