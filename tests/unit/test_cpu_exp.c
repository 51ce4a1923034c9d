/* test_cpu_exp.c: the attention softmax's base-2 exponential (kernels/cpu/cpu_exp.h,
 * scalar; rv_v16_exp2 of cpu_tile_kernels.h, 16 lanes; rv_v8_exp2 of
 * cpu_tile_kernels_avx2.h, 8 lanes) against libm's exp2 in
 * double over its whole domain, and its edges: -127 and below (-inf) give exactly
 * 0, 0 gives 1, and the values NaN or infinite scores produce (NaN, +inf) give 0
 * and 1 without an out-of-range conversion or shift (the sanitizer pass runs this
 * under UBSan, which stopped on the shift before). */
#include <criterion/criterion.h>
#include <math.h>

#include "../../kernels/cpu/cpu_exp.h"

/* Relative error against libm's exp2 in double: a polynomial for the fraction
 * and an exponent shift, evaluated in f32 (epsilon 1.2e-7, round to nearest 6e-8
 * per operation): the polynomial's own error plus a few roundings, under 2.5
 * epsilon. */
#define TOL_EXP2 3e-7

/* The 16-lane version is compiled for AVX-512, as in the kernels that use it, and
 * checked only where the CPU has it. */
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512dq,avx512bw,fma")
#include "../../kernels/cpu/cpu_tile_kernels.h"

static float vec_one(float t)
{
    rv_v16 v = rv_v16_splat(0.0f);
    v[3] = t; /* one lane among ordinary ones */
    rv_v16 r = rv_v16_exp2(v);
    return r[3];
}
#pragma GCC pop_options

/* The 8-lane version, compiled for AVX2 as the AVX2 kernels are. */
#pragma GCC push_options
#pragma GCC target("avx2,fma,no-avx512f")
#include "../../kernels/cpu/cpu_tile_kernels_avx2.h"

static float vec8_one(float t)
{
    rv_v8 v = rv_v8_splat(0.0f);
    v[5] = t;
    rv_v8 r = rv_v8_exp2(v);
    return r[5];
}
#pragma GCC pop_options

static int have_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

static int have_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

Test(cpu_exp, matches_exp2_over_the_domain)
{
    double worst = 0, worst_v = 0, worst_v8 = 0;
    const int vec = have_avx512(), vec8 = have_avx2();
    if (!vec)
        cr_log_info("no AVX-512: the 16-lane version is not checked here");
    if (!vec8)
        cr_log_info("no AVX2: the 8-lane version is not checked here");
    for (float t = -126.0f; t <= 0.0f; t += 0.0037f) {
        double want = exp2((double)t);
        double e = fabs(rv_exp2_nonpos(t) - want) / want;
        double ev = vec ? fabs(vec_one(t) - want) / want : 0;
        double ev8 = vec8 ? fabs(vec8_one(t) - want) / want : 0;
        worst = e > worst ? e : worst;
        worst_v = ev > worst_v ? ev : worst_v;
        worst_v8 = ev8 > worst_v8 ? ev8 : worst_v8;
    }
    cr_expect_leq(worst, TOL_EXP2, "scalar: worst relative error %.3g", worst);
    cr_expect_leq(worst_v, TOL_EXP2, "16 lanes: worst relative error %.3g", worst_v);
    cr_expect_leq(worst_v8, TOL_EXP2, "8 lanes: worst relative error %.3g", worst_v8);
}

Test(cpu_exp, edges_and_non_finite_arguments)
{
    const struct {
        float t, want;
    } cases[] = {
        {0.0f, 1.0f},      {-1.0f, 0.5f},     {-127.0f, 0.0f},  {-300.0f, 0.0f},
        {-INFINITY, 0.0f}, {NAN, 0.0f},       {INFINITY, 1.0f}, {5.0f, 1.0f},
        {3e38f, 1.0f},     {-3e38f, 0.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float t = cases[i].t;
        cr_expect_eq(rv_exp2_nonpos(t), cases[i].want, "scalar 2^%g = %g, want %g", t,
                     rv_exp2_nonpos(t), cases[i].want);
        if (have_avx512())
            cr_expect_eq(vec_one(t), cases[i].want, "16 lanes 2^%g = %g, want %g", t,
                         vec_one(t), cases[i].want);
        if (have_avx2())
            cr_expect_eq(vec8_one(t), cases[i].want, "8 lanes 2^%g = %g, want %g", t,
                         vec8_one(t), cases[i].want);
    }
}
