/* cp_span_ring.c: the ring strategy under an attention span (rv_cp_attention.h;
 * an entry of cp_strategies.c), over a contiguous plan.
 *
 * Rank r's queries need the keys of rank s only when s's key range comes within
 * `reach` of r's (and, when causal, starts no later than r's last time). At
 * set-up (cp_span_ring_plan) every rank learns every rank's ranges (one
 * all-gather), works out for each peer the smallest run of its own rows that
 * peer can see, and the ranks swap those runs' sizes (one all-to-all of row
 * ranges) and, once, their keys and times. Every forward then posts the receives
 * of the peers' K/V runs and the sends of its own, computes its own block while
 * they travel, and folds in each received run (log-sum-exp merge, in peer order,
 * so the result does not depend on arrival). The backward swaps the same runs,
 * computes dQ locally and the runs' dK/dV into buffers it sends back; each rank
 * adds what comes back into its own rows. A rank whose span reaches only its
 * neighbours moves O(window) rows per layer. The encoder's forward in query rows
 * uses the exchange and the rows' attention apart (cp_span_exchange,
 * cp_span_rows). Message tags: 21..26 (keys, times, K, V, dK, dV). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cp_span.h"
#include "cp_strategies.h"

enum { TAG_KEY = 21, TAG_TIME = 22, TAG_SK = 23, TAG_SV = 24, TAG_SDK = 25, TAG_SDV = 26 };

/* ---- the exchange plan -------------------------------------------------------------- */

/* Smallest run [*a, *b) of rows whose keys come within reach of [qmin, qmax]
 * (and, causal, start no later than tmax); empty: *a == *b == 0. */
static void run_within(const double *key, const double *time, int64_t len, double reach,
                       int causal, double qmin, double qmax, double tmax, int64_t *a,
                       int64_t *b)
{
    int64_t lo = -1, hi = -1;
    for (int64_t j = 0; j < len; j++) {
        if (key[j] < qmin - reach || key[j] > qmax + reach || (causal && time[j] > tmax))
            continue;
        if (lo < 0)
            lo = j;
        hi = j;
    }
    *a = lo < 0 ? 0 : lo;
    *b = lo < 0 ? 0 : hi + 1;
}

rv_status cp_span_ring_plan(rv_cp_attn *cp)
{
    rv_cp_span_state *s = cp->span;
    const int n = cp->comm->size, me = cp->comm->rank;
    rv_status st = RV_OK;
    double mine[4] = {INFINITY, -INFINITY, INFINITY, -INFINITY};
    for (int64_t j = 0; j < s->len; j++) {
        mine[0] = fmin(mine[0], s->key_h[j]), mine[1] = fmax(mine[1], s->key_h[j]);
        mine[2] = fmin(mine[2], s->time_h[j]), mine[3] = fmax(mine[3], s->time_h[j]);
    }
    int64_t *sendr = calloc((size_t)n * 2, sizeof *sendr), *recvr = calloc((size_t)n * 2, sizeof *recvr);
    if (!(s->range = malloc(sizeof(double) * 4 * (size_t)n)) || !sendr || !recvr) {
        st = rv_fail(RV_ERR_NOMEM, "cp attention: out of memory for the span's plan");
        goto end;
    }
    if ((st = rv_comm_allgather(cp->comm, mine, s->range, sizeof mine)) != RV_OK)
        goto end;
    for (int r = 0; r < n; r++) {
        const double *rg = s->range + 4 * r;
        if (r == me || !(rg[0] <= rg[1])) /* itself, or a rank without tokens */
            continue;
        run_within(s->key_h, s->time_h, s->len, s->reach, cp->causal, rg[0], rg[1], rg[3],
                   &sendr[2 * r], &sendr[2 * r + 1]);
    }
    if ((st = rv_comm_alltoall(cp->comm, sendr, recvr, sizeof(int64_t) * 2)) != RV_OK)
        goto end;
    s->peer = calloc((size_t)n, sizeof *s->peer);
    if (!s->peer) {
        st = rv_fail(RV_ERR_NOMEM, "cp attention: out of memory for the span's plan");
        goto end;
    }
    for (int r = 0; r < n; r++) {
        if (r == me)
            continue;
        int64_t sa = sendr[2 * r], sb = sendr[2 * r + 1], ra = recvr[2 * r], rb = recvr[2 * r + 1];
        if (sa == sb && ra == rb)
            continue;
        if (ra < 0 || rb < ra || rb > rv_shard_len(&cp->plan, r)) {
            st = rv_fail(RV_ERR_INTERNAL, "cp attention: rank %d offers rows [%lld, %lld)", r,
                         (long long)ra, (long long)rb);
            goto end;
        }
        span_peer *p = &s->peer[s->npeer++];
        p->rank = r, p->send_a = sa, p->send_b = sb, p->recv_a = ra, p->recv_b = rb;
        p->recv_start = cp_segs_of(&cp->plan, r).seg[0].start + ra;
    }
end:
    free(sendr), free(recvr);
    return st;
}

