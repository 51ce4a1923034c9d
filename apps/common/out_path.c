/* out_path.c: what an output path may name (see out_path.h). Outputs are
 * written to "<target>.tmp.<pid>" and renamed onto the target, and rename()
 * replaces whatever is there, a device node included; this is the check before
 * that, in one place for every command; "-" (standard output) is the other
 * kind of output, written in place. */
#include "out_path.h"
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* How many links a chain may have before it is called a loop (Linux's own limit). */
#define OUT_MAX_LINKS 40

static const char *kind_of(mode_t m)
{
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISSOCK(m))
        return "a socket";
    if (S_ISDIR(m))
        return "a directory";
    return "not a regular file";
}

/* verb: "replace" for outputs renamed into place, "write" for logs written in place. */
static rv_status out_target(const char *out, const char *verb, char *target, size_t len)
{
    char cur[4096], link[4096], next[8192];
    struct stat sb;
    if (!out || !out[0])
        return rv_fail(RV_ERR_INVALID, "no output path given");
    if ((size_t)snprintf(cur, sizeof cur, "%s", out) >= sizeof cur)
        return rv_fail(RV_ERR_INVALID, "%.64s...: output path too long", out);
    for (int hops = 0;; hops++) {
        if (lstat(cur, &sb) != 0) {
            if (errno != ENOENT)
                return rv_fail(RV_ERR_IO, "%s: cannot check the output path: %s", out,
                               strerror(errno));
            break; /* nothing there: created (a dangling link creates its target) */
        }
        if (S_ISREG(sb.st_mode))
            break;
        if (!S_ISLNK(sb.st_mode)) {
            if (hops == 0)
                return rv_fail(RV_ERR_IO, "%s: is %s; refusing to %s it (only a regular file "
                               "is %sd)", out, kind_of(sb.st_mode), verb, verb);
            return rv_fail(RV_ERR_IO, "%s: is a symlink to %s, which is %s; refusing to %s it "
                           "(only a regular file is %sd)", out, cur, kind_of(sb.st_mode), verb,
                           verb);
        }
        if (hops == OUT_MAX_LINKS)
            return rv_fail(RV_ERR_IO, "%s: more than %d symlinks in a row (a loop?)", out,
                           OUT_MAX_LINKS);
        ssize_t n = readlink(cur, link, sizeof link - 1);
        if (n < 0)
            return rv_fail(RV_ERR_IO, "%s: cannot read the symlink %s: %s", out, cur,
                           strerror(errno));
        link[n] = '\0';
        /* A relative target is relative to the link's folder, not ours. */
        const char *slash = strrchr(cur, '/');
        if (link[0] == '/' || !slash)
            snprintf(next, sizeof next, "%s", link);
        else
            snprintf(next, sizeof next, "%.*s/%s", (int)(slash - cur), cur, link);
        if ((size_t)snprintf(cur, sizeof cur, "%s", next) >= sizeof cur)
            return rv_fail(RV_ERR_INVALID, "%s: the symlink's target path is too long", out);
    }
    if ((size_t)snprintf(target, len, "%s", cur) >= len)
        return rv_fail(RV_ERR_INVALID, "%s: output path too long", out);
    return RV_OK;
}

rv_status out_target_path(const char *out, char *target, size_t len)
{
    return out_target(out, "replace", target, len);
}

rv_status out_open_log(const char *path, int flags, int mode, int *fd)
{
    char target[4096];
    struct stat sb;
    rv_status st;
    *fd = -1;
    if ((st = out_target(path, "write", target, sizeof target)) != RV_OK)
        return st;
    /* O_NONBLOCK: a FIFO put there since the check fails at once (ENXIO) instead
     * of waiting for a reader; fstat then catches any other swap. */
    int f = open(path, flags | O_NONBLOCK, (mode_t)mode);
    if (f < 0)
        return rv_fail(RV_ERR_IO, "cannot open the log %s: %s", path, strerror(errno));
    if (fstat(f, &sb) != 0) {
        st = rv_fail(RV_ERR_IO, "%s: cannot check the log: %s", path, strerror(errno));
        goto end;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = rv_fail(RV_ERR_IO, "%s: is %s; refusing to write it (only a regular file is "
                     "written)", path, kind_of(sb.st_mode));
        goto end;
    }
    if (fcntl(f, F_SETFL, fcntl(f, F_GETFL) & ~O_NONBLOCK) != 0) {
        st = rv_fail(RV_ERR_IO, "cannot set up the log %s: %s", path, strerror(errno));
        goto end;
    }
    *fd = f;
    f = -1;
end:
    if (f >= 0)
        close(f);
    return st;
}

/* The descriptor on the original standard output (out_stdout_take), or -1. */
static int stdout_fd = -1;

int out_is_stdout(const char *out)
{
    return out && strcmp(out, "-") == 0;
}

int out_stdout_take(const char *cmd)
{
    if (stdout_fd >= 0)
        return 0;
    if (isatty(STDOUT_FILENO))
        return cli_usage_error(cmd, "-o - writes the safetensors bytes to standard output, "
                                  "which is a terminal: pipe it to a program or redirect it "
                                  "to a file");
    fflush(stdout);
    int fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
    if (fd < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
        cli_error("%s: cannot set up standard output for -o -: %s", cmd, strerror(errno));
        if (fd >= 0)
            close(fd);
        return RV_EXIT_FAIL;
    }
    signal(SIGPIPE, SIG_IGN);
    stdout_fd = fd;
    return 0;
}

rv_status out_write_st(rv_st_writer *w, const char *out)
{
    char target[4096];
    rv_status st;
    if (out_is_stdout(out)) {
        if (stdout_fd < 0)
            return rv_fail(RV_ERR_INTERNAL, "-o -: standard output was not set up");
        return rv_st_writer_write_fd(w, stdout_fd, "standard output");
    }
    /* Checked before the work and again now (see out_path.h). */
    if ((st = out_target_path(out, target, sizeof target)) != RV_OK)
        return st;
    return rv_st_writer_write(w, target);
}
