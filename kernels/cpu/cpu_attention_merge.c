/* cpu_attention_merge.c: merges two partial attention results over disjoint key
 * sets by their log-sum-exps: lse = log(e^lse1 + e^lse2), o = the lse-weighted mean
 * of o1 and o2. Computed relative to the larger lse, so nothing overflows, and a
 * side with lse = -inf (it saw no key) contributes exactly nothing. */
#include <math.h>
#include <omp.h>

#include "cpu_ops.h"

static void merge_row(float *o, float *lse, const float *o2, float lse2, int d)
{
    float l1 = *lse;
    if (lse2 == -INFINITY)
        return; /* the other side saw no key: (o, lse) is already the union */
    if (l1 == -INFINITY) {
        for (int c = 0; c < d; c++)
            o[c] = o2[c];
        *lse = lse2;
        return;
    }
    float mx = l1 > lse2 ? l1 : lse2;
    float w1 = expf(l1 - mx), w2 = expf(lse2 - mx);
    float sum = w1 + w2;
    float a1 = w1 / sum, a2 = w2 / sum;
    for (int c = 0; c < d; c++)
        o[c] = a1 * o[c] + a2 * o2[c];
    *lse = mx + logf(sum);
}

rv_status cpu_attn_merge(rv_backend *be, float *o, float *lse, const float *o2,
                         const float *lse2, int sq, int heads, int dim)
{
    int none = 0;
    rv_status st = rv_args_attn_merge(o, lse, o2, lse2, sq, heads, dim, &none);
    if (st != RV_OK || none)
        return st;
    const long rows = (long)sq * heads;
    const int nt = rows * dim > 65536 ? be->threads : 1;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (long r = 0; r < rows; r++) {
        long i = r / heads, h = r % heads;
        size_t off = (size_t)r * dim; /* row i, head h of (sq, heads, dim) */
        merge_row(o + off, lse + h * (long)sq + i, o2 + off, lse2[h * (long)sq + i], dim);
    }
    return RV_OK;
}
