/* cp_span.c: the state of an attention span (rv_cp_attention.h,
 * rv_cp_attn_set_span) and what every strategy reads of it: every token's key and
 * time in the backend's memory and on the host, the exact visible-pair counts the
 * statistics use, the mask of a call (cp_mask, with or without a span), the keys
 * in global order that allgather, ulysses and a single rank mask with, and the key
 * envelopes that cut the span ring's calls down to the rows a span reaches. The
 * span ring's exchange plan and calls are cp_span_ring.c's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cp_span.h"

/* ---- key envelopes ------------------------------------------------------------------ */

rv_status cp_env_make(const double *key, int64_t n, key_env *e)
{
    e->n = n;
    e->max_pre = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    e->min_suf = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    if (!e->max_pre || !e->min_suf)
        return rv_fail(RV_ERR_NOMEM, "cp attention span: out of memory");
    for (int64_t j = 0; j < n; j++)
        e->max_pre[j] = j ? fmax(e->max_pre[j - 1], key[j]) : key[j];
    for (int64_t j = n - 1; j >= 0; j--)
        e->min_suf[j] = j < n - 1 ? fmin(e->min_suf[j + 1], key[j]) : key[j];
    return RV_OK;
}

double cp_env_min(const key_env *e)
{
    return e->n > 0 ? e->min_suf[0] : INFINITY;
}

void cp_env_free(key_env *e)
{
    free(e->max_pre), free(e->min_suf);
    memset(e, 0, sizeof *e);
}

/* First j in [0, n) with x[j] > v (or >= v when ge), x non-decreasing; n if none. */
static int64_t first_above(const double *x, int64_t n, double v, int ge)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (ge ? x[mid] >= v : x[mid] > v)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

void cp_env_rows(const key_env *e, double lo, double hi, int64_t *a, int64_t *b)
{
    *a = first_above(e->max_pre, e->n, lo, 1);
    *b = first_above(e->min_suf, e->n, hi, 0);
    if (*b < *a)
        *b = *a;
}

/* ---- host helpers ----------------------------------------------------------------- */

/* A key entry for counting: sorted by (key, time, pos). */
typedef struct kent {
    double key, time;
    int64_t pos;
} kent;

