/* vit_rng.h (internal to encoder/): the seeded generator that fresh weights
 * come from (vit_init.c for the encoder, train_head.c for the task heads).
 *
 * splitmix64 seeds xoshiro256**; normals come from Box-Muller in double; every
 * value is formed by single multiplications of exactly computed terms (no
 * a * b + c a compiler could fuse differently on another CPU), so one seed gives
 * the same weights on every machine. */
#ifndef RV_VIT_RNG_H
#define RV_VIT_RNG_H

#include <stdint.h>

typedef struct vit_rng {
    uint64_t s[4];
    int have_spare; /* Box-Muller makes normals in pairs */
    double spare;
} vit_rng;

/* One splitmix64 step of the state *x. */
uint64_t vit_splitmix64(uint64_t *x);

void vit_rng_seed(vit_rng *r, uint64_t seed);
uint64_t vit_rng_next(vit_rng *r);
/* Uniform in (-1, 1): (2k + 1 - 2^53) / 2^53 for a 53-bit k, exactly. */
double vit_rng_sym(vit_rng *r);
/* Standard normal. */
double vit_rng_normal(vit_rng *r);

/* x (n) = normal(0, std) / uniform in (-bound, bound), in order from r. */
void vit_fill_normal(vit_rng *r, float *x, int64_t n, double std);
void vit_fill_uniform(vit_rng *r, float *x, int64_t n, double bound);

#endif
