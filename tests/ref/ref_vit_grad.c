/* ref_vit_grad.c: central differences of the double forward's loss (ref_vit_grad.h). */
#include "ref_vit_grad.h"

#include <stdlib.h>

#include "ref_ops.h"
#include "ref_vit.h"

double ref_vit_loss_w(const rv_vit_model *m, const double *w, const rv_vit_tokens *all,
                      int causal, const uint8_t *hidden, const double *mask_token,
                      const double *R)
{
    const size_t n = (size_t)all->len * m->cfg.dim;
    double *y = ref_alloc_d(n);
    ref_vit_forward_w(m, w, all, causal, hidden, mask_token, y);
    double l = ref_dot(y, R, n);
    free(y);
    return l;
}

void ref_vit_fd_grad(const rv_vit_model *m, double *w, double *mask_token,
                     const rv_vit_tokens *all, int causal, const uint8_t *hidden,
                     const double *R, const int64_t *idx, int n, double h, double *out)
{
    for (int k = 0; k < n; k++) {
        double *e = idx[k] < (int64_t)m->arena_floats ? &w[idx[k]]
                                                      : &mask_token[idx[k] - (int64_t)m->arena_floats];
        double keep = *e;
        *e = keep + h;
        double lp = ref_vit_loss_w(m, w, all, causal, hidden, mask_token, R);
        *e = keep - h;
        double lm = ref_vit_loss_w(m, w, all, causal, hidden, mask_token, R);
        *e = keep;
        out[k] = (lp - lm) / (2 * h);
    }
}
