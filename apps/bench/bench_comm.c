/* bench_comm.c: `ringvit bench comm`, the communicator timed nccl-tests style: a
 * ring shift (every rank sends to rank + 1 and receives from rank - 1, what ring
 * attention does with its KV blocks) and an f32 allreduce (sum), one row per size
 * with time, algbw, busbw and the number of wrong elements, then an OK/FAILED
 * footer. A single-thread memcpy of the ring's 64 MiB row (or of its largest one)
 * is timed in the same run, so the local backend's ring shift is read as a
 * fraction of what one memcpy moves (target: at least half).
 *
 * --backend local runs the ranks as threads (--ranks N); --backend mpi runs under
 * `mpiexec -n N ringvit bench comm --backend mpi` and rank 0 prints. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps.h"
#include "bench_common.h"
#include "cli.h"
#include "rv_comm.h"

#define CMD "bench comm"
#define MAX_ROWS 64
#define MEMCPY_REF_BYTES ((size_t)64 << 20)

static const char help_text[] =
    "usage: ringvit bench comm [--backend local|mpi] [--ranks N] [--min-size S]\n"
    "                          [--max-size S] [--iters N] [--timeout SEC] [--json]\n"
    "\n"
    "Times the communicator, nccl-tests style: a ring shift (each rank sends to\n"
    "rank+1) and an f32 allreduce, sizes doubling from --min-size to --max-size, one\n"
    "row each (size, time, algbw, busbw, #wrong), then OK or FAILED; the footer\n"
    "gives the ring shift of 64 MiB (or the largest size) as a fraction of a\n"
    "single-thread memcpy timed in the same run.\n"
    "\n"
    "  --backend B     local (ranks are threads; default) or mpi (run the command\n"
    "                  under mpiexec -n N)\n"
    "  --ranks N       local ranks (default 2)\n"
    "  --min-size S    smallest message in bytes, K/M/G suffixes (default 4K)\n"
    "  --max-size S    largest message (default 256M)\n"
    "  --iters N       timed iterations per row (default: from 200 down to 5 as\n"
    "                  sizes grow)\n"
    "  --timeout SEC   deadline of every blocking call (default RINGVIT_COMM_TIMEOUT\n"
    "                  or 120)\n"
    "  --json          one JSON object on stdout instead of the table\n"
    "\n"
    "Exit status: 0 OK, 1 FAILED (wrong elements) or a runtime failure, 2 usage.\n"
    "\n"
    "examples:\n"
    "  ringvit bench comm --backend local --ranks 4\n"
    "  mpiexec -n 2 ringvit bench comm --backend mpi --max-size 64M\n"
    "\n"
    "More: docs/benchmarks.md (columns, the current numbers)\n";

typedef struct bench_opts {
    int mpi, ranks, ranks_set, iters, json;
    size_t min_size, max_size;
    double timeout;
} bench_opts;

typedef struct bench_row {
    const char *op; /* "shift" or "allreduce" */
    size_t bytes;
    double time_s;  /* per call, slowest rank */
    double algbw, busbw; /* GB/s */
    double wrong;   /* elements, all ranks */
} bench_row;

/* What rank 0 measured, for printing once the ranks are done. */
typedef struct bench_result {
    const bench_opts *o;
    int size;
    size_t memcpy_bytes;
    double memcpy_gbps;
    bench_row rows[MAX_ROWS];
    int nrows;
} bench_result;

/* ---- command line ---------------------------------------------------------------- */

/* --min-size / --max-size: "4096", "4K", "64M", "1G" (binary multiples; an
 * optional "B"/"iB" after) into the size_t at dst. */
static int take_size(const char *cmd, const char *flag, const char *text, void *dst)
{
    char *end = NULL;
    unsigned long long v = strtoull(text, &end, 10);
    size_t mult = 1, *out = dst;
    if (end == text || text[0] == '-')
        goto bad;
    switch (*end) {
    case 'k': case 'K': mult = (size_t)1 << 10, end++; break;
    case 'm': case 'M': mult = (size_t)1 << 20, end++; break;
    case 'g': case 'G': mult = (size_t)1 << 30, end++; break;
    }
    if (mult > 1 && *end == 'i')
        end++;
    if (*end == 'B')
        end++;
    if (*end || v > ((unsigned long long)4 << 30) / mult)
        goto bad;
    *out = (size_t)v * mult;
    if (*out >= 4 && *out <= (size_t)4 << 30)
        return 0;
bad:
    return cli_usage_error(cmd, "%s wants a size from 4 to 4G bytes (e.g. 4096, 64K, 256M), "
                              "got '%s'", flag, text);
}

