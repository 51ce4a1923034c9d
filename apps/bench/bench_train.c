/* bench_train.c: `ringvit bench train`, one training step of the encoder
 * (rv_vit_train.h) of a preset model with random weights (seed 0) on the
 * synthetic video sequence of `bench encoder` (S tokens of 224 px frames, 14 x 14
 * patches per tubelet, random patches, CLS first when the preset has one), on N
 * local ranks (threads of this process, threads / N compute threads each) with
 * context parallelism: rv_vit_forward_train, then a random output gradient dy
 * (as a masked-reconstruction loss would hand back), then rv_vit_backward into
 * a gradient buffer. The backend's sgemm (2048^3) is measured in the same run,
 * before and after (the faster is the reference), so the achieved rate reads as
 * a fraction of it (FLOP utilisation).
 *
 * Prints training tokens/s (S over the wall time of forward + backward, slowest
 * rank), GFLOP/s ((rv_vit_forward_flops + rv_vit_backward_flops) / wall), the
 * ratio to sgemm, the peak activation memory of a rank (max over ranks and over
 * the forward and backward, weights and gradients excluded), the process's peak
 * resident set, the forward / backward split of rank 0, and an OK/FAILED footer
 * (FAILED when a gradient is not finite). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "apps.h"
#include "bench_common.h"
#include "cli.h"
#include "model_cli.h"
#include "rv_clock.h"
#include "rv_tokens.h"
#include "rv_vit.h"
#include "rv_vit_train.h"

#define CMD "bench train"

static const char help_text[] =
    "usage: ringvit bench train [--preset tiny|small|base | --model M] [--seq S]\n"
    "                           [--cp N] [--strategy ring|allgather|ulysses]\n"
    "                           [--attention full|frame|block=W|window=W]\n"
    "                           [--causal] [--threads T] [--repeat R] [--json]\n"
    "\n"
    "Runs one training step (the forward keeping activations, a random output\n"
    "gradient, the backward) of the encoder of a model (a preset's random weights,\n"
    "seed 0, or --model) on a synthetic sequence of S tokens split over N ranks\n"
    "(threads of this process, T / N compute threads each), and the backend's sgemm\n"
    "(2048^3) on T threads in the same run: wall time, training tokens/s, GFLOP/s,\n"
    "their ratio to sgemm, the peak activation memory of a rank, the peak RSS and\n"
    "rank 0's forward and backward seconds.\n"
    "\n"
    "  --preset P     tiny (default), small or base\n"
    "  --model M      a model folder (Hugging Face layout), weights file or preset\n"
    "                 instead\n"
    "  --seq S        tokens, CLS included (default 8192)\n"
    "  --cp N         ranks (default 1)\n"
    "  --strategy S   ring (default), allgather or ulysses\n"
    "  --causal       causal attention\n"
    "  --attention A  full (default), frame, block=SECONDS or window=SECONDS\n"
    "  --threads T    compute threads in all (default: every core)\n"
    "  --precision P  auto (default: f32), f32 or bf16 (AVX-512 BF16 or AMX CPUs)\n"
    "  --repeat R     timed steps, the fastest is reported (default 1)\n"
    "  --json         one JSON object on stdout\n"
    "\n"
    "Exit status: 0 OK, 1 FAILED (non-finite gradients) or a runtime failure, 2\n"
    "usage.\n"
    "\n"
    "examples:\n"
    "  ringvit bench train --preset tiny --seq 8192 --cp 2\n"
    "  ringvit bench train --preset tiny --seq 32768 --attention window=16\n"
    "\n"
    "More: docs/benchmarks.md (rows, the current numbers)\n";

typedef bench_model_opts opts;

typedef struct shared {
    const opts *o;
    const rv_vit_model *m;
    rv_shard_plan plan;
    double wall;           /* fastest step, mean of the ranks' clocks */
    double fwd_s, bwd_s;   /* rank 0's split of that step */
    rv_vit_stats fwd, bwd; /* rank 0's stats of that step */
    double flops;          /* all ranks' counted FLOPs of that step (spans) */
    size_t *peak;          /* (N) most activation bytes of a rank */
    int *bad;              /* (N) non-finite gradients seen */
} shared;

