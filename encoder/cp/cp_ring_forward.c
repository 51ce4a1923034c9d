/* cp_ring_forward.c: the ring attention forward. Every rank starts with its own
 * K/V block; blocks travel to rank+1 while each rank folds the block it holds
 * into its running (o, lse) by log-sum-exp (the kernel's accumulate mode), so
 * after N steps every rank has seen every block.
 *
 * Chunks: a block travels in m chunks (ring_chunks), each a ring pass of N steps,
 * so a rank holds a few chunks in flight rather than whole blocks. Chunk c is the
 * c-th m-th of every segment of a slice (chunk_pieces), so under zigzag shards
 * every rank does the same work at every step.
 *
 * Schedule: steps t = 0 .. m*N-1 in order (pass t / N, step t % N). Step 0 of a
 * pass computes the rank's own chunk in place in k, v and sends it piece by piece
 * (never copied); the other steps compute a chunk received from the left into one
 * of `nslot` receive slots, and every step but a pass's last sends its chunk on
 * to the right. Sends are posted in step order and so are receives, so messages
 * match in post order, as NCCL needs.
 *
 * On the CPU both run ahead of the computation: own chunks are sent as soon as
 * that order allows, a received chunk is sent on once it is here, and a receive
 * is posted as soon as one of 3 slots is free (2 when a block is short enough to
 * travel whole). A rank that is briefly slower (a
 * busy core) then does not stall its neighbours at every step; they wait only
 * once it falls a window of slots behind. On a device one exchange is in flight
 * (the receive for step t+1 and the send of step t, two slots): NCCL launches
 * queued sends and receives as one group on one stream, in order, so a receive
 * posted far ahead could hold back the sends queued behind it. There the kernels
 * are queued on the compute stream, the exchange is launched and waited for while
 * they run, then the kernels are waited for (cp_busy_end) before a slot they read
 * is received into. RINGVIT_RING_AHEAD=0 gives the CPU the device's schedule
 * (rv_cp_attn_init reads it into cp->ring_ahead).
 * Buffers are the backend's memory. */
#include <math.h>
#include <stdlib.h>

#include "cp_span.h"
#include "cp_strategies.h"

/* CPU: at most RV_CP_RING_PASSES chunks, none shorter than RV_CP_RING_CHUNK rows.
 * Every kernel call streams its queries and running output through memory once,
 * so longer chunks cost less per key (512-row zigzag pieces spent about 10% of a
 * rank's time so); the three slots stay under 40% of the slice's K and V. */
#define RV_CP_RING_CHUNK 1024
#define RV_CP_RING_PASSES 8
/* On a device, memory is plentiful and every kernel call re-reads and merges the
 * running output: chunks as long as 16384 rows keep those passes a few percent. */
#define RV_CP_RING_CHUNK_DEVICE 16384
#define RING_SLOTS_CPU 3
#define RING_SLOTS_DEVICE 2
#define RING_MSGS (2 * RV_SHARD_MAX_SEGS) /* K and V of every piece */

typedef struct ring_fwd {
    rv_cp_attn *cp;
    int n, r, m, steps; /* ranks, this rank, passes, steps (m * n) */
    int nslot;          /* receive slots in use */
    int ahead;          /* 1: sends and receives run ahead (CPU); 0: one exchange */
    int64_t maxchunk;   /* rows a slot holds */
    size_t rowf;        /* floats per row (heads * dim) */
    cp_segs me;
    const float *k, *v;                   /* (me.len, heads, dim) this rank's block */
    float *slot[RING_SLOTS_CPU];          /* (2, maxchunk, heads, dim): K rows, V rows */
    int holds[RING_SLOTS_CPU];            /* the step whose chunk it holds; -1 none */
    int received[RING_SLOTS_CPU];         /* that chunk's receive is complete */
    rv_comm_request *recv_req[RING_SLOTS_CPU][RING_MSGS];
    rv_comm_request *fwd_req[RING_SLOTS_CPU][RING_MSGS]; /* sending it on */
    rv_comm_request **own_req;            /* (m, RING_MSGS) sends of own chunks */
    int next_send, next_recv;             /* first step whose send/receive is unposted */
} ring_fwd;

/* One step's chunk: whose block, which rows of each of its segments, and where
 * each piece's K and V rows lie (in place in k, v or packed in a slot). */
typedef struct chunk_view {
    cp_segs segs;                            /* the owner's segments */
    rv_shard_seg piece[RV_SHARD_MAX_SEGS];   /* {first row within segment j, rows} */
    int64_t at[RV_SHARD_MAX_SEGS];           /* piece j's first row in a slot */
} chunk_view;

