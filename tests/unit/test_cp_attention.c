/* test_cp_attention.c: context-parallel attention on the local (threads) backend
 * against single-rank attention of the whole sequence: every strategy that
 * applies, N in {1, 2, 3, 4, 5, 8}, S in {N*64, 1000, 1237}, H in {1, 4, 6}, d in
 * {32, 64}, causal (zigzag) and not (contiguous), forward and backward; masked
 * steps, error growth with N, zigzag balance and argument errors; every strategy
 * again under the strict (NCCL-like) communicator at N = 2..5, and at N = 3 on each
 * CPU kernel set this CPU runs. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_paths.h"
#include "ref_attention.h"
#include "ref_cp.h"
#include "ref_ops.h"

/* Tolerances, on normalised errors (rv_rel_err), context-parallel attention
 * against single-rank attention of the whole sequence (both f32). A strategy
 * splits each row's keys into per-rank blocks merged by log-sum-exp: the partial
 * sums round differently from one pass, by sqrt(S) * eps (f32 epsilon 1.2e-7) at
 * most, about 4e-6 at S = 1237 (the largest S is 6151 with a few rows per head);
 * dK and dV also travel and add up in f32 across N ranks (N <= 8), and the
 * recomputed P amplifies its rounding by |S| ~ 10: ten times the forward's. */
#define TOL_FWD 1e-5
#define TOL_BWD 1e-4
/* The ring's backward error against the double reference may grow from cp 2 to
 * cp 8 by this factor at most (a drift as dK/dV travel would grow like N). */
#define GROWTH_CP8 2.0

typedef struct run_arg {
    const ref_cp_case *c;
    ref_cp_global *g;
    int backward;
} run_arg;

static rv_status rank_fn(rv_comm *comm, void *arg)
{
    run_arg *a = arg;
    return ref_cp_run_rank(a->c, comm, 1, a->backward, a->g);
}

typedef struct errs {
    double o, lse, dq, dk, dv;
} errs;

/* Runs the case on n local ranks and returns its errors against single-rank. */
static errs run_case(const ref_cp_case *c, int n, int backward, ref_cp_global *g_out)
{
    ref_cp_global g, want;
    ref_cp_global_make(c, n, &g);
    ref_cp_global_make(c, 1, &want); /* same seed: the same inputs */
    ref_cp_single(c, &want, backward, &want);
    run_arg arg = {c, &g, backward};
    rv_status st = rv_local_run(n, rank_fn, &arg);
    cr_assert_eq(st, RV_OK, "%s cp=%d S=%lld H=%d d=%d causal=%d: %s",
                 rv_cp_strategy_name(c->strategy), n, (long long)c->seq, c->heads, c->dim,
                 c->causal, rv_last_error());
    size_t nt = (size_t)c->seq * c->heads * c->dim, nl = (size_t)c->seq * c->heads;
    double *w = ref_alloc_d(nt);
    errs e = {0};
    ref_to_double(want.o, w, nt);
    e.o = rv_rel_err(g.o, w, nt);
    double *wl = ref_alloc_d(nl);
    ref_to_double(want.lse, wl, nl);
    e.lse = rv_rel_err(g.lse, wl, nl);
    if (backward) {
        ref_to_double(want.dq, w, nt);
        e.dq = rv_rel_err(g.dq, w, nt);
        ref_to_double(want.dk, w, nt);
        e.dk = rv_rel_err(g.dk, w, nt);
        ref_to_double(want.dv, w, nt);
        e.dv = rv_rel_err(g.dv, w, nt);
    }
    free(w), free(wl);
    ref_cp_global_free(&want);
    if (g_out)
        *g_out = g;
    else
        ref_cp_global_free(&g);
    return e;
}

static void check_case(const ref_cp_case *c, int n)
{
    errs e = run_case(c, n, 1, NULL);
    const char *s = rv_cp_strategy_name(c->strategy);
    cr_expect_leq(e.o, TOL_FWD, "%s cp=%d S=%lld H=%d d=%d causal=%d: O err %.3g", s, n,
                  (long long)c->seq, c->heads, c->dim, c->causal, e.o);
    cr_expect_leq(e.lse, TOL_FWD, "%s cp=%d S=%lld: LSE err %.3g", s, n, (long long)c->seq, e.lse);
    cr_expect_leq(e.dq, TOL_BWD, "%s cp=%d S=%lld H=%d d=%d causal=%d: dQ err %.3g", s, n,
                  (long long)c->seq, c->heads, c->dim, c->causal, e.dq);
    cr_expect_leq(e.dk, TOL_BWD, "%s cp=%d S=%lld H=%d d=%d causal=%d: dK err %.3g", s, n,
                  (long long)c->seq, c->heads, c->dim, c->causal, e.dk);
    cr_expect_leq(e.dv, TOL_BWD, "%s cp=%d S=%lld H=%d d=%d causal=%d: dV err %.3g", s, n,
                  (long long)c->seq, c->heads, c->dim, c->causal, e.dv);
}

