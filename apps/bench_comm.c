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
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps.h"
#include "cli.h"
#include "rv_comm.h"

#define CMD "bench comm"
#define MAX_ROWS 64
#define MEMCPY_REF_BYTES ((size_t)64 << 20)

static const char help_text[] =
    "usage: ringvit bench comm [--backend local|mpi] [--ranks N] [--min-size S]\n"
    "                          [--max-size S] [--iters N] [--timeout SEC] [--json]\n"
    "\n"
    "Times the communicator: a ring shift (each rank sends to rank+1) and an f32\n"
    "allreduce (sum), sizes doubling from --min-size to --max-size, one row each,\n"
    "then OK or FAILED. A single-thread memcpy of 64 MiB (or of the largest size)\n"
    "is timed in the same run; the footer gives the ring shift of that size as a\n"
    "fraction of it (target for the local backend: at least 0.50).\n"
    "\n"
    "  --backend B     local (ranks are threads; default) or mpi (run the command\n"
    "                  under mpiexec -n N; rank 0 prints)\n"
    "  --ranks N       local ranks (default 2)\n"
    "  --min-size S    smallest message in bytes, K/M/G suffixes (default 4K)\n"
    "  --max-size S    largest message (default 256M)\n"
    "  --iters N       timed iterations per row (default: from 200 down to 5 as\n"
    "                  sizes grow); two untimed ones come first\n"
    "  --timeout SEC   deadline of every blocking call (default RINGVIT_COMM_TIMEOUT\n"
    "                  or 120)\n"
    "  --json          one JSON object on stdout instead of the table\n"
    "\n"
    "Columns: size in bytes, f32 elements, time per call (us, slowest rank),\n"
    "algbw = size / time, busbw (ring shift: algbw; allreduce: algbw * 2(n-1)/n),\n"
    "#wrong = elements that differ from the expected result, over all ranks.\n"
    "\n"
    "examples:\n"
    "  ringvit bench comm --backend local --ranks 4\n"
    "  mpiexec -n 2 ringvit bench comm --backend mpi --max-size 64M\n";

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

/* "4096", "4K", "64M", "1G" (binary multiples; an optional "B"/"iB" after). */
static int parse_size(const char *flag, const char *text, size_t *out)
{
    char *end = NULL;
    unsigned long long v = strtoull(text, &end, 10);
    size_t mult = 1;
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
    return rv_cli_usage_error(CMD, "%s wants a size from 4 to 4G bytes (e.g. 4096, 64K, 256M), "
                              "got '%s'", flag, text);
}

static int parse_args(int argc, char **argv, bench_opts *o)
{
    *o = (bench_opts){.ranks = 2, .min_size = 4 << 10, .max_size = (size_t)256 << 20};
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (rv_cli_flag_is(a, "--backend")) {
            if (!(v = rv_cli_flag_value(CMD, argc, argv, &i)))
                return RV_EXIT_USAGE;
            if (strcmp(v, "local") == 0)
                o->mpi = 0;
            else if (strcmp(v, "mpi") == 0)
                o->mpi = 1;
            else
                return rv_cli_usage_error(CMD, "--backend wants local or mpi, got '%s'", v);
        } else if (rv_cli_flag_is(a, "--ranks")) {
            rc = rv_cli_take_int(CMD, argc, argv, &i, 1, 1024, &o->ranks);
            o->ranks_set = 1;
        } else if (rv_cli_flag_is(a, "--min-size") || rv_cli_flag_is(a, "--max-size")) {
            int is_min = rv_cli_flag_is(a, "--min-size");
            if (!(v = rv_cli_flag_value(CMD, argc, argv, &i)))
                return RV_EXIT_USAGE;
            rc = parse_size(is_min ? "--min-size" : "--max-size", v,
                            is_min ? &o->min_size : &o->max_size);
        } else if (rv_cli_flag_is(a, "--iters")) {
            rc = rv_cli_take_int(CMD, argc, argv, &i, 1, 100000, &o->iters);
        } else if (rv_cli_flag_is(a, "--timeout")) {
            rc = rv_cli_take_double(CMD, argc, argv, &i, 1e-3, 1e6, &o->timeout);
        } else if (strcmp(a, "--json") == 0) {
            o->json = 1;
        } else {
            return rv_cli_unknown_arg(CMD, a);
        }
        if (rc)
            return rc;
    }
    if (o->min_size > o->max_size)
        return rv_cli_usage_error(CMD, "--min-size %zu is larger than --max-size %zu",
                                  o->min_size, o->max_size);
    if (o->mpi && o->ranks_set)
        return rv_cli_usage_error(CMD, "--ranks is for --backend local; under MPI, "
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
        double t0 = rv_comm_now();
        memcpy(b, a, bytes);
        double dt = rv_comm_now() - t0;
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
            mine = rv_comm_now();
        }
        st = allreduce ? rv_comm_allreduce(c, send, recv, count, RV_COMM_F32)
                       : rv_comm_sendrecv(c, send, count * 4, (r + 1) % n, recv, count * 4,
                                          (r - 1 + n) % n, 0);
    }
    if (st != RV_OK)
        goto end;
    mine = (rv_comm_now() - mine) / iters;
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
    *row = (bench_row){allreduce ? "allreduce" : "shift", bytes, slowest, algbw,
                       allreduce ? algbw * 2.0 * (n - 1) / n : algbw, wrong_all};
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

