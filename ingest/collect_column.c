/* collect_column.c: the byte runs collectors append to, in memory or in an
 * unlinked scratch file beside the output (collect_column.h). */
#include "collect_column.h"

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

rv_status collect_column_open(collect_column *c, rv_collect_keep keep, const char *beside)
{
    *c = (collect_column){.keep = keep, .fd = -1};
    if (keep != RV_KEEP_SCRATCH)
        return RV_OK;
    if (!beside)
        return rv_fail(RV_ERR_INVALID, "scratch files: no output path to put them beside");
    char *copy = strdup(beside);
    char tmpl[4096];
    if (!copy)
        return rv_fail(RV_ERR_NOMEM, "out of memory");
    /* Standard output (-o -) has no folder: the scratch goes to $TMPDIR. */
    const char *tmpdir = getenv("TMPDIR");
    const char *dir = strcmp(beside, "-") != 0 ? dirname(copy)
                      : tmpdir && tmpdir[0]    ? tmpdir
                                               : "/tmp";
    snprintf(tmpl, sizeof tmpl, "%s/.ringvit-scratch.XXXXXX", dir);
    free(copy);
    c->fd = mkstemp(tmpl);
    if (c->fd < 0)
        return rv_fail(RV_ERR_IO, "%s: cannot create a scratch file: %s", tmpl, strerror(errno));
    unlink(tmpl);
    return RV_OK;
}

static rv_status put_file(collect_column *c, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(c->fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return rv_fail(RV_ERR_IO, "scratch file: write failed: %s", strerror(errno));
        p += w;
        n -= (size_t)w;
        c->bytes += (size_t)w;
    }
    return RV_OK;
}

rv_status collect_column_put(collect_column *c, const void *data, size_t n)
{
    if (n == 0)
        return RV_OK;
    if (c->keep == RV_KEEP_NONE) {
        c->bytes += n;
        return RV_OK;
    }
    if (c->fd >= 0)
        return put_file(c, data, n);
    if (c->bytes + n > c->cap) {
        size_t cap = c->cap ? c->cap : 4096;
        while (cap < c->bytes + n)
            cap *= 2;
        char *p = realloc(c->mem, cap);
        if (!p)
            return rv_fail(RV_ERR_NOMEM, "out of memory (%zu bytes)", cap);
        c->mem = p;
        c->cap = cap;
    }
    memcpy(c->mem + c->bytes, data, n);
    c->bytes += n;
    return RV_OK;
}

rv_status collect_column_seal(collect_column *c)
{
    if (c->fd < 0 || c->bytes == 0 || c->map)
        return RV_OK;
    c->map = mmap(NULL, c->bytes, PROT_READ, MAP_SHARED, c->fd, 0);
    if (c->map == MAP_FAILED) {
        c->map = NULL;
        return rv_fail(RV_ERR_IO, "scratch file: mmap failed: %s", strerror(errno));
    }
    return RV_OK;
}

const void *collect_column_data(const collect_column *c)
{
    if (c->bytes == 0 || c->keep == RV_KEEP_NONE)
        return NULL;
    return c->fd >= 0 ? c->map : c->mem;
}

void *collect_column_take(collect_column *c)
{
    if (c->keep != RV_KEEP_MEMORY || c->bytes == 0)
        return NULL;
    void *p = c->mem;
    *c = (collect_column){.keep = RV_KEEP_MEMORY, .fd = -1};
    return p;
}

void collect_column_close(collect_column *c)
{
    if (c->map)
        munmap(c->map, c->bytes);
    if (c->fd >= 0)
        close(c->fd);
    free(c->mem);
    *c = (collect_column){.keep = c->keep, .fd = -1};
}
