/* test_cp_attention_gpu.c: context-parallel attention on one GPU, N ranks as N
 * threads each with its own CUDA backend (its own stream), messages moved by
 * device-to-device copies (rv_local_run_copy with rv_cuda_copy_sync). Every
 * strategy, causal (zigzag) and not, forward (O, LSE) and backward (dQ, dK, dV),
 * against single-rank attention of the whole sequence on the CPU backend (f32),
 * with bf16 tolerances (the GPU kernels round Q, K, V and P to bf16). Exits 77
 * (skipped) when the build has no CUDA or the machine no GPU. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rv_backend.h"
#include "rv_comm.h"
#include "rv_cp_attention.h"
#include "rv_cuda.h"

/* Normalised error (norm_err) of every output against the CPU's f32 single-rank
 * attention: the GPU kernels round Q, K, V and P to bf16 (8 mantissa bits,
 * 2^-8 = 3.9e-3 per rounding) and accumulate in f32; a score moves by
 * |score| * 2^-8, its exponential by as much relative, over sums of S terms. */
#define TOL_BF16 2e-2

#ifdef RINGVIT_HAVE_CUDA

/* Normalised error: max |a - b| over max |b| (ggml style). */
static double norm_err(const float *a, const float *b, size_t n)
{
    double e = 0, m = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        e = d > e || isnan(d) ? d : e;
        m = fabs(b[i]) > m ? fabs(b[i]) : m;
    }
    return e / m;
}

typedef struct cp_case {
    int n, heads, dim, causal;
    int64_t seq;
    rv_cp_strategy strategy;
    const float *q, *k, *v, *dout; /* (S, H, d) global, host */
    float *o, *lse, *dq, *dk, *dv; /* results gathered in global order, host */
} cp_case;

/* Host rows of rank r's slice <-> global order. */
static void slice_rows(const rv_shard_plan *p, int r, size_t row, float *global, float *slice,
                       int to_slice)
{
    rv_shard_seg s[RV_SHARD_MAX_SEGS];
    int n = rv_shard_segments(p, r, s);
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        float *g = global + (size_t)s[i].start * row, *l = slice + (size_t)off * row;
        memcpy(to_slice ? l : g, to_slice ? g : l, sizeof(float) * row * (size_t)s[i].len);
        off += s[i].len;
    }
}

static rv_status rank_fn(rv_comm *comm, void *arg)
{
    cp_case *c = arg;
    rv_shard_plan plan;
    rv_backend *be = NULL;
    rv_cp_attn cp;
    float *h = NULL, *d[9] = {0}; /* q k v dout o dq dk dv lse */
    const size_t row = (size_t)c->heads * c->dim;
    rv_status st = rv_shard_plan_make(c->causal ? RV_SHARD_ZIGZAG : RV_SHARD_CONTIGUOUS, c->n,
                                      c->seq, &plan);
    if (st != RV_OK || (st = rv_backend_cuda_create(-1, &be)) != RV_OK)
        goto end;
    const int r = comm->rank;
    const int64_t len = rv_shard_len(&plan, r);
    const size_t nt = (size_t)(len > 0 ? len : 1) * row;
    if (!(h = malloc(sizeof(float) * nt))) {
        st = rv_fail(RV_ERR_NOMEM, "rank %d: out of memory", r);
        goto end;
    }
    const float *in[4] = {c->q, c->k, c->v, c->dout};
    for (int i = 0; i < 9; i++)
        if ((st = be->alloc(be, sizeof(float) * (i == 8 ? (size_t)(len > 0 ? len : 1) * c->heads : nt),
                            (void **)&d[i])) != RV_OK)
            goto end;
    for (int i = 0; i < 4; i++) {
        slice_rows(&plan, r, row, (float *)in[i], h, 1);
        if ((st = be->copy(be, d[i], h, sizeof(float) * len * row, RV_COPY_HOST_TO_DEVICE)) != RV_OK)
            goto end;
    }
    if ((st = rv_cp_attn_init(&cp, be, comm, &plan, c->strategy, c->heads, c->dim, c->causal,
                              0.0f)) != RV_OK ||
        (st = rv_cp_attn_forward(&cp, d[0], d[1], d[2], d[4], d[8])) != RV_OK ||
        (st = rv_cp_attn_backward(&cp, d[0], d[1], d[2], d[4], d[8], d[3], d[5], d[6], d[7])) != RV_OK)
        goto end;
    float *out[4] = {c->o, c->dq, c->dk, c->dv};
    for (int i = 0; i < 4; i++) {
        if ((st = be->copy(be, h, d[4 + i], sizeof(float) * len * row, RV_COPY_DEVICE_TO_HOST)) != RV_OK)
            goto end;
        slice_rows(&plan, r, row, out[i], h, 0);
    }
    /* lse (heads, len) of the slice -> (heads, S) global. */
    float *hl = malloc(sizeof(float) * (size_t)c->heads * (len > 0 ? len : 1));
    if (!hl) {
        st = rv_fail(RV_ERR_NOMEM, "rank %d: out of memory", r);
        goto end;
    }
    if ((st = be->copy(be, hl, d[8], sizeof(float) * (size_t)c->heads * len,
                       RV_COPY_DEVICE_TO_HOST)) == RV_OK) {
        rv_shard_seg s[RV_SHARD_MAX_SEGS];
        int ns = rv_shard_segments(&plan, r, s);
        int64_t off = 0;
        for (int i = 0; i < ns; off += s[i].len, i++)
            for (int hh = 0; hh < c->heads; hh++)
                memcpy(c->lse + (size_t)hh * c->seq + s[i].start, hl + (size_t)hh * len + off,
                       sizeof(float) * (size_t)s[i].len);
    }
    free(hl);
end:
    for (int i = 0; i < 9; i++)
        if (d[i])
            be->free(be, d[i]);
    rv_backend_free(&be);
    free(h);
    return st;
}

