/* bench_attention.c: `ringvit bench attention`, the attention block of a compute
 * backend timed against the same backend's GEMM measured in the same run, so the
 * ratio (attention GFLOP/s over GEMM GFLOP/s) is comparable across machines: the
 * CPU's sgemm (2048^3), or on --device cuda cuBLAS in bf16 (8192^3).
 *
 * One row per sequence length and pass (nccl-tests style): time, GFLOP/s, sgemm
 * GFLOP/s, ratio, extra memory (peak resident growth during the attention runs),
 * max error of sampled forward rows against a double-precision recomputation, and
 * an OK/FAILED footer. FLOPs count 4*d per visible (query, key) pair and head
 * forward (QK^T and PV) and 10*d backward (the recomputed QK^T plus four GEMMs),
 * the flash-attention convention.
 *
 * --window W / --block B run a span mask (RV_MASK_SPAN) over a synthetic token
 * sequence of --rate R tokens per second laid out as the tokenizer lays one out:
 * 2 s interleaving windows, each holding its video tokens in time order (two
 * thirds of them, 4 frames of 0.5 s: a frame's tokens start together), then its
 * audio tokens in time order. The visible pairs are counted exactly (each query
 * against the rows of the windows its reach touches), so GFLOP/s are over the
 * pairs the mask keeps, comparable with a full-attention row when the kernels
 * skip the tiles that see nothing. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "apps.h"
#include "bench_common.h"
#include "cli.h"
#include "rv_backend.h"
#include "rv_clock.h"

#define CMD "bench attention"
#define MAX_SEQS 16

static const char help_text[] =
    "usage: ringvit bench attention [--seq S[,S...]] [--heads H] [--dim D] [--causal]\n"
    "                               [--window W | --block B] [--rate R]\n"
    "                               [--device cpu|cuda] [--threads T] [--backward]\n"
    "                               [--repeat N] [--json]\n"
    "\n"
    "Times the attention block (tiled, flash-attention style) of a backend against\n"
    "the same backend's GEMM in the same run (sgemm 2048^3 on the CPU's threads,\n"
    "cuBLAS bf16 8192^3 on the GPU): one row per length with the visible pairs, ms\n"
    "per call, GFLOP/s over the visible pairs, the GEMM's, their ratio, the extra\n"
    "memory and the max error of sampled rows against a double-precision reference.\n"
    "\n"
    "  --seq S[,S...]  sequence lengths, one row each (default 4096)\n"
    "  --heads H       attention heads (default 4)\n"
    "  --dim D         head dimension (default 64)\n"
    "  --causal        causal mask (with a span: a key starting later than the query\n"
    "                  is not seen)\n"
    "  --window W      span mask: a sliding window of W seconds (default: none)\n"
    "  --block B       span mask: blocks of B seconds (default: none)\n"
    "  --rate R        tokens per second of the synthetic sequence of --window and\n"
    "                  --block (default 150)\n"
    "  --device D      cpu (default) or cuda\n"
    "  --precision P   auto (default: the device's own), f32 or bf16 (cpu: AVX-512 BF16\n"
    "                  tiles; the sgemm reference stays f32)\n"
    "  --threads T     threads of the CPU backend (default: every core)\n"
    "  --backward      also time the backward pass\n"
    "  --repeat N      timed repetitions per row, the fastest is reported (default 3)\n"
    "  --json          one JSON object on stdout instead of the table\n"
    "\n"
    "Exit status: 0 OK, 1 FAILED (sampled rows differ from the reference) or a\n"
    "runtime failure, 2 usage.\n"
    "\n"
    "examples:\n"
    "  ringvit bench attention --seq 8192 --heads 4 --dim 64 --threads 2 --backward\n"
    "  ringvit bench attention --seq 65536 --heads 4 --dim 64 --window 16 --threads 2\n"
    "  ringvit bench attention --device cuda --seq 16384,65536 --heads 16 --dim 128\n"
    "\n"
    "More: docs/benchmarks.md (columns, the current numbers)\n";

typedef struct bench_opts {
    int seqs[MAX_SEQS], nseq;
    int heads, dim, causal, threads, backward, repeat, json;
    double window, block, rate; /* window, block: seconds, 0 when not given */
    const char *device;
    rv_precision precision; /* --precision (auto: the device's own) */
} bench_opts;

