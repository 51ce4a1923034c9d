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
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apps.h"
#include "bench_common.h"
#include "cli.h"
#include "model_cli.h"
#include "rv_tokens.h"
#include "rv_vit.h"

#define CMD "bench encoder"

static const char help_text[] =
    "usage: ringvit bench encoder [--preset tiny|small|base | --model M] [--seq S]\n"
    "                             [--cp N]\n"
    "                             [--strategy ring|allgather|ulysses] [--causal]\n"
    "                             [--attention full|frame|block=W|window=W]\n"
    "                             [--threads T] [--repeat R] [--json]\n"
    "\n"
    "Runs the encoder forward of a preset model (random weights, seed 0) on a\n"
    "synthetic video sequence of S tokens split over N ranks (threads of this\n"
    "process, T / N compute threads each), and the backend's sgemm (2048^3) on T\n"
    "threads in the same run.\n"
    "\n"
    "  --preset P     tiny (default), small or base\n"
    "  --model M      a model folder (Hugging Face layout), weights file or preset\n"
    "                 instead ('ringvit inspect M'): its family's blocks, on video\n"
    "                 tokens, or audio tokens for an audio-only model (AST)\n"
    "  --seq S        tokens, CLS included (default 16384)\n"
    "  --cp N         ranks (default 1)\n"
    "  --strategy S   ring (default), allgather or ulysses\n"
    "  --causal       causal attention (zigzag shards for full attention;\n"
    "                 contiguous otherwise)\n"
    "  --attention A  full (default), frame, block=SECONDS or window=SECONDS: the\n"
    "                 span of the attention on the time axis (the synthetic video\n"
    "                 runs 1 frame/s; GFLOP/s then count the visible pairs only)\n"
    "  --threads T    compute threads in all (default: every core)\n"
    "  --repeat R     timed forwards, the fastest is reported (default 1)\n"
    "  --json         one JSON object on stdout\n"
    "\n"
    "Rows: wall time, tokens/s, GFLOP/s (forward FLOPs: GEMMs and attention), sgemm\n"
    "GFLOP/s and their ratio (MFU), peak activation MB of a rank (max over ranks,\n"
    "weights excluded), then rank 0's time per part: embedding, attention sublayer\n"
    "(of which attention kernels and communication wait), MLP, other.\n"
    "\n"
    "example:\n"
    "  ringvit bench encoder --preset tiny --seq 16384 --cp 4 --threads 4\n";

typedef rv_bench_model_opts opts;

typedef struct shared {
    const opts *o;
    const rv_vit_model *m;
    rv_shard_plan plan;
    double wall;           /* fastest forward, slowest rank */
    rv_vit_stats *stats;   /* (N) of the fastest run */
    int *bad;              /* (N) non-finite outputs seen */
} shared;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static rv_status rank_main(rv_comm *comm, void *arg)
{
    shared *sh = arg;
    const opts *o = sh->o;
    const int r = comm->rank, D = sh->m->cfg.dim;
    rv_backend *be = NULL;
    rv_bench_slice s;
    float *y = NULL;
    rv_status st = rv_bench_slice_make(&sh->m->cfg, &sh->plan, r, &o->span, &s);
    if (st != RV_OK)
        return st;
    int tpr = o->threads / o->cp > 0 ? o->threads / o->cp : 1;
    if ((st = rv_backend_cpu_create(tpr, &be)) != RV_OK)
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
        double t0 = now_s();
        if ((st = rv_vit_forward(sh->m, &run, &s.t, y, &stats)) != RV_OK ||
            (st = rv_comm_barrier(comm)) != RV_OK)
            goto end;
        double dt = now_s() - t0;
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
    rv_bench_slice_free(&s);
    return st;
}

