/* bench_ring.c: `ringvit bench ring`, context-parallel attention on N local ranks
 * (threads, T threads each) against single-rank attention of the same sequence with
 * N*T threads, measured in the same run: time and ratio, bytes each rank sent,
 * max abs error against single-rank, per-rank memory of the attention tensors and
 * buffers, and per-rank busy time (the balance of the work).
 *
 * --device cuda: every rank gets its own CUDA backend (its own stream) on the one
 * GPU, and the local communicator moves messages with device-to-device copies
 * (rv_local_run_copy), so N ranks share the GPU as N streams; single-rank runs on
 * one stream of the same GPU.
 *
 * --window W / --block B: an attention span over the synthetic token times of
 * bench_common.h (--rate tokens per second), on both sides: the N ranks set it
 * with rv_cp_attn_set_span (contiguous shards), single-rank runs the kernel's
 * span mask; bytes sent are then one layer's (the keys' one-off exchange is not
 * counted). */
#define _GNU_SOURCE /* pthread_setaffinity_np */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps.h"
#include "bench_common.h"
#include "cli.h"
#include "rv_clock.h"
#include "rv_cp_attention.h"
#include "rv_cuda.h"

#define CMD "bench ring"

static const char help_text[] =
    "usage: ringvit bench ring [--strategy ring|allgather|ulysses] [--cp N] [--seq S]\n"
    "                          [--heads H] [--dim D] [--causal] [--backward]\n"
    "                          [--shard contiguous|zigzag] [--threads-per-rank T]\n"
    "                          [--window W | --block B] [--rate R]\n"
    "                          [--device cpu|cuda] [--repeat N] [--timeout SEC]\n"
    "                          [--json]\n"
    "\n"
    "Runs context-parallel attention on N ranks (threads of this process, T threads\n"
    "each) and, in the same run, single-rank attention of the whole sequence with\n"
    "N*T threads, and compares them: their times and ratio, the max error, and per\n"
    "rank the bytes sent, the memory of its attention tensors, its work and busy\n"
    "time.\n"
    "\n"
    "  --strategy S         ring (default), allgather or ulysses\n"
    "  --cp N               ranks (default 2)\n"
    "  --seq S              tokens (default 32768)\n"
    "  --heads H, --dim D   heads (default 4) and head size (default 64)\n"
    "  --causal             causal mask\n"
    "  --backward           also run and time the backward pass\n"
    "  --shard P            contiguous or zigzag (default: zigzag with --causal and\n"
    "                       full attention, else contiguous)\n"
    "  --window W           an attention span: each token sees those starting within\n"
    "                       W/2 s of it, over synthetic token times (default: none)\n"
    "  --block B            an attention span of B-second blocks (default: none)\n"
    "  --rate R             tokens per second of --window and --block (default 150)\n"
    "  --threads-per-rank T compute threads per rank (default 1)\n"
    "  --device D           cpu (default) or cuda: the N ranks are N streams on one\n"
    "                       GPU\n"
    "  --repeat N           alternate single-rank and N-rank runs N times and compare\n"
    "                       the fastest of each (default 1)\n"
    "  --timeout SEC        communication deadline (default 120)\n"
    "  --json               one JSON object on stdout\n"
    "\n"
    "Exit status: 0 OK, 1 FAILED (the results differ from single-rank attention) or\n"
    "a runtime failure, 2 usage.\n"
    "\n"
    "examples:\n"
    "  ringvit bench ring --strategy ring --cp 2 --seq 32768 --causal\n"
    "  ringvit bench ring --device cuda --cp 4 --seq 65536 --heads 16 --dim 128\n"
    "  ringvit bench ring --window 16 --cp 4 --seq 262144\n"
    "\n"
    "More: docs/benchmarks.md (rows, the current numbers), docs/parallelism.md\n";

typedef struct opts {
    rv_cp_strategy strategy;
    rv_shard_kind shard;
    int shard_set, cp, heads, dim, causal, backward, tpr, json, repeat;
    int64_t seq;
    double timeout;
    double window, block, rate; /* a span: seconds (0: none); tokens per second */
    const char *device;
} opts;

static int span_on(const opts *o)
{
    return o->window > 0 || o->block > 0;
}

