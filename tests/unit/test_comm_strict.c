/* test_comm_strict.c: the strict (NCCL-like) mode of the local communicator
 * (RINGVIT_COMM_STRICT=1), which exists to make ordering bugs of schedules written
 * for NCCL deadlock on the CPU. Each rule is checked where it differs from the
 * plain local mode: posts are not seen before a launch, a send above the eager
 * size waits for its receiver, a small one completes alone, a launch group
 * completes as a whole, messages match in post order whatever their tags; the
 * collectives and the ring shift still work under it. Then the ring backward's
 * message schedule before the fix (gradient sends queued into the K/V exchange's
 * group) must deadlock, caught by the deadline with the ranks named, and the
 * fixed one (the exchange started first) must pass. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ref_comm.h"
#include "rv_comm.h"

static void strict_env(const char *eager, const char *timeout)
{
    cr_assert_eq(setenv("RINGVIT_COMM_STRICT", "1", 1), 0);
    cr_assert_eq(setenv("RINGVIT_COMM_STRICT_EAGER", eager, 1), 0);
    cr_assert_eq(setenv("RINGVIT_COMM_TIMEOUT", timeout, 1), 0);
}

static void pause_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- the rules -------------------------------------------------------------------- */

typedef struct rule_arg {
    atomic_int flag;   /* set by rank 1 when it has posted (and launched) its receive */
    int done_early;    /* rank 0: the send completed before the receive existed */
    int done_after;    /* rank 0: ... and after it */
    char why[256];
} rule_arg;

/* A 256 KiB send (eager 64 KiB) is not complete while its receiver has not posted;
 * it completes once the receive is launched. */
static rv_status big_send_waits(rv_comm *c, void *p)
{
    rule_arg *a = p;
    enum { N = 256 << 10 };
    char *buf = malloc(N);
    rv_comm_request *req = NULL;
    rv_status st = RV_OK;
    memset(buf, c->rank + 1, N);
    if (c->rank == 0) {
        if ((st = rv_comm_isend(c, buf, N, 1, 5, &req)) != RV_OK)
            goto end;
        int done = 0;
        for (int i = 0; i < 20 && !done && st == RV_OK; i++, pause_ms(5))
            st = rv_comm_test(&req, &done);
        a->done_early = done;
        atomic_store(&a->flag, 1); /* rank 1 may receive now */
        if (!done)
            st = rv_comm_wait(&req);
        a->done_after = st == RV_OK;
    } else {
        while (!atomic_load(&a->flag))
            pause_ms(1);
        if ((st = rv_comm_irecv(c, buf, N, 0, 5, &req)) != RV_OK ||
            (st = rv_comm_wait(&req)) != RV_OK)
            goto end;
        for (int i = 0; i < N; i++)
            if (buf[i] != 1) {
                st = rv_fail(RV_ERR_INTERNAL, "byte %d is %d, want 1", i, buf[i]);
                break;
            }
    }
end:
    rv_comm_request_free(&req);
    free(buf);
    return st;
}

Test(comm_strict, big_send_waits_for_its_receive)
{
    strict_env("65536", "10");
    rule_arg a = {0};
    cr_assert_eq(rv_local_run(2, big_send_waits, &a), RV_OK, "%s", rv_last_error());
    cr_expect_eq(a.done_early, 0, "a 256 KiB send completed before any receive was posted");
    cr_expect_eq(a.done_after, 1);
}

/* A 1 KiB send completes at its launch, alone; the receiver gets the bytes as they
 * were at the launch, though the sender overwrote its buffer since. */
