/* vit_internal.h: what the encoder's forward and backward files share (not
 * installed): the argument checks and clock of the forward (vit_forward.c), the
 * token embedding of one rank's slice (vit_embed.c), the bilinear resampling of
 * the stored position grid it uses and that resampling's transpose. */
#ifndef RV_VIT_INTERNAL_H
#define RV_VIT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "rv_vit.h"

/* The spatial position table resampled from the stored (sg x sg) grid to
 * (dg x dg), bilinear with align_corners = false (torch's
 * F.interpolate(mode="bilinear") on the (D, sg, sg) image): src (sg*sg, D) row by
 * row, dst (dg*dg, D). Weights computed in double. */
void vit_pos_resample(const float *src, int sg, int dg, int dim, float *dst);

/* The transpose of vit_pos_resample: dsrc (sg*sg, D) += R^T ddst, ddst (dg*dg, D),
 * summed in double: the gradient of the stored grid from that of the resampled one. */
void vit_pos_resample_bwd(const double *ddst, int sg, int dg, int dim, double *dsrc);

/* codes (len, D): the time code of every token's start (rv_vit_time_code); a
 * start equal to the previous token's copies its row. */
void vit_time_codes(const rv_vit_tokens *in, int dim, float *codes);

/* Monotonic wall clock, s. */
double vit_now(void);

/* The checks of rv_vit_forward (model, run, backend, plan, slice; y non-NULL when
 * len > 0), with messages naming the numbers. y_on_device_ok: the caller runs on
 * a device backend when run->weights is set (the forward); 0: host backends only. */
rv_status vit_check_args(const rv_vit_model *m, const rv_vit_run *run, const rv_vit_tokens *in,
                         const float *y, int y_on_device_ok);

/* Scratch the embedding borrows from the forward's buffers (each (len, D) floats
 * of this rank's slice; they are overwritten). */
typedef struct vit_embed_scratch {
    float *codes;  /* (len, D) the tokens' time codes */
    float *video;  /* (nvideo, D) video projections before scattering */
    float *audio;  /* (naudio, D) audio projections */
    float *pos;    /* (in->grid^2, D) the resampled grid, or NULL when in->grid equals
                      the stored grid (or there is no video) */
} vit_embed_scratch;

/* Checks the slice against the model (modalities, counts, positions in range),
 * naming the first bad token. */
rv_status vit_tokens_check(const rv_vit_model *m, const rv_vit_tokens *in);

/* x (len, D) = embed(token i) for every token of the slice (rv_vit.h). hidden
 * (len, may be NULL): 1 replaces token i's patch projection (weights and bias) by
 * mask_token (D), as rv_vit_forward_train does. Adds the GEMM FLOPs to *flops. */
rv_status vit_embed(const rv_vit_model *m, rv_backend *be, const rv_vit_tokens *in,
                    const uint8_t *hidden, const float *mask_token,
                    const vit_embed_scratch *s, float *x, double *flops);


/* ---- training (rv_vit_train.h) ---------------------------------------------------------- */

/* What rv_vit_forward_train keeps for rv_vit_backward: everything (len, .) of
 * this rank's slice, in one host allocation (arena). */
struct rv_vit_acts {
    int64_t len;       /* tokens of the slice */
    int dim, layers, heads, mlp;
    float *x;          /* (L + 1, len, D) block inputs; x[L] is the final LayerNorm's input */
    float *xmid;       /* (L, len, D) the residual after attention (ln_2's input) */
    float *qkv;        /* (L, 3, len, D) q, k, v, each (len, heads, dh) */
    float *o;          /* (L, len, D) attention output (before out_proj) */
    float *pre;        /* (L, len, M) fc1 output before GELU */
    float *lse;        /* (L, heads, len) */
    float *ln_stats;   /* (L, 4, len) mean, rstd of ln_1, then of ln_2 */
    float *final_stats; /* (2, len) mean, rstd of the final LayerNorm */
    uint8_t *hidden;   /* (len) the hidden flags (0 when none were given) */
    int any_hidden;    /* 1 when a video or audio token is hidden */
    float *arena;      /* host memory, or be's when be is set */
    rv_backend *be;    /* the device backend whose memory holds arena; NULL: host */
    size_t bytes;      /* the allocation */
};

/* The embedding's backward for dx (len, D), the gradient of the embeddings x:
 * adds into grad's video_w, video_b, audio_w, audio_b (not for hidden tokens),
 * cls, pos (through the resampling's transpose when in->grid differs), band,
 * time_w, modality, and the hidden tokens' rows into dmask (D; may be NULL when
 * none is hidden). codes (len, D) and proj (max(nvideo, naudio), D) are scratch.
 * Adds the GEMM FLOPs to *flops. */
rv_status vit_embed_backward(const rv_vit_model *m, rv_backend *be, const rv_vit_tokens *in,
                             const uint8_t *hidden, const float *dx, float *codes, float *proj,
                             rv_vit_model *grad, float *dmask, double *flops);

#endif
