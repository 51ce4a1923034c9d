/* fuzz_file.h: the fuzz input as a file for loaders that take a path: an
 * anonymous memory file (memfd) named by /proc/self/fd/N, so a run writes
 * nothing to disk and the loader's real open path (stat, mmap, FFmpeg's file
 * protocol) is what gets fuzzed. The targets are compiled with _GNU_SOURCE
 * (memfd_create). */
#ifndef RV_FUZZ_FILE_H
#define RV_FUZZ_FILE_H


#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct fuzz_file {
    int fd;          /* -1: none */
    char path[64];   /* /proc/self/fd/N */
} fuzz_file;

/* Returns 0 with f->path naming a file holding data, or -1. */
static inline int fuzz_file_open(fuzz_file *f, const char *name, const uint8_t *data,
                                 size_t size)
{
    f->fd = memfd_create(name, 0);
    if (f->fd < 0)
        return -1;
    size_t done = 0;
    while (done < size) {
        ssize_t n = write(f->fd, data + done, size - done);
        if (n <= 0) {
            close(f->fd);
            f->fd = -1;
            return -1;
        }
        done += (size_t)n;
    }
    snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
    return 0;
}

static inline void fuzz_file_close(fuzz_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
}

#endif
