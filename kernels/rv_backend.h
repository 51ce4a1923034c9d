/* rv_backend.h: the compute backend table (ggml-backend style). Every op the
 * encoder needs is one entry; the CPU backend (C + oneDNN + OpenMP) is always
 * built, a CUDA backend fills the same table when CUDA is found. All pointers are
 * memory of the backend that is called: host memory where the backend's
 * host_memory is 1 (cpu), device memory otherwise (cuda).
 *
 * Layouts are row-major. Attention tensors are (tokens, heads, dim): token t,
 * head h, channel c sits at [(t * heads + h) * dim + c]. Log-sum-exp tensors are
 * (heads, tokens) in natural log. */
#ifndef RV_BACKEND_H
#define RV_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "rv_api.h"
#include "rv_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rv_backend rv_backend;

typedef enum rv_copy_kind {
    RV_COPY_HOST_TO_DEVICE = 0,
    RV_COPY_DEVICE_TO_HOST = 1,
    RV_COPY_DEVICE_TO_DEVICE = 2,
} rv_copy_kind;

/* The MLP activations of the model families (rv_vit.h). */
typedef enum rv_act {
    RV_ACT_GELU = 0,       /* erf form: y = x/2 * (1 + erf(x / sqrt 2)) (torch's GELU) */
    RV_ACT_GELU_TANH = 1,  /* y = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
                              (transformers' gelu_new, gelu_pytorch_tanh) */
    RV_ACT_QUICK_GELU = 2, /* y = x * sigmoid(1.702 x) (CLIP's quick_gelu) */
} rv_act;

typedef enum rv_mask_kind {
    RV_MASK_NONE = 0,
    RV_MASK_CAUSAL = 1, /* key at global position kp is seen by query qp iff kp <= qp */
    RV_MASK_SPAN = 2,   /* per-token keys and times (rv_attn_mask's span fields) */
} rv_mask_kind;

/* A mask with the global positions of the first query and key rows, so a causal
 * mask stays right when the query and key chunks come from different ranks.
 *
 * RV_MASK_SPAN (attention spans on the time axis, rv_vit.h): query row i sees key
 * row j when
 *     |q_key[i] - k_key[j]| <= reach
 * and, with causal, also
 *     k_time[j] < q_time[i], or k_time[j] == q_time[i] and k_start + j <= q_start + i.
 * A key is a token's start time in seconds (a sliding window: reach = W / 2) or
 * its block's index (blocks and frames: reach = 0); the times are start times.
 * The arrays are the backend's memory; their values need not be sorted (tokens
 * of one interleaving window are not), but kernels are fastest when nearby rows
 * hold nearby values, since they skip tiles whose ranges cannot meet. */
typedef struct rv_attn_mask {
    rv_mask_kind kind;
    int64_t q_start; /* global position of query row 0 */
    int64_t k_start; /* global position of key row 0 */
    /* RV_MASK_SPAN only: */
    const double *q_key, *k_key;   /* (sq), (sk) */
    const double *q_time, *k_time; /* (sq), (sk): read with causal only; may be the keys */
    double reach;                  /* >= 0, finite */
    int causal;                    /* 1: the time-causal rule too */
} rv_attn_mask;

typedef struct rv_attn_fwd_args {
    const float *q; /* (sq, heads, dim) */
    const float *k; /* (sk, heads, dim) */
    const float *v; /* (sk, heads, dim) */
    float *o;       /* (sq, heads, dim) out; 0 for a row that sees no key */
    float *lse;     /* (heads, sq) out; -inf for a row that sees no key */
    int sq, sk, heads, dim;
    float scale; /* softmax scale; 0 selects 1/sqrt(dim) */
    rv_attn_mask mask;
    /* 0: overwrite o and lse. 1: (o, lse) hold the attention over other keys and
     * are merged with this block's in place, as attn_merge would, without a second
     * buffer (ring attention's running result). */
    int accumulate;
} rv_attn_fwd_args;

/* Backward of one attention block. o and lse are those of the complete attention
 * the query rows belong to (after all merges), so the block's share of the
 * gradient is exact when keys come in several blocks. */
typedef struct rv_attn_bwd_args {
    const float *q, *k, *v; /* as in the forward */
    const float *o;         /* (sq, heads, dim) final output */
    const float *lse;       /* (heads, sq) final log-sum-exp */
    const float *dout;      /* (sq, heads, dim) gradient of the output */
    float *dq;              /* (sq, heads, dim) */
    float *dk, *dv;         /* (sk, heads, dim) */
    int sq, sk, heads, dim;
    float scale; /* 0 selects 1/sqrt(dim) */
    rv_attn_mask mask;
    int accumulate; /* 0: overwrite dq, dk, dv; 1: add into them */
} rv_attn_bwd_args;

