/* test_gemm_dnnl.c: the CPU backend's GEMM entry on oneDNN against a double
 * reference (tests/ref): small and large sizes (around 32 rows and 2 * 64^3 flops,
 * where oneDNN's own kernel choice changes) with transposed and strided
 * operands, M = 1, N = 1, beta 0 over NaN and beta != 0; two runs compare
 * exactly; at bf16 against the double product of the bf16-rounded operands and
 * against the f32 product within the bf16 rounding bound; the bf16 refusal
 * (RINGVIT_CPU_BF16=0) on every machine. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_ops.h"
#include "rv_backend.h"

/* f32: k-term dot products of N(0, 1) entries (epsilon 1.2e-7), however oneDNN
 * blocks them: about sqrt(k) * eps, under 5e-6 at the largest k here (1100). */
#define TOL_F32 1e-5
/* bf16 against the exact product of the rounded operands: the products of two
 * bf16 are exact in f32, so only the f32 accumulation rounds (as TOL_F32). */
#define TOL_BF16_EXACT 1e-5
/* bf16 against the f32 operands, per entry: each operand rounds by at most
 * 2^-9 relative, a product by 2^-8 + 2^-18, so |C - C_f32| <= (2^-8 + 2^-18) *
 * |alpha| * sum_k |a_ik b_kj|, plus the accumulation's TOL_F32 of max |C|. */
#define BF16_TERM (1.0 / 256 + 1.0 / 262144)

static rv_backend *cpu(int threads, rv_precision p)
{
    rv_backend *be = NULL;
    cr_assert_eq(rv_backend_cpu_create(threads, &be), RV_OK, "%s", rv_last_error());
    cr_assert_eq(rv_backend_set_precision(be, p), RV_OK, "%s", rv_last_error());
    return be;
}

/* Round to nearest even, as the bf16 conversions do (finite inputs). */
static double bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    float r;
    memcpy(&r, &u, sizeof r);
    return r;
}

/* The operands of one call, stored with padding (every stored entry random, so
 * reading padding or the wrong transpose shows). */
typedef struct gemm_case {
    int ta, tb, m, n, k, pad;
    float alpha, beta;
    int lda, ldb, ldc;
    size_t na, nb, nc;
    float *a, *b, *c0; /* c0: C on entry (NaN in the m x n block when beta is 0) */
} gemm_case;

static gemm_case case_make(ref_rng *rng, int ta, int tb, int m, int n, int k, float alpha,
                           float beta, int pad)
{
    gemm_case g = {.ta = ta, .tb = tb, .m = m, .n = n, .k = k, .pad = pad, .alpha = alpha,
                   .beta = beta};
    g.lda = (ta ? m : k) + pad, g.ldb = (tb ? k : n) + pad, g.ldc = n + pad;
    g.na = (size_t)(ta ? k : m) * g.lda, g.nb = (size_t)(tb ? n : k) * g.ldb;
    g.nc = (size_t)m * g.ldc;
    g.a = ref_alloc_f(g.na), g.b = ref_alloc_f(g.nb), g.c0 = ref_alloc_f(g.nc);
    ref_fill_normal(rng, g.a, g.na, 0.0f, 1.0f);
    ref_fill_normal(rng, g.b, g.nb, 0.0f, 1.0f);
    ref_fill_normal(rng, g.c0, g.nc, 0.0f, 1.0f);
    for (int i = 0; beta == 0.0f && i < m; i++)
        for (int j = 0; j < n; j++)
            g.c0[(size_t)i * g.ldc + j] = NAN;
    return g;
}

static void case_free(gemm_case *g)
{
    free(g->a), free(g->b), free(g->c0);
}

/* C as the backend computes it (a new buffer); the padding of C must come back
 * unchanged. */
static float *case_run(rv_backend *be, const gemm_case *g)
{
    float *c = ref_dup_f(g->c0, g->nc);
    rv_status st = be->gemm(be, g->ta, g->tb, g->m, g->n, g->k, g->alpha, g->a, g->lda, g->b,
                            g->ldb, g->beta, c, g->ldc);
    cr_assert_eq(st, RV_OK, "gemm: %s", rv_last_error());
    for (int i = 0; g->pad > 0 && i < g->m; i++)
        cr_expect_arr_eq(c + (size_t)i * g->ldc + g->n, g->c0 + (size_t)i * g->ldc + g->n,
                         (size_t)g->pad * sizeof(float), "gemm wrote C padding (row %d)", i);
    return c;
}

