/* vit_rng.c: the seeded generator of fresh weights (vit_rng.h). */
#include "vit_rng.h"

#include <math.h>

uint64_t vit_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void vit_rng_seed(vit_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = vit_splitmix64(&seed);
    r->have_spare = 0;
    r->spare = 0.0;
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t vit_rng_next(vit_rng *r)
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

double vit_rng_sym(vit_rng *r)
{
    int64_t k = (int64_t)(vit_rng_next(r) >> 11);
    return (double)(2 * k + 1 - ((int64_t)1 << 53)) * 0x1p-53;
}

/* u1 in (0, 1] so the log is finite. */
double vit_rng_normal(vit_rng *r)
{
    if (r->have_spare) {
        r->have_spare = 0;
        return r->spare;
    }
    double u1 = (double)((vit_rng_next(r) >> 11) + 1) * 0x1p-53;
    double u2 = (double)(vit_rng_next(r) >> 11) * 0x1p-53;
    double rad = sqrt(-2.0 * log(u1));
    double th = (2.0 * M_PI) * u2;
    r->spare = rad * sin(th);
    r->have_spare = 1;
    return rad * cos(th);
}

void vit_fill_normal(vit_rng *r, float *x, int64_t n, double std)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(vit_rng_normal(r) * std);
}

void vit_fill_uniform(vit_rng *r, float *x, int64_t n, double bound)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(vit_rng_sym(r) * bound);
}