static rv_status rank_main(rv_comm *comm, void *arg)
{
    shared *sh = arg;
    const opts *o = sh->o;
    const int r = comm->rank, D = sh->m->cfg.dim;
    rv_backend *be = NULL;
    rv_vit_model *g = NULL;
    rv_vit_acts *acts = NULL;
    bench_slice s;
    float *y = NULL, *dy = NULL;
    rv_status st = bench_slice_make(&sh->m->cfg, &sh->plan, r, &o->span, &s);
    if (st != RV_OK)
        return st;
    const size_t nd = (size_t)(s.t.len > 0 ? s.t.len : 1) * D;
    int tpr = o->threads / o->cp > 0 ? o->threads / o->cp : 1;
    if ((st = rv_backend_cpu_create(tpr, &be)) != RV_OK ||
        (st = rv_backend_set_precision(be, o->precision)) != RV_OK ||
        (st = be->alloc(be, sizeof(float) * nd, (void **)&y)) != RV_OK ||
        (st = be->alloc(be, sizeof(float) * nd, (void **)&dy)) != RV_OK ||
        (st = rv_vit_new(&sh->m->cfg, &g)) != RV_OK)
        goto end;
    /* The output gradient: small random values, as a reconstruction loss gives. */
    uint64_t x = 0x243F6A8885A308D3ull ^ (uint64_t)(r + 1);
    for (size_t i = 0; i < nd; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        dy[i] = ((float)((x >> 40) & 0xFFFF) / 32768.0f - 1.0f) * 1e-3f;
    }
    rv_vit_run run = {.be = be, .comm = comm, .plan = sh->plan, .strategy = o->strategy, .causal = o->causal, .weights = NULL, .span = o->span};
    double best = INFINITY;
    for (int rep = 0; rep < o->repeat; rep++) {
        rv_vit_stats fs, bs;
        rv_vit_grad_zero(g);
        if ((st = rv_comm_barrier(comm)) != RV_OK)
            goto end;
        double t0 = rv_clock_s();
        if ((st = rv_vit_forward_train(sh->m, &run, &s.t, NULL, NULL, y, &acts, &fs)) != RV_OK)
            goto end;
        double t1 = rv_clock_s();
        if ((st = rv_vit_backward(sh->m, &run, &s.t, acts, dy, g, NULL, &bs)) != RV_OK ||
            (st = rv_comm_barrier(comm)) != RV_OK)
            goto end;
        double dt = rv_clock_s() - t0, t = dt, fl = fs.flops + bs.flops, fl_all = fl;
        rv_vit_acts_free(&acts);
        if ((st = rv_comm_allreduce(comm, &dt, &t, 1, RV_COMM_F64)) != RV_OK ||
            (st = rv_comm_allreduce(comm, &fl, &fl_all, 1, RV_COMM_F64)) != RV_OK)
            goto end;
        t /= o->cp;
        if (t < best) {
            best = t;
            size_t p = fs.peak_bytes > bs.peak_bytes ? fs.peak_bytes : bs.peak_bytes;
            sh->peak[r] = p;
            if (r == 0) {
                sh->fwd_s = t1 - t0;
                sh->bwd_s = dt - (t1 - t0);
                sh->fwd = fs;
                sh->bwd = bs;
                sh->flops = fl_all;
            }
        }
    }
    if (r == 0)
        sh->wall = best;
    for (size_t i = 0; i < g->arena_floats; i++)
        if (!isfinite(g->arena[i])) {
            sh->bad[r] = 1;
            break;
        }
end:
    rv_vit_acts_free(&acts);
    rv_vit_free(&g);
    if (be) {
        be->free(be, y);
        be->free(be, dy);
    }
    rv_backend_free(&be);
    bench_slice_free(&s);
    return st;
}

/* Peak resident set of this process, MiB. */
static double peak_rss_mb(void)
{
    struct rusage u;
    return getrusage(RUSAGE_SELF, &u) == 0 ? (double)u.ru_maxrss / 1024.0 : 0.0;
}

