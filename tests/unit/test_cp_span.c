/* test_cp_span.c: context-parallel attention with attention spans
 * (rv_cp_attn_set_span) on the local (threads) backend against one rank over the
 * whole sequence (which the kernel tests check against a double-precision
 * reference), and against a naive double-precision masked attention for a few
 * rows: sliding windows, blocks and frames, causal and not, cp 1 to 5, every
 * strategy that applies, forward and backward; and the traffic: at cp 4 with a
 * short window each rank sends K/V only to the ranks its window reaches, within
 * 2x the rows within reach (counted by the communicator), not O(sequence).
 *
 * Token times follow the sequence layout: 2-second interleaving windows, each
 * holding its video tokens (2 tubelets a second, many patches per tubelet, so
 * equal times are common) then its audio tokens (every 0.16 s): times rise
 * window by window but not within one. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_ops.h"
#include "rv_comm.h"
#include "rv_cp_attention.h"

/* Tolerances, on normalised errors (max |got - want| / max |want|). Spans against
 * one rank: the visible keys of a row split into per-rank blocks merged by
 * log-sum-exp, in f32 (epsilon 1.2e-7), a few hundred visible keys a row and
 * d = 16, so sqrt(keys) * eps ~ 3e-6 for the outputs and the gradients alike (the
 * gradients' sums are over as few rows). One rank's ring twice is the same
 * computation: exact. */
#define TOL_CP 1e-5
/* The one-rank result on sampled rows against the naive double attention: the
 * same f32 roundings as the kernels' own tests (test_attention_span.c). */
#define TOL_NAIVE 1e-5

#define PATCHES 12 /* video tokens per tubelet */
#define BANDS 3    /* audio tokens per step */

typedef struct seq {
    int64_t S;
    int heads, dim;
    double *time;          /* (S) start times */
    float *q, *k, *v, *dout; /* (S, heads, dim) */
} seq;

/* Tokens of `seconds` of recording in 2 s windows. */
static void seq_make(seq *s, double seconds, int heads, int dim, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    s->heads = heads, s->dim = dim;
    int64_t cap = (int64_t)(seconds * (2 * PATCHES + BANDS / 0.16) + 1024);
    s->time = malloc(sizeof(double) * (size_t)cap);
    int64_t n = 0;
    for (int w = 0; w * 2.0 < seconds; w++) {
        for (int g = 0; g < 4; g++) /* tubelets every 0.5 s */
            for (int p = 0; p < PATCHES; p++)
                if (2.0 * w + 0.5 * g < seconds)
                    s->time[n++] = 2.0 * w + 0.5 * g;
        for (int step = (int)ceil(2.0 * w / 0.16 - 1e-9); step * 0.16 < 2.0 * w + 2 - 1e-9; step++)
            for (int b = 0; b < BANDS; b++)
                if (step * 0.16 < seconds)
                    s->time[n++] = step * 0.16;
    }
    cr_assert(n <= cap);
    s->S = n;
    const size_t nt = (size_t)n * heads * dim;
    s->q = ref_alloc_f(nt), s->k = ref_alloc_f(nt), s->v = ref_alloc_f(nt), s->dout = ref_alloc_f(nt);
    ref_rng r = ref_rng_make(seed);
    ref_fill_normal(&r, s->q, nt, 0.0f, 1.0f);
    ref_fill_normal(&r, s->k, nt, 0.0f, 1.0f);
    ref_fill_normal(&r, s->v, nt, 0.0f, 1.0f);
    ref_fill_normal(&r, s->dout, nt, 0.0f, 1.0f);
}

static void seq_free(seq *s)
{
    free(s->time), free(s->q), free(s->k), free(s->v), free(s->dout);
}

/* The span of a case: a window of W s (key = time, reach W / 2) or blocks of B s
 * (key = block index, reach 0; B = 0.5: one tubelet, the frame span). */
typedef struct span_case {
    int window;      /* 1: window, 0: blocks */
    double seconds;
    int causal;
} span_case;

static double key_of(const span_case *c, double t)
{
    return c->window ? t : floor(t / c->seconds + 1e-9);
}

typedef struct result {
    float *o, *lse, *dq, *dk, *dv; /* global order: (S, H, d), (H, S) */
    double *sent;                   /* (ranks) bytes each rank sent during the forward */
} result;

typedef struct job {
    const seq *s;
    const span_case *c;
    rv_cp_strategy strategy;
    int ranks, backward;
    result *res;
} job;

