/* test_cuda_ops.c: every op of the "cuda" backend against the "cpu" backend, the
 * reference, on the same random f32 inputs (fixed seeds). Inputs are made on the
 * host, copied to the device with be->copy, the op runs on both backends, the
 * device result comes back after be->synchronize, and the two are compared by
 * normalised error, max|gpu - cpu| / max(max|cpu|, tiny) (ggml style).
 *
 * Tolerances (stated below the includes): ops that stay in f32 (bias_add, the
 * activations, scale_add, scale_cols, colsum_mul_add, fill, add, copy2d, softmax,
 * layernorm, attn_merge, gemm with RINGVIT_CUDA_GEMM=f32) TOL_F32 or tighter, or
 * exact; the tensor-core paths with bf16 inputs and f32 accumulation looser
 * (attention output, gradients, and the log-sum-exp as an absolute error). The
 * attention tests run twice: as built, and with RINGVIT_CUDA_ATTN=simple (the
 * plain f32 kernel); span masks (RV_MASK_SPAN) too. Every comparison is printed (one "cuda_ops:" line
 * per check, and a WORST line per test) so a device run shows the margins.
 *
 * Outputs that the contract says are overwritten start as NaN, so a kernel that
 * reads them shows; rows that see no key must come back as o = 0, lse = -inf.
 * Exits 77 (skipped) when the build has no CUDA backend or the machine no GPU. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_attention.h"
#include "ref_ops.h"
#include "rv_backend.h"
#include "rv_cuda.h"

/* Tolerances (normalised errors, nerr: max |gpu - cpu| / max |cpu|; the
 * log-sum-exp by lse_err, its largest absolute difference: a difference of logs is
 * the relative difference of the sums they are logs of). Device and host run
 * other orders of f32 operations (epsilon 1.2e-7), or bf16 inputs (8 bits of
 * mantissa, 2^-8 = 3.9e-3) with f32 accumulation:
 *   one or two f32 roundings an entry (scale_add, add, gemm with k = 0): */
#define TOL_ROUNDING 1e-6
/*   colsum_mul_add: both sum in double and round to f32 once, then add: */
#define TOL_COLSUM 2.5e-7
/*   f32 ops with a reduction or a polynomial (activations, softmax, layernorm,
 *   attn_merge, the f32 gemm), and bias_add held to the same: */
#define TOL_F32 1e-5
/*   the tensor-core gemm, bf16 inputs, f32 sums over k: */
#define TOL_GEMM_BF16 1e-2
/*   attention on the plain f32 kernel (RINGVIT_CUDA_ATTN=simple): */
#define TOL_ATTN_F32 1e-4
/*   attention on the bf16 tensor-core kernels (Q, K, V and P rounded to bf16): */
#define TOL_ATTN_BF16 2e-2

#ifdef RINGVIT_HAVE_CUDA

/* ---- backends and device buffers ------------------------------------------------- */

static rv_backend *make_cpu(void)
{
    rv_backend *be = NULL;
    rv_status st = rv_backend_cpu_create(0, &be);
    cr_assert_eq(st, RV_OK, "cpu backend: %s", rv_last_error());
    return be;
}

/* A fresh "cuda" backend: environment switches (RINGVIT_CUDA_GEMM, RINGVIT_CUDA_ATTN)
 * set before this call are seen whether they are read per backend or per call. */
static rv_backend *make_gpu(void)
{
    rv_backend *be = NULL;
    rv_status st = rv_backend_cuda_create(-1, &be);
    cr_assert_eq(st, RV_OK, "cuda backend: %s", rv_last_error());
    cr_assert_not_null(be);
    return be;
}

/* Device copy of `bytes` bytes of host memory (at least 4 bytes are allocated, so
 * empty tensors still get a valid pointer). */
static void *up_bytes(rv_backend *g, const void *host, size_t bytes)
{
    void *d = NULL;
    size_t n = bytes ? bytes : 4;
    rv_status st = g->alloc(g, n, &d);
    cr_assert_eq(st, RV_OK, "cuda alloc %zu bytes: %s", n, rv_last_error());
    if (bytes) {
        st = g->copy(g, d, host, bytes, RV_COPY_HOST_TO_DEVICE);
        cr_assert_eq(st, RV_OK, "copy to device (%zu bytes): %s", bytes, rv_last_error());
    }
    return d;
}

static float *up(rv_backend *g, const float *host, size_t n)
{
    return up_bytes(g, host, n * sizeof(float));
}

/* Waits for the device, then copies `bytes` back to the host. */
static void down_bytes(rv_backend *g, void *host, const void *dev, size_t bytes)
{
    rv_status st = g->synchronize(g);
    cr_assert_eq(st, RV_OK, "synchronize: %s", rv_last_error());
    if (bytes) {
        st = g->copy(g, host, dev, bytes, RV_COPY_DEVICE_TO_HOST);
        cr_assert_eq(st, RV_OK, "copy to host (%zu bytes): %s", bytes, rv_last_error());
    }
    st = g->synchronize(g);
    cr_assert_eq(st, RV_OK, "synchronize: %s", rv_last_error());
}

static void down(rv_backend *g, float *host, const float *dev, size_t n)
{
    down_bytes(g, host, dev, n * sizeof(float));
}

static void dfree(rv_backend *g, void *p)
{
    g->free(g, p);
}

/* n floats, all `value`. */
static float *filled(size_t n, float value)
{
    float *x = ref_alloc_f(n);
    for (size_t i = 0; i < n; i++)
        x[i] = value;
    return x;
}

/* ---- comparison ------------------------------------------------------------------- */

/* max|got - want| / max(max|want|, floor, 1e-30). Entries where both hold the same
 * infinity are exact and stay out of max|want|; a NaN on either side or an
 * infinity on one side only gives +inf. */
static double nerr_floor(const float *got, const float *want, size_t n, double floor)
{
    double max_err = 0.0, max_ref = 0.0;
    for (size_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];
        if (isnan(g) || isnan(w))
            return INFINITY;
        if (isinf(g) || isinf(w)) {
            if (g != w)
                return INFINITY;
            continue;
        }
        double e = fabs(g - w);
        max_err = e > max_err ? e : max_err;
        max_ref = fabs(w) > max_ref ? fabs(w) : max_ref;
    }
    double den = max_ref > floor ? max_ref : floor;
    return max_err / (den > 1e-30 ? den : 1e-30);
}

static double nerr(const float *got, const float *want, size_t n)
{
    return nerr_floor(got, want, n, 0.0);
}

/* Log-sum-exp check: the largest |got - want| where want is finite; +inf when got
 * is NaN or infinite there, or when want is -inf and got is not exactly -inf. */
static double lse_err(const float *got, const float *want, size_t n)
{
    double e = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(got[i]) || isnan(want[i]))
            return INFINITY;
        if (isinf(want[i])) {
            if (got[i] != want[i])
                return INFINITY;
            continue;
        }
        if (isinf(got[i]))
            return INFINITY;
        double d = fabs((double)got[i] - want[i]);
        e = d > e ? d : e;
    }
    return e;
}

