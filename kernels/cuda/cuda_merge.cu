/* cuda_merge.cu: merges two partial attention results over disjoint key sets by
 * their log-sum-exps, as kernels/cpu/cpu_attention_merge.c does:
 *
 *   lse = log(e^lse1 + e^lse2),  o = (e^lse1 o1 + e^lse2 o2) / (e^lse1 + e^lse2)
 *
 * computed relative to the larger lse, so nothing overflows, and a side with
 * lse = -inf (it saw no key) contributes exactly nothing: lse2 = -inf leaves
 * (o, lse) untouched, lse1 = -inf copies (o2, lse2); both -inf keeps o (0 by
 * contract) and lse = -inf.
 *
 * One warp per (query row, head) pair, lanes over the dim channels. o, o2:
 * (sq, heads, dim); lse, lse2: (heads, sq). */
#include "cuda_internal.h"

#define WARPS 4 /* warps (rows) per block */

/* Row r = i * heads + h (query i, head h) sits at o + r * dim and its lse at
 * lse[h * sq + i]. Every lane reads lse before lane 0 writes it back, ordered by
 * __syncwarp. Grid-stride over rows (sq * heads may exceed 2^31). */
__global__ static void attn_merge_kernel(float *o, float *lse, const float *o2,
                                         const float *lse2, int sq, int heads, int dim)
{
    int lane = threadIdx.x & 31;
    long long rows = (long long)sq * heads;
    long long stride = (long long)gridDim.x * WARPS;
    for (long long r = (long long)blockIdx.x * WARPS + (threadIdx.x >> 5); r < rows;
         r += stride) {
        long long i = r / heads, h = r % heads;
        size_t lidx = (size_t)(h * sq + i);
        float *orow = o + (size_t)r * (size_t)dim;
        const float *o2row = o2 + (size_t)r * (size_t)dim;
        float l1 = lse[lidx], l2 = lse2[lidx];
        __syncwarp(); /* all lanes hold l1 before lane 0 may overwrite it */

        if (l2 == -INFINITY)
            continue; /* the other side saw no key: (o, lse) is already the union */
        if (l1 == -INFINITY) {
            for (int c = lane; c < dim; c += 32)
                orow[c] = o2row[c];
            if (lane == 0)
                lse[lidx] = l2;
            continue;
        }
        float mx = l1 > l2 ? l1 : l2;
        float w1 = expf(l1 - mx), w2 = expf(l2 - mx);
        float sum = w1 + w2; /* in [1, 2]: the larger side contributes exp(0) */
        float a1 = w1 / sum, a2 = w2 / sum;
        for (int c = lane; c < dim; c += 32)
            orow[c] = a1 * orow[c] + a2 * o2row[c];
        if (lane == 0)
            lse[lidx] = mx + logf(sum);
    }
}

rv_status cuda_attn_merge(rv_backend *be, float *o, float *lse, const float *o2,
                          const float *lse2, int sq, int heads, int dim)
{
    int none = 0;
    rv_status st = rv_args_attn_merge(o, lse, o2, lse2, sq, heads, dim, &none);
    if (st != RV_OK || none)
        return st;
    size_t rows = (size_t)sq * (size_t)heads;
    attn_merge_kernel<<<cuda_blocks(rows, WARPS), WARPS * 32, 0, cuda_ctx_of(be)->stream>>>(
        o, lse, o2, lse2, sq, heads, dim);
    return cuda_check_launch("attn_merge");
}