/* Every N, S, strategy and mask; (H, d) rotate over {1, 4, 6} x {32, 64} so each
 * N meets every head count and both head sizes. */
static void grid_for(int n)
{
    const int heads[] = {1, 4, 6}, dims[] = {32, 64};
    const int64_t seqs[] = {(int64_t)n * 64, 1000, 1237};
    int turn = n;
    for (int si = 0; si < 3; si++)
        for (int causal = 0; causal < 2; causal++)
            for (int strat = 0; strat < 3; strat++) {
                int h = heads[turn % 3], d = dims[(turn / 3) % 2];
                turn++;
                if (strat == RV_CP_ULYSSES && h % n != 0)
                    h = n % 4 == 0 ? 4 * (n / 4) : n; /* a head count ulysses accepts */
                ref_cp_case c = {seqs[si], h, d, causal,
                                 causal ? RV_SHARD_ZIGZAG : RV_SHARD_CONTIGUOUS,
                                 (rv_cp_strategy)strat, 1000 + 10 * n + si};
                check_case(&c, n);
            }
}

Test(cp_attention, grid_cp1) { grid_for(1); }
Test(cp_attention, grid_cp2) { grid_for(2); }
Test(cp_attention, grid_cp3) { grid_for(3); }
#ifndef RV_TEST_SANITIZED /* the same code with more ranks; the release pass runs them */
Test(cp_attention, grid_cp4) { grid_for(4); }
Test(cp_attention, grid_cp5) { grid_for(5); }
Test(cp_attention, grid_cp8) { grid_for(8); }
#endif

/* Every strategy at cp 3 on each kernel set this CPU runs (kernel_paths.h; the
 * tests above run the set in use): causal zigzag and unmasked contiguous shards. */
static void kernel_path_cp(const char *path)
{
    if (!kernel_path_force(path))
        return;
    for (int strat = 0; strat < 3; strat++)
        for (int causal = 0; causal < 2; causal++) {
            ref_cp_case c = {1000, 3, 40, causal,
                             causal ? RV_SHARD_ZIGZAG : RV_SHARD_CONTIGUOUS,
                             (rv_cp_strategy)strat, 2000 + 10 * strat + causal};
            check_case(&c, 3);
        }
}

Test(cp_attention, avx512_kernels) { kernel_path_cp("avx512"); }
Test(cp_attention, avx2_kernels) { kernel_path_cp("avx2"); }
Test(cp_attention, blas_kernels) { kernel_path_cp("blas"); }

/* Slices longer than the ring's chunk (1024 rows on the CPU): blocks travel in
 * several chunks, each cut from every segment of the slice, with uneven segments
 * (S divisible by neither N nor 2N), and the forward's sends and receives run
 * ahead into three slots, which are reused while chunks are still being passed
 * on (4 and 5 ranks: more received steps than slots). Forward and backward
 * against single-rank. */
Test(cp_attention, ring_multi_chunk)
{
    const ref_cp_case cases[] = {
        {4999, 1, 32, 1, RV_SHARD_ZIGZAG, RV_CP_RING, 91},     /* 2 ranks: 3 chunks */
        {6151, 2, 32, 0, RV_SHARD_CONTIGUOUS, RV_CP_RING, 92}, /* 3 ranks: 3 chunks */
        {6151, 1, 64, 1, RV_SHARD_ZIGZAG, RV_CP_RING, 93},
        {4401, 1, 32, 0, RV_SHARD_CONTIGUOUS, RV_CP_RING, 94}, /* 4 ranks: 2 chunks */
        {5381, 1, 32, 1, RV_SHARD_ZIGZAG, RV_CP_RING, 95},     /* 5 ranks: 2 chunks */
    };
    const int ns[] = {2, 3, 3, 4, 5};
    for (int t = 0; t < 5; t++)
        check_case(&cases[t], ns[t]);
}