static double max_abs(const float *x, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* Number of entries that are not bit-identical. */
static size_t count_diff(const void *a, const void *b, size_t bytes)
{
    const unsigned char *x = a, *y = b;
    size_t bad = 0;
    for (size_t i = 0; i < bytes; i++)
        bad += x[i] != y[i];
    return bad;
}

/* The worst check of the running test (error / tolerance), for its WORST line. */
static struct {
    double ratio, err, tol;
    char what[192];
} worst;

/* Records one comparison: prints it and fails the test (without stopping it) when
 * err > tol; a NaN error fails too. */
static void check(double err, double tol, const char *fmt, ...)
{
    char what[192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    int ok = err <= tol;
    printf("cuda_ops: %-72s err %9.3e  tol %.0e%s\n", what, err, tol, ok ? "" : "  FAILED");
    fflush(stdout);
    cr_expect(ok, "%s: error %.3e above %.0e", what, err, tol);
    double ratio = !ok ? INFINITY : tol > 0 ? err / tol : 0.0;
    if (ratio >= worst.ratio || worst.what[0] == 0) {
        worst.ratio = ratio;
        worst.err = err;
        worst.tol = tol;
        snprintf(worst.what, sizeof worst.what, "%s", what);
    }
}

static void summary(const char *test)
{
    printf("cuda_ops: WORST %s: %s: err %.3e tol %.0e\n", test, worst.what, worst.err,
           worst.tol);
    fflush(stdout);
}

#define OK_OR_FAIL(call, what)                                                              \
    do {                                                                                    \
        rv_status st_ = (call);                                                             \
        cr_assert_eq(st_, RV_OK, "%s: %s", what, rv_last_error());                         \
    } while (0)

/* ---- gemm --------------------------------------------------------------------------- */

typedef struct gemm_case {
    int m, n, k;
    float alpha, beta;
} gemm_case;

static const gemm_case gemm_cases[] = {
    {37, 53, 29, 0.75f, 0.5f},
    {128, 256, 64, 1.25f, -0.5f},
    {64, 96, 1024, 0.5f, 1.0f},
    {1, 300, 77, 1.0f, 0.25f},
    {45, 31, 40, -1.5f, 0.0f}, /* beta 0: C holds NaN on entry and must not be read */
    {37, 53, 0, 0.75f, 0.5f},  /* k = 0: C = beta * C */
};

/* Every stored entry of A and B, padding included, is random, so reading padding or
 * the wrong transpose shows; the padding columns of C must come back unchanged. */
static void gemm_suite(double tol, const char *mode)
{
    rv_backend *cpu = make_cpu(), *gpu = make_gpu();
    ref_rng rng = ref_rng_make(11);
    for (size_t ci = 0; ci < sizeof gemm_cases / sizeof gemm_cases[0]; ci++) {
        const gemm_case *gc = &gemm_cases[ci];
        const int m = gc->m, n = gc->n, k = gc->k;
        for (int t = 0; t < 4; t++) {
            const int ta = t >> 1, tb = t & 1;
            int a_rows = ta ? k : m, a_cols = ta ? m : k; /* stored shape of A */
            int b_rows = tb ? n : k, b_cols = tb ? k : n; /* stored shape of B */
            int lda = a_cols + 3, ldb = b_cols + 5, ldc = n + 7;
            size_t na = (size_t)a_rows * lda, nb = (size_t)b_rows * ldb, nc = (size_t)m * ldc;
            float *a = ref_alloc_f(na), *b = ref_alloc_f(nb), *c0 = ref_alloc_f(nc);
            ref_fill_uniform(&rng, a, na, -1.0f, 1.0f);
            ref_fill_uniform(&rng, b, nb, -1.0f, 1.0f);
            ref_fill_uniform(&rng, c0, nc, -1.0f, 1.0f);
            for (int i = 0; i < m; i++)
                for (int j = 0; j < ldc; j++)
                    if (j >= n)
                        c0[(size_t)i * ldc + j] = 1234.5f; /* padding: untouched */
                    else if (gc->beta == 0.0f)
                        c0[(size_t)i * ldc + j] = NAN;
            float *cc = ref_dup_f(c0, nc), *cg = ref_alloc_f(nc);
            OK_OR_FAIL(cpu->gemm(cpu, ta, tb, m, n, k, gc->alpha, a, lda, b, ldb, gc->beta, cc,
                                 ldc),
                       "cpu gemm");
            float *da = up(gpu, a, na), *db = up(gpu, b, nb), *dc = up(gpu, c0, nc);
            OK_OR_FAIL(gpu->gemm(gpu, ta, tb, m, n, k, gc->alpha, da, lda, db, ldb, gc->beta,
                                 dc, ldc),
                       "cuda gemm");
            down(gpu, cg, dc, nc);

            /* The m x n block, packed, and the padding, bit for bit. */
            float *bc = ref_alloc_f((size_t)m * n), *bg = ref_alloc_f((size_t)m * n);
            size_t pad_bad = 0;
            for (int i = 0; i < m; i++) {
                memcpy(bc + (size_t)i * n, cc + (size_t)i * ldc, sizeof(float) * n);
                memcpy(bg + (size_t)i * n, cg + (size_t)i * ldc, sizeof(float) * n);
                pad_bad += count_diff(cg + (size_t)i * ldc + n, c0 + (size_t)i * ldc + n,
                                      sizeof(float) * (size_t)(ldc - n));
            }
            check(nerr(bg, bc, (size_t)m * n), k == 0 ? TOL_ROUNDING : tol,
                  "gemm %s m=%d n=%d k=%d ta=%d tb=%d alpha=%g beta=%g", mode, m, n, k, ta, tb,
                  (double)gc->alpha, (double)gc->beta);
            cr_expect_eq(pad_bad, 0, "gemm %s m=%d n=%d k=%d ta=%d tb=%d: %zu padding bytes of C "
                         "changed", mode, m, n, k, ta, tb, pad_bad);
            dfree(gpu, da), dfree(gpu, db), dfree(gpu, dc);
            free(a), free(b), free(c0), free(cc), free(cg), free(bc), free(bg);
        }
    }
    summary(mode);
    rv_backend_free(&gpu);
    rv_backend_free(&cpu);
}

Test(cuda_ops, gemm_bf16, .timeout = 300)
{
    gemm_suite(TOL_GEMM_BF16, "bf16");
}

Test(cuda_ops, gemm_f32, .timeout = 300)
{
    setenv("RINGVIT_CUDA_GEMM", "f32", 1);
    gemm_suite(TOL_F32, "f32");
}

/* ---- element-wise and row ops ------------------------------------------------------- */

Test(cuda_ops, bias_add, .timeout = 120)
{
    rv_backend *cpu = make_cpu(), *gpu = make_gpu();
    ref_rng rng = ref_rng_make(21);
    const int shapes[][2] = {{37, 515}, {1000, 768}, {1, 1}};
    for (int s = 0; s < 3; s++) {
        int rows = shapes[s][0], cols = shapes[s][1];
        size_t n = (size_t)rows * cols;
        float *x = ref_alloc_f(n), *bias = ref_alloc_f(cols), *yg = ref_alloc_f(n);
        ref_fill_uniform(&rng, x, n, -2.0f, 2.0f);
        ref_fill_uniform(&rng, bias, cols, -1.0f, 1.0f);
        float *dx = up(gpu, x, n), *dbias = up(gpu, bias, cols);
        OK_OR_FAIL(cpu->bias_add(cpu, x, bias, rows, cols), "cpu bias_add");
        OK_OR_FAIL(gpu->bias_add(gpu, dx, dbias, rows, cols), "cuda bias_add");
        down(gpu, yg, dx, n);
        check(nerr(yg, x, n), TOL_F32, "bias_add rows=%d cols=%d", rows, cols);
        dfree(gpu, dx), dfree(gpu, dbias);
        free(x), free(bias), free(yg);
    }
    summary("bias_add");
    rv_backend_free(&gpu);
    rv_backend_free(&cpu);
}

static const rv_act all_acts[] = {RV_ACT_GELU, RV_ACT_GELU_TANH, RV_ACT_QUICK_GELU};
static const char *const act_names[] = {"gelu", "gelu_tanh", "quick_gelu"};

/* Every activation, forward and backward, out of place (outputs start as NaN)
 * and in place (y = x, dx = dy), on random inputs with far tails and tiny values
 * planted where a careless formula overflows or loses 0. */
Test(cuda_ops, act, .timeout = 120)
{
    rv_backend *cpu = make_cpu(), *gpu = make_gpu();
    ref_rng rng = ref_rng_make(31);
    const size_t sizes[] = {100003, 1, 4096, 0};
    for (int a = 0; a < 3; a++)
        for (int s = 0; s < 4; s++) {
            rv_act act = all_acts[a];
            const char *name = act_names[a];
            size_t n = sizes[s];
            float *x = ref_alloc_f(n), *dy = ref_alloc_f(n);
            ref_fill_normal(&rng, x, n, 0.0f, 3.0f);
            ref_fill_uniform(&rng, dy, n, -1.0f, 1.0f);
            const float special[] = {-30.0f, -10.0f, -5.0f, 0.0f, 5.0f, 10.0f, 30.0f, 1e-20f,
                                     -80.0f, 3e38f, -3e38f};
            for (size_t i = 0; i < 11 && i < n; i++)
                x[i] = special[i];
            float *yc = filled(n, NAN), *dxc = filled(n, NAN);
            float *yg = ref_alloc_f(n), *dxg = ref_alloc_f(n);
            float *d_x = up(gpu, x, n), *d_dy = up(gpu, dy, n), *d_y = up(gpu, yc, n),
                  *d_dx = up(gpu, dxc, n);
            OK_OR_FAIL(cpu->act_fwd(cpu, act, x, yc, n), "cpu act_fwd");
            OK_OR_FAIL(cpu->act_bwd(cpu, act, x, dy, dxc, n), "cpu act_bwd");
            OK_OR_FAIL(gpu->act_fwd(gpu, act, d_x, d_y, n), "cuda act_fwd");
            OK_OR_FAIL(gpu->act_bwd(gpu, act, d_x, d_dy, d_dx, n), "cuda act_bwd");
            down(gpu, yg, d_y, n);
            down(gpu, dxg, d_dx, n);
            check(nerr(yg, yc, n), TOL_F32, "act_fwd %s n=%zu", name, n);
            check(nerr(dxg, dxc, n), TOL_F32, "act_bwd %s n=%zu", name, n);

            /* In place: the device's in-place results equal its out-of-place ones. */
            OK_OR_FAIL(gpu->act_bwd(gpu, act, d_x, d_dy, d_dy, n), "cuda act_bwd in place");
            OK_OR_FAIL(gpu->act_fwd(gpu, act, d_x, d_x, n), "cuda act_fwd in place");
            float *yi = ref_alloc_f(n), *dxi = ref_alloc_f(n);
            down(gpu, yi, d_x, n);
            down(gpu, dxi, d_dy, n);
            check((double)count_diff(yi, yg, n * sizeof(float)), 0,
                  "act_fwd %s n=%zu in place (bytes differing)", name, n);
            check((double)count_diff(dxi, dxg, n * sizeof(float)), 0,
                  "act_bwd %s n=%zu in place (bytes differing)", name, n);
            dfree(gpu, d_x), dfree(gpu, d_dy), dfree(gpu, d_y), dfree(gpu, d_dx);
            free(x), free(dy), free(yc), free(dxc), free(yg), free(dxg), free(yi), free(dxi);
        }
    summary("act");
    rv_backend_free(&gpu);
    rv_backend_free(&cpu);
}

/* |got - want| / max(|want|, FLT_MIN), worst over the array (NaN: +inf). */
static double elem_err_max(const float *got, const float *want, size_t n)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (got[i] == want[i])
            continue;
        double den = fabs(want[i]) > FLT_MIN ? fabs(want[i]) : FLT_MIN;
        double e = fabs((double)got[i] - want[i]) / den;
        if (!(e <= worst))
            worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

/* Every element of the forward over the tails (down to subnormal outputs for the
 * sigmoid forms), against the CPU, relatively: the tiny outputs of the negative
 * side must be as accurate on the device. */
Test(cuda_ops, act_tails, .timeout = 120)
{
    rv_backend *cpu = make_cpu(), *gpu = make_gpu();
    enum { N = 4801 };
    for (int a = 0; a < 3; a++) {
        rv_act act = all_acts[a];
        float lo = act == RV_ACT_QUICK_GELU ? -64.0f : -12.0f, step = -2.0f * lo / (N - 1);
        float *x = ref_alloc_f(N), *yc = ref_alloc_f(N), *yg = ref_alloc_f(N);
        for (int i = 0; i < N; i++)
            x[i] = lo + step * (float)i;
        float *d_x = up(gpu, x, N), *d_y = up(gpu, yc, N);
        OK_OR_FAIL(cpu->act_fwd(cpu, act, x, yc, N), "cpu act_fwd");
        OK_OR_FAIL(gpu->act_fwd(gpu, act, d_x, d_y, N), "cuda act_fwd");
        down(gpu, yg, d_y, N);
        check(elem_err_max(yg, yc, N), TOL_F32, "act_fwd %s elementwise x in [%g, %g]",
              act_names[a], (double)lo, (double)-lo);
        dfree(gpu, d_x), dfree(gpu, d_y);
        free(x), free(yc), free(yg);
    }
    summary("act_tails");
    rv_backend_free(&gpu);
    rv_backend_free(&cpu);
}

static const int scale_shapes[][2] = {{37, 515}, {1000, 768}, {1, 1}, {0, 7}, {2049, 33}};
#define N_SCALE_SHAPES (int)(sizeof scale_shapes / sizeof scale_shapes[0])

/* scale_add and scale_cols: one multiply-add (or multiply) per element, so the two
 * backends agree to rounding; nothing past the tensor is written. */
Test(cuda_ops, scale, .timeout = 120)
{
    rv_backend *cpu = make_cpu(), *gpu = make_gpu();
    ref_rng rng = ref_rng_make(81);
    const size_t tail = 29;
    for (int s = 0; s < N_SCALE_SHAPES; s++) {
        int rows = scale_shapes[s][0], cols = scale_shapes[s][1];
        size_t n = (size_t)rows * cols;
        float *y = ref_alloc_f(n + tail), *x = ref_alloc_f(n), *gamma = ref_alloc_f(cols);
        ref_fill_uniform(&rng, y, n + tail, -2.0f, 2.0f);
        ref_fill_uniform(&rng, x, n, -2.0f, 2.0f);
        ref_fill_normal(&rng, gamma, cols, 0.0f, 0.3f);
        float *d_y = up(gpu, y, n + tail), *d_x = up(gpu, x, n), *d_g = up(gpu, gamma, cols);
        float *yg = ref_alloc_f(n + tail), *xg = ref_alloc_f(n);

        OK_OR_FAIL(cpu->scale_add(cpu, y, x, gamma, rows, cols), "cpu scale_add");
        OK_OR_FAIL(gpu->scale_add(gpu, d_y, d_x, d_g, rows, cols), "cuda scale_add");
        down(gpu, yg, d_y, n + tail);
        check(nerr(yg, y, n + tail), TOL_ROUNDING, "scale_add rows=%d cols=%d (tail of %zu untouched)",
              rows, cols, tail);

        OK_OR_FAIL(cpu->scale_cols(cpu, x, gamma, rows, cols), "cpu scale_cols");
        OK_OR_FAIL(gpu->scale_cols(gpu, d_x, d_g, rows, cols), "cuda scale_cols");
        down(gpu, xg, d_x, n);
        check((double)count_diff(xg, x, n * sizeof(float)), 0,
              "scale_cols rows=%d cols=%d (bytes differing)", rows, cols);
        dfree(gpu, d_y), dfree(gpu, d_x), dfree(gpu, d_g);
        free(y), free(x), free(gamma), free(yg), free(xg);
    }
    summary("scale");
    rv_backend_free(&gpu);
    rv_backend_free(&cpu);
}

/* colsum_mul_add: both sum in double (in different orders), so the float results
 * agree to the last bit or nearly; a third of a is 1e4 times larger, so a float
 * accumulation would not. rows = 0 leaves dst as it is. */
Test(cuda_ops, colsum_mul_add, .timeout = 120)
{
    rv_backend *cpu = make_cpu(), *gpu = make_gpu();
    ref_rng rng = ref_rng_make(91);
    const int shapes[][2] = {{1003, 37}, {4096, 768}, {1, 1}, {0, 7}, {3000, 130}};
    for (int s = 0; s < 5; s++) {
        int rows = shapes[s][0], cols = shapes[s][1];
        size_t n = (size_t)rows * cols;
        float *a = ref_alloc_f(n), *b = ref_alloc_f(n), *dst = ref_alloc_f(cols);
        ref_fill_uniform(&rng, a, n, -1.0f, 1.0f);
        ref_fill_uniform(&rng, b, n, -1.0f, 1.0f);
        for (size_t i = 0; i < n; i += 3)
            a[i] *= 1e4f;
        ref_fill_uniform(&rng, dst, cols, -1.0f, 1.0f);
        float *d_a = up(gpu, a, n), *d_b = up(gpu, b, n), *d_d = up(gpu, dst, cols);
        float *dg = ref_alloc_f(cols);
        OK_OR_FAIL(cpu->colsum_mul_add(cpu, a, b, rows, cols, dst), "cpu colsum_mul_add");
        OK_OR_FAIL(gpu->colsum_mul_add(gpu, d_a, d_b, rows, cols, d_d), "cuda colsum_mul_add");
        down(gpu, dg, d_d, cols);
        check(nerr(dg, dst, cols), TOL_COLSUM, "colsum_mul_add rows=%d cols=%d", rows, cols);
        dfree(gpu, d_a), dfree(gpu, d_b), dfree(gpu, d_d);
        free(a), free(b), free(dst), free(dg);
    }
    summary("colsum_mul_add");
    rv_backend_free(&gpu);
    rv_backend_free(&cpu);
}

/* fill, add, copy2d and device-to-device copy: exact, and nothing past the end
 * (or between the rows) is written. */
Test(cuda_ops, memops, .timeout = 120)
{
    rv_backend *cpu = make_cpu(), *gpu = make_gpu();
    ref_rng rng = ref_rng_make(41);
    const size_t n = 100003, tail = 61;

    /* fill: n entries of a buffer of n + tail. */
    float *xc = filled(n + tail, 7.0f), *xg = ref_alloc_f(n + tail);
    float *dx = up(gpu, xc, n + tail);
    OK_OR_FAIL(cpu->fill(cpu, xc, -2.75f, n), "cpu fill");
    OK_OR_FAIL(gpu->fill(gpu, dx, -2.75f, n), "cuda fill");
    down(gpu, xg, dx, n + tail);
    size_t bad = count_diff(xg, xc, sizeof(float) * (n + tail));
    check((double)bad, 0, "fill n=%zu (bytes differing, tail of %zu untouched)", n, tail);

    /* add: y[i] += x[i] for i < n. */
    float *y = ref_alloc_f(n + tail), *a = ref_alloc_f(n + tail), *yg = ref_alloc_f(n + tail);
    ref_fill_uniform(&rng, y, n + tail, -1.0f, 1.0f);
    ref_fill_uniform(&rng, a, n + tail, -1.0f, 1.0f);
    float *dy = up(gpu, y, n + tail), *da = up(gpu, a, n + tail);
    OK_OR_FAIL(cpu->add(cpu, y, a, n), "cpu add");
    OK_OR_FAIL(gpu->add(gpu, dy, da, n), "cuda add");
    down(gpu, yg, dy, n + tail);
    check(nerr(yg, y, n + tail), TOL_ROUNDING, "add n=%zu (with an untouched tail of %zu)", n, tail);

    /* copy D2D: a's device copy into the fill buffer. */
    OK_OR_FAIL(gpu->copy(gpu, dx, da, sizeof(float) * n, RV_COPY_DEVICE_TO_DEVICE),
               "cuda copy device to device");
    down(gpu, xg, dx, n);
    check((double)count_diff(xg, a, sizeof(float) * n), 0, "copy device to device n=%zu", n);
    dfree(gpu, dx), dfree(gpu, dy), dfree(gpu, da);
    free(xc), free(xg), free(y), free(a), free(yg);

    /* copy2d: rows of width bytes, dpitch != spitch != width; float-aligned, then odd. */
    const size_t c2[][4] = {{148, 200, 260, 33}, {150, 203, 257, 17}, {64, 64, 96, 1}};
    for (int t = 0; t < 3; t++) {
        size_t width = c2[t][0], sp = c2[t][1], dp = c2[t][2], rows = c2[t][3];
        size_t sbytes = sp * rows, dbytes = dp * rows;
        unsigned char *src = malloc(sbytes), *dc = malloc(dbytes), *dg = malloc(dbytes);
        cr_assert(src && dc && dg);
        for (size_t i = 0; i < sbytes; i++)
            src[i] = (unsigned char)(ref_rng_u64(&rng) & 0xff);
        memset(dc, 0xa5, dbytes);
        void *dsrc = up_bytes(gpu, src, sbytes), *ddst = up_bytes(gpu, dc, dbytes);
        OK_OR_FAIL(cpu->copy2d(cpu, dc, dp, src, sp, width, rows), "cpu copy2d");
        OK_OR_FAIL(gpu->copy2d(gpu, ddst, dp, dsrc, sp, width, rows), "cuda copy2d");
        down_bytes(gpu, dg, ddst, dbytes);
        check((double)count_diff(dg, dc, dbytes), 0,
              "copy2d width=%zu spitch=%zu dpitch=%zu rows=%zu (bytes differing)", width, sp,
              dp, rows);
        dfree(gpu, dsrc), dfree(gpu, ddst);
        free(src), free(dc), free(dg);
    }
    summary("memops");
    rv_backend_free(&gpu);
    rv_backend_free(&cpu);
}

Test(cuda_ops, softmax, .timeout = 120)
{
    rv_backend *cpu = make_cpu(), *gpu = make_gpu();
    ref_rng rng = ref_rng_make(51);
    const int shapes[][2] = {{67, 1000}, {5, 5}, {33, 4097}, {16, 1}};
    for (int s = 0; s < 4; s++) {
        int rows = shapes[s][0], cols = shapes[s][1];
        size_t n = (size_t)rows * cols;
        float *x = ref_alloc_f(n);
        ref_fill_normal(&rng, x, n, 0.0f, 3.0f);
        /* Masked entries: about 15% -inf; row 1 all -inf (=> all 0); row 2 all but
         * one (=> a single 1). */
        for (size_t i = 0; i < n; i++)
            if (ref_rng_uniform(&rng) < 0.15)
                x[i] = -INFINITY;
        if (rows > 2) {
            for (int j = 0; j < cols; j++) {
                x[(size_t)cols + j] = -INFINITY;
                x[(size_t)2 * cols + j] = j == cols / 2 ? 1.5f : -INFINITY;
            }
        }
        float *yc = filled(n, NAN), *yg = ref_alloc_f(n);
        float *dx = up(gpu, x, n), *dy = up(gpu, yc, n);
        OK_OR_FAIL(cpu->softmax_fwd(cpu, x, yc, rows, cols), "cpu softmax_fwd");
        OK_OR_FAIL(gpu->softmax_fwd(gpu, dx, dy, rows, cols), "cuda softmax_fwd");
        down(gpu, yg, dy, n);
        check(nerr(yg, yc, n), TOL_F32, "softmax rows=%d cols=%d (with -inf entries)", rows, cols);
        size_t masked_bad = 0;
        for (size_t i = 0; i < n; i++)
            masked_bad += x[i] == -INFINITY && yg[i] != 0.0f;
        cr_expect_eq(masked_bad, 0, "softmax rows=%d cols=%d: %zu -inf entries are not 0", rows,
                     cols, masked_bad);
        dfree(gpu, dx), dfree(gpu, dy);
        free(x), free(yc), free(yg);
    }
    summary("softmax");
    rv_backend_free(&gpu);
    rv_backend_free(&cpu);
}

static const int ln_shapes[][2] = {{65, 768}, {3, 1000}, {130, 33}, {1, 4096}, {257, 768}};

Test(cuda_ops, layernorm_fwd, .timeout = 120)
{
    rv_backend *cpu = make_cpu(), *gpu = make_gpu();
    ref_rng rng = ref_rng_make(61);
    for (int s = 0; s < 5; s++) {
        int rows = ln_shapes[s][0], cols = ln_shapes[s][1];
        size_t n = (size_t)rows * cols;
        const float eps = 1e-5f;
        float *x = ref_alloc_f(n), *w = ref_alloc_f(cols), *b = ref_alloc_f(cols);
        /* A mean far from 0 against the spread: a one-pass variance would cancel. */
        ref_fill_normal(&rng, x, n, 3.0f, 2.0f);
        ref_fill_normal(&rng, w, cols, 1.0f, 0.5f);
        ref_fill_uniform(&rng, b, cols, -1.0f, 1.0f);
        for (int inplace = 0; inplace < 2; inplace++) {
            float *yc = inplace ? ref_dup_f(x, n) : filled(n, NAN);
            float *mc = filled(rows, NAN), *rc = filled(rows, NAN);
            float *yg = ref_alloc_f(n), *mg = ref_alloc_f(rows), *rg = ref_alloc_f(rows);
            float *d_x = up(gpu, x, n), *d_w = up(gpu, w, cols), *d_b = up(gpu, b, cols);
            float *d_y = inplace ? d_x : up(gpu, yc, n);
            float *d_m = up(gpu, mc, rows), *d_r = up(gpu, rc, rows);
            OK_OR_FAIL(cpu->layernorm_fwd(cpu, inplace ? yc : x, w, b, rows, cols, eps, yc, mc,
                                          rc),
                       "cpu layernorm_fwd");
            OK_OR_FAIL(gpu->layernorm_fwd(gpu, d_x, d_w, d_b, rows, cols, eps, d_y, d_m, d_r),
                       "cuda layernorm_fwd");
            down(gpu, yg, d_y, n);
            down(gpu, mg, d_m, rows);
            down(gpu, rg, d_r, rows);
            const char *how = inplace ? " in place" : "";
            check(nerr(yg, yc, n), TOL_F32, "layernorm_fwd y rows=%d cols=%d%s", rows, cols, how);
            check(nerr(mg, mc, rows), TOL_F32, "layernorm_fwd mean rows=%d cols=%d%s", rows, cols,
                  how);
            check(nerr(rg, rc, rows), TOL_F32, "layernorm_fwd rstd rows=%d cols=%d%s", rows, cols,
                  how);
            if (!inplace)
                dfree(gpu, d_y);
            dfree(gpu, d_x), dfree(gpu, d_w), dfree(gpu, d_b), dfree(gpu, d_m), dfree(gpu, d_r);
            free(yc), free(mc), free(rc), free(yg), free(mg), free(rg);
        }
        free(x), free(w), free(b);
    }
    summary("layernorm_fwd");
    rv_backend_free(&gpu);
    rv_backend_free(&cpu);
}

Test(cuda_ops, layernorm_bwd, .timeout = 120)
{
    rv_backend *cpu = make_cpu(), *gpu = make_gpu();
    ref_rng rng = ref_rng_make(71);
    for (int s = 0; s < 5; s++) {
        int rows = ln_shapes[s][0], cols = ln_shapes[s][1];
        size_t n = (size_t)rows * cols;
        float *x = ref_alloc_f(n), *w = ref_alloc_f(cols), *b = ref_alloc_f(cols);
        float *dy = ref_alloc_f(n), *y = ref_alloc_f(n);
        float *mean = ref_alloc_f(rows), *rstd = ref_alloc_f(rows);
        ref_fill_normal(&rng, x, n, 3.0f, 2.0f);
        ref_fill_normal(&rng, w, cols, 1.0f, 0.5f);
        ref_fill_uniform(&rng, b, cols, -1.0f, 1.0f);
        ref_fill_uniform(&rng, dy, n, -1.0f, 1.0f);
        /* mean and rstd from the CPU forward feed both backwards. */
        OK_OR_FAIL(cpu->layernorm_fwd(cpu, x, w, b, rows, cols, 1e-5f, y, mean, rstd),
                   "cpu layernorm_fwd");
        /* dx is overwritten (NaN on entry); dw, db accumulate into non-zero values of
         * the size of the gradient. */
        float *dxc = filled(n, NAN), *dwc = ref_alloc_f(cols), *dbc = ref_alloc_f(cols);
        float g = sqrtf((float)rows);
        ref_fill_uniform(&rng, dwc, cols, -g, g);
        ref_fill_uniform(&rng, dbc, cols, -g, g);
        float *dxg = ref_alloc_f(n), *dwg = ref_alloc_f(cols), *dbg = ref_alloc_f(cols);
        float *d_dy = up(gpu, dy, n), *d_x = up(gpu, x, n), *d_w = up(gpu, w, cols);
        float *d_m = up(gpu, mean, rows), *d_r = up(gpu, rstd, rows);
        float *d_dx = up(gpu, dxc, n), *d_dw = up(gpu, dwc, cols), *d_db = up(gpu, dbc, cols);
        OK_OR_FAIL(cpu->layernorm_bwd(cpu, dy, x, w, mean, rstd, rows, cols, dxc, dwc, dbc),
                   "cpu layernorm_bwd");
        OK_OR_FAIL(gpu->layernorm_bwd(gpu, d_dy, d_x, d_w, d_m, d_r, rows, cols, d_dx, d_dw,
                                      d_db),
                   "cuda layernorm_bwd");
        down(gpu, dxg, d_dx, n);
        down(gpu, dwg, d_dw, cols);
        down(gpu, dbg, d_db, cols);
        check(nerr(dxg, dxc, n), TOL_F32, "layernorm_bwd dx rows=%d cols=%d", rows, cols);
        check(nerr(dwg, dwc, cols), TOL_F32, "layernorm_bwd dw (accumulated) rows=%d cols=%d", rows,
              cols);
        check(nerr(dbg, dbc, cols), TOL_F32, "layernorm_bwd db (accumulated) rows=%d cols=%d", rows,
              cols);
        dfree(gpu, d_dy), dfree(gpu, d_x), dfree(gpu, d_w), dfree(gpu, d_m), dfree(gpu, d_r);
        dfree(gpu, d_dx), dfree(gpu, d_dw), dfree(gpu, d_db);
        free(x), free(w), free(b), free(dy), free(y), free(mean), free(rstd);
        free(dxc), free(dwc), free(dbc), free(dxg), free(dwg), free(dbg);
    }
    summary("layernorm_bwd");
    rv_backend_free(&gpu);
    rv_backend_free(&cpu);
}

/* ---- attention ---------------------------------------------------------------------- */

Test(cuda_ops, attn_merge, .timeout = 120)
{
    rv_backend *cpu = make_cpu(), *gpu = make_gpu();
    ref_rng rng = ref_rng_make(81);
    const int shapes[][3] = {{200, 4, 64}, {63, 1, 128}, {1, 3, 48}};
    for (int s = 0; s < 3; s++) {
        int sq = shapes[s][0], heads = shapes[s][1], dim = shapes[s][2];
        size_t no = (size_t)sq * heads * dim, nl = (size_t)heads * sq;
        float *o = ref_alloc_f(no), *o2 = ref_alloc_f(no);
        float *lse = ref_alloc_f(nl), *lse2 = ref_alloc_f(nl);
        ref_fill_uniform(&rng, o, no, -1.0f, 1.0f);
        ref_fill_uniform(&rng, o2, no, -1.0f, 1.0f);
        ref_fill_uniform(&rng, lse, nl, -5.0f, 5.0f);
        ref_fill_uniform(&rng, lse2, nl, -5.0f, 5.0f);
        /* Row pattern over (head h, query i), lse index h * sq + i: one side empty
         * (lse -inf, o 0), both empty, and lse 160 apart (naive exp overflows). */
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < sq; i++) {
                size_t li = (size_t)h * sq + i, oi = ((size_t)i * heads + h) * dim;
                int kind = (int)(li % 7);
                if (kind == 1 || kind == 3) {
                    lse[li] = -INFINITY;
                    memset(o + oi, 0, sizeof(float) * dim);
                }
                if (kind == 2 || kind == 3) {
                    lse2[li] = -INFINITY;
                    memset(o2 + oi, 0, sizeof(float) * dim);
                }
                if (kind == 4)
                    lse[li] = 80.0f, lse2[li] = -80.0f;
                if (kind == 5)
                    lse[li] = -80.0f, lse2[li] = 80.0f;
            }
        float *d_o = up(gpu, o, no), *d_o2 = up(gpu, o2, no);
        float *d_l = up(gpu, lse, nl), *d_l2 = up(gpu, lse2, nl);
        float *og = ref_alloc_f(no), *lg = ref_alloc_f(nl);
        OK_OR_FAIL(cpu->attn_merge(cpu, o, lse, o2, lse2, sq, heads, dim), "cpu attn_merge");
        OK_OR_FAIL(gpu->attn_merge(gpu, d_o, d_l, d_o2, d_l2, sq, heads, dim), "cuda attn_merge");
        down(gpu, og, d_o, no);
        down(gpu, lg, d_l, nl);
        check(nerr(og, o, no), TOL_F32, "attn_merge o sq=%d heads=%d dim=%d", sq, heads, dim);
        check(nerr(lg, lse, nl), TOL_F32, "attn_merge lse sq=%d heads=%d dim=%d", sq, heads, dim);
        /* A side with lse -inf contributes exactly nothing: those rows are exact. */
        size_t bad = 0;
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < sq; i++) {
                size_t li = (size_t)h * sq + i, oi = ((size_t)i * heads + h) * dim;
                int kind = (int)(li % 7);
                if (kind >= 1 && kind <= 3)
                    bad += count_diff(og + oi, o + oi, sizeof(float) * dim) +
                           count_diff(lg + li, lse + li, sizeof(float));
            }
        check((double)bad, 0, "attn_merge sq=%d heads=%d dim=%d: empty side exact (bytes)", sq,
              heads, dim);
        dfree(gpu, d_o), dfree(gpu, d_o2), dfree(gpu, d_l), dfree(gpu, d_l2);
        free(o), free(o2), free(lse), free(lse2), free(og), free(lg);
    }
    summary("attn_merge");
    rv_backend_free(&gpu);
    rv_backend_free(&cpu);
}

