/* test_tokenize_patch.c: tubelet patchify then unpatchify gives the frames back
 * exactly, the patch layout is (t, y, x, c) with the normalisation of
 * rv_tokens.h, and audio patches are (f, w) of (fbank - mean) / (2 std), band b
 * cut from mel bins b*fstride .. b*fstride+F-1 (against a plain loop over the
 * fbank rows, overlapping, side by side and gapped bands). */
#include <criterion/criterion.h>
#include <float.h>
#include <stdio.h>

#include <stdlib.h>
#include <string.h>

#include "ref_ops.h"
#include "rv_patch.h"
#include "rv_tokens.h"

/* The audio patches, (x - mean) / (2 std) in f32 (epsilon 1.2e-7) against double:
 * a subtraction and a scaling, each rounded to half an ulp of its result, so
 * within 2 eps of the largest output (normalised error, rv_rel_err). */
#define TOL_AUDIO_PATCH (2 * FLT_EPSILON)

static const float MEAN[3] = {0.485f, 0.456f, 0.406f}, STD[3] = {0.229f, 0.224f, 0.225f};

static uint8_t *random_frames(ref_rng *r, int T, int S)
{
    size_t n = (size_t)T * S * S * 3;
    uint8_t *f = malloc(n);
    cr_assert_not_null(f);
    for (size_t i = 0; i < n; i++)
        f[i] = (uint8_t)(ref_rng_u64(r) >> 56);
    /* the extremes are always present */
    f[0] = 0;
    f[n - 1] = 255;
    return f;
}

Test(patch, tubelet_roundtrip_exact)
{
    const int cases[][3] = {{2, 32, 16}, {1, 32, 16}, {3, 24, 8}, {2, 16, 16}, {4, 12, 4}, {1, 8, 1}};
    ref_rng r = ref_rng_make(42);
    float lut[3][256];
    rv_tubelet_lut(MEAN, STD, lut);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int T = cases[c][0], S = cases[c][1], P = cases[c][2], G = S / P;
        size_t fsize = (size_t)S * S * 3;
        uint8_t *in = random_frames(&r, T, S), *back = calloc((size_t)T, fsize);
        const uint8_t *ip[8];
        uint8_t *bp[8];
        for (int t = 0; t < T; t++) {
            ip[t] = in + t * fsize;
            bp[t] = back + t * fsize;
        }
        int64_t dim = (int64_t)T * P * P * 3;
        float *patches = ref_alloc_f((size_t)(G * G * dim));
        rv_tubelet_patchify(ip, T, S, P, lut, patches);
        /* layout: patch (gy, gx), element (t, py, px, c) */
        for (int k = 0; k < 50; k++) {
            int gy = (int)(ref_rng_u64(&r) % G), gx = (int)(ref_rng_u64(&r) % G);
            int t = (int)(ref_rng_u64(&r) % T), py = (int)(ref_rng_u64(&r) % P);
            int px = (int)(ref_rng_u64(&r) % P), ch = (int)(ref_rng_u64(&r) % 3);
            uint8_t v = ip[t][((size_t)(gy * P + py) * S + gx * P + px) * 3 + ch];
            float want = (float)(((double)v / 255.0 - MEAN[ch]) / STD[ch]);
            float got = patches[(gy * G + gx) * dim + ((t * P + py) * P + px) * 3 + ch];
            cr_assert_eq(got, want, "T=%d S=%d P=%d: patch (%d,%d) elem (%d,%d,%d,%d) = %g, want %g",
                         T, S, P, gy, gx, t, py, px, ch, got, want);
        }
        rv_tubelet_unpatchify(patches, T, S, P, lut, bp);
        cr_assert_arr_eq(in, back, (size_t)T * fsize, "T=%d S=%d P=%d: round trip differs", T, S, P);
        free(in);
        free(back);
        free(patches);
    }
}

/* Unpatchify picks the nearest table value, so values a little off (as after
 * a round trip through another precision) still come back exact. */