/* ---- the span ring ------------------------------------------------------------------ */

static rv_attn_mask mask_with(const rv_cp_attn *cp, int64_t k_start, const double *kk,
                              const double *kt)
{
    const rv_cp_span_state *s = cp->span;
    return (rv_attn_mask){.kind = RV_MASK_SPAN, .q_start = s->start, .k_start = k_start,
                          .q_key = s->key, .k_key = kk, .q_time = s->time, .k_time = kt,
                          .reach = s->reach, .causal = cp->causal};
}

/* Once per set-up: the peers' keys and times of the runs we receive. */
static rv_status swap_meta(rv_cp_attn *cp)
{
    rv_cp_span_state *s = cp->span;
    rv_comm *c = cp->comm;
    rv_status st = RV_OK;
    rv_comm_request **reqs = calloc((size_t)s->npeer * 4 + 1, sizeof *reqs);
    int nr = 0;
    if (!reqs)
        return rv_fail(RV_ERR_NOMEM, "cp attention span: out of memory");
    for (int i = 0; i < s->npeer && st == RV_OK; i++) {
        span_peer *p = &s->peer[i];
        const size_t rows = (size_t)(p->recv_b - p->recv_a);
        if ((st = cp_alloc_d(cp, rows, &p->key)) != RV_OK || (st = cp_alloc_d(cp, rows, &p->time)) != RV_OK)
            break;
        if (rows && ((st = rv_comm_irecv(c, p->key, rows * sizeof(double), p->rank, TAG_KEY,
                                         &reqs[nr++])) != RV_OK ||
                     (st = rv_comm_irecv(c, p->time, rows * sizeof(double), p->rank, TAG_TIME,
                                         &reqs[nr++])) != RV_OK))
            break;
    }
    for (int i = 0; i < s->npeer && st == RV_OK; i++) {
        span_peer *p = &s->peer[i];
        const size_t rows = (size_t)(p->send_b - p->send_a);
        if (rows && ((st = rv_comm_isend(c, s->key + p->send_a, rows * sizeof(double), p->rank,
                                         TAG_KEY, &reqs[nr++])) != RV_OK ||
                     (st = rv_comm_isend(c, s->time + p->send_a, rows * sizeof(double), p->rank,
                                         TAG_TIME, &reqs[nr++])) != RV_OK))
            break;
        cp->stats.bytes_sent += 16.0 * (double)rows;
    }
    rv_status wst = cp_wait(cp, reqs, nr);
    st = st != RV_OK ? st : wst;
    free(reqs);
    if (st != RV_OK)
        return st;
    /* Host copies for the pair counts. */
    for (int i = 0; i < s->npeer; i++) {
        span_peer *p = &s->peer[i];
        const size_t rows = (size_t)(p->recv_b - p->recv_a);
        p->key_h = malloc(sizeof(double) * (rows ? rows : 1));
        p->time_h = malloc(sizeof(double) * (rows ? rows : 1));
        if (!p->key_h || !p->time_h)
            return rv_fail(RV_ERR_NOMEM, "cp attention span: out of memory");
        if (rows && ((st = cp->be->copy(cp->be, p->key_h, p->key, rows * sizeof(double),
                                        RV_COPY_DEVICE_TO_HOST)) != RV_OK ||
                     (st = cp->be->copy(cp->be, p->time_h, p->time, rows * sizeof(double),
                                        RV_COPY_DEVICE_TO_HOST)) != RV_OK))
            return st;
        if (!(p->row_pairs = malloc(sizeof(double) * (size_t)(s->len + 1))))
            return rv_fail(RV_ERR_NOMEM, "cp attention span: out of memory");
        p->pairs = cp_span_pairs_rows(s->key_h, s->time_h, s->start, s->len, p->key_h, p->time_h,
                                   p->recv_start, (int64_t)rows, s->reach, cp->causal,
                                   p->row_pairs);
        if ((st = cp_env_make(p->key_h, (int64_t)rows, &p->env)) != RV_OK)
            return st;
    }
    s->have_meta = 1;
    return RV_OK;
}