typedef struct attn_case {
    int sq, sk, heads, dim;
    rv_attn_mask mask;
    float scale; /* 0: 1/sqrt(dim) */
} attn_case;

typedef struct attn_tol {
    double o, lse, grad;
    const char *mode;
} attn_tol;

#define MAX_ATTN_CASES 256

/* The shape grid: heads {1, 4} x dim {32, 64, 128, 48 (no tensor-core kernel)} x
 * (sq, sk) pairs with sq != sk and sk = 0, no mask and causal; then causal blocks at
 * global offsets: rows that see no key, fully masked blocks, keys all in the past.
 * The scale alternates between 0 (1/sqrt(dim)) and 0.0625 (below 1/sqrt(dim) for
 * every dim here: bf16 rounding of q and k moves a score by ~|score| * 2^-8, and the
 * lse tolerance is absolute). */
static int attn_cases(attn_case *out)
{
    static const int dims[] = {32, 64, 128, 48}, heads[] = {1, 4};
    static const int seqs[][2] = {{1, 1},     {63, 63},  {200, 200}, {1000, 1000}, {63, 1000},
                                  {1000, 63}, {200, 0},  {1, 200},   {200, 1}};
    int n = 0;
    for (int di = 0; di < 4; di++)
        for (int hi = 0; hi < 2; hi++)
            for (size_t si = 0; si < sizeof seqs / sizeof seqs[0]; si++)
                for (int causal = 0; causal < 2; causal++) {
                    rv_attn_mask m = {.kind = causal ? RV_MASK_CAUSAL : RV_MASK_NONE, .q_start = 0, .k_start = 0};
                    out[n] = (attn_case){seqs[si][0], seqs[si][1], heads[hi], dims[di], m,
                                         (n / 2) % 2 ? 0.0625f : 0.0f};
                    n++;
                }
    static const struct {
        int sq, sk;
        int64_t q0, k0;
    } off[] = {
        {200, 200, 0, 100},  /* the first 100 rows see no key */
        {63, 200, 0, 1000},  /* keys all in the future: a fully masked block */
        {200, 257, 1000, 0}, /* keys all in the past: nothing masked */
        {63, 1000, 900, 0},  /* staircase at the end of a long key block */
        {1000, 63, 0, 500},  /* rows < 500 see nothing, then a staircase, then all */
        {1, 1000, 999, 0},   /* one query that sees every key */
        {1000, 1000, 0, 1},  /* shifted diagonal: row 0 sees nothing */
    };
    static const int dh[][2] = {{64, 4}, {128, 4}, {48, 1}};
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++)
        for (int j = 0; j < 3; j++) {
            rv_attn_mask m = {.kind = RV_MASK_CAUSAL, .q_start = off[i].q0, .k_start = off[i].k0};
            out[n] = (attn_case){off[i].sq, off[i].sk, dh[j][1], dh[j][0], m,
                                 (n % 2) ? 0.0625f : 0.0f};
            n++;
        }
    cr_assert_leq(n, MAX_ATTN_CASES);
    return n;
}

