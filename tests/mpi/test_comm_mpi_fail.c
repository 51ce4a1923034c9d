/* test_comm_mpi_fail.c: under mpiexec -n 4, the last rank stops answering and the
 * others must get RV_ERR_TIMEOUT, naming the rank and the operation, within the
 * deadline (1 s here) instead of hanging:
 *   1. point-to-point: the last rank never sends the message the others wait for;
 *   2. collective: the last rank joins the allreduce only after the others gave
 *      up on it (a late rank; the abandoned collective then completes);
 * then every rank (the late one too) agrees on the outcome with one allreduce and
 * exits 0 if every survivor saw its error in time. The late rank never exits early
 * on purpose: mpiexec would turn that into a failed job, which is what this test
 * means to tell apart from a deliberate silence. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rv_comm.h"

#define DEADLINE_S 1.0

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* 1 when st is a timeout within [deadline, deadline + slack] whose message holds
 * every one of the words; else prints why and returns 0. */
static int expect_timeout(int rank, const char *phase, rv_status st, double elapsed,
                          const char *w1, const char *w2)
{
    const char *msg = rv_last_error();
    int ok = st == RV_ERR_TIMEOUT && elapsed >= DEADLINE_S * 0.99 && elapsed < DEADLINE_S + 2.0 &&
             strstr(msg, w1) && strstr(msg, w2);
    printf("test_comm_mpi_fail: rank %d: %s: %s after %.2f s: %s\n", rank, phase,
           ok ? "ok" : "WRONG", elapsed, st == RV_OK ? "(no error)" : msg);
    fflush(stdout);
    return ok;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    rv_comm *c = NULL;
    if (rv_comm_mpi_world(&c) != RV_OK) {
        fprintf(stderr, "test_comm_mpi_fail: %s\n", rv_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const int late = c->size - 1, me = c->rank;
    int ok = 1;
    char buf[1 << 16];
    char expect_who[32], expect_peer[64];
    snprintf(expect_who, sizeof expect_who, "rank %d:", me);
    snprintf(expect_peer, sizeof expect_peer, "irecv from rank %d", late);
    rv_comm_set_timeout(c, DEADLINE_S);

    /* 1. The last rank never sends. */
    if (me != late) {
        rv_comm_request *req = NULL;
        double t0 = rv_clock_s();
        rv_status st = rv_comm_irecv(c, buf, sizeof buf, late, 5, &req);
        if (st == RV_OK)
            st = rv_comm_wait(&req);
        ok &= expect_timeout(me, "irecv from the silent rank", st, rv_clock_s() - t0,
                             expect_who, expect_peer);
    }

    /* 2. The last rank joins the allreduce after everyone else gave up on it. */
    double x = me, sum = 0;
    if (me != late) {
        double t0 = rv_clock_s();
        rv_status st = rv_comm_allreduce(c, &x, &sum, 1, RV_COMM_F64);
        ok &= expect_timeout(me, "allreduce without the late rank", st, rv_clock_s() - t0,
                             expect_who, "allreduce");
    } else {
        sleep_s(4 * DEADLINE_S); /* the others give up at about 2 x DEADLINE_S */
        rv_comm_set_timeout(c, 60);
        rv_status st = rv_comm_allreduce(c, &x, &sum, 1, RV_COMM_F64);
        if (st != RV_OK) {
            printf("test_comm_mpi_fail: rank %d: late allreduce: %s\n", me, rv_last_error());
            ok = 0;
        }
    }

    /* Everyone agrees on the outcome; the abandoned collective completes meanwhile. */
    rv_comm_set_timeout(c, 60);
    double good = ok, all_good = 0;
    rv_status st = rv_comm_allreduce(c, &good, &all_good, 1, RV_COMM_F64);
    if (st != RV_OK) {
        fprintf(stderr, "test_comm_mpi_fail: rank %d: final vote: %s\n", me, rv_last_error());
        rv_comm_abort(c, 1);
    }
    const int size = c->size;
    if (me == 0)
        printf("test_comm_mpi_fail: %s (%g of %d ranks as expected)\n",
               all_good == size ? "PASSED" : "FAILED", all_good, size);
    rv_comm_free(&c);
    MPI_Finalize();
    return all_good == size ? 0 : 1;
}
