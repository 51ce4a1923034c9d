/* cpu_attn_tiles_avx512.c: the attention tile steps as AVX-512 register-blocked
 * kernels (cpu_tile_kernels.h), compiled for AVX-512 whatever the build's -march,
 * and called only where the CPU has it (rv_attn_tiles_select). */
#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC target("avx512f,avx512vl,avx512dq,avx512bw,fma")

#include <math.h>

#include "cpu_attn_tiles.h"
#include "cpu_exp.h"
#include "cpu_tile_kernels.h"

static void avx512_qk(const float *qp, int d, const float *ktp, int ldk, int rows, int cols,
                      float *s, int lds)
{
    rv_qk_tile(qp, d, ktp, ldk, rows, cols, s, lds);
}

/* Online-softmax update of one query row with its scores s[0..n) (n visible
 * keys of this tile; the rest of the row up to bk becomes 0). The row is 64-byte
 * aligned and writable up to bk rounded up to 16. Returns the factor the row's
 * accumulator must be multiplied by before P @ V is added. */
static float avx512_softmax_row(float *s, int n, int bk, float *m, float *l)
{
    const rv_v16 ninf = rv_v16_splat(-INFINITY);
    rv_v16 vmx = ninf;
    for (int j = 0; j < n; j += 16) {
        rv_v16 x = RV_CV16(s + j);
        if (n - j < 16)
            x = rv_v16_select(rv_lanes_below(n - j), x, ninf);
        vmx = rv_v16_max(vmx, x);
    }
    float mx = rv_v16_hmax(vmx);
    float m_new = mx > *m ? mx : *m;
    if (m_new == -INFINITY) { /* nothing seen yet in this row */
        for (int j = 0; j < bk; j += 16)
            RV_V16(s + j) = (rv_v16){0};
        return 1.0f;
    }
    const rv_v16 vm = rv_v16_splat(m_new);
    rv_v16 vsum = {0};
    int j = 0;
    for (; j < n; j += 16) {
        rv_v16 t = RV_CV16(s + j) - vm;
        if (n - j < 16)
            t = rv_v16_select(rv_lanes_below(n - j), t, ninf);
        rv_v16 p = rv_exp2_v16(t);
        RV_V16(s + j) = p;
        vsum += p;
    }
    for (; j < bk; j += 16)
        RV_V16(s + j) = (rv_v16){0};
    float corr = rv_exp2_nonpos(*m - m_new);
    *l = *l * corr + rv_v16_hsum(vsum);
    *m = m_new;
    return corr;
}

static void avx512_pv(const float *s, int lds, const float *vp, int ldv, int bk, int rows,
                      float *acc)
{
    rv_pv_tile(s, lds, vp, ldv, bk, rows, acc);
}

const rv_attn_tile_ops rv_attn_tiles_avx512 = {
    /* .name        = */ "avx512",
    /* .qk          = */ avx512_qk,
    /* .softmax_row = */ avx512_softmax_row,
    /* .pv          = */ avx512_pv,
};
#endif