/* Posts the receives of the peers' K/V runs (into their buffers) and the sends of
 * ours (rows of k, v). */
static rv_status post_runs(rv_cp_attn *cp, const float *k, const float *v,
                           rv_comm_request **reqs, int *nr)
{
    rv_cp_span_state *s = cp->span;
    rv_comm *c = cp->comm;
    const size_t rowf = (size_t)cp->heads * cp->dim, rowb = rowf * sizeof(float);
    rv_status st = RV_OK;
    size_t held = 0;
    for (int i = 0; i < s->npeer && st == RV_OK; i++) {
        span_peer *p = &s->peer[i];
        const size_t rows = (size_t)(p->recv_b - p->recv_a);
        if (!rows)
            continue;
        if ((!p->k && (st = cp_alloc(cp, rows * rowf, &p->k)) != RV_OK) ||
            (!p->v && (st = cp_alloc(cp, rows * rowf, &p->v)) != RV_OK) ||
            (st = rv_comm_irecv(c, p->k, rows * rowb, p->rank, TAG_SK, &reqs[(*nr)++])) != RV_OK ||
            (st = rv_comm_irecv(c, p->v, rows * rowb, p->rank, TAG_SV, &reqs[(*nr)++])) != RV_OK)
            return st;
        held += 2 * rows * rowb;
    }
    cp_note_peak(cp, held);
    for (int i = 0; i < s->npeer && st == RV_OK; i++) {
        span_peer *p = &s->peer[i];
        const size_t rows = (size_t)(p->send_b - p->send_a);
        if (!rows)
            continue;
        if ((st = rv_comm_isend(c, k + p->send_a * rowf, rows * rowb, p->rank, TAG_SK,
                                &reqs[(*nr)++])) != RV_OK ||
            (st = rv_comm_isend(c, v + p->send_a * rowf, rows * rowb, p->rank, TAG_SV,
                                &reqs[(*nr)++])) != RV_OK)
            return st;
        cp->stats.bytes_sent += 2.0 * (double)rows * rowb;
    }
    return st;
}

rv_status cp_span_ring_forward(rv_cp_attn *cp, const float *q, const float *k, const float *v,
                               float *o, float *lse)
{
    rv_cp_span_state *s = cp->span;
    const int H = cp->heads, d = cp->dim, len = (int)s->len;
    rv_status st = RV_OK;
    rv_comm_request **reqs = calloc((size_t)s->npeer * 4 + 1, sizeof *reqs);
    int nr = 0;
    if (!reqs)
        return rv_fail(RV_ERR_NOMEM, "cp attention span: out of memory");
    if (!s->have_meta && (st = swap_meta(cp)) != RV_OK)
        goto end;
    /* k, v may come from kernels still queued: finish them before they are sent. */
    if ((st = cp->be->synchronize(cp->be)) != RV_OK || (st = post_runs(cp, k, v, reqs, &nr)) != RV_OK)
        goto end;
    double t0 = rv_clock_s();
    rv_attn_fwd_args a = {.q = q, .k = k, .v = v, .o = o, .lse = lse, .sq = len, .sk = len,
                          .heads = H, .dim = d, .scale = cp->scale,
                          .mask = mask_with(cp, s->start, s->key, s->time), .accumulate = 0};
    if ((st = cp->be->attn_fwd(cp->be, &a)) != RV_OK || (st = cp_busy_end(cp, t0)) != RV_OK)
        goto end;
    cp->stats.flops += 4.0 * d * H * s->local_pairs;
    if ((st = cp_wait(cp, reqs, nr)) != RV_OK)
        goto end;
    nr = 0;
    t0 = rv_clock_s();
    for (int i = 0; i < s->npeer; i++) {
        span_peer *p = &s->peer[i];
        const int rows = (int)(p->recv_b - p->recv_a);
        if (!rows || len == 0)
            continue;
        rv_attn_fwd_args b = {.q = q, .k = p->k, .v = p->v, .o = o, .lse = lse, .sq = len,
                              .sk = rows, .heads = H, .dim = d, .scale = cp->scale,
                              .mask = mask_with(cp, p->recv_start, p->key, p->time),
                              .accumulate = 1};
        if ((st = cp->be->attn_fwd(cp->be, &b)) != RV_OK)
            goto end;
        cp->stats.flops += 4.0 * d * H * p->pairs;
    }
    st = cp_busy_end(cp, t0);
end:
    if (nr)
        cp_wait(cp, reqs, nr);
    free(reqs);
    return st;
}

