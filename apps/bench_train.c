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
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "apps.h"
#include "bench_common.h"
#include "cli.h"
#include "model_cli.h"
#include "rv_tokens.h"
#include "rv_vit.h"
#include "rv_vit_train.h"

#define CMD "bench train"

static const char help_text[] =
    "usage: ringvit bench train [--preset tiny|small|base | --model M] [--seq S]\n"
    "                             [--cp N]\n"
    "                           [--strategy ring|allgather|ulysses] [--causal]\n"
    "                           [--attention full|frame|block=W|window=W]\n"
    "                           [--threads T] [--repeat R] [--json]\n"
    "\n"
    "Runs one training step of the encoder of a preset model (random weights, seed\n"
    "0) on a synthetic video sequence of S tokens split over N ranks (threads of\n"
    "this process, T / N compute threads each): the forward keeping activations,\n"
    "a random output gradient, the backward into a gradient buffer; and the\n"
    "backend's sgemm (2048^3) on T threads in the same run.\n"
    "\n"
    "  --preset P     tiny (default), small or base\n"
    "  --model M      a model folder (Hugging Face layout), weights file or preset\n"
    "                 instead ('ringvit inspect M'): its family's blocks, on video\n"
    "                 tokens, or audio tokens for an audio-only model (AST)\n"
    "  --seq S        tokens, CLS included (default 8192)\n"
    "  --cp N         ranks (default 1)\n"
    "  --strategy S   ring (default), allgather or ulysses\n"
    "  --causal       causal attention (zigzag shards for full attention;\n"
    "                 contiguous otherwise)\n"
    "  --attention A  full (default), frame, block=SECONDS or window=SECONDS: the\n"
    "                 span of the attention on the time axis (the synthetic video\n"
    "                 runs 1 frame/s; GFLOP/s then count the visible pairs only)\n"
    "  --threads T    compute threads in all (default: every core)\n"
    "  --repeat R     timed steps, the fastest is reported (default 1)\n"
    "  --json         one JSON object on stdout\n"
    "\n"
    "Rows: wall time of forward + backward, training tokens/s, GFLOP/s (forward and\n"
    "backward FLOPs: GEMMs and attention), sgemm GFLOP/s and their ratio (FLOP\n"
    "utilisation), peak activation MB of a rank (max over ranks, weights and\n"
    "gradients excluded), peak RSS of the process; then rank 0's forward and\n"
    "backward seconds.\n"
    "\n"
    "example:\n"
    "  ringvit bench train --preset tiny --seq 8192 --cp 2\n";

typedef rv_bench_model_opts opts;

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

/* From bench_encoder.c (static there): the clock, the sgemm baseline and the
 * synthetic slice. */
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
    rv_vit_model *g = NULL;
    rv_vit_acts *acts = NULL;
    rv_bench_slice s;
    float *y = NULL, *dy = NULL;
    rv_status st = rv_bench_slice_make(&sh->m->cfg, &sh->plan, r, &o->span, &s);
    if (st != RV_OK)
        return st;
    const size_t nd = (size_t)(s.t.len > 0 ? s.t.len : 1) * D;
    int tpr = o->threads / o->cp > 0 ? o->threads / o->cp : 1;
    if ((st = rv_backend_cpu_create(tpr, &be)) != RV_OK ||
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
        double t0 = now_s();
        if ((st = rv_vit_forward_train(sh->m, &run, &s.t, NULL, NULL, y, &acts, &fs)) != RV_OK)
            goto end;
        double t1 = now_s();
        if ((st = rv_vit_backward(sh->m, &run, &s.t, acts, dy, g, NULL, &bs)) != RV_OK ||
            (st = rv_comm_barrier(comm)) != RV_OK)
            goto end;
        double dt = now_s() - t0, t = dt, fl = fs.flops + bs.flops, fl_all = fl;
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
    rv_bench_slice_free(&s);
    return st;
}

/* Peak resident set of this process, MiB. */
static double peak_rss_mb(void)
{
    struct rusage u;
    return getrusage(RUSAGE_SELF, &u) == 0 ? (double)u.ru_maxrss / 1024.0 : 0.0;
}

