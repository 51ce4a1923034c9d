/* comm_watch.c: waits that end when a peer falls silent (rv_comm_watch.h).
 *
 * Every rank keeps one posted receive for each peer's next beat and at most one
 * beat of its own in flight to each peer, so beats never pile up behind a busy
 * receiver. A wait polls its requests with rv_comm_test, takes the beats that
 * arrived, beats itself, and fails once a peer it waits for has been silent for
 * the watch's silence; it sleeps between polls (50 us growing to 2 ms), so a
 * long wait costs no CPU. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_impl.h"
#include "rv_comm_watch.h"

enum { TAG_BEAT = 1, TAG_VOTE = 2 };

/* What a beat carries (nothing that matters). Static: a beat still in flight
 * when the watch is freed never reads freed memory. */
static const uint32_t beat_payload = 0;

struct rv_comm_watch {
    rv_comm *c;                 /* the watch's own communicator (split) */
    double silence_s;           /* a waited-for peer silent this long has failed */
    double period_s;            /* between this rank's beats: silence / 4 */
    double last_beat;           /* rv_clock_s() of this rank's last beat */
    double *heard;              /* (size) when each peer was last heard from */
    rv_comm_request **beat_in;  /* (size) the posted receive of each peer's next beat */
    rv_comm_request **beat_out; /* (size) this rank's beat to each peer, while pending */
    uint32_t *in_buf;           /* (size) where each peer's beat lands */
    rv_status broken;           /* RV_OK, or what the failed wait returned */
    char why[320];              /* its message, repeated by every later call */
};

rv_status rv_comm_watch_create(rv_comm *c, double silence_s, rv_comm_watch **out)
{
    rv_status st = RV_OK;
    rv_comm_watch *w = NULL;
    if (!c || !out || !(silence_s > 0) || !isfinite(silence_s))
        return rv_fail(RV_ERR_INVALID, "watch: needs a communicator and a silence > 0 s");
    *out = NULL;
    if (!(w = calloc(1, sizeof *w))) {
        st = rv_fail(RV_ERR_NOMEM, "watch: out of memory");
        goto fail;
    }
    w->silence_s = silence_s;
    w->period_s = silence_s / 4;
    const size_t n = (size_t)c->size;
    w->heard = calloc(n, sizeof *w->heard);
    w->beat_in = calloc(n, sizeof *w->beat_in);
    w->beat_out = calloc(n, sizeof *w->beat_out);
    w->in_buf = calloc(n, sizeof *w->in_buf);
    if (!w->heard || !w->beat_in || !w->beat_out || !w->in_buf) {
        st = rv_fail(RV_ERR_NOMEM, "watch: out of memory for %d ranks", c->size);
        goto fail;
    }
    if ((st = rv_comm_split(c, 0, c->rank, &w->c)) != RV_OK)
        goto fail;
    const double now = rv_clock_s();
    for (int p = 0; p < c->size; p++) {
        w->heard[p] = now;
        if (p != c->rank &&
            (st = rv_comm_irecv(w->c, &w->in_buf[p], sizeof w->in_buf[p], p, TAG_BEAT,
                                &w->beat_in[p])) != RV_OK)
            goto fail;
    }
    w->last_beat = now;
    *out = w;
    return RV_OK;
fail:
    rv_comm_watch_free(&w);
    return st;
}

void rv_comm_watch_free(rv_comm_watch **wp)
{
    rv_comm_watch *w = wp ? *wp : NULL;
    if (!w)
        return;
    if (w->c)
        for (int p = 0; p < w->c->size; p++) {
            rv_comm_request_free(&w->beat_in[p]);
            rv_comm_request_free(&w->beat_out[p]);
        }
    rv_comm_free(&w->c);
    free(w->heard);
    free(w->beat_in);
    free(w->beat_out);
    free(w->in_buf);
    free(w);
    *wp = NULL;
}

int rv_comm_watch_size(const rv_comm_watch *w)
{
    return w ? w->c->size : 0;
}

/* Takes every beat that has arrived (a peer heard from now) and reposts the
 * receive. A failed receive is left for the waits to find: the peer's own
 * requests fail the same way. */
static void take_beats(rv_comm_watch *w, double now)
{
    for (int p = 0; p < w->c->size; p++) {
        for (int k = 0; k < 64 && w->beat_in[p]; k++) {
            int done = 0;
            if (rv_comm_test(&w->beat_in[p], &done) != RV_OK || !done)
                break;
            w->heard[p] = now;
            if (rv_comm_irecv(w->c, &w->in_buf[p], sizeof w->in_buf[p], p, TAG_BEAT,
                              &w->beat_in[p]) != RV_OK)
                break;
        }
    }
}

