/* ref_vit_grad.h: finite-difference gradients of the double-precision encoder
 * forward (ref_vit.h), the reference rv_vit_backward is tested against. The loss
 * is L = sum_i <y_i, R_i> over the whole sequence for a fixed R (S, D), so
 * dL/dy = R; dL/dw for one weight entry is the central difference
 * (L(w + h) - L(w - h)) / (2 h) of the double forward with that entry moved. */
#ifndef RV_REF_VIT_GRAD_H
#define RV_REF_VIT_GRAD_H

#include <stdint.h>

#include "rv_vit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* L = sum(y * R) of ref_vit_forward_w (weights w in m's arena layout). */
double ref_vit_loss_w(const rv_vit_model *m, const double *w, const rv_vit_tokens *all,
                      int causal, const uint8_t *hidden, const double *mask_token,
                      const double *R);

/* out[k] = dL/d(entry idx[k]) by central differences with step h, for n entries:
 * idx < m->arena_floats names w[idx] (a model weight), idx >= it names
 * mask_token[idx - m->arena_floats]. w and mask_token are moved and restored. */
void ref_vit_fd_grad(const rv_vit_model *m, double *w, double *mask_token,
                     const rv_vit_tokens *all, int causal, const uint8_t *hidden,
                     const double *R, const int64_t *idx, int n, double h, double *out);

#ifdef __cplusplus
}
#endif
#endif
