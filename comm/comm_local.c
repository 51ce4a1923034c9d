/* comm_local.c: the "local" communicator backend: ranks are threads of one
 * process and a message moves by one memcpy, from the sender's buffer straight
 * into the receiver's; there is never a staging copy.
 *
 * Posting only matches: isend and irecv pair a send with a receive (by
 * communicator, source and tag, in post order) and return at once. The copy is
 * done by the receiver, in its next wait or test (the progress step: every
 * matched receive of this thread, whichever request it waits for), outside the
 * mutex. So in a ring shift every rank copies its own incoming block at the same
 * time, and a KV block posted before a computation travels at the next wait.
 *
 * One mutex guards the world; each thread sleeps on its own condition variable
 * (CLOCK_MONOTONIC, so a wait ends at its deadline) and is woken when something it
 * waits for changes. Per receiving rank of a group, `sends` holds messages that
 * found no receive yet and `recvs` its receives that found no message yet; per
 * thread, `todo` holds its matched receives awaiting their copy. `inflight`
 * counts copies touching a rank's buffers, so no rank leaves while one runs.
 *
 * A rank that returns from its function is marked departed: its requests are
 * withdrawn and peers waiting on it fail at once (RV_ERR_COMM, naming it); a peer
 * that is alive but silent fails at the deadline (RV_ERR_TIMEOUT). Collectives
 * come from comm_coll.c.
 *
 * Strict mode (RINGVIT_COMM_STRICT=1, local_world_set_strict) behaves like NCCL, so
 * an ordering bug of a schedule written for NCCL deadlocks here, on the CPU, and
 * the deadline names it: isend/irecv only queue until the rank's next wait, test,
 * start or collective, when the queue goes out as one group (match-able from
 * then on); a wait or test on any request of a group completes only when the
 * whole group has; a send of more than the eager size (64 KiB, or
 * RINGVIT_COMM_STRICT_EAGER bytes) completes only once its receiver has launched
 * the matching receive and copied it, a smaller one at once (its bytes are staged
 * in a `ghost` request the receiver frees); and messages between a pair match in
 * post order whatever their tags: a receive meeting a message of another tag or
 * size fails ("out of NCCL order"), as NCCL would deliver the wrong bytes. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_impl.h"
#include "comm_local.h"

typedef enum req_state {
    REQ_QUEUED,  /* strict mode: posted, not yet launched (not match-able) */
    REQ_POSTED,  /* queued in its group, waiting for its match */
    REQ_MATCHED, /* paired (`match`); the receive sits in its owner's todo list */
    REQ_COPYING, /* the receiver is copying (outside the mutex) */
    REQ_DONE,
    REQ_FAILED,  /* see fail_why */
} req_state;

typedef enum fail_why {
    WHY_NONE,
    WHY_TRUNCATED, /* the message was larger than the receive buffer */
    WHY_LEFT,      /* the peer returned from its function */
    WHY_ABORTED,   /* a rank called abort */
    WHY_TIMEOUT,
    WHY_WITHDRAWN, /* the matched peer gave up its side (timeout or cancel) */
    WHY_COPY,      /* the world's copy function failed */
    WHY_ORDER,     /* strict: the pair's next message has another tag or size */
} fail_why;

typedef struct local_group local_group;
typedef struct local_req local_req;

/* Strict mode: the requests one rank launched together; each completes only when
 * all have. A member's slot is cleared when it is freed; the last frees the set. */
typedef struct launch_set {
    int n, refs;
    local_req **m; /* (n) */
} launch_set;
struct local_req {
    rv_comm_request base; /* .comm: the poster's communicator */
    local_group *g;
    int is_send;
    int owner, peer;      /* ranks in the group: who posted it, the other side */
    int owner_w, peer_w;  /* the same as world ranks */
    int tag;
    size_t bytes;         /* send: message size; receive: buffer capacity */
    const void *sbuf;     /* send: (bytes) */
    void *rbuf;           /* receive: (bytes) */
    req_state state;
    fail_why why;
    size_t other_bytes;   /* WHY_TRUNCATED: the other side's size */
    local_req *match;     /* REQ_MATCHED / REQ_COPYING: the other side */
    local_req *next;      /* link in a group queue (POSTED), a todo list (MATCHED) or
                           * its communicator's launch queue (QUEUED) */
    launch_set *set;      /* strict: its launch group, or NULL */
    int other_tag;        /* WHY_ORDER: the other side's tag */
    int ghost;            /* strict: an eager send's message, owned by the world */
    void *staged;         /* ghost: its copy of the payload (bytes) */
};

