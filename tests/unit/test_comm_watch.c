/* test_comm_watch.c: waits that end when a peer falls silent (rv_comm_watch.h), on
 * the "local" communicator (ranks are threads):
 *   - the allgather puts every rank's bytes in place (checked against the values
 *     each rank was given), over many rounds and on 1..5 ranks;
 *   - a rank busy for several silences but beating keeps the others waiting, and
 *     they get its part;
 *   - a rank silent (no beats) for longer than the silence fails the others'
 *     wait with RV_ERR_TIMEOUT naming it, no sooner than the silence and well
 *     before twice that plus slack; the watch then fails at once with the same
 *     message; the silent rank itself gets an error, not a hang;
 *   - waitall on point-to-point requests of another communicator waits on a
 *     working sender and fails on a silent one. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "rv_comm.h"
#include "rv_comm_watch.h"

#define SILENCE 0.4
#define MAXR 5

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Works for s seconds, beating every 10 ms. */
static void work_s(rv_comm_watch *w, double s)
{
    const double end = rv_clock_s() + s;
    while (rv_clock_s() < end) {
        rv_comm_watch_beat(w);
        sleep_s(0.01);
    }
}

typedef struct watch_case {
    int busy_rank;       /* -1: none */
    double busy_s;       /* how long it works (or sleeps) before the allgather */
    int beats;           /* 1: it beats meanwhile */
    rv_status st[MAXR];  /* each rank's allgather status */
    double took[MAXR];   /* and its longest wait */
    char msg[MAXR][320];
    rv_status again[MAXR]; /* a second allgather right after a failure */
    char again_msg[MAXR][320];
    int bad_values[MAXR];
} watch_case;

static rv_status gather_ranks(rv_comm *c, void *arg)
{
    watch_case *wc = arg;
    rv_comm_watch *w = NULL;
    const int me = c->rank;
    rv_status st = rv_comm_watch_create(c, SILENCE, &w);
    if (st != RV_OK)
        return st;
    for (int round = 0; round < 20; round++) {
        if (round == 10 && me == wc->busy_rank) {
            if (wc->beats)
                work_s(w, wc->busy_s);
            else
                sleep_s(wc->busy_s);
        }
        double mine[3] = {me, round, me * 1000.0 + round}, all[MAXR * 3];
        memset(all, 0xff, sizeof all);
        const double t0 = rv_clock_s();
        st = rv_comm_watch_allgather(w, mine, all, sizeof mine);
        const double took = rv_clock_s() - t0;
        if (took > wc->took[me])
            wc->took[me] = took; /* the longest wait */
        wc->st[me] = st;
        if (st != RV_OK) {
            snprintf(wc->msg[me], sizeof wc->msg[me], "%s", rv_last_error());
            wc->again[me] = rv_comm_watch_allgather(w, mine, all, sizeof mine);
            snprintf(wc->again_msg[me], sizeof wc->again_msg[me], "%s", rv_last_error());
            break;
        }
        for (int r = 0; r < c->size; r++)
            wc->bad_values[me] += all[3 * r] != r || all[3 * r + 1] != round ||
                                  all[3 * r + 2] != r * 1000.0 + round;
    }
    rv_comm_watch_free(&w);
    return RV_OK;
}

Test(comm_watch, allgather_places_every_rank)
{
    for (int n = 1; n <= MAXR; n++) {
        watch_case wc = {.busy_rank = -1};
        rv_status st = rv_local_run(n, gather_ranks, &wc);
        cr_assert_eq(st, RV_OK, "%d ranks: %s", n, rv_last_error());
        for (int r = 0; r < n; r++) {
            cr_expect_eq(wc.st[r], RV_OK, "%d ranks, rank %d: %s", n, r, wc.msg[r]);
            cr_expect_eq(wc.bad_values[r], 0, "%d ranks, rank %d: wrong values", n, r);
        }
    }
}

Test(comm_watch, a_working_rank_is_waited_for)
{
    watch_case wc = {.busy_rank = 2, .busy_s = 4 * SILENCE, .beats = 1};
    rv_status st = rv_local_run(3, gather_ranks, &wc);
    cr_assert_eq(st, RV_OK, "%s", rv_last_error());
    for (int r = 0; r < 3; r++) {
        cr_expect_eq(wc.st[r], RV_OK, "rank %d: %s", r, wc.msg[r]);
        cr_expect_eq(wc.bad_values[r], 0, "rank %d: wrong values", r);
    }
    /* The others waited out the whole of its work. */
    cr_expect_geq(wc.took[0], 3 * SILENCE, "rank 0 waited only %.2f s", wc.took[0]);
}

