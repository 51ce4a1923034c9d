/* cpu_attn_tiles_blas.c: the attention tile steps on oneDNN's sgemm (on the calling
 * thread: they run inside the driver's parallel region) and plain C, for CPUs
 * without AVX2 (and as a cross-check of the register-blocked kernels). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_attn_tiles.h"
#include "cpu_dnnl.h"
#include "cpu_exp.h"

static void blas_qk(const float *qp, int d, const float *ktp, int ldk, int rows, int cols,
                    float *s, int lds, float *ws)
{
    (void)ws;
    cpu_sgemm_serial(0, 0, rows, cols, d, 1.0f, qp, d, ktp, ldk, 0.0f, s, lds);
}

static float blas_softmax_row(float *s, int n, int bk, float *m, float *l)
{
    float mx = -INFINITY;
    for (int j = 0; j < n; j++)
        mx = s[j] > mx ? s[j] : mx;
    float m_new = mx > *m ? mx : *m;
    if (m_new == -INFINITY) { /* nothing seen yet in this row */
        memset(s, 0, sizeof(float) * (size_t)bk);
        return 1.0f;
    }
    float sum = 0.0f;
    for (int j = 0; j < n; j++) {
        float p = rv_exp2_nonpos(s[j] - m_new);
        s[j] = p;
        sum += p;
    }
    for (int j = n; j < bk; j++)
        s[j] = 0.0f;
    float corr = rv_exp2_nonpos(*m - m_new);
    *l = *l * corr + sum;
    *m = m_new;
    return corr;
}

static void blas_pv(const float *s, int lds, const float *vp, int ldv, int bk, int rows,
                    float *acc, float *ws)
{
    (void)ws;
    cpu_sgemm_serial(0, 0, rows, ldv, bk, 1.0f, s, lds, vp, ldv, 1.0f, acc, ldv);
}

const rv_attn_tile_ops rv_attn_tiles_blas = {
    .name = "blas",
    .ws_floats = NULL,
    .qk = blas_qk,
    .softmax_row = blas_softmax_row,
    .pv = blas_pv,
    .bwd = NULL, /* cpu_attention_bwd.c */
};
