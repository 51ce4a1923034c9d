/* backend_args.c: the argument checks shared by every backend (backend_args.h). */
#include <math.h>

#include "backend_args.h"

static int imax1(int a)
{
    return a > 1 ? a : 1;
}

rv_status rv_args_gemm(int trans_a, int trans_b, int m, int n, int k, const float *a, int lda,
                       const float *b, int ldb, const float *c, int ldc)
{
    if (m < 0 || n < 0 || k < 0)
        return rv_fail(RV_ERR_INVALID, "gemm: negative size m=%d n=%d k=%d", m, n, k);
    int a_cols = trans_a ? m : k; /* A is stored (m, k), or (k, m) when transposed */
    int b_cols = trans_b ? k : n; /* B is stored (k, n), or (n, k) when transposed */
    if (lda < imax1(a_cols))
        return rv_fail(RV_ERR_INVALID, "gemm: lda=%d < %d", lda, imax1(a_cols));
    if (ldb < imax1(b_cols))
        return rv_fail(RV_ERR_INVALID, "gemm: ldb=%d < %d", ldb, imax1(b_cols));
    if (ldc < imax1(n))
        return rv_fail(RV_ERR_INVALID, "gemm: ldc=%d < %d", ldc, imax1(n));
    /* An operand must exist only when it is read: nothing is when C is empty, and
     * A and B are not when k == 0. */
    if (m == 0 || n == 0)
        return RV_OK;
    if (!c)
        return rv_fail(RV_ERR_INVALID, "gemm: c is NULL for a (%d, %d) result", m, n);
    if (k > 0 && (!a || !b))
        return rv_fail(RV_ERR_INVALID, "gemm: %s is NULL (m=%d n=%d k=%d)", !a ? "a" : "b",
                       m, n, k);
    return RV_OK;
}

rv_status rv_args_rows(const char *op, int rows, int cols, const void *x, const char *x_name,
                       const void *y, const char *y_name, int *none)
{
    *none = 0;
    if (rows < 0 || cols < 0)
        return rv_fail(RV_ERR_INVALID, "%s: negative size rows=%d cols=%d", op, rows, cols);
    if (rows == 0 || cols == 0) {
        *none = 1;
        return RV_OK;
    }
    if (!x || !y)
        return rv_fail(RV_ERR_INVALID, "%s: %s is NULL", op, !x ? x_name : y_name);
    return RV_OK;
}

/* LayerNorm shapes: rows of at least one column (an empty row has no mean). */
static rv_status norm_sizes(const char *op, int rows, int cols, int *none)
{
    *none = 0;
    if (rows < 0 || cols < 0)
        return rv_fail(RV_ERR_INVALID, "%s: negative size rows=%d cols=%d", op, rows, cols);
    if (rows > 0 && cols == 0)
        return rv_fail(RV_ERR_INVALID, "%s: cols=0 with rows=%d (empty rows have no mean)",
                       op, rows);
    *none = rows == 0;
    return RV_OK;
}

rv_status rv_args_layernorm_fwd(const float *x, const float *w, const float *b, int rows,
                                int cols, float eps, const float *y, const float *mean,
                                const float *rstd, int *none)
{
    rv_status st = norm_sizes("layernorm_fwd", rows, cols, none);
    if (st != RV_OK)
        return st;
    if (!(eps >= 0.0f) || isinf(eps))
        return rv_fail(RV_ERR_INVALID, "layernorm_fwd: eps=%g must be finite and >= 0",
                       (double)eps);
    if (*none)
        return RV_OK;
    if (!x || !w || !b || !y || !mean || !rstd)
        return rv_fail(RV_ERR_INVALID, "layernorm_fwd: %s is NULL",
                       !x ? "x" : !w ? "w" : !b ? "b" : !y ? "y" : !mean ? "mean" : "rstd");
    return RV_OK;
}

rv_status rv_args_layernorm_bwd(const float *dy, const float *x, const float *w,
                                const float *mean, const float *rstd, int rows, int cols,
                                const float *dx, const float *dw, const float *db, int *none)
{
    rv_status st = norm_sizes("layernorm_bwd", rows, cols, none);
    if (st != RV_OK || *none)
        return st;
    if (!dy || !x || !w || !mean || !rstd || !dx || !dw || !db)
        return rv_fail(RV_ERR_INVALID, "layernorm_bwd: %s is NULL",
                       !dy ? "dy" : !x ? "x" : !w ? "w" : !mean ? "mean"
                       : !rstd ? "rstd" : !dx ? "dx" : !dw ? "dw" : "db");
    return RV_OK;
}

const char *rv_act_name(rv_act act)
{
    switch (act) {
    case RV_ACT_GELU:
        return "gelu";
    case RV_ACT_GELU_TANH:
        return "gelu_tanh";
    case RV_ACT_QUICK_GELU:
        return "quick_gelu";
    }
    return NULL; /* a value outside the enum, e.g. from a cast or a corrupt config */
}

static rv_status act_known(const char *op, rv_act act)
{
    if (!rv_act_name(act))
        return rv_fail(RV_ERR_INVALID,
                       "%s: unknown activation %d (known: %d gelu, %d gelu_tanh, %d quick_gelu)",
                       op, (int)act, (int)RV_ACT_GELU, (int)RV_ACT_GELU_TANH,
                       (int)RV_ACT_QUICK_GELU);
    return RV_OK;
}

