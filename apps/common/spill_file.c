/* spill_file.c: unlinked scratch files beside an output, for commands that write
 * more than fits comfortably in memory (embed's --tokens; frames and tokens
 * gather theirs with the library's collectors); see spill_file.h. */
#include "spill_file.h"

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

rv_status spill_open(spill *s, const char *out_path)
{
    char *copy = strdup(out_path);
    char tmpl[4096];
    s->fd = -1;
    s->bytes = 0;
    s->map = NULL;
    if (!copy)
        return rv_fail(RV_ERR_NOMEM, "out of memory");
    /* Standard output (-o -) has no folder: the scratch goes to $TMPDIR. */
    const char *tmpdir = getenv("TMPDIR");
    const char *dir = strcmp(out_path, "-") != 0 ? dirname(copy)
                      : tmpdir && tmpdir[0]      ? tmpdir
                                                 : "/tmp";
    snprintf(tmpl, sizeof tmpl, "%s/.ringvit-scratch.XXXXXX", dir);
    free(copy);
    s->fd = mkstemp(tmpl);
    if (s->fd < 0)
        return rv_fail(RV_ERR_IO, "%s: cannot create a scratch file: %s", tmpl, strerror(errno));
    unlink(tmpl);
    return RV_OK;
}

rv_status spill_write(spill *s, const void *data, size_t n)
{
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(s->fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return rv_fail(RV_ERR_IO, "scratch file: write failed: %s", strerror(errno));
        p += w;
        n -= (size_t)w;
        s->bytes += (size_t)w;
    }
    return RV_OK;
}

rv_status spill_map(spill *s)
{
    if (s->bytes == 0)
        return RV_OK;
    s->map = mmap(NULL, s->bytes, PROT_READ, MAP_SHARED, s->fd, 0);
    if (s->map == MAP_FAILED) {
        s->map = NULL;
        return rv_fail(RV_ERR_IO, "scratch file: mmap failed: %s", strerror(errno));
    }
    return RV_OK;
}

void spill_close(spill *s)
{
    if (s->map)
        munmap(s->map, s->bytes);
    if (s->fd >= 0)
        close(s->fd);
    s->map = NULL;
    s->fd = -1;
}
