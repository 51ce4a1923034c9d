/* test_comm_local.c: the "local" communicator (ranks are threads of this process).
 * The shared checks of tests/ref/ref_comm.h (every operation, random sizes from 0
 * bytes up, element by element) on 1..8 ranks and with 64 MiB messages; then the
 * failures: a rank that leaves without sending (error at once), a silent rank
 * (RV_ERR_TIMEOUT at the deadline), every collective with a departed rank, an
 * early failure reported by rv_local_run, abort, truncation, cancelled receives,
 * argument checks and RINGVIT_COMM_TIMEOUT. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ref_comm.h"
#include "rv_comm.h"

#define MAXR 8

static rv_status run_checks(rv_comm *c, void *arg)
{
    return ref_comm_check_all(c, arg);
}

static void checks_for(int lo, int hi, size_t max_bytes)
{
    for (int n = lo; n <= hi; n++) {
        ref_comm_opts o = {.seed = 1000 + (uint64_t)n, .max_bytes = max_bytes, .rounds = 4};
        double t0 = rv_clock_s();
        rv_status st = rv_local_run(n, run_checks, &o);
        cr_assert_eq(st, RV_OK, "%d ranks: %s", n, rv_last_error());
        cr_log_info("local checks, %d ranks: %.2f s", n, rv_clock_s() - t0);
    }
}

Test(comm_local, all_checks_1_to_4_ranks) { checks_for(1, 4, (size_t)256 << 10); }
Test(comm_local, all_checks_5_to_8_ranks) { checks_for(5, 8, (size_t)128 << 10); }

static rv_status run_big(rv_comm *c, void *arg)
{
    rv_status st = ref_comm_check_ring(c, arg);
    return st == RV_OK ? ref_comm_check_allreduce(c, arg) : st;
}

/* Up to 64 MiB per message, the last rounds exactly 64 MiB. */
Test(comm_local, ring_and_allreduce_64MiB)
{
    for (int n = 2; n <= 3; n++) {
        ref_comm_opts o = {.seed = 77 + (uint64_t)n, .max_bytes = (size_t)64 << 20, .rounds = 1};
        rv_status st = rv_local_run(n, run_big, &o);
        cr_assert_eq(st, RV_OK, "%d ranks: %s", n, rv_last_error());
    }
}

/* ---- failures --------------------------------------------------------------------- */

typedef struct fail_arg {
    double timeout;
    int which;              /* which operation, for the collective case */
    rv_status st[MAXR];     /* per rank */
    char msg[MAXR][512];
    double elapsed[MAXR];   /* seconds in the failing call */
} fail_arg;

static void record(fail_arg *a, int r, rv_status st, double t0)
{
    a->st[r] = st;
    a->elapsed[r] = rv_clock_s() - t0;
    snprintf(a->msg[r], sizeof a->msg[r], "%s", st == RV_OK ? "" : rv_last_error());
}

static rv_status recv_once(rv_comm *c, size_t bytes, int from, int tag)
{
    char *buf = malloc(bytes);
    rv_comm_request *req = NULL;
    rv_status st = rv_comm_irecv(c, buf, bytes, from, tag, &req);
    if (st == RV_OK)
        st = rv_comm_wait(&req);
    free(buf);
    return st;
}

/* Rank 1 returns at once without sending; rank 0 waits for its message. */
static rv_status leaver_fn(rv_comm *c, void *p)
{
    fail_arg *a = p;
    rv_comm_set_timeout(c, a->timeout);
    if (c->rank == 1)
        return RV_OK;
    double t0 = rv_clock_s();
    rv_status st = recv_once(c, 1024, 1, 7);
    record(a, c->rank, st, t0);
    return st;
}

Test(comm_local, peer_leaves_without_sending)
{
    fail_arg a = {.timeout = 5.0};
    rv_status st = rv_local_run(2, leaver_fn, &a);
    cr_assert_eq(st, RV_ERR_COMM, "status %d: %s", st, rv_last_error());
    cr_assert_str_eq(rv_last_error(), "rank 0: irecv from rank 1 (tag 7, 1024 bytes): rank 1 "
                                      "has left without sending it");
    cr_assert_lt(a.elapsed[0], 1.0, "the error came after %.2f s, not at once", a.elapsed[0]);
}

