/* cp_attention.c: context-parallel attention (rv_cp_attention.h): set-up, the
 * attention span's set-up, and dispatch to the entry of the strategy table
 * (cp_strategies.c) that serves the call; one rank runs plain tiled attention,
 * no strategy. The top of encoder/cp/: it calls the table, the span's state
 * (cp_span.c) and the shared helpers (cp_common.c); nothing there calls it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_span.h"
#include "cp_strategies.h"

rv_status rv_cp_attn_init(rv_cp_attn *cp, rv_backend *be, rv_comm *comm,
                          const rv_shard_plan *plan, rv_cp_strategy strategy, int heads,
                          int dim, int causal, float scale)
{
    memset(cp, 0, sizeof *cp);
    if (!be || !comm || !plan)
        return rv_fail(RV_ERR_INVALID, "cp attention: backend, communicator and plan are required");
    if (heads <= 0 || dim <= 0)
        return rv_fail(RV_ERR_INVALID, "cp attention: heads=%d dim=%d", heads, dim);
    if (comm->size != plan->ranks)
        return rv_fail(RV_ERR_INVALID,
                       "cp attention: the shard plan is for %d ranks but the communicator "
                       "has %d", plan->ranks, comm->size);
    rv_status st = rv_cp_strategy_check(strategy, heads, comm->size);
    if (st != RV_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", rv_last_error());
        return rv_fail(st, "cp attention: %s", msg);
    }
    /* RINGVIT_RING_AHEAD=0: the device schedule on the host too (for comparison). */
    const char *env = getenv("RINGVIT_RING_AHEAD");
    const int ahead = rv_backend_is_host(be) && !(env && strcmp(env, "0") == 0);
    *cp = (rv_cp_attn){.be = be, .comm = comm, .plan = *plan, .strategy = strategy,
                       .heads = heads, .dim = dim, .causal = causal, .scale = scale,
                       .ring_ahead = ahead};
    return RV_OK;
}

rv_status rv_cp_attn_set_span(rv_cp_attn *cp, double reach, const double *key,
                              const double *time)
{
    if (!cp || !cp->be)
        return rv_fail(RV_ERR_INVALID, "cp attention span: not initialised");
    rv_cp_attn_free(cp);
    const cp_strategy_entry *e = cp_strategy_find(cp->strategy, 1);
    if (!(reach >= 0) || !isfinite(reach))
        return rv_fail(RV_ERR_INVALID, "cp attention span: reach %g", reach);
    if (rv_shard_len(&cp->plan, cp->comm->rank) > 0 && (!key || !time))
        return rv_fail(RV_ERR_INVALID, "cp attention span: keys and times are required");
    if (cp->plan.ranks > 1 && !e)
        return rv_fail(RV_ERR_INVALID, "cp attention: the %s strategy takes no attention span",
                       rv_cp_strategy_name(cp->strategy));
    if (cp->plan.ranks > 1 && e->span_contiguous && cp->plan.kind != RV_SHARD_CONTIGUOUS)
        return rv_fail(RV_ERR_INVALID, "cp attention: an attention span on the %s strategy "
                       "needs the contiguous shard plan", e->name);
    rv_status st = cp_span_begin(cp, reach, key, time);
    if (st == RV_OK)
        st = cp->plan.ranks == 1 ? cp_span_gather_keys(cp) : e->span_setup(cp);
    if (st != RV_OK)
        rv_cp_attn_free(cp);
    return st;
}

/* The entry serving a call of cp over more than one rank (RV_ERR_INVALID naming the
 * strategy when none does). */
static rv_status entry_of(const rv_cp_attn *cp, const cp_strategy_entry **e)
{
    *e = cp_strategy_find(cp->strategy, cp->span != NULL);
    if (!*e)
        return rv_fail(RV_ERR_INVALID, "cp attention: no %s strategy for %s attention",
                       rv_cp_strategy_name(cp->strategy), cp->span ? "span" : "full");
    return RV_OK;
}

rv_status rv_cp_attn_forward(rv_cp_attn *cp, const float *q, const float *k, const float *v,
                             float *o, float *lse)
{
    if (cp->plan.ranks == 1) { /* plain tiled attention, no communication */
        rv_shard_seg all = {.start = 0, .len = cp->plan.seq};
        rv_attn_fwd_args a = {.q = q, .k = k, .v = v, .o = o, .lse = lse, .sq = (int)cp->plan.seq,
                              .sk = (int)cp->plan.seq, .heads = cp->heads, .dim = cp->dim,
                              .scale = cp->scale, .mask = cp_mask(cp, all, all), .accumulate = 0};
        double t0 = rv_clock_s();
        rv_status st = cp->be->attn_fwd(cp->be, &a);
        rv_status st2 = cp_busy_end(cp, t0);
        st = st != RV_OK ? st : st2;
        cp->stats.flops += 4.0 * cp->dim * cp->heads * cp_pairs_all(cp, 0, all);
        return st;
    }
    const cp_strategy_entry *e;
    rv_status st = entry_of(cp, &e);
    return st != RV_OK ? st : e->forward(cp, q, k, v, o, lse);
}

rv_status rv_cp_attn_backward(rv_cp_attn *cp, const float *q, const float *k, const float *v,
                              const float *o, const float *lse, const float *dout, float *dq,
                              float *dk, float *dv)
{
    if (cp->plan.ranks == 1) {
        rv_shard_seg all = {.start = 0, .len = cp->plan.seq};
        rv_attn_bwd_args a = {.q = q, .k = k, .v = v, .o = o, .lse = lse, .dout = dout, .dq = dq,
                              .dk = dk, .dv = dv, .sq = (int)cp->plan.seq, .sk = (int)cp->plan.seq,
                              .heads = cp->heads, .dim = cp->dim, .scale = cp->scale,
                              .mask = cp_mask(cp, all, all), .accumulate = 0};
        double t0 = rv_clock_s();
        rv_status st = cp->be->attn_bwd(cp->be, &a);
        rv_status st2 = cp_busy_end(cp, t0);
        st = st != RV_OK ? st : st2;
        cp->stats.flops += 10.0 * cp->dim * cp->heads * cp_pairs_all(cp, 0, all);
        return st;
    }
    const cp_strategy_entry *e;
    rv_status st = entry_of(cp, &e);
    return st != RV_OK ? st : e->backward(cp, q, k, v, o, lse, dout, dq, dk, dv);
}