typedef struct shared {
    const opts *o;
    const bench_span_seq *span;  /* NULL: full attention */
    const float *q, *k, *v, *dout; /* (S, H, d) global inputs */
    float *out, *dq;                /* global results */
    double t_fwd, t_bwd;            /* wall time of the slowest rank */
    rv_cp_stats *fwd, *bwd;         /* per rank */
    size_t *tensor_bytes;           /* per rank */
    int rep;                        /* which of the --repeat runs this is */
} shared;

/* The median of x[0..n) (n <= 100), x left as it is. */
static double median(const double *in, int n)
{
    double x[100];
    memcpy(x, in, sizeof(double) * (size_t)n);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && x[j - 1] > x[j]; j--) {
            double t = x[j];
            x[j] = x[j - 1], x[j - 1] = t;
        }
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* x[0..n) as a JSON array. */
static json_t *json_reals(const double *x, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_real(x[i]));
    return a;
}

static void rows_copy(const rv_shard_plan *p, int r, size_t row, float *global, float *slice,
                      int to_slice)
{
    rv_shard_seg s[RV_SHARD_MAX_SEGS];
    int n = rv_shard_segments(p, r, s);
    int64_t off = 0;
    for (int i = 0; i < n; i++, off += s[i - 1].len) {
        float *g = global + (size_t)s[i].start * row, *l = slice + (size_t)off * row;
        memcpy(to_slice ? l : g, to_slice ? g : l, sizeof(float) * row * (size_t)s[i].len);
    }
}

/* On the CPU with --repeat, rank r of run k is bound to the k-th rotation of the
 * cores (its T threads to T of them) when the N*T threads fit: the cores of a
 * virtual machine run at different speeds from one spell to the next, and a rank
 * that meets each core in turn shows its own work in its least busy time. */
static void bind_rank(const opts *o, int rank, int rep)
{
    cpu_set_t allowed, mine;
    if (o->repeat < 2 || sched_getaffinity(0, sizeof allowed, &allowed) != 0 ||
        CPU_COUNT(&allowed) < o->cp * o->tpr)
        return;
    int cpus[CPU_SETSIZE], n = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &allowed))
            cpus[n++] = c;
    CPU_ZERO(&mine);
    int first = ((rank + rep) % o->cp) * o->tpr;
    for (int t = 0; t < o->tpr; t++)
        CPU_SET(cpus[first + t], &mine);
    pthread_setaffinity_np(pthread_self(), sizeof mine, &mine); /* a hint: failure is harmless */
}

