/* bench_ingest.c: `ringvit bench ingest FILE --fps F --size N`, the ingest stage
 * timed against the ffmpeg command that makes the same frames, in the same run:
 *   ffmpeg -i FILE -map 0:V -vf fps=F,scale=W:H:flags=area,crop=N:N
 *          -f rawvideo -pix_fmt rgb24 /dev/null
 * (W x H the size ringvit resizes to; pad=N:N instead of crop with --pad).
 * ringvit runs first, in this process, through the streaming API with chunks it
 * discards (decode, sample, resize, and the audio resampled to 16 kHz, which the
 * ffmpeg command does not do); then ffmpeg as a child. One row each: frames, wall
 * and CPU seconds, frames/s, recording seconds per wall second, the wall-time
 * ratio (ffmpeg / ringvit: above 1 means ringvit is faster), peak resident
 * memory. The footer is OK when both ran and made the same number of frames
 * (within 2: the fps filter rounds the last frame differently). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "apps.h"
#include "bench_common.h"
#include "cli.h"
#include "ingest_cli.h"
#include "rv_clock.h"
#include "rv_ingest.h"

#define CMD "bench ingest"

extern char **environ;

static const char help_text[] =
    "usage: ringvit bench ingest FILE [--fps F] [--size N] [--pad] [--threads T]\n"
    "                            [--no-audio] [--decode-all]\n"
    "                            [--ffmpeg PATH | --no-ffmpeg] [--json]\n"
    "\n"
    "Times 'ringvit frames' work on FILE (decode, sample at F fps, resize to N x N,\n"
    "audio to 16 kHz mono, nothing written) and, in the same run, the ffmpeg\n"
    "command that makes the same frames: frames made, wall and CPU seconds,\n"
    "frames/s, recording seconds per wall second, the ratio (ffmpeg's wall time over\n"
    "ringvit's) and the peak resident memory.\n"
    "\n"
    "  --fps F         frames per second (default 1)\n"
    "  --size N        output side (default 224)\n"
    "  --pad           letterbox instead of crop (both runs)\n"
    "  --threads T     decoder threads of both runs (default: automatic)\n"
    "  --no-audio      leave the audio out of the ringvit run\n"
    "  --decode-all    time ringvit's decode-every-frame reference path instead\n"
    "  --ffmpeg PATH   the ffmpeg command to compare with (default: ffmpeg on PATH)\n"
    "  --no-ffmpeg     time ringvit alone\n"
    "  --json          one JSON object on stdout instead of the table\n"
    "\n"
    "Exit status: 0 OK, 1 FAILED (the ffmpeg command did not run, or made another\n"
    "number of frames) or a runtime failure, 2 usage.\n"
    "\n"
    "example:\n"
    "  ringvit bench ingest talk.mp4 --fps 1 --size 224\n"
    "\n"
    "More: docs/benchmarks.md (the ffmpeg command, the current numbers)\n";

typedef struct bench_row {
    const char *name;
    int ran;
    int64_t frames;
    double wall, cpu, peak_mb;
} bench_row;

static double tv_s(struct timeval t)
{
    return t.tv_sec + t.tv_usec * 1e-6;
}

static rv_status count_chunk(const rv_ingest_chunk *c, void *user)
{
    *(int64_t *)user += c->nframes;
    return RV_OK;
}

/* Runs ffmpeg with the progress report on its stderr (a pipe here): the frame
 * count is the last "frame=" line. */
static int run_ffmpeg(const char *ffmpeg, char **args, bench_row *row, char *err, size_t errsz)
{
    int fds[2];
    pid_t pid;
    posix_spawn_file_actions_t fa;
    if (pipe(fds) != 0) {
        snprintf(err, errsz, "pipe: %s", strerror(errno));
        return -1;
    }
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    double t0 = rv_clock_s();
    int rc = posix_spawnp(&pid, ffmpeg, &fa, NULL, args, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        snprintf(err, errsz, "cannot run '%s': %s", ffmpeg, strerror(rc));
        return -1;
    }
    char buf[4096], line[512], last_err[512] = "";
    size_t ll = 0;
    int64_t frames = -1;
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] != '\n' && ll + 1 < sizeof line) {
                line[ll++] = buf[i];
                continue;
            }
            line[ll] = '\0';
            ll = 0;
            if (strncmp(line, "frame=", 6) == 0)
                frames = strtoll(line + 6, NULL, 10);
            else if (!strchr(line, '=') && line[0])
                snprintf(last_err, sizeof last_err, "%s", line);
        }
    }
    close(fds[0]);
    int status = 0;
    struct rusage ru;
    while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR)
        ;
    row->wall = rv_clock_s() - t0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || frames < 0) {
        snprintf(err, errsz, "ffmpeg failed%s%s", last_err[0] ? ": " : "", last_err);
        return -1;
    }
    row->ran = 1;
    row->frames = frames;
    row->cpu = tv_s(ru.ru_utime) + tv_s(ru.ru_stime);
    row->peak_mb = ru.ru_maxrss / 1024.0;
    return 0;
}

