/* ref_vit.h: a naive double-precision forward of the encoder (encoder/rv_vit.h)
 * over a WHOLE token sequence on one thread, and the pooling of its outputs: the
 * reference the context-parallel forward is tested against.
 *
 * Written from rv_vit.h's model description, sharing no code with encoder/:
 * every GEMM is a straight loop in double, attention is the plain softmax of the
 * full (S x S) score matrix per head (with an optional causal mask), LayerNorm
 * and the activation (ref_act_fwd: erf GELU, tanh GELU, QuickGELU) in double,
 * the time code, the grid resampling (bilinear, bicubic), VideoMAE's sinusoid
 * and AST's band x time grid evaluated from their formulas. Every family
 * feature of rv_vit_config is followed: q/k/v biases as qkv_bias says (absent
 * parts count as zero whatever the arena holds), layer scale, pre-norm, the
 * optional final norm, the time code and modality rows only with time_code,
 * special tokens (CLS, distillation) with their pos rows, and the family's
 * pooled output. The model's f32 weights are read as doubles (or given as
 * doubles: the _w variants, for finite differences); a tensor the family lacks
 * is NULL in the model and never read. */
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
/* The same for kind RV_POS_GRID_BILINEAR or RV_POS_GRID_BICUBIC (torch's bicubic:
 * A = -0.75, source index not clamped before the floor, the four taps clamped to
 * [0, sg - 1]). */
void ref_vit_pos_resample_kind(int kind, const float *src, int sg, int dg, int dim, double *dst);

/* VideoMAE's fixed position entry j (of dim) at flat index n: sin (j even) or
 * cos (j odd) of n / 10000^(2 floor(j/2) / dim), rounded to float (its table is
 * a float tensor). */
double ref_vit_sinusoid(int64_t n, int j, int dim);

/* Special slots at the head of the pos table (rv_vit.h: 1 for ringvit, cls for
 * the other families); the grid starts after them. */
int ref_vit_pos_special(const rv_vit_config *c);

/* x (len, D): the embedding of every token of `all` (the whole sequence). */
void ref_vit_embed(const rv_vit_model *m, const rv_vit_tokens *all, double *x);

/* y (len, D): the per-token outputs (after the final LayerNorm when final_norm). */
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
    double *cls;             /* (D) special token 0's output (zeros when none) */
    int dim;
    int has_dist;
    double *dist;            /* (D) special token 1's (distillation) output */
    /* ref_vit_pool_head: */
    double *pooled;          /* (D) the family's pooled output */
    int proj_dim;
    double *projected;       /* (proj_dim) proj_w @ pooled (NULL without projection) */
} ref_vit_pooled;

void ref_vit_pool(const rv_vit_tokens *all, const double *y, int dim, double segment_s,
                  double end_s, ref_vit_pooled *out);
/* p->pooled by m->cfg.pool from what ref_vit_pool gathered (rv_vit.h: CLS; the
 * mean of CLS and distillation; pool_ln(mean) and pool_ln(CLS) with pool_eps;
 * tanh(pooler_w CLS + pooler_b); the mean), then p->projected = proj_w @ pooled
 * when proj_dim > 0. Returns 0 when the pool kind's token is missing (pooled is
 * then computed from zeros), 1 otherwise. */
int ref_vit_pool_head(const rv_vit_model *m, ref_vit_pooled *p);
void ref_vit_pooled_free(ref_vit_pooled *p);

#ifdef __cplusplus
}
#endif
#endif
