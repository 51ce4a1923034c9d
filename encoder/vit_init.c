/* vit_init.c: fresh encoder weights from a seed (rv_vit_init_random), as
 * torchvision initialises its VisionTransformer (see rv_vit.h for each tensor).
 *
 * The generator is self-contained (splitmix64 seeding xoshiro256**), normals come
 * from Box-Muller in double, and every value is formed by single multiplications
 * of exactly computed terms (no a * b + c the compiler could fuse differently on
 * another CPU), so one seed gives the same weights everywhere. Tensors are filled
 * in arena order, each from the same stream. */
#include <math.h>
#include <stdint.h>

#include "rv_vit.h"

typedef struct rng {
    uint64_t s[4];
    int have_spare; /* Box-Muller makes normals in pairs */
    double spare;
} rng;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rng_seed(rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
    r->have_spare = 0;
    r->spare = 0.0;
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s;
    const uint64_t out = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* Uniform in (-1, 1): (2k + 1 - 2^53) / 2^53 for a 53-bit k, computed exactly. */
static double rng_sym(rng *r)
{
    int64_t k = (int64_t)(rng_next(r) >> 11);
    return (double)(2 * k + 1 - ((int64_t)1 << 53)) * 0x1p-53;
}

/* Standard normal (Box-Muller; u1 in (0, 1] so the log is finite). */
static double rng_normal(rng *r)
{
    if (r->have_spare) {
        r->have_spare = 0;
        return r->spare;
    }
    double u1 = (double)((rng_next(r) >> 11) + 1) * 0x1p-53;
    double u2 = (double)(rng_next(r) >> 11) * 0x1p-53;
    double rad = sqrt(-2.0 * log(u1));
    double th = (2.0 * M_PI) * u2;
    r->spare = rad * sin(th);
    r->have_spare = 1;
    return rad * cos(th);
}

static void fill_const(float *x, int64_t n, float v)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = v;
}

static void fill_normal(rng *r, float *x, int64_t n, double std)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(rng_normal(r) * std);
}

/* Normal(0, std) truncated to [lo, hi] (absolute bounds, as torch's
 * trunc_normal_(a=-2, b=2)), by rejection. */
static void fill_trunc_normal(rng *r, float *x, int64_t n, double std, double lo, double hi)
{
    for (int64_t i = 0; i < n; i++) {
        double v;
        do
            v = rng_normal(r) * std;
        while (v < lo || v > hi);
        x[i] = (float)v;
    }
}

/* Uniform in (-bound, bound). */
static void fill_uniform(rng *r, float *x, int64_t n, double bound)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(rng_sym(r) * bound);
}

rv_status rv_vit_init_random(rv_vit_model *m, uint64_t seed)
{
    if (!m)
        return rv_fail(RV_ERR_INVALID, "rv_vit_init_random: model is NULL");
    const rv_vit_config *c = &m->cfg;
    const int64_t D = c->dim, M = c->mlp;
    const int64_t vin = (int64_t)RV_VIT_CHANNELS * c->tubelet * c->patch * c->patch;
    const int64_t ain = (int64_t)c->audio_freq * c->audio_time;
    const int64_t bands = RV_VIT_MEL_BINS / c->audio_freq;
    const int64_t npos = 1 + (int64_t)c->grid * c->grid;
    rng r;
    rng_seed(&r, seed);

    /* torchvision: conv_proj trunc_normal_(std = sqrt(1 / fan_in)), bias 0. */
    fill_trunc_normal(&r, m->video_w, D * vin, sqrt(1.0 / (double)vin), -2.0, 2.0);
    fill_const(m->video_b, D, 0.0f);
    fill_trunc_normal(&r, m->audio_w, D * ain, sqrt(1.0 / (double)ain), -2.0, 2.0);
    fill_const(m->audio_b, D, 0.0f);
    fill_const(m->cls, D, 0.0f);
    fill_normal(&r, m->pos, npos * D, 0.02);
    fill_normal(&r, m->band, bands * D, 0.02);
    fill_trunc_normal(&r, m->time_w, D * D, 0.02, -2.0, 2.0);
    fill_normal(&r, m->modality, 3 * D, 0.02);
    for (int i = 0; i < c->layers; i++) {
        rv_vit_layer *ly = &m->layer[i];
        fill_const(ly->ln1_w, D, 1.0f);
        fill_const(ly->ln1_b, D, 0.0f);
        /* nn.MultiheadAttention: xavier_uniform_ over the whole (3D, D) in_proj,
         * biases 0; out_proj keeps nn.Linear's kaiming_uniform_(a = sqrt 5),
         * whose bound is sqrt(1 / fan_in). */
        fill_uniform(&r, ly->qkv_w, 3 * D * D, sqrt(6.0 / (double)(D + 3 * D)));
        fill_const(ly->qkv_b, 3 * D, 0.0f);
        fill_uniform(&r, ly->proj_w, D * D, sqrt(1.0 / (double)D));
        fill_const(ly->proj_b, D, 0.0f);
        fill_const(ly->ln2_w, D, 1.0f);
        fill_const(ly->ln2_b, D, 0.0f);
        /* torchvision MLPBlock: xavier_uniform_ weights, normal_(std 1e-6) biases. */
        fill_uniform(&r, ly->fc1_w, M * D, sqrt(6.0 / (double)(D + M)));
        fill_normal(&r, ly->fc1_b, M, 1e-6);
        fill_uniform(&r, ly->fc2_w, D * M, sqrt(6.0 / (double)(D + M)));
        fill_normal(&r, ly->fc2_b, D, 1e-6);
    }
    fill_const(m->ln_w, D, 1.0f);
    fill_const(m->ln_b, D, 0.0f);
    return RV_OK;
}
