/* rv_comm_watch.h: waits between long stages that end when a peer falls silent.
 *
 * A stage outside the communicator (decoding an hour of video, writing a file)
 * may take far longer than any fixed deadline, yet a peer stopped or hung during
 * it must not keep the others waiting for a day. A watch over a communicator's
 * ranks lets each rank say "still working" (rv_comm_watch_beat, called at its
 * progress points: cheap, it sends at most every silence / 4 seconds), and its
 * waits (a vote, a transfer from one peer) fail only when a peer they wait for
 * has sent nothing, beat or message, for silence seconds. Every wait also grants
 * each peer silence seconds from the moment it starts, so a peer that stops
 * during another rank's long stage is named at most 2 x silence after that stage.
 *
 * The watch has its own communicator (split from the given one, so its ranks are
 * that one's): beats and votes never meet the caller's messages. Once a wait has
 * found a silent peer the watch is broken: every later call fails at once with
 * the same message ("rank 2 has sent nothing for 5 s ..."). One thread per rank
 * uses its watch. */
#ifndef RV_COMM_WATCH_H
#define RV_COMM_WATCH_H

#include <stddef.h>

#include "rv_api.h"
#include "rv_comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rv_comm_watch rv_comm_watch;

/* Collective over c. silence_s > 0: how long a waited-for peer may be silent. */
RV_API rv_status rv_comm_watch_create(rv_comm *c, double silence_s, rv_comm_watch **out);
RV_API void rv_comm_watch_free(rv_comm_watch **w);

/* "Still working": sends a beat to every peer when silence / 4 seconds have passed
 * since the last one (a peer that has not taken the last one yet is skipped), and
 * takes the beats that have arrived. NULL w does nothing. */
RV_API void rv_comm_watch_beat(rv_comm_watch *w);

/* Rank r's sendbuf (bytes) lands at recvbuf + r * bytes on every rank. Waits as
 * long as every peer whose part has not arrived keeps beating; RV_ERR_TIMEOUT
 * naming the first silent one otherwise (the watch is then broken). */
RV_API rv_status rv_comm_watch_allgather(rv_comm_watch *w, const void *sendbuf, void *recvbuf,
                                         size_t bytes);

/* Waits for reqs[i] (posted on any communicator; NULL entries are complete) while
 * peers[i] (a rank of the watch's communicator, the one that must act for it to
 * complete) keeps beating; releases them all as rv_comm_waitall does. */
RV_API rv_status rv_comm_watch_waitall(rv_comm_watch *w, rv_comm_request **reqs,
                                       const int *peers, int n);

/* The watch's ranks (those of the communicator it was made over). */
RV_API int rv_comm_watch_size(const rv_comm_watch *w);

#ifdef __cplusplus
}
#endif

#endif
