/* rv_cp_attention.h: context-parallel attention. The sequence is split over the N
 * ranks of a communicator by a shard plan (tokenize/rv_shard.h); each rank passes
 * its own slice of Q, K, V and gets its slice of the attention of the WHOLE
 * sequence, exactly (up to f32 rounding) what one rank holding everything computes.
 *
 * Strategies (each an entry of one table, encoder/cp/cp_strategies.c, which the
 * names, the checks and the dispatch read):
 *   ring       K/V blocks travel rank to rank+1, partial results are merged by
 *              log-sum-exp. The forward passes blocks in chunks (several on a
 *              long slice): on host memory sends and receives run ahead of the
 *              computation into three receive slots (ring_ahead; two when a
 *              block is short enough to travel whole); on a device one
 *              exchange is in flight, two slots, the next chunk's transfer
 *              running while the current one is computed. The backward passes
 *              whole blocks, double-buffered, and the dK/dV partial sums on to
 *              their owners. Memory per rank: its slice plus the slots.
 *   allgather  every rank gathers all K/V (O(S*dim) per rank), then one local
 *              tiled attention per query segment.
 *   ulysses    all-to-all from sequence-sharded to head-sharded, full-sequence
 *              attention on heads/N heads, all-to-all back; needs heads % N == 0.
 * Causal attention wants the zigzag plan (equal work per rank); any plan is exact.
 *
 * Attention spans (rv_cp_attn_set_span): every token carries a key (its start
 * time for a sliding window, its block's index for blocks and frames) and a
 * start time; a query sees the keys within `reach` of its own key (and, when
 * causal, only keys that start earlier, or at the same time and position). The
 * kernels skip what a span cannot see. With a span, `ring` no longer circulates
 * every block: over a contiguous plan each rank exchanges K/V only with the
 * ranks whose keys its queries can reach, and only the rows within reach (so a
 * short window moves O(window) rows per layer, not O(sequence)); in the backward
 * the gradients of those rows go back to their owners. `allgather` and `ulysses`
 * still move whole blocks, and mask and skip in the kernels.
 *
 * Local layouts: q, k, v, o, dout, dq, dk, dv are (len, heads, dim) with len the
 * rank's token count (rv_shard_len), tokens in slice order (segment 0 first); lse
 * is (heads, len), natural log. */
#ifndef RV_CP_ATTENTION_H
#define RV_CP_ATTENTION_H

#include <stddef.h>

#include "rv_api.h"
#include "rv_backend.h"
#include "rv_comm.h"
#include "rv_shard.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rv_cp_strategy {
    RV_CP_RING = 0,
    RV_CP_ALLGATHER = 1,
    RV_CP_ULYSSES = 2,
} rv_cp_strategy;

/* Counters of one rank, accumulated over calls (zero the struct to reset). */
typedef struct rv_cp_stats {
    double bytes_sent;  /* payload bytes this rank sent */
    double busy_s;      /* seconds in attention kernels (compute) */
    double wait_s;      /* seconds blocked on communication */
    double flops;       /* 4*dim per visible (query, key) pair and head forward, 10*dim backward */
    size_t peak_bytes;  /* most bytes of strategy buffers held at once (KV blocks in
                           flight, gathered or re-sharded tensors, partial results) */
} rv_cp_stats;

typedef struct rv_cp_span_state rv_cp_span_state; /* cp_span.h */

typedef struct rv_cp_attn {
    rv_backend *be;          /* compute backend (not owned) */
    rv_comm *comm;           /* the context-parallel group (not owned); size == plan.ranks */
    rv_shard_plan plan;      /* which global tokens each rank holds */
    rv_cp_strategy strategy;
    int heads, dim;
    int causal;              /* 1: key at global position kp seen by query qp iff kp <= qp */
    float scale;             /* softmax scale; 0 selects 1/sqrt(dim) */
    rv_cp_stats stats;
    rv_cp_span_state *span;  /* NULL: full attention (rv_cp_attn_set_span) */
    int ring_ahead;          /* ring forward: 1 runs sends and receives ahead of the
                                computation (host memory, unless RINGVIT_RING_AHEAD=0,
                                read once by rv_cp_attn_init); 0: one exchange in
                                flight, the schedule of a device */
} rv_cp_attn;

/* Checks the combination (communicator size = plan ranks, rv_cp_strategy_check)
 * with a message naming the numbers. Reads RINGVIT_RING_AHEAD (ring_ahead). */
RV_API rv_status rv_cp_attn_init(rv_cp_attn *cp, rv_backend *be, rv_comm *comm,
                                 const rv_shard_plan *plan, rv_cp_strategy strategy, int heads,
                                 int dim, int causal, float scale);

/* An attention span for this rank's slice: key and time (len) host arrays (not
 * kept: copied into the backend's memory), reach >= 0 (cp->causal then means the
 * time-causal rule of rv_attn_mask). Collective: the ranks exchange their key
 * ranges (and, for allgather and ulysses, every key). The ring strategy over more
 * than one rank needs the contiguous plan. Free with rv_cp_attn_free. */
RV_API rv_status rv_cp_attn_set_span(rv_cp_attn *cp, double reach, const double *key,
                                     const double *time);
/* Releases what set_span holds; cp stays usable without a span. */
RV_API void rv_cp_attn_free(rv_cp_attn *cp);

/* o (len, heads, dim) and lse (heads, len) of this rank's queries against every key. */
RV_API rv_status rv_cp_attn_forward(rv_cp_attn *cp, const float *q, const float *k,
                                    const float *v, float *o, float *lse);

/* Gradients of this rank's slice; o and lse are the forward's outputs. dq, dk, dv
 * are overwritten. */
RV_API rv_status rv_cp_attn_backward(rv_cp_attn *cp, const float *q, const float *k,
                                     const float *v, const float *o, const float *lse,
                                     const float *dout, float *dq, float *dk, float *dv);

/* "ring", "allgather", "ulysses" ("?" outside the table). */
RV_API const char *rv_cp_strategy_name(rv_cp_strategy s);
/* A strategy's name -> strategy; RV_ERR_INVALID naming the text and the names. */
RV_API rv_status rv_cp_strategy_parse(const char *text, rv_cp_strategy *out);
/* The checks the strategy's table entry makes of a call (those rv_cp_attn_init
 * makes, for a command to make before it starts): RV_ERR_INVALID naming the
 * numbers when s cannot run `heads` heads over `ranks` context-parallel ranks
 * (ulysses shards the heads: heads % ranks == 0) or is unknown. */
RV_API rv_status rv_cp_strategy_check(rv_cp_strategy s, int heads, int ranks);

/* Visible (query, key) pairs between a query segment and a key segment. */
RV_API double rv_cp_visible_pairs(rv_shard_seg q, rv_shard_seg k, int causal);

#ifdef __cplusplus
}
#endif
#endif
