/* comm_impl.h: what the communicator backends share and the public header does
 * not show: the request header every backend's request starts with, the reserved
 * tags of the collectives built on point-to-point (comm_coll.c), message helpers
 * and the reduction loop. Only comm/ includes this. */
#ifndef RV_COMM_IMPL_H
#define RV_COMM_IMPL_H

#include <stddef.h>

#include "rv_comm.h"

/* First member of every backend's request, so the wrappers find the table. */
struct rv_comm_request {
    rv_comm *comm;
};

/* Tags below 0 belong to the collectives of comm_coll.c; users get 0..TAG_MAX, so
 * a collective never takes a user's message. */
enum {
    RV_TAG_BARRIER = -1,
    RV_TAG_ALLGATHER = -2,
    RV_TAG_ALLTOALL = -3,
    RV_TAG_ALLREDUCE = -4,
};

/* "barrier", "allgather", ... for a reserved tag; NULL for a user tag. */
const char *rv_comm_tag_name(int tag);

/* Describes a point-to-point operation for an error message, e.g.
 * "irecv from rank 1 (tag 7, 1048576 bytes)" or, on a reserved tag,
 * "allreduce: irecv from rank 1 (1048576 bytes)". */
void rv_comm_describe_p2p(char *buf, size_t n, int is_send, int peer, int tag,
                          size_t bytes);

/* "rank 2", or "rank 2 (world rank 5)" on a communicator split from another. */
void rv_comm_who(const rv_comm *c, char *buf, size_t n);

/* Re-sets this thread's failure message as "<who>: <what>: <inner>", where inner
 * is the current message without its own "<who>: " prefix (so a collective built
 * on others names itself: "rank 0: split (color 1, key 0): allgather: ..."). */
rv_status rv_comm_refail(rv_status st, const rv_comm *c, const char *what);

/* Waits for every non-NULL reqs[i] by the one deadline, releasing each (*reqs[i]
 * = NULL); the first failure is returned and the rest are cancelled. */
rv_status rv_comm_waitall_until(rv_comm_request **reqs, int n, double deadline);

/* acc[i] += x[i] for count elements of dtype. */
void rv_comm_reduce_sum(void *acc, const void *x, size_t count, rv_comm_dtype dtype);

/* ---- collectives on point-to-point (comm_coll.c), for backends without native ones */
rv_status rv_coll_sendrecv(rv_comm *c, const void *sendbuf, size_t send_bytes, int dst,
                           void *recvbuf, size_t recv_bytes, int src, int tag,
                           double deadline);
rv_status rv_coll_barrier(rv_comm *c, double deadline);
rv_status rv_coll_allgather(rv_comm *c, const void *sendbuf, void *recvbuf, size_t bytes,
                            double deadline);
rv_status rv_coll_alltoall(rv_comm *c, const void *sendbuf, void *recvbuf, size_t bytes,
                           double deadline);
rv_status rv_coll_allreduce(rv_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                            rv_comm_dtype dtype, double deadline);

/* The plan of a split, from (color, key) gathered from every rank with
 * c->allgather: members (c->size, caller's) gets the ranks of c with this rank's
 * color in new-rank order, *n their number and *new_rank this rank's place
 * (*n = 0 and *new_rank = -1 for RV_COMM_UNDEFINED). */
rv_status rv_comm_split_plan(rv_comm *c, int color, int key, double deadline,
                             int *members, int *n, int *new_rank);

#endif