static rv_status rank_main(rv_comm *comm, void *arg)
{
    shared *sh = arg;
    const opts *o = sh->o;
    rv_shard_plan plan;
    rv_backend *be = NULL;
    rv_cp_attn cp = {0};
    float *t[9] = {0}; /* q k v o dout dq dk dv lse: host */
    float *d[9] = {0}; /* the same in the backend's memory (t itself on cpu) */
    int on_cpu = 1;
    rv_status st = rv_comm_set_timeout(comm, o->timeout);
    if (st != RV_OK || (st = rv_shard_plan_make(o->shard, o->cp, o->seq, &plan)) != RV_OK)
        return st;
    const int r = comm->rank;
    const int64_t len = rv_shard_len(&plan, r);
    if (strcmp(o->device, "cpu") == 0)
        bind_rank(o, r, sh->rep);
    const size_t row = (size_t)o->heads * o->dim, n = (size_t)(len > 0 ? len : 1) * row;
    int ntensors = o->backward ? 8 : 4;
    for (int i = 0; i < 9; i++)
        if (!(t[i] = malloc(sizeof(float) * (i == 8 ? (size_t)(len > 0 ? len : 1) * o->heads : n)))) {
            st = rv_fail(RV_ERR_NOMEM, "rank %d: out of memory", r);
            goto end;
        }
    sh->tensor_bytes[r] = sizeof(float) * ((size_t)len * row * ntensors + (size_t)len * o->heads);
    rows_copy(&plan, r, row, (float *)sh->q, t[0], 1);
    rows_copy(&plan, r, row, (float *)sh->k, t[1], 1);
    rows_copy(&plan, r, row, (float *)sh->v, t[2], 1);
    rows_copy(&plan, r, row, (float *)sh->dout, t[4], 1);
    if ((st = bench_backend_create(o->device, o->tpr, &be)) != RV_OK)
        goto end;
    on_cpu = rv_backend_is_host(be);
    for (int i = 0; i < 9; i++) {
        size_t bytes = sizeof(float) * (i == 8 ? (size_t)(len > 0 ? len : 1) * o->heads : n);
        if (on_cpu) {
            d[i] = t[i];
        } else if ((st = be->alloc(be, bytes, (void **)&d[i])) != RV_OK ||
                   (st = be->copy(be, d[i], t[i], bytes, RV_COPY_HOST_TO_DEVICE)) != RV_OK) {
            goto end;
        }
    }
    if ((st = rv_cp_attn_init(&cp, be, comm, &plan, o->strategy, o->heads, o->dim, o->causal,
                              0.0f)) != RV_OK)
        goto end;
    if (sh->span) { /* contiguous: the slice is one run of the sequence */
        rv_shard_seg seg[RV_SHARD_MAX_SEGS];
        const int64_t first = rv_shard_segments(&plan, r, seg) > 0 ? seg[0].start : 0;
        if ((st = rv_cp_attn_set_span(&cp, sh->span->reach, sh->span->key + first,
                                      sh->span->time + first)) != RV_OK)
            goto end;
        memset(&cp.stats, 0, sizeof cp.stats); /* the keys' one-off exchange aside */
    }
    if ((st = rv_comm_barrier(comm)) != RV_OK)
        goto end;
    double t0 = rv_clock_s();
    if ((st = rv_cp_attn_forward(&cp, d[0], d[1], d[2], d[3], d[8])) != RV_OK ||
        (st = rv_comm_barrier(comm)) != RV_OK)
        goto end;
    if (r == 0)
        sh->t_fwd = rv_clock_s() - t0;
    sh->fwd[r] = cp.stats;
    if (o->backward) {
        memset(&cp.stats, 0, sizeof cp.stats);
        t0 = rv_clock_s();
        if ((st = rv_cp_attn_backward(&cp, d[0], d[1], d[2], d[3], d[8], d[4], d[5], d[6],
                                      d[7])) != RV_OK ||
            (st = rv_comm_barrier(comm)) != RV_OK)
            goto end;
        if (r == 0)
            sh->t_bwd = rv_clock_s() - t0;
        sh->bwd[r] = cp.stats;
        if (!on_cpu && (st = be->copy(be, t[5], d[5], sizeof(float) * n,
                                      RV_COPY_DEVICE_TO_HOST)) != RV_OK)
            goto end;
        rows_copy(&plan, r, row, sh->dq, t[5], 0);
    }
    if (!on_cpu &&
        (st = be->copy(be, t[3], d[3], sizeof(float) * n, RV_COPY_DEVICE_TO_HOST)) != RV_OK)
        goto end;
    rows_copy(&plan, r, row, sh->out, t[3], 0);
end:
    if (cp.span)
        rv_cp_attn_free(&cp);
    for (int i = 0; i < 9 && !on_cpu; i++)
        if (d[i])
            be->free(be, d[i]);
    rv_backend_free(&be);
    for (int i = 0; i < 9; i++)
        free(t[i]);
    return st;
}

/* --shard contiguous|zigzag into the rv_shard_kind at dst. */
static int take_shard(const char *cmd, const char *name, const char *value, void *dst)
{
    (void)name;
    if (rv_shard_kind_parse(value, dst) != RV_OK)
        return cli_usage_error(cmd, "%s", rv_last_error());
    return 0;
}

