/* embed_dispatch.c: which group of `ringvit embed` embeds which input. The
 * next unclaimed input goes to the first group that asks (rank 0 of a group
 * asks when it is about to need one), so a group held by a long recording
 * does not hold the others; the outcome of each input goes to world rank 0's
 * report (log line, --json, counts) in the order inputs finish. With --shard
 * the next input is the next whose claim file this job wins (embed_shard.c),
 * and an input's end releases its claim. The state
 * lives in world rank 0's embed_batch, under its lock:
 *   - local ranks (threads of one process) reach it directly;
 *   - under MPI the other groups' rank 0 send messages (claim, done, finish)
 *     to world rank 0, where a thread of its own answers them on a
 *     communicator of its own (MPI_THREAD_MULTIPLE) while rank 0 computes.
 *     The thread starts once rank 0 has made all its communicators, and every
 *     process has the dispatch communicator (a barrier) before any claim: a
 *     claim sent while rank 0 was still making its group's communicators, the
 *     thread already polling, was once never received (Debian's OpenMPI 4.1).
 * A group that finishes waits (beating its watch, so its ranks wait on it)
 * until every group has finished, then gets the batch's counts, so every
 * process of an MPI job exits with the same status. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "embed_rank.h"
#include "rv_clock.h"

enum { MSG_CLAIM = 1, MSG_DONE = 2, MSG_FINISH = 3 };
#define DISPATCH_TAG 11

/* A group's rank 0 to world rank 0. */
typedef struct dispatch_msg {
    int32_t kind;           /* MSG_* */
    int32_t index;          /* MSG_DONE: the input */
    int32_t broken, stopped; /* MSG_FINISH */
    embed_result res;       /* MSG_DONE: the outcome; MSG_FINISH: res.error says why broken */
} dispatch_msg;

/* World rank 0's answer: a claim's input, or the batch's counts. */
typedef struct dispatch_reply {
    int32_t index;          /* -1: none left */
    embed_counts counts;    /* at the end: the batch's */
} dispatch_reply;

struct embed_dispatch {
    embed_batch *b;
    embed_rank *k;
    int remote;             /* MPI, not world rank 0: messages to world rank 0 */
    rv_comm *comm;          /* MPI with several groups: the messages' communicator */
    pthread_t thread;       /* world rank 0 under MPI: answers the other groups */
    int started, thread_on;
    atomic_int quit;
};

static void nap_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* ---- the state, in world rank 0's process (b->lock held) ------------------------------ */

/* The next input: in list order, or with --shard the next whose claim file
 * this job wins (embed_shard.c); a claim that cannot be written stops the batch. */
static int claim_locked(embed_batch *b)
{
    if (b->fatal || embed_stop_signal)
        return -1;
    if (b->shard) {
        int index = -1;
        if (embed_shard_next(b->shard, &index) != RV_OK) {
            snprintf(b->fatal_msg, sizeof b->fatal_msg, "%s", rv_last_error());
            b->fatal = 1;
            pthread_cond_broadcast(&b->changed);
        }
        return index;
    }
    if (b->next >= b->n)
        return -1;
    return b->next++;
}

static void done_locked(embed_batch *b, int index, const embed_result *res)
{
    if (index < 0 || index >= b->n)
        return;
    /* The output is in place: the claim goes (or says failed) before the log line. */
    embed_shard_done(b->shard, index, res->status, res->error);
    b->res[index] = *res;
    b->counts[res->status]++;
    b->done++;
    embed_report_done(b->report, index, &b->in[index], res);
}

static void finish_locked(embed_batch *b, int broken, int stopped, const char *msg)
{
    b->groups_left--;
    if (broken) {
        if (!b->fatal && msg && msg[0])
            snprintf(b->fatal_msg, sizeof b->fatal_msg, "%s", msg);
        b->fatal = 1;
    }
    b->stopped |= stopped;
    pthread_cond_broadcast(&b->changed);
}

static void counts_locked(const embed_batch *b, embed_counts *c)
{
    *c = (embed_counts){.ok = b->counts[EMBED_OK], .failed = b->counts[EMBED_FAILED],
                        .skipped = b->counts[EMBED_SKIPPED], .fatal = b->fatal,
                        .stopped = b->stopped || embed_stop_signal};
}

/* One wait of at most ms on the batch's condition (its lock held), then a beat
 * of the group's watch with the lock released: its ranks wait on this one. */
static void wait_beating(embed_batch *b, long ms, rv_embed_job *job)
{
    struct timespec until = rv_clock_realtime_after(ms * 1e-3);
    pthread_cond_timedwait(&b->changed, &b->lock, &until);
    pthread_mutex_unlock(&b->lock);
    rv_embed_beat(job);
    pthread_mutex_lock(&b->lock);
}

/* ---- world rank 0's thread under MPI ---------------------------------------------------- */