/* The double reference: of the operands (rounded to bf16 first when round is 1),
 * or with abs 1 of their absolute values (and 0 for C: the rounding bound's sum). */
static double *case_ref(const gemm_case *g, int round, int abs_)
{
    double *ad = ref_dup_d(g->a, g->na), *bd = ref_dup_d(g->b, g->nb);
    double *cd = ref_dup_d(g->c0, g->nc);
    for (size_t i = 0; i < g->na; i++)
        ad[i] = abs_ ? fabs(ad[i]) : round ? bf16_of(g->a[i]) : ad[i];
    for (size_t i = 0; i < g->nb; i++)
        bd[i] = abs_ ? fabs(bd[i]) : round ? bf16_of(g->b[i]) : bd[i];
    ref_gemm(g->ta, g->tb, g->m, g->n, g->k, abs_ ? fabs(g->alpha) : g->alpha, ad, g->lda,
             bd, g->ldb, abs_ ? 0.0 : g->beta, cd, g->ldc);
    free(ad), free(bd);
    return cd;
}

#define CASE_FMT "ta=%d tb=%d m=%d n=%d k=%d alpha=%g beta=%g pad=%d threads=%d"
#define CASE_ARGS(g, be)                                                                  \
    (g)->ta, (g)->tb, (g)->m, (g)->n, (g)->k, (double)(g)->alpha, (double)(g)->beta,     \
        (g)->pad, (be)->threads

/* f32 against the double reference, and a second run bit for bit. */
static void check_f32(rv_backend *be, const gemm_case *g)
{
    float *c = case_run(be, g), *c2 = case_run(be, g);
    double *cd = case_ref(g, 0, 0);
    double err = rv_rel_err(c, cd, g->nc);
    cr_expect_leq(err, TOL_F32, "f32 " CASE_FMT ": rel err %.3g", CASE_ARGS(g, be), err);
    cr_expect_arr_eq(c, c2, g->nc * sizeof(float), "f32 " CASE_FMT ": two runs differ",
                     CASE_ARGS(g, be));
    free(c), free(c2), free(cd);
}

/* Sizes around the threshold: 31/32 rows, flops just under/at 2 * 64^3, and the
 * single row and column the encoder's pooled heads multiply. */
static const int shapes[][3] = {
    /* m, n, k */
    {31, 64, 300}, {32, 64, 128}, {32, 64, 127}, {33, 65, 129}, {1, 1100, 77},
    {300, 1, 1100}, {1, 1, 1100}, {197, 257, 768}, {64, 64, 64}, {63, 64, 64},
};
static const float alpha_beta[][2] = {{1.0f, 0.0f}, {-0.75f, 1.25f}, {0.37f, 0.0f}, {1.0f, 1.0f}};

static void sweep(int threads, rv_precision p, void (*check)(rv_backend *, const gemm_case *))
{
    rv_backend *be = cpu(threads, p);
    ref_rng rng = ref_rng_make(500 + threads + 10 * (int)p);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            for (size_t ab = 0; ab < sizeof alpha_beta / sizeof alpha_beta[0]; ab++) {
                gemm_case g = case_make(&rng, t & 1, t >> 1, shapes[s][0], shapes[s][1],
                                        shapes[s][2], alpha_beta[ab][0], alpha_beta[ab][1],
                                        (int)(s + ab) % 3 == 0 ? 0 : 3);
                check(be, &g);
                case_free(&g);
            }
    rv_backend_free(&be);
}

Test(gemm_dnnl, f32_threshold_threads1) { sweep(1, RV_PRECISION_F32, check_f32); }
Test(gemm_dnnl, f32_threshold_threads2) { sweep(2, RV_PRECISION_F32, check_f32); }

/* ---- bf16 ---------------------------------------------------------------------- */

