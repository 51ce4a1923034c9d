/* embed_sink.c: bytes gathered for an output that may not fit in memory twice
 * (the per-token outputs of an hour): an unlinked scratch file in the output's
 * folder, mapped read-only at the end, or plain memory for in-process callers. */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "embed_internal.h"

rv_status embed_sink_open(embed_sink *s, const char *near)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    if (!near)
        return RV_OK;
    char *copy = strdup(near), tmpl[4096];
    if (!copy)
        return rv_fail(RV_ERR_NOMEM, "out of memory");
    /* Standard output (-o -) has no folder: the scratch goes to $TMPDIR. */
    const char *tmpdir = getenv("TMPDIR");
    const char *dir = strcmp(near, "-") != 0 ? dirname(copy)
                      : tmpdir && tmpdir[0]   ? tmpdir
                                              : "/tmp";
    snprintf(tmpl, sizeof tmpl, "%s/.ringvit-scratch.XXXXXX", dir);
    free(copy);
    s->fd = mkstemp(tmpl);
    if (s->fd < 0)
        return rv_fail(RV_ERR_IO, "%s: cannot create a scratch file: %s", tmpl, strerror(errno));
    unlink(tmpl);
    return RV_OK;
}

static rv_status write_memory(embed_sink *s, const void *data, size_t n)
{
    if (s->bytes + n > s->cap) {
        size_t cap = s->cap ? s->cap : 65536;
        while (cap < s->bytes + n)
            cap *= 2;
        char *p = realloc(s->mem, cap);
        if (!p)
            return rv_fail(RV_ERR_NOMEM, "out of memory for %zu bytes of outputs", cap);
        s->mem = p;
        s->cap = cap;
    }
    if (n)
        memcpy(s->mem + s->bytes, data, n);
    s->bytes += n;
    return RV_OK;
}

rv_status embed_sink_write(embed_sink *s, const void *data, size_t n)
{
    if (s->fd < 0)
        return write_memory(s, data, n);
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

rv_status embed_sink_map(embed_sink *s, const void **data)
{
    *data = NULL;
    if (s->bytes == 0)
        return RV_OK;
    if (s->fd < 0) {
        *data = s->mem;
        return RV_OK;
    }
    if (!s->map) {
        void *m = mmap(NULL, s->bytes, PROT_READ, MAP_SHARED, s->fd, 0);
        if (m == MAP_FAILED)
            return rv_fail(RV_ERR_IO, "scratch file: mmap failed: %s", strerror(errno));
        s->map = m;
    }
    *data = s->map;
    return RV_OK;
}

void *embed_sink_take(embed_sink *s)
{
    void *p = s->fd < 0 ? s->mem : NULL;
    if (p) {
        s->mem = NULL;
        s->cap = 0;
    }
    return p;
}

void embed_sink_close(embed_sink *s)
{
    if (s->map)
        munmap(s->map, s->bytes);
    if (s->fd >= 0)
        close(s->fd);
    free(s->mem);
    memset(s, 0, sizeof *s);
    s->fd = -1;
}