int rv_bench_train(int argc, char **argv)
{
    if (argc >= 2 && rv_cli_is_help(argv[1])) {
        fputs(help_text, stdout);
        return RV_EXIT_OK;
    }
    opts o;
    int rc = rv_bench_model_parse(CMD, argc, argv, 8192, &o);
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
    if ((st = rv_bench_sgemm_rate(be, 3, &sgemm)) != RV_OK ||
        (st = rv_local_run(o.cp, rank_main, &sh)) != RV_OK ||
        (st = rv_bench_sgemm_rate(be, 3, &sgemm2)) != RV_OK)
        goto fail;
    sgemm = sgemm2 > sgemm ? sgemm2 : sgemm;

    int64_t nvideo = 0, naudio = 0;
    rv_bench_counts(&cfg, o.seq, &nvideo, &naudio);
    /* A span's attention FLOPs are the visible pairs the ranks counted. */
    const double flops = o.span.kind != RV_SPAN_FULL
                             ? sh.flops
                             : rv_vit_forward_flops(&cfg, o.seq, nvideo, naudio, o.causal) +
                                   rv_vit_backward_flops(&cfg, o.seq, nvideo, naudio, o.causal);
    char span_text[48];
    rv_span_format(&o.span, span_text, sizeof span_text);
    const double gflops = flops / sh.wall * 1e-9;
    size_t peak = 0;
    int bad = 0;
    for (int r = 0; r < o.cp; r++) {
        peak = sh.peak[r] > peak ? sh.peak[r] : peak;
        bad |= sh.bad[r];
    }
    const double rss = peak_rss_mb();
    const int tpr = o.threads / o.cp > 0 ? o.threads / o.cp : 1;
    if (o.json) {
        json_t *j = json_object();
        json_object_set_new(j, "bench", json_string("train"));
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
        json_object_set_new(j, "forward_s", json_real(sh.fwd_s));
        json_object_set_new(j, "backward_s", json_real(sh.bwd_s));
        json_object_set_new(j, "tokens_per_s", json_real(o.seq / sh.wall));
        json_object_set_new(j, "gflop", json_real(flops * 1e-9));
        json_object_set_new(j, "gflops", json_real(gflops));
        json_object_set_new(j, "sgemm_gflops", json_real(sgemm));
        json_object_set_new(j, "mfu", json_real(gflops / sgemm));
        json_object_set_new(j, "peak_act_mb", json_real(peak / 1048576.0));
        json_object_set_new(j, "peak_rss_mb", json_real(rss));
        json_t *parts = json_pack("{s:f, s:f, s:f, s:f, s:f, s:f}", "embed_s", sh.bwd.embed_s,
                                  "attn_s", sh.bwd.attn_s, "attn_kernel_s", sh.bwd.cp.busy_s,
                                  "attn_wait_s", sh.bwd.cp.wait_s, "mlp_s", sh.bwd.mlp_s,
                                  "other_s", sh.bwd.other_s);
        json_object_set_new(j, "rank0_backward", parts);
        json_object_set_new(j, "ok", json_boolean(!bad));
        rc = rv_cli_json_print(j);
        json_decref(j);
    } else {
        printf("# ringvit bench train: model %s (%s, D %d, L %d, H %d), S=%lld%s, attention %s, "
               "cp %d x %d thread(s), %s, BLAS %s, CPU kernels %s\n#\n", spec,
               rv_vit_family_name(cfg.family),
               cfg.dim, cfg.layers, cfg.heads, (long long)o.seq, o.causal ? " causal" : "",
               span_text, o.cp, tpr,
               rv_cp_strategy_name(o.strategy), rv_blas_corename(), rv_bench_cpu_kernels());
        printf("# %9s %10s %9s %9s %6s %12s %12s\n", "wall(s)", "tokens/s", "GFLOP/s", "sgemm",
               "util", "peak act(MB)", "peak RSS(MB)");
        printf("  %9.3f %10.0f %9.1f %9.1f %6.3f %12.1f %12.1f\n", sh.wall, o.seq / sh.wall,
               gflops, sgemm, gflops / sgemm, peak / 1048576.0, rss);
        printf("#\n# rank 0: forward %.3f s, backward %.3f s (%.1f GFLOP in all)\n", sh.fwd_s,
               sh.bwd_s, flops * 1e-9);
        const rv_vit_stats *f = &sh.fwd, *b = &sh.bwd;
        printf("# rank 0 forward parts (s): embed %.3f, attention %.3f (kernels %.3f, wait %.3f), "
               "mlp %.3f, other %.3f\n", f->embed_s, f->attn_s, f->cp.busy_s, f->cp.wait_s,
               f->mlp_s, f->other_s);
        printf("# rank 0 backward parts (s): embed %.3f, attention %.3f (kernels %.3f, wait %.3f), "
               "mlp %.3f, other %.3f\n", b->embed_s, b->attn_s, b->cp.busy_s, b->cp.wait_s,
               b->mlp_s, b->other_s);
        printf("# %s\n", bad ? "FAILED: non-finite gradients" : "OK");
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
    free(sh.peak), free(sh.bad);
    return rc;
}
