/* cpu_softmax.c: row-wise softmax, y = exp(x - max) / sum exp(x - max).
 *
 * Subtracting the row maximum keeps exp() in range for any finite input. A -inf
 * entry (a masked position) gets exp(-inf) = 0; a row that is -inf everywhere sees
 * nothing and is written as all 0 rather than 0/0 = NaN. NaN is not screened for.
 * x and y may be the same array. */
#include <math.h>
#include <stddef.h>

#include "cpu_ops.h"

/* Below this many elements an OpenMP team costs more than it saves. */
#define PAR_MIN_ELEMS (32 * 1024)

rv_status cpu_softmax_fwd(rv_backend *be, const float *x, float *y, int rows, int cols)
{
    int none = 0;
    rv_status st = rv_args_rows("softmax_fwd", rows, cols, x, "x", y, "y", &none);
    if (st != RV_OK || none)
        return st;

    size_t total = (size_t)rows * (size_t)cols;
#pragma omp parallel for num_threads(be->threads) schedule(static) if (total > PAR_MIN_ELEMS)
    for (int i = 0; i < rows; i++) {
        const float *xr = x + (size_t)i * cols;
        float *yr = y + (size_t)i * cols;

        float m = -INFINITY;
#pragma omp simd reduction(max : m)
        for (int j = 0; j < cols; j++)
            m = xr[j] > m ? xr[j] : m;

        if (m == -INFINITY) { /* fully masked row */
            for (int j = 0; j < cols; j++)
                yr[j] = 0.0f;
            continue;
        }

        float sum = 0.0f;
        for (int j = 0; j < cols; j++) {
            float e = expf(xr[j] - m);
            yr[j] = e;
            sum += e;
        }
        /* sum >= 1: the maximum contributes exp(0) */
        float inv = 1.0f / sum;
        for (int j = 0; j < cols; j++)
            yr[j] *= inv;
    }
    return RV_OK;
}