/* Rank 1 stays alive but never sends: rank 0 fails at its deadline. */
static rv_status silent_fn(rv_comm *c, void *p)
{
    fail_arg *a = p;
    rv_comm_set_timeout(c, c->rank == 0 ? a->timeout : 3 * a->timeout);
    double t0 = rv_clock_s();
    rv_status st = c->rank == 0 ? recv_once(c, (size_t)1 << 20, 1, 7) : recv_once(c, 16, 0, 8);
    record(a, c->rank, st, t0);
    return st;
}

Test(comm_local, silent_peer_times_out)
{
    fail_arg a = {.timeout = 0.3};
    rv_status st = rv_local_run(2, silent_fn, &a);
    cr_assert_eq(st, RV_ERR_TIMEOUT, "status %d: %s", st, rv_last_error());
    cr_assert_eq(a.st[0], RV_ERR_TIMEOUT);
    cr_assert_str_eq(a.msg[0], "rank 0: irecv from rank 1 (tag 7, 1048576 bytes): no message "
                               "within 0.3 s");
    cr_assert(a.elapsed[0] >= 0.3 && a.elapsed[0] < 0.8, "rank 0 failed after %.3f s",
              a.elapsed[0]);
    /* Rank 1 then lost its peer (rank 0 returned): an error at once, naming it. */
    cr_assert_eq(a.st[1], RV_ERR_COMM, "rank 1: %s", a.msg[1]);
    cr_assert(strstr(a.msg[1], "rank 0 has left"), "rank 1: %s", a.msg[1]);
    cr_assert_lt(a.elapsed[1], 0.8, "rank 1 failed after %.3f s", a.elapsed[1]);
}

static const char *const op_names[] = {"allreduce", "allgather", "alltoall", "barrier", "split"};

/* Rank 3 leaves; the others run collective `which`. */
static rv_status coll_leaver_fn(rv_comm *c, void *p)
{
    fail_arg *a = p;
    rv_comm_set_timeout(c, a->timeout);
    if (c->rank == 3)
        return RV_OK;
    float x[4096] = {0}, y[4 * 4096] = {0};
    rv_comm *sub = NULL;
    double t0 = rv_clock_s();
    rv_status st = RV_OK;
    switch (a->which) {
    case 0: st = rv_comm_allreduce(c, x, y, 4096, RV_COMM_F32); break;
    case 1: st = rv_comm_allgather(c, x, y, sizeof x); break;
    case 2: st = rv_comm_alltoall(c, y, y + 2048, 1024); break;
    case 3: st = rv_comm_barrier(c); break;
    case 4: st = rv_comm_split(c, 0, c->rank, &sub); break;
    }
    rv_comm_free(&sub);
    record(a, c->rank, st, t0);
    return st;
}

Test(comm_local, collectives_with_a_departed_rank)
{
    for (int w = 0; w < 5; w++) {
        fail_arg a = {.timeout = 3.0, .which = w};
        double t0 = rv_clock_s();
        rv_status st = rv_local_run(4, coll_leaver_fn, &a);
        double dt = rv_clock_s() - t0;
        cr_assert_neq(st, RV_OK, "%s with a departed rank succeeded", op_names[w]);
        cr_assert_lt(dt, 2.0, "%s: the run took %.2f s; the departed rank was not noticed",
                     op_names[w], dt);
        int direct = 0;
        for (int r = 0; r < 3; r++) {
            cr_assert(a.st[r] == RV_ERR_COMM, "%s, rank %d: status %d: %s", op_names[w], r,
                      a.st[r], a.msg[r]);
            /* A rank next to rank 3 names it; a rank that only lost a failed peer
             * names that peer (it left, or gave up its side of a transfer). */
            cr_assert(strstr(a.msg[r], op_names[w]) &&
                          (strstr(a.msg[r], "has left") || strstr(a.msg[r], "gave up")),
                      "%s, rank %d: message '%s' names neither the operation nor the peer",
                      op_names[w], r, a.msg[r]);
            direct += strstr(a.msg[r], "rank 3 has left") != NULL;
        }
        cr_assert(direct > 0, "%s: no rank names rank 3 as gone", op_names[w]);
    }
}

