/* bench_encoder.c: `ringvit bench encoder`, the encoder forward (rv_vit.h) of a
 * preset model with random weights (seed 0) on a synthetic video sequence (S
 * tokens of 224 px frames, 14 x 14 patches per tubelet, random patches, CLS
 * first when the preset has one), on N local ranks (threads of this process,
 * threads / N compute threads each) with context parallelism. The backend's
 * sgemm (2048^3) is measured in the same run, before and after (the faster is the
 * reference), so the achieved rate reads as a fraction of it (MFU).
 *
 * Prints tokens/s, GFLOP/s (rv_vit_forward_flops over the wall time of the
 * slowest rank), the ratio to sgemm, the peak activation memory of a rank (max
 * over ranks; weights excluded), the per-part times of rank 0, and an OK/FAILED
 * footer (FAILED when an output is not finite). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps.h"
#include "bench_common.h"
#include "cli.h"
#include "model_cli.h"
#include "rv_clock.h"
#include "rv_tokens.h"
#include "rv_vit.h"

#define CMD "bench encoder"

static const char help_text[] =
    "usage: ringvit bench encoder [--preset tiny|small|base | --model M] [--seq S]\n"
    "                             [--cp N] [--strategy ring|allgather|ulysses]\n"
    "                             [--attention full|frame|block=W|window=W]\n"
    "                             [--causal] [--threads T] [--repeat R] [--json]\n"
    "\n"
    "Runs the encoder forward of a model (a preset's random weights, seed 0, or\n"
    "--model) on a synthetic sequence of S tokens split over N ranks (threads of\n"
    "this process, T / N compute threads each), and the backend's sgemm (2048^3) on T\n"
    "threads in the same run: wall time, tokens/s, GFLOP/s, their ratio to sgemm\n"
    "(MFU), the peak activation memory of a rank and rank 0's time per part.\n"
    "\n"
    "  --preset P     tiny (default), small or base\n"
    "  --model M      a model folder (Hugging Face layout), weights file or preset\n"
    "                 instead\n"
    "  --seq S        tokens, CLS included (default 16384)\n"
    "  --cp N         ranks (default 1)\n"
    "  --strategy S   ring (default), allgather or ulysses\n"
    "  --causal       causal attention\n"
    "  --attention A  full (default), frame, block=SECONDS or window=SECONDS\n"
    "  --threads T    compute threads in all (default: every core)\n"
    "  --precision P  auto (default: f32), f32 or bf16 (AVX-512 BF16 or AMX CPUs)\n"
    "  --repeat R     timed forwards, the fastest is reported (default 1)\n"
    "  --json         one JSON object on stdout\n"
    "\n"
    "Exit status: 0 OK, 1 FAILED (non-finite outputs) or a runtime failure, 2 usage.\n"
    "\n"
    "examples:\n"
    "  ringvit bench encoder --preset tiny --seq 16384 --cp 4 --threads 4\n"
    "  ringvit bench encoder --model videomae-base/ --seq 8192 --threads 2\n"
    "  ringvit bench encoder --preset tiny --seq 65536 --attention window=16\n"
    "\n"
    "More: docs/benchmarks.md (rows, the current numbers)\n";

typedef bench_model_opts opts;

typedef struct shared {
    const opts *o;
    const rv_vit_model *m;
    rv_shard_plan plan;
    double wall;           /* fastest forward, slowest rank */
    rv_vit_stats *stats;   /* (N) of the fastest run */
    int *bad;              /* (N) non-finite outputs seen */
} shared;

static rv_status rank_main(rv_comm *comm, void *arg)
{
    shared *sh = arg;
    const opts *o = sh->o;
    const int r = comm->rank, D = sh->m->cfg.dim;
    rv_backend *be = NULL;
    bench_slice s;
    float *y = NULL;
    rv_status st = bench_slice_make(&sh->m->cfg, &sh->plan, r, &o->span, &s);
    if (st != RV_OK)
        return st;
    int tpr = o->threads / o->cp > 0 ? o->threads / o->cp : 1;
    if ((st = rv_backend_cpu_create(tpr, &be)) != RV_OK ||
        (st = rv_backend_set_precision(be, o->precision)) != RV_OK)
        goto end;
    if ((st = be->alloc(be, sizeof(float) * (size_t)(s.t.len > 0 ? s.t.len : 1) * D,
                        (void **)&y)) != RV_OK)
        goto end;
    rv_vit_run run = {.be = be, .comm = comm, .plan = sh->plan, .strategy = o->strategy, .causal = o->causal, .weights = NULL, .span = o->span};
    double best = INFINITY;
    for (int rep = 0; rep < o->repeat; rep++) {
        rv_vit_stats stats;
        if ((st = rv_comm_barrier(comm)) != RV_OK)
            goto end;
        double t0 = rv_clock_s();
        if ((st = rv_vit_forward(sh->m, &run, &s.t, y, &stats)) != RV_OK ||
            (st = rv_comm_barrier(comm)) != RV_OK)
            goto end;
        double dt = rv_clock_s() - t0;
        /* The mean of the ranks' clocks (they leave the barriers together), so
         * every rank keeps the stats of the same run. */
        double t = dt;
        if ((st = rv_comm_allreduce(comm, &dt, &t, 1, RV_COMM_F64)) != RV_OK)
            goto end;
        t /= o->cp;
        if (t < best) {
            best = t;
            sh->stats[r] = stats;
        }
    }
    if (r == 0)
        sh->wall = best;
    for (size_t i = 0; i < (size_t)s.t.len * D; i++)
        if (!isfinite(y[i])) {
            sh->bad[r] = 1;
            break;
        }
end:
    if (be)
        be->free(be, y);
    rv_backend_free(&be);
    bench_slice_free(&s);
    return st;
}