/* --backend local|mpi into the int at dst (1: mpi). */
static int take_backend(const char *cmd, const char *flag, const char *v, void *dst)
{
    if (strcmp(v, "local") != 0 && strcmp(v, "mpi") != 0)
        return cli_usage_error(cmd, "%s wants local or mpi, got '%s'", flag, v);
    *(int *)dst = strcmp(v, "mpi") == 0;
    return 0;
}

static int parse_args(int argc, char **argv, bench_opts *o)
{
    *o = (bench_opts){.ranks = 2, .min_size = 4 << 10, .max_size = (size_t)256 << 20};
    const cli_flag flags[] = {
        {.name = "--backend", .kind = RV_CLI_CUSTOM, .dst = &o->mpi, .take = take_backend},
        {.name = "--ranks", .kind = RV_CLI_INT, .dst = &o->ranks, .lo = 1, .hi = 1024,
         .seen = &o->ranks_set},
        {.name = "--min-size", .kind = RV_CLI_CUSTOM, .dst = &o->min_size, .take = take_size},
        {.name = "--max-size", .kind = RV_CLI_CUSTOM, .dst = &o->max_size, .take = take_size},
        {.name = "--iters", .kind = RV_CLI_INT, .dst = &o->iters, .lo = 1, .hi = 100000},
        {.name = "--timeout", .kind = RV_CLI_DOUBLE, .dst = &o->timeout, .lo = 1e-3, .hi = 1e6},
        {.name = "--json", .kind = RV_CLI_SWITCH, .dst = &o->json},
    };
    int rc = cli_flags_parse(CMD, argc, argv, flags, RV_CLI_NFLAGS(flags), NULL);
    if (rc)
        return rc;
    if (o->min_size > o->max_size)
        return cli_usage_error(CMD, "--min-size %zu is larger than --max-size %zu",
                                  o->min_size, o->max_size);
    if (o->mpi && o->ranks_set)
        return cli_usage_error(CMD, "--ranks is for --backend local; under MPI, "
                                  "mpiexec -n N sets the ranks");
    return 0;
}

/* ---- measurement ------------------------------------------------------------------ */

static int iters_for(const bench_opts *o, size_t bytes)
{
    if (o->iters)
        return o->iters;
    size_t n = ((size_t)1 << 30) / bytes;
    return n < 5 ? 5 : n > 200 ? 200 : (int)n;
}

/* The f32 words rank r sends in the ring shift. */
static uint32_t shift_word(int r, size_t i)
{
    return (uint32_t)(i * 2654435761u) ^ (uint32_t)(r + 1) * 0x9E3779B9u;
}

/* Fastest of five single-thread memcpys of `bytes` (after one that faults the
 * pages in), GB/s. */
static rv_status memcpy_rate(size_t bytes, double *gbps)
{
    char *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b) {
        free(a), free(b);
        return rv_fail(RV_ERR_NOMEM, "memcpy reference of %zu bytes: out of memory", bytes);
    }
    memset(a, 1, bytes);
    double best = 1e30;
    for (int k = 0; k < 6; k++) {
        double t0 = rv_clock_s();
        memcpy(b, a, bytes);
        double dt = rv_clock_s() - t0;
        if (k > 0 && dt < best)
            best = dt;
        a[k] = b[bytes - 1 - k]; /* keep the copies observable */
    }
    free(a), free(b);
    *gbps = (double)bytes / best * 1e-9;
    return RV_OK;
}