static int span_on(const bench_opts *o)
{
    return o->window > 0 || o->block > 0;
}

static double peak_rss_mb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;
}

/* --seq S[,S...] into the bench_opts at dst. */
static int take_seqs(const char *cmd, const char *name, const char *text, void *dst)
{
    bench_opts *o = dst;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", text);
    o->nseq = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (o->nseq == MAX_SEQS)
            return cli_usage_error(cmd, "%s takes at most %d lengths", name, MAX_SEQS);
        int rc = cli_parse_int(cmd, name, tok, 1, 1 << 22, &o->seqs[o->nseq]);
        if (rc)
            return rc;
        o->nseq++;
    }
    if (o->nseq == 0)
        return cli_usage_error(cmd, "%s wants a comma-separated list of lengths", name);
    return 0;
}

static int parse_args(int argc, char **argv, bench_opts *o)
{
    *o = (bench_opts){.seqs = {4096}, .nseq = 1, .heads = 4, .dim = 64, .repeat = 3,
                      .rate = 150.0, .device = "cpu"};
    const cli_flag flags[] = {
        {.name = "--seq", .kind = RV_CLI_CUSTOM, .dst = o, .take = take_seqs},
        {.name = "--threads", .kind = RV_CLI_INT, .dst = &o->threads, .lo = 1, .hi = 4096},
        {.name = "--repeat", .kind = RV_CLI_INT, .dst = &o->repeat, .lo = 1, .hi = 1000},
        {.name = "--precision", .kind = RV_CLI_PRECISION, .dst = &o->precision},
        RV_BENCH_ATTN_FLAGS(o),
    };
    int rc = cli_flags_parse(CMD, argc, argv, flags, RV_CLI_NFLAGS(flags), NULL);
    if (rc || (rc = cli_check_precision(CMD, o->device, o->precision)) != 0)
        return rc;
    if (o->window > 0 && o->block > 0)
        return cli_usage_error(CMD, "--window and --block exclude each other");
    return 0;
}

/* ---- the synthetic sequence of a span mask ----------------------------------- */

typedef bench_span_seq span_seq;

static void span_seq_free(span_seq *s)
{
    bench_span_seq_free(s);
}

static rv_status span_seq_make(const bench_opts *o, int seq, span_seq *s)
{
    return bench_span_seq_make(o->window, o->block, o->rate, seq, s);
}

static int span_sees(const span_seq *s, int causal, int i, int j)
{
    if (!(fabs(s->key[i] - s->key[j]) <= s->reach))
        return 0;
    return !causal || s->time[j] < s->time[i] || (s->time[j] == s->time[i] && j <= i);
}

/* Rows [*j0, *j1) that may hold keys query i sees: the 2 s windows its keys' times
 * touch (a margin of one window on each side against rounding). */
static void span_rows(const bench_opts *o, const span_seq *s, int seq, int i, int *j0, int *j1)
{
    double t = s->time[i], lo, hi;
    if (o->window > 0) {
        lo = t - s->reach;
        hi = t + s->reach;
    } else {
        lo = s->key[i] * o->block;
        hi = (s->key[i] + 1) * o->block;
    }
    double w0 = floor(lo / 2) - 1, w1 = floor(hi / 2) + 2;
    *j0 = w0 <= 0 ? 0 : (w0 * s->per >= seq ? seq : (int)w0 * s->per);
    *j1 = w1 * s->per >= seq ? seq : (w1 <= 0 ? 0 : (int)w1 * s->per);
}