/* Chunk c (of m) of a block: the c-th m-th of each of its segments. piece[j] =
 * {first row within segment j, rows}; returns the chunk's rows. */
static int64_t chunk_pieces(const cp_segs *s, int c, int m, rv_shard_seg piece[RV_SHARD_MAX_SEGS])
{
    int64_t total = 0;
    for (int j = 0; j < s->n; j++) {
        int64_t a = s->seg[j].len * c / m, b = s->seg[j].len * (c + 1) / m;
        piece[j] = (rv_shard_seg){.start = a, .len = b - a};
        total += b - a;
    }
    return total;
}

/* Chunks a block travels in, and the most rows one of them holds (a chunk takes
 * at most ceil(len_j / m) rows of each segment j). */
static int ring_chunks(const rv_cp_attn *cp, int64_t *max_rows)
{
    const int64_t maxlen = rv_shard_max_len(&cp->plan);
    int64_t chunk = RV_CP_RING_CHUNK_DEVICE;
    if (rv_backend_is_host(cp->be)) {
        chunk = (maxlen + RV_CP_RING_PASSES - 1) / RV_CP_RING_PASSES;
        chunk = chunk > RV_CP_RING_CHUNK ? chunk : RV_CP_RING_CHUNK;
    }
    int m = (int)((maxlen + chunk - 1) / chunk);
    m = m > 0 ? m : 1;
    *max_rows = (maxlen + m - 1) / m + RV_SHARD_MAX_SEGS;
    return m;
}

static int is_own(const ring_fwd *f, int t) { return t % f->n == 0; }
static int has_send(const ring_fwd *f, int t) { return t % f->n < f->n - 1; }

/* The slot of a received step: received steps take the slots in turn. */
static int slot_of(const ring_fwd *f, int t)
{
    return ((t / f->n) * (f->n - 1) + t % f->n - 1) % f->nslot;
}

static chunk_view view_of(const ring_fwd *f, int t)
{
    chunk_view w;
    w.segs = cp_segs_of(&f->cp->plan, (f->r - t % f->n + f->n) % f->n);
    chunk_pieces(&w.segs, t / f->n, f->m, w.piece);
    int64_t at = 0;
    for (int j = 0; j < w.segs.n; at += w.piece[j].len, j++)
        w.at[j] = at;
    return w;
}

/* First row of piece j's keys (values with is_v) for step t. */
static const float *piece_rows(const ring_fwd *f, int t, const chunk_view *w, int j, int is_v)
{
    if (is_own(f, t))
        return (is_v ? f->v : f->k) + (f->me.off[j] + w->piece[j].start) * f->rowf;
    return f->slot[slot_of(f, t)] + ((is_v ? f->maxchunk : 0) + w->at[j]) * f->rowf;
}

/* Posts step t's chunk: sent to the right (send) or received from the left into
 * its slot; K then V of each non-empty piece, the same order on both sides. */
static rv_status post_chunk(ring_fwd *f, int t, int send)
{
    rv_comm *c = f->cp->comm;
    const size_t rowb = f->rowf * sizeof(float);
    const chunk_view w = view_of(f, t);
    rv_comm_request **reqs = send ? (is_own(f, t) ? f->own_req + (size_t)(t / f->n) * RING_MSGS
                                                  : f->fwd_req[slot_of(f, t)])
                                  : f->recv_req[slot_of(f, t)];
    rv_status st = RV_OK;
    for (int j = 0, q = 0; j < w.segs.n && st == RV_OK; j++) {
        size_t bytes = (size_t)w.piece[j].len * rowb;
        if (bytes == 0)
            continue;
        for (int is_v = 0; is_v < 2 && st == RV_OK; is_v++, q++) {
            int tag = is_v ? CP_TAG_V : CP_TAG_K;
            if (send)
                st = rv_comm_isend(c, piece_rows(f, t, &w, j, is_v), bytes,
                                   (f->r + 1) % f->n, tag, &reqs[q]);
            else
                st = rv_comm_irecv(c, f->slot[slot_of(f, t)] +
                                          ((is_v ? f->maxchunk : 0) + w.at[j]) * f->rowf,
                                   bytes, (f->r + f->n - 1) % f->n, tag, &reqs[q]);
            if (st == RV_OK && send)
                f->cp->stats.bytes_sent += (double)bytes;
        }
    }
    return st;
}

