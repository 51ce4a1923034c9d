/* cpu_attention.h: tile sizes and mask arithmetic shared by the CPU attention
 * forward and backward. Internal to kernels/cpu. */
#ifndef RV_CPU_ATTENTION_H
#define RV_CPU_ATTENTION_H

#include <math.h>

#include "../rv_backend.h"

/* Forward tiles: a (FWD_BQ x FWD_BK) score tile stays in L2 next to the key and
 * value rows it multiplies. Backward tiles are smaller: it keeps two score-sized
 * tiles and two key-sized accumulators per thread. */
#ifndef RV_FWD_BQ
#define RV_FWD_BQ 256
#endif
#ifndef RV_FWD_BK
#define RV_FWD_BK 512
#endif
#define RV_BWD_BQ 64
#define RV_BWD_BK 128
/* Span masks: the forward computes a key tile it meets partly in runs of sub-tiles
 * of this many keys (a multiple of 32, the score kernels' column block). */
#define RV_SPAN_SUB 32
/* Span masks: the most key tiles a forward thread keeps packed (the candidates of
 * one query tile, plus one: 16 MB a thread at dim 64); where a query tile may meet
 * more, or every key tile, the keys are packed once for all threads. */
#define RV_SPAN_SLOTS_MAX 32

/* Number of keys of the chunk that query row i (chunk-local) sees: a prefix of the
 * key chunk, since causal visibility is kp <= qp with kp = k_start + j. Every key
 * for no mask, and for a span mask (no prefix: cpu_attn_span.h decides). */
static inline int rv_mask_visible(const rv_attn_mask *m, int sk, int64_t i)
{
    if (m->kind != RV_MASK_CAUSAL)
        return sk;
    int64_t n = m->q_start + i - m->k_start + 1;
    return n < 0 ? 0 : (n > sk ? sk : (int)n);
}

static inline float rv_attn_scale(float scale, int dim)
{
    return scale != 0.0f ? scale : 1.0f / sqrtf((float)dim);
}

#endif