static rv_status rank_fn(rv_comm *comm, void *arg)
{
    job *j = arg;
    const seq *s = j->s;
    const int H = s->heads, d = s->dim, r = comm->rank;
    const size_t rowf = (size_t)H * d;
    rv_shard_plan plan;
    rv_status st = rv_shard_plan_make(RV_SHARD_CONTIGUOUS, j->ranks, s->S, &plan);
    if (st != RV_OK)
        return st;
    rv_shard_seg seg[RV_SHARD_MAX_SEGS];
    rv_shard_segments(&plan, r, seg);
    const int64_t g0 = seg[0].start, len = seg[0].len, cap = len > 0 ? len : 1;
    rv_backend *be = NULL;
    float *o = ref_alloc_f((size_t)cap * rowf), *lse = ref_alloc_f((size_t)cap * H);
    float *dq = ref_alloc_f((size_t)cap * rowf), *dk = ref_alloc_f((size_t)cap * rowf);
    float *dv = ref_alloc_f((size_t)cap * rowf);
    double *key = malloc(sizeof(double) * (size_t)cap), *time = malloc(sizeof(double) * (size_t)cap);
    for (int64_t i = 0; i < len; i++)
        time[i] = s->time[g0 + i], key[i] = key_of(j->c, time[i]);
    rv_cp_attn cp = {0};
    if ((st = rv_backend_cpu_create(1, &be)) != RV_OK ||
        (st = rv_cp_attn_init(&cp, be, comm, &plan, j->strategy, H, d, j->c->causal, 0.0f)) != RV_OK ||
        (st = rv_cp_attn_set_span(&cp, j->c->window ? j->c->seconds / 2 : 0.0, key, time)) != RV_OK)
        goto end;
    const float *q = s->q + g0 * rowf, *k = s->k + g0 * rowf, *v = s->v + g0 * rowf;
    const double sent0 = comm->sent_bytes;
    if ((st = rv_cp_attn_forward(&cp, q, k, v, o, lse)) != RV_OK)
        goto end;
    j->res->sent[r] = comm->sent_bytes - sent0;
    if (j->backward && (st = rv_cp_attn_backward(&cp, q, k, v, o, lse, s->dout + g0 * rowf, dq,
                                                 dk, dv)) != RV_OK)
        goto end;
    memcpy(j->res->o + g0 * rowf, o, sizeof(float) * (size_t)len * rowf);
    for (int h = 0; h < H; h++)
        memcpy(j->res->lse + (size_t)h * s->S + g0, lse + (size_t)h * len, sizeof(float) * (size_t)len);
    if (j->backward) {
        memcpy(j->res->dq + g0 * rowf, dq, sizeof(float) * (size_t)len * rowf);
        memcpy(j->res->dk + g0 * rowf, dk, sizeof(float) * (size_t)len * rowf);
        memcpy(j->res->dv + g0 * rowf, dv, sizeof(float) * (size_t)len * rowf);
    }
end:
    rv_cp_attn_free(&cp);
    rv_backend_free(&be);
    free(o), free(lse), free(dq), free(dk), free(dv), free(key), free(time);
    return st;
}

static void run(const seq *s, const span_case *c, rv_cp_strategy strategy, int ranks,
                int backward, result *res)
{
    const size_t nt = (size_t)s->S * s->heads * s->dim;
    res->o = ref_alloc_f(nt), res->lse = ref_alloc_f((size_t)s->S * s->heads);
    res->dq = ref_alloc_f(nt), res->dk = ref_alloc_f(nt), res->dv = ref_alloc_f(nt);
    res->sent = calloc((size_t)ranks, sizeof(double));
    job j = {s, c, strategy, ranks, backward, res};
    rv_status st = rv_local_run(ranks, rank_fn, &j);
    cr_assert_eq(st, RV_OK, "%s cp %d: %s", rv_cp_strategy_name(strategy), ranks, rv_last_error());
}

static void result_free(result *r)
{
    free(r->o), free(r->lse), free(r->dq), free(r->dk), free(r->dv), free(r->sent);
}

/* max |a - b| / max |b| over the finite entries (lse of rows that see nothing is -inf
 * on both sides). */
static double err(const float *a, const float *b, size_t n)
{
    double e = 0, m = 1e-30;
    for (size_t i = 0; i < n; i++) {
        if (isinf(b[i]) && a[i] == b[i])
            continue;
        double d = fabs((double)a[i] - b[i]);
        e = d > e || isnan(d) ? d : e;
        m = fabs(b[i]) > m ? fabs(b[i]) : m;
    }
    return e / m;
}