static int parse(int argc, char **argv, opts *o)
{
    *o = (opts){.strategy = RV_CP_RING, .cp = 2, .heads = 4, .dim = 64, .tpr = 1, .repeat = 1,
                .seq = 32768, .timeout = RV_COMM_DEFAULT_TIMEOUT_S, .rate = 150.0,
                .device = "cpu"};
    const cli_flag flags[] = {
        {.name = "--strategy", .kind = RV_CLI_CUSTOM, .dst = &o->strategy,
         .take = bench_take_strategy},
        {.name = "--shard", .kind = RV_CLI_CUSTOM, .dst = &o->shard, .take = take_shard,
         .seen = &o->shard_set},
        {.name = "--cp", .kind = RV_CLI_INT, .dst = &o->cp, .lo = 1, .hi = 1024},
        {.name = "--seq", .kind = RV_CLI_I64, .dst = &o->seq, .lo = 1, .hi = 1 << 30},
        {.name = "--repeat", .kind = RV_CLI_INT, .dst = &o->repeat, .lo = 1, .hi = 100},
        {.name = "--threads-per-rank", .kind = RV_CLI_INT, .dst = &o->tpr, .lo = 1, .hi = 1024},
        {.name = "--timeout", .kind = RV_CLI_DOUBLE, .dst = &o->timeout, .lo = 0.001, .hi = 1e6},
        RV_BENCH_ATTN_FLAGS(o),
    };
    int rc = cli_flags_parse(CMD, argc, argv, flags, RV_CLI_NFLAGS(flags), NULL);
    if (rc)
        return rc;
    if (o->window > 0 && o->block > 0)
        return cli_usage_error(CMD, "--window and --block exclude each other");
    if (span_on(o) && o->shard_set && o->shard != RV_SHARD_CONTIGUOUS)
        return cli_usage_error(CMD, "an attention span (--window, --block) needs "
                                  "--shard contiguous");
    if (!o->shard_set)
        o->shard = o->causal && !span_on(o) ? RV_SHARD_ZIGZAG : RV_SHARD_CONTIGUOUS;
    if (rv_cp_strategy_check(o->strategy, o->heads, o->cp) != RV_OK)
        return cli_usage_error(CMD, "--heads and --cp: %s", rv_last_error());
    return 0;
}

/* Single-rank attention of the whole sequence: one timed forward (and backward)
 * into *t_fwd, *t_bwd. h: host q k v dout, then o and dq written back; dev: the
 * backend's q k v dout o dq lse dk dv (h's own arrays and s_* on cpu); key, time
 * (NULL: full attention): a span's, in the backend's memory. */
static rv_status single_rank(rv_backend *be, const opts *o, float *const dev[9], float *h_o,
                             float *h_dq, const double *key, const double *time, double reach,
                             double *t_fwd, double *t_bwd)
{
    const size_t nt = (size_t)o->seq * o->heads * o->dim;
    const int on_cpu = rv_backend_is_host(be);
    rv_attn_mask m = {.kind = o->causal ? RV_MASK_CAUSAL : RV_MASK_NONE, .q_start = 0, .k_start = 0};
    if (key) /* a span: the keys and times in the backend's memory */
        m = (rv_attn_mask){.kind = RV_MASK_SPAN, .q_key = key, .k_key = key, .q_time = time,
                           .k_time = time, .reach = reach, .causal = o->causal};
    rv_attn_fwd_args fa = {.q = dev[0], .k = dev[1], .v = dev[2], .o = dev[4], .lse = dev[6],
                           .sq = (int)o->seq, .sk = (int)o->seq, .heads = o->heads, .dim = o->dim,
                           .scale = 0.0f, .mask = m, .accumulate = 0};
    double t0 = rv_clock_s();
    rv_status st = be->attn_fwd(be, &fa);
    if (st != RV_OK || (st = be->synchronize(be)) != RV_OK)
        return st;
    *t_fwd = rv_clock_s() - t0;
    if (o->backward) {
        rv_attn_bwd_args ba = {.q = dev[0], .k = dev[1], .v = dev[2], .o = dev[4], .lse = dev[6],
                               .dout = dev[3], .dq = dev[5], .dk = dev[7], .dv = dev[8],
                               .sq = (int)o->seq, .sk = (int)o->seq, .heads = o->heads,
                               .dim = o->dim, .scale = 0.0f, .mask = m, .accumulate = 0};
        t0 = rv_clock_s();
        if ((st = be->attn_bwd(be, &ba)) != RV_OK || (st = be->synchronize(be)) != RV_OK)
            return st;
        *t_bwd = rv_clock_s() - t0;
        if (!on_cpu &&
            (st = be->copy(be, h_dq, dev[5], sizeof(float) * nt, RV_COPY_DEVICE_TO_HOST)) != RV_OK)
            return st;
    }
    if (!on_cpu)
        st = be->copy(be, h_o, dev[4], sizeof(float) * nt, RV_COPY_DEVICE_TO_HOST);
    return st;
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        m = d > m || isnan(d) ? d : m;
    }
    return m;
}