/* One row: warm-up, timed iterations, check. Returns the row on rank 0. */
static rv_status run_row(rv_comm *c, const bench_opts *o, int allreduce, size_t bytes,
                         bench_row *row)
{
    const int n = c->size, r = c->rank, iters = iters_for(o, bytes);
    const size_t count = bytes / 4;
    uint32_t *send = malloc(count * 4), *recv = malloc(count * 4);
    double *times = malloc(sizeof(double) * (size_t)n), mine = 0, wrong = 0, wrong_all = 0;
    rv_status st = RV_OK;
    if (!send || !recv || !times) {
        st = rv_fail(RV_ERR_NOMEM, "rank %d: %zu-byte buffers: out of memory", r, bytes);
        goto end;
    }
    for (size_t i = 0; i < count; i++) {
        if (allreduce)
            ((float *)send)[i] = (float)(i % 13 + (size_t)r);
        else
            send[i] = shift_word(r, i);
    }
    memset(recv, 0, count * 4);
    for (int k = -2; k < iters && st == RV_OK; k++) {
        if (k == 0) { /* the timed part starts together */
            if ((st = rv_comm_barrier(c)) != RV_OK)
                break;
            mine = rv_clock_s();
        }
        st = allreduce ? rv_comm_allreduce(c, send, recv, count, RV_COMM_F32)
                       : rv_comm_sendrecv(c, send, count * 4, (r + 1) % n, recv, count * 4,
                                          (r - 1 + n) % n, 0);
    }
    if (st != RV_OK)
        goto end;
    mine = (rv_clock_s() - mine) / iters;
    if (allreduce) {
        const double base = (double)n * (n - 1) / 2;
        for (size_t i = 0; i < count; i++)
            wrong += ((float *)recv)[i] != (float)(n * (double)(i % 13) + base);
    } else {
        for (size_t i = 0; i < count; i++)
            wrong += recv[i] != shift_word((r - 1 + n) % n, i);
    }
    if ((st = rv_comm_allgather(c, &mine, times, sizeof mine)) != RV_OK ||
        (st = rv_comm_allreduce(c, &wrong, &wrong_all, 1, RV_COMM_F64)) != RV_OK)
        goto end;
    double slowest = 0;
    for (int q = 0; q < n; q++)
        slowest = times[q] > slowest ? times[q] : slowest;
    double algbw = (double)bytes / slowest * 1e-9;
    *row = (bench_row){.op = allreduce ? "allreduce" : "shift", .bytes = bytes,
                       .time_s = slowest, .algbw = algbw,
                       .busbw = allreduce ? algbw * 2.0 * (n - 1) / n : algbw,
                       .wrong = wrong_all};
end:
    free(send), free(recv), free(times);
    return st;
}

/* The body of every rank; rank 0 keeps the results. */
static rv_status bench_rank(rv_comm *c, void *arg)
{
    bench_result *res = arg;
    const bench_opts *o = res->o;
    bench_row rows[MAX_ROWS];
    int nrows = 0;
    rv_status st = RV_OK;
    if (o->timeout > 0 && (st = rv_comm_set_timeout(c, o->timeout)) != RV_OK)
        return st;
    /* The memcpy reference: rank 0 alone, the others wait in the barrier. */
    size_t ref = o->max_size < MEMCPY_REF_BYTES ? o->max_size : MEMCPY_REF_BYTES;
    ref = ref / 4 * 4;
    double gbps = 0;
    if (c->rank == 0)
        st = memcpy_rate(ref, &gbps);
    rv_status bst = rv_comm_barrier(c);
    if (st != RV_OK || (st = bst) != RV_OK)
        return st;
    for (int allreduce = 0; allreduce < 2; allreduce++)
        for (size_t b = o->min_size; b <= o->max_size && nrows < MAX_ROWS; b *= 2) {
            size_t bytes = b / 4 * 4;
            if ((st = run_row(c, o, allreduce, bytes, &rows[nrows])) != RV_OK)
                return st;
            nrows++;
            if (b > o->max_size / 2)
                break; /* b * 2 would pass max_size (or overflow) */
        }
    if (c->rank == 0) {
        res->size = c->size;
        res->memcpy_bytes = ref;
        res->memcpy_gbps = gbps;
        memcpy(res->rows, rows, sizeof rows[0] * (size_t)nrows);
        res->nrows = nrows;
    }
    return RV_OK;
}

/* ---- output ----------------------------------------------------------------------- */

