/* cpu_gemm.c: the CPU backend's matrix multiply on oneDNN (cpu_dnnl.c) and the
 * bias add that follows every linear layer.
 *
 * f32: a matmul primitive (cached per shape) for every product, small ones too:
 * with oneDNN's sgemm below a size, a product split over more ranks (fewer rows
 * each) crossed over to other kernels and rounded differently, enough that data-
 * and context-parallel finetuning left the one-rank result's tolerance (cli_finetune
 * dp2-cp2-equals-one-rank); on one kernel family the splits round alike. oneDNN's
 * sgemm serves the attention's BLAS paths inside parallel regions
 * (cpu_sgemm_serial). bf16 (the backend's precision, cpu_ops.h):
 * A and B rounded to bf16 into one scratch buffer, then a bf16 matmul primitive
 * with f32 accumulation into C, whatever the size, so every product of a bf16
 * backend rounds the same way.
 *
 * Threading: oneDNN sizes its team from omp_get_max_threads() of the calling
 * thread, so the backend's thread count is set around each call and the caller's
 * restored afterwards. Results depend on the thread count (how a product is split)
 * and on nothing else: the same bytes run to run, and whatever else the host
 * process has loaded (NumPy's BLAS is not oneDNN). */
#include <omp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "cpu_bf16.h"
#include "cpu_dnnl.h"
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

/* The bf16 product: op(A) and op(B) rounded as stored (their transposes kept),
 * into compact copies. */
static rv_status gemm_bf16(cpu_gemm_call *g)
{
    const int a_rows = g->trans_a ? g->k : g->m, a_cols = g->trans_a ? g->m : g->k;
    const int b_rows = g->trans_b ? g->n : g->k, b_cols = g->trans_b ? g->k : g->n;
    const size_t na = (size_t)a_rows * a_cols, nb = (size_t)b_rows * b_cols;
    const size_t a_bytes = (na * sizeof(uint16_t) + 63) / 64 * 64;
    uint8_t *buf = aligned_alloc(64, a_bytes + (nb * sizeof(uint16_t) + 63) / 64 * 64);
    if (!buf)
        return rv_fail(RV_ERR_NOMEM, "gemm: cannot allocate %zu bf16 operand elements",
                       na + nb);
    uint16_t *ab = (uint16_t *)buf, *bb = (uint16_t *)(buf + a_bytes);
    cpu_bf16_round(g->a, a_rows, a_cols, g->lda, ab, a_cols, g->threads);
    cpu_bf16_round(g->b, b_rows, b_cols, g->ldb, bb, b_cols, g->threads);
    g->type = CPU_GEMM_BF16;
    g->a = ab, g->lda = a_cols;
    g->b = bb, g->ldb = b_cols;
    rv_status st = cpu_dnnl_matmul(g);
    free(buf);
    return st;
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

    cpu_gemm_call g = {.type = CPU_GEMM_F32, .trans_a = trans_a != 0, .trans_b = trans_b != 0,
                       .m = m, .n = n, .k = k, .alpha = alpha, .beta = beta,
                       .a = a, .lda = lda, .b = b, .ldb = ldb, .c = c, .ldc = ldc,
                       .threads = be->threads};
    int prev_threads = omp_get_max_threads();
    omp_set_num_threads(be->threads);
    if (cpu_is_bf16(be))
        st = gemm_bf16(&g);
    else
        st = cpu_dnnl_matmul(&g);
    omp_set_num_threads(prev_threads);
    return st;
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