/* The table of the passes (its figures go to JSON under their own keys) and the
 * table of the ranks. */
static const bench_col pass_cols[] = {
    {"pass", "%4s", NULL, RV_BENCH_TEXT},
    {"cp(ms)", "%10.1f", NULL, RV_BENCH_REAL},
    {"single(ms)", "%10.1f", NULL, RV_BENCH_REAL},
    {"ratio", "%6.3f", NULL, RV_BENCH_REAL},
    {"max err", "%10.2g", NULL, RV_BENCH_REAL},
};
static const bench_col rank_cols[] = {
    {"rank", "%4lld", "rank", RV_BENCH_INT},
    {NULL, NULL, "bytes_sent", RV_BENCH_REAL},
    {"sent(MB)", "%12.1f", NULL, RV_BENCH_REAL},
    {"mem(MB)", "%10.1f", NULL, RV_BENCH_REAL},
    {NULL, NULL, "busy_s", RV_BENCH_REAL},
    {"GFLOP", "%9.2f", "gflop", RV_BENCH_REAL},
    {"busy(s)", "%9.3f", NULL, RV_BENCH_REAL},
    {"wait(s)", "%9.3f", "wait_s", RV_BENCH_REAL},
    {NULL, NULL, "mem_mb", RV_BENCH_REAL},
};