/* A case's label for the check lines. */
static const char *case_label(const attn_case *c, char *buf, size_t len)
{
    if (c->mask.kind == RV_MASK_SPAN)
        snprintf(buf, len, "H=%d d=%d sq=%d sk=%d span reach=%g%s q0=%lld k0=%lld scale=%g",
                 c->heads, c->dim, c->sq, c->sk, c->mask.reach, c->mask.causal ? " causal" : "",
                 (long long)c->mask.q_start, (long long)c->mask.k_start, (double)c->scale);
    else if (c->mask.kind == RV_MASK_CAUSAL)
        snprintf(buf, len, "H=%d d=%d sq=%d sk=%d causal q0=%lld k0=%lld scale=%g", c->heads,
                 c->dim, c->sq, c->sk, (long long)c->mask.q_start, (long long)c->mask.k_start,
                 (double)c->scale);
    else
        snprintf(buf, len, "H=%d d=%d sq=%d sk=%d scale=%g", c->heads, c->dim, c->sq, c->sk,
                 (double)c->scale);
    return buf;
}

/* Random q, k (N(0, 1): scores of spread ~1 at the default scale) and v, dout
 * (uniform in [-1, 1]). */
typedef struct attn_data {
    float *q, *k, *v, *dout;
    size_t nq, nk, nl;
} attn_data;

