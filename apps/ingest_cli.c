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

static json_t *num_or_null(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

static const char *kind_name(rv_stream_kind k)
{
    switch (k) {
    case RV_STREAM_VIDEO: return "video";
    case RV_STREAM_AUDIO: return "audio";
    default: return "other";
    }
}

json_t *cli_probe_json(const rv_probe *p)
{
    json_t *root = json_object(), *arr = json_array();
    if (!root || !arr) {
        json_decref(root);
        json_decref(arr);
        return NULL;
    }
    json_object_set_new(root, "path", cli_json_path(p->path));
    json_object_set_new(root, "format", json_string(p->format));
    json_object_set_new(root, "duration_s", num_or_null(p->duration_s));
    json_object_set_new(root, "start_s", num_or_null(p->start_s));
    json_object_set_new(root, "bit_rate", json_integer(p->bit_rate));
    json_object_set_new(root, "size_bytes", json_integer(p->size_bytes));
    json_object_set_new(root, "video_stream", p->video >= 0 ? json_integer(p->video) : json_null());
    json_object_set_new(root, "audio_stream", p->audio >= 0 ? json_integer(p->audio) : json_null());
    for (int i = 0; i < p->nstreams; i++) {
        const rv_probe_stream *s = &p->streams[i];
        json_t *o = json_object();
        json_object_set_new(o, "index", json_integer(s->index));
        json_object_set_new(o, "type", json_string(kind_name(s->kind)));
        json_object_set_new(o, "codec", json_string(s->codec));
        json_object_set_new(o, "decodable", json_boolean(s->decodable));
        json_object_set_new(o, "default", json_boolean(s->is_default));
        json_object_set_new(o, "start_s", num_or_null(s->start_s));
        json_object_set_new(o, "duration_s", num_or_null(s->duration_s));
        json_object_set_new(o, "nb_frames", s->nb_frames > 0 ? json_integer(s->nb_frames) : json_null());
        json_object_set_new(o, "bit_rate", json_integer(s->bit_rate));
        if (s->kind == RV_STREAM_VIDEO) {
            json_object_set_new(o, "width", json_integer(s->width));
            json_object_set_new(o, "height", json_integer(s->height));
            json_object_set_new(o, "rotation", json_integer(s->rotation));
            json_object_set_new(o, "fps", s->fps > 0 ? json_real(s->fps) : json_null());
            json_object_set_new(o, "pix_fmt", json_string(s->pix_fmt));
        } else if (s->kind == RV_STREAM_AUDIO) {
            json_object_set_new(o, "sample_rate", json_integer(s->sample_rate));
            json_object_set_new(o, "channels", json_integer(s->channels));
            json_object_set_new(o, "channel_layout", json_string(s->channel_layout));
        }
        json_array_append_new(arr, o);
    }
    json_object_set_new(root, "streams", arr);
    return root;
}

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int cli_parse_fps(const char *cmd, const char *flag, const char *text, int *num, int *den)
{
    char name[64];
    size_t fl = strcspn(flag, "=");
    snprintf(name, sizeof name, "%.*s", (int)(fl < sizeof name ? fl : sizeof name - 1), flag);
    int64_t n = 0, d = 1;
    const char *p = text;
    int ok = p && *p;
    int digits = 0;
    for (; ok && *p >= '0' && *p <= '9'; p++, digits++)
        if ((n = n * 10 + (*p - '0')) > 1000000000)
            ok = 0;
    if (ok && *p == '/') {
        int64_t q = 0;
        int qd = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, qd++)
            if ((q = q * 10 + (*p - '0')) > 1000000000)
                ok = 0;
        ok = ok && qd > 0 && digits > 0 && q > 0;
        d = q;
    } else if (ok && *p == '.') {
        int fd = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, fd++) {
            if (fd >= 6)
                ok = 0;
            n = n * 10 + (*p - '0');
            d *= 10;
        }
        ok = ok && (digits > 0 || fd > 0);
    } else {
        ok = ok && digits > 0;
    }
    ok = ok && *p == '\0' && n > 0;
    if (ok) {
        int64_t g = gcd64(n, d);
        n /= g;
        d /= g;
        ok = n <= 1000000 && d <= 1000000 && n <= 1000 * d;
    }
    if (!ok)
        return cli_usage_error(cmd, "%s wants a frame rate like 30, 29.97 or 30000/1001 "
                                  "(above 0, at most 1000), got '%s'",
                                  name, text ? text : "");
    *num = (int)n;
    *den = (int)d;
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
    const int max = 1 << 30;
    size_t n = strlen(text);
    int pct = n > 1 && text[n - 1] == '%';
    char num[64], *endp = NULL;
    double v = NAN;
    /* plain decimals only: no sign, exponent, hex, inf or nan */
    if (n - (size_t)pct < sizeof num && n > (size_t)pct &&
        strspn(text, "0123456789.") == n - (size_t)pct) {
        memcpy(num, text, n - (size_t)pct);
        num[n - (size_t)pct] = '\0';
        errno = 0;
        v = strtod(num, &endp);
        if (errno || *endp != '\0')
            v = NAN;
    }
    if (pct ? !(v >= 0 && v <= 100) : !(v >= 0 && v <= max && v == floor(v)))
        return cli_usage_error(cmd, "--max-corrupt wants a count of corrupt packets (0 to "
                                  "%d) or a share of the file's packets from 0%% to 100%% "
                                  "(like 0.5%%), got '%s'", max, text);
    if (pct) {
        o->max_corrupt = 0;
        o->max_corrupt_share = v / 100;
    } else {
        o->max_corrupt = (int)v;
        o->max_corrupt_share = 0;
    }
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
