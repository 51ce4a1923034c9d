/* vit_classify.c: the classifier heads' logits (rv_vit_classify, rv_vit.h), from
 * the final outputs of a whole sequence or of one attention block: its CLS, its
 * distillation token, the mean of its other tokens. Each head is the linear
 * layer of its transformers task model on that model's own input:
 *   cls            classifier(CLS)                      ViTForImageClassification
 *   mean_norm      classifier(fc_norm(mean))            VideoMAEForVideoClassification
 *   cls_dist_norm  dense(layernorm((CLS + dist) / 2))   ASTForAudioClassification
 *   cls_mean       classifier(cat(CLS, mean))           Dinov2ForImageClassification
 *   mean           head(mean)                           ringvit's finetune classify
 * ref: transformers models/{vit,videomae,audio_spectrogram_transformer,dinov2}/modeling_*.py
 * Everything in double on the host, rounded to f32 once per logit. */
#include <math.h>
#include <stdlib.h>

#include "rv_vit.h"

/* y (D) = LayerNorm(x) with weight w, bias b, in double. */
static void layernorm(const double *x, const float *w, const float *b, int D, double eps,
                      double *y)
{
    double mean = 0, var = 0;
    for (int j = 0; j < D; j++)
        mean += x[j];
    mean /= D;
    for (int j = 0; j < D; j++)
        var += (x[j] - mean) * (x[j] - mean);
    const double rstd = 1.0 / sqrt(var / D + eps);
    for (int j = 0; j < D; j++)
        y[j] = (x[j] - mean) * rstd * w[j] + b[j];
}

/* The input each head reads, which of cls / dist / mean it needs. */
static rv_status need(const rv_vit_config *c, const float *cls, const float *dist,
                      const float *mean)
{
    const int h = c->head;
    const int want_cls = h == RV_HEAD_CLS || h == RV_HEAD_CLS_DIST_NORM || h == RV_HEAD_CLS_MEAN;
    const int want_dist = h == RV_HEAD_CLS_DIST_NORM;
    const int want_mean = h == RV_HEAD_MEAN_NORM || h == RV_HEAD_CLS_MEAN || h == RV_HEAD_MEAN;
    const char *missing = want_cls && !cls     ? "the CLS token's output"
                          : want_dist && !dist ? "the distillation token's output"
                          : want_mean && !mean ? "the mean of the tokens"
                                               : NULL;
    if (missing)
        return rv_fail(RV_ERR_INVALID, "vit classify: head %s reads %s, which was not given",
                       rv_vit_head_name(h), missing);
    return RV_OK;
}

rv_status rv_vit_classify(const rv_vit_model *m, const float *cls, const float *dist,
                          const float *mean, float *logits)
{
    if (!m || !logits)
        return rv_fail(RV_ERR_INVALID, "vit classify: model and logits are required");
    const rv_vit_config *c = &m->cfg;
    if (c->head == RV_HEAD_NONE || !m->head_w || !m->head_b)
        return rv_fail(RV_ERR_INVALID, "vit classify: the model has no classifier head");
    rv_status s = need(c, cls, dist, mean);
    if (s != RV_OK)
        return s;
    const int D = c->dim, in = rv_vit_head_in(c);
    double *x = malloc(sizeof(double) * (size_t)(2 * in)); /* the input, then scratch */
    if (!x)
        return rv_fail(RV_ERR_NOMEM, "vit classify: out of memory");
    double *t = x + in;
    switch (c->head) {
    case RV_HEAD_CLS:
        for (int j = 0; j < D; j++)
            x[j] = cls[j];
        break;
    case RV_HEAD_MEAN_NORM:
        for (int j = 0; j < D; j++)
            t[j] = mean[j];
        layernorm(t, m->pool_ln_w, m->pool_ln_b, D, c->pool_eps, x);
        break;
    case RV_HEAD_CLS_DIST_NORM:
        for (int j = 0; j < D; j++)
            t[j] = ((double)cls[j] + dist[j]) / 2;
        layernorm(t, m->head_ln_w, m->head_ln_b, D, c->eps, x);
        break;
    case RV_HEAD_CLS_MEAN:
        for (int j = 0; j < D; j++) {
            x[j] = cls[j];
            x[D + j] = mean[j];
        }
        break;
    default: /* RV_HEAD_MEAN */
        for (int j = 0; j < D; j++)
            x[j] = mean[j];
        break;
    }
    for (int k = 0; k < c->classes; k++) {
        const float *w = m->head_w + (size_t)k * in;
        double acc = m->head_b[k];
        for (int j = 0; j < in; j++)
            acc += (double)w[j] * x[j];
        logits[k] = (float)acc;
    }
    free(x);
    return RV_OK;
}
