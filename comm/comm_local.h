/* comm_local.h: the shared state of a "local" run (its ranks are threads of one
 * process) as comm_local_run.c sees it: create the world, hand each thread its
 * communicator, mark a rank gone when its function returns. Only comm/ includes
 * this; users call rv_local_run. */
#ifndef RV_COMM_LOCAL_H
#define RV_COMM_LOCAL_H

#include "rv_comm.h"

typedef struct local_world local_world;

rv_status local_world_create(int nranks, local_world **out);
/* Messages of this world move with copy (NULL: memcpy); set before any comm. */
void local_world_set_copy(local_world *w, rv_comm_copy_fn copy);
/* Strict (NCCL-like) groups, rendezvous above eager_bytes and post-order matching
 * (comm_local.c's top comment); set before any comm. */
void local_world_set_strict(local_world *w, int strict, size_t eager_bytes);
/* The world communicator of rank `rank`, with the given timeout. */
rv_status local_world_comm(local_world *w, int rank, double timeout_s, rv_comm **out);
/* Rank `rank` has returned: its pending requests are withdrawn and every peer
 * waiting on it fails at once. Waits for copies touching its buffers to end. */
void local_world_depart(local_world *w, int rank);
/* Frees the world; every rank's thread must have ended. */
void local_world_destroy(local_world **w);

#endif
