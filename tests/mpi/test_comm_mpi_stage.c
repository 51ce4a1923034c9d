/* test_comm_mpi_stage.c: the "mpi" communicator staged for device memory
 * (rv_comm_mpi_stage_device) under `mpiexec -n N --oversubscribe` (N >= 2), on
 * the CPU: "device" buffers are host memory that the copy function alone may
 * translate (every byte XOR 0x5A between a device buffer and a host one), so a
 * payload reaches its peer intact only when it went through the staging copies
 * and a buffer MPI read or wrote directly would show as wrong bytes.
 * Checks, with messages below, at and above RINGVIT_COMM_MPI_CHUNK (4096 here):
 * point-to-point ring shifts (isend/irecv and sendrecv), several messages in
 * flight at once, a short message into a larger receive (the rest untouched),
 * host buffers on the staged communicator, allreduce (f32, f64, in place and
 * not), allgather, alltoall, a split (staged too), a send freed while in
 * flight and a receive freed unmatched; and the number of copy calls of each.
 * A plain MPI program (no Criterion): exit 0 when every rank passed; a failing
 * rank prints its message and ends the job through rv_comm_abort. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rv_comm.h"

#define CHUNK 4096
#define KEY 0x5A

/* ---- the fake device: registered ranges, translated by the copy function -------- */

#define MAX_DEV 1024
static struct {
    unsigned char *p;
    size_t n;
} dev[MAX_DEV];
static long copies; /* calls of dev_copy */

static int is_dev(const void *p)
{
    for (int i = 0; i < MAX_DEV; i++)
        if (dev[i].p && (const unsigned char *)p >= dev[i].p &&
            (const unsigned char *)p < dev[i].p + (dev[i].n ? dev[i].n : 1))
            return 1;
    return 0;
}

static void *dev_alloc(size_t n)
{
    for (int i = 0; i < MAX_DEV; i++)
        if (!dev[i].p) {
            dev[i].p = malloc(n ? n : 1);
            dev[i].n = n;
            return dev[i].p;
        }
    return NULL;
}

static void dev_free(void *p)
{
    for (int i = 0; p && i < MAX_DEV; i++)
        if (dev[i].p == p) {
            free(p);
            dev[i].p = NULL;
            return;
        }
}

/* The copy function: bytes change form between "device" and host. */
static int dev_copy(void *dst, const void *src, size_t bytes)
{
    copies++;
    unsigned char *d = dst;
    const unsigned char *s = src;
    if (is_dev(dst) == is_dev(src)) {
        memmove(d, s, bytes);
        return 0;
    }
    for (size_t i = 0; i < bytes; i++)
        d[i] = s[i] ^ KEY;
    return 0;
}

/* Host values <-> device buffer (through dev_copy, not counted). */
static void to_dev(void *d, const void *h, size_t n)
{
    dev_copy(d, h, n);
    copies--;
}

static void from_dev(void *h, const void *d, size_t n)
{
    dev_copy(h, d, n);
    copies--;
}

/* ---- checks ------------------------------------------------------------------------ */

static rv_comm *world;

#define FAIL(...)                                                                    \
    do {                                                                             \
        fprintf(stderr, "test_comm_mpi_stage: rank %d: FAILED line %d: ", world->rank, \
                __LINE__);                                                           \
        fprintf(stderr, __VA_ARGS__);                                                \
        fprintf(stderr, "\n");                                                       \
        fflush(stderr);                                                              \
        rv_comm_abort(world, 1);                                                     \
        exit(1);                                                                     \
    } while (0)

