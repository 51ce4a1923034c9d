/* spill_file.h: an unlinked scratch file in the output's directory (for "-",
 * standard output: $TMPDIR, else /tmp) that grows as data arrive and is mapped
 * read-only at the end, so a command can hand a large tensor to the safetensors
 * writer without holding it in memory. */
#ifndef RV_SPILL_FILE_H
#define RV_SPILL_FILE_H

#include <stddef.h>

#include "rv_status.h"

typedef struct rv_spill {
    int fd;       /* -1 when closed */
    size_t bytes; /* written so far */
    void *map;    /* (bytes) read-only mapping after rv_spill_map, else NULL */
} rv_spill;

rv_status rv_spill_open(rv_spill *s, const char *out_path);
rv_status rv_spill_write(rv_spill *s, const void *data, size_t n);
rv_status rv_spill_map(rv_spill *s);
void rv_spill_close(rv_spill *s);

#endif