static attn_data attn_data_make(const attn_case *c, uint64_t seed)
{
    attn_data d;
    ref_rng rng = ref_rng_make(seed);
    d.nq = (size_t)c->sq * c->heads * c->dim;
    d.nk = (size_t)c->sk * c->heads * c->dim;
    d.nl = (size_t)c->heads * c->sq;
    d.q = ref_alloc_f(d.nq), d.k = ref_alloc_f(d.nk), d.v = ref_alloc_f(d.nk);
    d.dout = ref_alloc_f(d.nq);
    ref_fill_normal(&rng, d.q, d.nq, 0.0f, 1.0f);
    ref_fill_normal(&rng, d.k, d.nk, 0.0f, 1.0f);
    ref_fill_uniform(&rng, d.v, d.nk, -1.0f, 1.0f);
    ref_fill_uniform(&rng, d.dout, d.nq, -1.0f, 1.0f);
    return d;
}

static void attn_data_free(attn_data *d)
{
    free(d->q), free(d->k), free(d->v), free(d->dout);
}

/* Rows whose reference lse is -inf must have o exactly 0 on the device. */
static size_t empty_rows_not_zero(const attn_case *c, const float *og, const float *lse_ref)
{
    size_t bad = 0;
    for (int h = 0; h < c->heads; h++)
        for (int i = 0; i < c->sq; i++) {
            if (lse_ref[(size_t)h * c->sq + i] != -INFINITY)
                continue;
            const float *row = og + ((size_t)i * c->heads + h) * c->dim;
            for (int x = 0; x < c->dim; x++)
                if (row[x] != 0.0f) {
                    bad++;
                    break;
                }
        }
    return bad;
}