#define OK(call)                                                                     \
    do {                                                                             \
        rv_status st_ = (call);                                                      \
        if (st_ != RV_OK)                                                            \
            FAIL("%s: %s", #call, rv_last_error());                                  \
    } while (0)

static unsigned char pat(int from, int to, size_t i, size_t n)
{
    return (unsigned char)(from * 31 + to * 17 + i * 7 + n * 3 + 1);
}

static void fill(unsigned char *h, int from, int to, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h[i] = pat(from, to, i, n);
}

static void expect(const unsigned char *h, int from, int to, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (h[i] != pat(from, to, i, n))
            FAIL("%s: %zu bytes from rank %d: byte %zu is %u, want %u", what, n, from, i, h[i],
                 pat(from, to, i, n));
}

static void expect_copies(long before, long want, const char *what)
{
    if (copies - before != want)
        FAIL("%s: %ld copy calls, want %ld", what, copies - before, want);
}

static const size_t sizes[] = {0, 1, 7, 1000, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5,
                               65536};
#define NSIZES (sizeof sizes / sizeof sizes[0])

/* Ring shift, device to device, with isend/irecv (and sendrecv when sr). */
static void ring(rv_comm *c, int sr)
{
    const int n = c->size, r = c->rank, to = (r + 1) % n, from = (r - 1 + n) % n;
    for (size_t k = 0; k < NSIZES; k++) {
        const size_t b = sizes[k];
        unsigned char *h = malloc(b + 1), *s = dev_alloc(b), *d = dev_alloc(b);
        fill(h, r, to, b);
        to_dev(s, h, b);
        memset(d, 0, b);
        long c0 = copies;
        if (sr) {
            OK(rv_comm_sendrecv(c, s, b, to, d, b, from, 3));
        } else {
            rv_comm_request *q[2];
            OK(rv_comm_irecv(c, d, b, from, 3, &q[0]));
            OK(rv_comm_isend(c, s, b, to, 3, &q[1]));
            OK(rv_comm_waitall(q, 2));
        }
        expect_copies(c0, b ? 2 : 0, sr ? "sendrecv" : "ring");
        from_dev(h, d, b);
        expect(h, from, r, b, sr ? "sendrecv" : "ring");
        free(h), dev_free(s), dev_free(d);
    }
}

/* Every size in flight at once to and from every peer, one tag per size. */
static void many(rv_comm *c)
{
    const int n = c->size, r = c->rank;
    rv_comm_request **q = calloc(2 * NSIZES * (size_t)n, sizeof *q);
    unsigned char **s = calloc(NSIZES * (size_t)n, sizeof *s), **d = calloc(NSIZES * (size_t)n, sizeof *d);
    int nq = 0;
    long c0 = copies, want = 0;
    for (int p = 0; p < n; p++) {
        if (p == r)
            continue;
        for (size_t k = 0; k < NSIZES; k++) {
            const size_t b = sizes[k], i = (size_t)p * NSIZES + k;
            unsigned char *h = malloc(b + 1);
            s[i] = dev_alloc(b), d[i] = dev_alloc(b);
            fill(h, r, p, b);
            to_dev(s[i], h, b);
            free(h);
            OK(rv_comm_irecv(c, d[i], b, p, 10 + (int)k, &q[nq++]));
            OK(rv_comm_isend(c, s[i], b, p, 10 + (int)k, &q[nq++]));
            want += b ? 2 : 0;
        }
    }
    OK(rv_comm_waitall(q, nq));
    expect_copies(c0, want, "many in flight");
    for (int p = 0; p < n; p++) {
        if (p == r)
            continue;
        for (size_t k = 0; k < NSIZES; k++) {
            const size_t b = sizes[k], i = (size_t)p * NSIZES + k;
            unsigned char *h = malloc(b + 1);
            from_dev(h, d[i], b);
            expect(h, p, r, b, "many in flight");
            free(h), dev_free(s[i]), dev_free(d[i]);
        }
    }
    free(q), free(s), free(d);
}

/* A 60-byte message into a 100-byte device receive: bytes 60.. stay as they were. */
static void short_message(rv_comm *c)
{
    const int n = c->size, r = c->rank, to = (r + 1) % n, from = (r - 1 + n) % n;
    unsigned char h[100], *s = dev_alloc(60), *d = dev_alloc(100);
    fill(h, r, to, 60);
    to_dev(s, h, 60);
    memset(h, 0xEE, sizeof h);
    to_dev(d, h, 100);
    rv_comm_request *q[2];
    OK(rv_comm_irecv(c, d, 100, from, 4, &q[0]));
    OK(rv_comm_isend(c, s, 60, to, 4, &q[1]));
    OK(rv_comm_waitall(q, 2));
    from_dev(h, d, 100);
    expect(h, from, r, 60, "short message");
    for (int i = 60; i < 100; i++)
        if (h[i] != 0xEE)
            FAIL("short message: byte %d beyond the message was overwritten (%u)", i, h[i]);
    dev_free(s), dev_free(d);
}

/* Host buffers on the staged communicator: still right (the copies are plain). */
static void host_buffers(rv_comm *c)
{
    const int n = c->size, r = c->rank, to = (r + 1) % n, from = (r - 1 + n) % n;
    const size_t b = 3 * CHUNK + 5;
    unsigned char *s = malloc(b), *d = malloc(b);
    fill(s, r, to, b);
    long c0 = copies;
    OK(rv_comm_sendrecv(c, s, b, to, d, b, from, 5));
    expect_copies(c0, 2, "host buffers");
    expect(d, from, r, b, "host buffers");
    free(s), free(d);
}

static void allreduce(rv_comm *c, rv_comm_dtype dt, size_t count, int in_place)
{
    const int n = c->size, r = c->rank;
    const size_t es = rv_comm_dtype_size(dt), b = count * es;
    void *h = malloc(b + 8), *s = dev_alloc(b), *d = in_place ? s : dev_alloc(b);
    for (size_t i = 0; i < count; i++) {
        double v = r + 0.5 * (double)(i % 1000);
        if (dt == RV_COMM_F32)
            ((float *)h)[i] = (float)v;
        else
            ((double *)h)[i] = v;
    }
    to_dev(s, h, b);
    long c0 = copies;
    OK(rv_comm_allreduce(c, s, d, count, dt));
    expect_copies(c0, b ? 2 : 0, "allreduce");
    from_dev(h, d, b);
    for (size_t i = 0; i < count; i++) {
        double want = n * (n - 1) / 2.0 + n * 0.5 * (double)(i % 1000);
        double got = dt == RV_COMM_F32 ? ((float *)h)[i] : ((double *)h)[i];
        if (got != want)
            FAIL("allreduce %s of %zu%s: element %zu is %g, want %g", rv_comm_dtype_name(dt),
                 count, in_place ? " in place" : "", i, got, want);
    }
    free(h);
    if (!in_place)
        dev_free(d);
    dev_free(s);
}

static void allgather(rv_comm *c, size_t b)
{
    const int n = c->size, r = c->rank;
    unsigned char *h = malloc((size_t)n * b + 1), *s = dev_alloc(b), *d = dev_alloc((size_t)n * b);
    fill(h, r, -1, b);
    to_dev(s, h, b);
    long c0 = copies;
    OK(rv_comm_allgather(c, s, d, b));
    expect_copies(c0, b ? 2 : 0, "allgather");
    from_dev(h, d, (size_t)n * b);
    for (int p = 0; p < n; p++)
        expect(h + (size_t)p * b, p, -1, b, "allgather");
    free(h), dev_free(s), dev_free(d);
}

static void alltoall(rv_comm *c, size_t b)
{
    const int n = c->size, r = c->rank;
    unsigned char *h = malloc((size_t)n * b + 1), *s = dev_alloc((size_t)n * b),
                  *d = dev_alloc((size_t)n * b);
    for (int p = 0; p < n; p++)
        fill(h + (size_t)p * b, r, p, b);
    to_dev(s, h, (size_t)n * b);
    long c0 = copies;
    OK(rv_comm_alltoall(c, s, d, b));
    expect_copies(c0, b ? 2 : 0, "alltoall");
    from_dev(h, d, (size_t)n * b);
    for (int p = 0; p < n; p++)
        expect(h + (size_t)p * b, p, r, b, "alltoall");
    free(h), dev_free(s), dev_free(d);
}

/* A send whose request is freed at once (its staging buffer must outlive the
 * free), received after a barrier; and a receive nobody answers, freed. */
static void freed_requests(rv_comm *c)
{
    const int n = c->size, r = c->rank, to = (r + 1) % n, from = (r - 1 + n) % n;
    const size_t b = 65536 + 3;
    unsigned char *h = malloc(b), *s = dev_alloc(b), *d = dev_alloc(b);
    fill(h, r, to, b);
    to_dev(s, h, b);
    rv_comm_request *q = NULL;
    OK(rv_comm_isend(c, s, b, to, 6, &q));
    rv_comm_request_free(&q);
    memset(h, 0x11, b);
    to_dev(s, h, b); /* the caller's buffer is free again: the staged copy is sent */
    OK(rv_comm_irecv(c, d, 64, from, 7, &q)); /* never sent */
    rv_comm_request_free(&q);
    OK(rv_comm_barrier(c));
    OK(rv_comm_irecv(c, d, b, from, 6, &q));
    OK(rv_comm_wait(&q));
    from_dev(h, d, b);
    expect(h, from, r, b, "freed send");
    free(h), dev_free(s), dev_free(d);
}

static rv_status stage_local(rv_comm *c, void *arg)
{
    (void)arg;
    rv_status st = rv_comm_mpi_stage_device(c, dev_copy);
    return st == RV_ERR_INVALID ? RV_OK
                                : rv_fail(RV_ERR_INTERNAL, "staging a local communicator gave %d",
                                          (int)st);
}

static void checks(rv_comm *c, const char *name)
{
    double t0 = rv_clock_s();
    if (!c->device_memory || c->move != dev_copy)
        FAIL("%s: device_memory %d, move %s the copy function", name, c->device_memory,
             c->move == dev_copy ? "is" : "is not");
    ring(c, 0);
    ring(c, 1);
    many(c);
    short_message(c);
    host_buffers(c);
    const size_t counts[] = {0, 1, 1000, 1024, 5000};
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
        for (int ip = 0; ip < 2; ip++) {
            allreduce(c, RV_COMM_F32, counts[k], ip);
            allreduce(c, RV_COMM_F64, counts[k], ip);
        }
    const size_t blocks[] = {0, 3, CHUNK, CHUNK + 1, 5000};
    for (size_t k = 0; k < sizeof blocks / sizeof blocks[0]; k++) {
        allgather(c, blocks[k]);
        alltoall(c, blocks[k]);
    }
    freed_requests(c);
    OK(rv_comm_barrier(c));
    if (world->rank == 0)
        printf("test_comm_mpi_stage: ok %-34s %6.2f s\n", name, rv_clock_s() - t0);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    char chunk[32];
    snprintf(chunk, sizeof chunk, "%d", CHUNK);
    setenv("RINGVIT_COMM_MPI_CHUNK", chunk, 1);
    if (rv_comm_mpi_world(&world) != RV_OK) {
        fprintf(stderr, "test_comm_mpi_stage: rv_comm_mpi_world: %s\n", rv_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    rv_comm_set_timeout(world, 60);
    if (world->size < 2)
        FAIL("run under mpiexec -n N with N >= 2 (got %d)", world->size);
    if (world->rank == 0)
        printf("test_comm_mpi_stage: %d ranks, %d-byte chunks\n", world->size, CHUNK);

    /* Refusals: no communicator, no copy function, another backend. */
    if (rv_comm_mpi_stage_device(NULL, dev_copy) != RV_ERR_INVALID ||
        rv_comm_mpi_stage_device(world, NULL) != RV_ERR_INVALID)
        FAIL("NULL communicator or copy function not refused");
    OK(rv_local_run(1, stage_local, NULL));
    if (world->device_memory)
        FAIL("a refused staging changed the communicator");

    OK(rv_comm_mpi_stage_device(world, dev_copy));
    checks(world, "world");

    /* A split of a staged communicator is staged: odd and even ranks. */
    rv_comm *half = NULL;
    OK(rv_comm_split(world, world->rank % 2, world->rank, &half));
    if (half->size >= 2)
        checks(half, "split (rank % 2)");
    else if (!half->device_memory || half->move != dev_copy)
        FAIL("the split of a staged communicator is not staged");
    rv_comm_free(&half);
    OK(rv_comm_barrier(world));
    if (world->rank == 0)
        printf("test_comm_mpi_stage: %ld copy calls on rank 0; all passed\n", copies);
    rv_comm_free(&world);
    MPI_Finalize();
    return 0;
}
