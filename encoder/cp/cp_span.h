/* cp_span.h: an attention span's state (rv_cp_attn_set_span) and what every
 * strategy reads of it (cp_span.c): the mask of a call, with or without a span,
 * its exact visible-pair counts, the keys in global order (allgather, ulysses, a
 * single rank), and the key envelopes the span ring cuts its calls with. The span
 * ring itself (cp_span_ring.c) is a strategy of cp_strategies.h. Internal to
 * encoder/. */
#ifndef RV_CP_SPAN_H
#define RV_CP_SPAN_H

#include "cp_common.h"

/* The envelope of a row run's keys, to cut a call down to the rows a set of
 * queries can reach without reading the keys: max_pre[j] = max(key[0..j]) and
 * min_suf[j] = min(key[j..n)), both non-decreasing. Keys are nearly sorted in a
 * contiguous slice (time order up to the interleaving windows), so the rows
 * between the first whose running maximum reaches lo and the last whose
 * remaining minimum is within hi are the few the span reaches. */
typedef struct key_env {
    double *max_pre, *min_suf; /* (n) host */
    int64_t n;
} key_env;

/* A rank the span ring exchanges rows with (cp_span_ring.c fills it). */
typedef struct span_peer {
    int rank;
    int64_t send_a, send_b;  /* my rows [a, b) this peer's queries can see */
    int64_t recv_a, recv_b;  /* its rows [a, b) my queries can see (its local rows) */
    int64_t recv_start;      /* global position of its row recv_a */
    double *key, *time;      /* (recv rows) the backend's memory, received once */
    double *key_h, *time_h;  /* host copies (pair counts) */
    float *k, *v;            /* (recv rows, heads, dim) this call's */
    double pairs;            /* visible pairs: my queries x its rows */
    double *row_pairs;       /* (len + 1) running count over my query rows */
    key_env env;             /* of its received keys */
} span_peer;

struct rv_cp_span_state {
    double reach;
    int64_t len, start;       /* my rows, global position of row 0 */
    double *key, *time;       /* (len) the backend's memory */
    double *key_h, *time_h;   /* (len) host copies */
    double *range;            /* (ranks, 4) key min, key max, time min, time max */
    double *g_key, *g_time;   /* (S) global order, the backend's memory (allgather,
                                 ulysses, a single rank); NULL until needed */
    double *g_key_h, *g_time_h;
    int npeer;
    span_peer *peer;          /* (npeer) in rank order */
    int have_meta;            /* peers' keys received */
    double local_pairs;       /* my queries x my keys */
    double *row_pairs;        /* (len + 1) its running count over my query rows */
    double seg_pairs[RV_SHARD_MAX_SEGS]; /* my segments' queries x every key */
    double all_pairs;         /* every query x every key (ulysses) */
    key_env env;              /* of my keys */
};

/* The mask of query segment q against key segment k (global positions); with a
 * span, over the span's global keys, which allgather, ulysses and a single rank
 * have. */
rv_attn_mask cp_mask(const rv_cp_attn *cp, rv_shard_seg q, rv_shard_seg k);

/* Visible pairs of a strategy's call for the statistics: my segment i (or, i < 0,
 * the whole sequence) against every key. */
double cp_pairs_all(const rv_cp_attn *cp, int i, rv_shard_seg q);

/* Exactly the pairs a span mask lets through (host arrays); with prefix (n + 1)
 * not NULL, also the running count over the query rows, so any run of rows reads
 * its count in O(1). */
double cp_span_pairs(const double *qk, const double *qt, int64_t q_start, int64_t n,
                     const double *kk, const double *kt, int64_t k_start, int64_t m,
                     double reach, int causal);
double cp_span_pairs_rows(const double *qk, const double *qt, int64_t q_start, int64_t n,
                          const double *kk, const double *kt, int64_t k_start, int64_t m,
                          double reach, int causal, double *prefix);

/* The envelope of key (n) host values; cp_env_free clears it. */
rv_status cp_env_make(const double *key, int64_t n, key_env *e);
void cp_env_free(key_env *e);
/* The smallest key of the run (its envelope's first suffix minimum). */
double cp_env_min(const key_env *e);
/* Rows [*a, *b) of e's run that can hold keys within [lo, hi]: every row outside
 * has its key outside (rows before *a have keys < lo, rows from *b on keys > hi). */
void cp_env_rows(const key_env *e, double lo, double hi, int64_t *a, int64_t *b);

/* Doubles in the backend's memory (at least one); cp_free_d takes NULL and clears
 * the pointer. */
rv_status cp_alloc_d(rv_cp_attn *cp, size_t n, double **p);
void cp_free_d(rv_cp_attn *cp, double **p);

/* A new span state in cp->span: my rows' keys and times (checked finite, copied
 * to the host and the backend), their pair counts and envelope. reach, key and
 * time are the checked arguments of rv_cp_attn_set_span. On failure the state
 * made so far stays in cp->span for rv_cp_attn_free. */
rv_status cp_span_begin(rv_cp_attn *cp, double reach, const double *key, const double *time);

/* Every key and time in global order (host and backend copies) and my segments'
 * pair counts, for allgather, ulysses and a single rank. Collective. */
rv_status cp_span_gather_keys(rv_cp_attn *cp);

#endif
