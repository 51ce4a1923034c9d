/* cmd_probe.c: `ringvit probe FILE [--json]`, what a media file holds (container,
 * streams, sizes, rates, rotation) and which streams ingest would use, read from
 * the headers without decoding the recording. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps.h"
#include "cli.h"
#include "cli_flags.h"
#include "ingest_cli.h"
#include "rv_ingest.h"

#define CMD "probe"

static const char help_text[] =
    "usage: ringvit probe FILE [--json]\n"
    "\n"
    "Shows what a media file holds, from its headers (nothing is decoded):\n"
    "container, duration, and for each stream its codec, picture size, frame rate,\n"
    "rotation, sample rate and channels, and which video and audio streams\n"
    "'ringvit frames' would use. FILE '-' reads standard input.\n"
    "\n"
    "  --json   one JSON object on stdout instead of the table\n"
    "\n"
    "Exit status: 0 ok, 1 the file cannot be read or is not a media file, 2 usage.\n"
    "\n"
    "examples:\n"
    "  ringvit probe talk.mp4\n"
    "  ringvit probe talk.mp4 --json\n"
    "  curl -s https://example.org/talk.mkv | ringvit probe -\n"
    "\n"
    "More: docs/media-commands.md (probe, frames, tokens, inspect, init)\n";

static void print_seconds(const char *label, double v)
{
    if (isfinite(v))
        printf("%s%.3f s", label, v);
    else
        printf("%sunknown", label);
}

static void print_table(const rv_probe *p)
{
    printf("file:     %s\n", p->path);
    printf("format:   %s\n", p->format);
    print_seconds("duration: ", p->duration_s);
    print_seconds(", start ", p->start_s);
    printf(", %.1f kb/s, %lld bytes\n", p->bit_rate / 1000.0, (long long)p->size_bytes);
    printf("streams:\n");
    for (int i = 0; i < p->nstreams; i++) {
        const rv_probe_stream *s = &p->streams[i];
        printf("  #%d ", s->index);
        if (s->kind == RV_STREAM_VIDEO) {
            printf("video %s %dx%d", s->codec, s->width, s->height);
            if (s->fps > 0)
                printf(" %.3f fps", s->fps);
            if (s->pix_fmt[0])
                printf(" %s", s->pix_fmt);
            if (s->rotation)
                printf(" rotation %d", s->rotation);
        } else if (s->kind == RV_STREAM_AUDIO) {
            printf("audio %s %d Hz %d ch", s->codec, s->sample_rate, s->channels);
            if (s->channel_layout[0])
                printf(" (%s)", s->channel_layout);
        } else {
            printf("other %s", s->codec);
        }
        print_seconds(", ", s->duration_s);
        if (!s->decodable)
            printf(" [no decoder]");
        if (s->index == p->video)
            printf(" [frames]");
        if (s->index == p->audio)
            printf(" [audio]");
        printf("\n");
    }
}

static int probe_main(int argc, char **argv)
{
    const char *path = NULL;
    int json = 0;
    const cli_flag flags[] = {{.name = "--json", .kind = RV_CLI_SWITCH, .dst = &json}};
    int rc = cli_flags_parse(CMD, argc, argv, flags, RV_CLI_NFLAGS(flags),
                             &(cli_operands){.what = "FILE", .one = &path});
    if (rc)
        return rc;
    if (!path)
        return cli_usage_error(CMD, "which file? give a media FILE");

    char input[4096];
    int spooled = 0;
    rc = cli_input_open(CMD, path, input, sizeof input, &spooled);
    if (rc)
        return rc;
    rv_probe *p = NULL;
    rv_status st = rv_probe_file(input, &p);
    cli_input_done(input, spooled);
    if (st != RV_OK)
        return cli_fail(st, CMD);
    if (spooled)
        snprintf(p->path, sizeof p->path, "-");
    if (json) {
        char *text = NULL;
        if ((st = rv_probe_json_text(p, 1, &text)) != RV_OK) {
            rc = cli_fail(st, CMD);
        } else if (printf("%s\n", text) < 0 || fflush(stdout) != 0) {
            cli_error("could not write JSON to standard output");
            rc = RV_EXIT_FAIL;
        } else {
            rc = RV_EXIT_OK;
        }
        free(text);
    } else {
        print_table(p);
    }
    rv_probe_free(&p);
    return rc;
}

const cli_command cmd_probe = {
    .name = "probe",
    .summary = "show the streams of a media file (probe FILE)",
    .main = probe_main,
    .help = help_text,
};