rv_status cp_span_ring_backward(rv_cp_attn *cp, const float *q, const float *k,
                                const float *v, const float *o, const float *lse,
                                const float *dout, float *dq, float *dk, float *dv)
{
    rv_cp_span_state *s = cp->span;
    rv_comm *c = cp->comm;
    const int H = cp->heads, d = cp->dim, len = (int)s->len;
    const size_t rowf = (size_t)H * d, rowb = rowf * sizeof(float);
    rv_status st = RV_OK;
    rv_comm_request **reqs = calloc((size_t)s->npeer * 4 + 1, sizeof *reqs);
    float **gk = calloc((size_t)s->npeer + 1, sizeof *gk), **gv = calloc((size_t)s->npeer + 1, sizeof *gv);
    float **bk = calloc((size_t)s->npeer + 1, sizeof *bk), **bv = calloc((size_t)s->npeer + 1, sizeof *bv);
    float *sub_lse = NULL;
    int nr = 0;
    if (!reqs || !gk || !gv || !bk || !bv) {
        st = rv_fail(RV_ERR_NOMEM, "cp attention span: out of memory");
        goto end;
    }
    if (!s->have_meta && (st = swap_meta(cp)) != RV_OK)
        goto end;
    if ((st = cp->be->synchronize(cp->be)) != RV_OK || (st = post_runs(cp, k, v, reqs, &nr)) != RV_OK)
        goto end;
    double t0 = rv_clock_s();
    rv_attn_bwd_args a = {.q = q, .k = k, .v = v, .o = o, .lse = lse, .dout = dout, .dq = dq,
                          .dk = dk, .dv = dv, .sq = len, .sk = len, .heads = H, .dim = d,
                          .scale = cp->scale, .mask = mask_with(cp, s->start, s->key, s->time),
                          .accumulate = 0};
    if ((st = cp->be->attn_bwd(cp->be, &a)) != RV_OK || (st = cp_busy_end(cp, t0)) != RV_OK)
        goto end;
    cp->stats.flops += 10.0 * d * H * s->local_pairs;
    if ((st = cp_wait(cp, reqs, nr)) != RV_OK)
        goto end;
    nr = 0;
    /* The runs' dK/dV, computed here, go back to their owners; ours come back. */
    size_t held = 0;
    t0 = rv_clock_s();
    for (int i = 0; i < s->npeer; i++) {
        span_peer *p = &s->peer[i];
        const size_t rows = (size_t)(p->recv_b - p->recv_a);
        if (!rows)
            continue;
        if ((st = cp_alloc(cp, rows * rowf, &gk[i])) != RV_OK ||
            (st = cp_alloc(cp, rows * rowf, &gv[i])) != RV_OK ||
            (st = cp->be->fill(cp->be, gk[i], 0.0f, rows * rowf)) != RV_OK ||
            (st = cp->be->fill(cp->be, gv[i], 0.0f, rows * rowf)) != RV_OK)
            goto end;
        held += 2 * rows * rowb;
        if (len == 0)
            continue;
        /* Only my query rows whose keys come within reach of the run's: a kernel's
         * buffers follow its query count. lse is (heads, len): the rows' part of
         * each head goes to a scratch (heads, rows) array. */
        int64_t qa, qb;
        cp_env_rows(&s->env, cp_env_min(&p->env) - s->reach, p->env.max_pre[rows - 1] + s->reach, &qa,
                 &qb);
        if (qb <= qa)
            continue;
        const int nq = (int)(qb - qa);
        if (!sub_lse) {
            if ((st = cp_alloc(cp, (size_t)H * len, &sub_lse)) != RV_OK)
                goto end;
            held += sizeof(float) * (size_t)H * len;
        }
        for (int h = 0; h < H && st == RV_OK; h++)
            st = cp->be->copy(cp->be, sub_lse + (size_t)h * nq, lse + (size_t)h * len + qa,
                              sizeof(float) * (size_t)nq, RV_COPY_DEVICE_TO_DEVICE);
        if (st != RV_OK)
            goto end;
        rv_attn_mask pm = mask_with(cp, p->recv_start, p->key, p->time);
        pm.q_start = s->start + qa, pm.q_key = s->key + qa, pm.q_time = s->time + qa;
        rv_attn_bwd_args b = {.q = q + qa * rowf, .k = p->k, .v = p->v, .o = o + qa * rowf,
                              .lse = sub_lse, .dout = dout + qa * rowf, .dq = dq + qa * rowf,
                              .dk = gk[i], .dv = gv[i], .sq = nq, .sk = (int)rows, .heads = H,
                              .dim = d, .scale = cp->scale, .mask = pm, .accumulate = 1};
        if ((st = cp->be->attn_bwd(cp->be, &b)) != RV_OK)
            goto end;
        cp->stats.flops += 10.0 * d * H * p->pairs;
    }
    if ((st = cp_busy_end(cp, t0)) != RV_OK)
        goto end;
    for (int i = 0; i < s->npeer; i++) {
        span_peer *p = &s->peer[i];
        const size_t rows = (size_t)(p->send_b - p->send_a);
        if (!rows)
            continue;
        if ((st = cp_alloc(cp, rows * rowf, &bk[i])) != RV_OK ||
            (st = cp_alloc(cp, rows * rowf, &bv[i])) != RV_OK ||
            (st = rv_comm_irecv(c, bk[i], rows * rowb, p->rank, TAG_SDK, &reqs[nr++])) != RV_OK ||
            (st = rv_comm_irecv(c, bv[i], rows * rowb, p->rank, TAG_SDV, &reqs[nr++])) != RV_OK)
            goto end;
        held += 2 * rows * rowb;
    }
    cp_note_peak(cp, held);
    for (int i = 0; i < s->npeer; i++) {
        span_peer *p = &s->peer[i];
        const size_t rows = (size_t)(p->recv_b - p->recv_a);
        if (!rows)
            continue;
        if ((st = rv_comm_isend(c, gk[i], rows * rowb, p->rank, TAG_SDK, &reqs[nr++])) != RV_OK ||
            (st = rv_comm_isend(c, gv[i], rows * rowb, p->rank, TAG_SDV, &reqs[nr++])) != RV_OK)
            goto end;
        cp->stats.bytes_sent += 2.0 * (double)rows * rowb;
    }
    if ((st = cp_wait(cp, reqs, nr)) != RV_OK)
        goto end;
    nr = 0;
    /* Peer order, whatever the arrival: the sums do not depend on timing. */
    for (int i = 0; i < s->npeer; i++) {
        span_peer *p = &s->peer[i];
        const size_t rows = (size_t)(p->send_b - p->send_a);
        if (!rows)
            continue;
        if ((st = cp->be->add(cp->be, dk + p->send_a * rowf, bk[i], rows * rowf)) != RV_OK ||
            (st = cp->be->add(cp->be, dv + p->send_a * rowf, bv[i], rows * rowf)) != RV_OK)
            goto end;
    }
    st = cp->be->synchronize(cp->be);
end:
    if (nr)
        cp_wait(cp, reqs, nr);
    for (int i = 0; gk && i < s->npeer; i++) {
        if (gk)
            cp_free(cp, &gk[i]);
        if (gv)
            cp_free(cp, &gv[i]);
        if (bk)
            cp_free(cp, &bk[i]);
        if (bv)
            cp_free(cp, &bv[i]);
    }
    if (sub_lse)
        cp_free(cp, &sub_lse);
    free(reqs), free(gk), free(gv), free(bk), free(bv);
    return st;
}