static rv_status reply(embed_dispatch *d, int peer, const dispatch_reply *r)
{
    rv_comm_request *q = NULL;
    rv_status st = rv_comm_isend(d->comm, r, sizeof *r, peer, DISPATCH_TAG, &q);
    return st != RV_OK ? st : rv_comm_wait(&q);
}

static void *serve(void *arg)
{
    embed_dispatch *d = arg;
    embed_batch *b = d->b;
    const int C = d->k->size, G = d->k->groups;
    dispatch_msg *msg = calloc((size_t)G, sizeof *msg);
    rv_comm_request **req = calloc((size_t)G, sizeof *req);
    int *waiting = calloc((size_t)G, sizeof *waiting); /* finished, owed the counts */
    rv_status st = !msg || !req || !waiting ? RV_ERR_NOMEM : RV_OK;
    for (int g = 1; g < G && st == RV_OK; g++)
        st = rv_comm_irecv(d->comm, &msg[g], sizeof msg[g], g * C, DISPATCH_TAG, &req[g]);
    while (st == RV_OK) {
        int busy = 0;
        for (int g = 1; g < G && st == RV_OK; g++) {
            int got = 0;
            if (!req[g] || (st = rv_comm_test(&req[g], &got)) != RV_OK || !got)
                continue;
            busy = 1;
            dispatch_msg *m = &msg[g];
            dispatch_reply r = {.index = -1};
            pthread_mutex_lock(&b->lock);
            if (m->kind == MSG_CLAIM)
                r.index = claim_locked(b);
            else if (m->kind == MSG_DONE)
                done_locked(b, m->index, &m->res);
            else
                finish_locked(b, m->broken, m->stopped, m->res.error);
            pthread_mutex_unlock(&b->lock);
            if (m->kind == MSG_FINISH) {
                waiting[g] = !m->broken;
                continue; /* the group sends nothing more */
            }
            if (m->kind == MSG_CLAIM)
                st = reply(d, g * C, &r);
            if (st == RV_OK)
                st = rv_comm_irecv(d->comm, &msg[g], sizeof msg[g], g * C, DISPATCH_TAG, &req[g]);
        }
        pthread_mutex_lock(&b->lock);
        int left = b->groups_left;
        dispatch_reply fin = {.index = -1};
        counts_locked(b, &fin.counts);
        pthread_mutex_unlock(&b->lock);
        if (left == 0) {
            for (int g = 1; g < G && st == RV_OK; g++)
                if (waiting[g])
                    st = reply(d, g * C, &fin);
            break;
        }
        /* Asked to quit while groups still work: rank 0's group broke (the job
         * ends). Otherwise rank 0 waits for left == 0 first, then quits: the
         * finals above go out before the thread ends. */
        if (atomic_load(&d->quit))
            break;
        if (!busy)
            nap_ms(1);
    }
    if (st != RV_OK) {
        /* The other groups can no longer be told anything: the batch stops. */
        pthread_mutex_lock(&b->lock);
        if (!b->fatal)
            snprintf(b->fatal_msg, sizeof b->fatal_msg, "handing out the inputs: %s",
                     rv_last_error());
        b->fatal = 1;
        b->groups_left = 0;
        pthread_cond_broadcast(&b->changed);
        pthread_mutex_unlock(&b->lock);
    }
    for (int g = 1; req && g < G; g++)
        rv_comm_request_free(&req[g]);
    free(msg), free(req), free(waiting);
    return NULL;
}

/* ---- a group's rank 0 ------------------------------------------------------------------- */

static dispatch_msg msg_of(int kind, int index)
{
    dispatch_msg m;
    memset(&m, 0, sizeof m);
    m.kind = kind;
    m.index = index;
    return m;
}

/* Sends m to world rank 0. */
static rv_status send_msg(embed_dispatch *d, const dispatch_msg *m)
{
    rv_comm_request *q = NULL;
    rv_status st = rv_comm_isend(d->comm, m, sizeof *m, 0, DISPATCH_TAG, &q);
    return st != RV_OK ? st : rv_comm_wait(&q);
}

/* Waits for world rank 0's reply, beating the group's watch (its ranks wait on
 * this one in the next vote); deadline 0: none (other groups may work long). */
static rv_status recv_reply(embed_dispatch *d, dispatch_reply *r, double deadline)
{
    rv_comm_request *q = NULL;
    rv_status st = rv_comm_irecv(d->comm, r, sizeof *r, 0, DISPATCH_TAG, &q);
    long ms = 1;
    while (st == RV_OK) {
        int got = 0;
        if ((st = rv_comm_test(&q, &got)) != RV_OK || got)
            break;
        if (deadline > 0 && rv_clock_s() > deadline) {
            st = rv_fail(RV_ERR_TIMEOUT, "rank %d: world rank 0 did not hand out an input within "
                         "%g s", d->k->world_rank, d->k->set->opts.timeout_s);
            break;
        }
        rv_embed_beat(d->k->job);
        nap_ms(ms);
        ms = ms < 20 ? ms * 2 : 20;
    }
    rv_comm_request_free(&q);
    return st;
}