/* Visible (query, key) pairs of the span mask, counted pair by pair. */
static double span_pairs(const bench_opts *o, const span_seq *s, int seq)
{
    double total = 0;
#pragma omp parallel for reduction(+ : total) schedule(dynamic, 256)
    for (int i = 0; i < seq; i++) {
        int j0, j1;
        span_rows(o, s, seq, i, &j0, &j1);
        for (int j = j0; j < j1; j++)
            total += span_sees(s, o->causal, i, j);
    }
    return total;
}

/* Reference output of query row i (every head) in double, against a->o: the
 * largest absolute error and output magnitude of the row. Keys outer, heads and
 * channels inner, so K and V are read once, row by row, in memory order; each
 * output channel still sums its keys in ascending order, as a plain per-channel
 * loop would. Masked keys (weight exactly 0) add nothing and are skipped.
 * scratch: sample_scratch() doubles. */
static void sample_row(const rv_attn_fwd_args *a, const bench_opts *opt, const span_seq *sp,
                       int i, double *scratch, double *err, double *mag)
{
    const int d = a->dim, nh = a->heads, hd = nh * d;
    double *p = scratch;                      /* (nk, heads) scores, then weights */
    double *acc = p + (size_t)a->sk * nh;     /* (heads, dim) weighted sums of V */
    double *prod = acc + hd;                  /* (dim) one key's products */
    double *mx = prod + d, *sum = mx + nh;    /* (heads) score maximum, weight sum */
    const float scale = 1.0f / sqrtf((float)d);
    const int nk = a->mask.kind == RV_MASK_CAUSAL ? i + 1 : a->sk;
    const float *q = a->q + (size_t)i * hd;
    for (int h = 0; h < nh; h++)
        mx[h] = -INFINITY, sum[h] = 0;
    for (int j = 0; j < nk; j++) {
        double *pj = p + (size_t)j * nh;
        if (sp && !span_sees(sp, opt->causal, i, j)) {
            for (int h = 0; h < nh; h++)
                pj[h] = -INFINITY; /* exp gives 0 below */
            continue;
        }
        const float *kj = a->k + (size_t)j * hd;
        for (int h = 0; h < nh; h++) {
            double dot = 0;
            for (int c = 0; c < d; c++)
                dot += (double)q[h * d + c] * kj[h * d + c];
            pj[h] = dot * scale;
            mx[h] = pj[h] > mx[h] ? pj[h] : mx[h];
        }
    }
    for (int j = 0; j < nk; j++)
        for (int h = 0; h < nh; h++)
            sum[h] += (p[(size_t)j * nh + h] = exp(p[(size_t)j * nh + h] - mx[h]));
    for (int x = 0; x < hd; x++)
        acc[x] = 0;
    for (int j = 0; j < nk; j++) {
        const float *vj = a->v + (size_t)j * hd;
        for (int h = 0; h < nh; h++) {
            const double w = p[(size_t)j * nh + h];
            if (w == 0)
                continue;
            /* Each product rounded on its own before the sum, as in the earlier
             * per-channel loop: a fused multiply-add here (the compiler forms one
             * within a loop body) would move the sampled error in its last bits. */
            for (int c = 0; c < d; c++)
                prod[c] = w * vj[h * d + c];
            for (int c = 0; c < d; c++)
                acc[h * d + c] += prod[c];
        }
    }
    *err = 0, *mag = 1e-30;
    for (int h = 0; h < nh; h++)
        for (int c = 0; c < d; c++) {
            double o = acc[h * d + c] / sum[h];
            double e = fabs(o - a->o[(size_t)i * hd + h * d + c]);
            *err = e > *err || isnan(e) ? e : *err;
            *mag = fabs(o) > *mag ? fabs(o) : *mag;
        }
}