/* ---- the span ring in query rows (the long-recording forward) ----------------------- */

rv_status cp_span_exchange(rv_cp_attn *cp, const float *k, const float *v)
{
    rv_cp_span_state *s = cp->span;
    rv_status st = RV_OK;
    rv_comm_request **reqs = calloc((size_t)s->npeer * 4 + 1, sizeof *reqs);
    int nr = 0;
    if (!reqs)
        return rv_fail(RV_ERR_NOMEM, "cp attention span: out of memory");
    if (!s->have_meta && s->npeer && (st = swap_meta(cp)) != RV_OK)
        goto end;
    if ((st = cp->be->synchronize(cp->be)) == RV_OK && (st = post_runs(cp, k, v, reqs, &nr)) == RV_OK)
        st = cp_wait(cp, reqs, nr);
    nr = 0;
end:
    if (nr)
        cp_wait(cp, reqs, nr);
    free(reqs);
    return st;
}

rv_status cp_span_rows(rv_cp_attn *cp, const float *q, int64_t r0, int64_t n, const float *k,
                       const float *v, float *o, float *lse)
{
    rv_cp_span_state *s = cp->span;
    const int H = cp->heads, d = cp->dim;
    const size_t rowf = (size_t)H * d;
    if (n <= 0)
        return RV_OK;
    double t0 = rv_clock_s();
    /* The chunk's keys, widened by the reach: only the key rows within them are
     * handed to the kernel (a kernel packs the keys it is given). */
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t i = r0; i < r0 + n; i++)
        lo = fmin(lo, s->key_h[i]), hi = fmax(hi, s->key_h[i]);
    lo -= s->reach, hi += s->reach;
    rv_status st = RV_OK;
    int merge = 0;
    int64_t a, b;
    cp_env_rows(&s->env, lo, hi, &a, &b);
    if (b > a) {
        rv_attn_mask m = mask_with(cp, s->start + a, s->key + a, s->time + a);
        m.q_start = s->start + r0, m.q_key = s->key + r0, m.q_time = s->time + r0;
        rv_attn_fwd_args fa = {.q = q, .k = k + (size_t)a * rowf, .v = v + (size_t)a * rowf, .o = o,
                               .lse = lse, .sq = (int)n, .sk = (int)(b - a), .heads = H, .dim = d,
                               .scale = cp->scale, .mask = m, .accumulate = 0};
        st = cp->be->attn_fwd(cp->be, &fa);
        merge = 1;
    }
    cp->stats.flops += 4.0 * d * H * (s->row_pairs[r0 + n] - s->row_pairs[r0]);
    for (int i = 0; st == RV_OK && i < s->npeer; i++) {
        span_peer *p = &s->peer[i];
        cp_env_rows(&p->env, lo, hi, &a, &b);
        if (b <= a)
            continue;
        rv_attn_mask pm = mask_with(cp, p->recv_start + a, p->key + a, p->time + a);
        pm.q_start = s->start + r0, pm.q_key = s->key + r0, pm.q_time = s->time + r0;
        rv_attn_fwd_args fb = {.q = q, .k = p->k + (size_t)a * rowf, .v = p->v + (size_t)a * rowf,
                               .o = o, .lse = lse, .sq = (int)n, .sk = (int)(b - a), .heads = H,
                               .dim = d, .scale = cp->scale, .mask = pm, .accumulate = merge};
        st = cp->be->attn_fwd(cp->be, &fb);
        merge = 1;
        cp->stats.flops += 4.0 * d * H * (p->row_pairs[r0 + n] - p->row_pairs[r0]);
    }
    /* Every query sees itself, so a chunk always meets its own rows. */
    if (st == RV_OK && !merge)
        st = rv_fail(RV_ERR_INTERNAL, "cp attention span: rows %lld..%lld reach no key",
                     (long long)r0, (long long)(r0 + n));
    rv_status st2 = cp_busy_end(cp, t0);
    return st != RV_OK ? st : st2;
}

