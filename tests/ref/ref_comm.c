/* ref_comm.c: the communicator checks declared in ref_comm.h. Every random choice
 * comes from a hash of (seed, round, rank, ...) that all ranks can compute, so no
 * check needs the communicator under test to tell it what to expect. */
#include "ref_comm.h"

#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The allreduce check's tolerance for reals, relative to the scale of the
 * inputs (every element in [-1, 1), so partial sums of n ranks stay within n of
 * it): each of the n - 1 additions rounds by half an ulp, 2^-24 (f32) or 2^-53
 * (f64) of a partial sum <= n x the scale. Integers are exact. */
#define AR_ROUND_F32 6e-8
#define AR_ROUND_F64 1.2e-16
#define AR_SCALE 1.0

#define OUT_MSGS 32          /* messages each rank sends in check_outstanding */
#define OUT_TAGS 4
#define OUT_MAX ((size_t)256 << 10)

/* ---- hashing, patterns, sizes ----------------------------------------------------------- */

static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A name for (a, b, c, d): the stream of one message or the state of one draw. */
static uint64_t h4(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    return mix64(a ^ mix64(b ^ mix64(c ^ mix64(d))));
}

static uint64_t next_u64(uint64_t *state)
{
    return mix64(*state += 0x632be59bd9b4e019ull);
}

void ref_comm_fill(void *p, size_t n, uint64_t stream)
{
    unsigned char *b = p;
    size_t k = 0;
    for (; k + 8 <= n; k += 8) {
        uint64_t w = mix64(stream + k);
        memcpy(b + k, &w, 8);
    }
    if (k < n) {
        uint64_t w = mix64(stream + k);
        memcpy(b + k, &w, n - k);
    }
}

size_t ref_comm_first_wrong(const void *p, size_t n, uint64_t stream)
{
    const unsigned char *b = p;
    for (size_t k = 0; k < n; k += 8) {
        uint64_t w = mix64(stream + k);
        size_t len = n - k < 8 ? n - k : 8;
        if (memcmp(b + k, &w, len) == 0)
            continue;
        const unsigned char *wb = (const unsigned char *)&w;
        for (size_t j = 0; j < len; j++)
            if (b[k + j] != wb[j])
                return k + j;
    }
    return n;
}

size_t ref_comm_rand_size(uint64_t *state, size_t max)
{
    uint64_t r = next_u64(state);
    if (max == 0 || r % 8 == 0)
        return 0;
    if (r % 8 == 1)
        return max;
    int bits = 0;
    while (bits < 62 && ((size_t)1 << bits) < max)
        bits++;
    size_t top = (size_t)1 << (next_u64(state) % (uint64_t)(bits + 1));
    size_t v = 1 + next_u64(state) % top;
    return v > max ? max : v;
}

/* ---- helpers ---------------------------------------------------------------------------- */

/* Adds what the check was doing to the message the library set. */
static rv_status with_context(rv_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static rv_status with_context(rv_status st, const char *fmt, ...)
{
    char inner[1024], ctx[256];
    snprintf(inner, sizeof inner, "%s", rv_last_error());
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    return rv_fail(st, "%s: %s", ctx, inner);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "ref_comm: cannot allocate %zu bytes\n", n);
        abort();
    }
    return p;
}

static rv_status check_bytes(rv_comm *c, const char *what, int round, int from,
                             const void *p, size_t n, uint64_t stream)
{
    size_t at = ref_comm_first_wrong(p, n, stream);
    if (at == n)
        return RV_OK;
    return rv_fail(RV_ERR_INTERNAL, "rank %d: %s round %d: byte %zu of %zu from rank %d is "
                   "wrong", c->rank, what, round, at, n, from);
}

