/* comm_vote.c: rv_comm_vote (rv_comm_vote.h). Each rank's record is a fixed
 * header (status, stop, message) followed by the caller's payload, gathered by
 * every rank through the watch. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rv_comm_vote.h"

typedef struct vote_head {
    int32_t status;          /* rv_status of the rank's stage */
    int32_t stop;            /* 1: the rank was asked to stop */
    char msg[RV_VOTE_MSG];   /* rv_last_error() when status != RV_OK */
} vote_head;

#define VOTE_MAX_PAYLOAD ((size_t)1 << 20)

static size_t record_bytes(size_t payload)
{
    return (sizeof(vote_head) + payload + 7) & ~(size_t)7;
}

static const vote_head *head_of(const rv_vote *v, int r)
{
    return (const vote_head *)((const char *)v->buf + (size_t)r * record_bytes(v->bytes));
}

const void *rv_vote_payload(const rv_vote *v, int r)
{
    return (const char *)head_of(v, r) + sizeof(vote_head);
}

void rv_vote_release(rv_vote *v)
{
    if (!v)
        return;
    free(v->buf);
    memset(v, 0, sizeof *v);
}

/* A timeout or a lost peer inside a collective breaks the communicator,
 * whichever rank saw it. */
static int is_comm_error(int status)
{
    return status == RV_ERR_TIMEOUT || status == RV_ERR_COMM;
}

rv_vote_outcome rv_comm_vote(rv_comm_watch *w, rv_status mine, int stop, const void *payload,
                             size_t bytes, rv_vote *out)
{
    const int size = w ? rv_comm_watch_size(w) : 0;
    const size_t rec = record_bytes(bytes);
    char *mine_rec = NULL;
    out->first = -1;
    out->status = RV_OK;
    if (!w || bytes > VOTE_MAX_PAYLOAD) {
        rv_fail(RV_ERR_INVALID, "vote: %s", w ? "payload too large" : "no watch");
        return out->outcome = RV_VOTE_BROKEN;
    }
    if (out->cap < rec * (size_t)size) {
        void *p = realloc(out->buf, rec * (size_t)size);
        if (!p) {
            rv_fail(RV_ERR_NOMEM, "vote: out of memory");
            return out->outcome = RV_VOTE_BROKEN;
        }
        out->buf = p;
        out->cap = rec * (size_t)size;
    }
    if (!(mine_rec = calloc(1, rec))) {
        rv_fail(RV_ERR_NOMEM, "vote: out of memory");
        return out->outcome = RV_VOTE_BROKEN;
    }
    vote_head *h = (vote_head *)mine_rec;
    h->status = mine;
    h->stop = stop != 0;
    if (mine != RV_OK) {
        const char *m = rv_last_error();
        snprintf(h->msg, sizeof h->msg, "%s", m && m[0] ? m : rv_status_name(mine));
    }
    if (bytes && payload)
        memcpy(mine_rec + sizeof(vote_head), payload, bytes);
    out->ranks = size;
    out->bytes = bytes;
    rv_status st = rv_comm_watch_allgather(w, mine_rec, out->buf, rec);
    free(mine_rec);
    if (st != RV_OK)
        return out->outcome = RV_VOTE_BROKEN;
    int any_stop = 0, broken = 0, first = -1;
    for (int r = 0; r < size; r++) {
        const int s = head_of(out, r)->status;
        any_stop |= head_of(out, r)->stop;
        broken |= is_comm_error(s);
        if (s != RV_OK && (first < 0 || (!is_comm_error(s) &&
                                         is_comm_error(head_of(out, first)->status))))
            first = r;
    }
    if (first < 0)
        return out->outcome = any_stop ? RV_VOTE_STOP : RV_VOTE_OK;
    out->first = first;
    const vote_head *x = head_of(out, first);
    out->status = (rv_status)x->status;
    /* A rank stopped by a signal fails its stage; that is the stop, not an error. */
    if (any_stop)
        return out->outcome = RV_VOTE_STOP;
    char msg[RV_VOTE_MSG];
    memcpy(msg, x->msg, sizeof msg);
    msg[sizeof msg - 1] = '\0';
    /* Name the rank only when the ranks' outcomes differ. */
    int alike = 1;
    for (int q = 0; q < size; q++)
        alike &= head_of(out, q)->status == x->status &&
                 strncmp(head_of(out, q)->msg, msg, sizeof msg - 1) == 0;
    if (!alike && strncmp(msg, "rank ", 5) != 0)
        rv_fail((rv_status)x->status, "rank %d: %s", first, msg);
    else
        rv_fail((rv_status)x->status, "%s", msg);
    return out->outcome = broken ? RV_VOTE_BROKEN : RV_VOTE_FAILED;
}