Test(patch, unpatchify_rounds_to_nearest)
{
    float lut[3][256];
    rv_tubelet_lut(MEAN, STD, lut);
    uint8_t px[8 * 8 * 3];
    float patch[8 * 8 * 3];
    for (int i = 0; i < 8 * 8 * 3; i++) {
        int c = i % 3, v = (i * 37 + 11) % 256;
        if (i < 6)
            v = i / 3; /* 0 and 1: the bottom of the table */
        float step = v < 255 ? lut[c][v + 1] - lut[c][v] : lut[c][v] - lut[c][v - 1];
        patch[i] = lut[c][v] + (i % 2 ? 0.4f : -0.4f) * step;
        px[i] = (uint8_t)v;
    }
    uint8_t back[8 * 8 * 3];
    uint8_t *bp[1] = {back};
    rv_tubelet_unpatchify(patch, 1, 8, 8, lut, bp);
    cr_assert_arr_eq(back, px, sizeof px);
}

/* A repeated frame pointer repeats the frame (how a trailing odd frame fills
 * its tubelet). */
Test(patch, repeated_frame)
{
    ref_rng r = ref_rng_make(7);
    float lut[3][256];
    rv_tubelet_lut(MEAN, STD, lut);
    uint8_t *f = random_frames(&r, 1, 16);
    const uint8_t *ip[2] = {f, f};
    float *p = ref_alloc_f(2 * 8 * 8 * 3 * 4);
    rv_tubelet_patchify(ip, 2, 16, 8, lut, p);
    for (int q = 0; q < 4; q++)
        cr_assert_arr_eq(p + q * 384, p + q * 384 + 192, 192 * sizeof(float));
    free(f);
    free(p);
}

Test(patch, audio_layout)
{
    const int F = 16, W = 16, stride = 128;
    ref_rng r = ref_rng_make(3);
    float *rows = ref_alloc_f(W * stride);
    ref_fill_uniform(&r, rows, W * stride, -15.9f, 5.0f);
    float *out = ref_alloc_f(128 * W);
    const float mean = -4.2677393f, std = 4.5689974f;
    rv_audio_patchify(rows, stride, F, 0, W, mean, std, out);
    double *want = ref_alloc_d(128 * W);
    for (int b = 0; b < 128 / F; b++)
        for (int f = 0; f < F; f++)
            for (int w = 0; w < W; w++)
                want[(b * F + f) * W + w] =
                    ((double)rows[w * stride + b * F + f] - mean) / (2.0 * std);
    double e = rv_rel_err(out, want, 128 * W);
    printf("patch: audio patches normalised error %.3g\n", e);
    cr_assert_leq(e, TOL_AUDIO_PATCH, "audio patches: normalised error %.3g", e);
    free(want);
    /* F = 128: one band; F = 32 with W = 4; mean 0, 2 std = 1: the input exactly */
    rv_audio_patchify(rows, stride, 32, 0, 4, 0.0f, 0.5f, out);
    cr_assert_eq(out[(3 * 32 + 5) * 4 + 2], rows[2 * stride + 3 * 32 + 5]);
    free(rows);
    free(out);
}

/* The reference, written plainly: patch b is the F x W block of the fbank
 * rows starting at mel bin b * fstride, frequency-major. The normalisation is
 * the library's own expression, (x - mean) * (1 / (2 std)), so the values
 * compare bit for bit and any difference is a wrong bin or frame. */
static void naive_audio_patches(const float *rows, int64_t row_stride, int F, int fstride,
                                int W, float mean, float std, int bands, float *out)
{
    const float scale = 1.0f / (2.0f * std);
    for (int b = 0; b < bands; b++)
        for (int f = 0; f < F; f++)
            for (int w = 0; w < W; w++) {
                int bin = b * fstride + f;
                float x = rows[w * row_stride + bin];
                out[((int64_t)b * F + f) * W + w] = (x - mean) * scale;
            }
}

/* Bands as a strided Conv2d counts them, (128 - F) / fstride + 1, written out
 * as "how many starts b * fstride leave room for F bins". */