/* Waits for step t's chunk to arrive (a received step whose receive is posted). */
static rv_status wait_chunk(ring_fwd *f, int t)
{
    int b = slot_of(f, t);
    if (f->holds[b] != t) /* ring_post always posts the next step's receive */
        return rv_fail(RV_ERR_INTERNAL, "ring attention: rank %d: step %d was never received",
                       f->r, t);
    if (f->received[b])
        return RV_OK;
    rv_status st = cp_wait(f->cp, f->recv_req[b], RING_MSGS);
    f->received[b] = st == RV_OK;
    return st;
}

/* *done = 1 when none of reqs is pending; blocks until then with `block`. */
static rv_status settle(ring_fwd *f, rv_comm_request **reqs, int block, int *done)
{
    *done = 1;
    if (block)
        return cp_wait(f->cp, reqs, RING_MSGS);
    for (int i = 0; i < RING_MSGS; i++) {
        int d = 1;
        rv_status st = rv_comm_test(&reqs[i], &d);
        if (st != RV_OK)
            return st;
        *done = *done && d;
    }
    return RV_OK;
}

/* Posts what may go out before step t is computed: receives into free slots (the
 * one for step t+1 always, waiting for its slot if need be) and sends in step
 * order. See the file comment for how far each runs ahead. */
static rv_status ring_post(ring_fwd *f, int t)
{
    rv_status st;
    const int recv_horizon = f->ahead ? f->steps : t + 1, send_horizon = f->ahead ? f->steps : t;
    for (; f->next_recv < f->steps && f->next_recv <= recv_horizon; f->next_recv++) {
        const int u = f->next_recv;
        if (is_own(f, u))
            continue;
        const int b = slot_of(f, u);
        int done = 1;
        if (f->holds[b] >= t) /* not computed yet; never so for u = t + 1 */
            break;
        if ((st = settle(f, f->fwd_req[b], u == t + 1, &done)) != RV_OK)
            return st;
        if (!done)
            break;
        f->holds[b] = u, f->received[b] = 0;
        if ((st = post_chunk(f, u, 0)) != RV_OK)
            return st;
    }
    for (; f->next_send < f->steps && f->next_send <= send_horizon; f->next_send++) {
        const int u = f->next_send;
        if (!has_send(f, u))
            continue;
        if (!is_own(f, u) && u > t) { /* received ahead? else it goes out later */
            const int b = slot_of(f, u);
            int done = 0;
            if (f->holds[b] == u && (st = settle(f, f->recv_req[b], 0, &done)) != RV_OK)
                return st;
            if (!done)
                break;
            f->received[b] = 1;
        }
        if ((st = post_chunk(f, u, 1)) != RV_OK)
            return st;
    }
    return RV_OK;
}

/* Folds step t's chunk into (o, lse_acc). */
static rv_status ring_compute(ring_fwd *f, int t, const float *q, float *o, float **lse_acc)
{
    rv_cp_attn *cp = f->cp;
    const chunk_view w = view_of(f, t);
    for (int j = 0; j < w.segs.n; j++) {
        if (w.piece[j].len == 0)
            continue;
        rv_shard_seg kseg = {.start = w.segs.seg[j].start + w.piece[j].start,
                             .len = w.piece[j].len};
        for (int i = 0; i < f->me.n; i++) {
            if (cp_fully_masked(cp, f->me.seg[i], kseg))
                continue;
            rv_attn_fwd_args a = {.q = q + f->me.off[i] * f->rowf, .k = piece_rows(f, t, &w, j, 0),
                                  .v = piece_rows(f, t, &w, j, 1), .o = o + f->me.off[i] * f->rowf,
                                  .lse = lse_acc[i], .sq = (int)f->me.seg[i].len,
                                  .sk = (int)kseg.len, .heads = cp->heads, .dim = cp->dim,
                                  .scale = cp->scale, .mask = cp_mask(cp, f->me.seg[i], kseg),
                                  .accumulate = 1};
            rv_status st = cp->be->attn_fwd(cp->be, &a);
            if (st != RV_OK)
                return st;
            cp->stats.flops += 4.0 * cp->dim * cp->heads *
                               rv_cp_visible_pairs(f->me.seg[i], kseg, cp->causal);
        }
    }
    return RV_OK;
}

