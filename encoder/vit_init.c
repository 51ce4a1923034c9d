/* vit_init.c: fresh encoder weights from a seed (rv_vit_init_random), as
 * torchvision initialises its VisionTransformer (see rv_vit.h for each tensor).
 *
 * The generator (vit_rng.h) gives the same weights for a seed on every machine.
 * Tensors are filled in arena order, each from the same stream. */
#include <math.h>
#include <stdint.h>

#include "rv_vit.h"
#include "vit_rng.h"

static void fill_const(float *x, int64_t n, float v)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = v;
}

/* Normal(0, std) truncated to [lo, hi] (absolute bounds, as torch's
 * trunc_normal_(a=-2, b=2)), by rejection. */
static void fill_trunc_normal(vit_rng *r, float *x, int64_t n, double std, double lo, double hi)
{
    for (int64_t i = 0; i < n; i++) {
        double v;
        do
            v = vit_rng_normal(r) * std;
        while (v < lo || v > hi);
        x[i] = (float)v;
    }
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
    vit_rng r;
    vit_rng_seed(&r, seed);

    /* torchvision: conv_proj trunc_normal_(std = sqrt(1 / fan_in)), bias 0. */
    fill_trunc_normal(&r, m->video_w, D * vin, sqrt(1.0 / (double)vin), -2.0, 2.0);
    fill_const(m->video_b, D, 0.0f);
    fill_trunc_normal(&r, m->audio_w, D * ain, sqrt(1.0 / (double)ain), -2.0, 2.0);
    fill_const(m->audio_b, D, 0.0f);
    fill_const(m->cls, D, 0.0f);
    vit_fill_normal(&r, m->pos, npos * D, 0.02);
    vit_fill_normal(&r, m->band, bands * D, 0.02);
    fill_trunc_normal(&r, m->time_w, D * D, 0.02, -2.0, 2.0);
    vit_fill_normal(&r, m->modality, 3 * D, 0.02);
    for (int i = 0; i < c->layers; i++) {
        rv_vit_layer *ly = &m->layer[i];
        fill_const(ly->ln1_w, D, 1.0f);
        fill_const(ly->ln1_b, D, 0.0f);
        /* nn.MultiheadAttention: xavier_uniform_ over the whole (3D, D) in_proj,
         * biases 0; out_proj keeps nn.Linear's kaiming_uniform_(a = sqrt 5),
         * whose bound is sqrt(1 / fan_in). */
        vit_fill_uniform(&r, ly->qkv_w, 3 * D * D, sqrt(6.0 / (double)(D + 3 * D)));
        fill_const(ly->qkv_b, 3 * D, 0.0f);
        vit_fill_uniform(&r, ly->proj_w, D * D, sqrt(1.0 / (double)D));
        fill_const(ly->proj_b, D, 0.0f);
        fill_const(ly->ln2_w, D, 1.0f);
        fill_const(ly->ln2_b, D, 0.0f);
        /* torchvision MLPBlock: xavier_uniform_ weights, normal_(std 1e-6) biases. */
        vit_fill_uniform(&r, ly->fc1_w, M * D, sqrt(6.0 / (double)(D + M)));
        vit_fill_normal(&r, ly->fc1_b, M, 1e-6);
        vit_fill_uniform(&r, ly->fc2_w, D * M, sqrt(6.0 / (double)(D + M)));
        vit_fill_normal(&r, ly->fc2_b, D, 1e-6);
    }
    fill_const(m->ln_w, D, 1.0f);
    fill_const(m->ln_b, D, 0.0f);
    return RV_OK;
}
