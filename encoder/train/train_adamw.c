/* train_adamw.c: the optimizer of rv_vit_train.h: AdamW with torch.optim.AdamW's
 * semantics (decoupled weight decay applied before the moment update, bias
 * corrections folded into the step size and the denominator as torch does), its
 * learning-rate schedule (linear warm-up, then cosine decay to min_lr) and the
 * global gradient norm.
 *
 * Determinism: the step is element-wise (each element's arithmetic is done in
 * double from its own float state and rounded once), so splitting it over
 * OpenMP threads cannot change a bit. The norm sums fixed blocks in double, each
 * block's partial in its own slot, and adds the partials in block order, so it
 * too is independent of the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rv_vit_train.h"

#define NORM_BLOCK 8192 /* floats per partial sum of rv_grad_norm */

void rv_adamw_opts_default(rv_adamw_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->lr = 1e-4;
    o->beta1 = 0.9;
    o->beta2 = 0.999;
    o->eps = 1e-8;
    o->wd = 0.05;
    o->warmup = 0;
    o->total = 0;
    o->min_lr = 0.0;
    o->clip = 1.0;
}

double rv_lr_at(const rv_adamw_opts *o, int64_t step)
{
    if (!o)
        return 0.0;
    if (step < 0)
        step = 0;
    if (o->warmup > 0 && step < o->warmup)
        return o->lr * (double)(step + 1) / (double)o->warmup;
    const int64_t w = o->warmup > 0 ? o->warmup : 0;
    if (o->total <= w)
        return o->lr; /* no decay phase */
    if (step >= o->total)
        return o->min_lr;
    const double t = (double)(step - w) / (double)(o->total - w); /* [0, 1) */
    return o->min_lr + (o->lr - o->min_lr) * 0.5 * (1.0 + cos(M_PI * t));
}

rv_status rv_adamw_new(int64_t n, const uint8_t *decay, rv_adamw **out)
{
    rv_status s = RV_OK;
    rv_adamw *o = NULL;
    if (!out)
        return rv_fail(RV_ERR_INVALID, "rv_adamw_new: out is NULL");
    *out = NULL;
    if (n < 0 || (uint64_t)n > SIZE_MAX / sizeof(float) - 1)
        return rv_fail(RV_ERR_INVALID, "rv_adamw_new: parameter count %lld is out of range",
                       (long long)n);
    const size_t cnt = n > 0 ? (size_t)n : 1;
    o = calloc(1, sizeof *o);
    if (!o) {
        s = rv_fail(RV_ERR_NOMEM, "AdamW state: out of memory");
        goto end;
    }
    o->n = n;
    o->m = calloc(cnt, sizeof *o->m);
    o->v = calloc(cnt, sizeof *o->v);
    o->decay = malloc(cnt);
    if (!o->m || !o->v || !o->decay) {
        s = rv_fail(RV_ERR_NOMEM, "AdamW state for %lld parameters: out of memory (%.1f MiB)",
                    (long long)n, (double)cnt * 9.0 / (1 << 20));
        goto end;
    }
    if (decay) {
        for (size_t i = 0; i < (size_t)n; i++)
            o->decay[i] = decay[i] ? 1 : 0;
    } else {
        memset(o->decay, 1, cnt);
    }
    *out = o;
    o = NULL;
end:
    rv_adamw_free(&o);
    return s;
}

void rv_adamw_free(rv_adamw **po)
{
    if (!po || !*po)
        return;
    rv_adamw *o = *po;
    free(o->m);
    free(o->v);
    free(o->decay);
    free(o);
    *po = NULL;
}

double rv_grad_norm(const float *const *g, const int64_t *n, int count)
{
    double total = 0.0;
    if (!g || !n)
        return 0.0;
    for (int k = 0; k < count; k++) {
        if (!g[k] || n[k] <= 0)
            continue;
        const float *x = g[k];
        const int64_t len = n[k];
        const int64_t blocks = (len + NORM_BLOCK - 1) / NORM_BLOCK;
        double *part = malloc((size_t)blocks * sizeof *part);
        if (!part) { /* no memory for partials: the same sum, one block at a time */
            for (int64_t b = 0; b < blocks; b++) {
                const int64_t lo = b * NORM_BLOCK;
                const int64_t hi = lo + NORM_BLOCK < len ? lo + NORM_BLOCK : len;
                double sum = 0.0;
                for (int64_t i = lo; i < hi; i++)
                    sum += (double)x[i] * (double)x[i];
                total += sum;
            }
            continue;
        }
#pragma omp parallel for schedule(static) if (blocks > 8)
        for (int64_t b = 0; b < blocks; b++) {
            const int64_t lo = b * NORM_BLOCK;
            const int64_t hi = lo + NORM_BLOCK < len ? lo + NORM_BLOCK : len;
            double sum = 0.0;
            for (int64_t i = lo; i < hi; i++)
                sum += (double)x[i] * (double)x[i];
            part[b] = sum;
        }
        for (int64_t b = 0; b < blocks; b++)
            total += part[b];
        free(part);
    }
    return sqrt(total);
}

rv_status rv_adamw_step(rv_adamw *o, const rv_adamw_opts *opts, float *params,
                        const float *grads)
{
    if (!o || !opts || (o->n > 0 && (!params || !grads)))
        return rv_fail(RV_ERR_INVALID, "rv_adamw_step: NULL argument");
    const double b1 = opts->beta1, b2 = opts->beta2, eps = opts->eps, wd = opts->wd;
    if (!(b1 >= 0.0 && b1 < 1.0) || !(b2 >= 0.0 && b2 < 1.0) || !(eps >= 0.0) ||
        !(wd >= 0.0) || !(opts->lr >= 0.0) || !(opts->min_lr >= 0.0))
        return rv_fail(RV_ERR_INVALID,
                       "AdamW options out of range: lr %g, beta1 %g, beta2 %g (each in [0, 1)), "
                       "eps %g, wd %g, min_lr %g",
                       opts->lr, b1, b2, eps, wd, opts->min_lr);
    const double lr = rv_lr_at(opts, o->step);
    const double t = (double)(o->step + 1);
    /* torch: step_size = lr / (1 - b1^t); denom = sqrt(v) / sqrt(1 - b2^t) + eps. */
    const double step_size = lr / (1.0 - pow(b1, t));
    const double bc2_sqrt = sqrt(1.0 - pow(b2, t));
    const double keep = 1.0 - lr * wd; /* decoupled decay factor */
    float *m = o->m, *v = o->v;
    const uint8_t *decay = o->decay;
    const int64_t n = o->n;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) {
        const double g = grads[i];
        double p = params[i];
        if (decay[i])
            p *= keep;
        const double mi = b1 * (double)m[i] + (1.0 - b1) * g;
        const double vi = b2 * (double)v[i] + (1.0 - b2) * g * g;
        m[i] = (float)mi;
        v[i] = (float)vi;
        /* The update uses the stored (float) moments, as a resumed run will. */
        const double denom = sqrt((double)v[i]) / bc2_sqrt + eps;
        params[i] = (float)(p - step_size * (double)m[i] / denom);
    }
    o->step++;
    return RV_OK;
}
