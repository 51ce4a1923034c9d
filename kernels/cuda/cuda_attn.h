/* cuda_attn.h: what the CUDA attention files share (cuda_attn_fwd.cu,
 * cuda_attn_bwd.cu, cuda_attn_simple.cu): the mask arithmetic, the choice between
 * the tensor-core kernels and the plain f32 reference, and thin wrappers over the
 * PTX instructions the tensor-core kernels use. Internal to kernels/cuda/.
 *
 * Mask arithmetic. Query row i (chunk-local) sits at global position q_start + i,
 * key j at k_start + j; under a causal mask j is seen iff k_start + j <= q_start + i,
 * i.e. j <= i + off with off = q_start - k_start. The keys a row sees are therefore
 * a prefix of the chunk, and the queries that see a key a suffix.
 *
 * Fragment layouts of mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, for
 * lane l of the warp, g = l / 4 (group) and t = l % 4 (thread in group); each .b32
 * register of A and B packs two bf16, the lower column/row index in the low half:
 *   A (16 x 16, row-major, 4 regs): a0 = (row g,   cols 2t, 2t+1)
 *                                   a1 = (row g+8, cols 2t, 2t+1)
 *                                   a2 = (row g,   cols 2t+8, 2t+9)
 *                                   a3 = (row g+8, cols 2t+8, 2t+9)
 *   B (16 x 8, "col", 2 regs):      b0 = (rows 2t, 2t+1,   col g)
 *                                   b1 = (rows 2t+8, 2t+9, col g)
 *   C, D (16 x 8 f32, 4 regs):      c0, c1 = (row g,   cols 2t, 2t+1)
 *                                   c2, c3 = (row g+8, cols 2t, 2t+1)
 * Hence two C tiles side by side (16 x 16) are, converted to bf16 pairs, exactly an
 * A fragment: a0 = (c0, c1) and a1 = (c2, c3) of the left tile, a2, a3 the same of
 * the right one. The kernels use this to feed P (and dS) from registers into the
 * next product without going through shared memory.
 *
 * ldmatrix.m8n8.x4: lanes 8m..8m+7 give the addresses of the 8 rows (16 bytes each)
 * of matrix m; register m of lane l receives, from matrix m,
 *   plain:  (row l/4, cols 2(l%4), 2(l%4)+1)
 *   .trans: (rows 2(l%4), 2(l%4)+1, col l/4)
 * so a plain load of a row-major tile yields A fragments (and B fragments of a
 * matrix stored as B^T), and a .trans load yields B fragments of a row-major
 * (k, n) tile. */
#ifndef RV_CUDA_ATTN_H
#define RV_CUDA_ATTN_H

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../attn_span.h"
#include "cuda_internal.h"

typedef __nv_bfloat16 bf16;

/* ---- span masks (RV_MASK_SPAN) --------------------------------------------------
 * The kernels skip (query tile, key tile) pairs whose boxes cannot meet and mask
 * pair by pair where they partly meet, with the CPU kernels' rules (attn_span.h).
 * A tiling's boxes live on the device, built by cuda_span_tiles_make. */
typedef struct cuda_span_tiles {
    const span_box *box;  /* (n) */
    const double *pre_hi; /* (n) prefix maxima of box[].hi */
    const double *suf_lo; /* (n) suffix minima of box[].lo */
    int n, size;          /* tiles of size rows */
} cuda_span_tiles;

/* The span mask's arrays and tilings as the kernels take them (zero when the
 * mask is no span). */
typedef struct cuda_span {
    const double *q_key, *k_key, *q_time, *k_time; /* times only with causal */
    double reach;
    int on, causal;
    cuda_span_tiles qt, kt; /* query and key tilings of the kernel's tile sizes */
} cuda_span;

/* The boxes of the tiles of `size` rows of key (and time, NULL unless causal),
 * enqueued on the backend's stream in one scratch block (*mem, which the caller
 * frees with cuda_scratch_free, also after an error). */
rv_status cuda_span_tiles_make(rv_backend *be, const double *key, const double *time, int rows,
                               int size, void **mem, cuda_span_tiles *t);

/* The span part of a kernel's parameters for mask m: the arrays, and query tiles
 * of qsize rows and key tiles of ksize rows in *qmem, *kmem (freed by the caller). */
static inline rv_status cuda_span_make(rv_backend *be, const rv_attn_mask *m, int sq, int sk,
                                       int qsize, int ksize, void **qmem, void **kmem,
                                       cuda_span *sp)
{
    memset(sp, 0, sizeof *sp);
    *qmem = *kmem = NULL;
    if (m->kind != RV_MASK_SPAN)
        return RV_OK;
    sp->on = 1;
    sp->causal = m->causal != 0;
    sp->reach = m->reach;
    sp->q_key = m->q_key;
    sp->k_key = m->k_key;
    sp->q_time = sp->causal ? m->q_time : NULL;
    sp->k_time = sp->causal ? m->k_time : NULL;
    rv_status st = cuda_span_tiles_make(be, m->q_key, sp->q_time, sq, qsize, qmem, &sp->qt);
    if (st == RV_OK)
        st = cuda_span_tiles_make(be, m->k_key, sp->k_time, sk, ksize, kmem, &sp->kt);
    return st;
}

/* Whether query i sees key j (chunk-local; off = q_start - k_start). */
__device__ static __forceinline__ int cuda_span_pair(const cuda_span &sp, int64_t off, int i,
                                                     int j)
{
    return span_sees(sp.q_key[i], sp.causal ? sp.q_time[i] : 0.0, (int64_t)i + off,
                     sp.k_key[j], sp.causal ? sp.k_time[j] : 0.0, (int64_t)j, sp.reach,
                     sp.causal);
}