rv_status rv_args_act_fwd(rv_act act, const float *x, const float *y, size_t n)
{
    rv_status st = act_known("act_fwd", act);
    if (st != RV_OK)
        return st;
    if (n > 0 && (!x || !y))
        return rv_fail(RV_ERR_INVALID, "act_fwd (%s): %s is NULL with n=%zu", rv_act_name(act),
                       !x ? "x" : "y", n);
    return RV_OK;
}

rv_status rv_args_act_bwd(rv_act act, const float *x, const float *dy, const float *dx,
                          size_t n)
{
    rv_status st = act_known("act_bwd", act);
    if (st != RV_OK)
        return st;
    if (n > 0 && (!x || !dy || !dx))
        return rv_fail(RV_ERR_INVALID, "act_bwd (%s): %s is NULL with n=%zu", rv_act_name(act),
                       !x ? "x" : !dy ? "dy" : "dx", n);
    return RV_OK;
}

rv_status rv_args_scale_add(const float *y, const float *x, const float *gamma, int rows,
                            int cols, int *none)
{
    rv_status st = rv_args_rows("scale_add", rows, cols, y, "y", x, "x", none);
    if (st != RV_OK || *none)
        return st;
    if (!gamma)
        return rv_fail(RV_ERR_INVALID, "scale_add: gamma is NULL");
    return RV_OK;
}

rv_status rv_args_scale_cols(const float *x, const float *gamma, int rows, int cols,
                             int *none)
{
    return rv_args_rows("scale_cols", rows, cols, x, "x", gamma, "gamma", none);
}

rv_status rv_args_colsum_mul_add(const float *a, const float *b, int rows, int cols,
                                 const float *dst, int *none)
{
    rv_status st = rv_args_rows("colsum_mul_add", rows, cols, a, "a", b, "b", none);
    if (st != RV_OK || *none)
        return st;
    if (!dst)
        return rv_fail(RV_ERR_INVALID, "colsum_mul_add: dst is NULL");
    return RV_OK;
}

rv_status rv_attn_check_dims(int sq, int sk, int heads, int dim, const char *op)
{
    if (sq < 0 || sk < 0 || heads <= 0 || dim <= 0)
        return rv_fail(RV_ERR_INVALID,
                       "%s: bad shape sq=%d sk=%d heads=%d dim=%d", op, sq, sk, heads, dim);
    if ((long long)heads * dim > (1 << 20))
        return rv_fail(RV_ERR_INVALID, "%s: heads*dim=%lld is too large", op,
                       (long long)heads * dim);
    return RV_OK;
}

rv_status rv_args_attn_mask(const rv_attn_mask *m, int sq, int sk, const char *op)
{
    switch (m->kind) {
    case RV_MASK_NONE:
    case RV_MASK_CAUSAL:
        return RV_OK;
    case RV_MASK_SPAN:
        break;
    default:
        return rv_fail(RV_ERR_INVALID,
                       "%s: unknown mask kind %d (known: %d none, %d causal, %d span)", op,
                       (int)m->kind, (int)RV_MASK_NONE, (int)RV_MASK_CAUSAL, (int)RV_MASK_SPAN);
    }
    if (!(m->reach >= 0.0) || isinf(m->reach))
        return rv_fail(RV_ERR_INVALID, "%s: span mask reach=%g must be finite and >= 0", op,
                       m->reach);
    if (sq > 0 && (!m->q_key || (m->causal && !m->q_time)))
        return rv_fail(RV_ERR_INVALID, "%s: span mask %s is NULL with sq=%d", op,
                       !m->q_key ? "q_key" : "q_time (causal)", sq);
    if (sk > 0 && (!m->k_key || (m->causal && !m->k_time)))
        return rv_fail(RV_ERR_INVALID, "%s: span mask %s is NULL with sk=%d", op,
                       !m->k_key ? "k_key" : "k_time (causal)", sk);
    return RV_OK;
}

rv_status rv_args_attn_fwd(const rv_attn_fwd_args *a, int *none)
{
    *none = 0;
    rv_status st = rv_attn_check_dims(a->sq, a->sk, a->heads, a->dim, "attn_fwd");
    if (st == RV_OK)
        st = rv_args_attn_mask(&a->mask, a->sq, a->sk, "attn_fwd");
    if (st != RV_OK)
        return st;
    if (a->sq == 0) {
        *none = 1;
        return RV_OK;
    }
    if (!a->q || !a->o || !a->lse || (a->sk > 0 && (!a->k || !a->v)))
        return rv_fail(RV_ERR_INVALID, "attn_fwd: NULL tensor");
    return RV_OK;
}

rv_status rv_args_attn_merge(const float *o, const float *lse, const float *o2,
                             const float *lse2, int sq, int heads, int dim, int *none)
{
    *none = 0;
    rv_status st = rv_attn_check_dims(sq, 0, heads, dim, "attn_merge");
    if (st != RV_OK)
        return st;
    if (sq == 0) {
        *none = 1;
        return RV_OK;
    }
    if (!o || !lse || !o2 || !lse2)
        return rv_fail(RV_ERR_INVALID, "attn_merge: NULL tensor");
    return RV_OK;
}