rv_status cp_ring_forward(rv_cp_attn *cp, const float *q, const float *k, const float *v,
                          float *o, float *lse)
{
    const int H = cp->heads;
    const int ahead = cp->ring_ahead; /* rv_cp_attn_init */
    ring_fwd f = {.cp = cp, .n = cp->comm->size, .r = cp->comm->rank,
                  .nslot = ahead ? RING_SLOTS_CPU : RING_SLOTS_DEVICE, .ahead = ahead,
                  .rowf = (size_t)H * cp->dim, .k = k, .v = v};
    f.me = cp_segs_of(&cp->plan, f.r);
    f.m = ring_chunks(cp, &f.maxchunk);
    f.steps = f.m * f.n;
    if (f.m == 1) /* a short block travels whole: a third slot would hold a third block */
        f.nslot = RING_SLOTS_DEVICE;
    rv_status st = RV_OK;
    float *lse_acc[RV_SHARD_MAX_SEGS] = {0};
    for (int b = 0; b < RING_SLOTS_CPU; b++)
        f.holds[b] = -1;
    f.own_req = calloc((size_t)f.m * RING_MSGS, sizeof *f.own_req);
    if (!f.own_req) {
        st = rv_fail(RV_ERR_NOMEM, "ring attention: %d request slots", f.m * RING_MSGS);
        goto end;
    }
    for (int b = 0; b < f.nslot && st == RV_OK; b++)
        st = cp_alloc(cp, 2 * f.maxchunk * f.rowf, &f.slot[b]);
    for (int i = 0; i < f.me.n && st == RV_OK; i++)
        st = cp_alloc(cp, (size_t)H * f.me.seg[i].len, &lse_acc[i]);
    if (st != RV_OK)
        goto end;
    cp_note_peak(cp, sizeof(float) * (2 * f.nslot * f.maxchunk * f.rowf + (size_t)H * f.me.len));
    if ((st = cp->be->fill(cp->be, o, 0.0f, f.me.len * f.rowf)) != RV_OK)
        goto end;
    for (int i = 0; i < f.me.n; i++)
        if ((st = cp->be->fill(cp->be, lse_acc[i], -INFINITY, (size_t)H * f.me.seg[i].len)) != RV_OK)
            goto end;
    /* q, k, v may come from kernels still queued: finish them before k, v are sent. */
    if ((st = cp->be->synchronize(cp->be)) != RV_OK)
        goto end;

    for (int t = 0; t < f.steps; t++) {
        if (!is_own(&f, t) && (st = wait_chunk(&f, t)) != RV_OK)
            goto end;
        if ((st = ring_post(&f, t)) != RV_OK)
            goto end;
        double t0 = rv_clock_s();
        if ((st = ring_compute(&f, t, q, o, lse_acc)) != RV_OK)
            goto end;
        double busy = rv_clock_s() - t0;
        /* The next chunk arrives while the kernels run (on a device this launches
         * the exchange); its slot is not one they read. */
        if (t + 1 < f.steps && !is_own(&f, t + 1) && (st = wait_chunk(&f, t + 1)) != RV_OK)
            goto end;
        if ((st = cp_busy_end(cp, rv_clock_s())) != RV_OK)
            goto end;
        cp->stats.busy_s += busy;
    }
    /* Every chunk sent must be delivered before k, v and the slots go away. */
    for (int c = 0; c < f.m && st == RV_OK; c++)
        st = cp_wait(cp, f.own_req + (size_t)c * RING_MSGS, RING_MSGS);
    for (int b = 0; b < f.nslot && st == RV_OK; b++)
        st = cp_wait(cp, f.fwd_req[b], RING_MSGS);
    for (int i = 0; i < f.me.n && st == RV_OK; i++)
        st = cp_lse_to_slice(cp, lse_acc[i], f.me.seg[i].len, lse, f.me.len, f.me.off[i]);
    if (st == RV_OK)
        st = cp->be->synchronize(cp->be);
end:
    if (f.own_req)
        for (size_t i = 0; i < (size_t)f.m * RING_MSGS; i++)
            rv_comm_request_free(&f.own_req[i]);
    for (int b = 0; b < RING_SLOTS_CPU; b++)
        for (int i = 0; i < RING_MSGS; i++) {
            rv_comm_request_free(&f.recv_req[b][i]);
            rv_comm_request_free(&f.fwd_req[b][i]);
        }
    free(f.own_req);
    /* Kernels may still read the buffers after an error: wait before freeing. */
    cp->be->synchronize(cp->be);
    for (int b = 0; b < RING_SLOTS_CPU; b++)
        cp_free(cp, &f.slot[b]);
    for (int i = 0; i < RV_SHARD_MAX_SEGS; i++)
        cp_free(cp, &lse_acc[i]);
    return st;
}
