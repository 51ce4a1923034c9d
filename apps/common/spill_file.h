/* spill_file.h: an unlinked scratch file in the output's directory (for "-",
 * standard output: $TMPDIR, else /tmp) that grows as data arrive and is mapped
 * read-only at the end, so a command can hand a large tensor to the safetensors
 * writer without holding it in memory. */
#ifndef RV_SPILL_FILE_H
#define RV_SPILL_FILE_H

#include <stddef.h>

#include "rv_status.h"

typedef struct spill {
    int fd;       /* -1 when closed */
    size_t bytes; /* written so far */
    void *map;    /* (bytes) read-only mapping after spill_map, else NULL */
} spill;

rv_status spill_open(spill *s, const char *out_path);
rv_status spill_write(spill *s, const void *data, size_t n);
rv_status spill_map(spill *s);
void spill_close(spill *s);

#endif