/* Naive double attention of query row i (head h) under the span: o (d). */
static void naive_row(const seq *s, const span_case *c, int64_t i, int h, double *o)
{
    const int H = s->heads, d = s->dim;
    const double scale = 1.0 / sqrt((double)d);
    double mx = -INFINITY, sum = 0;
    double *w = malloc(sizeof(double) * (size_t)s->S);
    for (int64_t j = 0; j < s->S; j++) {
        double ki = key_of(c, s->time[i]), kj = key_of(c, s->time[j]);
        int vis = fabs(ki - kj) <= (c->window ? c->seconds / 2 : 0.0);
        if (c->causal)
            vis = vis && (s->time[j] < s->time[i] || (s->time[j] == s->time[i] && j <= i));
        w[j] = -INFINITY;
        if (!vis)
            continue;
        double dot = 0;
        for (int e = 0; e < d; e++)
            dot += (double)s->q[((size_t)i * H + h) * d + e] * s->k[((size_t)j * H + h) * d + e];
        w[j] = dot * scale;
        mx = fmax(mx, w[j]);
    }
    for (int e = 0; e < d; e++)
        o[e] = 0;
    for (int64_t j = 0; j < s->S; j++) {
        if (w[j] == -INFINITY)
            continue;
        double p = exp(w[j] - mx);
        sum += p;
        for (int e = 0; e < d; e++)
            o[e] += p * s->v[((size_t)j * H + h) * d + e];
    }
    for (int e = 0; e < d; e++)
        o[e] = sum > 0 ? o[e] / sum : 0;
    free(w);
}

static void check_span(const span_case *c, double seconds, int heads)
{
    seq s;
    seq_make(&s, seconds, heads, 16, 1234 + (uint64_t)(c->seconds * 100) + (uint64_t)c->causal);
    const size_t nt = (size_t)s.S * heads * s.dim, nl = (size_t)s.S * heads;
    result want;
    run(&s, c, RV_CP_RING, 1, 1, &want);
    /* A few rows of the single-rank result against the naive double attention:
     * their normalised error over all the sampled rows. */
    double o[16], worst = 0, big = 1e-30;
    int64_t worst_row = 0;
    for (int64_t i = 0; i < s.S; i += s.S / 7 + 1)
        for (int h = 0; h < heads; h++) {
            naive_row(&s, c, i, h, o);
            for (int e = 0; e < s.dim; e++) {
                double d = fabs(want.o[((size_t)i * heads + h) * s.dim + e] - o[e]);
                if (!(d <= worst))
                    worst = d, worst_row = i;
                big = fmax(big, fabs(o[e]));
            }
        }
    cr_assert_leq(worst / big, TOL_NAIVE,
                  "%s %g causal %d: sampled rows differ from the naive attention by %.3g "
                  "(worst at row %lld)",
                  c->window ? "window" : "block", c->seconds, c->causal, worst / big,
                  (long long)worst_row);
    static const rv_cp_strategy strategies[] = {RV_CP_RING, RV_CP_ALLGATHER, RV_CP_ULYSSES};
    for (int n = 1; n <= 5; n++)
        for (int si = 0; si < 3; si++) {
            if (strategies[si] == RV_CP_ULYSSES && heads % n != 0)
                continue;
            result got;
            run(&s, c, strategies[si], n, 1, &got);
            double eo = err(got.o, want.o, nt), el = err(got.lse, want.lse, nl);
            double eq = err(got.dq, want.dq, nt), ek = err(got.dk, want.dk, nt);
            double ev = err(got.dv, want.dv, nt);
            const double tol = n == 1 && strategies[si] == RV_CP_RING ? 0.0 : TOL_CP;
            cr_expect(eo <= tol && el <= tol && eq <= tol && ek <= tol && ev <= tol,
                      "%s %g causal %d, %s cp %d: O %.2e LSE %.2e dQ %.2e dK %.2e dV %.2e",
                      c->window ? "window" : "block", c->seconds, c->causal,
                      rv_cp_strategy_name(strategies[si]), n, eo, el, eq, ek, ev);
            result_free(&got);
        }
    result_free(&want);
    seq_free(&s);
}