/* Doubles of sample_row's scratch. */
static size_t sample_scratch(const rv_attn_fwd_args *a)
{
    return (size_t)a->sk * a->heads + (size_t)a->heads * a->dim + (size_t)a->dim +
           2 * (size_t)a->heads;
}

/* Max normalised error of 16 sampled query rows (all heads) against double; under
 * a span mask (sp not NULL, host copies of the keys) the keys each row sees. The
 * rows are spread over the bench's threads (at S = 65536 a row costs about a
 * second); their maxima combine in row order, a NaN anywhere giving NaN. */
static double sample_error(const rv_attn_fwd_args *a, const bench_opts *opt, const span_seq *sp)
{
    enum { ROWS = 16 };
    int threads = opt->threads > 0 ? opt->threads : omp_get_max_threads();
    threads = threads < ROWS ? threads : ROWS;
    double row_err[ROWS], row_mag[ROWS];
    int failed = 0;
#pragma omp parallel num_threads(threads) reduction(| : failed)
    {
        double *scratch = malloc(sizeof(double) * sample_scratch(a));
        if (!scratch)
            failed = 1;
#pragma omp for schedule(dynamic, 1)
        for (int s = 0; s < ROWS; s++) {
            int i = (int)((long)s * (a->sq - 1) / (ROWS - 1));
            if (scratch)
                sample_row(a, opt, sp, i, scratch, &row_err[s], &row_mag[s]);
        }
        free(scratch);
    }
    if (failed)
        return INFINITY;
    double err = 0, mag = 1e-30;
    for (int s = 0; s < ROWS; s++) {
        err = row_err[s] > err || isnan(row_err[s]) ? row_err[s] : err;
        mag = row_mag[s] > mag ? row_mag[s] : mag;
    }
    return err / mag;
}

typedef struct bench_row {
    const char *pass;
    int seq;
    double pairs; /* visible (query, key) pairs per head */
    double ms, gflops, sgemm, extra_mb, err;
} bench_row;

/* Times `call` (forward or backward, picked by fwd) repeat times after a warm-up,
 * each call waited for; the fastest in seconds. */
static rv_status time_calls(rv_backend *be, const rv_attn_fwd_args *fa,
                            const rv_attn_bwd_args *ba, int repeat, double *best)
{
    rv_status st = RV_OK;
    *best = 1e30;
    for (int r = 0; r <= repeat; r++) {
        double t0 = rv_clock_s();
        st = fa ? be->attn_fwd(be, fa) : be->attn_bwd(be, ba);
        if (st == RV_OK)
            st = be->synchronize(be);
        if (st != RV_OK)
            return st;
        double dt = rv_clock_s() - t0;
        if ((r > 0 || dt > 20.0) && dt < *best)
            *best = dt;
        if (r == 0 && dt > 20.0)
            break; /* one long call is its own warm-up and timing */
    }
    return RV_OK;
}

/* Backend buffers: count of them, each floats long. */
static rv_status dev_alloc(rv_backend *be, float **p, int count, size_t floats)
{
    rv_status st = RV_OK;
    for (int i = 0; i < count && st == RV_OK; i++)
        st = be->alloc(be, sizeof(float) * floats, (void **)&p[i]);
    for (int i = 0; i < count && st == RV_OK; i++)
        st = be->fill(be, p[i], 0.0f, floats);
    return st;
}

