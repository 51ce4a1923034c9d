/* ingest_cli.c: the probe as JSON, exact frame-rate parsing and the ingest
 * flags every media command shares (--max-corrupt as a count or a share),
 * shared by `ringvit probe`, `frames`, `tokens`, `embed`, `finetune` and
 * `bench ingest`. */
#include "ingest_cli.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

int cli_parse_fps(const char *cmd, const char *flag, const char *text, int *num, int *den)
{
    char name[64];
    size_t fl = strcspn(flag, "=");
    snprintf(name, sizeof name, "%.*s", (int)(fl < sizeof name ? fl : sizeof name - 1), flag);
    if (rv_ingest_parse_fps(text, num, den) != RV_OK)
        return cli_usage_error(cmd, "%s wants a frame rate like 30, 29.97 or 30000/1001 "
                                  "(above 0, at most 1000), got '%s'",
                                  name, text ? text : "");
    return 0;
}

int cli_take_fps(const char *cmd, int argc, char **argv, int *i, int *num, int *den)
{
    const char *flag = argv[*i];
    const char *text = cli_flag_value(cmd, argc, argv, i);
    if (!text)
        return RV_EXIT_USAGE;
    return cli_parse_fps(cmd, flag, text, num, den);
}

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

int cli_parse_max_corrupt(const char *cmd, const char *text, rv_ingest_opts *o)
{
    if (rv_ingest_parse_max_corrupt(text, o) != RV_OK)
        return cli_usage_error(cmd, "--max-corrupt wants a count of corrupt packets (0 to "
                                  "%d) or a share of the file's packets from 0%% to 100%% "
                                  "(like 0.5%%), got '%s'", 1 << 30, text);
    return 0;
}

int cli_ingest_flag(const char *cmd, int argc, char **argv, int *i, rv_ingest_opts *o,
                       int *audio_set, int *video_set, int *rc)
{
    const char *s = argv[*i];
    *rc = 0;
    if (cli_flag_is(s, "--fps")) {
        *rc = cli_take_fps(cmd, argc, argv, i, &o->fps_num, &o->fps_den);
    } else if (cli_flag_is(s, "--size")) {
        *rc = cli_take_int(cmd, argc, argv, i, 8, 4096, &o->size);
    } else if (cli_flag_is(s, "--start")) {
        *rc = cli_take_double(cmd, argc, argv, i, 0, 1e8, &o->start_s);
    } else if (cli_flag_is(s, "--duration")) {
        *rc = cli_take_double(cmd, argc, argv, i, 1e-6, 1e8, &o->duration_s);
    } else if (cli_flag_is(s, "--audio-stream")) {
        *rc = cli_take_int(cmd, argc, argv, i, 0, 65535, &o->audio_stream);
        *audio_set = 1;
    } else if (cli_flag_is(s, "--video-stream")) {
        *rc = cli_take_int(cmd, argc, argv, i, 0, 65535, &o->video_stream);
        *video_set = 1;
    } else if (cli_flag_is(s, "--threads")) {
        *rc = cli_take_int(cmd, argc, argv, i, 0, 256, &o->threads);
    } else if (cli_flag_is(s, "--max-corrupt")) {
        const char *text = cli_flag_value(cmd, argc, argv, i);
        *rc = text ? cli_parse_max_corrupt(cmd, text, o) : RV_EXIT_USAGE;
    } else if (strcmp(s, "--pad") == 0) {
        o->pad = 1;
    } else {
        return 0;
    }
    return 1;
}