static int bench_main(int argc, char **argv)
{
    opts o;
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc;
    const size_t row = (size_t)o.heads * o.dim, nt = (size_t)o.seq * row;
    const size_t nl = (size_t)o.seq * o.heads;
    float *g[8] = {0}; /* q k v dout out dq | single: o, dq */
    float *s_lse = NULL, *s_dk = NULL, *s_dv = NULL;
    rv_cp_stats *fwd = calloc((size_t)o.cp, sizeof *fwd), *bwd = calloc((size_t)o.cp, sizeof *bwd);
    size_t *tb = calloc((size_t)o.cp, sizeof *tb);
    double *busy = calloc((size_t)o.cp, sizeof *busy); /* per rank, its least over repeats */
    /* (2, repeat): each run's N-rank time over the single-rank time just before it,
     * forward then backward; their medians ride out a slow spell better than the
     * fastest runs, which may come from different spells. */
    double *run_ratio = calloc(2 * (size_t)o.repeat, sizeof *run_ratio);
    rv_backend *be = NULL;
    float *dev[9] = {0}; /* single rank: q k v dout o dq lse dk dv in the backend's memory */
    bench_span_seq sp = {0};
    double *skey = NULL, *stime = NULL; /* the span's keys and times, backend's memory */
    int on_cpu = 1;
    rc = RV_EXIT_FAIL;
    if (span_on(&o) && bench_span_seq_make(o.window, o.block, o.rate, o.seq, &sp) != RV_OK)
        goto oom;
    for (int i = 0; i < 8; i++)
        if (!(g[i] = malloc(sizeof(float) * nt)))
            goto oom;
    if (!(s_lse = malloc(sizeof(float) * nl)) || !(s_dk = malloc(sizeof(float) * nt)) ||
        !(s_dv = malloc(sizeof(float) * nt)) || !fwd || !bwd || !tb || !busy || !run_ratio)
        goto oom;
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (size_t i = 0; i < nt; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        g[0][i] = (float)((x >> 40) & 0xFFFF) / 16384.0f - 2.0f;
        g[1][i] = (float)((x >> 20) & 0xFFFF) / 16384.0f - 2.0f;
        g[2][i] = (float)(x & 0xFFFF) / 32768.0f - 1.0f;
        g[3][i] = (float)((x >> 8) & 0xFFFF) / 32768.0f - 1.0f;
    }

    /* Single rank, all threads (or one stream of the GPU). */
    rv_status st = bench_backend_create(o.device, o.cp * o.tpr, &be);
    if (st != RV_OK) {
        rc = cli_fail(st, CMD);
        goto end;
    }
    on_cpu = rv_backend_is_host(be);
    float *host[9] = {g[0], g[1], g[2], g[3], g[6], g[7], s_lse, s_dk, s_dv};
    for (int i = 0; i < 9; i++) {
        size_t bytes = sizeof(float) * (i == 6 ? nl : nt);
        if (on_cpu) {
            dev[i] = host[i];
        } else if ((st = be->alloc(be, bytes, (void **)&dev[i])) != RV_OK ||
                   (i < 4 && (st = be->copy(be, dev[i], host[i], bytes,
                                            RV_COPY_HOST_TO_DEVICE)) != RV_OK)) {
            rc = cli_fail(st, CMD);
            goto end;
        }
    }
    if (span_on(&o)) {
        const size_t kb = sizeof(double) * (size_t)o.seq;
        if (on_cpu) {
            skey = sp.key, stime = sp.time;
        } else if ((st = be->alloc(be, kb, (void **)&skey)) != RV_OK ||
                   (st = be->alloc(be, kb, (void **)&stime)) != RV_OK ||
                   (st = be->copy(be, skey, sp.key, kb, RV_COPY_HOST_TO_DEVICE)) != RV_OK ||
                   (st = be->copy(be, stime, sp.time, kb, RV_COPY_HOST_TO_DEVICE)) != RV_OK) {
            rc = cli_fail(st, CMD);
            goto end;
        }
    }
    rv_comm_copy_fn move = NULL;
#ifdef RINGVIT_HAVE_CUDA
    if (!on_cpu)
        move = rv_cuda_copy_sync;
#endif
    /* Single rank and the N ranks alternate `repeat` times; the fastest of each
     * is compared, so a slow spell of the machine does not land on one side. */
    double single_fwd = INFINITY, single_bwd = INFINITY, cp_fwd = INFINITY, cp_bwd = INFINITY;
    shared sh = {.o = &o, .span = span_on(&o) ? &sp : NULL, .q = g[0], .k = g[1], .v = g[2],
                 .dout = g[3], .out = g[4], .dq = g[5], .fwd = fwd, .bwd = bwd,
                 .tensor_bytes = tb};
    for (int rep = 0; rep < o.repeat; rep++) {
        double tf = 0, tb_ = 0;
        if ((st = single_rank(be, &o, dev, g[6], g[7], span_on(&o) ? skey : NULL, stime,
                              sp.reach, &tf, &tb_)) != RV_OK) {
            rc = cli_fail(st, CMD);
            goto end;
        }
        single_fwd = fmin(single_fwd, tf);
        single_bwd = fmin(single_bwd, tb_);
        sh.rep = rep;
        if ((st = rv_local_run_copy(o.cp, rank_main, &sh, move)) != RV_OK) {
            rc = cli_fail(st, CMD);
            goto end;
        }
        cp_fwd = fmin(cp_fwd, sh.t_fwd);
        cp_bwd = fmin(cp_bwd, sh.t_bwd);
        run_ratio[rep] = sh.t_fwd / tf;
        run_ratio[o.repeat + rep] = o.backward ? sh.t_bwd / tb_ : NAN;
        /* Each rank's own least: the machine's slow spells fall on one core at a
         * time, so the least of several runs is the rank's work, not the noise. */
        for (int r = 0; r < o.cp; r++) {
            double b = fwd[r].busy_s + bwd[r].busy_s;
            busy[r] = rep == 0 ? b : fmin(busy[r], b);
        }
    }
    sh.t_fwd = cp_fwd, sh.t_bwd = cp_bwd;
    const double fwd_median = median(run_ratio, o.repeat);
    const double bwd_median = o.backward ? median(run_ratio + o.repeat, o.repeat) : NAN;
    double err_o = max_abs_diff(g[4], g[6], nt), err_dq = o.backward ? max_abs_diff(g[5], g[7], nt) : NAN;
    double busy_min = INFINITY, busy_max = 0, sent_max = 0, mem_max = 0, fwd_sent_max = 0;
    double fwd_flops = 0;
    double flops_min = INFINITY, flops_max = 0;
    for (int r = 0; r < o.cp; r++) {
        busy_min = fmin(busy_min, busy[r]), busy_max = fmax(busy_max, busy[r]);
        flops_min = fmin(flops_min, fwd[r].flops + bwd[r].flops);
        flops_max = fmax(flops_max, fwd[r].flops + bwd[r].flops);
        sent_max = fmax(sent_max, fwd[r].bytes_sent + bwd[r].bytes_sent);
        fwd_sent_max = fmax(fwd_sent_max, fwd[r].bytes_sent);
        fwd_flops += fwd[r].flops;
        size_t peak = fwd[r].peak_bytes > bwd[r].peak_bytes ? fwd[r].peak_bytes : bwd[r].peak_bytes;
        mem_max = fmax(mem_max, (double)(tb[r] + peak));
    }
    /* The same tensors held whole by one rank, no strategy buffers. */
    double single_mem = sizeof(float) * ((double)nt * (o.backward ? 8 : 4) + nl);
    /* Both sides round the same inputs; on a GPU the blocks' P goes through bf16
     * with different running maxima, so differences reach bf16's resolution. */
    const double tol = on_cpu ? 1e-3 : 2e-2;
    /* The visible share of all (query, key) pairs, from the ranks' counted work;
     * what a rank sends in a full ring's forward: every other rank's K and V. */
    const double visible = fwd_flops / (4.0 * o.dim * o.heads * (double)o.seq * (double)o.seq);
    const double full_ring = 2.0 * sizeof(float) * (double)row * (double)o.seq * (o.cp - 1) / o.cp;
    char span_text[64];
    if (o.window > 0)
        snprintf(span_text, sizeof span_text, "window=%g", o.window);
    else if (o.block > 0)
        snprintf(span_text, sizeof span_text, "block=%g", o.block);
    else
        snprintf(span_text, sizeof span_text, "full");
    int ok = err_o < tol && (!o.backward || err_dq < tol);
    bench_report rep;
    bench_report_init(&rep, "ring", o.json);
    bench_set(&rep, "strategy", json_string(rv_cp_strategy_name(o.strategy)));
    bench_set(&rep, "cpu_kernels", json_string(bench_cpu_kernels()));
    bench_set(&rep, "shard", json_string(rv_shard_kind_name(o.shard)));
    bench_set(&rep, "cp", json_integer(o.cp));
    bench_set(&rep, "seq", json_integer(o.seq));
    bench_set(&rep, "heads", json_integer(o.heads));
    bench_set(&rep, "dim", json_integer(o.dim));
    bench_set(&rep, "causal", json_boolean(o.causal));
    bench_set(&rep, "attention", json_string(span_text));
    if (span_on(&o))
        bench_set(&rep, "rate", json_real(o.rate));
    bench_set(&rep, "visible_fraction", json_real(visible));
    bench_set(&rep, "fwd_sent_max_mb", json_real(fwd_sent_max / 1048576.0));
    bench_set(&rep, "full_ring_fwd_mb", json_real(full_ring / 1048576.0));
    bench_set(&rep, "threads_per_rank", json_integer(o.tpr));
    bench_set(&rep, "device", json_string(be->name));
    bench_set(&rep, "tolerance", json_real(tol));
    bench_set(&rep, "fwd_ms", json_real(sh.t_fwd * 1e3));
    bench_set(&rep, "single_fwd_ms", json_real(single_fwd * 1e3));
    bench_set(&rep, "fwd_ratio", json_real(sh.t_fwd / single_fwd));
    bench_set(&rep, "fwd_ratio_median", json_real(fwd_median));
    bench_set(&rep, "fwd_ratio_runs", json_reals(run_ratio, o.repeat));
    if (o.backward) {
        bench_set(&rep, "bwd_ms", json_real(sh.t_bwd * 1e3));
        bench_set(&rep, "single_bwd_ms", json_real(single_bwd * 1e3));
        bench_set(&rep, "bwd_ratio", json_real(sh.t_bwd / single_bwd));
        bench_set(&rep, "bwd_ratio_median", json_real(bwd_median));
        bench_set(&rep, "bwd_ratio_runs", json_reals(run_ratio + o.repeat, o.repeat));
        bench_set(&rep, "max_abs_err_dq", json_real(err_dq));
    }
    bench_set(&rep, "max_abs_err_o", json_real(err_o));
    bench_set(&rep, "mem_ratio", json_real(mem_max / single_mem));
    bench_set(&rep, "busy_spread", json_real(busy_max / busy_min - 1.0));
    bench_set(&rep, "flops_spread", json_real(flops_max / flops_min - 1.0));
    bench_set(&rep, "repeat", json_integer(o.repeat));

    bench_note(&rep, "ringvit bench ring: %s, %s shards, cp %d x %d thread(s) vs 1 rank x %d, "
                  "S=%lld H=%d d=%d%s, CPU kernels %s", rv_cp_strategy_name(o.strategy),
                  rv_shard_kind_name(o.shard), o.cp, o.tpr, o.cp * o.tpr, (long long)o.seq,
                  o.heads, o.dim, o.causal ? " causal" : "", bench_cpu_kernels());
    bench_note(&rep, "%s", "");
    bench_table(&rep, NULL, pass_cols, (int)(sizeof pass_cols / sizeof pass_cols[0]));
    bench_add_row(&rep, (const bench_val[]){{.s = "fwd"}, {.f = sh.t_fwd * 1e3},
                                              {.f = single_fwd * 1e3},
                                              {.f = sh.t_fwd / single_fwd}, {.f = err_o}});
    if (o.backward)
        bench_add_row(&rep, (const bench_val[]){{.s = "bwd"}, {.f = sh.t_bwd * 1e3},
                                                  {.f = single_bwd * 1e3},
                                                  {.f = sh.t_bwd / single_bwd}, {.f = err_dq}});
    if (o.repeat > 1 && o.backward)
        bench_note(&rep, "fastest of %d runs each; median of the runs' own ratios: fwd %.3f, "
                      "bwd %.3f", o.repeat, fwd_median, bwd_median);
    else if (o.repeat > 1)
        bench_note(&rep, "fastest of %d runs each; median of the runs' own ratios: fwd %.3f",
                      o.repeat, fwd_median);
    bench_note(&rep, "%s", "");
    bench_table(&rep, "ranks", rank_cols, (int)(sizeof rank_cols / sizeof rank_cols[0]));
    for (int r = 0; r < o.cp; r++) {
        size_t pk = fwd[r].peak_bytes > bwd[r].peak_bytes ? fwd[r].peak_bytes : bwd[r].peak_bytes;
        const double sent = fwd[r].bytes_sent + bwd[r].bytes_sent;
        const double mem = (tb[r] + pk) / 1048576.0;
        bench_add_row(&rep, (const bench_val[]){
                               {.i = r}, {.f = sent}, {.f = sent / 1048576.0}, {.f = mem},
                               {.f = busy[r]}, {.f = (fwd[r].flops + bwd[r].flops) * 1e-9},
                               {.f = busy[r]}, {.f = fwd[r].wait_s + bwd[r].wait_s}, {.f = mem}});
    }
    if (span_on(&o))
        bench_note(&rep, "attention %s at %g tokens/s: %.3f%% of the pairs visible; forward "
                      "sent %.2f MB per rank at most (a full ring: %.1f MB)", span_text, o.rate,
                      visible * 100, fwd_sent_max / 1048576.0, full_ring / 1048576.0);
    bench_note(&rep, "memory per rank %.3f x single-rank (%.1f MB); work spread %.1f%%, busy "
                  "time spread %.1f%%%s", mem_max / single_mem, single_mem / 1048576.0,
                  (flops_max / flops_min - 1.0) * 100, (busy_max / busy_min - 1.0) * 100,
                  o.repeat > 1 ? " (each rank's least)" : "");
    rc = bench_finish(&rep, ok, "results differ from single-rank attention");
    goto end;
oom:
    cli_error("%s: out of memory for S=%lld", CMD, (long long)o.seq);
end:
    for (int i = 0; i < 9 && !on_cpu; i++)
        if (dev[i])
            be->free(be, dev[i]);
    if (!on_cpu && skey)
        be->free(be, skey);
    if (!on_cpu && stime)
        be->free(be, stime);
    bench_span_seq_free(&sp);
    rv_backend_free(&be);
    for (int i = 0; i < 8; i++)
        free(g[i]);
    free(s_lse), free(s_dk), free(s_dv), free(fwd), free(bwd), free(tb), free(busy);
    free(run_ratio);
    return rc;
}

const bench_cmd bench_ring = {
    .name = "ring",
    .help = help_text,
    .main = bench_main,
};