/* The one row; rank 0's split and parts follow it. */
static const bench_col row_cols[] = {
    {"wall(s)", "%9.3f", "wall_s", RV_BENCH_REAL},
    {NULL, NULL, "forward_s", RV_BENCH_REAL},
    {NULL, NULL, "backward_s", RV_BENCH_REAL},
    {"tokens/s", "%10.0f", "tokens_per_s", RV_BENCH_REAL},
    {NULL, NULL, "gflop", RV_BENCH_REAL},
    {"GFLOP/s", "%9.1f", "gflops", RV_BENCH_REAL},
    {"sgemm", "%9.1f", "sgemm_gflops", RV_BENCH_REAL},
    {"util", "%6.3f", "mfu", RV_BENCH_REAL},
    {"peak act(MB)", "%12.1f", "peak_act_mb", RV_BENCH_REAL},
    {"peak RSS(MB)", "%12.1f", "peak_rss_mb", RV_BENCH_REAL},
};

static int bench_main(int argc, char **argv)
{
    opts o;
    int rc = bench_model_parse(CMD, argc, argv, 8192, &o);
    if (rc)
        return rc;
    rv_vit_config cfg;
    rv_vit_model *m = NULL;
    model_cli mc;
    memset(&mc, 0, sizeof mc);
    rv_backend *be = NULL;
    shared sh;
    memset(&sh, 0, sizeof sh);
    sh.o = &o;
    sh.peak = calloc((size_t)o.cp, sizeof(size_t));
    sh.bad = calloc((size_t)o.cp, sizeof(int));
    rv_status st;
    rc = RV_EXIT_FAIL;
    if (!sh.peak || !sh.bad) {
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
    if ((st = bench_sgemm_rate(be, 3, &sgemm)) != RV_OK ||
        (st = rv_local_run(o.cp, rank_main, &sh)) != RV_OK ||
        (st = bench_sgemm_rate(be, 3, &sgemm2)) != RV_OK)
        goto fail;
    sgemm = sgemm2 > sgemm ? sgemm2 : sgemm;

    int64_t nvideo = 0, naudio = 0;
    bench_counts(&cfg, o.seq, &nvideo, &naudio);
    /* A span's attention FLOPs are the visible pairs the ranks counted. */
    const double flops = o.span.kind != RV_SPAN_FULL
                             ? sh.flops
                             : rv_vit_forward_flops(&cfg, o.seq, nvideo, naudio, o.causal) +
                                   rv_vit_backward_flops(&cfg, o.seq, nvideo, naudio, o.causal);
    const double gflops = flops / sh.wall * 1e-9;
    size_t peak = 0;
    int bad = 0;
    for (int r = 0; r < o.cp; r++) {
        peak = sh.peak[r] > peak ? sh.peak[r] : peak;
        bad |= sh.bad[r];
    }
    const double rss = peak_rss_mb();
    bench_report rep;
    bench_model_report_init(&rep, "train", &o, &cfg);
    bench_table(&rep, NULL, row_cols, (int)(sizeof row_cols / sizeof row_cols[0]));
    bench_add_row(&rep, (const bench_val[]){{.f = sh.wall}, {.f = sh.fwd_s}, {.f = sh.bwd_s},
                                              {.f = o.seq / sh.wall}, {.f = flops * 1e-9},
                                              {.f = gflops}, {.f = sgemm}, {.f = gflops / sgemm},
                                              {.f = peak / 1048576.0}, {.f = rss}});
    bench_set(&rep, "rank0_backward", bench_parts_json(&sh.bwd));
    bench_note(&rep, "%s", "");
    bench_note(&rep, "rank 0: forward %.3f s, backward %.3f s (%.1f GFLOP in all)", sh.fwd_s,
                  sh.bwd_s, flops * 1e-9);
    bench_parts_note(&rep, "rank 0 forward parts (s)", &sh.fwd);
    bench_parts_note(&rep, "rank 0 backward parts (s)", &sh.bwd);
    rc = bench_finish(&rep, !bad, "non-finite gradients");
    goto end;
fail:
    rc = cli_fail(st, CMD);
end:
    rv_backend_free(&be);
    model_cli_close(&mc);
    free(sh.peak), free(sh.bad);
    return rc;
}

const bench_cmd bench_train = {
    .name = "train",
    .help = help_text,
    .main = bench_main,
};