/* The ring-shift row of the memcpy reference size, or NULL. */
static const bench_row *shift_ref(const bench_result *res)
{
    for (int i = 0; i < res->nrows; i++)
        if (strcmp(res->rows[i].op, "shift") == 0 && res->rows[i].bytes == res->memcpy_bytes)
            return &res->rows[i];
    return NULL;
}

static const bench_col row_cols[] = {
    {"op", "%-9s", "op", RV_BENCH_TEXT},
    {"size(B)", "%12lld", "size", RV_BENCH_INT},
    {"count", "%11lld", "count", RV_BENCH_INT},
    {"time(us)", "%11.1f", "time_us", RV_BENCH_REAL},
    {"algbw(GB/s)", "%11.2f", "algbw_gbps", RV_BENCH_REAL},
    {"busbw(GB/s)", "%11.2f", "busbw_gbps", RV_BENCH_REAL},
    {"#wrong", "%7lld", "wrong", RV_BENCH_INT},
};

static int print_result(const bench_result *res, const char *backend)
{
    const bench_opts *o = res->o;
    const bench_row *sr = shift_ref(res);
    int ok = 1;
    for (int i = 0; i < res->nrows; i++)
        ok &= res->rows[i].wrong == 0;
    bench_report rep;
    bench_report_init(&rep, "comm", o->json);
    bench_set(&rep, "backend", json_string(backend));
    bench_set(&rep, "ranks", json_integer(res->size));
    bench_set(&rep, "memcpy_bytes", json_integer((json_int_t)res->memcpy_bytes));
    bench_set(&rep, "memcpy_gbps", json_real(res->memcpy_gbps));
    bench_note(&rep, "ringvit bench comm: backend %s, %d ranks, f32 elements", backend,
                  res->size);
    bench_note(&rep, "memcpy, 1 thread, %zu bytes: %.2f GB/s", res->memcpy_bytes,
                  res->memcpy_gbps);
    bench_note(&rep, "%s", "");
    bench_table(&rep, "rows", row_cols, (int)(sizeof row_cols / sizeof row_cols[0]));
    for (int i = 0; i < res->nrows; i++) {
        const bench_row *w = &res->rows[i];
        bench_add_row(&rep, (const bench_val[]){
                               {.s = w->op}, {.i = (long long)w->bytes},
                               {.i = (long long)(w->bytes / 4)}, {.f = w->time_s * 1e6},
                               {.f = w->algbw}, {.f = w->busbw}, {.i = (long long)w->wrong}});
    }
    bench_set(&rep, "shift_vs_memcpy",
                 sr ? json_real(sr->algbw / res->memcpy_gbps) : json_null());
    if (sr) /* the target is the local backend's: one memcpy per message */
        bench_note(&rep, "ring shift of %zu bytes: %.2f GB/s = %.2f x memcpy%s", sr->bytes,
                      sr->algbw, sr->algbw / res->memcpy_gbps,
                      strcmp(backend, "local") == 0 ? " (target >= 0.50)" : "");
    return bench_finish(&rep, ok, "wrong elements");
}

static int bench_main(int argc, char **argv)
{
    bench_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc;
    bench_result res = {.o = &o};
    if (!o.mpi) {
        rv_status st = rv_local_run(o.ranks, bench_rank, &res);
        return st != RV_OK ? cli_fail(st, CMD) : print_result(&res, "local");
    }
    rv_comm *c = NULL;
    rv_status st = rv_comm_mpi_world(&c);
    if (st != RV_OK)
        return cli_fail(st, CMD);
    st = bench_rank(c, &res);
    if (st != RV_OK) {
        /* This rank cannot go on, and the others would wait for it: end the job. */
        rc = cli_fail(st, CMD);
        rv_comm_abort(c, rc);
        rv_comm_free(&c);
        return rc;
    }
    rc = c->rank == 0 ? print_result(&res, "mpi") : RV_EXIT_OK;
    rv_comm_free(&c);
    if ((st = rv_comm_mpi_finalize()) != RV_OK && rc == RV_EXIT_OK)
        rc = cli_fail(st, CMD);
    return rc;
}

const bench_cmd bench_comm = {
    .name = "comm",
    .help = help_text,
    .main = bench_main,
};