typedef struct local_queue {
    local_req *head, *tail;
} local_queue;

typedef struct local_mbox {
    local_queue sends; /* messages addressed to this rank, unmatched, in post order */
    local_queue recvs; /* receives this rank posted, unmatched, in post order */
} local_mbox;

/* A set of ranks with its own message space: the world, or a split of a group. */
struct local_group {
    uint64_t id;
    int size;
    int *world;       /* (size) group rank -> world rank */
    local_mbox *mbox; /* (size) */
    int refs;         /* communicators still open on it */
    /* Made by split number split_seq of group parent_id with this color, so the
     * members find the one instance (0, 0, -1 for the world). */
    uint64_t parent_id, split_seq;
    int color;
    local_group *next; /* the world's list */
};

struct local_world {
    pthread_mutex_t mu;
    int nranks;
    pthread_cond_t *cond; /* (nranks) rank w sleeps on cond[w] */
    local_queue *todo;    /* (nranks) matched receives of rank w awaiting the copy */
    int *departed;        /* (nranks) 1 once rank w's function returned */
    int *inflight;        /* (nranks) copies running into or out of rank w's buffers */
    int aborted_by;       /* world rank that called abort, or -1 */
    int abort_code;
    uint64_t next_id;
    local_group *groups;  /* every live group */
    local_group *all;     /* the world group: every rank, rank i is world rank i */
    rv_comm_copy_fn copy; /* moves a message; NULL: memcpy (rv_local_run_copy) */
    int strict;           /* NCCL-like groups, rendezvous and ordering (see top) */
    size_t eager;         /* strict: sends up to this many bytes complete at launch */
};

typedef struct local_ctx {
    local_world *w;
    local_group *g;
    uint64_t nsplits;  /* splits made on this communicator so far */
    local_queue queued; /* strict: posted since the last launch, in post order */
} local_ctx;

static rv_status local_make_comm(local_world *w, local_group *g, int rank, int world_rank,
                                 double timeout_s, rv_comm **out);

/* ---- queues ------------------------------------------------------------------------ */

static void queue_push(local_queue *q, local_req *r)
{
    r->next = NULL;
    if (q->tail)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
}

/* Unlinks r, whose predecessor in q is prev (NULL: r is the head). */
static void queue_unlink(local_queue *q, local_req *prev, local_req *r)
{
    if (prev)
        prev->next = r->next;
    else
        q->head = r->next;
    if (q->tail == r)
        q->tail = prev;
    r->next = NULL;
}

/* Removes and returns the first request with this owner, peer and tag (any tag
 * when any_tag: strict mode matches in post order), or NULL. */
static local_req *queue_take(local_queue *q, int owner, int peer, int tag, int any_tag)
{
    for (local_req *prev = NULL, *r = q->head; r; prev = r, r = r->next)
        if (r->owner == owner && r->peer == peer && (any_tag || r->tag == tag)) {
            queue_unlink(q, prev, r);
            return r;
        }
    return NULL;
}

static void queue_remove(local_queue *q, local_req *r)
{
    for (local_req *prev = NULL, *it = q->head; it; prev = it, it = it->next)
        if (it == r) {
            queue_unlink(q, prev, r);
            return;
        }
}

/* The queue a posted (or, strict, a queued) request sits in. */
static local_queue *queue_of(local_req *r)
{
    if (r->state == REQ_QUEUED)
        return &((local_ctx *)r->base.comm->ctx)->queued;
    return r->is_send ? &r->g->mbox[r->peer].sends : &r->g->mbox[r->owner].recvs;
}

/* Frees a request and, for a ghost, its staged payload. */
static void req_free(local_req *r)
{
    if (!r)
        return;
    free(r->staged);
    free(r);
}

static int req_over(const local_req *r)
{
    return r->state == REQ_DONE || r->state == REQ_FAILED;
}

/* Strict: the first member of r's launch set that is not over (r itself first),
 * or NULL when the whole set is; r alone without a set. */
static local_req *set_open_member(local_req *r)
{
    if (!req_over(r))
        return r;
    if (!r->set)
        return NULL;
    for (int i = 0; i < r->set->n; i++)
        if (r->set->m[i] && !req_over(r->set->m[i]))
            return r->set->m[i];
    return NULL;
}

/* r leaves its launch set (it is being freed). */
static void set_leave(local_req *r)
{
    launch_set *set = r->set;
    if (!set)
        return;
    for (int i = 0; i < set->n; i++)
        if (set->m[i] == r)
            set->m[i] = NULL;
    if (--set->refs == 0) {
        free(set->m);
        free(set);
    }
    r->set = NULL;
}