static int print_result(const bench_result *res, const char *backend)
{
    const bench_opts *o = res->o;
    const bench_row *sr = shift_ref(res);
    int ok = 1;
    for (int i = 0; i < res->nrows; i++)
        ok &= res->rows[i].wrong == 0;
    if (o->json) {
        json_t *root = json_object(), *arr = json_array();
        json_object_set_new(root, "bench", json_string("comm"));
        json_object_set_new(root, "backend", json_string(backend));
        json_object_set_new(root, "ranks", json_integer(res->size));
        json_object_set_new(root, "memcpy_bytes", json_integer((json_int_t)res->memcpy_bytes));
        json_object_set_new(root, "memcpy_gbps", json_real(res->memcpy_gbps));
        for (int i = 0; i < res->nrows; i++) {
            const bench_row *w = &res->rows[i];
            json_t *row = json_object();
            json_object_set_new(row, "op", json_string(w->op));
            json_object_set_new(row, "size", json_integer((json_int_t)w->bytes));
            json_object_set_new(row, "count", json_integer((json_int_t)(w->bytes / 4)));
            json_object_set_new(row, "time_us", json_real(w->time_s * 1e6));
            json_object_set_new(row, "algbw_gbps", json_real(w->algbw));
            json_object_set_new(row, "busbw_gbps", json_real(w->busbw));
            json_object_set_new(row, "wrong", json_integer((json_int_t)w->wrong));
            json_array_append_new(arr, row);
        }
        json_object_set_new(root, "rows", arr);
        json_object_set_new(root, "shift_vs_memcpy",
                            sr ? json_real(sr->algbw / res->memcpy_gbps) : json_null());
        json_object_set_new(root, "ok", json_boolean(ok));
        int rc = rv_cli_json_print(root);
        json_decref(root);
        return rc != RV_EXIT_OK ? rc : ok ? RV_EXIT_OK : RV_EXIT_FAIL;
    }
    printf("# ringvit bench comm: backend %s, %d ranks, f32 elements\n", backend, res->size);
    printf("# memcpy, 1 thread, %zu bytes: %.2f GB/s\n#\n", res->memcpy_bytes, res->memcpy_gbps);
    printf("# %-9s %12s %11s %11s %11s %11s %7s\n", "op", "size(B)", "count", "time(us)",
           "algbw(GB/s)", "busbw(GB/s)", "#wrong");
    for (int i = 0; i < res->nrows; i++) {
        const bench_row *w = &res->rows[i];
        printf("  %-9s %12zu %11zu %11.1f %11.2f %11.2f %7.0f\n", w->op, w->bytes, w->bytes / 4,
               w->time_s * 1e6, w->algbw, w->busbw, w->wrong);
    }
    if (sr) /* the target is the local backend's: one memcpy per message */
        printf("# ring shift of %zu bytes: %.2f GB/s = %.2f x memcpy%s\n", sr->bytes, sr->algbw,
               sr->algbw / res->memcpy_gbps,
               strcmp(backend, "local") == 0 ? " (target >= 0.50)" : "");
    printf("# %s\n", ok ? "OK" : "FAILED: wrong elements");
    return ok ? RV_EXIT_OK : RV_EXIT_FAIL;
}

int rv_bench_comm(int argc, char **argv)
{
    if (argc >= 2 && rv_cli_is_help(argv[1])) {
        fputs(help_text, stdout);
        return RV_EXIT_OK;
    }
    bench_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc;
    bench_result res = {.o = &o};
    if (!o.mpi) {
        rv_status st = rv_local_run(o.ranks, bench_rank, &res);
        return st != RV_OK ? rv_cli_fail(st, CMD) : print_result(&res, "local");
    }
    rv_comm *c = NULL;
    rv_status st = rv_comm_mpi_world(&c);
    if (st != RV_OK)
        return rv_cli_fail(st, CMD);
    st = bench_rank(c, &res);
    if (st != RV_OK) {
        /* This rank cannot go on, and the others would wait for it: end the job. */
        rc = rv_cli_fail(st, CMD);
        rv_comm_abort(c, rc);
        rv_comm_free(&c);
        return rc;
    }
    rc = c->rank == 0 ? print_result(&res, "mpi") : RV_EXIT_OK;
    rv_comm_free(&c);
    if ((st = rv_comm_mpi_finalize()) != RV_OK && rc == RV_EXIT_OK)
        rc = rv_cli_fail(st, CMD);
    return rc;
}
