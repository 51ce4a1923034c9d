/* vit_slice.h (tests only): one rank's slice of a whole token sequence under a
 * shard plan, in local order (the plan's segments, segment 0 first), as the
 * encoder tests hand it to rv_vit_forward / _train / _backward. Shared by
 * test_vit_forward.c, test_vit_backward.c and test_vit_family.c, whose whole
 * sequences differ but all come as an rv_vit_tokens over every token plus the
 * row of each token's patch (and optional hidden flags). */
#ifndef RV_TEST_VIT_SLICE_H
#define RV_TEST_VIT_SLICE_H

#include <criterion/criterion.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ref_ops.h"
#include "rv_shard.h"
#include "rv_tokens.h"
#include "rv_vit.h"

typedef struct vit_slice {
    rv_vit_tokens t;
    int64_t *global; /* (len) global index of each local token */
    uint8_t *mod, *hidden;
    int64_t *pos;
    double *time;
    int64_t *window; /* (len) the tokens' windows (NULL when the sequence has none) */
    float *video, *audio;
} vit_slice;

/* all: the whole sequence; patch_of (S): each token's row in all->video or
 * all->audio (-1 for special tokens); hidden (S, may be NULL); vdim, adim: the
 * patch widths. */
static inline void vit_slice_make(const rv_vit_tokens *all, const int64_t *patch_of,
                                  const uint8_t *hidden, int64_t vdim, int64_t adim,
                                  const rv_shard_plan *p, int r, vit_slice *out)
{
    memset(out, 0, sizeof *out);
    const int64_t len = rv_shard_len(p, r);
    out->global = malloc(sizeof(int64_t) * (size_t)(len + 1));
    out->mod = malloc((size_t)len + 1);
    out->hidden = calloc((size_t)len + 1, 1);
    out->pos = malloc(sizeof(int64_t) * 3 * (size_t)(len + 1));
    out->time = malloc(sizeof(double) * 2 * (size_t)(len + 1));
    if (all->window)
        out->window = malloc(sizeof(int64_t) * (size_t)(len + 1));
    out->video = ref_alloc_f((size_t)(len * vdim));
    out->audio = ref_alloc_f((size_t)(len * adim));
    cr_assert(out->global && out->mod && out->hidden && out->pos && out->time);
    rv_shard_seg seg[RV_SHARD_MAX_SEGS];
    int n = rv_shard_segments(p, r, seg);
    int64_t k = 0, nv = 0, na = 0;
    for (int j = 0; j < n; j++)
        for (int64_t g = seg[j].start; g < seg[j].start + seg[j].len; g++, k++) {
            out->global[k] = g;
            out->mod[k] = all->modality[g];
            out->hidden[k] = hidden ? hidden[g] : 0;
            memcpy(out->pos + 3 * k, all->pos + 3 * g, 3 * sizeof(int64_t));
            memcpy(out->time + 2 * k, all->seq_time + 2 * g, 2 * sizeof(double));
            if (all->window)
                out->window[k] = all->window[g];
            if (all->modality[g] == RV_MOD_VIDEO)
                memcpy(out->video + nv++ * vdim, all->video + patch_of[g] * vdim,
                       sizeof(float) * (size_t)vdim);
            else if (all->modality[g] == RV_MOD_AUDIO)
                memcpy(out->audio + na++ * adim, all->audio + patch_of[g] * adim,
                       sizeof(float) * (size_t)adim);
        }
    cr_assert_eq(k, len);
    out->t = (rv_vit_tokens){.len = len, .modality = out->mod, .pos = out->pos,
                             .seq_time = out->time, .nvideo = nv, .video = out->video, .naudio = na,
                             .audio = out->audio, .grid = all->grid,
                             .audio_steps = all->audio_steps, .window = out->window,
                             .layout = all->layout};
}

static inline void vit_slice_free(vit_slice *s)
{
    free(s->global), free(s->mod), free(s->hidden), free(s->pos), free(s->time);
    free(s->window), free(s->video), free(s->audio);
    memset(s, 0, sizeof *s);
}

#endif