rv_status embed_dispatch_claim(embed_dispatch *d, int *index)
{
    embed_batch *b = d->b;
    *index = -1;
    if (!d->remote) {
        pthread_mutex_lock(&b->lock);
        *index = claim_locked(b);
        pthread_mutex_unlock(&b->lock);
        return RV_OK;
    }
    if (embed_stop_signal)
        return RV_OK;
    dispatch_msg m = msg_of(MSG_CLAIM, -1);
    dispatch_reply r;
    rv_status st = send_msg(d, &m);
    if (st == RV_OK)
        st = recv_reply(d, &r, rv_clock_s() + d->k->set->opts.timeout_s);
    if (st == RV_OK)
        *index = r.index >= 0 && r.index < b->n ? r.index : -1;
    return st;
}

rv_status embed_dispatch_done(embed_dispatch *d, int index, const embed_result *res)
{
    embed_batch *b = d->b;
    if (!d->remote) {
        pthread_mutex_lock(&b->lock);
        done_locked(b, index, res);
        pthread_mutex_unlock(&b->lock);
        return RV_OK;
    }
    dispatch_msg m = msg_of(MSG_DONE, index);
    m.res = *res;
    /* This process's own count, for its exit status if world rank 0 cannot say. */
    b->done++;
    return send_msg(d, &m);
}

rv_status embed_dispatch_finish(embed_dispatch *d, int broken, int stopped, const char *msg,
                                embed_counts *counts)
{
    embed_batch *b = d->b;
    memset(counts, 0, sizeof *counts);
    if (!d->remote) {
        pthread_mutex_lock(&b->lock);
        finish_locked(b, broken, stopped, msg);
        while (!broken && b->groups_left > 0)
            wait_beating(b, 50, d->k->job);
        counts_locked(b, counts);
        pthread_mutex_unlock(&b->lock);
        return RV_OK;
    }
    dispatch_msg m = msg_of(MSG_FINISH, -1);
    m.broken = broken;
    m.stopped = stopped;
    snprintf(m.res.error, sizeof m.res.error, "%s", msg ? msg : "");
    rv_status st = send_msg(d, &m);
    if (st != RV_OK || broken)
        return st;
    dispatch_reply r;
    if ((st = recv_reply(d, &r, 0)) == RV_OK)
        *counts = r.counts;
    return st;
}

/* ---- set-up ---------------------------------------------------------------------------- */

rv_status embed_dispatch_create(rv_comm *world, embed_rank *k, embed_dispatch **out)
{
    *out = NULL;
    embed_dispatch *d = calloc(1, sizeof *d);
    if (!d)
        return rv_fail(RV_ERR_NOMEM, "rank %d: out of memory", world->rank);
    d->b = k->b;
    d->k = k;
    rv_status st = RV_OK;
    if (k->set->mpi && k->groups > 1) {
        d->remote = world->rank != 0;
        if (!rv_comm_mpi_thread_multiple())
            st = rv_fail(RV_ERR_UNSUPPORTED, "rank %d: several groups (--cp %d of %d ranks) need "
                         "an MPI with MPI_THREAD_MULTIPLE; this one has not got it (use --cp %d)",
                         world->rank, k->size, world->size, world->size);
        if (st == RV_OK)
            st = rv_comm_split(world, 0, world->rank, &d->comm);
        /* Every process has the communicator before any message moves on it. */
        if (st == RV_OK)
            st = rv_comm_barrier(d->comm);
    }
    if (st != RV_OK) {
        embed_dispatch_free(&d);
        return st;
    }
    *out = d;
    return RV_OK;
}

rv_status embed_dispatch_start(embed_dispatch *d)
{
    if (!d || !d->comm || d->remote || d->started)
        return RV_OK;
    d->started = 1;
    int e = pthread_create(&d->thread, NULL, serve, d);
    d->thread_on = e == 0;
    if (e != 0) {
        /* The other groups get no answer; their claims time out. */
        pthread_mutex_lock(&d->b->lock);
        d->b->fatal = 1;
        snprintf(d->b->fatal_msg, sizeof d->b->fatal_msg, "rank 0: cannot start the thread that "
                 "hands out the inputs: %s", strerror(e));
        pthread_mutex_unlock(&d->b->lock);
        return rv_fail(RV_ERR_NOMEM, "%s", d->b->fatal_msg);
    }
    return RV_OK;
}

void embed_dispatch_free(embed_dispatch **dp)
{
    embed_dispatch *d = *dp;
    if (!d)
        return;
    if (d->thread_on) {
        atomic_store(&d->quit, 1);
        pthread_join(d->thread, NULL);
    }
    rv_comm_free(&d->comm);
    free(d);
    *dp = NULL;
}
