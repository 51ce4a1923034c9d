/* vit_init.c: fresh encoder weights from a seed (rv_vit_init_random), as
 * torchvision initialises its VisionTransformer (see rv_vit.h for each tensor).
 *
 * The generator (vit_rng.h) gives the same weights for a seed on every machine.
 * Tensors are filled in arena order, each from the same stream. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "rv_vit.h"
#include "vit_rng.h"
#include "vit_tensors.h"

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
    rv_status st = RV_OK;
    vit_tensor *list = NULL;
    if (!m)
        return rv_fail(RV_ERR_INVALID, "rv_vit_init_random: model is NULL");
    const rv_vit_config *c = &m->cfg;
    const int64_t D = c->dim, M = c->mlp;
    const int64_t vin = (int64_t)RV_VIT_CHANNELS * c->tubelet * c->patch * c->patch;
    const int64_t ain = (int64_t)c->audio_freq * c->audio_time;
    const int n = vit_tensor_count(c);
    if (!(list = malloc((size_t)n * sizeof *list)))
        return rv_fail(RV_ERR_NOMEM, "rv_vit_init_random: out of memory");
    vit_tensor_list(m, list);
    vit_rng r;
    vit_rng_seed(&r, seed);
    /* In arena order, each tensor from the same stream: ringvit's own models get
     * the draws they always had. */
    for (int i = 0; i < n; i++) {
        float *x = list[i].data;
        const int64_t k = list[i].numel;
        switch (list[i].role) {
        case VR_VIDEO_W: /* torchvision: conv_proj trunc_normal_(std = sqrt(1 / fan_in)) */
            fill_trunc_normal(&r, x, k, sqrt(1.0 / (double)vin), -2.0, 2.0);
            break;
        case VR_AUDIO_W:
            fill_trunc_normal(&r, x, k, sqrt(1.0 / (double)ain), -2.0, 2.0);
            break;
        case VR_POS:
        case VR_BAND:
        case VR_MODALITY:
        case VR_AUDIO_POS:
            vit_fill_normal(&r, x, k, 0.02);
            break;
        case VR_TIME_W:
            fill_trunc_normal(&r, x, k, 0.02, -2.0, 2.0);
            break;
        case VR_QKV_W:
            /* nn.MultiheadAttention: xavier_uniform_ over the whole (3D, D) in_proj */
            vit_fill_uniform(&r, x, k, sqrt(6.0 / (double)(D + 3 * D)));
            break;
        case VR_PROJ_W:
        case VR_PROJ_OUT:
            /* nn.Linear's kaiming_uniform_(a = sqrt 5): bound sqrt(1 / fan_in) */
            vit_fill_uniform(&r, x, k, sqrt(1.0 / (double)D));
            break;
        case VR_FC1_W:
        case VR_FC2_W:
            /* torchvision MLPBlock: xavier_uniform_ weights, normal_(std 1e-6) biases */
            vit_fill_uniform(&r, x, k, sqrt(6.0 / (double)(D + M)));
            break;
        case VR_FC1_B:
        case VR_FC2_B:
            vit_fill_normal(&r, x, k, 1e-6);
            break;
        case VR_POOLER_W:
            vit_fill_uniform(&r, x, k, sqrt(6.0 / (double)(2 * D)));
            break;
        case VR_LN1_W:
        case VR_LN2_W:
        case VR_LN_W:
        case VR_PRE_LN_W:
        case VR_POOL_LN_W:
        case VR_LS1:
        case VR_LS2:
            fill_const(x, k, 1.0f);
            break;
        default: /* biases, the class token: 0 */
            fill_const(x, k, 0.0f);
            break;
        }
    }
    free(list);
    return st;
}