int rv_bench_encoder(int argc, char **argv)
{
    if (argc >= 2 && rv_cli_is_help(argv[1])) {
        fputs(help_text, stdout);
        return RV_EXIT_OK;
    }
    opts o;
    int rc = rv_bench_model_parse(CMD, argc, argv, 16384, &o);
    if (rc)
        return rc;
    rv_vit_config cfg;
    rv_vit_model *m = NULL;
    model_cli mc;
    memset(&mc, 0, sizeof mc);
    rv_backend *be = NULL;
    shared sh = {&o, NULL, {0}, 0, calloc((size_t)o.cp, sizeof(rv_vit_stats)),
                 calloc((size_t)o.cp, sizeof(int))};
    rv_status st;
    rc = RV_EXIT_FAIL;
    if (!sh.stats || !sh.bad) {
        rv_cli_error("%s: out of memory", CMD);
        goto end;
    }
    const char *spec = o.model ? o.model : o.preset;
    if ((rc = rv_bench_model_open(CMD, &o, &mc)) != 0)
        goto end;
    rc = RV_EXIT_FAIL;
    m = mc.m;
    cfg = m->cfg;
    if (o.seq < o.cp) {
        rc = rv_cli_usage_error(CMD, "--seq %lld is shorter than --cp %d", (long long)o.seq, o.cp);
        goto end;
    }
    if ((st = rv_bench_plan(&o, &sh.plan)) != RV_OK ||
        (st = rv_backend_cpu_create(o.threads, &be)) != RV_OK)
        goto fail;
    sh.m = m;
    double sgemm = 0, sgemm2 = 0;
    if ((st = rv_bench_sgemm_rate(be, 3, &sgemm)) != RV_OK || (st = rv_local_run(o.cp, rank_main, &sh)) != RV_OK ||
        (st = rv_bench_sgemm_rate(be, 3, &sgemm2)) != RV_OK)
        goto fail;
    sgemm = sgemm2 > sgemm ? sgemm2 : sgemm;

    int64_t nvideo = 0, naudio = 0;
    rv_bench_counts(&cfg, o.seq, &nvideo, &naudio);
    /* A span's attention FLOPs are the visible pairs the ranks counted. */
    double flops = rv_vit_forward_flops(&cfg, o.seq, nvideo, naudio, o.causal);
    if (o.span.kind != RV_SPAN_FULL) {
        flops = 0;
        for (int r = 0; r < o.cp; r++)
            flops += sh.stats[r].flops;
    }
    char span_text[48];
    rv_span_format(&o.span, span_text, sizeof span_text);
    const double gflops = flops / sh.wall * 1e-9;
    size_t peak = 0;
    int bad = 0;
    for (int r = 0; r < o.cp; r++) {
        peak = sh.stats[r].peak_bytes > peak ? sh.stats[r].peak_bytes : peak;
        bad |= sh.bad[r];
    }
    const rv_vit_stats *s0 = &sh.stats[0];
    const int tpr = o.threads / o.cp > 0 ? o.threads / o.cp : 1;
    if (o.json) {
        json_t *j = json_object(), *parts = json_object();
        json_object_set_new(j, "bench", json_string("encoder"));
        json_object_set_new(j, "model", json_string(spec));
        json_object_set_new(j, "family", json_string(rv_vit_family_name(cfg.family)));
        json_object_set_new(j, "seq", json_integer(o.seq));
        json_object_set_new(j, "cp", json_integer(o.cp));
        json_object_set_new(j, "strategy", json_string(rv_cp_strategy_name(o.strategy)));
        json_object_set_new(j, "causal", json_boolean(o.causal));
        json_object_set_new(j, "attention", json_string(span_text));
        json_object_set_new(j, "threads", json_integer(o.threads));
        json_object_set_new(j, "threads_per_rank", json_integer(tpr));
        json_object_set_new(j, "blas_core", json_string(rv_blas_corename()));
        json_object_set_new(j, "cpu_kernels", json_string(rv_bench_cpu_kernels()));
        json_object_set_new(j, "wall_s", json_real(sh.wall));
        json_object_set_new(j, "tokens_per_s", json_real(o.seq / sh.wall));
        json_object_set_new(j, "gflop", json_real(flops * 1e-9));
        json_object_set_new(j, "gflops", json_real(gflops));
        json_object_set_new(j, "sgemm_gflops", json_real(sgemm));
        json_object_set_new(j, "mfu", json_real(gflops / sgemm));
        json_object_set_new(j, "peak_act_mb", json_real(peak / 1048576.0));
        json_object_set_new(parts, "embed_s", json_real(s0->embed_s));
        json_object_set_new(parts, "attn_s", json_real(s0->attn_s));
        json_object_set_new(parts, "attn_kernel_s", json_real(s0->cp.busy_s));
        json_object_set_new(parts, "attn_wait_s", json_real(s0->cp.wait_s));
        json_object_set_new(parts, "mlp_s", json_real(s0->mlp_s));
        json_object_set_new(parts, "other_s", json_real(s0->other_s));
        json_object_set_new(j, "rank0", parts);
        json_object_set_new(j, "ok", json_boolean(!bad));
        rc = rv_cli_json_print(j);
        json_decref(j);
    } else {
        printf("# ringvit bench encoder: model %s (%s, D %d, L %d, H %d), S=%lld%s, attention %s, "
               "cp %d x %d thread(s), %s, BLAS %s, CPU kernels %s\n#\n", spec,
               rv_vit_family_name(cfg.family),
               cfg.dim, cfg.layers, cfg.heads, (long long)o.seq, o.causal ? " causal" : "",
               span_text, o.cp, tpr,
               rv_cp_strategy_name(o.strategy), rv_blas_corename(), rv_bench_cpu_kernels());
        printf("# %9s %10s %9s %9s %6s %12s\n", "wall(s)", "tokens/s", "GFLOP/s", "sgemm",
               "MFU", "peak act(MB)");
        printf("  %9.3f %10.0f %9.1f %9.1f %6.3f %12.1f\n", sh.wall, o.seq / sh.wall, gflops,
               sgemm, gflops / sgemm, peak / 1048576.0);
        printf("#\n# rank 0 time per part (s): embed %.3f, attention %.3f (kernels %.3f, "
               "wait %.3f), mlp %.3f, other %.3f\n", s0->embed_s, s0->attn_s, s0->cp.busy_s,
               s0->cp.wait_s, s0->mlp_s, s0->other_s);
        printf("# %s\n", bad ? "FAILED: non-finite outputs" : "OK");
        rc = RV_EXIT_OK;
    }
    if (rc == RV_EXIT_OK && bad)
        rc = RV_EXIT_FAIL;
    goto end;
fail:
    rc = rv_cli_fail(st, CMD);
end:
    rv_backend_free(&be);
    model_cli_close(&mc);
    free(sh.stats), free(sh.bad);
    return rc;
}