void rv_comm_watch_beat(rv_comm_watch *w)
{
    if (!w || w->broken != RV_OK)
        return;
    const double now = rv_clock_s();
    if (now - w->last_beat < w->period_s)
        return;
    w->last_beat = now;
    int posted = 0;
    for (int p = 0; p < w->c->size; p++) {
        if (p == w->c->rank)
            continue;
        int done = 1;
        if (w->beat_out[p] && rv_comm_test(&w->beat_out[p], &done) != RV_OK)
            continue; /* that peer is gone: the waits on it say so */
        if (!done)
            continue; /* it has not taken the last one: no pile-up */
        posted |= rv_comm_isend(w->c, &beat_payload, sizeof beat_payload, p, TAG_BEAT,
                                &w->beat_out[p]) == RV_OK;
    }
    if (posted)
        rv_comm_start(w->c);
    take_beats(w, now);
}

/* Breaks the watch: this message for every later call. */
static rv_status watch_break(rv_comm_watch *w, rv_status st)
{
    w->broken = st;
    const char *m = rv_last_error();
    snprintf(w->why, sizeof w->why, "%s", m && m[0] ? m : rv_status_name(st));
    return st;
}

static rv_status watch_wait(rv_comm_watch *w, rv_comm_request **reqs, const int *peers, int n)
{
    rv_status st = RV_OK;
    const double start = rv_clock_s();
    /* Every peer gets the silence from now: its last beat may have waited, untaken,
     * through this rank's own long stage. */
    for (int p = 0; p < w->c->size; p++)
        if (w->heard[p] < start)
            w->heard[p] = start;
    long sleep_ns = 50000;
    for (;;) {
        int pending = 0;
        const double now = rv_clock_s();
        for (int i = 0; i < n; i++) {
            if (!reqs[i])
                continue;
            int done = 0;
            if ((st = rv_comm_test(&reqs[i], &done)) != RV_OK)
                goto fail;
            if (done) {
                if (peers[i] >= 0 && peers[i] < w->c->size)
                    w->heard[peers[i]] = now;
                sleep_ns = 50000;
            } else {
                pending++;
            }
        }
        if (!pending)
            return RV_OK;
        rv_comm_watch_beat(w);
        take_beats(w, now);
        for (int i = 0; i < n; i++) {
            const int p = peers[i];
            if (!reqs[i] || p < 0 || p >= w->c->size)
                continue;
            if (now - w->heard[p] > w->silence_s) {
                char who[64];
                rv_comm_who(w->c, who, sizeof who);
                st = rv_fail(RV_ERR_TIMEOUT,
                             "%s: rank %d has sent nothing for %.0f s (no message, no sign of "
                             "work): it is stopped, hung or cut off",
                             who, p, now - w->heard[p]);
                goto fail;
            }
        }
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 2000000)
            sleep_ns *= 2;
    }
fail:
    for (int i = 0; i < n; i++)
        rv_comm_request_free(&reqs[i]);
    return watch_break(w, st);
}

rv_status rv_comm_watch_waitall(rv_comm_watch *w, rv_comm_request **reqs, const int *peers,
                                int n)
{
    if (!w || n < 0 || (n > 0 && (!reqs || !peers)))
        return rv_fail(RV_ERR_INVALID, "watch wait: bad arguments");
    if (w->broken != RV_OK) {
        for (int i = 0; i < n; i++)
            rv_comm_request_free(&reqs[i]);
        return rv_fail(w->broken, "%s", w->why);
    }
    return watch_wait(w, reqs, peers, n);
}

rv_status rv_comm_watch_allgather(rv_comm_watch *w, const void *sendbuf, void *recvbuf,
                                  size_t bytes)
{
    rv_status st = RV_OK;
    rv_comm_request **reqs = NULL;
    int *peers = NULL;
    if (!w || (bytes && (!sendbuf || !recvbuf)))
        return rv_fail(RV_ERR_INVALID, "watch allgather: bad arguments");
    if (w->broken != RV_OK)
        return rv_fail(w->broken, "%s", w->why);
    const int me = w->c->rank, size = w->c->size;
    if (bytes)
        memmove((char *)recvbuf + (size_t)me * bytes, sendbuf, bytes);
    if (size == 1)
        return RV_OK;
    reqs = calloc(2 * (size_t)size, sizeof *reqs);
    peers = calloc(2 * (size_t)size, sizeof *peers);
    if (!reqs || !peers) {
        st = rv_fail(RV_ERR_NOMEM, "watch allgather: out of memory");
        goto end;
    }
    int n = 0;
    for (int p = 0; p < size; p++) {
        if (p == me)
            continue;
        peers[n] = p;
        if ((st = rv_comm_irecv(w->c, (char *)recvbuf + (size_t)p * bytes, bytes, p, TAG_VOTE,
                                &reqs[n++])) != RV_OK)
            break;
        peers[n] = p;
        if ((st = rv_comm_isend(w->c, (const char *)recvbuf + (size_t)me * bytes, bytes, p,
                                TAG_VOTE, &reqs[n++])) != RV_OK)
            break;
    }
    if (st == RV_OK && (st = rv_comm_start(w->c)) == RV_OK) {
        st = watch_wait(w, reqs, peers, n);
    } else {
        for (int i = 0; i < n; i++)
            rv_comm_request_free(&reqs[i]);
        watch_break(w, st);
    }
end:
    free(reqs);
    free(peers);
    return st;
}