Test(comm_watch, a_silent_rank_is_named)
{
    watch_case wc = {.busy_rank = 1, .busy_s = 4 * SILENCE, .beats = 0};
    rv_status st = rv_local_run(3, gather_ranks, &wc);
    cr_assert_eq(st, RV_OK, "%s", rv_last_error());
    for (int r = 0; r < 3; r += 2) {
        cr_expect_eq(wc.st[r], RV_ERR_TIMEOUT, "rank %d: %s", r, rv_status_name(wc.st[r]));
        cr_expect(strstr(wc.msg[r], "rank 1 has sent nothing"), "rank %d: %s", r, wc.msg[r]);
        cr_expect_geq(wc.took[r], SILENCE * 0.99, "rank %d gave up after %.2f s", r, wc.took[r]);
        cr_expect_lt(wc.took[r], 2 * SILENCE + 1.5, "rank %d gave up after %.2f s", r,
                     wc.took[r]);
        /* Broken: the next call fails at once with the same message. */
        cr_expect_eq(wc.again[r], RV_ERR_TIMEOUT, "rank %d", r);
        cr_expect_str_eq(wc.again_msg[r], wc.msg[r]);
    }
    /* The silent rank comes back to peers that have given up: an error, not a hang. */
    cr_expect_neq(wc.st[1], RV_OK, "rank 1");
}

typedef struct p2p_case {
    double sender_s;  /* rank 1 works (beating) or sleeps this long, then sends */
    int beats;
    rv_status st;     /* rank 0's wait */
    double took;
    char msg[320];
    double got;
} p2p_case;

static rv_status p2p_ranks(rv_comm *c, void *arg)
{
    p2p_case *pc = arg;
    rv_comm_watch *w = NULL;
    rv_comm *data = NULL;
    rv_status st = rv_comm_watch_create(c, SILENCE, &w);
    if (st == RV_OK)
        st = rv_comm_split(c, 0, c->rank, &data);
    if (st != RV_OK)
        goto end;
    double x = 0;
    rv_comm_request *r = NULL;
    if (c->rank == 1) {
        if (pc->beats)
            work_s(w, pc->sender_s);
        else
            sleep_s(pc->sender_s);
        x = 42.5;
        int to = 0;
        if ((st = rv_comm_isend(data, &x, sizeof x, 0, 7, &r)) == RV_OK)
            rv_comm_watch_waitall(w, &r, &to, 1);
    } else {
        int from = 1;
        const double t0 = rv_clock_s();
        if ((st = rv_comm_irecv(data, &x, sizeof x, 1, 7, &r)) == RV_OK) {
            pc->st = rv_comm_watch_waitall(w, &r, &from, 1);
            pc->took = rv_clock_s() - t0;
            snprintf(pc->msg, sizeof pc->msg, "%s", rv_last_error());
            pc->got = x;
        }
    }
end:
    rv_comm_free(&data);
    rv_comm_watch_free(&w);
    return st;
}

Test(comm_watch, waitall_on_a_working_sender)
{
    p2p_case pc = {.sender_s = 3 * SILENCE, .beats = 1};
    rv_status st = rv_local_run(2, p2p_ranks, &pc);
    cr_assert_eq(st, RV_OK, "%s", rv_last_error());
    cr_expect_eq(pc.st, RV_OK, "%s", pc.msg);
    cr_expect_eq(pc.got, 42.5);
}

Test(comm_watch, waitall_on_a_silent_sender)
{
    p2p_case pc = {.sender_s = 4 * SILENCE, .beats = 0};
    rv_local_run(2, p2p_ranks, &pc); /* the sender's own send may fail: rank 0 left */
    cr_expect_eq(pc.st, RV_ERR_TIMEOUT, "%s", rv_status_name(pc.st));
    cr_expect(strstr(pc.msg, "rank 1 has sent nothing"), "%s", pc.msg);
    cr_expect_geq(pc.took, SILENCE * 0.99, "gave up after %.2f s", pc.took);
    cr_expect_lt(pc.took, 2 * SILENCE + 1.5, "gave up after %.2f s", pc.took);
}

Test(comm_watch, bad_arguments)
{
    rv_comm_watch *w = (rv_comm_watch *)1;
    cr_expect_eq(rv_comm_watch_create(NULL, 1.0, &w), RV_ERR_INVALID);
    cr_expect_eq(rv_comm_watch_allgather(NULL, "x", NULL, 1), RV_ERR_INVALID);
    cr_expect_eq(rv_comm_watch_waitall(NULL, NULL, NULL, 1), RV_ERR_INVALID);
    rv_comm_watch_beat(NULL);
    rv_comm_watch_free(NULL);
}