struct rv_backend {
    const char *name;
    void *ctx; /* backend-private state: thread count, streams, pools */
    int threads;
    /* 1: its buffers are host memory, which the caller may read and write directly
     * (cpu); 0: device memory, reached only through copy (cuda). */
    int host_memory;

    rv_status (*alloc)(rv_backend *be, size_t bytes, void **ptr);
    void (*free)(rv_backend *be, void *ptr);
    rv_status (*copy)(rv_backend *be, void *dst, const void *src, size_t bytes,
                      rv_copy_kind kind);

    /* C (m, n) = alpha * op(A) @ op(B) + beta * C; op(A) is (m, k), op(B) (k, n). */
    rv_status (*gemm)(rv_backend *be, int trans_a, int trans_b, int m, int n, int k,
                      float alpha, const float *a, int lda, const float *b, int ldb,
                      float beta, float *c, int ldc);
    /* x (rows, cols) += bias (cols) on every row. */
    rv_status (*bias_add)(rv_backend *be, float *x, const float *bias, int rows, int cols);
    /* y = (x - mean) * rstd * w + b per row; mean, rstd (rows) are saved. */
    rv_status (*layernorm_fwd)(rv_backend *be, const float *x, const float *w,
                               const float *b, int rows, int cols, float eps, float *y,
                               float *mean, float *rstd);
    /* dx (rows, cols) is overwritten; dw, db (cols) are accumulated into. */
    rv_status (*layernorm_bwd)(rv_backend *be, const float *dy, const float *x,
                               const float *w, const float *mean, const float *rstd,
                               int rows, int cols, float *dx, float *dw, float *db);
    /* The MLP activation act (rv_act) elementwise: y = act(x); y may be x. */
    rv_status (*act_fwd)(rv_backend *be, rv_act act, const float *x, float *y, size_t n);
    /* dx = act'(x) * dy; dx may be dy. */
    rv_status (*act_bwd)(rv_backend *be, rv_act act, const float *x, const float *dy,
                         float *dx, size_t n);
    /* Layer scale: y (rows, cols) += x * gamma, gamma (cols) per column; x != y. */
    rv_status (*scale_add)(rv_backend *be, float *y, const float *x, const float *gamma,
                           int rows, int cols);
    /* x (rows, cols) *= gamma (cols) per column, in place. */
    rv_status (*scale_cols)(rv_backend *be, float *x, const float *gamma, int rows, int cols);
    /* Row-wise softmax of x (rows, cols); -inf entries get 0, an all -inf row 0. */
    rv_status (*softmax_fwd)(rv_backend *be, const float *x, float *y, int rows, int cols);

    rv_status (*attn_fwd)(rv_backend *be, const rv_attn_fwd_args *a);
    rv_status (*attn_bwd)(rv_backend *be, const rv_attn_bwd_args *a);
    /* (o, lse) <- merge of (o, lse) and (o2, lse2): the attention over the union of
     * the two key sets. Exact when either side is fully masked (lse = -inf). */
    rv_status (*attn_merge)(rv_backend *be, float *o, float *lse, const float *o2,
                            const float *lse2, int sq, int heads, int dim);

    /* Memory moves inside this backend's memory, so code above the table (the CP
     * strategies) never touches a pointer itself and runs unchanged on a device.
     * fill: x[i] = value for i < n. */
    rv_status (*fill)(rv_backend *be, float *x, float value, size_t n);
    /* rows rows of width bytes: row i from src + i * spitch to dst + i * dpitch. */
    rv_status (*copy2d)(rv_backend *be, void *dst, size_t dpitch, const void *src,
                        size_t spitch, size_t width, size_t rows);
    /* y[i] += x[i] for i < n. */
    rv_status (*add)(rv_backend *be, float *y, const float *x, size_t n);
    /* dst (cols) += the column sums of x (rows, cols), each summed in double (a
     * bias gradient). */
    rv_status (*colsum_add)(rv_backend *be, const float *x, int rows, int cols, float *dst);
    /* dst (cols) += the column sums of a * b (both (rows, cols)), each summed in
     * double (a layer scale's gradient). */
    rv_status (*colsum_mul_add)(rv_backend *be, const float *a, const float *b, int rows,
                                int cols, float *dst);

    /* Waits until every op issued to this backend has finished: after it, its
     * outputs may be read by the host or sent by a communicator. A no-op on CPU. */
    rv_status (*synchronize)(rv_backend *be);
    void (*destroy)(rv_backend *be);
};

