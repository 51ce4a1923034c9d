/* ref_comm.h: communicator checks shared by the local-backend unit test (ranks are
 * threads, tests/unit/test_comm_local.c) and the MPI test (ranks are processes,
 * tests/mpi/test_comm_mpi.c), so both backends pass the very same checks.
 *
 * Each check is the body of one rank and must be called by every rank of the
 * communicator. Sizes, tags and orders are random but drawn from the seed every
 * rank knows, so each rank regenerates exactly what its peers sent and compares
 * element by element. A check returns RV_OK, or a failure whose message names the
 * rank, the check and the first wrong element. Receives are posted with the exact
 * message size (the MPI backend needs that for messages it splits). */
#ifndef RV_REF_COMM_H
#define RV_REF_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "rv_comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ref_comm_opts {
    uint64_t seed;
    size_t max_bytes; /* largest random message or block, bytes */
    int rounds;       /* random draws per check */
} ref_comm_opts;

/* Fills / checks n bytes with the pattern of `stream` (any 64-bit name of a message). */
void ref_comm_fill(void *p, size_t n, uint64_t stream);
/* Index of the first byte that differs from the pattern, or n. */
size_t ref_comm_first_wrong(const void *p, size_t n, uint64_t stream);
/* A random size in [0, max]: 0 one time in eight, else log-uniform, max itself
 * one time in eight. */
size_t ref_comm_rand_size(uint64_t *state, size_t max);

/* Ring shift both ways (sendrecv and isend/irecv), random sizes including 0, then
 * max_bytes. */
rv_status ref_comm_check_ring(rv_comm *c, const ref_comm_opts *o);
/* 32 messages per rank to random peers with random tags and sizes, posted in a
 * random interleaving of sends and receives, completed in random order by wait,
 * waitall and test. */
rv_status ref_comm_check_outstanding(rv_comm *c, const ref_comm_opts *o);
/* f32 and f64, in place and not: integer data checked exactly against the double
 * sum, real data within tolerance and bit-identical on every rank. */
rv_status ref_comm_check_allreduce(rv_comm *c, const ref_comm_opts *o);
/* The last rounds use max_bytes (allgather: in place and not). */
rv_status ref_comm_check_allgather(rv_comm *c, const ref_comm_opts *o); /* also in place */
rv_status ref_comm_check_alltoall(rv_comm *c, const ref_comm_opts *o);
/* Nobody leaves the barrier before the last rank entered it (clock on one machine). */
rv_status ref_comm_check_barrier(rv_comm *c, const ref_comm_opts *o);
/* split by color and key (with RV_COMM_UNDEFINED), operations in the sub-groups
 * crossing a parent message with the same tag, a nested split, the dp x cp mesh. */
rv_status ref_comm_check_split(rv_comm *c, const ref_comm_opts *o);
/* Every check above, in order. */
rv_status ref_comm_check_all(rv_comm *c, const ref_comm_opts *o);

#ifdef __cplusplus
}
#endif
#endif