/* The same with the schedule the ring uses on a GPU (one exchange in flight, two
 * slots, own chunks sent piece by piece as they are computed), which cannot run
 * anywhere else: RINGVIT_RING_AHEAD=0 gives it to the CPU. */
Test(cp_attention, ring_multi_chunk_device_schedule)
{
    const ref_cp_case cases[] = {
        {4999, 1, 32, 1, RV_SHARD_ZIGZAG, RV_CP_RING, 96},
        {5381, 1, 32, 1, RV_SHARD_ZIGZAG, RV_CP_RING, 97},
        {4401, 2, 32, 0, RV_SHARD_CONTIGUOUS, RV_CP_RING, 98},
    };
    const int ns[] = {2, 5, 4};
    cr_assert_eq(setenv("RINGVIT_RING_AHEAD", "0", 1), 0);
    for (int t = 0; t < 3; t++)
        check_case(&cases[t], ns[t]);
    unsetenv("RINGVIT_RING_AHEAD");
}

/* Under the strict (NCCL-like) local communicator with no eager buffer (every send
 * waits for its receive, posts go out as groups at the next wait, a group completes
 * as a whole, messages match in post order): every strategy, forward and backward,
 * causal and not, against single-rank. The ring runs the schedule of a device (one
 * exchange in flight, RINGVIT_RING_AHEAD=0), the only one NCCL ever runs: the CPU's
 * run-ahead schedule posts receives far ahead, which NCCL's groups cannot do, and
 * is chosen for host buffers only. An ordering bug that would hang NCCL fails here
 * at the 30 s deadline with the ranks named. */
static void strict_for(int n)
{
    cr_assert_eq(setenv("RINGVIT_COMM_STRICT", "1", 1), 0);
    cr_assert_eq(setenv("RINGVIT_COMM_STRICT_EAGER", "0", 1), 0);
    cr_assert_eq(setenv("RINGVIT_COMM_TIMEOUT", "30", 1), 0);
    cr_assert_eq(setenv("RINGVIT_RING_AHEAD", "0", 1), 0);
    {
        for (int causal = 0; causal < 2; causal++)
            for (int strat = 0; strat < 3; strat++) {
                int h = strat == RV_CP_ULYSSES ? n : 2;
                ref_cp_case c = {1000 + 37 * n, h, 32, causal,
                                 causal ? RV_SHARD_ZIGZAG : RV_SHARD_CONTIGUOUS,
                                 (rv_cp_strategy)strat, 2000 + 10 * n + strat};
                check_case(&c, n);
            }
    }
}

Test(cp_attention, strict_comm_cp2) { strict_for(2); }
Test(cp_attention, strict_comm_cp3) { strict_for(3); }
Test(cp_attention, strict_comm_cp4) { strict_for(4); }
Test(cp_attention, strict_comm_cp5) { strict_for(5); }

/* Causal attention with the contiguous plan: rank 0's queries see nothing of the
 * blocks that visit it from later ranks (whole steps fully masked), and the first
 * query of a rank sees only itself. No NaN, same result. */
Test(cp_attention, fully_masked_steps)
{
    for (int strat = 0; strat < 3; strat++) {
        ref_cp_case c = {777, 4, 32, 1, RV_SHARD_CONTIGUOUS, (rv_cp_strategy)strat, 77};
        ref_cp_global g;
        errs e = run_case(&c, 4, 1, &g);
        cr_expect_leq(e.o, TOL_FWD, "%s: O err %.3g", rv_cp_strategy_name(c.strategy), e.o);
        cr_expect_leq(e.dk, TOL_BWD, "%s: dK err %.3g", rv_cp_strategy_name(c.strategy), e.dk);
        for (size_t i = 0; i < (size_t)777 * 4 * 32; i++)
            cr_assert(!isnan(g.o[i]) && !isnan(g.dq[i]) && !isnan(g.dk[i]), "NaN at %zu", i);
        ref_cp_global_free(&g);
    }
}

/* Gradients against the double reference: the ring's error at cp=8 is at most twice
 * that at cp=2 (dK/dV accumulate in f32 as they travel, they must not drift). */
