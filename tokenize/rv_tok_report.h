/* rv_tok_report.h: the report of a tokenize pass as JSON, the one `ringvit
 * tokens` prints with --json and stores as "tokens" metadata, and that
 * rv_flat_tokens returns: options, plan, counts, windows, decode, shards.
 * Every time in it is on the container's clock: the layout's t0 plus the
 * sequence times given here. */
#ifndef RV_TOK_REPORT_H
#define RV_TOK_REPORT_H

#include "rv_api.h"
#include "rv_ingest.h"
#include "rv_shard.h"
#include "rv_tokenize.h"
#include "rv_tokens.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rv_tok_report {
    const char *path;            /* the input as named */
    const char *output;          /* the file written (-o), or NULL */
    const rv_ingest_opts *io;    /* the ingest options (start_s: sequence time) */
    const rv_tok_opts *to;       /* the tokenizer options asked for */
    int blocks;                  /* 0 plain windows, 1 time blocks (--block), 2 frame
                                    blocks (--frame) */
    double time_origin;          /* the first frame's pts, s */
    const rv_tok_layout *L;      /* the sequence; its t0 places the times */
    const char *plan_source;     /* "probe" or "decode" */
    double plan_end_s;           /* the end the probe states, sequence time; NAN
                                    unknown */
    double end_s;                /* the recording's end, sequence time */
    const rv_tok_stats *stats;   /* the pass; NULL when nothing was decoded */
    double wall_s;               /* the pass's wall time */
    const rv_shard_plan *sp;     /* the shards reported */
} rv_tok_report;

/* The report (compact, every digit; malloc'd, free()). */
RV_API rv_status rv_tok_report_json(const rv_tok_report *r, char **json);

/* Seconds of recording the sequence covers: from the grid start to end_s
 * (sequence time; NAN: from the counts), within the duration asked for. */
RV_API double rv_tok_covered_s(const rv_tok_layout *L, double end_s);

#ifdef __cplusplus
}
#endif
#endif
