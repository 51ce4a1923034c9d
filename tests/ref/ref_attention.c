/* ref_attention.c: naive double-precision attention forward and backward: one
 * query row at a time, the whole score row materialised, softmax by max-shift. */
#include "ref_attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_ops.h"

/* Whether query row i sees key row j (chunk-local), as rv_backend.h words it. */
static int ref_visible(rv_attn_mask m, int i, int j)
{
    if (m.kind == RV_MASK_CAUSAL)
        return m.k_start + j <= m.q_start + i;
    if (m.kind != RV_MASK_SPAN)
        return 1;
    /* Span: keys within reach of each other ... */
    if (!(fabs(m.q_key[i] - m.k_key[j]) <= m.reach))
        return 0;
    if (!m.causal)
        return 1;
    /* ... and, causal, a key that starts earlier, or at the same time and is not
     * later in the sequence. */
    if (m.k_time[j] < m.q_time[i])
        return 1;
    return m.k_time[j] == m.q_time[i] && m.k_start + j <= m.q_start + i;
}

/* Probabilities of query row i, head h into p (sk); returns the row's lse. */
static double ref_probs(const double *q, const double *k, int sk, int heads, int dim,
                        double scale, rv_attn_mask mask, int i, int h, double *p)
{
    double mx = -INFINITY;
    for (int j = 0; j < sk; j++) {
        if (!ref_visible(mask, i, j)) {
            p[j] = -INFINITY;
            continue;
        }
        double s = 0;
        for (int c = 0; c < dim; c++)
            s += q[((size_t)i * heads + h) * dim + c] * k[((size_t)j * heads + h) * dim + c];
        p[j] = s * scale;
        if (p[j] > mx)
            mx = p[j];
    }
    if (mx == -INFINITY) {
        for (int j = 0; j < sk; j++)
            p[j] = 0;
        return -INFINITY;
    }
    double sum = 0;
    for (int j = 0; j < sk; j++) {
        p[j] = p[j] == -INFINITY ? 0 : exp(p[j] - mx);
        sum += p[j];
    }
    for (int j = 0; j < sk; j++)
        p[j] /= sum;
    return mx + log(sum);
}

void ref_attn_fwd(const double *q, const double *k, const double *v, int sq, int sk,
                  int heads, int dim, double scale, rv_attn_mask mask, double *o,
                  double *lse)
{
    if (scale == 0)
        scale = 1.0 / sqrt((double)dim);
    double *p = malloc(sizeof(double) * (sk > 0 ? sk : 1));
    for (int h = 0; h < heads; h++)
        for (int i = 0; i < sq; i++) {
            lse[(size_t)h * sq + i] = ref_probs(q, k, sk, heads, dim, scale, mask, i, h, p);
            double *orow = o + ((size_t)i * heads + h) * dim;
            for (int c = 0; c < dim; c++) {
                double acc = 0;
                for (int j = 0; j < sk; j++)
                    acc += p[j] * v[((size_t)j * heads + h) * dim + c];
                orow[c] = acc;
            }
        }
    free(p);
}

void ref_attn_bwd(const double *q, const double *k, const double *v, const double *dout,
                  int sq, int sk, int heads, int dim, double scale, rv_attn_mask mask,
                  double *dq, double *dk, double *dv)
{
    if (scale == 0)
        scale = 1.0 / sqrt((double)dim);
    memset(dq, 0, sizeof(double) * (size_t)sq * heads * dim);
    memset(dk, 0, sizeof(double) * (size_t)sk * heads * dim);
    memset(dv, 0, sizeof(double) * (size_t)sk * heads * dim);
    double *p = malloc(sizeof(double) * (sk > 0 ? sk : 1));
    double *dp = malloc(sizeof(double) * (sk > 0 ? sk : 1));
    for (int h = 0; h < heads; h++)
        for (int i = 0; i < sq; i++) {
            ref_probs(q, k, sk, heads, dim, scale, mask, i, h, p);
            const double *g = dout + ((size_t)i * heads + h) * dim;
            /* dP_j = dout . v_j; dS_j = P_j (dP_j - sum_l P_l dP_l) */
            double dot = 0;
            for (int j = 0; j < sk; j++) {
                double s = 0;
                for (int c = 0; c < dim; c++)
                    s += g[c] * v[((size_t)j * heads + h) * dim + c];
                dp[j] = s;
                dot += p[j] * s;
            }
            for (int j = 0; j < sk; j++) {
                double ds = p[j] * (dp[j] - dot) * scale;
                for (int c = 0; c < dim; c++) {
                    size_t qi = ((size_t)i * heads + h) * dim + c;
                    size_t kj = ((size_t)j * heads + h) * dim + c;
                    dq[qi] += ds * k[kj];
                    dk[kj] += ds * q[qi];
                    dv[kj] += p[j] * g[c];
                }
            }
        }
    free(p);
    free(dp);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double *ref_span_times(uint64_t seed, int n, double rate)
{
    ref_rng r = ref_rng_make(seed);
    double *t = ref_alloc_d((size_t)n);
    const int per = (int)(2.0 * rate), nv = per * 2 / 3, na = per - nv;
    double *a = ref_alloc_d((size_t)na);
    for (int w = 0, i = 0; i < n; w++) {
        for (int v = 0; v < nv && i < n; v++)
            t[i++] = 2.0 * w + 0.5 * (4 * v / nv);
        for (int x = 0; x < na; x++)
            a[x] = 2.0 * w + 2.0 * ref_rng_uniform(&r);
        qsort(a, (size_t)na, sizeof(double), cmp_double);
        for (int x = 0; x < na && i < n; x++)
            t[i++] = a[x];
    }
    free(a);
    return t;
}
