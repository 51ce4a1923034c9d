/* train_decay.c: which parameters AdamW's weight decay applies to
 * (rv_train_decay_mask): the weight matrices (the patch, audio and time
 * projections, every layer's qkv, out_proj, mlp.0 and mlp.3 weights, the
 * pooler and the output projection, and the head's linear weights), never
 * biases, LayerNorms, layer scales, embeddings (class token, positions, bands,
 * modality) or the mask token, as ViT and MAE training do. A tensor the family
 * lacks is NULL and skipped.
 *
 * The mask is laid out over [model arena | head arena], and each tensor's place
 * is found from its pointer into its arena, so the mask follows the arenas
 * whatever order they are built in. */
#include <string.h>

#include "rv_vit_train.h"

/* mask[base + (x - arena) .. + count) = 1; x NULL (a tensor the head lacks) is skipped. */
static void mark(uint8_t *mask, size_t base, const float *arena, const float *x, int64_t count)
{
    if (!x || count <= 0)
        return;
    memset(mask + base + (size_t)(x - arena), 1, (size_t)count);
}

void rv_train_decay_mask(const rv_vit_model *m, const rv_train_head *h, uint8_t *mask)
{
    if (!m || !mask)
        return;
    const rv_vit_config *c = &m->cfg;
    const int64_t D = c->dim, M = c->mlp;
    const int64_t video_in = (int64_t)c->tubelet * c->patch * c->patch * RV_VIT_CHANNELS;
    const int64_t audio_in = (int64_t)c->audio_freq * c->audio_time;
    const size_t nm = m->arena_floats;
    memset(mask, 0, nm + (h ? h->arena_floats : 0));
    mark(mask, 0, m->arena, m->video_w, D * video_in);
    mark(mask, 0, m->arena, m->audio_w, D * audio_in);
    mark(mask, 0, m->arena, m->time_w, D * D);
    mark(mask, 0, m->arena, m->pooler_w, D * D);
    mark(mask, 0, m->arena, m->proj_w, (int64_t)c->proj_dim * D);
    for (int i = 0; i < c->layers; i++) {
        const rv_vit_layer *ly = &m->layer[i];
        mark(mask, 0, m->arena, ly->qkv_w, 3 * D * D);
        mark(mask, 0, m->arena, ly->proj_w, D * D);
        mark(mask, 0, m->arena, ly->fc1_w, M * D);
        mark(mask, 0, m->arena, ly->fc2_w, D * M);
    }
    if (!h)
        return;
    const int64_t hd = h->dim;
    if (h->task == RV_TASK_CLASSIFY)
        mark(mask, nm, h->arena, h->cls_w, (int64_t)h->classes * hd);
    if (h->task == RV_TASK_MAE) {
        mark(mask, nm, h->arena, h->mae_video_w, h->video_dim * hd);
        mark(mask, nm, h->arena, h->mae_audio_w, h->audio_dim * hd);
    }
}