static void check_fwd_out(const attn_case *c, const attn_tol *t, const char *what,
                          const float *og, const float *oc, const float *lg, const float *lc,
                          size_t nq, size_t nl)
{
    char lab[160];
    case_label(c, lab, sizeof lab);
    check(nerr(og, oc, nq), t->o, "%s %s o %s", what, t->mode, lab);
    check(lse_err(lg, lc, nl), t->lse, "%s %s lse %s", what, t->mode, lab);
    size_t bad = empty_rows_not_zero(c, og, lc);
    cr_expect_eq(bad, 0, "%s %s %s: %zu rows that see no key have o != 0", what, t->mode, lab,
                 bad);
}

/* The mask of case c as the device reads it: gm (a span mask's arrays in device
 * memory) where given, else the case's own. */
static rv_attn_mask dev_mask(const attn_case *c, const rv_attn_mask *gm)
{
    return gm ? *gm : c->mask;
}

/* m for the keys from chunk row k0 on: the global offset, and a span mask's key
 * arrays, move with them. */
static rv_attn_mask mask_from_key(rv_attn_mask m, int k0)
{
    m.k_start += k0;
    if (m.kind == RV_MASK_SPAN) {
        m.k_key += k0;
        if (m.k_time)
            m.k_time += k0;
    }
    return m;
}

/* One forward, accumulate 0 (o and lse start as NaN on both sides); gm: the
 * device's mask (dev_mask). */
static void attn_fwd_run(rv_backend *cpu, rv_backend *gpu, const attn_case *c,
                         const rv_attn_mask *gm, uint64_t seed, const attn_tol *t)
{
    attn_data d = attn_data_make(c, seed);
    float *oc = filled(d.nq, NAN), *lc = filled(d.nl, NAN);
    float *og = ref_alloc_f(d.nq), *lg = ref_alloc_f(d.nl);
    float *dq = up(gpu, d.q, d.nq), *dk = up(gpu, d.k, d.nk), *dv = up(gpu, d.v, d.nk);
    float *d_o = up(gpu, oc, d.nq), *d_l = up(gpu, lc, d.nl);
    rv_attn_fwd_args a = {.q = d.q, .k = d.k, .v = d.v, .o = oc, .lse = lc, .sq = c->sq,
                          .sk = c->sk, .heads = c->heads, .dim = c->dim, .scale = c->scale,
                          .mask = c->mask, .accumulate = 0};
    OK_OR_FAIL(cpu->attn_fwd(cpu, &a), "cpu attn_fwd");
    rv_attn_fwd_args ag = {.q = dq, .k = dk, .v = dv, .o = d_o, .lse = d_l, .sq = c->sq,
                           .sk = c->sk, .heads = c->heads, .dim = c->dim, .scale = c->scale,
                           .mask = dev_mask(c, gm), .accumulate = 0};
    OK_OR_FAIL(gpu->attn_fwd(gpu, &ag), "cuda attn_fwd");
    down(gpu, og, d_o, d.nq);
    down(gpu, lg, d_l, d.nl);
    check_fwd_out(c, t, "attn_fwd", og, oc, lg, lc, d.nq, d.nl);
    dfree(gpu, dq), dfree(gpu, dk), dfree(gpu, dv), dfree(gpu, d_o), dfree(gpu, d_l);
    free(oc), free(lc), free(og), free(lg);
    attn_data_free(&d);
}

static void attn_fwd_case(rv_backend *cpu, rv_backend *gpu, const attn_case *c, uint64_t seed,
                          const attn_tol *t)
{
    attn_fwd_run(cpu, gpu, c, NULL, seed, t);
}

static void attn_tol_set(attn_tol *t, int simple)
{
    if (simple) {
        setenv("RINGVIT_CUDA_ATTN", "simple", 1);
        *t = (attn_tol){TOL_ATTN_F32, TOL_ATTN_F32, TOL_ATTN_F32, "simple"};
    } else {
        *t = (attn_tol){TOL_ATTN_BF16, TOL_ATTN_BF16, TOL_ATTN_BF16, "default"};
    }
}

typedef void (*attn_case_fn)(rv_backend *cpu, rv_backend *gpu, const attn_case *c,
                             uint64_t seed, const attn_tol *t);

/* Every attention case through `run` (seeds from seed0), on the fast kernels or,
 * with simple, on the plain f32 ones; then the worst errors under `name`. */
static void attn_suite(attn_case_fn run, uint64_t seed0, const char *name, int simple)
{
    attn_tol t;
    attn_tol_set(&t, simple);
    rv_backend *cpu = make_cpu(), *gpu = make_gpu();
    static attn_case cases[MAX_ATTN_CASES];
    int n = attn_cases(cases);
    for (int i = 0; i < n; i++)
        run(cpu, gpu, &cases[i], seed0 + (uint64_t)i, &t);
    char label[64];
    snprintf(label, sizeof label, "%s%s", name, simple ? " simple" : "");
    summary(label);
    rv_backend_free(&gpu);
    rv_backend_free(&cpu);
}

Test(cuda_ops, attn_fwd, .timeout = 400)
{
    attn_suite(attn_fwd_case, 1000, "attn_fwd", 0);
}

Test(cuda_ops, attn_fwd_simple, .timeout = 400)
{
    attn_suite(attn_fwd_case, 1000, "attn_fwd", 1);
}

/* Two key blocks folded into one result, ring style: keys [cut, sk) first with
 * accumulate 0, then keys [0, cut) with accumulate 1 (each with its global key
 * offset), on both backends. Under a causal mask the first call leaves early rows
 * empty (lse -inf), which the second then fills; cut = 0 and cut = sk make an empty
 * block on either side; the mask at q0=0, k0=100 leaves every row empty twice. */
typedef struct acc_case {
    int sq, sk, cut;
    int causal;
    int64_t q0, k0;
} acc_case;

