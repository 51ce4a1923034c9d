/* collect_column.h: a growing run of bytes that a collector appends to, kept as
 * rv_collect_keep says (rv_ingest.h): counted only, in memory, or in an unlinked
 * scratch file beside an output (for "-", standard output: in $TMPDIR, else
 * /tmp) mapped read-only once complete, so a long recording's tensors cost
 * disk, not memory. Shared by the frames collector
 * (ingest/frames_collect.c) and the tokens collector (tokenize/tok_collect.c);
 * internal: never installed, nothing of it exported. */
#ifndef RV_COLLECT_COLUMN_H
#define RV_COLLECT_COLUMN_H

#include <stddef.h>

#include "rv_ingest.h"
#include "rv_status.h"

typedef struct collect_column {
    rv_collect_keep keep;
    int fd;          /* the scratch file, -1 when none */
    char *mem;       /* (cap) in memory: the bytes */
    size_t cap;
    size_t bytes;    /* appended so far */
    void *map;       /* (bytes) a scratch file's read-only mapping once sealed */
} collect_column;

/* An empty column kept as keep says (RV_KEEP_SCRATCH: in the folder of the
 * output path beside). */
rv_status collect_column_open(collect_column *c, rv_collect_keep keep, const char *beside);
rv_status collect_column_put(collect_column *c, const void *data, size_t n);
/* Complete: a scratch file is mapped; reading starts. */
rv_status collect_column_seal(collect_column *c);
/* The bytes (NULL when there are none or none are kept); after seal for a
 * scratch file. */
const void *collect_column_data(const collect_column *c);
/* In memory: the bytes' buffer (malloc'd) for the caller to free, the column
 * left empty; NULL when nothing is in memory. */
void *collect_column_take(collect_column *c);
/* Frees the bytes, unmaps and closes; the column is empty after (fd -1). */
void collect_column_close(collect_column *c);

#endif
