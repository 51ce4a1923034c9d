/* train_classify.c: the classification loss on the pooled global embedding
 * (rv_classify_loss, rv_vit_train.h).
 *
 *   z = W p + b  (C),  p = mean of y over the non-CLS tokens of every rank,
 *   loss = logsumexp(z) - z[label],  g = scale (softmax(z) - onehot(label)),
 *   dp = W^T g,  dy_i += dp / tokens for each of this rank's non-CLS tokens,
 *   dW += g p^T, db += g   (on comm rank 0 only: the cp group's sum counts it once).
 *
 * The pooled vector is already the same on every rank (rv_vit_pool reduced it),
 * so nothing is communicated: comm only tells the rank. Logits, the
 * log-softmax and dp are computed in double. dy or dhead NULL skips that
 * gradient (evaluation); comm NULL is a single rank. */
#include <math.h>
#include <stdlib.h>

#include "rv_tokens.h"
#include "rv_vit_train.h"

rv_status rv_classify_loss(rv_comm *comm, const rv_train_head *h, const rv_vit_tokens *in,
                           const rv_vit_pooled *pooled, int label, float scale, double *loss,
                           int *pred, float *dy, rv_train_head *dhead)
{
    rv_status st = RV_OK;
    double *z = NULL; /* (C) logits, then scale * (p - onehot) */
    double *dp = NULL; /* (D) */
    if (!h || !in || !pooled || !loss)
        return rv_fail(RV_ERR_INVALID, "classify loss: head, tokens, pooled and loss are required");
    if (h->task != RV_TASK_CLASSIFY || !h->cls_w)
        return rv_fail(RV_ERR_INVALID, "classify loss: the head is a %s head",
                       rv_task_name(h->task));
    const int C = h->classes, D = h->dim;
    if (pooled->dim != D || !pooled->global)
        return rv_fail(RV_ERR_INVALID, "classify loss: pooled dim %d, head dim %d", pooled->dim, D);
    if (label < 0 || label >= C)
        return rv_fail(RV_ERR_INVALID, "classify loss: label %d outside [0, %d)", label, C);
    if (dhead && (dhead->task != RV_TASK_CLASSIFY || dhead->dim != D || dhead->classes != C))
        return rv_fail(RV_ERR_INVALID, "classify loss: gradient head (%s, dim %d, %d classes) "
                       "does not match the head (dim %d, %d classes)",
                       rv_task_name(dhead->task), dhead->dim, dhead->classes, D, C);
    if (dy && in->len > 0 && !in->modality)
        return rv_fail(RV_ERR_INVALID, "classify loss: tokens without modalities");

    z = malloc(sizeof(double) * (size_t)C);
    dp = calloc((size_t)D, sizeof(double));
    if (!z || !dp) {
        st = rv_fail(RV_ERR_NOMEM, "classify loss: out of memory for %d classes", C);
        goto end;
    }
    const float *p = pooled->global;
    double zmax = -INFINITY;
    int arg = 0;
    for (int c = 0; c < C; c++) {
        const float *w = h->cls_w + (size_t)c * D;
        double a = h->cls_b[c];
        for (int d = 0; d < D; d++)
            a += (double)w[d] * p[d];
        z[c] = a;
        if (a > zmax) {
            zmax = a;
            arg = c;
        }
    }
    if (!isfinite(zmax)) {
        st = rv_fail(RV_ERR_INVALID, "classify loss: logits are not finite (max %g)", zmax);
        goto end;
    }
    double sum = 0;
    for (int c = 0; c < C; c++)
        sum += exp(z[c] - zmax);
    const double lse = zmax + log(sum);
    *loss = lse - z[label];
    if (pred)
        *pred = arg;

    for (int c = 0; c < C; c++)
        z[c] = scale * (exp(z[c] - lse) - (c == label));
    if (dy && pooled->tokens > 0) {
        for (int c = 0; c < C; c++) {
            const float *w = h->cls_w + (size_t)c * D;
            for (int d = 0; d < D; d++)
                dp[d] += z[c] * w[d];
        }
        const double inv = 1.0 / (double)pooled->tokens;
        for (int64_t i = 0; i < in->len; i++) {
            if (in->modality[i] == RV_MOD_CLS)
                continue;
            float *row = dy + (size_t)i * D;
            for (int d = 0; d < D; d++)
                row[d] += (float)(dp[d] * inv);
        }
    }
    if (dhead && (!comm || comm->rank == 0)) {
        for (int c = 0; c < C; c++) {
            float *dw = dhead->cls_w + (size_t)c * D;
            for (int d = 0; d < D; d++)
                dw[d] += (float)(z[c] * p[d]);
            dhead->cls_b[c] += (float)z[c];
        }
    }
end:
    free(z);
    free(dp);
    return st;
}