static float *rnd(size_t n, uint64_t seed, float scale)
{
    float *x = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n && x; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = scale * ((float)(seed >> 40) / (float)(1ull << 24) * 2.0f - 1.0f);
    }
    return x;
}

static void check_case(int n, rv_cp_strategy strategy, int causal, int64_t seq, int heads,
                       int dim)
{
    const size_t nt = (size_t)seq * heads * dim, nl = (size_t)seq * heads;
    float *q = rnd(nt, 1, 2.0f), *k = rnd(nt, 2, 2.0f), *v = rnd(nt, 3, 1.0f),
          *dout = rnd(nt, 4, 1.0f);
    float *ref[6], *got[6]; /* o lse dq dk dv, spare */
    for (int i = 0; i < 6; i++) {
        ref[i] = calloc(i == 1 ? nl : nt, sizeof(float));
        got[i] = calloc(i == 1 ? nl : nt, sizeof(float));
        cr_assert(ref[i] && got[i]);
    }
    rv_backend *cpu = NULL;
    cr_assert_eq(rv_backend_cpu_create(0, &cpu), RV_OK);
    rv_attn_mask m = {.kind = causal ? RV_MASK_CAUSAL : RV_MASK_NONE, .q_start = 0, .k_start = 0};
    rv_attn_fwd_args fa = {.q = q, .k = k, .v = v, .o = ref[0], .lse = ref[1], .sq = (int)seq,
                           .sk = (int)seq, .heads = heads, .dim = dim, .scale = 0.0f, .mask = m,
                           .accumulate = 0};
    cr_assert_eq(cpu->attn_fwd(cpu, &fa), RV_OK, "%s", rv_last_error());
    rv_attn_bwd_args ba = {.q = q, .k = k, .v = v, .o = ref[0], .lse = ref[1], .dout = dout,
                           .dq = ref[2], .dk = ref[3], .dv = ref[4], .sq = (int)seq, .sk = (int)seq,
                           .heads = heads, .dim = dim, .scale = 0.0f, .mask = m, .accumulate = 0};
    cr_assert_eq(cpu->attn_bwd(cpu, &ba), RV_OK, "%s", rv_last_error());
    rv_backend_free(&cpu);

    cp_case c = {n, heads, dim, causal, seq, strategy, q, k, v, dout,
                 got[0], got[1], got[2], got[3], got[4]};
    rv_status st = rv_local_run_copy(n, rank_fn, &c, rv_cuda_copy_sync);
    cr_assert_eq(st, RV_OK, "%s cp %d: %s", rv_cp_strategy_name(strategy), n, rv_last_error());
    const char *names[5] = {"O", "LSE", "dQ", "dK", "dV"};
    for (int i = 0; i < 5; i++) {
        double e = norm_err(got[i], ref[i], i == 1 ? nl : nt);
        printf("cp_attention_gpu: %-9s cp %d %-6s S=%-5lld H=%d d=%-3d %-3s err %.2e\n",
               rv_cp_strategy_name(strategy), n, causal ? "causal" : "full", (long long)seq,
               heads, dim, names[i], e);
        cr_expect_leq(e, TOL_BF16, "%s cp %d causal %d: %s error %.3g", rv_cp_strategy_name(strategy),
                      n, causal, names[i], e);
    }
    for (int i = 0; i < 6; i++)
        free(ref[i]), free(got[i]);
    free(q), free(k), free(v), free(dout);
}

Test(cp_attention_gpu, ring_four_streams, .timeout = 300)
{
    for (int causal = 0; causal <= 1; causal++) {
        check_case(4, RV_CP_RING, causal, 1237, 4, 64);
        check_case(4, RV_CP_RING, causal, 4096, 2, 128);
    }
}

Test(cp_attention_gpu, ring_two_and_three_streams, .timeout = 300)
{
    for (int causal = 0; causal <= 1; causal++) {
        check_case(2, RV_CP_RING, causal, 1000, 4, 32);
        check_case(3, RV_CP_RING, causal, 1000, 6, 64);
    }
}

Test(cp_attention_gpu, allgather_and_ulysses, .timeout = 300)
{
    for (int causal = 0; causal <= 1; causal++) {
        check_case(4, RV_CP_ALLGATHER, causal, 1237, 4, 64);
        check_case(4, RV_CP_ULYSSES, causal, 1237, 4, 64);
        check_case(2, RV_CP_ULYSSES, causal, 1000, 6, 32);
    }
}

#endif /* RINGVIT_HAVE_CUDA */

#include "gpu_test_main.h"