/* Rank 2 fails at once with its own error; the others are in a barrier. */
static rv_status early_fail_fn(rv_comm *c, void *p)
{
    (void)p;
    rv_comm_set_timeout(c, 5.0);
    if (c->rank == 2)
        return rv_fail(RV_ERR_IO, "rank 2: cannot read the input");
    return rv_comm_barrier(c);
}

Test(comm_local, first_failure_is_reported)
{
    double t0 = rv_clock_s();
    rv_status st = rv_local_run(4, early_fail_fn, NULL);
    cr_assert_eq(st, RV_ERR_IO, "status %d: %s", st, rv_last_error());
    cr_assert_str_eq(rv_last_error(), "rank 2: cannot read the input");
    cr_assert_lt(rv_clock_s() - t0, 2.0);
}

/* Rank 0 aborts while the others wait in an allreduce it never joins. */
static rv_status abort_fn(rv_comm *c, void *p)
{
    fail_arg *a = p;
    rv_comm_set_timeout(c, 5.0);
    if (c->rank == 0) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        rv_comm_abort(c, 3);
        return RV_OK;
    }
    double x = 1, t0 = rv_clock_s();
    rv_status st = rv_comm_allreduce(c, &x, &x, 1, RV_COMM_F64);
    record(a, c->rank, st, t0);
    return st;
}

Test(comm_local, abort_wakes_everyone)
{
    fail_arg a = {0};
    rv_status st = rv_local_run(3, abort_fn, &a);
    cr_assert_eq(st, RV_ERR_COMM, "%s", rv_last_error());
    for (int r = 1; r < 3; r++) {
        cr_assert_eq(a.st[r], RV_ERR_COMM, "rank %d: %s", r, a.msg[r]);
        cr_assert(strstr(a.msg[r], "aborted the run (code 3)"), "rank %d: %s", r, a.msg[r]);
        cr_assert_lt(a.elapsed[r], 1.0);
    }
}

/* A message larger than the receive buffer fails on both sides; a smaller one fits. */
static rv_status sizes_fn(rv_comm *c, void *p)
{
    fail_arg *a = p;
    char buf[100] = {0};
    rv_comm_request *req = NULL;
    rv_status st;
    if (c->rank == 0) {
        st = rv_comm_isend(c, buf, 100, 1, 1, &req);
        st = st == RV_OK ? rv_comm_wait(&req) : st;
        record(a, 0, st, 0);
        st = rv_comm_isend(c, buf, 60, 1, 2, &req);
        return st == RV_OK ? rv_comm_wait(&req) : st;
    }
    st = rv_comm_irecv(c, buf, 50, 0, 1, &req);
    st = st == RV_OK ? rv_comm_wait(&req) : st;
    record(a, 1, st, 0);
    st = rv_comm_irecv(c, buf, 100, 0, 2, &req);
    return st == RV_OK ? rv_comm_wait(&req) : st;
}

Test(comm_local, truncation_and_larger_receive)
{
    fail_arg a = {0};
    rv_status st = rv_local_run(2, sizes_fn, &a);
    cr_assert_eq(st, RV_OK, "the message smaller than its buffer failed: %s", rv_last_error());
    cr_assert_eq(a.st[0], RV_ERR_COMM);
    cr_assert_eq(a.st[1], RV_ERR_COMM);
    cr_assert_str_eq(a.msg[1], "rank 1: irecv from rank 0 (tag 1, 50 bytes): the message of 100 "
                               "bytes does not fit");
    cr_assert(strstr(a.msg[0], "receive buffer holds only 50 bytes"), "%s", a.msg[0]);
}