static rv_status run_seq(rv_backend *be, const bench_opts *o, int seq, double gemm,
                         bench_row *rows, int *nrows)
{
    size_t n = (size_t)seq * o->heads * o->dim, nl = (size_t)seq * o->heads;
    /* host: q, k, v, o as the double check reads them; d: the backend's q, k, v, o,
     * lse, dout, dq, dk, dv. */
    float *h[4] = {0}, *d[9] = {0};
    double *dkey = NULL, *dtime = NULL; /* the span mask's arrays in the backend's memory */
    span_seq sp = {0};
    rv_status st = RV_OK;
    for (int i = 0; i < 4; i++)
        if (!(h[i] = malloc(sizeof(float) * n))) {
            st = rv_fail(RV_ERR_NOMEM, "attention inputs for seq %d: out of memory", seq);
            goto end;
        }
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n; i++) { /* xorshift: any fixed data will do */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        h[0][i] = (float)((x >> 40) & 0xFFFF) / 32768.0f - 1.0f;
        h[1][i] = (float)((x >> 20) & 0xFFFF) / 32768.0f - 1.0f;
        h[2][i] = (float)(x & 0xFFFF) / 32768.0f - 1.0f;
    }
    if ((st = dev_alloc(be, d, 4, n)) != RV_OK || (st = dev_alloc(be, d + 4, 1, nl)) != RV_OK)
        goto end;
    for (int i = 0; i < 3; i++)
        if ((st = be->copy(be, d[i], h[i], sizeof(float) * n, RV_COPY_HOST_TO_DEVICE)) != RV_OK)
            goto end;
    double pairs = o->causal ? (double)seq * (seq + 1) / 2 : (double)seq * seq;
    rv_attn_mask mask = {.kind = o->causal ? RV_MASK_CAUSAL : RV_MASK_NONE, .q_start = 0, .k_start = 0};
    if (span_on(o)) {
        const size_t bytes = sizeof(double) * (size_t)seq;
        if ((st = span_seq_make(o, seq, &sp)) != RV_OK ||
            (st = be->alloc(be, bytes, (void **)&dkey)) != RV_OK ||
            (st = be->alloc(be, bytes, (void **)&dtime)) != RV_OK ||
            (st = be->copy(be, dkey, sp.key, bytes, RV_COPY_HOST_TO_DEVICE)) != RV_OK ||
            (st = be->copy(be, dtime, sp.time, bytes, RV_COPY_HOST_TO_DEVICE)) != RV_OK)
            goto end;
        pairs = span_pairs(o, &sp, seq);
        mask = (rv_attn_mask){.kind = RV_MASK_SPAN, .q_key = dkey, .k_key = dkey,
                              .q_time = dtime, .k_time = dtime, .reach = sp.reach,
                              .causal = o->causal};
    }
    rv_attn_fwd_args fa = {.q = d[0], .k = d[1], .v = d[2], .o = d[3], .lse = d[4], .sq = seq,
                           .sk = seq, .heads = o->heads, .dim = o->dim, .scale = 0.0f, .mask = mask,
                           .accumulate = 0};

    double rss0 = peak_rss_mb(), best;
    if ((st = time_calls(be, &fa, NULL, o->repeat, &best)) != RV_OK ||
        (st = be->copy(be, h[3], d[3], sizeof(float) * n, RV_COPY_DEVICE_TO_HOST)) != RV_OK)
        goto end;
    rv_attn_fwd_args host = {.q = h[0], .k = h[1], .v = h[2], .o = h[3], .lse = NULL, .sq = seq,
                             .sk = seq, .heads = o->heads, .dim = o->dim, .scale = 0.0f,
                             .mask = mask, .accumulate = 0};
    bench_row *fr = &rows[(*nrows)++];
    *fr = (bench_row){.pass = "fwd", .seq = seq, .pairs = pairs, .ms = best * 1e3,
                      .gflops = 4.0 * o->dim * o->heads * pairs / best * 1e-9, .sgemm = gemm,
                      .extra_mb = peak_rss_mb() - rss0,
                      .err = sample_error(&host, o, span_on(o) ? &sp : NULL)};

    if (o->backward) {
        if ((st = dev_alloc(be, d + 5, 4, n)) != RV_OK)
            goto end;
        for (size_t i = 0; i < n; i++) /* dout: a shuffle of q */
            h[3][i] = h[0][(i * 31) % n];
        if ((st = be->copy(be, d[5], h[3], sizeof(float) * n, RV_COPY_HOST_TO_DEVICE)) != RV_OK)
            goto end;
        rv_attn_bwd_args ba = {.q = d[0], .k = d[1], .v = d[2], .o = d[3], .lse = d[4],
                               .dout = d[5], .dq = d[6], .dk = d[7], .dv = d[8], .sq = seq,
                               .sk = seq, .heads = o->heads, .dim = o->dim, .scale = 0.0f,
                               .mask = mask, .accumulate = 0};
        rss0 = peak_rss_mb();
        if ((st = time_calls(be, NULL, &ba, o->repeat, &best)) != RV_OK)
            goto end;
        bench_row *br = &rows[(*nrows)++];
        *br = (bench_row){.pass = "bwd", .seq = seq, .pairs = pairs, .ms = best * 1e3,
                          .gflops = 10.0 * o->dim * o->heads * pairs / best * 1e-9, .sgemm = gemm,
                          .extra_mb = peak_rss_mb() - rss0, .err = NAN};
    }