Test(cp_span, window_equals_one_rank)
{
    span_case cases[] = {{1, 3.0, 0}, {1, 3.0, 1}, {1, 0.2, 0}, {1, 0.2, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_span(&cases[i], 17.0, 4);
}

Test(cp_span, blocks_and_frames_equal_one_rank)
{
    /* blocks of 4 s (two interleaving windows), of 3 s (cutting through them), and
     * frames (one tubelet, 0.5 s) */
    span_case cases[] = {{0, 4.0, 0}, {0, 3.0, 1}, {0, 0.5, 0}, {0, 0.5, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_span(&cases[i], 15.0, 6);
}

/* The span strategies under the strict (NCCL-like) local communicator, no eager
 * buffer, device ring schedule (see test_cp_attention.c's strict tests): a window
 * and a block, causal and not, every strategy at cp 1..5. */
Test(cp_span, strict_comm_equals_one_rank)
{
    cr_assert_eq(setenv("RINGVIT_COMM_STRICT", "1", 1), 0);
    cr_assert_eq(setenv("RINGVIT_COMM_STRICT_EAGER", "0", 1), 0);
    cr_assert_eq(setenv("RINGVIT_COMM_TIMEOUT", "30", 1), 0);
    cr_assert_eq(setenv("RINGVIT_RING_AHEAD", "0", 1), 0);
    span_case cases[] = {{1, 3.0, 0}, {1, 3.0, 1}, {0, 4.0, 0}, {0, 3.0, 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_span(&cases[i], 15.0, 4);
}

Test(cp_span, traffic_follows_the_window)
{
    /* 60 s at cp 4: 15 s a rank; a 2 s window reaches 1 s into each neighbour. */
    span_case c = {1, 2.0, 0};
    seq s;
    seq_make(&s, 60.0, 2, 16, 99);
    const int n = 4;
    const double rowb = 2.0 * s.heads * s.dim * sizeof(float); /* K and V of a row */
    result got;
    run(&s, &c, RV_CP_RING, n, 0, &got);
    rv_shard_plan plan;
    cr_assert_eq(rv_shard_plan_make(RV_SHARD_CONTIGUOUS, n, s.S, &plan), RV_OK);
    double full = 0;
    for (int r = 0; r < n; r++) {
        rv_shard_seg seg[RV_SHARD_MAX_SEGS];
        rv_shard_segments(&plan, r, seg);
        /* The rows of r within reach of each other rank's tokens. */
        double need = 0;
        for (int p = 0; p < n; p++) {
            if (p == r)
                continue;
            rv_shard_seg ps[RV_SHARD_MAX_SEGS];
            rv_shard_segments(&plan, p, ps);
            double lo = INFINITY, hi = -INFINITY;
            for (int64_t i = ps[0].start; i < ps[0].start + ps[0].len; i++)
                lo = fmin(lo, s.time[i]), hi = fmax(hi, s.time[i]);
            for (int64_t i = seg[0].start; i < seg[0].start + seg[0].len; i++)
                need += s.time[i] >= lo - 1.0 && s.time[i] <= hi + 1.0;
        }
        full += (double)seg[0].len * (n - 1) * rowb;
        /* keys and times (16 bytes a row) go once with the first call */
        cr_expect(got.sent[r] <= 2.0 * need * (rowb + 16.0) + 1024,
                  "rank %d sent %.0f bytes; the rows within reach are %.0f (%.0f bytes)", r,
                  got.sent[r], need, need * rowb);
        cr_expect(need > 0 && got.sent[r] >= need * rowb, "rank %d sent %.0f bytes for %.0f rows",
                  r, got.sent[r], need);
    }
    double total = 0;
    for (int r = 0; r < n; r++)
        total += got.sent[r];
    cr_expect(total < 0.2 * full, "the ranks sent %.0f bytes, a full ring %.0f", total, full);
    result_free(&got);
    seq_free(&s);
}

static rv_status zigzag_rank(rv_comm *comm, void *arg)
{
    rv_status *got = arg;
    rv_shard_plan plan;
    rv_backend *be = NULL;
    rv_cp_attn cp = {0};
    double key[8] = {0}, time[8] = {0};
    rv_status st = rv_shard_plan_make(RV_SHARD_ZIGZAG, 2, 16, &plan);
    if (st == RV_OK)
        st = rv_backend_cpu_create(1, &be);
    if (st == RV_OK)
        st = rv_cp_attn_init(&cp, be, comm, &plan, RV_CP_RING, 2, 8, 1, 0.0f);
    if (st == RV_OK)
        got[comm->rank] = rv_cp_attn_set_span(&cp, 1.0, key, time);
    rv_cp_attn_free(&cp);
    rv_backend_free(&be);
    return st;
}

Test(cp_span, refuses_zigzag_on_the_ring)
{
    /* Spans on the ring need contiguous slices (zigzag is for causal full attention). */
    rv_status got[2] = {RV_OK, RV_OK};
    cr_assert_eq(rv_local_run(2, zigzag_rank, got), RV_OK, "%s", rv_last_error());
    cr_expect_eq(got[0], RV_ERR_INVALID);
    cr_expect_eq(got[1], RV_ERR_INVALID);
    rv_cp_attn cp = {0};
    double key[1] = {0}, time[1] = {0};
    cr_expect_eq(rv_cp_attn_set_span(&cp, 1.0, key, time), RV_ERR_INVALID); /* not initialised */
}
