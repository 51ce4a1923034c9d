/* cuda_attn_span.cu: the tile boxes of span masks (RV_MASK_SPAN) on the device,
 * for the attention kernels' tile skipping (attn_span.h, cuda_attn.h). Two
 * launches on the backend's stream:
 *   span_boxes_kernel: one warp per tile, the box of its rows (min, max of keys
 *                      and times, NaN left out; clean = no NaN), reduced by shuffles;
 *   span_scan_kernel:  one block: the prefix maxima of the tile maxima and the
 *                      suffix minima of the tile minima, each thread a contiguous
 *                      run of tiles, the runs joined by a scan in shared memory.
 * Everything lives in one scratch block the caller frees. */
#include <math.h>

#include "cuda_attn.h"

#define SPAN_WARPS 8
#define SCAN_THREADS 1024

__device__ static double span_warp_min(double x)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        double y = __shfl_xor_sync(0xffffffffu, x, o);
        x = y < x ? y : x;
    }
    return x;
}

__device__ static double span_warp_max(double x)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        double y = __shfl_xor_sync(0xffffffffu, x, o);
        x = y > x ? y : x;
    }
    return x;
}

/* Tile u holds rows [u * size, min((u + 1) * size, rows)). */
__global__ static void span_boxes_kernel(const double *key, const double *time, int rows,
                                         int size, int n, span_box *box)
{
    const int lane = threadIdx.x & 31;
    const int stride = gridDim.x * SPAN_WARPS;
    for (int u = blockIdx.x * SPAN_WARPS + (threadIdx.x >> 5); u < n; u += stride) {
        span_box b = span_box_empty();
        const int end = min((u + 1) * size, rows);
        for (int r = u * size + lane; r < end; r += 32)
            span_box_add(&b, key[r], time ? time[r] : 0.0);
        b.lo = span_warp_min(b.lo);
        b.hi = span_warp_max(b.hi);
        b.tlo = span_warp_min(b.tlo);
        b.thi = span_warp_max(b.thi);
        b.clean = __all_sync(0xffffffffu, b.clean);
        if (lane == 0)
            box[u] = b;
    }
}

__global__ static void __launch_bounds__(SCAN_THREADS) span_scan_kernel(const span_box *box,
                                                                       int n, double *pre_hi,
                                                                       double *suf_lo)
{
    __shared__ double smax[SCAN_THREADS], smin[SCAN_THREADS];
    const int t = threadIdx.x;
    const int chunk = (n + SCAN_THREADS - 1) / SCAN_THREADS;
    const int u0 = min(t * chunk, n), u1 = min(u0 + chunk, n);
    double hi = -INFINITY, lo = INFINITY;
    for (int u = u0; u < u1; u++) {
        hi = box[u].hi > hi ? box[u].hi : hi;
        lo = box[u].lo < lo ? box[u].lo : lo;
    }
    smax[t] = hi;
    smin[t] = lo;
    __syncthreads();
    /* Inclusive prefix max and suffix min over the threads' runs (Hillis-Steele). */
    for (int o = 1; o < SCAN_THREADS; o <<= 1) {
        double a = t >= o ? smax[t - o] : -INFINITY;
        double b = t + o < SCAN_THREADS ? smin[t + o] : INFINITY;
        __syncthreads();
        smax[t] = a > smax[t] ? a : smax[t];
        smin[t] = b < smin[t] ? b : smin[t];
        __syncthreads();
    }
    double run = t > 0 ? smax[t - 1] : -INFINITY; /* max over the runs before this one */
    for (int u = u0; u < u1; u++) {
        run = box[u].hi > run ? box[u].hi : run;
        pre_hi[u] = run;
    }
    run = t + 1 < SCAN_THREADS ? smin[t + 1] : INFINITY; /* min over the runs after it */
    for (int u = u1 - 1; u >= u0; u--) {
        run = box[u].lo < run ? box[u].lo : run;
        suf_lo[u] = run;
    }
}

rv_status cuda_span_tiles_make(rv_backend *be, const double *key, const double *time, int rows,
                               int size, void **mem, cuda_span_tiles *t)
{
    cudaStream_t stream = cuda_ctx_of(be)->stream;
    const int n = (rows + size - 1) / size;
    *mem = NULL;
    t->n = n;
    t->size = size;
    t->box = NULL;
    t->pre_hi = t->suf_lo = NULL;
    if (n <= 0)
        return RV_OK;
    /* Boxes first: 40 bytes each, so the double arrays after them stay 8-byte aligned. */
    const size_t bytes = (size_t)n * (sizeof(span_box) + 2 * sizeof(double));
    rv_status st = cuda_scratch(be, bytes, mem);
    if (st != RV_OK)
        return st;
    span_box *box = (span_box *)*mem;
    double *pre_hi = (double *)(box + n), *suf_lo = pre_hi + n;
    span_boxes_kernel<<<cuda_blocks((size_t)n, SPAN_WARPS), SPAN_WARPS * 32, 0, stream>>>(
        key, time, rows, size, n, box);
    if ((st = cuda_check_launch("attention span mask: tile boxes")) != RV_OK)
        return st;
    span_scan_kernel<<<1, SCAN_THREADS, 0, stream>>>(box, n, pre_hi, suf_lo);
    if ((st = cuda_check_launch("attention span mask: tile scan")) != RV_OK)
        return st;
    t->box = box;
    t->pre_hi = pre_hi;
    t->suf_lo = suf_lo;
    return RV_OK;
}
