/* ref_attention.h: naive double-precision attention (full softmax, no tiling) with
 * the same layouts and mask semantics as rv_backend.h (none, causal, span: the
 * pair rule written plainly), for the kernel tests. */
#ifndef RV_REF_ATTENTION_H
#define RV_REF_ATTENTION_H

#include <stdint.h>

#include "rv_backend.h"

/* q (sq, heads, dim), k, v (sk, heads, dim) -> o (sq, heads, dim), lse (heads, sq).
 * A row that sees no key gets o = 0, lse = -inf. scale 0 selects 1/sqrt(dim). */
void ref_attn_fwd(const double *q, const double *k, const double *v, int sq, int sk,
                  int heads, int dim, double scale, rv_attn_mask mask, double *o,
                  double *lse);

/* Gradients of sum(o * dout) with respect to q, k, v (overwritten), computed from
 * scratch with the full softmax. */
void ref_attn_bwd(const double *q, const double *k, const double *v, const double *dout,
                  int sq, int sk, int heads, int dim, double scale, rv_attn_mask mask,
                  double *dq, double *dk, double *dv);

/* Start times of n tokens at `rate` tokens per second as a sequence lays them out:
 * 2 s interleaving windows, each holding two thirds video tokens (frame f of
 * window w starts at 2w + 0.5 f: a frame's tokens start together), then the audio
 * tokens at sorted random times in [2w, 2w + 2) (seeded). Free with free(). */
double *ref_span_times(uint64_t seed, int n, double rate);

#endif