/* One row per decoder that ran. */
static const bench_col row_cols[] = {
    {"decoder", "%8s", "decoder", RV_BENCH_TEXT},
    {"frames", "%8lld", "frames", RV_BENCH_INT},
    {"wall s", "%8.2f", "wall_s", RV_BENCH_REAL},
    {"cpu s", "%8.2f", "cpu_s", RV_BENCH_REAL},
    {"frames/s", "%9.1f", "frames_per_s", RV_BENCH_REAL},
    {"rec-s/s", "%8.1f", "recording_s_per_s", RV_BENCH_REAL},
    {"ratio", "%7.2f", "ratio", RV_BENCH_REAL},
    {"peak MB", "%8.1f", "peak_rss_mb", RV_BENCH_REAL},
};

static int bench_main(int argc, char **argv)
{
    rv_ingest_opts o;
    rv_ingest_opts_default(&o);
    const char *path = NULL, *ffmpeg = "ffmpeg";
    int rc = 0, json = 0, no_ffmpeg = 0, no_audio = 0, threads_set = 0;
    const cli_flag flags[] = {
        RV_CLI_INGEST_FPS(&o),
        RV_CLI_INGEST_SIZE(&o, NULL),
        {.name = "--threads", .kind = RV_CLI_INT, .dst = &o.threads, .lo = 1, .hi = 256,
         .seen = &threads_set},
        {.name = "--ffmpeg", .kind = RV_CLI_TEXT, .dst = &ffmpeg},
        {.name = "--pad", .kind = RV_CLI_SWITCH, .dst = &o.pad},
        {.name = "--no-audio", .kind = RV_CLI_SWITCH, .dst = &no_audio},
        {.name = "--decode-all", .kind = RV_CLI_SWITCH, .dst = &o.decode_all},
        {.name = "--no-ffmpeg", .kind = RV_CLI_SWITCH, .dst = &no_ffmpeg},
        {.name = "--json", .kind = RV_CLI_SWITCH, .dst = &json},
    };
    if ((rc = cli_flags_parse(CMD, argc, argv, flags, RV_CLI_NFLAGS(flags),
                              &(cli_operands){.what = "FILE", .one = &path})) != 0)
        return rc;
    if (no_audio)
        o.audio_stream = -2;
    if (!path)
        return cli_usage_error(CMD, "which file? give a media FILE");

    rv_probe *probe = NULL;
    rv_status st = rv_probe_file(path, &probe);
    if (st != RV_OK)
        return cli_fail(st, CMD);
    if (probe->video < 0) {
        rv_probe_free(&probe);
        cli_error("%s: %s: no video stream to decode", CMD, path);
        return RV_EXIT_FAIL;
    }
    const rv_probe_stream *vs = &probe->streams[probe->video];
    int quarter = vs->rotation == 90 || vs->rotation == 270;
    int W = 0, H = 0;
    rv_ingest_scaled_size(quarter ? vs->height : vs->width, quarter ? vs->width : vs->height,
                          o.size, o.pad, &W, &H);

    bench_row rows[2] = {{"ringvit", 0, 0, 0, 0, 0}, {"ffmpeg", 0, 0, 0, 0, 0}};
    rv_ingest_stats stats;
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    double t0 = rv_clock_s();
    st = rv_ingest_stream(path, &o, count_chunk, &rows[0].frames, &stats);
    rows[0].wall = rv_clock_s() - t0;
    getrusage(RUSAGE_SELF, &ru1);
    if (st != RV_OK) {
        rv_probe_free(&probe);
        return cli_fail(st, CMD);
    }
    rows[0].ran = 1;
    rows[0].cpu = tv_s(ru1.ru_utime) + tv_s(ru1.ru_stime) - tv_s(ru0.ru_utime) - tv_s(ru0.ru_stime);
    rows[0].peak_mb = ru1.ru_maxrss / 1024.0;

    char ffmpeg_err[600] = "";
    if (!no_ffmpeg) {
        char map[32], vf[256], thr[16];
        snprintf(map, sizeof map, "0:%d", probe->video);
        if (o.pad)
            snprintf(vf, sizeof vf, "fps=%d/%d,scale=%d:%d:flags=area,pad=%d:%d:(ow-iw)/2:(oh-ih)/2",
                     o.fps_num, o.fps_den, W, H, o.size, o.size);
        else
            snprintf(vf, sizeof vf, "fps=%d/%d,scale=%d:%d:flags=area,crop=%d:%d", o.fps_num,
                     o.fps_den, W, H, o.size, o.size);
        snprintf(thr, sizeof thr, "%d", o.threads);
        char *args[32];
        int na = 0;
        args[na++] = (char *)ffmpeg;
        args[na++] = "-nostdin";
        args[na++] = "-hide_banner";
        args[na++] = "-loglevel";
        args[na++] = "error";
        args[na++] = "-nostats";
        args[na++] = "-progress";
        args[na++] = "pipe:2";
        if (threads_set) {
            args[na++] = "-threads";
            args[na++] = thr;
        }
        args[na++] = "-i";
        args[na++] = (char *)path;
        args[na++] = "-map";
        args[na++] = map;
        args[na++] = "-vf";
        args[na++] = vf;
        args[na++] = "-f";
        args[na++] = "rawvideo";
        args[na++] = "-pix_fmt";
        args[na++] = "rgb24";
        args[na++] = "-y";
        args[na++] = "/dev/null";
        args[na] = NULL;
        if (run_ffmpeg(ffmpeg, args, &rows[1], ffmpeg_err, sizeof ffmpeg_err) != 0)
            cli_error("%s: %s", CMD, ffmpeg_err);
    }

    char threads_text[16] = "auto";
    if (threads_set)
        snprintf(threads_text, sizeof threads_text, "%d", o.threads);
    double rec = stats.end_s - o.start_s;
    double ratio = rows[1].ran ? rows[1].wall / rows[0].wall : NAN;
    int ok = rows[0].ran && (no_ffmpeg || (rows[1].ran && llabs(rows[1].frames - rows[0].frames) <= 2));
    bench_report rep;
    bench_report_init(&rep, "ingest", json);
    bench_set(&rep, "file", cli_json_path(path));
    bench_set(&rep, "codec", json_string(vs->codec));
    bench_set(&rep, "width", json_integer(vs->width));
    bench_set(&rep, "height", json_integer(vs->height));
    bench_set(&rep, "fps", json_real((double)o.fps_num / o.fps_den));
    bench_set(&rep, "size", json_integer(o.size));
    bench_set(&rep, "recording_s", json_real(rec));
    bench_set(&rep, "decoded_frames", json_integer(stats.decoded_frames));
    bench_set(&rep, "skipped_packets", json_integer(stats.skipped_packets));
    bench_note(&rep, "ringvit bench ingest: %s, %s %dx%d, %.1f s, fps %d/%d, size %d%s, "
                  "threads %s", path, vs->codec, vs->width, vs->height, rec, o.fps_num,
                  o.fps_den, o.size, o.pad ? " pad" : "", threads_text);
    bench_note(&rep, "ringvit decoded %lld frames, skipped %lld packets",
                  (long long)stats.decoded_frames, (long long)stats.skipped_packets);
    bench_note(&rep, "%s", "");
    bench_table(&rep, "rows", row_cols, (int)(sizeof row_cols / sizeof row_cols[0]));
    for (int r = 0; r < 2; r++)
        if (rows[r].ran)
            bench_add_row(&rep, (const bench_val[]){
                                   {.s = rows[r].name}, {.i = rows[r].frames}, {.f = rows[r].wall},
                                   {.f = rows[r].cpu}, {.f = rows[r].frames / rows[r].wall},
                                   {.f = rec / rows[r].wall}, {.f = r == 0 ? ratio : 1.0},
                                   {.f = rows[r].peak_mb}});
    if (!rows[1].ran)
        rc = bench_finish(&rep, ok, "the ffmpeg command did not run (%s)", ffmpeg_err);
    else
        rc = bench_finish(&rep, ok, "ringvit made %lld frames, ffmpeg %lld",
                             (long long)rows[0].frames, (long long)rows[1].frames);
    rv_probe_free(&probe);
    return rc;
}

const bench_cmd bench_ingest = {
    .name = "ingest",
    .help = help_text,
    .main = bench_main,
};
