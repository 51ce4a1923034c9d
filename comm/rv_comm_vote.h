/* rv_comm_vote.h: the ranks of a group agreeing after a stage that may fail on
 * some of them (a corrupt stretch of one rank's part of a file, no memory on
 * another), so every rank takes the same branch at the same point instead of
 * leaving the others waiting in the next collective.
 *
 * Each rank calls rv_comm_vote with its stage's status (its rv_last_error() is
 * sent along when the status is not RV_OK), whether it was asked to stop (a
 * signal), and a payload: a struct the caller defines per vote (the counts of a
 * plan, a stage's timings), the same size on every rank. Every rank gets every
 * rank's payload and one outcome:
 *   RV_VOTE_OK      every rank succeeded;
 *   RV_VOTE_FAILED  some rank failed: rv_last_error() is its message, prefixed
 *                   "rank R: " when the ranks' outcomes differ; a rank's own
 *                   failure is reported rather than the timeouts of the peers
 *                   that were left waiting for it;
 *   RV_VOTE_STOP    a rank was asked to stop (a failure beside it is the stop);
 *   RV_VOTE_BROKEN  a rank's stage timed out or lost a peer inside a collective,
 *                   or the vote itself could not complete: the communicator
 *                   cannot be trusted any more.
 * The exchange waits on the watch (rv_comm_watch.h): as long as a slow rank
 * beats, never longer than the watch's silence after it stops. */
#ifndef RV_COMM_VOTE_H
#define RV_COMM_VOTE_H

#include <stddef.h>

#include "rv_api.h"
#include "rv_comm_watch.h"
#include "rv_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rv_vote_outcome {
    RV_VOTE_OK = 0,
    RV_VOTE_FAILED = 1,
    RV_VOTE_STOP = 2,
    RV_VOTE_BROKEN = 3,
} rv_vote_outcome;

/* The most bytes of a rank's message that travel with its vote. */
#define RV_VOTE_MSG 424

/* A vote's result, reused from vote to vote (zero it once; rv_vote_release). */
typedef struct rv_vote {
    rv_vote_outcome outcome;
    int ranks;              /* the group's size */
    int first;              /* the rank whose failure is reported, -1 none */
    rv_status status;       /* that rank's status (RV_OK: none failed) */
    size_t bytes;           /* each rank's payload */
    void *buf;              /* (ranks, record) the exchanged records */
    size_t cap;             /* bytes of buf */
} rv_vote;

/* Every rank of w's communicator together (see above). payload: bytes bytes
 * (NULL: zeros), at most 1 MiB. */
RV_API rv_vote_outcome rv_comm_vote(rv_comm_watch *w, rv_status mine, int stop,
                                    const void *payload, size_t bytes, rv_vote *out);

/* Rank r's payload of the last vote. */
RV_API const void *rv_vote_payload(const rv_vote *v, int r);

RV_API void rv_vote_release(rv_vote *v);

#ifdef __cplusplus
}
#endif
#endif
