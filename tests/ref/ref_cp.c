/* ref_cp.c: the shared context-parallel test run (see ref_cp.h). */
#include "ref_cp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_ops.h"

void ref_cp_global_make(const ref_cp_case *c, int ranks, ref_cp_global *g)
{
    size_t n = (size_t)c->seq * c->heads * c->dim;
    ref_rng r = ref_rng_make(c->seed);
    g->q = ref_alloc_f(n), g->k = ref_alloc_f(n), g->v = ref_alloc_f(n);
    g->dout = ref_alloc_f(n);
    ref_fill_normal(&r, g->q, n, 0.0f, 1.5f);
    ref_fill_normal(&r, g->k, n, 0.0f, 1.5f);
    ref_fill_uniform(&r, g->v, n, -1.0f, 1.0f);
    ref_fill_uniform(&r, g->dout, n, -1.0f, 1.0f);
    g->o = ref_alloc_f(n), g->dq = ref_alloc_f(n), g->dk = ref_alloc_f(n);
    g->dv = ref_alloc_f(n), g->lse = ref_alloc_f((size_t)c->seq * c->heads);
    g->stats = calloc((size_t)ranks, sizeof(rv_cp_stats));
}

void ref_cp_global_free(ref_cp_global *g)
{
    free(g->q), free(g->k), free(g->v), free(g->dout), free(g->o), free(g->lse);
    free(g->dq), free(g->dk), free(g->dv), free(g->stats);
    memset(g, 0, sizeof *g);
}

/* Rows of the rank's segments between global (S, row) and slice (len, row). */
static void slice_rows(const rv_shard_plan *p, int rank, size_t row, const float *global,
                       float *slice, int to_slice)
{
    rv_shard_seg s[RV_SHARD_MAX_SEGS];
    int n = rv_shard_segments(p, rank, s);
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        float *gl = (float *)global + (size_t)s[i].start * row;
        float *sl = slice + (size_t)off * row;
        if (to_slice)
            memcpy(sl, gl, sizeof(float) * row * (size_t)s[i].len);
        else
            memcpy(gl, sl, sizeof(float) * row * (size_t)s[i].len);
        off += s[i].len;
    }
}

rv_status ref_cp_run_rank(const ref_cp_case *c, rv_comm *comm, int threads, int backward,
                          ref_cp_global *g)
{
    rv_shard_plan plan;
    rv_backend *be = NULL;
    rv_cp_attn cp;
    rv_status st = rv_shard_plan_make(c->shard, comm->size, c->seq, &plan);
    if (st != RV_OK)
        return st;
    const int r = comm->rank;
    const int64_t len = rv_shard_len(&plan, r);
    const size_t row = (size_t)c->heads * c->dim, n = (size_t)(len > 0 ? len : 1) * row;
    float *q = ref_alloc_f(n), *k = ref_alloc_f(n), *v = ref_alloc_f(n), *dout = ref_alloc_f(n);
    float *o = ref_alloc_f(n), *lse = ref_alloc_f((size_t)(len > 0 ? len : 1) * c->heads);
    float *dq = ref_alloc_f(n), *dk = ref_alloc_f(n), *dv = ref_alloc_f(n);
    slice_rows(&plan, r, row, g->q, q, 1);
    slice_rows(&plan, r, row, g->k, k, 1);
    slice_rows(&plan, r, row, g->v, v, 1);
    slice_rows(&plan, r, row, g->dout, dout, 1);
    if ((st = rv_backend_cpu_create(threads, &be)) != RV_OK ||
        (st = rv_cp_attn_init(&cp, be, comm, &plan, c->strategy, c->heads, c->dim, c->causal,
                              0.0f)) != RV_OK ||
        (st = rv_cp_attn_forward(&cp, q, k, v, o, lse)) != RV_OK)
        goto end;
    if (backward && (st = rv_cp_attn_backward(&cp, q, k, v, o, lse, dout, dq, dk, dv)) != RV_OK)
        goto end;
    slice_rows(&plan, r, row, g->o, o, 0);
    slice_rows(&plan, r, row, g->dq, dq, 0);
    slice_rows(&plan, r, row, g->dk, dk, 0);
    slice_rows(&plan, r, row, g->dv, dv, 0);
    /* lse (heads, len) -> global (heads, S) */
    rv_shard_seg s[RV_SHARD_MAX_SEGS];
    int ns = rv_shard_segments(&plan, r, s);
    for (int h = 0; h < c->heads; h++) {
        int64_t off = 0;
        for (int i = 0; i < ns; i++) {
            memcpy(g->lse + (size_t)h * c->seq + s[i].start, lse + (size_t)h * len + off,
                   sizeof(float) * (size_t)s[i].len);
            off += s[i].len;
        }
    }
    g->stats[r] = cp.stats;
end:
    rv_backend_free(&be);
    free(q), free(k), free(v), free(dout), free(o), free(lse), free(dq), free(dk), free(dv);
    return st;
}

void ref_cp_single(const ref_cp_case *c, const ref_cp_global *in, int backward,
                   ref_cp_global *out)
{
    rv_backend *be = NULL;
    if (rv_backend_cpu_create(2, &be) != RV_OK) {
        fprintf(stderr, "ref_cp_single: %s\n", rv_last_error());
        abort();
    }
    rv_attn_mask m = {.kind = c->causal ? RV_MASK_CAUSAL : RV_MASK_NONE, .q_start = 0, .k_start = 0};
    rv_attn_fwd_args a = {.q = in->q, .k = in->k, .v = in->v, .o = out->o, .lse = out->lse,
                          .sq = (int)c->seq, .sk = (int)c->seq, .heads = c->heads, .dim = c->dim,
                          .scale = 0.0f, .mask = m, .accumulate = 0};
    if (be->attn_fwd(be, &a) != RV_OK)
        abort();
    if (backward) {
        rv_attn_bwd_args b = {.q = in->q, .k = in->k, .v = in->v, .o = out->o, .lse = out->lse,
                              .dout = in->dout, .dq = out->dq, .dk = out->dk, .dv = out->dv,
                              .sq = (int)c->seq, .sk = (int)c->seq, .heads = c->heads,
                              .dim = c->dim, .scale = 0.0f, .mask = m, .accumulate = 0};
        if (be->attn_bwd(be, &b) != RV_OK)
            abort();
    }
    rv_backend_free(&be);
}
