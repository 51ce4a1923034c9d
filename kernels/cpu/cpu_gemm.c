/* cpu_gemm.c: matrix multiply (OpenBLAS cblas_sgemm, row-major) and the bias add
 * that follows every linear layer.
 *
 * Threading: Debian's OpenMP build of OpenBLAS sizes its thread team from
 * omp_get_max_threads() of the calling thread, so the backend's thread count is
 * set around each call and the caller's value restored afterwards. Inside an
 * OpenMP parallel region OpenBLAS runs on the calling thread alone.
 *
 * The process may hold another build: NumPy loads Debian's pthreads OpenBLAS,
 * whose soname (libopenblas.so.0) is the OpenMP build's, so in a Python process
 * that imported NumPy first the loader hands libringvit that one. Its thread
 * count is a global of its own, which ignores OpenMP's: set to the backend's
 * before each call too, so a GEMM splits its work the same way whichever build
 * runs it, and the library's results do not depend on what its host process
 * loaded (the same bytes from Python as from the command). The BLAS calls inside
 * the backend's own parallel regions (the attention tiles) run on their calling
 * thread under either build: cpu_blas_on_this_thread. */
#include <cblas.h>
#include <omp.h>
#include <stddef.h>

#include "cpu_ops.h"

/* Below this many elements an OpenMP team costs more than it saves. */
#define PAR_MIN_ELEMS (32 * 1024)

/* C = beta * C, for k == 0 or alpha == 0. beta == 0 writes zeros without reading C
 * (BLAS convention: C may hold garbage, even NaN, on entry). */
static void scale_c(int m, int n, float beta, float *c, int ldc)
{
    for (int i = 0; i < m; i++) {
        float *row = c + (size_t)i * ldc;
        if (beta == 0.0f) {
            for (int j = 0; j < n; j++)
                row[j] = 0.0f;
        } else if (beta != 1.0f) {
            for (int j = 0; j < n; j++)
                row[j] *= beta;
        }
    }
}

/* 1 when the OpenBLAS in this process is the pthreads build (see above). */
static int pthreads_build(void)
{
    static _Atomic int kind = -1; /* openblas_get_parallel(): 0 serial, 1 pthreads, 2 OpenMP */
    if (kind < 0)
        kind = openblas_get_parallel();
    return kind == 1;
}

void cpu_blas_on_this_thread(void)
{
    omp_set_num_threads(1);
    if (pthreads_build())
        openblas_set_num_threads(1);
}

rv_status cpu_gemm(rv_backend *be, int trans_a, int trans_b, int m, int n, int k,
                   float alpha, const float *a, int lda, const float *b, int ldb,
                   float beta, float *c, int ldc)
{
    rv_status st = rv_args_gemm(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc);
    if (st != RV_OK)
        return st;
    if (m == 0 || n == 0)
        return RV_OK;
    if (k == 0 || alpha == 0.0f) {
        scale_c(m, n, beta, c, ldc);
        return RV_OK;
    }

    int prev_threads = omp_get_max_threads();
    omp_set_num_threads(be->threads);
    if (pthreads_build())
        openblas_set_num_threads(be->threads);
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta,
                c, ldc);
    omp_set_num_threads(prev_threads);
    return RV_OK;
}

rv_status cpu_bias_add(rv_backend *be, float *x, const float *bias, int rows, int cols)
{
    int none = 0;
    rv_status st = rv_args_rows("bias_add", rows, cols, x, "x", bias, "bias", &none);
    if (st != RV_OK || none)
        return st;

    size_t total = (size_t)rows * (size_t)cols;
#pragma omp parallel for num_threads(be->threads) schedule(static) if (total > PAR_MIN_ELEMS)
    for (int i = 0; i < rows; i++) {
        float *row = x + (size_t)i * cols;
        for (int j = 0; j < cols; j++)
            row[j] += bias[j];
    }
    return RV_OK;
}