static rv_status small_send_is_eager(rv_comm *c, void *p)
{
    rule_arg *a = p;
    char buf[1024];
    rv_comm_request *req = NULL;
    rv_status st = RV_OK;
    if (c->rank == 0) {
        memset(buf, 7, sizeof buf);
        if ((st = rv_comm_isend(c, buf, sizeof buf, 1, 3, &req)) != RV_OK ||
            (st = rv_comm_wait(&req)) != RV_OK)
            goto end;
        a->done_early = 1;
        memset(buf, 9, sizeof buf);
        atomic_store(&a->flag, 1);
    } else {
        while (!atomic_load(&a->flag))
            pause_ms(1);
        if ((st = rv_comm_irecv(c, buf, sizeof buf, 0, 3, &req)) != RV_OK ||
            (st = rv_comm_wait(&req)) != RV_OK)
            goto end;
        for (size_t i = 0; i < sizeof buf; i++)
            if (buf[i] != 7) {
                st = rv_fail(RV_ERR_INTERNAL, "byte %zu is %d, want 7", i, buf[i]);
                break;
            }
    }
end:
    rv_comm_request_free(&req);
    return st;
}

Test(comm_strict, small_send_completes_alone)
{
    strict_env("65536", "10");
    rule_arg a = {0};
    cr_assert_eq(rv_local_run(2, small_send_is_eager, &a), RV_OK, "%s", rv_last_error());
    cr_expect_eq(a.done_early, 1);
}

/* Rank 0 launches {receive 1 KiB from rank 1, send 256 KiB to rank 2} as one group.
 * The receive's data is there at once, yet waiting on it returns only when rank 2
 * (which posts late) has taken the send. */
typedef struct group_arg {
    atomic_int posted2;  /* rank 2 posted its receive */
    double waited_s;     /* rank 0: how long the wait on the small receive took */
} group_arg;

static rv_status group_completes_together(rv_comm *c, void *p)
{
    group_arg *a = p;
    enum { BIG = 256 << 10 };
    char small[1024], *big = calloc(1, BIG);
    rv_comm_request *req[2] = {0};
    rv_status st = RV_OK;
    if (c->rank == 0) {
        if ((st = rv_comm_irecv(c, small, sizeof small, 1, 1, &req[0])) != RV_OK ||
            (st = rv_comm_isend(c, big, BIG, 2, 2, &req[1])) != RV_OK)
            goto end;
        double t0 = rv_clock_s();
        if ((st = rv_comm_wait(&req[0])) != RV_OK)
            goto end;
        a->waited_s = rv_clock_s() - t0;
        if (!atomic_load(&a->posted2))
            st = rv_fail(RV_ERR_INTERNAL, "the group completed before rank 2 posted");
        else
            st = rv_comm_wait(&req[1]);
    } else if (c->rank == 1) {
        memset(small, 1, sizeof small);
        if ((st = rv_comm_isend(c, small, sizeof small, 0, 1, &req[0])) == RV_OK)
            st = rv_comm_wait(&req[0]);
    } else {
        pause_ms(300);
        if ((st = rv_comm_irecv(c, big, BIG, 0, 2, &req[0])) != RV_OK)
            goto end;
        atomic_store(&a->posted2, 1);
        st = rv_comm_wait(&req[0]);
    }
end:
    rv_comm_request_free(&req[0]);
    rv_comm_request_free(&req[1]);
    free(big);
    return st;
}

Test(comm_strict, a_group_completes_as_a_whole)
{
    strict_env("65536", "10");
    group_arg a = {0};
    cr_assert_eq(rv_local_run(3, group_completes_together, &a), RV_OK, "%s", rv_last_error());
    cr_expect_geq(a.waited_s, 0.2, "the small receive returned after %.3f s, before the "
                  "group's big send could complete", a.waited_s);
}

/* Rank 0 sends tag 1 then tag 2; rank 1 receives tag 2 first. The plain local mode
 * matches by tag; strict fails the receive as NCCL would mix the bytes up. */