static void attn_fwd_acc_run(rv_backend *cpu, rv_backend *gpu, const attn_case *c,
                             const rv_attn_mask *gm, int cut, uint64_t seed, const attn_tol *t)
{
    attn_data d = attn_data_make(c, seed);
    const size_t hd = (size_t)c->heads * c->dim;
    float *oc = filled(d.nq, NAN), *lc = filled(d.nl, NAN);
    float *og = ref_alloc_f(d.nq), *lg = ref_alloc_f(d.nl);
    float *dq = up(gpu, d.q, d.nq), *dk = up(gpu, d.k, d.nk), *dv = up(gpu, d.v, d.nk);
    float *d_o = up(gpu, oc, d.nq), *d_l = up(gpu, lc, d.nl);
    for (int call = 0; call < 2; call++) {
        int k0 = call ? 0 : cut, nk = call ? cut : c->sk - cut; /* key rows of this block */
        rv_attn_mask m = mask_from_key(c->mask, k0), mg = mask_from_key(dev_mask(c, gm), k0);
        rv_attn_fwd_args a = {.q = d.q, .k = d.k + k0 * hd, .v = d.v + k0 * hd, .o = oc, .lse = lc,
                              .sq = c->sq, .sk = nk, .heads = c->heads, .dim = c->dim,
                              .scale = c->scale, .mask = m, .accumulate = call};
        OK_OR_FAIL(cpu->attn_fwd(cpu, &a), "cpu attn_fwd");
        rv_attn_fwd_args ag = {.q = dq, .k = dk + k0 * hd, .v = dv + k0 * hd, .o = d_o, .lse = d_l,
                               .sq = c->sq, .sk = nk, .heads = c->heads, .dim = c->dim,
                               .scale = c->scale, .mask = mg, .accumulate = call};
        OK_OR_FAIL(gpu->attn_fwd(gpu, &ag), call ? "cuda attn_fwd (accumulate 1)"
                                                : "cuda attn_fwd (accumulate 0)");
    }
    down(gpu, og, d_o, d.nq);
    down(gpu, lg, d_l, d.nl);
    char what[64];
    snprintf(what, sizeof what, "attn_fwd accumulate cut=%d", cut);
    check_fwd_out(c, t, what, og, oc, lg, lc, d.nq, d.nl);
    dfree(gpu, dq), dfree(gpu, dk), dfree(gpu, dv), dfree(gpu, d_o), dfree(gpu, d_l);
    free(oc), free(lc), free(og), free(lg);
    attn_data_free(&d);
}

static void attn_fwd_acc_suite(int simple)
{
    attn_tol t;
    attn_tol_set(&t, simple);
    rv_backend *cpu = make_cpu(), *gpu = make_gpu();
    static const acc_case acc[] = {
        {200, 1000, 400, 0, 0, 0},   /* no mask */
        {200, 1000, 600, 1, 500, 0}, /* rows 500..599 see none of the first block */
        {63, 200, 50, 1, 0, 100},    /* every row sees nothing in both blocks */
        {1000, 1000, 500, 1, 0, 0},  /* plain causal split in the middle */
        {63, 63, 0, 0, 0, 0},        /* the second block is empty */
        {63, 200, 200, 1, 100, 0},   /* the first block is empty */
    };
    static const int dh[][2] = {{64, 4}, {128, 1}, {32, 4}, {48, 4}};
    int idx = 0;
    for (size_t i = 0; i < sizeof acc / sizeof acc[0]; i++)
        for (int j = 0; j < 4; j++, idx++) {
            rv_attn_mask m = {.kind = acc[i].causal ? RV_MASK_CAUSAL : RV_MASK_NONE, .q_start = acc[i].q0, .k_start = acc[i].k0};
            attn_case c = {acc[i].sq, acc[i].sk, dh[j][1], dh[j][0], m,
                           idx % 2 ? 0.0625f : 0.0f};
            attn_fwd_acc_run(cpu, gpu, &c, NULL, acc[i].cut, 3000 + (uint64_t)idx, &t);
        }
    summary(simple ? "attn_fwd_accumulate simple" : "attn_fwd_accumulate");
    rv_backend_free(&gpu);
    rv_backend_free(&cpu);
}

Test(cuda_ops, attn_fwd_accumulate, .timeout = 300)
{
    attn_fwd_acc_suite(0);
}

Test(cuda_ops, attn_fwd_accumulate_simple, .timeout = 300)
{
    attn_fwd_acc_suite(1);
}

/* Backward of one case: o and lse from the CPU forward over all keys, random dout.
 * accumulate 0 with NaN in dq, dk, dv on entry, then accumulate 1 onto random
 * gradients of the size of the real ones. Gradient errors are normalised by at
 * least half the largest reference gradient of the three (gscale): with a single
 * visible key dq and dk are exactly 0, and what is left is the cancellation in
 * dS = P (dP - Di), whose bf16 part (dP from bf16 dout and v, Di in f32) reaches
 * ~1.5e-2 of gscale when measured against a tenth of it (an emulation of the bf16
 * kernel on the CPU showed); at half, the worst emulated case is ~1.1e-2. */
static void attn_bwd_run(rv_backend *cpu, rv_backend *gpu, const attn_case *c,
                         const rv_attn_mask *gm, uint64_t seed, const attn_tol *t)
{
    attn_data d = attn_data_make(c, seed);
    const size_t nq = d.nq, nk = d.nk, nl = d.nl;
    float *o = ref_alloc_f(nq), *lse = ref_alloc_f(nl);
    rv_attn_fwd_args fa = {.q = d.q, .k = d.k, .v = d.v, .o = o, .lse = lse, .sq = c->sq,
                           .sk = c->sk, .heads = c->heads, .dim = c->dim, .scale = c->scale,
                           .mask = c->mask, .accumulate = 0};
    OK_OR_FAIL(cpu->attn_fwd(cpu, &fa), "cpu attn_fwd");
    float *dq = up(gpu, d.q, nq), *dk = up(gpu, d.k, nk), *dv = up(gpu, d.v, nk);
    float *d_o = up(gpu, o, nq), *d_l = up(gpu, lse, nl), *d_dout = up(gpu, d.dout, nq);

    float *gq = NULL, *gk = NULL, *gv = NULL; /* initial gradients of this pass */
    double gscale = 0.0;
    char lab[160];
    case_label(c, lab, sizeof lab);
    for (int acc = 0; acc < 2; acc++) {
        if (acc == 0) {
            gq = filled(nq, NAN), gk = filled(nk, NAN), gv = filled(nk, NAN);
        } else {
            ref_rng rng = ref_rng_make(seed ^ 0x5a5a);
            float g = gscale > 0 ? (float)gscale : 1.0f;
            ref_fill_uniform(&rng, gq, nq, -g, g);
            ref_fill_uniform(&rng, gk, nk, -g, g);
            ref_fill_uniform(&rng, gv, nk, -g, g);
        }
        float *cq = ref_dup_f(gq, nq), *ck = ref_dup_f(gk, nk), *cv = ref_dup_f(gv, nk);
        float *d_dq = up(gpu, gq, nq), *d_dk = up(gpu, gk, nk), *d_dv = up(gpu, gv, nk);
        rv_attn_bwd_args b = {.q = d.q, .k = d.k, .v = d.v, .o = o, .lse = lse, .dout = d.dout,
                              .dq = cq, .dk = ck, .dv = cv, .sq = c->sq, .sk = c->sk,
                              .heads = c->heads, .dim = c->dim, .scale = c->scale, .mask = c->mask,
                              .accumulate = acc};
        OK_OR_FAIL(cpu->attn_bwd(cpu, &b), "cpu attn_bwd");
        rv_attn_bwd_args bg = {.q = dq, .k = dk, .v = dv, .o = d_o, .lse = d_l, .dout = d_dout,
                               .dq = d_dq, .dk = d_dk, .dv = d_dv, .sq = c->sq, .sk = c->sk,
                               .heads = c->heads, .dim = c->dim, .scale = c->scale,
                               .mask = dev_mask(c, gm), .accumulate = acc};
        OK_OR_FAIL(gpu->attn_bwd(gpu, &bg), acc ? "cuda attn_bwd (accumulate 1)"
                                               : "cuda attn_bwd (accumulate 0)");
        if (acc == 0) {
            double a1 = max_abs(cq, nq), a2 = max_abs(ck, nk), a3 = max_abs(cv, nk);
            gscale = a1 > a2 ? a1 : a2;
            gscale = a3 > gscale ? a3 : gscale;
        }
        float *rq = ref_alloc_f(nq), *rk = ref_alloc_f(nk), *rv = ref_alloc_f(nk);
        down(gpu, rq, d_dq, nq);
        down(gpu, rk, d_dk, nk);
        down(gpu, rv, d_dv, nk);
        double fl = 0.5 * gscale;
        check(nerr_floor(rq, cq, nq, fl), t->grad, "attn_bwd %s acc=%d dq %s", t->mode, acc, lab);
        check(nerr_floor(rk, ck, nk, fl), t->grad, "attn_bwd %s acc=%d dk %s", t->mode, acc, lab);
        check(nerr_floor(rv, cv, nk, fl), t->grad, "attn_bwd %s acc=%d dv %s", t->mode, acc, lab);
        dfree(gpu, d_dq), dfree(gpu, d_dk), dfree(gpu, d_dv);
        free(cq), free(ck), free(cv), free(rq), free(rk), free(rv);
    }
    dfree(gpu, dq), dfree(gpu, dk), dfree(gpu, dv);
    dfree(gpu, d_o), dfree(gpu, d_l), dfree(gpu, d_dout);
    free(gq), free(gk), free(gv), free(o), free(lse);
    attn_data_free(&d);
}

