/* rv_shard.h: shard plans, which global token positions each of N ranks holds.
 *   contiguous: rank r holds [r*S/N, (r+1)*S/N): balanced to within one token;
 *               for attention without a mask.
 *   zigzag:     the sequence cut into 2N chunks (sizes within one token of each
 *               other); rank r holds chunks r and 2N-1-r, so under a causal mask
 *               every rank has the same attention work.
 * A rank's local slice is its segments concatenated in order (segment 0 first);
 * every global position belongs to exactly one rank. */
#ifndef RV_SHARD_H
#define RV_SHARD_H

#include <stdint.h>

#include "rv_api.h"
#include "rv_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rv_shard_kind {
    RV_SHARD_CONTIGUOUS = 0,
    RV_SHARD_ZIGZAG = 1,
} rv_shard_kind;

#define RV_SHARD_MAX_SEGS 2

typedef struct rv_shard_seg {
    int64_t start; /* first global token position */
    int64_t len;   /* tokens */
} rv_shard_seg;

typedef struct rv_shard_plan {
    rv_shard_kind kind;
    int ranks;   /* N >= 1 */
    int64_t seq; /* S >= 0 tokens in the whole sequence */
} rv_shard_plan;

RV_API rv_status rv_shard_plan_make(rv_shard_kind kind, int ranks, int64_t seq,
                                    rv_shard_plan *out);

/* The segments of rank r (1 for contiguous, 2 for zigzag; a segment may be empty). */
RV_API int rv_shard_segments(const rv_shard_plan *p, int r,
                             rv_shard_seg segs[RV_SHARD_MAX_SEGS]);

/* Tokens held by rank r, and the most held by any rank. */
RV_API int64_t rv_shard_len(const rv_shard_plan *p, int r);
RV_API int64_t rv_shard_max_len(const rv_shard_plan *p);

/* The rank holding global position t and its index in that rank's local slice. */
RV_API int rv_shard_owner(const rv_shard_plan *p, int64_t t, int64_t *local);

RV_API const char *rv_shard_kind_name(rv_shard_kind kind);
/* "contiguous" or "zigzag" -> kind; RV_ERR_INVALID naming the text otherwise. */
RV_API rv_status rv_shard_kind_parse(const char *text, rv_shard_kind *out);

#ifdef __cplusplus
}
#endif
#endif
