/* cp_strategies.h: the context-parallel strategies as entries of one table
 * (cp_strategies.c), in the manner of nccl-tests' list of collectives: each entry
 * names the strategy, the attention it serves (full, a span, or both), the checks
 * a call must pass, what a span's set-up adds, and its forward and backward. The
 * ring is two entries (full attention, and the span ring of cp_span_ring.c); the
 * dispatcher (cp_attention.c) and the commands' checks (rv_cp_strategy_check) read
 * the table, never a list of names. Dependencies run one way: cp_attention.c ->
 * cp_strategies.c -> the strategies' files -> cp_span.c -> cp_common.c. Internal to
 * encoder/. */
#ifndef RV_CP_STRATEGIES_H
#define RV_CP_STRATEGIES_H

#include <stdint.h>

#include "rv_cp_attention.h"

typedef rv_status (*cp_forward_fn)(rv_cp_attn *cp, const float *q, const float *k,
                                   const float *v, float *o, float *lse);
typedef rv_status (*cp_backward_fn)(rv_cp_attn *cp, const float *q, const float *k,
                                    const float *v, const float *o, const float *lse,
                                    const float *dout, float *dq, float *dk, float *dv);
/* What rv_cp_attn_set_span adds over more than one rank, after cp_span_begin. */
typedef rv_status (*cp_span_setup_fn)(rv_cp_attn *cp);

/* The attention an entry serves (bits of cp_strategy_entry.attention). */
enum { CP_FULL = 1, CP_SPAN = 2 };

typedef struct cp_strategy_entry {
    rv_cp_strategy id;        /* the strategy it serves */
    const char *name;         /* rv_cp_strategy_name, rv_cp_strategy_parse */
    int attention;            /* CP_FULL, CP_SPAN or both */
    int heads_per_rank;       /* check: heads % ranks == 0 (the heads are sharded) */
    int span_contiguous;      /* check: a span over more than one rank needs the
                                 contiguous shard plan */
    int span_rows;            /* under a span the encoder's forward may run in query
                                 rows (cp_span_exchange, cp_span_rows) */
    cp_span_setup_fn span_setup; /* CP_SPAN entries */
    cp_forward_fn forward;
    cp_backward_fn backward;
} cp_strategy_entry;

/* The entry serving strategy s for full attention (span 0) or a span (1); NULL
 * when none does. */
const cp_strategy_entry *cp_strategy_find(rv_cp_strategy s, int span);

/* 1 when under a span the encoder runs its blocks in query rows for strategy s
 * over `ranks` ranks (one rank always can: it holds every key). */
int cp_strategy_span_rows(rv_cp_strategy s, int ranks);

/* ---- the strategies (one file each, cp_span_ring.c for the span ring) ---------------- */

rv_status cp_ring_forward(rv_cp_attn *cp, const float *q, const float *k, const float *v,
                          float *o, float *lse);
rv_status cp_ring_backward(rv_cp_attn *cp, const float *q, const float *k, const float *v,
                           const float *o, const float *lse, const float *dout, float *dq,
                           float *dk, float *dv);
rv_status cp_allgather_forward(rv_cp_attn *cp, const float *q, const float *k,
                               const float *v, float *o, float *lse);
rv_status cp_allgather_backward(rv_cp_attn *cp, const float *q, const float *k,
                                const float *v, const float *o, const float *lse,
                                const float *dout, float *dq, float *dk, float *dv);
rv_status cp_ulysses_forward(rv_cp_attn *cp, const float *q, const float *k, const float *v,
                             float *o, float *lse);
rv_status cp_ulysses_backward(rv_cp_attn *cp, const float *q, const float *k,
                              const float *v, const float *o, const float *lse,
                              const float *dout, float *dq, float *dk, float *dv);
/* Ulysses under a span: every key in global order, and the pair count of the
 * whole sequence its head shards attend over. */
rv_status cp_ulysses_span_setup(rv_cp_attn *cp);

/* The span ring: its exchange plan (set-up), forward and backward. */
rv_status cp_span_ring_plan(rv_cp_attn *cp);
rv_status cp_span_ring_forward(rv_cp_attn *cp, const float *q, const float *k, const float *v,
                               float *o, float *lse);
rv_status cp_span_ring_backward(rv_cp_attn *cp, const float *q, const float *k,
                                const float *v, const float *o, const float *lse,
                                const float *dout, float *dq, float *dk, float *dv);
/* The span ring in query rows, for a forward that keeps only K and V of its whole
 * slice: exchange receives the peers' runs of this call's K/V (and sends ours),
 * completely; rows computes o, lse (n, heads, dim), (heads, n) of my query rows
 * [r0, r0 + n) (q holds those rows) against my k, v and the received runs. */
rv_status cp_span_exchange(rv_cp_attn *cp, const float *k, const float *v);
rv_status cp_span_rows(rv_cp_attn *cp, const float *q, int64_t r0, int64_t n, const float *k,
                       const float *v, float *o, float *lse);

#endif