Test(cp_attention, backward_error_does_not_grow_with_cp)
{
    ref_cp_case c = {1237, 4, 64, 1, RV_SHARD_ZIGZAG, RV_CP_RING, 4242};
    size_t nt = (size_t)c.seq * c.heads * c.dim;
    ref_cp_global in;
    ref_cp_global_make(&c, 1, &in);
    double *qd = ref_dup_d(in.q, nt), *kd = ref_dup_d(in.k, nt), *vd = ref_dup_d(in.v, nt);
    double *dd = ref_dup_d(in.dout, nt);
    double *dq = ref_alloc_d(nt), *dk = ref_alloc_d(nt), *dv = ref_alloc_d(nt);
    rv_attn_mask m = {.kind = RV_MASK_CAUSAL, .q_start = 0, .k_start = 0};
    ref_attn_bwd(qd, kd, vd, dd, (int)c.seq, (int)c.seq, c.heads, c.dim, 0, m, dq, dk, dv);
    double err[2];
    const int ns[2] = {2, 8};
    for (int t = 0; t < 2; t++) {
        ref_cp_global g;
        run_case(&c, ns[t], 1, &g);
        double e1 = rv_rel_err(g.dq, dq, nt), e2 = rv_rel_err(g.dk, dk, nt),
               e3 = rv_rel_err(g.dv, dv, nt);
        err[t] = fmax(e1, fmax(e2, e3));
        ref_cp_global_free(&g);
    }
    cr_expect_leq(err[1], GROWTH_CP8 * err[0], "backward error cp=8 %.3g > 2 x cp=2 %.3g", err[1], err[0]);
    cr_expect_leq(err[1], TOL_BWD, "backward error cp=8 %.3g", err[1]);
    free(qd), free(kd), free(vd), free(dd), free(dq), free(dk), free(dv);
    ref_cp_global_free(&in);
}

/* Zigzag gives every rank the same causal work: attention FLOPs within 5%. */
Test(cp_attention, zigzag_balance)
{
    const int ns[] = {2, 4, 8};
    for (int t = 0; t < 3; t++) {
        ref_cp_case c = {4096, 1, 32, 1, RV_SHARD_ZIGZAG, RV_CP_RING, 5};
        ref_cp_global g;
        run_case(&c, ns[t], 0, &g);
        double mn = INFINITY, mx = 0;
        for (int r = 0; r < ns[t]; r++) {
            mn = fmin(mn, g.stats[r].flops);
            mx = fmax(mx, g.stats[r].flops);
        }
        cr_expect(mx <= 1.05 * mn, "cp=%d: per-rank FLOPs from %.4g to %.4g", ns[t], mn, mx);
        /* and they add up to the whole causal attention */
        double sum = 0;
        for (int r = 0; r < ns[t]; r++)
            sum += g.stats[r].flops;
        cr_expect_eq(sum, 4.0 * 32 * 4096.0 * 4097.0 / 2, "total FLOPs %.17g", sum); /* integers */
        ref_cp_global_free(&g);
    }
}

static rv_status bad_init(rv_comm *comm, void *arg)
{
    (void)arg;
    rv_backend *be = NULL;
    rv_shard_plan plan;
    rv_cp_attn cp;
    cr_assert_eq(rv_backend_cpu_create(1, &be), RV_OK);
    cr_assert_eq(rv_shard_plan_make(RV_SHARD_CONTIGUOUS, 3, 300, &plan), RV_OK);
    rv_status st = rv_cp_attn_init(&cp, be, comm, &plan, RV_CP_ULYSSES, 4, 32, 0, 0.0f);
    cr_expect_eq(st, RV_ERR_INVALID);
    cr_expect(strstr(rv_last_error(), "heads=4") && strstr(rv_last_error(), "cp=3"),
              "message: %s", rv_last_error());
    rv_shard_plan p2;
    cr_assert_eq(rv_shard_plan_make(RV_SHARD_CONTIGUOUS, 2, 300, &p2), RV_OK);
    st = rv_cp_attn_init(&cp, be, comm, &p2, RV_CP_RING, 4, 32, 0, 0.0f);
    cr_expect_eq(st, RV_ERR_INVALID);
    cr_expect(strstr(rv_last_error(), "2 ranks"), "message: %s", rv_last_error());
    rv_backend_free(&be);
    return RV_OK;
}

Test(cp_attention, rejects_bad_combinations)
{
    cr_assert_eq(rv_local_run(3, bad_init, NULL), RV_OK, "%s", rv_last_error());
}
