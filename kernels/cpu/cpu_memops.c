/* cpu_memops.c: the CPU backend's memory moves (fill, strided 2D copy, add),
 * the ops through which the CP strategies touch buffers, so the same strategy
 * code runs on host and device memory. */
#include <stdlib.h>
#include <string.h>

#include "cpu_ops.h"

rv_status cpu_fill(rv_backend *be, float *x, float value, size_t n)
{
    (void)be;
    for (size_t i = 0; i < n; i++)
        x[i] = value;
    return RV_OK;
}

rv_status cpu_copy2d(rv_backend *be, void *dst, size_t dpitch, const void *src, size_t spitch,
                     size_t width, size_t rows)
{
    (void)be;
    if (!width)
        return RV_OK;
    if (rows > 1 && (dpitch < width || spitch < width))
        return rv_fail(RV_ERR_INVALID, "copy2d: pitches %zu, %zu are below the width %zu",
                       dpitch, spitch, width);
    for (size_t i = 0; i < rows; i++)
        memmove((char *)dst + i * dpitch, (const char *)src + i * spitch, width);
    return RV_OK;
}

rv_status cpu_add(rv_backend *be, float *y, const float *x, size_t n)
{
#pragma omp parallel for simd num_threads(be->threads) schedule(static) if (n > (1u << 16))
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
    return RV_OK;
}

rv_status cpu_colsum_add(rv_backend *be, const float *x, int rows, int cols, float *dst)
{
    (void)be;
    if (rows < 0 || cols < 0)
        return rv_fail(RV_ERR_INVALID, "colsum_add: bad shape rows=%d cols=%d", rows, cols);
    if (!cols)
        return RV_OK;
    double *acc = calloc((size_t)cols, sizeof *acc);
    if (!acc)
        return rv_fail(RV_ERR_NOMEM, "colsum_add: out of memory for %d columns", cols);
    for (int i = 0; i < rows; i++) {
        const float *r = x + (size_t)i * cols;
        for (int j = 0; j < cols; j++)
            acc[j] += r[j];
    }
    for (int j = 0; j < cols; j++)
        dst[j] += (float)acc[j];
    free(acc);
    return RV_OK;
}