static rv_status tags_out_of_order(rv_comm *c, void *p)
{
    char *why = p;
    int x = 1, y = 2, rx = 0;
    rv_comm_request *req[2] = {0};
    rv_status st = RV_OK;
    if (c->rank == 0) {
        if ((st = rv_comm_isend(c, &x, sizeof x, 1, 1, &req[0])) != RV_OK ||
            (st = rv_comm_isend(c, &y, sizeof y, 1, 2, &req[1])) != RV_OK)
            goto end;
        st = rv_comm_waitall(req, 2);
    } else {
        if ((st = rv_comm_irecv(c, &rx, sizeof rx, 0, 2, &req[0])) != RV_OK)
            goto end;
        st = rv_comm_wait(&req[0]);
        if (st != RV_OK)
            snprintf(why, 256, "%s", rv_last_error());
        else if (rx != 2)
            st = rv_fail(RV_ERR_INTERNAL, "got %d for tag 2", rx);
        /* leave: rank 0's tag-2 message is never received (a failure is wanted) */
    }
end:
    rv_comm_request_free(&req[0]);
    rv_comm_request_free(&req[1]);
    return st;
}

Test(comm_strict, messages_match_in_post_order)
{
    char why[256] = "";
    strict_env("65536", "5");
    cr_expect_neq(rv_local_run(2, tags_out_of_order, why), RV_OK);
    cr_expect(strstr(why, "out of NCCL order") && strstr(why, "tag 1"),
              "rank 1's error: '%s'", why);
    /* The plain mode matches by tag: the same program receives tag 2 fine on rank 1. */
    unsetenv("RINGVIT_COMM_STRICT");
    why[0] = 0;
    rv_local_run(2, tags_out_of_order, why);
    cr_expect_eq(why[0], 0, "plain mode: '%s'", why);
}

/* Every collective, the ring shift and split under strict mode, eager 0 (every
 * send waits for its receive), 2..5 ranks. */
static rv_status strict_collectives(rv_comm *c, void *arg)
{
    const ref_comm_opts *o = arg;
    rv_status st = ref_comm_check_ring(c, o);
    if (st == RV_OK)
        st = ref_comm_check_allreduce(c, o);
    if (st == RV_OK)
        st = ref_comm_check_allgather(c, o);
    if (st == RV_OK)
        st = ref_comm_check_alltoall(c, o);
    if (st == RV_OK)
        st = ref_comm_check_barrier(c, o);
    if (st == RV_OK)
        st = ref_comm_check_split(c, o);
    return st;
}

Test(comm_strict, collectives_work_under_it)
{
    strict_env("0", "20");
    for (int n = 2; n <= 5; n++) {
        ref_comm_opts o = {.seed = 300 + (uint64_t)n, .max_bytes = (size_t)96 << 10, .rounds = 2};
        cr_expect_eq(rv_local_run(n, strict_collectives, &o), RV_OK, "%d ranks: %s", n,
                     rv_last_error());
    }
}

/* ---- the ring backward's schedule, without the arithmetic ---------------------------- */

/* Per step s of n: receive the partial gradient from the left (s > 0), exchange
 * K/V (receive from the left, send to the right; s < n - 1), then send this step's
 * gradient to the right and wait for the exchange; last, the owner's final
 * gradient from the left. `start` launches the exchange before the gradient sends
 * are posted (the fix); without it they join the exchange's group (the defect). */
typedef struct sched_arg {
    int start;
    size_t bytes;
} sched_arg;

