/* embed_rank.h: one rank of `ringvit embed` (embed_batch.c) and the dispatch of
 * inputs to groups (embed_dispatch.c). The work of each input is the library's
 * embed job (rv_embed.h); what is here is which input, when, and where its
 * outcome goes. */
#ifndef RV_EMBED_RANK_H
#define RV_EMBED_RANK_H

#include <pthread.h>
#include <stdint.h>

#include "embed.h"
#include "rv_comm.h"
#include "rv_embed.h"

typedef struct embed_dispatch embed_dispatch;

typedef struct embed_rank {
    embed_batch *b;
    int world_rank, group, groups; /* this rank in the world; its group of groups */
    embed_dispatch *disp; /* the group's claims and outcomes (rank 0 of the group) */
    const embed_settings *set;
    rv_comm *comm;      /* the group */
    rv_embed_job *job;  /* this rank's embed job over the group (NULL until open) */
    int rank, size;     /* in the group */
} embed_rank;

/* ---- embed_dispatch.c: which group embeds which input ------------------------------ */

/* Every rank of the world calls it together, after the groups are formed (under
 * MPI it splits world for its messages). */
rv_status embed_dispatch_create(rv_comm *world, embed_rank *k, embed_dispatch **out);
/* World rank 0's process under MPI with several groups: starts the thread that
 * answers the other groups, once this process has made all its communicators
 * (later calls do nothing). */
rv_status embed_dispatch_start(embed_dispatch *d);
/* Group rank 0: the next unclaimed input, or -1 when none is left or the batch
 * stops (a signal in world rank 0's process, a broken group). */
rv_status embed_dispatch_claim(embed_dispatch *d, int *index);
/* Group rank 0: the outcome of an input (the log line, counts). */
rv_status embed_dispatch_done(embed_dispatch *d, int index, const embed_result *res);
/* The batch's counts when every group has finished. */
typedef struct embed_counts {
    int32_t ok, failed, skipped;
    int32_t fatal;      /* 1: a group broke */
    int32_t stopped;    /* 1: a signal stopped the batch */
} embed_counts;
/* Group rank 0: this group is finished (broken: its ranks lost each other, the
 * batch stops, msg says why; stopped: by a signal). Unless broken, waits for
 * every group to finish, beating the group's watch, and then gives the batch's
 * counts. */
rv_status embed_dispatch_finish(embed_dispatch *d, int broken, int stopped, const char *msg,
                                embed_counts *counts);
/* Every rank; world rank 0's process joins its thread. */
void embed_dispatch_free(embed_dispatch **d);

#endif
