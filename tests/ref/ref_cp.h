/* ref_cp.h: a context-parallel attention run for the tests, shared by the local
 * (threads) and MPI tests: the whole sequence's inputs from a seed, each rank's
 * slice cut out by the shard plan, the rank's results written back into global
 * order, and the single-rank attention of the whole sequence to compare with. */
#ifndef RV_REF_CP_H
#define RV_REF_CP_H

#include "rv_cp_attention.h"

typedef struct ref_cp_case {
    int64_t seq;
    int heads, dim, causal;
    rv_shard_kind shard;
    rv_cp_strategy strategy;
    uint64_t seed;
} ref_cp_case;

/* Global tensors of a case: inputs and the results gathered from the ranks. */
typedef struct ref_cp_global {
    float *q, *k, *v, *dout;          /* (S, heads, dim) inputs */
    float *o, *lse, *dq, *dk, *dv;    /* results in global order; lse (heads, S) */
    rv_cp_stats *stats;               /* (ranks) counters of each rank */
} ref_cp_global;

/* Allocates and fills the inputs (results zeroed) for `ranks` ranks. */
void ref_cp_global_make(const ref_cp_case *c, int ranks, ref_cp_global *g);
void ref_cp_global_free(ref_cp_global *g);

/* One rank's part: slices its inputs, runs forward and (backward) and writes its
 * rows of o, lse, dq, dk, dv into g. */
rv_status ref_cp_run_rank(const ref_cp_case *c, rv_comm *comm, int threads, int backward,
                          ref_cp_global *g);

/* Single-rank attention of the whole sequence on the CPU backend. */
void ref_cp_single(const ref_cp_case *c, const ref_cp_global *in, int backward,
                   ref_cp_global *out);

#endif