static uint64_t fnv1a(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* ---- ring -------------------------------------------------------------------------------- */

/* Size of the message rank src sends in round k, direction d (0: right, 1: left). */
static size_t ring_size(const ref_comm_opts *o, int k, int src, int d)
{
    if (k == o->rounds) /* the last round is the largest message */
        return o->max_bytes;
    uint64_t s = h4(o->seed, 0x71, (uint64_t)k, (uint64_t)(2 * src + d));
    return ref_comm_rand_size(&s, o->max_bytes);
}

rv_status ref_comm_check_ring(rv_comm *c, const ref_comm_opts *o)
{
    const int n = c->size, r = c->rank, right = (r + 1) % n, left = (r - 1 + n) % n;
    char *to_right = xmalloc(o->max_bytes), *to_left = xmalloc(o->max_bytes);
    char *from_left = xmalloc(o->max_bytes), *from_right = xmalloc(o->max_bytes);
    rv_status st = RV_OK;
    for (int k = 0; k <= o->rounds && st == RV_OK; k++) {
        size_t sr = ring_size(o, k, r, 0), sl = ring_size(o, k, r, 1);
        size_t gl = ring_size(o, k, left, 0), gr = ring_size(o, k, right, 1);
        uint64_t str = h4(o->seed, 0x72, k, 2 * r), stl = h4(o->seed, 0x72, k, 2 * r + 1);
        ref_comm_fill(to_right, sr, str);
        ref_comm_fill(to_left, sl, stl);
        if (k % 2 == 0) {
            st = rv_comm_sendrecv(c, to_right, sr, right, from_left, gl, left, 3);
            if (st == RV_OK)
                st = rv_comm_sendrecv(c, to_left, sl, left, from_right, gr, right, 4);
        } else {
            rv_comm_request *req[4] = {NULL, NULL, NULL, NULL};
            st = rv_comm_irecv(c, from_left, gl, left, 3, &req[0]);
            if (st == RV_OK)
                st = rv_comm_irecv(c, from_right, gr, right, 4, &req[1]);
            if (st == RV_OK)
                st = rv_comm_isend(c, to_right, sr, right, 3, &req[2]);
            if (st == RV_OK)
                st = rv_comm_isend(c, to_left, sl, left, 4, &req[3]);
            if (st == RV_OK)
                st = rv_comm_waitall(req, 4);
            for (int i = 0; i < 4; i++)
                rv_comm_request_free(&req[i]);
        }
        if (st != RV_OK) {
            st = with_context(st, "ring round %d", k);
            break;
        }
        st = check_bytes(c, "ring (rightwards)", k, left, from_left, gl,
                         h4(o->seed, 0x72, k, 2 * left));
        if (st == RV_OK)
            st = check_bytes(c, "ring (leftwards)", k, right, from_right, gr,
                             h4(o->seed, 0x72, k, 2 * right + 1));
    }
    free(to_right), free(to_left), free(from_left), free(from_right);
    return st;
}

/* ---- many outstanding messages ------------------------------------------------------------ */

typedef struct out_msg {
    int src, dst, tag;
    size_t bytes;
    uint64_t stream;
} out_msg;

typedef struct out_op {
    int is_send;
    const out_msg *m;
    char *buf;
    rv_comm_request *req;
} out_op;

static void shuffle(int *a, int n, uint64_t *state)
{
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(next_u64(state) % (uint64_t)(i + 1));
        int t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

rv_status ref_comm_check_outstanding(rv_comm *c, const ref_comm_opts *o)
{
    const int n = c->size, me = c->rank;
    const size_t max = o->max_bytes < OUT_MAX ? o->max_bytes : OUT_MAX;
    const int nmsg = n * OUT_MSGS, nclass = n * OUT_TAGS;
    out_msg *msgs = xmalloc(sizeof *msgs * (size_t)nmsg);
    int *order = xmalloc(sizeof(int) * OUT_MSGS);
    int *cls = xmalloc(sizeof(int) * (size_t)nmsg);      /* incoming, grouped by class */
    int *cls_start = xmalloc(sizeof(int) * (size_t)(nclass + 1)), *cls_next = NULL;
    out_op *ops = xmalloc(sizeof *ops * (size_t)(2 * nmsg));
    int *perm = NULL, nops = 0, nsend = 0, nrecv = 0;
    rv_status st = RV_OK;

    /* The global table: message m of rank s. */
    for (int s = 0; s < n; s++)
        for (int m = 0; m < OUT_MSGS; m++) {
            uint64_t state = h4(o->seed, 0x81, s, m);
            out_msg *x = &msgs[s * OUT_MSGS + m];
            x->src = s;
            x->dst = (int)(next_u64(&state) % (uint64_t)n);
            x->tag = (int)(next_u64(&state) % OUT_TAGS);
            x->bytes = ref_comm_rand_size(&state, max);
            x->stream = h4(o->seed, 0x82, s, m);
        }
    /* Incoming messages per class (src, tag), in the order their sender posts them. */
    memset(cls_start, 0, sizeof(int) * (size_t)(nclass + 1));
    for (int pass = 0; pass < 2; pass++) {
        for (int s = 0; s < n; s++) {
            uint64_t state = h4(o->seed, 0x83, s, 0);
            for (int m = 0; m < OUT_MSGS; m++)
                order[m] = m;
            shuffle(order, OUT_MSGS, &state);
            for (int i = 0; i < OUT_MSGS; i++) {
                const out_msg *x = &msgs[s * OUT_MSGS + order[i]];
                if (x->dst != me)
                    continue;
                int k = s * OUT_TAGS + x->tag;
                if (pass == 0)
                    cls_start[k + 1]++;
                else
                    cls[cls_next[k]++] = s * OUT_MSGS + order[i];
            }
            if (s == me && pass == 0) /* this rank's sends, in its post order */
                for (int i = 0; i < OUT_MSGS; i++)
                    ops[nsend++] = (out_op){1, &msgs[me * OUT_MSGS + order[i]], NULL, NULL};
        }
        if (pass == 0) {
            for (int k = 0; k < nclass; k++)
                cls_start[k + 1] += cls_start[k];
            cls_next = xmalloc(sizeof(int) * (size_t)nclass);
            memcpy(cls_next, cls_start, sizeof(int) * (size_t)nclass);
        }
    }
    nrecv = cls_start[nclass];
    /* Receives: a random class each time, the class's next message. Then a random
     * interleaving of sends and receives, each list keeping its own order. */
    out_op *recvs = ops + nsend;
    {
        uint64_t state = h4(o->seed, 0x84, me, 0);
        memcpy(cls_next, cls_start, sizeof(int) * (size_t)nclass);
        for (int i = 0; i < nrecv; i++) {
            int k;
            do
                k = (int)(next_u64(&state) % (uint64_t)nclass);
            while (cls_next[k] == cls_start[k + 1]);
            recvs[i] = (out_op){0, &msgs[cls[cls_next[k]++]], NULL, NULL};
        }
        out_op *merged = xmalloc(sizeof *merged * (size_t)(nsend + nrecv));
        int a = 0, b = 0;
        while (a < nsend || b < nrecv) {
            int left_s = nsend - a, left_r = nrecv - b;
            int take_send = left_r == 0 ||
                            (left_s > 0 && next_u64(&state) % (uint64_t)(left_s + left_r) <
                                               (uint64_t)left_s);
            merged[nops++] = take_send ? ops[a++] : recvs[b++];
        }
        memcpy(ops, merged, sizeof *ops * (size_t)nops);
        free(merged);
    }
    /* Post everything. */
    for (int i = 0; i < nops && st == RV_OK; i++) {
        out_op *p = &ops[i];
        p->buf = xmalloc(p->m->bytes);
        if (p->is_send) {
            ref_comm_fill(p->buf, p->m->bytes, p->m->stream);
            st = rv_comm_isend(c, p->buf, p->m->bytes, p->m->dst, p->m->tag, &p->req);
        } else {
            memset(p->buf, 0, p->m->bytes ? p->m->bytes : 1);
            st = rv_comm_irecv(c, p->buf, p->m->bytes, p->m->src, p->m->tag, &p->req);
        }
        if (st != RV_OK)
            st = with_context(st, "outstanding: posting op %d of %d", i, nops);
    }
    /* Complete in random order: wait, poll with test, or keep for one waitall. */
    perm = xmalloc(sizeof(int) * (size_t)(nops > 0 ? nops : 1));
    for (int i = 0; i < nops; i++)
        perm[i] = i;
    uint64_t state = h4(o->seed, 0x85, me, 0);
    shuffle(perm, nops, &state);
    rv_comm_request **batch = xmalloc(sizeof *batch * (size_t)(nops > 0 ? nops : 1));
    int nbatch = 0;
    for (int i = 0; i < nops && st == RV_OK; i++) {
        out_op *p = &ops[perm[i]];
        if (i % 3 == 0) {
            st = rv_comm_wait(&p->req);
        } else if (i % 3 == 1) {
            double give_up = rv_clock_s() + c->timeout_s;
            int done = 0;
            while (st == RV_OK && !done) {
                st = rv_comm_test(&p->req, &done);
                if (st == RV_OK && !done && rv_clock_s() > give_up)
                    st = rv_fail(RV_ERR_TIMEOUT, "rank %d: test never completed", me);
                if (!done)
                    sched_yield();
            }
        } else {
            batch[nbatch++] = p->req;
            p->req = NULL;
        }
        if (st != RV_OK)
            st = with_context(st, "outstanding: completing op %d", perm[i]);
    }
    if (st == RV_OK && (st = rv_comm_waitall(batch, nbatch)) != RV_OK)
        st = with_context(st, "outstanding: waitall of %d", nbatch);
    for (int i = 0; i < nbatch; i++)
        rv_comm_request_free(&batch[i]);
    free(batch);
    for (int i = 0; i < nops; i++) {
        out_op *p = &ops[i];
        rv_comm_request_free(&p->req);
        if (st == RV_OK && !p->is_send)
            st = check_bytes(c, "outstanding", 0, p->m->src, p->buf, p->m->bytes, p->m->stream);
        free(p->buf);
    }
    free(perm);
    free(msgs), free(order), free(cls), free(cls_start), free(cls_next), free(ops);
    return st;
}

/* ---- allreduce --------------------------------------------------------------------------- */

/* Rank q's element i in round k: an integer in [-1000, 1000] (exact sums) or a real
 * in [-1, 1) rounded to the dtype. */
static double ar_value(const ref_comm_opts *o, int k, int q, size_t i, int integer,
                       rv_comm_dtype dt)
{
    uint64_t z = mix64(h4(o->seed, 0x91, k, q) + i);
    if (integer)
        return (double)((int64_t)(z % 2001) - 1000);
    double v = (double)(z >> 11) * 0x1.0p-52 - 1.0;
    return dt == RV_COMM_F32 ? (double)(float)v : v;
}

rv_status ref_comm_check_allreduce(rv_comm *c, const ref_comm_opts *o)
{
    const int n = c->size, r = c->rank;
    rv_status st = RV_OK;
    uint64_t *hashes = xmalloc(sizeof(uint64_t) * (size_t)n);
    for (int k = 0; k <= o->rounds + 1 && st == RV_OK; k++) {
        const rv_comm_dtype dt = k % 2 ? RV_COMM_F64 : RV_COMM_F32;
        const size_t es = rv_comm_dtype_size(dt);
        const int in_place = (k / 2) % 2, integer = k % 4 != 3;
        uint64_t state = h4(o->seed, 0x92, k, 0);
        size_t count = (k >= o->rounds ? o->max_bytes : ref_comm_rand_size(&state, o->max_bytes)) / es;
        char *send = xmalloc(count * es), *recv = xmalloc(count * es);
        char *mine = in_place ? recv : send;
        for (size_t i = 0; i < count; i++) {
            double v = ar_value(o, k, r, i, integer, dt);
            if (dt == RV_COMM_F32)
                ((float *)mine)[i] = (float)v;
            else
                ((double *)mine)[i] = v;
        }
        st = rv_comm_allreduce(c, mine, recv, count, dt);
        if (st != RV_OK)
            st = with_context(st, "allreduce round %d (%zu %s)", k, count,
                              rv_comm_dtype_name(dt));
        double tol = integer ? 0 : (dt == RV_COMM_F32 ? AR_ROUND_F32 : AR_ROUND_F64) * n * n *
                                       AR_SCALE;
        for (size_t i = 0; i < count && st == RV_OK; i++) {
            double want = 0;
            for (int q = 0; q < n; q++)
                want += ar_value(o, k, q, i, integer, dt);
            double got = dt == RV_COMM_F32 ? ((float *)recv)[i] : ((double *)recv)[i];
            if (!(fabs(got - want) <= tol))
                st = rv_fail(RV_ERR_INTERNAL, "rank %d: allreduce round %d (%zu %s, %s): "
                             "element %zu is %.17g, want %.17g", r, k, count,
                             rv_comm_dtype_name(dt), in_place ? "in place" : "out of place", i,
                             got, want);
        }
        /* Every rank holds the same bits (data-parallel replicas must not drift). */
        uint64_t h = fnv1a(recv, count * es);
        if (st == RV_OK && (st = rv_comm_allgather(c, &h, hashes, sizeof h)) != RV_OK)
            st = with_context(st, "allreduce round %d: hash exchange", k);
        for (int q = 0; q < n && st == RV_OK; q++)
            if (hashes[q] != h)
                st = rv_fail(RV_ERR_INTERNAL, "rank %d: allreduce round %d: the result differs "
                             "in its bits from rank %d's", r, k, q);
        free(send), free(recv);
    }
    free(hashes);
    return st;
}

/* ---- allgather, alltoall ------------------------------------------------------------------ */

rv_status ref_comm_check_allgather(rv_comm *c, const ref_comm_opts *o)
{
    const int n = c->size, r = c->rank;
    rv_status st = RV_OK;
    for (int k = 0; k <= o->rounds + 1 && st == RV_OK; k++) {
        uint64_t state = h4(o->seed, 0xa1, k, 0);
        size_t bytes = k >= o->rounds ? o->max_bytes : ref_comm_rand_size(&state, o->max_bytes);
        const int in_place = k % 2;
        char *recv = xmalloc(bytes * n), *send = in_place ? recv + (size_t)r * bytes
                                                           : xmalloc(bytes);
        ref_comm_fill(send, bytes, h4(o->seed, 0xa2, k, r));
        if ((st = rv_comm_allgather(c, send, recv, bytes)) != RV_OK)
            st = with_context(st, "allgather round %d (%zu bytes per rank)", k, bytes);
        for (int q = 0; q < n && st == RV_OK; q++)
            st = check_bytes(c, "allgather", k, q, recv + (size_t)q * bytes, bytes,
                             h4(o->seed, 0xa2, k, q));
        if (!in_place)
            free(send);
        free(recv);
    }
    return st;
}

rv_status ref_comm_check_alltoall(rv_comm *c, const ref_comm_opts *o)
{
    const int n = c->size, r = c->rank;
    rv_status st = RV_OK;
    for (int k = 0; k <= o->rounds && st == RV_OK; k++) {
        uint64_t state = h4(o->seed, 0xb1, k, 0);
        size_t bytes = k == o->rounds ? o->max_bytes : ref_comm_rand_size(&state, o->max_bytes);
        char *send = xmalloc(bytes * n), *recv = xmalloc(bytes * n);
        for (int j = 0; j < n; j++) /* block j goes to rank j */
            ref_comm_fill(send + (size_t)j * bytes, bytes, h4(o->seed, 0xb2, k, r * 4096 + j));
        if ((st = rv_comm_alltoall(c, send, recv, bytes)) != RV_OK)
            st = with_context(st, "alltoall round %d (%zu bytes per rank)", k, bytes);
        for (int q = 0; q < n && st == RV_OK; q++)
            st = check_bytes(c, "alltoall", k, q, recv + (size_t)q * bytes, bytes,
                             h4(o->seed, 0xb2, k, q * 4096 + r));
        free(send), free(recv);
    }
    return st;
}

/* ---- barrier --------------------------------------------------------------------------- */

rv_status ref_comm_check_barrier(rv_comm *c, const ref_comm_opts *o)
{
    const int n = c->size, r = c->rank;
    double *times = xmalloc(sizeof(double) * 2 * (size_t)n); /* (n, 2): enter, leave */
    rv_status st = RV_OK;
    (void)o;
    for (int k = 0; k < 3 && st == RV_OK; k++) {
        if (r == k % n) { /* one late rank per round */
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        double mine[2];
        mine[0] = rv_clock_s();
        st = rv_comm_barrier(c);
        mine[1] = rv_clock_s();
        if (st != RV_OK) {
            st = with_context(st, "barrier round %d", k);
            break;
        }
        if ((st = rv_comm_allgather(c, mine, times, sizeof mine)) != RV_OK) {
            st = with_context(st, "barrier round %d: time exchange", k);
            break;
        }
        for (int q = 0; q < n && st == RV_OK; q++)
            if (times[2 * q] > mine[1])
                st = rv_fail(RV_ERR_INTERNAL, "rank %d: barrier round %d: left %.6f s before "
                             "rank %d entered", r, k, times[2 * q] - mine[1], q);
    }
    free(times);
    return st;
}

/* ---- split ------------------------------------------------------------------------------ */

static int split_color(int q, int n)
{
    return n > 2 && q == n - 1 ? RV_COMM_UNDEFINED : q % 3;
}

static rv_status check_sum(rv_comm *g, const char *what, double mine, double want)
{
    double got = 0;
    rv_status st = rv_comm_allreduce(g, &mine, &got, 1, RV_COMM_F64);
    if (st != RV_OK)
        return with_context(st, "%s: allreduce", what);
    if (got != want)
        return rv_fail(RV_ERR_INTERNAL, "rank %d: %s: sum of world ranks %g, want %g", g->rank,
                       what, got, want);
    return RV_OK;
}

rv_status ref_comm_check_split(rv_comm *c, const ref_comm_opts *o)
{
    const int n = c->size, r = c->rank, color = split_color(r, n);
    rv_comm *sub = NULL, *sub2 = NULL, *cpc = NULL, *dpc = NULL;
    rv_comm_request *preq[2] = {NULL, NULL};
    char pout[64], pin[64], sout[64], sin[64];
    rv_status st = RV_OK;

    /* A parent message with tag 0 is in flight while the sub-groups use tag 0. */
    ref_comm_fill(pout, sizeof pout, h4(o->seed, 0xc1, r, 0));
    if ((st = rv_comm_irecv(c, pin, sizeof pin, (r - 1 + n) % n, 0, &preq[0])) != RV_OK ||
        (st = rv_comm_isend(c, pout, sizeof pout, (r + 1) % n, 0, &preq[1])) != RV_OK) {
        st = with_context(st, "split: parent message");
        goto end;
    }
    if ((st = rv_comm_split(c, color, -r, &sub)) != RV_OK) {
        st = with_context(st, "split (color %d, key %d)", color, -r);
        goto end;
    }
    /* Members: the ranks of this color, by key -q, i.e. by descending rank. */
    int size = 0, pos = -1;
    double want = 0;
    for (int q = n - 1; q >= 0; q--)
        if (color != RV_COMM_UNDEFINED && split_color(q, n) == color) {
            if (q == r)
                pos = size;
            size++;
            want += q;
        }
    if (color == RV_COMM_UNDEFINED) {
        if (sub)
            st = rv_fail(RV_ERR_INTERNAL, "rank %d: split with RV_COMM_UNDEFINED gave a "
                         "communicator", r);
    } else if (!sub || sub->size != size || sub->rank != pos || sub->world_rank != c->world_rank) {
        st = rv_fail(RV_ERR_INTERNAL, "rank %d: split color %d: got rank %d of %d (world rank "
                     "%d), want %d of %d (world rank %d)", r, color, sub ? sub->rank : -1,
                     sub ? sub->size : -1, sub ? sub->world_rank : -1, pos, size, c->world_rank);
    }
    if (st != RV_OK || !sub)
        goto parent;
    /* Inside the group: a ring with tag 0, then a sum. */
    {
        int sr = sub->rank, sn = sub->size;
        ref_comm_fill(sout, sizeof sout, h4(o->seed, 0xc2, color, sr));
        if ((st = rv_comm_sendrecv(sub, sout, sizeof sout, (sr + 1) % sn, sin, sizeof sin,
                                   (sr - 1 + sn) % sn, 0)) != RV_OK) {
            st = with_context(st, "split: ring in group %d", color);
            goto end;
        }
        if ((st = check_bytes(sub, "split ring", 0, (sr - 1 + sn) % sn, sin, sizeof sin,
                              h4(o->seed, 0xc2, color, (sr - 1 + sn) % sn))) != RV_OK ||
            (st = check_sum(sub, "split group", r, want)) != RV_OK)
            goto end;
        /* Nested: the group split again by parity of the group rank. */
        if ((st = rv_comm_split(sub, sr % 2, sr, &sub2)) != RV_OK) {
            st = with_context(st, "nested split");
            goto end;
        }
        double want2 = 0;
        int size2 = 0;
        for (int q = n - 1, i = 0; q >= 0; q--) /* group rank i is the i-th member */
            if (split_color(q, n) == color) {
                if (i % 2 == sr % 2) {
                    want2 += q;
                    size2++;
                }
                i++;
            }
        if (!sub2 || sub2->size != size2 || sub2->rank != sr / 2) {
            st = rv_fail(RV_ERR_INTERNAL, "rank %d: nested split: rank %d of %d, want %d of %d",
                         r, sub2 ? sub2->rank : -1, sub2 ? sub2->size : -1, sr / 2, size2);
            goto end;
        }
        if ((st = check_sum(sub2, "nested split", r, want2)) != RV_OK)
            goto end;
    }
parent:
    if (st != RV_OK)
        goto end;
    if ((st = rv_comm_waitall(preq, 2)) != RV_OK) {
        st = with_context(st, "split: parent message");
        goto end;
    }
    if ((st = check_bytes(c, "split parent message", 0, (r - 1 + n) % n, pin, sizeof pin,
                          h4(o->seed, 0xc1, (r - 1 + n) % n, 0))) != RV_OK)
        goto end;
    /* The dp x cp mesh. */
    for (int cp = 2; cp <= 4 && st == RV_OK; cp += 2) {
        if (n % cp != 0)
            continue;
        if ((st = rv_comm_mesh_split(c, cp, &cpc, &dpc)) != RV_OK) {
            st = with_context(st, "mesh split cp=%d", cp);
            break;
        }
        if (cpc->size != cp || cpc->rank != r % cp || dpc->size != n / cp || dpc->rank != r / cp)
            st = rv_fail(RV_ERR_INTERNAL, "rank %d: mesh cp=%d: cp rank %d of %d, dp rank %d of "
                         "%d", r, cp, cpc->rank, cpc->size, dpc->rank, dpc->size);
        double want_cp = 0, want_dp = 0;
        for (int j = 0; j < cp; j++)
            want_cp += r / cp * cp + j;
        for (int i = 0; i < n / cp; i++)
            want_dp += i * cp + r % cp;
        if (st == RV_OK)
            st = check_sum(cpc, "mesh cp group", r, want_cp);
        if (st == RV_OK)
            st = check_sum(dpc, "mesh dp group", r, want_dp);
        rv_comm_free(&cpc);
        rv_comm_free(&dpc);
    }
end:
    rv_comm_request_free(&preq[0]);
    rv_comm_request_free(&preq[1]);
    rv_comm_free(&sub2);
    rv_comm_free(&sub);
    return st;
}

rv_status ref_comm_check_all(rv_comm *c, const ref_comm_opts *o)
{
    rv_status (*const checks[])(rv_comm *, const ref_comm_opts *) = {
        ref_comm_check_barrier,   ref_comm_check_ring,     ref_comm_check_outstanding,
        ref_comm_check_allreduce, ref_comm_check_allgather, ref_comm_check_alltoall,
        ref_comm_check_split,
    };
    rv_status st = RV_OK;
    for (size_t i = 0; i < sizeof checks / sizeof checks[0] && st == RV_OK; i++)
        st = checks[i](c, o);
    return st;
}
