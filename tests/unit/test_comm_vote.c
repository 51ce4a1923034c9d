/* test_comm_vote.c: the votes between stages (rv_comm_vote.h) on the "local"
 * communicator (ranks are threads), on 1..4 ranks:
 *   - every rank gets every rank's payload, in rank order (checked against the
 *     values each rank was given), and RV_VOTE_OK;
 *   - one rank failing: RV_VOTE_FAILED on every rank, its status, and its
 *     message prefixed "rank R: " (the ranks' outcomes differ); every rank
 *     failing alike: the message without a rank;
 *   - a rank's own failure is reported rather than the timeout of a peer that
 *     waited for it, and a timeout or lost peer makes the vote RV_VOTE_BROKEN;
 *   - a rank asked to stop: RV_VOTE_STOP on every rank, also beside a failure. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "rv_comm.h"
#include "rv_comm_vote.h"
#include "rv_comm_watch.h"

#define MAXR 4

typedef struct payload {
    int32_t rank;
    double value;
} payload;

typedef struct vote_case {
    rv_status mine[MAXR];    /* each rank's stage status */
    const char *why[MAXR];   /* its message */
    int stop[MAXR];          /* asked to stop */
    rv_vote_outcome out[MAXR];
    rv_status status[MAXR];  /* the vote's reported status */
    int first[MAXR];
    char msg[MAXR][RV_VOTE_MSG + 16];
    int payload_ok[MAXR];
} vote_case;

static rv_status vote_rank(rv_comm *c, void *arg)
{
    vote_case *vc = arg;
    const int me = c->rank;
    rv_comm_watch *w = NULL;
    rv_vote v = {0};
    rv_status st = rv_comm_watch_create(c, 5.0, &w);
    if (st != RV_OK)
        return st;
    payload p = {.rank = me, .value = 1000.0 * me + 0.5};
    if (vc->mine[me] != RV_OK)
        rv_fail(vc->mine[me], "%s", vc->why[me]);
    else
        rv_clear_error();
    vc->out[me] = rv_comm_vote(w, vc->mine[me], vc->stop[me], &p, sizeof p, &v);
    vc->status[me] = v.status;
    vc->first[me] = v.first;
    snprintf(vc->msg[me], sizeof vc->msg[me], "%s", rv_last_error());
    vc->payload_ok[me] = v.ranks == c->size && v.bytes == sizeof p;
    for (int r = 0; r < c->size && vc->payload_ok[me]; r++) {
        const payload *x = rv_vote_payload(&v, r);
        vc->payload_ok[me] = x->rank == r && x->value == 1000.0 * r + 0.5;
    }
    rv_vote_release(&v);
    rv_comm_watch_free(&w);
    return RV_OK;
}

static void run(int ranks, vote_case *vc)
{
    cr_assert_eq(rv_local_run(ranks, vote_rank, vc), RV_OK, "%s", rv_last_error());
}

Test(comm_vote, every_payload_in_rank_order)
{
    for (int n = 1; n <= MAXR; n++) {
        vote_case vc = {0};
        run(n, &vc);
        for (int r = 0; r < n; r++) {
            cr_assert_eq(vc.out[r], RV_VOTE_OK, "%d ranks, rank %d", n, r);
            cr_assert(vc.payload_ok[r], "%d ranks, rank %d: payloads", n, r);
            cr_assert_eq(vc.first[r], -1);
        }
    }
}

Test(comm_vote, one_rank_fails_everyone_hears_it)
{
    vote_case vc = {.mine = {RV_OK, RV_OK, RV_ERR_FORMAT, RV_OK},
                    .why = {"", "", "clip.mp4: a corrupt stretch", ""}};
    run(4, &vc);
    for (int r = 0; r < 4; r++) {
        cr_assert_eq(vc.out[r], RV_VOTE_FAILED, "rank %d", r);
        cr_assert_eq(vc.status[r], RV_ERR_FORMAT);
        cr_assert_eq(vc.first[r], 2);
        cr_assert_str_eq(vc.msg[r], "rank 2: clip.mp4: a corrupt stretch", "rank %d", r);
        cr_assert(vc.payload_ok[r]);
    }
}

Test(comm_vote, alike_failures_name_no_rank)
{
    vote_case vc = {.mine = {RV_ERR_INVALID, RV_ERR_INVALID, RV_ERR_INVALID},
                    .why = {"too many tokens", "too many tokens", "too many tokens"}};
    run(3, &vc);
    for (int r = 0; r < 3; r++) {
        cr_assert_eq(vc.out[r], RV_VOTE_FAILED);
        cr_assert_str_eq(vc.msg[r], "too many tokens");
    }
}

Test(comm_vote, the_cause_not_the_waiting_peers_and_broken)
{
    /* Rank 0 timed out waiting in a collective for rank 1, whose own stage failed:
     * rank 1's message is the one reported, and the communicator is broken. */
    vote_case vc = {.mine = {RV_ERR_TIMEOUT, RV_ERR_NOMEM, RV_OK},
                    .why = {"rank 0: irecv from rank 1: no message within 2 s",
                            "out of memory for the slice", ""}};
    run(3, &vc);
    for (int r = 0; r < 3; r++) {
        cr_assert_eq(vc.out[r], RV_VOTE_BROKEN, "rank %d", r);
        cr_assert_eq(vc.first[r], 1);
        cr_assert_eq(vc.status[r], RV_ERR_NOMEM);
        cr_assert_str_eq(vc.msg[r], "rank 1: out of memory for the slice");
    }
    /* A lost peer alone breaks it too. */
    vote_case lost = {.mine = {RV_OK, RV_ERR_COMM}, .why = {"", "rank 1: peer 0 is gone"}};
    run(2, &lost);
    for (int r = 0; r < 2; r++)
        cr_assert_eq(lost.out[r], RV_VOTE_BROKEN);
}

Test(comm_vote, a_stop_stops_everyone)
{
    vote_case vc = {.stop = {0, 0, 1}};
    run(3, &vc);
    for (int r = 0; r < 3; r++)
        cr_assert_eq(vc.out[r], RV_VOTE_STOP, "rank %d", r);
    /* The failure of the rank that was stopped is the stop, not an error. */
    vote_case both = {.mine = {RV_OK, RV_ERR_IO}, .why = {"", "stopped by a signal"},
                      .stop = {0, 1}};
    run(2, &both);
    for (int r = 0; r < 2; r++)
        cr_assert_eq(both.out[r], RV_VOTE_STOP, "rank %d", r);
}