static void attn_bwd_case(rv_backend *cpu, rv_backend *gpu, const attn_case *c, uint64_t seed,
                          const attn_tol *t)
{
    attn_bwd_run(cpu, gpu, c, NULL, seed, t);
}

Test(cuda_ops, attn_bwd, .timeout = 500)
{
    attn_suite(attn_bwd_case, 2000, "attn_bwd", 0);
}

Test(cuda_ops, attn_bwd_simple, .timeout = 500)
{
    attn_suite(attn_bwd_case, 2000, "attn_bwd", 1);
}

/* ---- span masks (RV_MASK_SPAN) --------------------------------------------------
 * Token times as a sequence lays them out: 2 s interleaving windows, each holding
 * its video tokens in time order (4 frames of 0.5 s: a frame's tokens start
 * together), then its audio tokens in time order (random start times). Masks:
 * sliding windows (key = start time, reach W/2; W = 0: audio rows see only
 * themselves), blocks (key = floor(t / B), reach 0) and frames (floor(t / 0.5 s)),
 * with and without causal, on query and key chunks that are different slices of
 * the sequence; the keys and times are uploaded once and sliced by pointer on both
 * sides. A 20 000-token window case makes the kernels skip most tiles. Times:
 * ref_span_times. */

/* type 0: window of `size` s, 1: blocks of `size` s, 2: frames of 0.5 s. */
static double *span_keys(const double *t, int n, int type, double size, double *reach)
{
    double *k = ref_alloc_d((size_t)n);
    for (int i = 0; i < n; i++)
        k[i] = type == 0 ? t[i] : floor(t[i] / (type == 2 ? 0.5 : size));
    *reach = type == 0 ? size / 2 : 0.0;
    return k;
}

static rv_attn_mask span_mask(const double *key, const double *t, double reach, int causal,
                              int q0, int k0)
{
    return (rv_attn_mask){.kind = RV_MASK_SPAN, .q_start = q0, .k_start = k0,
                          .q_key = key + q0, .k_key = key + k0, .q_time = t + q0,
                          .k_time = t + k0, .reach = reach, .causal = causal};
}

/* which: 0 forward, 1 forward accumulate (keys in two blocks), 2 backward. */
static void span_suite(int which, int simple)
{
    attn_tol t;
    attn_tol_set(&t, simple);
    rv_backend *cpu = make_cpu(), *gpu = make_gpu();
    static const struct {
        int type;
        double size;
    } masks[] = {{0, 0.0}, {0, 1.0}, {0, 4.0}, {1, 1.0}, {1, 3.0}, {2, 0.5}};
    static const struct {
        int q0, sq, k0, sk;
    } slices[] = {{0, 2400, 0, 2400}, {500, 900, 900, 1100}, {1500, 700, 100, 1000}};
    static const int dh[][2] = {{64, 2}, {128, 2}, {32, 1}, {48, 2}};
    const int n = 2400;
    double *times = ref_span_times(77, n, 120.0);
    double *d_t = up_bytes(gpu, times, sizeof(double) * n);
    uint64_t seed = 5000 + 1000 * (uint64_t)which;
    for (size_t mi = 0; mi < sizeof masks / sizeof masks[0]; mi++) {
        double reach;
        double *key = span_keys(times, n, masks[mi].type, masks[mi].size, &reach);
        double *d_key = up_bytes(gpu, key, sizeof(double) * n);
        for (int causal = 0; causal < 2; causal++)
            for (size_t si = 0; si < sizeof slices / sizeof slices[0]; si++) {
                int j = (int)((mi * 2 + causal + si) % 4);
                attn_case c = {slices[si].sq, slices[si].sk, dh[j][1], dh[j][0],
                               span_mask(key, times, reach, causal, slices[si].q0, slices[si].k0),
                               seed % 2 ? 0.0625f : 0.0f};
                rv_attn_mask gm = span_mask(d_key, d_t, reach, causal, slices[si].q0,
                                            slices[si].k0);
                if (which == 0)
                    attn_fwd_run(cpu, gpu, &c, &gm, seed, &t);
                else if (which == 1)
                    attn_fwd_acc_run(cpu, gpu, &c, &gm, c.sk / 3, seed, &t);
                else
                    attn_bwd_run(cpu, gpu, &c, &gm, seed, &t);
                seed++;
            }
        dfree(gpu, d_key);
        free(key);
    }
    /* A long sequence: 20 000 tokens at 100 tokens/s, a 2 s window. */
    const int nl = 20000;
    double *tl = ref_span_times(78, nl, 100.0), reach;
    double *kl = span_keys(tl, nl, 0, 2.0, &reach);
    double *d_tl = up_bytes(gpu, tl, sizeof(double) * nl), *d_kl = up_bytes(gpu, kl, sizeof(double) * nl);
    for (int causal = 0; causal < 2; causal++) {
        attn_case c = {nl, nl, 1, 64, span_mask(kl, tl, reach, causal, 0, 0), 0.0f};
        rv_attn_mask gm = span_mask(d_kl, d_tl, reach, causal, 0, 0);
        if (which == 0)
            attn_fwd_run(cpu, gpu, &c, &gm, seed, &t);
        else if (which == 1)
            attn_fwd_acc_run(cpu, gpu, &c, &gm, 7777, seed, &t);
        else
            attn_bwd_run(cpu, gpu, &c, &gm, seed, &t);
        seed++;
    }
    dfree(gpu, d_tl), dfree(gpu, d_kl), dfree(gpu, d_t);
    free(tl), free(kl), free(times);
    static const char *names[] = {"attn_fwd span", "attn_fwd_accumulate span", "attn_bwd span"};
    char label[64];
    snprintf(label, sizeof label, "%s%s", names[which], simple ? " simple" : "");
    summary(label);
    rv_backend_free(&gpu);
    rv_backend_free(&cpu);
}

Test(cuda_ops, attn_fwd_span, .timeout = 400)
{
    span_suite(0, 0);
}

Test(cuda_ops, attn_fwd_span_simple, .timeout = 400)
{
    span_suite(0, 1);
}

Test(cuda_ops, attn_fwd_accumulate_span, .timeout = 400)
{
    span_suite(1, 0);
}

Test(cuda_ops, attn_fwd_accumulate_span_simple, .timeout = 400)
{
    span_suite(1, 1);
}

Test(cuda_ops, attn_bwd_span, .timeout = 500)
{
    span_suite(2, 0);
}

Test(cuda_ops, attn_bwd_span_simple, .timeout = 500)
{
    span_suite(2, 1);
}

/* The device refuses the masks the CPU refuses (backend_args.c), forward and
 * backward: NULL key arrays, a bad reach, an unknown kind. */
Test(cuda_ops, attn_span_bad_masks, .timeout = 60)
{
    rv_backend *gpu = make_gpu();
    float *x = up(gpu, (float[8]){0}, 8), *l = up(gpu, (float[2]){0}, 2);
    double *key = up_bytes(gpu, (double[2]){0, 1}, 2 * sizeof(double));
    rv_attn_mask good = {.kind = RV_MASK_SPAN, .q_key = key, .k_key = key, .q_time = key,
                         .k_time = key, .reach = 1.0, .causal = 1};
    rv_attn_mask bad[5] = {good, good, good, good, good};
    bad[0].q_key = NULL;
    bad[1].k_time = NULL;
    bad[2].reach = -1.0;
    bad[3].reach = NAN;
    bad[4].kind = (rv_mask_kind)9;
    for (int i = 0; i < 5; i++) {
        rv_attn_fwd_args a = {.q = x, .k = x, .v = x, .o = x, .lse = l, .sq = 2, .sk = 2,
                              .heads = 1, .dim = 4, .scale = 0.0f, .mask = bad[i], .accumulate = 0};
        cr_expect_eq(gpu->attn_fwd(gpu, &a), RV_ERR_INVALID, "fwd mask %d accepted", i);
        rv_attn_bwd_args b = {.q = x, .k = x, .v = x, .o = x, .lse = l, .dout = x, .dq = x, .dk = x,
                              .dv = x, .sq = 2, .sk = 2, .heads = 1, .dim = 4, .scale = 0.0f,
                              .mask = bad[i], .accumulate = 0};
        cr_expect_eq(gpu->attn_bwd(gpu, &b), RV_ERR_INVALID, "bwd mask %d accepted", i);
    }
    dfree(gpu, x), dfree(gpu, l), dfree(gpu, key);
    rv_backend_free(&gpu);
}

#endif /* RINGVIT_HAVE_CUDA */

#include "gpu_test_main.h"