end:
    for (int i = 0; i < 4; i++)
        free(h[i]);
    for (int i = 0; i < 9; i++)
        if (d[i])
            be->free(be, d[i]);
    if (dkey)
        be->free(be, dkey);
    if (dtime)
        be->free(be, dtime);
    span_seq_free(&sp);
    return st;
}

/* The table: one row per sequence length and pass. */
static const bench_col row_cols[] = {
    {"seq", "%8lld", "seq", RV_BENCH_INT},
    {"pass", "%4s", "pass", RV_BENCH_TEXT},
    {"pairs", "%10.4g", "visible_pairs", RV_BENCH_REAL},
    {NULL, NULL, "visible_fraction", RV_BENCH_REAL},
    {"time(ms)", "%10.2f", "ms", RV_BENCH_REAL},
    {"GFLOP/s", "%9.2f", "gflops", RV_BENCH_REAL},
    {NULL, "%9.2f", NULL, RV_BENCH_REAL}, /* sgemm or GEMM: the title is the backend's */
    {"ratio", "%6.3f", "ratio", RV_BENCH_REAL},
    {"extra MB", "%9.1f", "extra_mb", RV_BENCH_REAL},
    {"max err", "%9.2g", "max_err", RV_BENCH_REAL},
};
#define NCOLS ((int)(sizeof row_cols / sizeof row_cols[0]))

