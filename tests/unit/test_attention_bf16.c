/* test_attention_bf16.c: the CPU attention forward of a bf16 backend (the AVX-512
 * BF16 tiles, vdpbf16ps) against naive double-precision attention (tests/ref) and
 * against the f32 kernels, on odd shapes, causal masks with offsets and head dims
 * 32 to 128; two runs compare exactly. Skipped, saying why, where the CPU lacks
 * AVX-512 BF16 (or RINGVIT_CPU_BF16=0). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_attention.h"
#include "ref_ops.h"
#include "rv_backend.h"

/* Normalised error (rv_rel_err) of O at bf16. Q, K, V and P are rounded to bf16
 * (relative 2^-9 = 2e-3 each); a score's error, about |S| * 2^-8 with |S| up to
 * ~10 here (q, k of spread 1.5), moves P by that much relatively, and O is a
 * P-weighted mean of V: errors of a few 1e-3 of max |O| (measured: under 1.1e-2),
 * with a margin for the peaked rows. docs/models.md states it. */
#define TOL_BF16_O 1.5e-2
/* The log-sum-exp (|LSE| ~ 5) moves by the scores' error, not relative to it. */
#define TOL_BF16_LSE 1.5e-2

static void need_bf16(void)
{
    if (rv_precision_check("cpu", RV_PRECISION_BF16) != RV_OK) {
        fprintf(stderr, "bf16 attention test skipped: %s\n", rv_last_error());
        cr_skip_test("bf16 not available on this CPU: %s", rv_last_error());
    }
}

static rv_backend *cpu(int threads, rv_precision p)
{
    rv_backend *be = NULL;
    cr_assert_eq(rv_backend_cpu_create(threads, &be), RV_OK, "%s", rv_last_error());
    cr_assert_eq(rv_backend_set_precision(be, p), RV_OK, "%s", rv_last_error());
    return be;
}

static void run_fwd(rv_backend *be, const float *q, const float *k, const float *v, int sq,
                    int sk, int heads, int dim, rv_attn_mask mask, float *o, float *lse)
{
    rv_attn_fwd_args a = {.q = q, .k = k, .v = v, .o = o, .lse = lse, .sq = sq, .sk = sk,
                          .heads = heads, .dim = dim, .scale = 0.0f, .mask = mask,
                          .accumulate = 0};
    cr_assert_eq(be->attn_fwd(be, &a), RV_OK, "attn_fwd: %s", rv_last_error());
}

static void check(int threads, uint64_t seed, int sq, int sk, int heads, int dim,
                  rv_attn_mask mask)
{
    rv_backend *bf = cpu(threads, RV_PRECISION_BF16), *f32 = cpu(threads, RV_PRECISION_F32);
    /* The bf16 tiles, unless RINGVIT_CPU_KERNELS forces a set (an f32 set at bf16
     * computes the attention in f32: within the bound too). */
    const char *force = getenv("RINGVIT_CPU_KERNELS");
    const char *want = force && *force && strcmp(force, "auto") ? force : "avx512bf16";
    cr_assert_str_eq(rv_cpu_kernels_at(RV_PRECISION_BF16), want);
    ref_rng r = ref_rng_make(seed);
    const size_t nq = (size_t)sq * heads * dim, nk = (size_t)sk * heads * dim;
    const size_t nl = (size_t)heads * sq;
    float *q = ref_alloc_f(nq), *k = ref_alloc_f(nk), *v = ref_alloc_f(nk);
    ref_fill_normal(&r, q, nq, 0.0f, 1.5f);
    ref_fill_normal(&r, k, nk, 0.0f, 1.5f);
    ref_fill_uniform(&r, v, nk, -1.0f, 1.0f);
    double *qd = ref_dup_d(q, nq), *kd = ref_dup_d(k, nk), *vd = ref_dup_d(v, nk);
    double *o_ref = ref_alloc_d(nq), *lse_ref = ref_alloc_d(nl);
    ref_attn_fwd(qd, kd, vd, sq, sk, heads, dim, 0, mask, o_ref, lse_ref);
    float *o = ref_alloc_f(nq), *lse = ref_alloc_f(nl), *o2 = ref_alloc_f(nq);
    float *lse2 = ref_alloc_f(nl), *of = ref_alloc_f(nq), *lsef = ref_alloc_f(nl);
    run_fwd(bf, q, k, v, sq, sk, heads, dim, mask, o, lse);
    run_fwd(bf, q, k, v, sq, sk, heads, dim, mask, o2, lse2);
    run_fwd(f32, q, k, v, sq, sk, heads, dim, mask, of, lsef);

    const double eo = rv_rel_err(o, o_ref, nq), el = rv_rel_err(lse, lse_ref, nl);
    double *ofd = ref_dup_d(of, nq);
    const double ef = rv_rel_err(o, ofd, nq);
    cr_expect_leq(eo, TOL_BF16_O, "bf16 O: rel err %.3g against double (sq=%d sk=%d H=%d d=%d "
                  "mask=%d T=%d)", eo, sq, sk, heads, dim, mask.kind, threads);
    cr_expect_leq(el, TOL_BF16_LSE, "bf16 LSE: rel err %.3g (sq=%d sk=%d d=%d)", el, sq, sk,
                  dim);
    cr_expect_leq(ef, TOL_BF16_O, "bf16 O: rel err %.3g against f32 (sq=%d sk=%d d=%d)", ef, sq,
                  sk, dim);
    cr_expect_gt(eo, 0.0, "bf16 O equals the double reference exactly: not rounded?");
    for (size_t i = 0; i < nl; i++)
        cr_expect_eq(isinf(lse_ref[i]) != 0, isinf(lse[i]) != 0, "lse[%zu] %g vs %g", i,
                     lse[i], lse_ref[i]);
    cr_expect_arr_eq(o, o2, nq * sizeof(float), "two bf16 runs differ (O)");
    cr_expect_arr_eq(lse, lse2, nl * sizeof(float), "two bf16 runs differ (LSE)");
    fprintf(stderr, "bf16 attention sq %4d sk %4d H %d d %3d mask %d: O vs double %.3g, vs f32 "
            "%.3g, LSE %.3g\n", sq, sk, heads, dim, mask.kind, eo, ef, el);

    free(q), free(k), free(v), free(qd), free(kd), free(vd), free(o_ref), free(lse_ref);
    free(o), free(lse), free(o2), free(lse2), free(of), free(lsef), free(ofd);
    rv_backend_free(&bf);
    rv_backend_free(&f32);
}

static const rv_attn_mask no_mask = {.kind = RV_MASK_NONE};
static const rv_attn_mask causal = {.kind = RV_MASK_CAUSAL};

Test(attention_bf16, shapes_dims_masks)
{
    need_bf16();
    const int dims[] = {32, 40, 64, 80, 128};
    for (int di = 0; di < 5; di++) {
        check(1, 700 + di, 129, 517, 4, dims[di], no_mask);
        check(2, 710 + di, 7, 33, 1, dims[di], no_mask);
        const rv_attn_mask m = {.kind = RV_MASK_CAUSAL, .q_start = 200, .k_start = 300};
        check(2, 720 + di, 600, 300, 2, dims[di], m);
    }
    check(2, 730, 1000, 1000, 2, 64, causal);
}