/* The one row; rank 0's time per part follows it. */
static const bench_col row_cols[] = {
    {"wall(s)", "%9.3f", "wall_s", RV_BENCH_REAL},
    {"tokens/s", "%10.0f", "tokens_per_s", RV_BENCH_REAL},
    {NULL, NULL, "gflop", RV_BENCH_REAL},
    {"GFLOP/s", "%9.1f", "gflops", RV_BENCH_REAL},
    {"sgemm", "%9.1f", "sgemm_gflops", RV_BENCH_REAL},
    {"MFU", "%6.3f", "mfu", RV_BENCH_REAL},
    {"peak act(MB)", "%12.1f", "peak_act_mb", RV_BENCH_REAL},
};

static int bench_main(int argc, char **argv)
{
    opts o;
    int rc = bench_model_parse(CMD, argc, argv, 16384, &o);
    if (rc)
        return rc;
    rv_vit_config cfg;
    rv_vit_model *m = NULL;
    model_cli mc;
    memset(&mc, 0, sizeof mc);
    rv_backend *be = NULL;
    shared sh = {.o = &o, .stats = calloc((size_t)o.cp, sizeof(rv_vit_stats)),
                 .bad = calloc((size_t)o.cp, sizeof(int))};
    rv_status st;
    rc = RV_EXIT_FAIL;
    if (!sh.stats || !sh.bad) {
        cli_error("%s: out of memory", CMD);
        goto end;
    }
    if ((rc = bench_model_open(CMD, &o, &mc)) != 0)
        goto end;
    rc = RV_EXIT_FAIL;
    m = mc.m;
    cfg = m->cfg;
    if (o.seq < o.cp) {
        rc = cli_usage_error(CMD, "--seq %lld is shorter than --cp %d", (long long)o.seq, o.cp);
        goto end;
    }
    if ((st = bench_plan(&o, &sh.plan)) != RV_OK ||
        (st = rv_backend_cpu_create(o.threads, &be)) != RV_OK)
        goto fail;
    sh.m = m;
    double sgemm = 0, sgemm2 = 0;
    if ((st = bench_sgemm_rate(be, 3, &sgemm)) != RV_OK || (st = rv_local_run(o.cp, rank_main, &sh)) != RV_OK ||
        (st = bench_sgemm_rate(be, 3, &sgemm2)) != RV_OK)
        goto fail;
    sgemm = sgemm2 > sgemm ? sgemm2 : sgemm;

    int64_t nvideo = 0, naudio = 0;
    bench_counts(&cfg, o.seq, &nvideo, &naudio);
    /* A span's attention FLOPs are the visible pairs the ranks counted. */
    double flops = rv_vit_forward_flops(&cfg, o.seq, nvideo, naudio, o.causal);
    if (o.span.kind != RV_SPAN_FULL) {
        flops = 0;
        for (int r = 0; r < o.cp; r++)
            flops += sh.stats[r].flops;
    }
    const double gflops = flops / sh.wall * 1e-9;
    size_t peak = 0;
    int bad = 0;
    for (int r = 0; r < o.cp; r++) {
        peak = sh.stats[r].peak_bytes > peak ? sh.stats[r].peak_bytes : peak;
        bad |= sh.bad[r];
    }
    const rv_vit_stats *s0 = &sh.stats[0];
    bench_report rep;
    bench_model_report_init(&rep, "encoder", &o, &cfg);
    bench_table(&rep, NULL, row_cols, (int)(sizeof row_cols / sizeof row_cols[0]));
    bench_add_row(&rep, (const bench_val[]){{.f = sh.wall}, {.f = o.seq / sh.wall},
                                              {.f = flops * 1e-9}, {.f = gflops}, {.f = sgemm},
                                              {.f = gflops / sgemm}, {.f = peak / 1048576.0}});
    bench_set(&rep, "rank0", bench_parts_json(s0));
    bench_note(&rep, "%s", "");
    bench_parts_note(&rep, "rank 0 time per part (s)", s0);
    rc = bench_finish(&rep, !bad, "non-finite outputs");
    goto end;
fail:
    rc = cli_fail(st, CMD);
end:
    rv_backend_free(&be);
    model_cli_close(&mc);
    free(sh.stats), free(sh.bad);
    return rc;
}

const bench_cmd bench_encoder = {
    .name = "encoder",
    .help = help_text,
    .main = bench_main,
};