/* Skips, saying why, where this CPU (or RINGVIT_CPU_BF16) refuses bf16. */
static void need_bf16(void)
{
    if (rv_precision_check("cpu", RV_PRECISION_BF16) != RV_OK) {
        fprintf(stderr, "bf16 test skipped: %s\n", rv_last_error());
        cr_skip_test("bf16 not available on this CPU: %s", rv_last_error());
    }
}

static void check_bf16(rv_backend *be, const gemm_case *g)
{
    float *c = case_run(be, g), *c2 = case_run(be, g);
    double *exact = case_ref(g, 1, 0), *f32 = case_ref(g, 0, 0), *mag = case_ref(g, 0, 1);
    double err = rv_rel_err(c, exact, g->nc);
    cr_expect_leq(err, TOL_BF16_EXACT, "bf16 " CASE_FMT ": rel err %.3g against the rounded "
                  "operands' product", CASE_ARGS(g, be), err);
    double cmax = 0, worst = 0;
    for (size_t i = 0; i < g->nc; i++)
        cmax = fabs(f32[i]) > cmax ? fabs(f32[i]) : cmax;
    for (int i = 0; i < g->m; i++)
        for (int j = 0; j < g->n; j++) {
            const size_t x = (size_t)i * g->ldc + j;
            const double bound = BF16_TERM * mag[x] + TOL_F32 * cmax;
            const double e = fabs(c[x] - f32[x]) / bound;
            worst = e > worst ? e : worst;
        }
    cr_expect_leq(worst, 1.0, "bf16 " CASE_FMT ": error against f32 %.3g of the bf16 bound",
                  CASE_ARGS(g, be), worst);
    cr_expect_arr_eq(c, c2, g->nc * sizeof(float), "bf16 " CASE_FMT ": two runs differ",
                     CASE_ARGS(g, be));
    free(c), free(c2), free(exact), free(f32), free(mag);
}

Test(gemm_dnnl, bf16_threads1)
{
    need_bf16();
    sweep(1, RV_PRECISION_BF16, check_bf16);
}

Test(gemm_dnnl, bf16_threads2)
{
    need_bf16();
    sweep(2, RV_PRECISION_BF16, check_bf16);
}

/* RINGVIT_CPU_BF16=0 refuses bf16 on every machine, with a message naming it; f32
 * and auto stay allowed. */
Test(gemm_dnnl, bf16_refused_by_variable)
{
    setenv("RINGVIT_CPU_BF16", "0", 1);
    cr_expect_eq(rv_precision_check("cpu", RV_PRECISION_BF16), RV_ERR_UNSUPPORTED);
    cr_expect(strstr(rv_last_error(), "RINGVIT_CPU_BF16") != NULL, "message: '%s'",
              rv_last_error());
    rv_backend *be = NULL;
    cr_assert_eq(rv_backend_cpu_create(1, &be), RV_OK, "%s", rv_last_error());
    cr_expect_eq(rv_backend_set_precision(be, RV_PRECISION_BF16), RV_ERR_UNSUPPORTED);
    cr_expect_eq(rv_backend_precision(be), RV_PRECISION_F32);
    cr_expect_eq(rv_backend_set_precision(be, RV_PRECISION_AUTO), RV_OK, "%s", rv_last_error());
    cr_expect_eq(rv_backend_precision(be), RV_PRECISION_F32);
    cr_expect_eq(rv_precision_check("cpu", RV_PRECISION_F32), RV_OK);
    rv_backend_free(&be);
    setenv("RINGVIT_CPU_BF16", "banana", 1);
    cr_expect_eq(rv_precision_check("cpu", RV_PRECISION_BF16), RV_ERR_INVALID);
    unsetenv("RINGVIT_CPU_BF16");
}

Test(gemm_dnnl, precision_names)
{
    rv_precision p = RV_PRECISION_F32;
    cr_expect_eq(rv_precision_parse("bf16", &p), RV_OK);
    cr_expect_eq(p, RV_PRECISION_BF16);
    cr_expect_eq(rv_precision_parse("auto", &p), RV_OK);
    cr_expect_eq(p, RV_PRECISION_AUTO);
    cr_expect_eq(rv_precision_parse("fp16", &p), RV_ERR_INVALID);
    cr_expect_str_eq(rv_precision_name(RV_PRECISION_F32), "f32");
    cr_expect_null(rv_precision_name((rv_precision)7));
}
