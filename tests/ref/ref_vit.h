/* ref_vit.h: a naive double-precision forward of the encoder (encoder/rv_vit.h)
 * over a WHOLE token sequence on one thread, and the pooling of its outputs: the
 * reference the context-parallel forward is tested against.
 *
 * Written from rv_vit.h's model description, sharing no code with encoder/:
 * every GEMM is a straight loop in double, attention is the plain softmax of the
 * full (S x S) score matrix per head (with an optional causal mask), LayerNorm
 * and GELU (erf) in double, the time code and the bilinear position resampling
 * evaluated from their formulas. The model's f32 weights are read as doubles
 * (or given as doubles: the _w variants, for finite differences). */
#ifndef RV_REF_VIT_H
#define RV_REF_VIT_H

#include <stdint.h>

#include "rv_vit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The sinusoid time code of t seconds (rv_vit_time_code's definition), (dim). */
void ref_vit_time_code(double t, int dim, double *code);

/* The stored spatial grid (sg x sg, dim) resampled to (dg x dg, dim), bilinear,
 * align_corners = false, as torch.nn.functional.interpolate. */
void ref_vit_pos_resample(const float *src, int sg, int dg, int dim, double *dst);

/* x (len, D): the embedding of every token of `all` (the whole sequence). */
void ref_vit_embed(const rv_vit_model *m, const rv_vit_tokens *all, double *x);

/* y (len, D): the per-token outputs after the final LayerNorm. */
void ref_vit_forward(const rv_vit_model *m, const rv_vit_tokens *all, int causal, double *y);

/* The same with the weights as doubles: w (m->arena_floats) in the layout of
 * m->arena (entry e of tensor m->X is w[(m->X - m->arena) + e]); m gives the
 * config and that layout only. hidden (len, may be NULL): 1 replaces token i's
 * patch projection (weights and bias) by mask_token (D), as
 * rv_vit_forward_train does (CLS tokens are never hidden). */
void ref_vit_embed_w(const rv_vit_model *m, const double *w, const rv_vit_tokens *all,
                     const uint8_t *hidden, const double *mask_token, double *x);
void ref_vit_forward_w(const rv_vit_model *m, const double *w, const rv_vit_tokens *all,
                       int causal, const uint8_t *hidden, const double *mask_token, double *y);

/* Pooling of y (len, D) as rv_vit_pool defines it, from the whole sequence. */
typedef struct ref_vit_pooled {
    int64_t tokens, segments;
    double *global;          /* (D) */
    double *segment;         /* (G, D) */
    double *segment_start, *segment_end; /* (G) */
    int64_t *segment_tokens; /* (G) */
    double *modality_mean;   /* (2, D) */
    int64_t modality_tokens[2];
    int has_cls;
    double *cls;             /* (D) */
} ref_vit_pooled;

void ref_vit_pool(const rv_vit_tokens *all, const double *y, int dim, double segment_s,
                  double end_s, ref_vit_pooled *out);
void ref_vit_pooled_free(ref_vit_pooled *p);

#ifdef __cplusplus
}
#endif
#endif