static int kent_cmp(const void *a, const void *b)
{
    const kent *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    if (x->time != y->time)
        return x->time < y->time ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* First index of e[0..n) not less than (key, time, pos). */
static int64_t lower(const kent *e, int64_t n, double key, double time, int64_t pos)
{
    int64_t lo = 0, hi = n;
    kent t = {.key = key, .time = time, .pos = pos};
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (kent_cmp(&e[mid], &t) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Exactly the (query, key) pairs the span mask lets through (rv_backend.h): sorted
 * keys, two binary searches per query. Causal with reach 0 (blocks) counts the
 * same-key keys up to (time, position); causal with reach > 0 (windows, where a
 * key is its time) counts keys from key - reach up to (key, key, position). With
 * prefix, also the running count over the query rows. */
double cp_span_pairs_rows(const double *qk, const double *qt, int64_t q_start, int64_t n,
                          const double *kk, const double *kt, int64_t k_start, int64_t m,
                          double reach, int causal, double *prefix)
{
    if (prefix)
        for (int64_t i = 0; i <= n; i++)
            prefix[i] = 0;
    if (n <= 0 || m <= 0)
        return 0;
    kent *e = malloc(sizeof *e * (size_t)m);
    if (!e)
        return (double)n * (double)m; /* statistics only: an upper bound */
    for (int64_t j = 0; j < m; j++)
        e[j] = (kent){.key = kk[j], .time = kt[j], .pos = k_start + j};
    qsort(e, (size_t)m, sizeof *e, kent_cmp);
    double pairs = 0;
    for (int64_t i = 0; i < n; i++) {
        const double q = qk[i];
        int64_t lo = lower(e, m, q - reach, -INFINITY, INT64_MIN), hi;
        if (!causal)
            hi = lower(e, m, q + reach, INFINITY, INT64_MAX);
        else if (reach > 0)
            hi = lower(e, m, q, q, q_start + i + 1);
        else
            hi = lower(e, m, q, qt[i], q_start + i + 1);
        pairs += (double)(hi > lo ? hi - lo : 0);
        if (prefix)
            prefix[i + 1] = pairs;
    }
    free(e);
    return pairs;
}

double cp_span_pairs(const double *qk, const double *qt, int64_t q_start, int64_t n,
                     const double *kk, const double *kt, int64_t k_start, int64_t m,
                     double reach, int causal)
{
    return cp_span_pairs_rows(qk, qt, q_start, n, kk, kt, k_start, m, reach, causal, NULL);
}

/* ---- set-up ------------------------------------------------------------------------- */

rv_status cp_alloc_d(rv_cp_attn *cp, size_t n, double **p)
{
    *p = NULL;
    return cp->be->alloc(cp->be, sizeof(double) * (n > 0 ? n : 1), (void **)p);
}

void cp_free_d(rv_cp_attn *cp, double **p)
{
    if (*p)
        cp->be->free(cp->be, *p);
    *p = NULL;
}

void rv_cp_attn_free(rv_cp_attn *cp)
{
    if (!cp || !cp->span)
        return;
    rv_cp_span_state *s = cp->span;
    cp->be->synchronize(cp->be); /* kernels may still read the arrays */
    for (int i = 0; i < s->npeer; i++) {
        span_peer *p = &s->peer[i];
        cp_free_d(cp, &p->key), cp_free_d(cp, &p->time);
        free(p->key_h), free(p->time_h), free(p->row_pairs);
        cp_env_free(&p->env);
        cp_free(cp, &p->k), cp_free(cp, &p->v);
    }
    free(s->peer);
    cp_free_d(cp, &s->key), cp_free_d(cp, &s->time);
    cp_free_d(cp, &s->g_key), cp_free_d(cp, &s->g_time);
    free(s->key_h), free(s->time_h), free(s->g_key_h), free(s->g_time_h), free(s->range);
    free(s->row_pairs);
    cp_env_free(&s->env);
    free(s);
    cp->span = NULL;
}

/* Every key and time in global order (host and backend copies), for allgather,
 * ulysses and a single rank. */
rv_status cp_span_gather_keys(rv_cp_attn *cp)
{
    rv_cp_span_state *s = cp->span;
    const int n = cp->comm->size;
    const int64_t S = cp->plan.seq, maxlen = rv_shard_max_len(&cp->plan);
    rv_status st = RV_OK;
    double *pad = NULL;
    s->g_key_h = malloc(sizeof(double) * (size_t)(S > 0 ? S : 1));
    s->g_time_h = malloc(sizeof(double) * (size_t)(S > 0 ? S : 1));
    pad = malloc(sizeof(double) * 2 * (size_t)n * (size_t)(maxlen > 0 ? maxlen : 1));
    double *mine = malloc(sizeof(double) * 2 * (size_t)(maxlen > 0 ? maxlen : 1));
    if (!s->g_key_h || !s->g_time_h || !pad || !mine) {
        st = rv_fail(RV_ERR_NOMEM, "cp attention: out of memory for the span's keys");
        goto end;
    }
    for (int64_t j = 0; j < maxlen; j++) {
        mine[2 * j] = j < s->len ? s->key_h[j] : 0;
        mine[2 * j + 1] = j < s->len ? s->time_h[j] : 0;
    }
    if (n > 1) {
        if ((st = rv_comm_allgather(cp->comm, mine, pad, sizeof(double) * 2 * (size_t)maxlen)) != RV_OK)
            goto end;
        cp->stats.bytes_sent += (double)(n - 1) * 16.0 * (double)maxlen;
    } else {
        memcpy(pad, mine, sizeof(double) * 2 * (size_t)maxlen);
    }
    for (int r = 0; r < n; r++) {
        cp_segs sg = cp_segs_of(&cp->plan, r);
        for (int i = 0; i < sg.n; i++)
            for (int64_t j = 0; j < sg.seg[i].len; j++) {
                const double *e = pad + 2 * ((size_t)r * maxlen + sg.off[i] + j);
                s->g_key_h[sg.seg[i].start + j] = e[0];
                s->g_time_h[sg.seg[i].start + j] = e[1];
            }
    }
    if ((st = cp_alloc_d(cp, (size_t)S, &s->g_key)) != RV_OK ||
        (st = cp_alloc_d(cp, (size_t)S, &s->g_time)) != RV_OK ||
        (st = cp->be->copy(cp->be, s->g_key, s->g_key_h, sizeof(double) * (size_t)S,
                           RV_COPY_HOST_TO_DEVICE)) != RV_OK ||
        (st = cp->be->copy(cp->be, s->g_time, s->g_time_h, sizeof(double) * (size_t)S,
                           RV_COPY_HOST_TO_DEVICE)) != RV_OK)
        goto end;
    /* The pair counts never change: count them once (statistics). */
    const cp_segs me = cp_segs_of(&cp->plan, cp->comm->rank);
    for (int i = 0; i < me.n; i++)
        s->seg_pairs[i] = cp_span_pairs(s->g_key_h + me.seg[i].start, s->g_time_h + me.seg[i].start,
                                        me.seg[i].start, me.seg[i].len, s->g_key_h, s->g_time_h, 0,
                                        S, s->reach, cp->causal);
end:
    free(pad);
    free(mine);
    return st;
}

rv_status cp_span_begin(rv_cp_attn *cp, double reach, const double *key, const double *time)
{
    const cp_segs mine = cp_segs_of(&cp->plan, cp->comm->rank);
    rv_cp_span_state *s = calloc(1, sizeof *s);
    if (!s)
        return rv_fail(RV_ERR_NOMEM, "cp attention span: out of memory");
    cp->span = s;
    s->reach = reach;
    s->len = mine.len;
    s->start = mine.n ? mine.seg[0].start : 0;
    const size_t n = (size_t)(mine.len > 0 ? mine.len : 1);
    if (!(s->key_h = malloc(sizeof(double) * n)) || !(s->time_h = malloc(sizeof(double) * n)))
        return rv_fail(RV_ERR_NOMEM, "cp attention span: out of memory");
    for (int64_t j = 0; j < mine.len; j++) {
        if (!isfinite(key[j]) || !isfinite(time[j]))
            return rv_fail(RV_ERR_INVALID, "cp attention span: row %lld has key %g, time %g",
                           (long long)j, key[j], time[j]);
        s->key_h[j] = key[j], s->time_h[j] = time[j];
    }
    rv_status st;
    if ((st = cp_alloc_d(cp, n, &s->key)) != RV_OK || (st = cp_alloc_d(cp, n, &s->time)) != RV_OK ||
        (st = cp->be->copy(cp->be, s->key, s->key_h, sizeof(double) * (size_t)mine.len,
                           RV_COPY_HOST_TO_DEVICE)) != RV_OK ||
        (st = cp->be->copy(cp->be, s->time, s->time_h, sizeof(double) * (size_t)mine.len,
                           RV_COPY_HOST_TO_DEVICE)) != RV_OK)
        return st;
    if (!(s->row_pairs = malloc(sizeof(double) * (n + 1))))
        return rv_fail(RV_ERR_NOMEM, "cp attention span: out of memory");
    s->local_pairs = cp_span_pairs_rows(s->key_h, s->time_h, s->start, s->len, s->key_h,
                                        s->time_h, s->start, s->len, reach, cp->causal,
                                        s->row_pairs);
    return cp_env_make(s->key_h, s->len, &s->env);
}

/* ---- what a call reads --------------------------------------------------------------- */

rv_attn_mask cp_mask(const rv_cp_attn *cp, rv_shard_seg q, rv_shard_seg k)
{
    const rv_cp_span_state *s = cp->span;
    if (!s)
        return (rv_attn_mask){.kind = cp->causal ? RV_MASK_CAUSAL : RV_MASK_NONE,
                              .q_start = q.start, .k_start = k.start};
    return (rv_attn_mask){.kind = RV_MASK_SPAN, .q_start = q.start, .k_start = k.start,
                          .q_key = s->g_key + q.start, .k_key = s->g_key + k.start,
                          .q_time = s->g_time + q.start, .k_time = s->g_time + k.start,
                          .reach = s->reach, .causal = cp->causal};
}

double cp_pairs_all(const rv_cp_attn *cp, int i, rv_shard_seg q)
{
    if (cp->span)
        return i < 0 ? cp->span->all_pairs : cp->span->seg_pairs[i];
    rv_shard_seg all = {.start = 0, .len = cp->plan.seq};
    return rv_cp_visible_pairs(q, all, cp->causal);
}