/* A backend by device name, as the commands' --device and Python's device= say
 * it: "cpu" with threads threads (<= 0: every core), or "cuda": GPU gpu modulo
 * the GPUs this process sees (gpu < 0: RINGVIT_CUDA_DEVICE, else 0). A build without CUDA or a machine
 * without a GPU is RV_ERR_UNSUPPORTED saying which; another name RV_ERR_INVALID. */
RV_API rv_status rv_backend_create(const char *device, int threads, int gpu, rv_backend **out);
/* RV_OK when a backend of device can be created here, else its error (a check
 * before any work). */
RV_API rv_status rv_backend_check(const char *device);
/* Copies bytes between buffers of either memory (host or a device's); 0, or -1
 * with the message in rv_last_error(). Same signature as rv_comm_copy_fn. */
typedef int (*rv_backend_copy_fn)(void *dst, const void *src, size_t bytes);
/* The copy that moves messages between local ranks on device: rv_cuda_copy_sync
 * for "cuda", NULL (memcpy) for "cpu". */
RV_API rv_backend_copy_fn rv_backend_copy(const char *device);
RV_API rv_status rv_backend_cpu_create(int threads, rv_backend **out);
RV_API void rv_backend_free(rv_backend **be);
/* 1 when be's buffers are host memory (its host_memory field), 0 otherwise. */
RV_API int rv_backend_is_host(const rv_backend *be);

/* Number of threads the CPU backend uses when asked for 0. */
RV_API int rv_cpu_default_threads(void);
/* Compute threads of one rank: threads when > 0 (local: shared among
 * local_ranks), else the cores over the ranks sharing them: local_ranks threads
 * of this process, or (mpi) the processes the launcher started on this machine
 * (OpenMPI's and MPICH's local size; 1 when neither says). At least 1. */
RV_API int rv_cpu_threads_per_rank(int threads, int local_ranks, int mpi);

/* The CPU backend's GEMM library ("oneDNN 2.6.3") and the instruction set it
 * dispatches to on this CPU ("avx512_core_bf16", "avx2", ...: oneDNN's names). */
RV_API const char *rv_gemm_library(void);
RV_API const char *rv_gemm_isa(void);

/* The number format a backend computes in. bf16: the operands of every GEMM and of
 * the attention's products rounded to bf16, f32 accumulation; tensors, LayerNorm,
 * softmax, activations and every other op stay f32. */
typedef enum rv_precision {
    RV_PRECISION_AUTO = 0, /* the device's own: f32 on cpu, bf16 on cuda */
    RV_PRECISION_F32 = 1,
    RV_PRECISION_BF16 = 2, /* cpu: where the CPU has AVX-512 BF16 or AMX */
} rv_precision;

/* "auto", "f32", "bf16"; RV_ERR_INVALID for another name. */
RV_API rv_status rv_precision_parse(const char *name, rv_precision *out);
/* The name of p ("auto", "f32", "bf16"); NULL for a value outside the enum. */
RV_API const char *rv_precision_name(rv_precision p);
/* RV_OK when a backend of device can compute at p here, else why not:
 * RV_ERR_UNSUPPORTED for bf16 on a CPU without AVX-512 BF16 or AMX (or with
 * RINGVIT_CPU_BF16=0), and for f32 on cuda (its attention is bf16); RV_ERR_INVALID
 * for an unknown device or value. Touches no device (a check before any work). */
RV_API rv_status rv_precision_check(const char *device, rv_precision p);
/* Sets be's precision (before its first op), refused as rv_precision_check says. */
RV_API rv_status rv_backend_set_precision(rv_backend *be, rv_precision p);
/* The precision be computes in: RV_PRECISION_F32 or RV_PRECISION_BF16. */
RV_API rv_precision rv_backend_precision(const rv_backend *be);

/* The CPU attention kernels in use at f32: "avx512", "avx2" or "blas", the best
 * this CPU runs, or the set RINGVIT_CPU_KERNELS names. NULL (and rv_last_error
 * set) when that variable names a set unknown or one this CPU cannot run; CPU
 * backends are then refused too. */
RV_API const char *rv_cpu_kernels(void);
/* The same for a CPU backend of precision p: at bf16 "avx512bf16" (AVX-512 BF16
 * dot products) unless RINGVIT_CPU_KERNELS names a set. */
RV_API const char *rv_cpu_kernels_at(rv_precision p);
/* The best f32 kernel set this CPU runs, whatever RINGVIT_CPU_KERNELS says. */
RV_API const char *rv_cpu_kernels_best(void);
/* 1 when this CPU and build can run kernel set name ("avx512", "avx2", "blas",
 * "avx512bf16"). */
RV_API int rv_cpu_kernels_supported(const char *name);

#ifdef __cplusplus
}
#endif
#endif