/* ---- time -------------------------------------------------------------------------- */

static struct timespec abs_time(double t)
{
    struct timespec ts;
    if (t < 0)
        t = 0;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* ---- matching, withdrawing, copying (all with the mutex held) ------------------------ */

/* Pairs send s with receive r (both just taken from their queues): the receive
 * goes to its owner's todo list and the owner is woken to copy it. */
static void pair(local_world *w, local_req *s, local_req *r)
{
    s->state = r->state = REQ_MATCHED;
    s->match = r;
    r->match = s;
    queue_push(&w->todo[r->owner_w], r);
    pthread_cond_broadcast(&w->cond[r->owner_w]);
}

static void fail_req(local_world *w, local_req *r, fail_why why)
{
    if (r->ghost) { /* nobody waits on an eager send's message: drop it */
        req_free(r);
        return;
    }
    r->state = REQ_FAILED;
    r->why = why;
    r->match = NULL;
    pthread_cond_broadcast(&w->cond[r->owner_w]);
}

/* Takes r back from wherever it waits (its group queue, or its pairing, whose
 * other side then fails too) and fails it. Not for REQ_COPYING. */
static void withdraw(local_world *w, local_req *r, fail_why why)
{
    if (r->state == REQ_POSTED || r->state == REQ_QUEUED) {
        queue_remove(queue_of(r), r);
    } else if (r->state == REQ_MATCHED) {
        local_req *recv = r->is_send ? r->match : r;
        queue_remove(&w->todo[recv->owner_w], recv);
        fail_req(w, r->match, WHY_WITHDRAWN);
    }
    fail_req(w, r, why);
}

/* Copies every matched receive of world rank me (the progress step). The copy
 * runs without the mutex. */
static void progress(local_world *w, int me)
{
    local_req *r;
    while ((r = w->todo[me].head) != NULL) {
        queue_unlink(&w->todo[me], NULL, r);
        local_req *s = r->match;
        const int fits = s->bytes <= r->bytes;
        s->state = r->state = REQ_COPYING;
        w->inflight[me]++;
        if (!s->ghost) /* a ghost's bytes are its own, not its sender's */
            w->inflight[s->owner_w]++;
        pthread_mutex_unlock(&w->mu);
        int copied = 1;
        if (fits && s->bytes) {
            if (w->copy)
                copied = w->copy(r->rbuf, s->sbuf, s->bytes) == 0;
            else
                memcpy(r->rbuf, s->sbuf, s->bytes);
        }
        pthread_mutex_lock(&w->mu);
        if (!copied) {
            s->state = r->state = REQ_FAILED;
            s->why = r->why = WHY_COPY;
        } else if (fits) {
            s->state = r->state = REQ_DONE;
        } else {
            s->state = r->state = REQ_FAILED;
            s->why = r->why = WHY_TRUNCATED;
            s->other_bytes = r->bytes;
            r->other_bytes = s->bytes;
        }
        s->match = r->match = NULL;
        w->inflight[me]--;
        if (s->ghost) {
            req_free(s);
        } else {
            w->inflight[s->owner_w]--;
            pthread_cond_broadcast(&w->cond[s->owner_w]);
        }
        pthread_cond_broadcast(&w->cond[me]);
    }
}

/* Fails r if the run was aborted, or if it is still unmatched and its peer left;
 * 1 if it did. */
static int fail_if_gone(local_world *w, local_req *r)
{
    if (r->state != REQ_POSTED && r->state != REQ_MATCHED)
        return 0;
    if (w->aborted_by >= 0) {
        withdraw(w, r, WHY_ABORTED);
        return 1;
    }
    if (r->state == REQ_POSTED && w->departed[r->peer_w]) {
        withdraw(w, r, WHY_LEFT);
        return 1;
    }
    return 0;
}

/* Makes r (REQ_POSTED) match-able: pairs it with the first waiting counterpart, or
 * queues it for one. Strict: the counterpart is the pair's first whatever its tag,
 * and one of another tag or size fails both sides (NCCL would mix the bytes up). */
static void post_match(local_world *w, local_req *r)
{
    local_group *g = r->g;
    local_req *o = r->is_send
                       ? queue_take(&g->mbox[r->peer].recvs, r->peer, r->owner, r->tag, w->strict)
                       : queue_take(&g->mbox[r->owner].sends, r->peer, r->owner, r->tag, w->strict);
    if (!o) {
        queue_push(queue_of(r), r);
        return;
    }
    local_req *snd = r->is_send ? r : o, *rcv = r->is_send ? o : r;
    if (w->strict && (snd->tag != rcv->tag || snd->bytes != rcv->bytes)) {
        snd->other_tag = rcv->tag, snd->other_bytes = rcv->bytes;
        rcv->other_tag = snd->tag, rcv->other_bytes = snd->bytes;
        fail_req(w, rcv, WHY_ORDER);
        fail_req(w, snd, WHY_ORDER); /* frees a ghost */
        return;
    }
    pair(w, snd, rcv);
}

/* Strict: the message of an eager send s, staged so s completes now; NULL when it
 * cannot be staged (s then waits for its receiver, which is only stricter). */
static local_req *eager_ghost(local_world *w, const local_req *s)
{
    local_req *gh = malloc(sizeof *gh);
    if (!gh)
        return NULL;
    *gh = *s;
    gh->next = NULL;
    gh->set = NULL;
    gh->ghost = 1;
    gh->staged = NULL;
    if (s->bytes) {
        if (!(gh->staged = malloc(s->bytes)) ||
            (w->copy ? w->copy(gh->staged, s->sbuf, s->bytes) != 0
                     : (memcpy(gh->staged, s->sbuf, s->bytes), 0))) {
            req_free(gh);
            return NULL;
        }
    }
    gh->sbuf = gh->staged;
    return gh;
}

/* Strict: everything x queued goes out as one launch set. Without memory for the
 * set its members are not tied together: weaker than NCCL, never wrong. */
static void launch(local_world *w, local_ctx *x)
{
    int n = 0;
    for (local_req *r = x->queued.head; r; r = r->next)
        n++;
    if (n == 0)
        return;
    launch_set *set = calloc(1, sizeof *set);
    if (set && !(set->m = calloc((size_t)n, sizeof *set->m))) {
        free(set);
        set = NULL;
    }
    local_req *r;
    while ((r = x->queued.head) != NULL) {
        queue_unlink(&x->queued, NULL, r);
        r->state = REQ_POSTED;
        if (set) {
            set->m[set->n++] = r;
            set->refs++;
            r->set = set;
        }
        local_req *gh = r->is_send && r->bytes <= w->eager ? eager_ghost(w, r) : NULL;
        if (gh) {
            r->state = REQ_DONE;
            post_match(w, gh);
        } else {
            post_match(w, r);
        }
    }
}

/* ---- point-to-point ---------------------------------------------------------------- */

static rv_status new_req(rv_comm *c, int is_send, int peer, int tag, size_t bytes,
                         local_req **out)
{
    local_ctx *x = c->ctx;
    local_req *r = calloc(1, sizeof *r);
    if (!r) {
        char what[160];
        rv_comm_describe_p2p(what, sizeof what, is_send, peer, tag, bytes);
        return rv_fail(RV_ERR_NOMEM, "rank %d: %s: out of memory", c->rank, what);
    }
    r->base.comm = c;
    r->g = x->g;
    r->is_send = is_send;
    r->owner = c->rank;
    r->peer = peer;
    r->owner_w = x->g->world[c->rank];
    r->peer_w = x->g->world[peer];
    r->tag = tag;
    r->bytes = bytes;
    r->state = REQ_POSTED;
    *out = r;
    return RV_OK;
}

static rv_status local_isend(rv_comm *c, const void *buf, size_t bytes, int peer, int tag,
                             rv_comm_request **out)
{
    local_ctx *x = c->ctx;
    local_req *s = NULL;
    rv_status st = new_req(c, 1, peer, tag, bytes, &s);
    if (st != RV_OK)
        return st;
    s->sbuf = buf;
    pthread_mutex_lock(&x->w->mu);
    /* A receive posted by peer for (this rank, tag) takes it; else it waits.
     * Strict: it only queues until the next launch. */
    if (x->w->strict) {
        s->state = REQ_QUEUED;
        queue_push(&x->queued, s);
    } else {
        post_match(x->w, s);
    }
    pthread_mutex_unlock(&x->w->mu);
    *out = &s->base;
    return RV_OK;
}

static rv_status local_irecv(rv_comm *c, void *buf, size_t bytes, int peer, int tag,
                             rv_comm_request **out)
{
    local_ctx *x = c->ctx;
    local_req *r = NULL;
    rv_status st = new_req(c, 0, peer, tag, bytes, &r);
    if (st != RV_OK)
        return st;
    r->rbuf = buf;
    pthread_mutex_lock(&x->w->mu);
    /* The first message from peer with this tag, if one waits. */
    if (x->w->strict) {
        r->state = REQ_QUEUED;
        queue_push(&x->queued, r);
    } else {
        post_match(x->w, r);
    }
    pthread_mutex_unlock(&x->w->mu);
    *out = &r->base;
    return RV_OK;
}

/* The message of a failed request, set on this thread. */
static rv_status report(rv_comm *c, local_req *r)
{
    local_ctx *x = c->ctx;
    char who[64], what[160];
    rv_comm_who(c, who, sizeof who);
    rv_comm_describe_p2p(what, sizeof what, r->is_send, r->peer, r->tag, r->bytes);
    switch (r->why) {
    case WHY_TRUNCATED:
        if (r->is_send)
            return rv_fail(RV_ERR_COMM, "%s: %s: rank %d's receive buffer holds only %zu bytes",
                           who, what, r->peer, r->other_bytes);
        return rv_fail(RV_ERR_COMM, "%s: %s: the message of %zu bytes does not fit", who,
                       what, r->other_bytes);
    case WHY_LEFT:
        return rv_fail(RV_ERR_COMM, "%s: %s: rank %d has left without %s it", who, what,
                       r->peer, r->is_send ? "receiving" : "sending");
    case WHY_ABORTED:
        return rv_fail(RV_ERR_COMM, "%s: %s: world rank %d aborted the run (code %d)", who,
                       what, x->w->aborted_by, x->w->abort_code);
    case WHY_TIMEOUT:
        return rv_fail(RV_ERR_TIMEOUT, "%s: %s: %s within %.1f s", who, what,
                       r->is_send ? "not received" : "no message", c->timeout_s);
    case WHY_WITHDRAWN:
        return rv_fail(RV_ERR_COMM, "%s: %s: rank %d gave up its side of the transfer", who,
                       what, r->peer);
    case WHY_COPY:
        return rv_fail(RV_ERR_BACKEND, "%s: %s: the device copy failed%s%s", who, what,
                       r->is_send ? "" : ": ", r->is_send ? "" : rv_last_error());
    case WHY_ORDER:
        return rv_fail(RV_ERR_COMM, "%s: %s: out of NCCL order: the pair's next %s is "
                       "tag %d, %zu bytes (strict mode matches in post order, as NCCL does)",
                       who, what, r->is_send ? "receive" : "message", r->other_tag,
                       r->other_bytes);
    case WHY_NONE:
        break;
    }
    return rv_fail(RV_ERR_INTERNAL, "%s: %s: failed for no recorded reason", who, what);
}

/* Fails r, and (strict) the open members of its launch set, whose peers are gone. */
static void fail_gone_set(local_world *w, local_req *r)
{
    fail_if_gone(w, r);
    if (r->set)
        for (int i = 0; i < r->set->n; i++)
            if (r->set->m[i])
                fail_if_gone(w, r->set->m[i]);
}

static rv_status local_test(rv_comm *c, rv_comm_request *req, int *done)
{
    local_ctx *x = c->ctx;
    local_req *r = (local_req *)req;
    pthread_mutex_lock(&x->w->mu);
    if (x->w->strict)
        launch(x->w, x);
    progress(x->w, r->owner_w);
    fail_gone_set(x->w, r);
    req_state state = r->state;
    int set_done = set_open_member(r) == NULL;
    pthread_mutex_unlock(&x->w->mu);
    *done = state == REQ_DONE && set_done;
    return state == REQ_FAILED ? report(c, r) : RV_OK;
}

static rv_status local_wait(rv_comm *c, rv_comm_request *req, double deadline)
{
    local_ctx *x = c->ctx;
    local_world *w = x->w;
    local_req *r = (local_req *)req;
    pthread_cond_t *cond = &w->cond[r->owner_w];
    const struct timespec until = abs_time(deadline);
    local_req *late = NULL; /* strict: the member of r's launch set the deadline failed */
    pthread_mutex_lock(&w->mu);
    if (w->strict)
        launch(w, x);
    for (;;) {
        progress(w, r->owner_w); /* may copy this request, or others of this rank */
        fail_gone_set(w, r);
        if (r->state == REQ_FAILED)
            break;
        /* r, or (strict) a member of its launch set that holds the set back */
        local_req *open = set_open_member(r);
        if (!open)
            break;
        if (open->state == REQ_COPYING) { /* finite: the receiver's memcpy is running */
            pthread_cond_wait(cond, &w->mu);
            continue;
        }
        if (rv_clock_s() >= deadline) {
            withdraw(w, open, WHY_TIMEOUT);
            if (open != r)
                late = open;
            break;
        }
        pthread_cond_timedwait(cond, &w->mu, &until);
    }
    req_state state = r->state;
    pthread_mutex_unlock(&w->mu);
    if (late && state == REQ_DONE)
        return report(c, late); /* names the transfer the whole group waited for */
    return state == REQ_DONE ? RV_OK : report(c, r);
}

static void local_request_free(rv_comm *c, rv_comm_request *req)
{
    local_ctx *x = c->ctx;
    local_world *w = x->w;
    local_req *r = (local_req *)req;
    pthread_mutex_lock(&w->mu);
    /* A matched receive is completed (a message it took is consumed); any other
     * pending request is withdrawn; a queued one (strict) was never launched. */
    if (r->state == REQ_QUEUED)
        queue_remove(&x->queued, r);
    if (r->state == REQ_MATCHED && !r->is_send)
        progress(w, r->owner_w);
    if (r->state == REQ_POSTED || r->state == REQ_MATCHED)
        withdraw(w, r, WHY_WITHDRAWN);
    while (r->state == REQ_COPYING)
        pthread_cond_wait(&w->cond[r->owner_w], &w->mu);
    set_leave(r);
    pthread_mutex_unlock(&w->mu);
    free(r);
}

/* ---- the rest of the table --------------------------------------------------------- */

static rv_status local_abort(rv_comm *c, int code)
{
    local_ctx *x = c->ctx;
    local_world *w = x->w;
    pthread_mutex_lock(&w->mu);
    if (w->aborted_by < 0) {
        w->aborted_by = c->world_rank;
        w->abort_code = code;
    }
    for (int i = 0; i < w->nranks; i++)
        pthread_cond_broadcast(&w->cond[i]);
    pthread_mutex_unlock(&w->mu);
    return RV_OK;
}

static void group_free(local_group *g)
{
    if (!g)
        return;
    /* Eager messages nobody received (their receiver left or failed first). */
    for (int p = 0; g->mbox && p < g->size; p++)
        for (local_req *it = g->mbox[p].sends.head, *nx; it; it = nx) {
            nx = it->next;
            if (it->ghost)
                req_free(it);
        }
    free(g->world);
    free(g->mbox);
    free(g);
}

static local_group *group_new(local_world *w, int size)
{
    local_group *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->world = calloc((size_t)size, sizeof *g->world);
    g->mbox = calloc((size_t)size, sizeof *g->mbox);
    if (!g->world || !g->mbox) {
        group_free(g);
        return NULL;
    }
    g->id = w->next_id++;
    g->size = size;
    g->color = -1;
    return g;
}

static rv_status local_split(rv_comm *c, int color, int key, double deadline, rv_comm **out)
{
    local_ctx *x = c->ctx;
    local_world *w = x->w;
    int *members = malloc(sizeof(int) * (size_t)c->size);
    int n = 0, new_rank = -1;
    rv_status st = RV_OK;
    if (!members) {
        st = rv_fail(RV_ERR_NOMEM, "rank %d: split: out of memory", c->rank);
        goto end;
    }
    if ((st = rv_comm_split_plan(c, color, key, deadline, members, &n, &new_rank)) != RV_OK)
        goto end;
    uint64_t seq = x->nsplits++;
    if (color == RV_COMM_UNDEFINED)
        goto end;
    /* The first member to get here makes the group, the others find it. */
    pthread_mutex_lock(&w->mu);
    local_group *g = w->groups;
    while (g && !(g->parent_id == x->g->id && g->split_seq == seq && g->color == color))
        g = g->next;
    if (!g && (g = group_new(w, n)) != NULL) {
        for (int i = 0; i < n; i++)
            g->world[i] = x->g->world[members[i]];
        g->parent_id = x->g->id;
        g->split_seq = seq;
        g->color = color;
        g->refs = n;
        g->next = w->groups;
        w->groups = g;
    }
    pthread_mutex_unlock(&w->mu);
    if (!g) {
        st = rv_fail(RV_ERR_NOMEM, "rank %d: split: out of memory", c->rank);
        goto end;
    }
    st = local_make_comm(w, g, new_rank, c->world_rank, c->timeout_s, out);
end:
    free(members);
    return st;
}

static void local_destroy(rv_comm *c)
{
    local_ctx *x = c->ctx;
    local_world *w = x->w;
    pthread_mutex_lock(&w->mu);
    local_req *q; /* strict: requests queued and never launched nor freed */
    while ((q = x->queued.head) != NULL) {
        queue_unlink(&x->queued, NULL, q);
        set_leave(q);
        free(q);
    }
    if (--x->g->refs == 0) {
        local_group **p = &w->groups;
        while (*p && *p != x->g)
            p = &(*p)->next;
        if (*p)
            *p = x->g->next;
        group_free(x->g);
    }
    pthread_mutex_unlock(&w->mu);
    free(x);
    free(c);
}

/* Strict: launches what this rank queued (rv_comm_start); else nothing to do. */
static rv_status local_start(rv_comm *c)
{
    local_ctx *x = c->ctx;
    pthread_mutex_lock(&x->w->mu);
    if (x->w->strict)
        launch(x->w, x);
    pthread_mutex_unlock(&x->w->mu);
    return RV_OK;
}

/* Strict collectives launch the queue first, as NCCL's do: a collective's own
 * messages never join the point-to-point group posted before it. */
static rv_status strict_allreduce(rv_comm *c, const void *sendbuf, void *recvbuf,
                                  size_t count, rv_comm_dtype dtype, double deadline)
{
    local_start(c);
    return rv_coll_allreduce(c, sendbuf, recvbuf, count, dtype, deadline);
}

static rv_status strict_allgather(rv_comm *c, const void *sendbuf, void *recvbuf, size_t bytes,
                                  double deadline)
{
    local_start(c);
    return rv_coll_allgather(c, sendbuf, recvbuf, bytes, deadline);
}

static rv_status strict_alltoall(rv_comm *c, const void *sendbuf, void *recvbuf, size_t bytes,
                                 double deadline)
{
    local_start(c);
    return rv_coll_alltoall(c, sendbuf, recvbuf, bytes, deadline);
}

static rv_status strict_barrier(rv_comm *c, double deadline)
{
    local_start(c);
    return rv_coll_barrier(c, deadline);
}

static const rv_comm local_table = {
    /* .name          = */ "local",
    /* .ctx           = */ NULL,
    /* .rank          = */ 0,
    /* .size          = */ 1,
    /* .world_rank    = */ 0,
    /* .timeout_s     = */ RV_COMM_DEFAULT_TIMEOUT_S,
    /* .device_memory = */ 0,
    /* .move          = */ NULL,
    /* .isend         = */ local_isend,
    /* .irecv         = */ local_irecv,
    /* .test          = */ local_test,
    /* .wait          = */ local_wait,
    /* .request_free  = */ local_request_free,
    /* .sendrecv      = */ rv_coll_sendrecv,
    /* .allreduce     = */ rv_coll_allreduce,
    /* .allgather     = */ rv_coll_allgather,
    /* .alltoall      = */ rv_coll_alltoall,
    /* .barrier       = */ rv_coll_barrier,
    /* .split         = */ local_split,
    /* .abort         = */ local_abort,
    /* .destroy       = */ local_destroy,
    /* .sent_bytes    = */ 0,
    /* .start         = */ local_start,
};

static rv_status local_make_comm(local_world *w, local_group *g, int rank, int world_rank,
                                 double timeout_s, rv_comm **out)
{
    rv_comm *c = malloc(sizeof *c);
    local_ctx *x = calloc(1, sizeof *x);
    if (!c || !x) {
        free(c);
        free(x);
        return rv_fail(RV_ERR_NOMEM, "rank %d: local communicator: out of memory", rank);
    }
    *c = local_table;
    x->w = w;
    x->g = g;
    c->ctx = x;
    c->rank = rank;
    c->size = g->size;
    c->world_rank = world_rank;
    c->timeout_s = timeout_s;
    c->device_memory = w->copy != NULL;
    c->move = w->copy;
    if (w->strict) {
        c->allreduce = strict_allreduce;
        c->allgather = strict_allgather;
        c->alltoall = strict_alltoall;
        c->barrier = strict_barrier;
    }
    *out = c;
    return RV_OK;
}

/* ---- the world ------------------------------------------------------------------- */

rv_status local_world_create(int nranks, local_world **out)
{
    local_world *w = calloc(1, sizeof *w);
    pthread_condattr_t attr;
    int attr_ok = 0, ncond = 0;
    rv_status st = RV_OK;
    *out = NULL;
    if (!w)
        return rv_fail(RV_ERR_NOMEM, "local run of %d ranks: out of memory", nranks);
    w->nranks = nranks;
    w->aborted_by = -1;
    w->cond = calloc((size_t)nranks, sizeof *w->cond);
    w->todo = calloc((size_t)nranks, sizeof *w->todo);
    w->departed = calloc((size_t)nranks, sizeof *w->departed);
    w->inflight = calloc((size_t)nranks, sizeof *w->inflight);
    local_group *g = group_new(w, nranks);
    if (!w->cond || !w->todo || !w->departed || !w->inflight || !g) {
        st = rv_fail(RV_ERR_NOMEM, "local run of %d ranks: out of memory", nranks);
        goto end;
    }
    for (int i = 0; i < nranks; i++)
        g->world[i] = i;
    g->refs = nranks;
    w->groups = w->all = g;
    g = NULL;
    if (pthread_mutex_init(&w->mu, NULL) != 0 || pthread_condattr_init(&attr) != 0) {
        st = rv_fail(RV_ERR_BACKEND, "local run of %d ranks: cannot create a mutex", nranks);
        goto end;
    }
    attr_ok = 1;
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    for (; ncond < nranks; ncond++)
        if (pthread_cond_init(&w->cond[ncond], &attr) != 0) {
            st = rv_fail(RV_ERR_BACKEND, "local run of %d ranks: cannot create a condition "
                         "variable", nranks);
            goto end;
        }
    *out = w;
    w = NULL;
end:
    if (attr_ok)
        pthread_condattr_destroy(&attr);
    group_free(g);
    if (w) {
        for (int i = 0; i < ncond; i++)
            pthread_cond_destroy(&w->cond[i]);
        if (attr_ok)
            pthread_mutex_destroy(&w->mu);
        group_free(w->groups);
        free(w->cond);
        free(w->todo);
        free(w->departed);
        free(w->inflight);
        free(w);
    }
    return st;
}

void local_world_set_copy(local_world *w, rv_comm_copy_fn copy)
{
    w->copy = copy;
}

void local_world_set_strict(local_world *w, int strict, size_t eager_bytes)
{
    w->strict = strict;
    w->eager = eager_bytes;
}

rv_status local_world_comm(local_world *w, int rank, double timeout_s, rv_comm **out)
{
    return local_make_comm(w, w->all, rank, rank, timeout_s, out);
}

void local_world_depart(local_world *w, int rank)
{
    pthread_mutex_lock(&w->mu);
    w->departed[rank] = 1;
    while (w->inflight[rank] > 0)
        pthread_cond_wait(&w->cond[rank], &w->mu);
    /* Withdraw everything it left behind: nobody will wait on those requests, and
     * their buffers may already be gone. Its matched receives fail their senders. */
    local_req *r;
    while ((r = w->todo[rank].head) != NULL) {
        queue_unlink(&w->todo[rank], NULL, r);
        fail_req(w, r->match, WHY_LEFT);
        set_leave(r);
        free(r);
    }
    /* Peers' receives matched with its sends. */
    for (int i = 0; i < w->nranks; i++) {
        local_req *prev = NULL, *it = w->todo[i].head;
        while (it) {
            local_req *nx = it->next;
            if (it->match->owner_w == rank && !it->match->ghost) {
                queue_unlink(&w->todo[i], prev, it);
                set_leave(it->match);
                free(it->match);
                fail_req(w, it, WHY_LEFT);
            } else {
                prev = it;
            }
            it = nx;
        }
    }
    /* Its unmatched receives and sends, in every group it belongs to. */
    for (local_group *g = w->groups; g; g = g->next)
        for (int p = 0; p < g->size; p++) {
            local_queue *rq = &g->mbox[p].recvs, *sq = &g->mbox[p].sends;
            for (local_req *prev = NULL, *it = rq->head, *nx; it; it = nx) {
                nx = it->next;
                if (it->owner_w == rank) {
                    queue_unlink(rq, prev, it);
                    set_leave(it);
                    free(it);
                } else {
                    prev = it;
                }
            }
            for (local_req *prev = NULL, *it = sq->head, *nx; it; it = nx) {
                nx = it->next;
                if (it->owner_w == rank && !it->ghost) { /* its eager messages stay */
                    queue_unlink(sq, prev, it);
                    set_leave(it);
                    free(it);
                } else {
                    prev = it;
                }
            }
        }
    for (int i = 0; i < w->nranks; i++)
        pthread_cond_broadcast(&w->cond[i]);
    pthread_mutex_unlock(&w->mu);
}

void local_world_destroy(local_world **pw)
{
    local_world *w = pw ? *pw : NULL;
    if (!w)
        return;
    for (int i = 0; i < w->nranks; i++)
        pthread_cond_destroy(&w->cond[i]);
    pthread_mutex_destroy(&w->mu);
    while (w->groups) {
        local_group *g = w->groups;
        w->groups = g->next;
        group_free(g);
    }
    free(w->cond);
    free(w->todo);
    free(w->departed);
    free(w->inflight);
    free(w);
    *pw = NULL;
}
