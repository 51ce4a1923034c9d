/* test_memops.c: the CPU backend's memory ops the CP strategies move data with
 * (fill, copy2d, add) and the bias-gradient column sum (colsum_add), against
 * plain loops (colsum in double), including empty shapes, pitches wider than the
 * width and the bad arguments that must be refused. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rv_backend.h"

static rv_backend *cpu(void)
{
    rv_backend *be = NULL;
    cr_assert_eq(rv_backend_cpu_create(2, &be), RV_OK, "%s", rv_last_error());
    return be;
}

static float val(size_t i)
{
    return (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
}

Test(memops, fill_writes_n_and_no_more)
{
    rv_backend *be = cpu();
    float x[70];
    for (int i = 0; i < 70; i++)
        x[i] = 7.0f;
    cr_assert_eq(be->fill(be, x, -INFINITY, 64), RV_OK);
    for (int i = 0; i < 70; i++)
        cr_assert(i < 64 ? x[i] == -INFINITY : x[i] == 7.0f, "x[%d] = %g", i, x[i]);
    cr_assert_eq(be->fill(be, x, 1.0f, 0), RV_OK);
    cr_assert(x[0] == -INFINITY);
    rv_backend_free(&be);
}

Test(memops, copy2d_strided_rows)
{
    rv_backend *be = cpu();
    enum { ROWS = 5, SP = 13, DP = 9, W = 7 };
    float src[ROWS * SP], dst[ROWS * DP];
    for (int i = 0; i < ROWS * SP; i++)
        src[i] = val((size_t)i);
    for (int i = 0; i < ROWS * DP; i++)
        dst[i] = 42.0f;
    cr_assert_eq(be->copy2d(be, dst, DP * 4, src, SP * 4, W * 4, ROWS), RV_OK);
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < DP; c++)
            cr_assert_eq(dst[r * DP + c], c < W ? src[r * SP + c] : 42.0f, "row %d col %d", r, c);
    /* Nothing to do, and a pitch below the width. */
    cr_assert_eq(be->copy2d(be, dst, 0, src, 0, 0, 3), RV_OK);
    cr_assert_eq(be->copy2d(be, dst, 4, src, SP * 4, W * 4, 2), RV_ERR_INVALID);
    cr_assert(strstr(rv_last_error(), "pitch"), "%s", rv_last_error());
    rv_backend_free(&be);
}

Test(memops, add_elementwise_large)
{
    rv_backend *be = cpu();
    const size_t n = (1u << 17) + 3; /* above the parallel threshold */
    float *y = malloc(sizeof(float) * n), *x = malloc(sizeof(float) * n);
    cr_assert(y && x);
    for (size_t i = 0; i < n; i++)
        y[i] = val(i), x[i] = val(i + 17);
    cr_assert_eq(be->add(be, y, x, n), RV_OK);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(y[i], val(i) + val(i + 17), "element %zu", i);
    free(y), free(x);
    rv_backend_free(&be);
}

Test(memops, colsum_add_in_double)
{
    rv_backend *be = cpu();
    const int rows = 1003, cols = 37;
    float *x = malloc(sizeof(float) * rows * cols), dst[37];
    cr_assert(x);
    for (int i = 0; i < rows * cols; i++)
        x[i] = val((size_t)i) * (i % 3 == 0 ? 1e4f : 1.0f);
    for (int j = 0; j < cols; j++)
        dst[j] = (float)j;
    cr_assert_eq(be->colsum_add(be, x, rows, cols, dst), RV_OK);
    for (int j = 0; j < cols; j++) {
        double s = 0;
        for (int i = 0; i < rows; i++)
            s += x[i * cols + j];
        cr_assert_eq(dst[j], (float)j + (float)s, "column %d: %.9g vs %.9g", j, dst[j],
                     (float)j + (float)s);
    }
    cr_assert_eq(be->colsum_add(be, x, 0, cols, dst), RV_OK); /* no rows: unchanged */
    cr_assert_eq(be->colsum_add(be, x, -1, cols, dst), RV_ERR_INVALID);
    free(x);
    rv_backend_free(&be);
}