/* The box of one row (a query or key alone). */
__device__ static __forceinline__ span_box cuda_span_row_box(const double *key,
                                                             const double *time, int r)
{
    span_box b = span_box_empty();
    span_box_add(&b, key[r], time ? time[r] : 0.0);
    return b;
}

/* Next tile u >= from of tiling t, before end, whose box meets box b (queries of b
 * against keys of t when b_is_query, else the other way round); end when none. */
__device__ static __forceinline__ int cuda_span_next(const cuda_span &sp,
                                                     const cuda_span_tiles &t, const span_box &b,
                                                     int b_is_query, int from, int end)
{
    for (int u = from; u < end; u++) {
        const span_box x = t.box[u];
        int how = b_is_query ? span_meet(&b, &x, sp.reach, sp.causal)
                             : span_meet(&x, &b, sp.reach, sp.causal);
        if (how != SPAN_NONE)
            return u;
    }
    return end;
}

/* Plain f32 SIMT attention (cuda_attn_simple.cu): the reference the tensor-core
 * kernels are checked against, and the path for head dims they do not cover. Same
 * contracts as attn_fwd / attn_bwd; the callers have checked the arguments. */
rv_status cuda_attn_fwd_simple(rv_backend *be, const rv_attn_fwd_args *a);
rv_status cuda_attn_bwd_simple(rv_backend *be, const rv_attn_bwd_args *a);

/* RINGVIT_CUDA_ATTN=simple sends every call to the f32 reference kernels. */
static inline int cuda_attn_simple_requested(void)
{
    const char *s = getenv("RINGVIT_CUDA_ATTN");
    return s && strcmp(s, "simple") == 0;
}

/* Head dims the tensor-core kernels are instantiated for. */
static inline int cuda_attn_tc_dim(int dim)
{
    return dim == 32 || dim == 64 || dim == 128;
}

/* The tensor-core kernels read and write 16-byte vectors. */
static inline int cuda_attn_aligned(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

static inline float cuda_attn_scale(float scale, int dim)
{
    return scale != 0.0f ? scale : 1.0f / sqrtf((float)dim);
}

/* off = q_start - k_start: key j is seen by query i iff j <= i + off (causal). */
static inline int64_t cuda_attn_off(const rv_attn_mask *m)
{
    return m->q_start - m->k_start;
}

/* Number of keys (a prefix of 0..sk-1) that query row i sees. */
__host__ __device__ static inline int cuda_attn_visible(int causal, int64_t off, int sk,
                                                        int64_t i)
{
    if (!causal)
        return sk;
    int64_t n = i + off + 1;
    return n < 0 ? 0 : (n > (int64_t)sk ? sk : (int)n);
}

/* First query row (a suffix of 0..sq-1 sees key j) that sees key j; sq when none. */
__host__ __device__ static inline int cuda_attn_first_query(int causal, int64_t off, int sq,
                                                            int64_t j)
{
    if (!causal)
        return 0;
    int64_t f = j - off;
    return f < 0 ? 0 : (f > (int64_t)sq ? sq : (int)f);
}

#define CUDA_ATTN_LOG2E 1.4426950408889634f
#define CUDA_ATTN_LN2 0.6931471805599453f

/* ---- PTX wrappers for the tensor-core kernels ------------------------------------ */

__device__ static __forceinline__ uint32_t attn_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* Four 8x8 b16 matrices from shared memory; see the layouts above. Volatile so
 * the compiler keeps them between the barriers that guard the tiles. */
__device__ static __forceinline__ void attn_ldsm_x4(uint32_t (&r)[4], const bf16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(attn_smem_addr(p)));
}

__device__ static __forceinline__ void attn_ldsm_x4_trans(uint32_t (&r)[4], const bf16 *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(attn_smem_addr(p)));
}

/* d (16x8 f32) += a (16x16 bf16) * b (16x8 bf16). */
__device__ static __forceinline__ void attn_mma(float (&d)[4], const uint32_t (&a)[4],
                                                uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* 16 bytes global -> shared, asynchronous (L2 only: tiles are re-read by other CTAs). */
__device__ static __forceinline__ void attn_cp_async16(bf16 *dst, const void *src)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(attn_smem_addr(dst)),
                 "l"(src));
}

__device__ static __forceinline__ void attn_cp_async16f(float *dst, const float *src)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(attn_smem_addr(dst)),
                 "l"(src));
}

__device__ static __forceinline__ void attn_cp_async_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::);
}

/* Waits for every cp.async group this thread issued; a __syncthreads must follow
 * before other threads' copies may be read. */
__device__ static __forceinline__ void attn_cp_async_wait_all(void)
{
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

/* 2^x; ex2.approx(-inf) = +0, so masked scores become exact zeros. */
__device__ static __forceinline__ float attn_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Two floats -> packed bf16 pair (round to nearest), lo in the low half. */
__device__ static __forceinline__ uint32_t attn_pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t r;
    memcpy(&r, &v, sizeof r);
    return r;
}

/* Four floats -> four bf16 stored at dst (8-byte aligned shared memory). */
__device__ static __forceinline__ void attn_store_bf16x4(bf16 *dst, float4 x)
{
    uint2 u = make_uint2(attn_pack_bf16(x.x, x.y), attn_pack_bf16(x.z, x.w));
    *reinterpret_cast<uint2 *>(dst) = u;
}

#endif
