/* ingest_cli.c: --max-corrupt as a count or a share, and standard input spooled
 * to a file: what `ringvit probe`, `frames`, `tokens`, `embed`, `finetune` and
 * `bench ingest` share (ingest_cli.h). */
#include "ingest_cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

int cli_input_open(const char *cmd, const char *arg, char *path, size_t len, int *spooled)
{
    *spooled = 0;
    if (strcmp(arg, "-") != 0) {
        snprintf(path, len, "%s", arg);
        return RV_EXIT_OK;
    }
    if (isatty(STDIN_FILENO))
        return cli_usage_error(cmd, "FILE is '-' but standard input is a terminal");
    const char *dir = getenv("TMPDIR");
    snprintf(path, len, "%s/ringvit-stdin.XXXXXX", dir && dir[0] ? dir : "/tmp");
    int fd = mkstemp(path), rc = RV_EXIT_FAIL;
    if (fd < 0) {
        cli_error("%s: cannot create a temporary file for standard input in %s: %s", cmd,
                     dir && dir[0] ? dir : "/tmp", strerror(errno));
        return RV_EXIT_FAIL;
    }
    char buf[1 << 16];
    size_t total = 0;
    for (;;) {
        ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
        if (n == 0)
            break;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            cli_error("%s: reading standard input: %s", cmd, strerror(errno));
            goto end;
        }
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(fd, buf + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0) {
                cli_error("%s: copying standard input to %s: %s", cmd, path, strerror(errno));
                goto end;
            }
            off += w;
        }
        total += (size_t)n;
    }
    if (total == 0) {
        cli_error("%s: standard input is empty", cmd);
        goto end;
    }
    rc = RV_EXIT_OK;
    *spooled = 1;
end:
    close(fd);
    if (rc != RV_EXIT_OK)
        unlink(path);
    return rc;
}

void cli_input_done(const char *path, int spooled)
{
    if (spooled)
        unlink(path);
}

int cli_take_max_corrupt(const char *cmd, const char *name, const char *value, void *dst)
{
    (void)name;
    if (rv_ingest_parse_max_corrupt(value, dst) != RV_OK)
        return cli_usage_error(cmd, "--max-corrupt wants a count of corrupt packets (0 to "
                                  "%d) or a share of the file's packets from 0%% to 100%% "
                                  "(like 0.5%%), got '%s'", 1 << 30, value);
    return 0;
}
