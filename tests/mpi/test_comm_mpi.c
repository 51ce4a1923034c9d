/* test_comm_mpi.c: the "mpi" communicator under `mpiexec -n 4 --oversubscribe`:
 * the same checks as the local backend (tests/ref/ref_comm.h), with random sizes
 * up to 4 MiB and one 64 MiB ring shift, then again on a communicator that splits
 * every message over 64 KiB into several MPI calls (RINGVIT_COMM_MPI_CHUNK), so
 * the chunked paths of point-to-point, allreduce, allgather and alltoall run too.
 * A plain MPI program (no Criterion): exit 0 when every rank passed; a failing
 * rank prints its message and ends the job with MPI_Abort through rv_comm_abort. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "ref_comm.h"
#include "rv_comm.h"

/* Runs one set of checks; on failure reports and aborts the job. */
static void run(rv_comm *c, const char *name, rv_status (*check)(rv_comm *, const ref_comm_opts *),
                const ref_comm_opts *o)
{
    double t0 = rv_clock_s();
    rv_status st = check(c, o);
    if (st != RV_OK) {
        fprintf(stderr, "test_comm_mpi: FAILED %s: %s\n", name, rv_last_error());
        fflush(stderr);
        rv_comm_abort(c, 1);
        exit(1); /* not reached: MPI_Abort ends every process */
    }
    if (c->rank == 0)
        printf("test_comm_mpi: ok %-28s %6.2f s\n", name, rv_clock_s() - t0);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    rv_comm *c = NULL;
    rv_status st = rv_comm_mpi_world(&c);
    if (st != RV_OK) {
        fprintf(stderr, "test_comm_mpi: rv_comm_mpi_world: %s\n", rv_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    rv_comm_set_timeout(c, 60);
    if (c->rank == 0)
        printf("test_comm_mpi: %d ranks\n", c->size);

    ref_comm_opts o = {.seed = 4242, .max_bytes = (size_t)4 << 20, .rounds = 4};
    run(c, "all checks (<= 4 MiB)", ref_comm_check_all, &o);
    ref_comm_opts big = {.seed = 99, .max_bytes = (size_t)64 << 20, .rounds = 0};
    run(c, "ring shift 64 MiB", ref_comm_check_ring, &big);
    rv_comm_free(&c);

    /* Chunked: messages over 64 KiB travel as several MPI messages. */
    setenv("RINGVIT_COMM_MPI_CHUNK", "65536", 1);
    if ((st = rv_comm_mpi_world(&c)) != RV_OK) {
        fprintf(stderr, "test_comm_mpi: chunked world: %s\n", rv_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    rv_comm_set_timeout(c, 60);
    ref_comm_opts small = {.seed = 31337, .max_bytes = (size_t)1 << 20, .rounds = 3};
    run(c, "all checks, 64 KiB chunks", ref_comm_check_all, &small);
    rv_comm_free(&c);

    MPI_Finalize();
    return 0;
}