static int naive_bands(int F, int fstride)
{
    int n = 0;
    while (n * fstride + F <= 128)
        n++;
    return n;
}

Test(patch, audio_freq_stride_matches_naive)
{
    /* F, fstride (0: F), W; the last ones leave bins above the last band unread
     * or gaps between bands */
    const int cases[][3] = {{16, 10, 16}, {16, 0, 16}, {16, 16, 16}, {16, 10, 1}, {24, 0, 4},
                            {7, 3, 5},    {128, 0, 2}, {128, 7, 3},  {1, 1, 3},   {16, 20, 8},
                            {10, 128, 2}, {33, 31, 6}};
    const int row_stride = 131; /* rows wider than 128: the stride is honoured */
    ref_rng r = ref_rng_make(11);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int F = cases[c][0], fs = cases[c][1] ? cases[c][1] : F, W = cases[c][2];
        rv_tok_opts o;
        rv_tok_opts_default(&o);
        o.audio_freq = F;
        o.audio_fstride = cases[c][1];
        cr_assert_eq(rv_tok_opts_check(&o), RV_OK, "F=%d fstride=%d: %s", F, fs, rv_last_error());
        const int bands = naive_bands(F, fs);
        cr_assert_eq(rv_tok_audio_fstride(&o), fs);
        cr_assert_eq(rv_tok_audio_bands(&o), bands, "F=%d fstride=%d: %d bands, want %d", F, fs,
                     rv_tok_audio_bands(&o), bands);
        float *rows = ref_alloc_f((size_t)W * row_stride);
        ref_fill_uniform(&r, rows, (size_t)W * row_stride, -15.9f, 5.0f);
        const size_t n = (size_t)bands * F * W;
        float *got = ref_alloc_f(n + 64), *want = ref_alloc_f(n);
        for (size_t i = 0; i < n + 64; i++)
            got[i] = -12345.0f; /* sentinels: nothing may be written past the last band */
        rv_audio_patchify(rows, row_stride, F, cases[c][1], W, -4.2677393f, 4.5689974f, got);
        naive_audio_patches(rows, row_stride, F, fs, W, -4.2677393f, 4.5689974f, bands, want);
        for (size_t i = 0; i < n; i++)
            cr_assert(memcmp(&got[i], &want[i], sizeof(float)) == 0,
                      "F=%d fstride=%d W=%d: value %zu (band %zu, bin %zu, frame %zu) %.9g, want %.9g",
                      F, fs, W, i, i / ((size_t)F * W), i / W % F, i % W, got[i], want[i]);
        for (size_t i = n; i < n + 64; i++)
            cr_assert_eq(got[i], -12345.0f, "F=%d fstride=%d: written past band %d", F, fs, bands);
        free(rows);
        free(got);
        free(want);
    }
}

/* AST: 16 x 16 patches 10 bins apart give 12 bands over bins 0..125; with
 * mean 0 and std 1/2 each value is the fbank value itself, so the bins can be
 * read off: band b, row f, frame w holds bin 10 b + f of frame w. */
Test(patch, audio_ast_bands)
{
    rv_tok_opts o;
    rv_tok_opts_default(&o);
    o.audio_fstride = 10;
    cr_assert_eq(rv_tok_audio_bands(&o), 12);
    float rows[16 * 128], out[12 * 16 * 16];
    for (int w = 0; w < 16; w++)
        for (int m = 0; m < 128; m++)
            rows[w * 128 + m] = (float)(1000 * w + m);
    rv_audio_patchify(rows, 128, 16, 10, 16, 0.0f, 0.5f, out);
    for (int b = 0; b < 12; b++)
        for (int f = 0; f < 16; f++)
            for (int w = 0; w < 16; w++)
                cr_assert_eq(out[(b * 16 + f) * 16 + w], (float)(1000 * w + 10 * b + f),
                             "band %d bin %d frame %d", b, f, w);
    /* the last band ends at bin 125: 126 and 127 are read by no band */
    cr_assert_eq(out[(11 * 16 + 15) * 16], 125.0f);
}
