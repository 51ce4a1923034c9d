/* test_cp_attention_mpi.c: context-parallel attention across 4 MPI processes.
 * Every process builds the same global inputs from a seed, runs its slice with
 * each strategy (causal with zigzag shards, non-causal with contiguous ones),
 * forward and backward, and compares its rows with single-rank attention of the
 * whole sequence that it computes itself; the verdicts are summed with one
 * allreduce and every process exits 0 only if all ranks agree. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "ref_cp.h"
#include "ref_ops.h"

/* Tolerances, on normalised errors (max |got - want| over this rank's rows /
 * max |want|), CP attention over MPI against single-rank attention: the analysis
 * of tests/unit/test_cp_attention.c (per-rank key blocks merged by log-sum-exp in
 * f32, epsilon 1.2e-7: sqrt(S) * eps for O; dK and dV summed across ranks and the
 * recomputed P: ten times that). */
#define TOL_FWD 1e-5
#define TOL_BWD 1e-4

/* Max normalised error over this rank's rows of a (S, row) tensor. */
static double rows_err(const rv_shard_plan *p, int rank, size_t row, const float *got,
                       const float *want, double scale)
{
    rv_shard_seg s[RV_SHARD_MAX_SEGS];
    int n = rv_shard_segments(p, rank, s);
    double err = 0;
    for (int i = 0; i < n; i++)
        for (size_t e = (size_t)s[i].start * row; e < (size_t)(s[i].start + s[i].len) * row; e++) {
            double d = fabs((double)got[e] - want[e]);
            err = d > err || isnan(d) ? d : err;
        }
    return err / scale;
}

static double max_abs(const float *x, size_t n)
{
    double m = 1e-30;
    for (size_t i = 0; i < n; i++)
        m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    rv_comm *c = NULL;
    if (rv_comm_mpi_world(&c) != RV_OK) {
        fprintf(stderr, "test_cp_attention_mpi: %s\n", rv_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int bad = 0;
    /* Every strategy at S = 1000 and 1237; then the ring at S = 4500, where each
     * block travels in 2 chunks and the forward runs ahead into its slots. */
    ref_cp_case cases[16];
    int ncase = 0;
    const int64_t seqs[] = {1000, 1237};
    for (int si = 0; si < 2; si++)
        for (int causal = 0; causal < 2; causal++)
            for (int strat = 0; strat < 3; strat++)
                cases[ncase++] = (ref_cp_case){seqs[si], 4, 32 << si, causal,
                                               causal ? RV_SHARD_ZIGZAG : RV_SHARD_CONTIGUOUS,
                                               (rv_cp_strategy)strat, 700 + si};
    for (int causal = 0; causal < 2; causal++)
        cases[ncase++] = (ref_cp_case){4500, 1, 32, causal,
                                       causal ? RV_SHARD_ZIGZAG : RV_SHARD_CONTIGUOUS,
                                       RV_CP_RING, 710 + causal};
    for (int ci = 0; ci < ncase; ci++) {
        ref_cp_case cs = cases[ci];
        ref_cp_global g, want;
        ref_cp_global_make(&cs, c->size, &g);
        ref_cp_global_make(&cs, 1, &want);
        ref_cp_single(&cs, &want, 1, &want);
        rv_status st = ref_cp_run_rank(&cs, c, 1, 1, &g);
        if (st != RV_OK) {
            fprintf(stderr, "rank %d: %s: %s\n", c->rank, rv_cp_strategy_name(cs.strategy),
                    rv_last_error());
            rv_comm_abort(c, 1);
        }
        rv_shard_plan p;
        rv_shard_plan_make(cs.shard, c->size, cs.seq, &p);
        size_t row = (size_t)cs.heads * cs.dim, nt = (size_t)cs.seq * row;
        double eo = rows_err(&p, c->rank, row, g.o, want.o, max_abs(want.o, nt));
        double edq = rows_err(&p, c->rank, row, g.dq, want.dq, max_abs(want.dq, nt));
        double edk = rows_err(&p, c->rank, row, g.dk, want.dk, max_abs(want.dk, nt));
        double edv = rows_err(&p, c->rank, row, g.dv, want.dv, max_abs(want.dv, nt));
        int fail = !(eo <= TOL_FWD && edq <= TOL_BWD && edk <= TOL_BWD && edv <= TOL_BWD);
        printf("rank %d: %-9s S=%lld causal=%d: O %.2g dQ %.2g dK %.2g dV %.2g %s\n",
               c->rank, rv_cp_strategy_name(cs.strategy), (long long)cs.seq, cs.causal, eo,
               edq, edk, edv, fail ? "FAILED" : "ok");
        bad += fail;
        ref_cp_global_free(&g);
        ref_cp_global_free(&want);
    }
    double total = bad;
    if (rv_comm_allreduce(c, &total, &total, 1, RV_COMM_F64) != RV_OK) {
        fprintf(stderr, "rank %d: allreduce: %s\n", c->rank, rv_last_error());
        rv_comm_abort(c, 1);
    }
    if (c->rank == 0)
        printf("test_cp_attention_mpi: %d ranks, %.0f failed checks\n", c->size, total);
    rv_comm_free(&c);
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
