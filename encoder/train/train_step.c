/* train_step.c: one optimizer step of an encoder and its task head on a dp x cp
 * mesh (rv_train_step of rv_vit_train.h), and the AdamW state it steps
 * (rv_adamw_new_model, rv_adamw_copy).
 *
 * The step: the gradients (model, then head) are summed over the cp group (each
 * rank's share of one sequence), then over the dp group (the recordings of the
 * batch); the global norm over [model | head]; clipping to opts->model.clip;
 * AdamW on [model | head]. The state is one rv_adamw over [model | head] (what
 * checkpoints hold), stepped here as two views so the head can have options of
 * its own (its learning rate); the views share the state's step count, which
 * advances once per call. Every rank does the same arithmetic on the same sums,
 * so the ranks' copies of the parameters stay identical. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rv_vit_train.h"

static int64_t head_floats(const rv_train_head *h)
{
    return h ? (int64_t)h->arena_floats : 0;
}

rv_status rv_adamw_new_model(const rv_vit_model *m, const rv_train_head *h, rv_adamw **out)
{
    uint8_t *decay = NULL;
    rv_status st;
    if (!out)
        return rv_fail(RV_ERR_INVALID, "rv_adamw_new_model: out is NULL");
    *out = NULL;
    if (!m)
        return rv_fail(RV_ERR_INVALID, "rv_adamw_new_model: the model is NULL");
    const int64_t n = rv_vit_params(m) + head_floats(h);
    if (!(decay = malloc((size_t)(n > 0 ? n : 1)))) {
        st = rv_fail(RV_ERR_NOMEM, "out of memory for %lld parameters' optimizer state",
                     (long long)n);
        goto end;
    }
    rv_train_decay_mask(m, h, decay);
    st = rv_adamw_new(n, decay, out);
end:
    free(decay);
    return st;
}

rv_status rv_adamw_copy(rv_adamw *dst, const rv_adamw *src)
{
    if (!dst || !src)
        return rv_fail(RV_ERR_INVALID, "rv_adamw_copy: NULL argument");
    if (dst->n != src->n)
        return rv_fail(RV_ERR_INVALID, "rv_adamw_copy: the states hold %lld and %lld parameters",
                       (long long)dst->n, (long long)src->n);
    if (dst->n > 0) {
        memcpy(dst->m, src->m, sizeof(float) * (size_t)dst->n);
        memcpy(dst->v, src->v, sizeof(float) * (size_t)dst->n);
    }
    dst->step = src->step;
    return RV_OK;
}

/* Sums x (n floats) over c in place; c NULL: nothing to sum. */
static rv_status sum_over(rv_comm *c, float *x, size_t n)
{
    return c ? rv_comm_allreduce(c, x, x, n, RV_COMM_F32) : RV_OK;
}

rv_status rv_train_step(rv_adamw *state, rv_vit_model *m, rv_vit_model *grad, rv_train_head *h,
                        rv_train_head *dhead, rv_comm *cp, rv_comm *dp,
                        const rv_train_step_opts *opts, rv_train_step_info *info)
{
    rv_status st;
    if (info)
        memset(info, 0, sizeof *info);
    if (!state || !m || !grad || !opts || !opts->model || (h && !dhead))
        return rv_fail(RV_ERR_INVALID, "rv_train_step: NULL argument");
    const rv_adamw_opts *mo = opts->model, *ho = opts->head ? opts->head : opts->model;
    const int64_t nm = rv_vit_params(m), nh = head_floats(h);
    if (grad->arena_floats != m->arena_floats || (h && dhead->arena_floats != h->arena_floats) ||
        state->n != nm + nh)
        return rv_fail(RV_ERR_INVALID,
                       "rv_train_step: sizes differ: model %lld and its gradient %lld, head "
                       "%lld and its gradient %lld, optimizer state %lld",
                       (long long)nm, (long long)grad->arena_floats, (long long)nh,
                       (long long)(h ? (int64_t)dhead->arena_floats : 0), (long long)state->n);
    /* Sum over the cp group (each rank's share of the sequence), then over dp. */
    if ((st = sum_over(cp, grad->arena, grad->arena_floats)) != RV_OK ||
        (h && (st = sum_over(cp, dhead->arena, dhead->arena_floats)) != RV_OK) ||
        (st = sum_over(dp, grad->arena, grad->arena_floats)) != RV_OK ||
        (h && (st = sum_over(dp, dhead->arena, dhead->arena_floats)) != RV_OK))
        return st;
    const float *gv[2] = {grad->arena, h ? dhead->arena : NULL};
    const int64_t gn[2] = {nm, nh};
    const double norm = rv_grad_norm(gv, gn, 2);
    if (info) {
        info->grad_norm = norm;
        info->lr = rv_lr_at(mo, state->step);
        info->head_lr = rv_lr_at(ho, state->step);
    }
    if (!isfinite(norm))
        return rv_fail(RV_ERR_INVALID, "the gradient is not finite (norm %g)", norm);
    if (mo->clip > 0 && norm > mo->clip) {
        const float c = (float)(mo->clip / norm);
        for (size_t i = 0; i < grad->arena_floats; i++)
            grad->arena[i] *= c;
        for (size_t i = 0; h && i < dhead->arena_floats; i++)
            dhead->arena[i] *= c;
        if (info)
            info->clipped = 1;
    }
    /* The views: [0, nm) with the model's options, [nm, nm + nh) with the head's. */
    rv_adamw vm = *state, vh = *state;
    vm.n = nm;
    vh.n = nh;
    vh.m += nm, vh.v += nm, vh.decay += nm;
    if ((st = rv_adamw_step(&vm, mo, m->arena, grad->arena)) != RV_OK ||
        (h && (st = rv_adamw_step(&vh, ho, h->arena, dhead->arena)) != RV_OK))
        return st;
    state->step++;
    if (info)
        info->step = state->step;
    return RV_OK;
}