static int bench_main(int argc, char **argv)
{
    bench_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc;

    rv_backend *be = NULL;
    rv_status st = bench_backend_create(o.device, o.threads, &be);
    if (st == RV_OK && (st = rv_backend_set_precision(be, o.precision)) != RV_OK)
        rv_backend_free(&be);
    if (st != RV_OK)
        return cli_fail(st, CMD);
    const int on_cpu = rv_backend_is_host(be), gemm_n = bench_gemm_size(be);
    /* bf16 inputs (the GPU, or --precision bf16 on the CPU): about 3 significant
     * digits. */
    const int bf16 = rv_backend_precision(be) == RV_PRECISION_BF16;
    const double tol = bf16 ? 2e-2 : 1e-4;
    const char *kernels = bf16 && on_cpu ? rv_cpu_kernels_at(RV_PRECISION_BF16)
                                         : bench_cpu_kernels();
    double sgemm = 0;
    bench_row rows[2 * MAX_SEQS];
    int nrows = 0, ok = 1;
    bench_col cols[NCOLS];
    memcpy(cols, row_cols, sizeof cols);
    cols[6].title = on_cpu ? "sgemm" : "GEMM";
    bench_report rep;
    bench_report_init(&rep, "attention", o.json);
    if ((st = bench_gemm_rate(be, gemm_n, o.repeat, &sgemm)) != RV_OK) {
        rc = cli_fail(st, CMD);
        goto end;
    }
    char mask_text[96];
    if (o.window > 0)
        snprintf(mask_text, sizeof mask_text, "span window %g s%s, %g tokens/s", o.window,
                 o.causal ? " causal" : "", o.rate);
    else if (o.block > 0)
        snprintf(mask_text, sizeof mask_text, "span blocks of %g s%s, %g tokens/s", o.block,
                 o.causal ? " causal" : "", o.rate);
    else
        snprintf(mask_text, sizeof mask_text, "%s", o.causal ? "causal" : "no mask");
    bench_note(&rep, "ringvit bench attention: backend %s%s%s, %d threads, heads %d, dim %d, "
                  "%s, %s%s%s %d^3", be->name, on_cpu ? " kernels " : "",
                  on_cpu ? kernels : "", be->threads, o.heads, o.dim, mask_text,
                  on_cpu ? rv_gemm_library() : "cuBLAS bf16 GEMM", on_cpu ? " sgemm isa " : "",
                  on_cpu ? rv_gemm_isa() : "", gemm_n);
    bench_note(&rep, "%s", "");
    bench_table(&rep, "rows", cols, NCOLS);
    for (int s = 0; s < o.nseq; s++) {
        if ((st = run_seq(be, &o, o.seqs[s], sgemm, rows, &nrows)) != RV_OK) {
            rc = cli_fail(st, CMD);
            goto end;
        }
    }
    /* The sgemm rate moves with clock and load: measure it again after the
     * attention runs and compare against the faster of the two (the stricter ratio). */
    double sgemm2 = 0;
    if ((st = bench_gemm_rate(be, gemm_n, o.repeat, &sgemm2)) != RV_OK) {
        rc = cli_fail(st, CMD);
        goto end;
    }
    sgemm = sgemm2 > sgemm ? sgemm2 : sgemm;
    bench_set(&rep, "backend", json_string(be->name));
    bench_set(&rep, "gemm", json_string(rv_gemm_library()));
    bench_set(&rep, "gemm_isa", json_string(rv_gemm_isa()));
    bench_set(&rep, "cpu_kernels", json_string(kernels));
    bench_set(&rep, "precision", json_string(bf16 ? "bf16" : "f32"));
    bench_set(&rep, "threads", json_integer(be->threads));
    bench_set(&rep, "heads", json_integer(o.heads));
    bench_set(&rep, "dim", json_integer(o.dim));
    bench_set(&rep, "causal", json_boolean(o.causal));
    bench_set(&rep, "mask", json_string(o.window > 0  ? "window"
                                           : o.block > 0 ? "block"
                                           : o.causal    ? "causal"
                                                         : "none"));
    if (span_on(&o)) {
        bench_set(&rep, o.window > 0 ? "window_s" : "block_s",
                     json_real(o.window > 0 ? o.window : o.block));
        bench_set(&rep, "rate", json_real(o.rate));
    }
    bench_set(&rep, "sgemm_gflops", json_real(sgemm)); /* the GEMM reference */
    bench_set(&rep, "gemm_gflops", json_real(sgemm));
    bench_set(&rep, "gemm_n", json_integer(gemm_n));
    bench_set(&rep, "tolerance", json_real(tol));
    for (int r = 0; r < nrows; r++) {
        bench_row *w = &rows[r];
        w->sgemm = sgemm;
        if (!isnan(w->err) && !(w->err <= tol))
            ok = 0;
        bench_add_row(&rep, (const bench_val[NCOLS]){
                               {.i = w->seq}, {.s = w->pass}, {.f = w->pairs},
                               {.f = w->pairs / ((double)w->seq * w->seq)}, {.f = w->ms},
                               {.f = w->gflops}, {.f = w->sgemm}, {.f = w->gflops / w->sgemm},
                               {.f = w->extra_mb}, {.f = w->err}});
    }
    rc = bench_finish(&rep, ok, "sampled rows differ from the double reference");
end:
    bench_report_free(&rep);
    rv_backend_free(&be);
    return rc;
}

const bench_cmd bench_attention = {
    .name = "attention",
    .help = help_text,
    .main = bench_main,
};