static rv_status ring_backward_schedule(rv_comm *c, void *p)
{
    const sched_arg *a = p;
    const int n = c->size, r = c->rank, left = (r + n - 1) % n, right = (r + 1) % n;
    char *kv[2], *g[2], *part, *nkv[2];
    rv_comm_request *kvr[4] = {0}, *pr[2] = {0}, *gr[2][2] = {{0}}, *fin[2] = {0};
    rv_status st = RV_OK;
    kv[0] = calloc(1, a->bytes), kv[1] = calloc(1, a->bytes);
    nkv[0] = calloc(1, a->bytes), nkv[1] = calloc(1, a->bytes);
    g[0] = calloc(2, a->bytes), g[1] = calloc(2, a->bytes), part = calloc(2, a->bytes);
    for (int s = 0; s < n; s++) {
        if (s > 0 && ((st = rv_comm_irecv(c, part, a->bytes, left, 13, &pr[0])) != RV_OK ||
                      (st = rv_comm_irecv(c, part + a->bytes, a->bytes, left, 14, &pr[1])) != RV_OK))
            goto end;
        if (s < n - 1 &&
            ((st = rv_comm_irecv(c, nkv[0], a->bytes, left, 1, &kvr[0])) != RV_OK ||
             (st = rv_comm_irecv(c, nkv[1], a->bytes, left, 2, &kvr[1])) != RV_OK ||
             (st = rv_comm_isend(c, kv[0], a->bytes, right, 1, &kvr[2])) != RV_OK ||
             (st = rv_comm_isend(c, kv[1], a->bytes, right, 2, &kvr[3])) != RV_OK))
            goto end;
        if (a->start && (st = rv_comm_start(c)) != RV_OK)
            goto end;
        if ((st = rv_comm_waitall(gr[s % 2], 2)) != RV_OK)
            goto end;
        if (s > 0 && (st = rv_comm_waitall(pr, 2)) != RV_OK)
            goto end;
        int tk = s < n - 1 ? 13 : 15, tv = s < n - 1 ? 14 : 16;
        char *gs = g[s % 2];
        if ((st = rv_comm_isend(c, gs, a->bytes, right, tk, &gr[s % 2][0])) != RV_OK ||
            (st = rv_comm_isend(c, gs + a->bytes, a->bytes, right, tv, &gr[s % 2][1])) != RV_OK)
            goto end;
        if (s < n - 1 && (st = rv_comm_waitall(kvr, 4)) != RV_OK)
            goto end;
    }
    if ((st = rv_comm_irecv(c, part, a->bytes, left, 15, &fin[0])) != RV_OK ||
        (st = rv_comm_irecv(c, part + a->bytes, a->bytes, left, 16, &fin[1])) != RV_OK ||
        (st = rv_comm_waitall(fin, 2)) != RV_OK)
        goto end;
    for (int b = 0; b < 2 && st == RV_OK; b++)
        st = rv_comm_waitall(gr[b], 2);
end:
    for (int i = 0; i < 4; i++)
        rv_comm_request_free(&kvr[i]);
    for (int i = 0; i < 2; i++) {
        rv_comm_request_free(&pr[i]);
        rv_comm_request_free(&fin[i]);
        rv_comm_request_free(&gr[0][i]);
        rv_comm_request_free(&gr[1][i]);
    }
    free(kv[0]), free(kv[1]), free(nkv[0]), free(nkv[1]), free(g[0]), free(g[1]), free(part);
    return st;
}

Test(comm_strict, old_ring_backward_schedule_deadlocks)
{
    strict_env("65536", "1");
    for (int n = 2; n <= 5; n++) {
        sched_arg a = {.start = 0, .bytes = (size_t)256 << 10};
        double t0 = rv_clock_s();
        rv_status st = rv_local_run(n, ring_backward_schedule, &a);
        const char *msg = rv_last_error();
        cr_expect_eq(st, RV_ERR_TIMEOUT, "%d ranks: the old schedule gave %s: %s", n,
                     rv_status_name(st), msg);
        cr_expect(strstr(msg, "rank ") && strstr(msg, "isend to rank") &&
                      strstr(msg, "within 1.0 s"),
                  "%d ranks: the message names no rank and transfer: '%s'", n, msg);
        cr_expect_lt(rv_clock_s() - t0, 10.0, "%d ranks: not caught by the deadline", n);
        /* Small blocks fit the eager buffer: the defect hides, as on NCCL. */
        a.bytes = 4096;
        cr_expect_eq(rv_local_run(n, ring_backward_schedule, &a), RV_OK, "%d ranks, 4 KiB: %s",
                     n, rv_last_error());
    }
}

Test(comm_strict, fixed_ring_backward_schedule_passes)
{
    strict_env("0", "20");
    for (int n = 1; n <= 5; n++) {
        sched_arg a = {.start = 1, .bytes = (size_t)256 << 10};
        cr_expect_eq(rv_local_run(n, ring_backward_schedule, &a), RV_OK, "%d ranks: %s", n,
                     rv_last_error());
    }
}