/* A cancelled receive takes nothing: the next receive gets the message. */
static rv_status cancel_fn(rv_comm *c, void *p)
{
    (void)p;
    int v = c->rank == 1 ? 42 : 0;
    rv_comm_request *req = NULL;
    if (c->rank == 1) {
        rv_status st = rv_comm_barrier(c);
        return st == RV_OK ? rv_comm_sendrecv(c, &v, sizeof v, 0, NULL, 0, 0, 9) : st;
    }
    rv_status st = rv_comm_irecv(c, &v, sizeof v, 1, 9, &req);
    rv_comm_request_free(&req);
    if (st == RV_OK)
        st = rv_comm_barrier(c);
    if (st == RV_OK)
        st = rv_comm_sendrecv(c, NULL, 0, 1, &v, sizeof v, 1, 9);
    if (st == RV_OK && v != 42)
        st = rv_fail(RV_ERR_INTERNAL, "rank 0: got %d, want 42", v);
    return st;
}

Test(comm_local, cancelled_receive_takes_nothing)
{
    rv_status st = rv_local_run(2, cancel_fn, NULL);
    cr_assert_eq(st, RV_OK, "%s", rv_last_error());
}

/* ---- argument checks and the timeout setting ------------------------------------------ */

static rv_status args_fn(rv_comm *c, void *p)
{
    (void)p;
    char b[8] = {0};
    rv_comm_request *req = NULL;
    rv_comm *sub = NULL, *dp = NULL;
    struct {
        rv_status got;
        const char *what;
    } cases[] = {
        {rv_comm_isend(c, b, 8, c->size, 0, &req), "peer out of range"},
        {rv_comm_irecv(c, b, 8, -1, 0, &req), "negative peer"},
        {rv_comm_isend(c, b, 8, 0, -1, &req), "negative tag"},
        {rv_comm_isend(c, b, 8, 0, RV_COMM_TAG_MAX + 1, &req), "tag too large"},
        {rv_comm_irecv(c, NULL, 8, 0, 0, &req), "NULL buffer"},
        {rv_comm_set_timeout(c, 0), "zero timeout"},
        {rv_comm_split(c, -5, 0, &sub), "negative color"},
        {rv_comm_mesh_split(c, 3, &sub, &dp), "cp not dividing size"},
        {rv_comm_alltoall(c, b, b, 1), "alltoall in place"},
        {rv_comm_allreduce(c, b, b, 1, (rv_comm_dtype)7), "unknown dtype"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (cases[i].got != RV_ERR_INVALID)
            return rv_fail(RV_ERR_INTERNAL, "%s: status %d, want RV_ERR_INVALID", cases[i].what,
                           cases[i].got);
    if (req || sub || dp)
        return rv_fail(RV_ERR_INTERNAL, "a failed call left an output set");
    return RV_OK;
}

Test(comm_local, argument_checks)
{
    rv_status st = rv_local_run(4, args_fn, NULL);
    cr_assert_eq(st, RV_OK, "%s", rv_last_error());
    cr_assert_eq(rv_local_run(0, args_fn, NULL), RV_ERR_INVALID);
    cr_assert_eq(rv_local_run(2, NULL, NULL), RV_ERR_INVALID);
}

static rv_status timeout_fn(rv_comm *c, void *p)
{
    double *seen = p;
    seen[c->rank] = c->timeout_s;
    return RV_OK;
}

Test(comm_local, timeout_from_environment)
{
    double t = 0, seen[2] = {0, 0};
    unsetenv(RV_COMM_TIMEOUT_ENV);
    cr_assert_eq(rv_comm_default_timeout(&t), RV_OK);
    cr_assert_eq(t, 120.0);
    setenv(RV_COMM_TIMEOUT_ENV, "0.25", 1);
    cr_assert_eq(rv_comm_default_timeout(&t), RV_OK);
    cr_assert_eq(t, 0.25);
    cr_assert_eq(rv_local_run(2, timeout_fn, seen), RV_OK);
    cr_assert(seen[0] == 0.25 && seen[1] == 0.25);
    const char *bad[] = {"abc", "-1", "0", "1e999", "5s"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv(RV_COMM_TIMEOUT_ENV, bad[i], 1);
        cr_assert_eq(rv_comm_default_timeout(&t), RV_ERR_INVALID, "'%s' accepted", bad[i]);
        cr_assert(strstr(rv_last_error(), RV_COMM_TIMEOUT_ENV), "%s", rv_last_error());
        cr_assert_eq(rv_local_run(2, timeout_fn, seen), RV_ERR_INVALID);
    }
    unsetenv(RV_COMM_TIMEOUT_ENV);
}

Test(comm_local, backends_built)
{
    cr_assert(rv_comm_backend_built("local"));
    cr_assert(!rv_comm_backend_built("carrier-pigeon"));
#ifdef RINGVIT_HAVE_MPI
    cr_assert(rv_comm_backend_built("mpi"));
#else
    rv_comm *c = NULL;
    cr_assert_eq(rv_comm_mpi_world(&c), RV_ERR_UNSUPPORTED);
#endif
}

/* ---- rv_local_run_copy: messages move through the given copy function ---------- */

static atomic_long copies;

static int counting_copy(void *dst, const void *src, size_t bytes)
{
    atomic_fetch_add(&copies, 1);
    memcpy(dst, src, bytes);
    return 0;
}

static int failing_copy(void *dst, const void *src, size_t bytes)
{
    (void)dst, (void)src;
    rv_fail(RV_ERR_BACKEND, "simulated device fault on %zu bytes", bytes);
    return -1;
}

static rv_status run_checks_copy(rv_comm *c, void *arg)
{
    if (!c->device_memory || c->move != counting_copy)
        return rv_fail(RV_ERR_INTERNAL, "rank %d: device_memory %d, move not the run's copy",
                       c->rank, c->device_memory);
    return ref_comm_check_all(c, arg);
}

Test(comm_local, copy_function_moves_every_message)
{
    for (int n = 1; n <= 4; n++) {
        ref_comm_opts o = {.seed = 77 + (uint64_t)n, .max_bytes = (size_t)64 << 10, .rounds = 2};
        atomic_store(&copies, 0);
        rv_status st = rv_local_run_copy(n, run_checks_copy, &o, counting_copy);
        cr_assert_eq(st, RV_OK, "%d ranks: %s", n, rv_last_error());
        if (n > 1)
            cr_expect_gt(atomic_load(&copies), 0, "%d ranks: the copy function was not used", n);
    }
}

typedef struct copy_fail_arg {
    rv_status st[2];
    char msg[2][512];
} copy_fail_arg;

static rv_status ring_once(rv_comm *c, void *arg)
{
    copy_fail_arg *a = arg;
    int out = c->rank, in = -1;
    rv_status st = rv_comm_sendrecv(c, &out, sizeof out, 1 - c->rank, &in, sizeof in,
                                    1 - c->rank, 5);
    a->st[c->rank] = st;
    snprintf(a->msg[c->rank], sizeof a->msg[0], "%s", rv_last_error());
    return RV_OK;
}

Test(comm_local, failing_copy_fails_the_transfer)
{
    copy_fail_arg a = {{RV_OK, RV_OK}, {"", ""}};
    cr_assert_eq(rv_local_run_copy(2, ring_once, &a, failing_copy), RV_OK, "%s", rv_last_error());
    /* Whichever transfer a rank's wait reports first: its own failed copy, or the
     * peer giving up after its failed one; the copy failure is always reported. */
    int copy_reported = 0;
    for (int r = 0; r < 2; r++) {
        cr_expect(a.st[r] == RV_ERR_BACKEND || a.st[r] == RV_ERR_COMM, "rank %d: status %d (%s)",
                  r, a.st[r], a.msg[r]);
        copy_reported |= a.st[r] == RV_ERR_BACKEND && strstr(a.msg[r], "device copy failed");
    }
    cr_expect(copy_reported, "no rank reported the failed copy: '%s' / '%s'", a.msg[0], a.msg[1]);
}
