/* cmd_frames.c: `ringvit frames FILE -o OUT.safetensors`, the ingest stage on its
 * own: frames sampled at --fps, resized to --size, and the audio at 16 kHz mono,
 * written as one safetensors file:
 *   frames             (N, S, S, 3) U8   RGB
 *   frame_time         (N) F64          t_k, s on the container's clock
 *   frame_source_time  (N) F64          pts of the frame used, s, same clock
 *   audio              (M) F32          mono 16 kHz, sample j at start + j / 16000
 * and metadata "probe" (the probe as JSON), "ingest" (settings and counts as
 * JSON) and "time_origin" (t0, the first frame's pts, s). Times are on the
 * container's clock, as ffprobe and PyAV report pts: the grid starts at --start
 * on that clock, or where the recording starts (audio before the first frame
 * included). The library opens the recording and gathers the tensors (its
 * frames collector, rv_ingest.h) in unlinked scratch files next to the output as
 * they arrive, so a long recording costs disk, not memory; the writer then reads
 * them through a mapping and writes OUT atomically (temporary name, rename). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "apps.h"
#include "cli.h"
#include "cli_flags.h"
#include "ingest_cli.h"
#include "out_path.h"
#include "rv_clock.h"
#include "rv_ingest.h"
#include "rv_safetensors.h"

#define CMD "frames"

static const char help_text[] =
    "usage: ringvit frames FILE -o OUT.safetensors [--fps F] [--size N] [--pad]\n"
    "                      [--start S] [--duration D] [--audio-stream I | --no-audio]\n"
    "                      [--video-stream I] [--threads T] [--max-corrupt N|P%]\n"
    "                      [--decode-all] [--max-frames N]\n"
    "\n"
    "The ingest stage on its own: samples the video of FILE at F frames per second\n"
    "by presentation time, turns each frame upright, resizes it to N x N and\n"
    "resamples the audio to mono 16 kHz on the same clock, and writes frames,\n"
    "frame_time, frame_source_time, audio and metadata (probe, ingest, time_origin)\n"
    "to one safetensors file. Times are seconds on the file's own clock, as ffprobe\n"
    "and PyAV report pts. FILE '-' reads standard input. Prints one summary line on\n"
    "stdout; progress on stderr when it is a terminal.\n"
    "\n"
    "  -o, --output OUT    the safetensors file to write (required); '-': standard\n"
    "                      output (not a terminal; the summary line goes to stderr)\n"
    "  --fps F             frames per second: 1 (default), 29.97, 30000/1001 ...\n"
    "  --size N            output side in pixels (default 224)\n"
    "  --pad               letterbox into N x N instead of cropping the centre\n"
    "  --start S           start at S s on the file's clock (default: where the\n"
    "                      recording starts)\n"
    "  --duration D        stop D seconds after the start (default: the end)\n"
    "  --audio-stream I    audio from container stream I (see 'ringvit probe')\n"
    "  --no-audio          no audio (an empty audio tensor)\n"
    "  --video-stream I    video from container stream I\n"
    "  --threads T         decoder threads (default: automatic)\n"
    "  --max-corrupt N|P%  fail past N corrupt packets, or past P% of the file's\n"
    "                      packets (default: past both 32 and 1%)\n"
    "  --decode-all        decode every frame (the reference for the fast path)\n"
    "  --max-frames N      refuse more than N frames (default 1048576: 9.7 hours at\n"
    "                      30 fps)\n"
    "\n"
    "Exit status: 0 ok, 1 the file cannot be read or the output written, 2 usage.\n"
    "\n"
    "examples:\n"
    "  ringvit frames talk.mp4 --fps 2 --size 224 -o talk.safetensors\n"
    "  ringvit frames talk.mp4 --fps 30000/1001 --start 60 --duration 30 --pad \\\n"
    "      -o part.safetensors\n"
    "\n"
    "More: docs/media-commands.md (times, sampling, bad input, the file)\n";


typedef struct frames_state {
    rv_frames_collector *col;
    int64_t nframes, nsamples;
    int progress;          /* stderr is a terminal */
    double total_s;        /* for the progress line; NAN unknown */
    double start_time;     /* the grid's start on the container's clock, s */
    double last_print;
    int64_t max_frames;    /* --max-frames */
    const char *path;
} frames_state;

static rv_status on_chunk(const rv_ingest_chunk *c, void *user)
{
    frames_state *fs = user;
    rv_status st;
    if (fs->nframes + c->nframes > fs->max_frames)
        return rv_fail(RV_ERR_INVALID, "%s: more than --max-frames %lld frames at these "
                       "settings; raise --max-frames if the time and disk are meant", fs->path,
                       (long long)fs->max_frames);
    if ((st = rv_frames_collect(c, fs->col)) != RV_OK)
        return st;
    fs->nframes += c->nframes;
    fs->nsamples += c->nsamples;
    if (fs->progress) {
        double t = rv_clock_s();
        if (t - fs->last_print > 0.25 || c->last) {
            double at = fs->start_time + (double)(c->first_sample + c->nsamples) / RV_AUDIO_RATE;
            if (c->nframes > 0)
                at = c->frame_time[c->nframes - 1];
            if (isfinite(fs->total_s) && fs->total_s > 0)
                fprintf(stderr, "\r" RV_CLI_PROG ": " CMD ": %.1f of %.1f s, %lld frames   ",
                        at, fs->total_s, (long long)fs->nframes);
            else
                fprintf(stderr, "\r" RV_CLI_PROG ": " CMD ": %.1f s, %lld frames   ", at,
                        (long long)fs->nframes);
            if (c->last)
                fputc('\n', stderr);
            fs->last_print = t;
        }
    }
    return RV_OK;
}

typedef struct frames_args {
    const char *path, *out;
    rv_ingest_opts o;      /* start_s: since t0, from start_at once the file is open */
    double start_at;       /* --start on the container's clock (NAN: not given) */
    int64_t max_frames;
} frames_args;

static int parse_args(int argc, char **argv, frames_args *a)
{
    rv_ingest_opts_default(&a->o);
    a->o.start_s = NAN; /* --start given or not */
    a->path = a->out = NULL;
    a->max_frames = RV_CLI_MAX_FRAMES;
    int no_audio = 0, audio_set = 0, video_set = 0;
    const cli_flag flags[] = {
        {.name = "--output", .alias = "-o", .kind = RV_CLI_TEXT, .dst = &a->out},
        RV_CLI_INGEST_FLAGS(&a->o, NULL, &audio_set, &video_set),
        RV_CLI_INGEST_THREADS(&a->o),
        {.name = "--no-audio", .kind = RV_CLI_SWITCH, .dst = &no_audio},
        {.name = "--max-frames", .kind = RV_CLI_I64, .dst = &a->max_frames, .lo = 1,
         .hi = INT64_MAX},
        {.name = "--decode-all", .kind = RV_CLI_SWITCH, .dst = &a->o.decode_all},
    };
    int rc = cli_flags_parse(CMD, argc, argv, flags, RV_CLI_NFLAGS(flags),
                             &(cli_operands){.what = "FILE", .one = &a->path});
    if (rc)
        return rc;
    if (no_audio && audio_set)
        return cli_usage_error(CMD, "--no-audio and --audio-stream contradict each other");
    if (no_audio)
        a->o.audio_stream = -2;
    a->start_at = a->o.start_s;
    a->o.start_s = 0;
    if (!a->path)
        return cli_usage_error(CMD, "which file? give a media FILE");
    if (!a->out)
        return cli_usage_error(CMD, "no output file; give -o OUT.safetensors");
    if (out_is_stdout(a->out))
        return out_stdout_take(CMD);
    return 0;
}

static char *ingest_meta(const rv_frames_plan *p, const rv_ingest_stats *s)
{
    const rv_ingest_opts *o = &p->io;
    json_t *m = json_object();
    json_object_set_new(m, "fps", json_real((double)o->fps_num / o->fps_den));
    json_object_set_new(m, "fps_rational", json_sprintf("%d/%d", o->fps_num, o->fps_den));
    json_object_set_new(m, "size", json_integer(o->size));
    json_object_set_new(m, "pad", json_boolean(o->pad));
    json_object_set_new(m, "start_s", json_real(p->start_time));
    json_object_set_new(m, "duration_s", o->duration_s > 0 ? json_real(o->duration_s) : json_null());
    json_object_set_new(m, "audio_rate", json_integer(RV_AUDIO_RATE));
    json_object_set_new(m, "video_stream", s->video_stream >= 0 ? json_integer(s->video_stream) : json_null());
    json_object_set_new(m, "audio_stream", s->audio_stream >= 0 ? json_integer(s->audio_stream) : json_null());
    json_object_set_new(m, "rotation", json_integer(s->rotation));
    json_object_set_new(m, "time_origin_s", json_real(s->t0)); /* t0, as it always was */
    json_object_set_new(m, "end_s", json_real(s->end_s));
    json_object_set_new(m, "frames", json_integer(s->frames));
    json_object_set_new(m, "samples", json_integer(s->samples));
    json_object_set_new(m, "decoded_frames", json_integer(s->decoded_frames));
    json_object_set_new(m, "corrupt", json_integer(s->corrupt));
    char *text = json_dumps(m, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
    json_decref(m);
    return text;
}

static int frames_main(int argc, char **argv)
{
    frames_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc;

    rv_frames_plan plan = {0};
    rv_st_writer *w = NULL;
    char *probe_text = NULL, *meta_text = NULL;
    frames_state fs = {0};
    rv_ingest_stats stats;
    rv_collected arr[RV_FRAMES_ARRAYS];
    rv_status st;
    char input[4096], target[4096];
    int spooled = 0;
    /* Before the work, and again just before writing (see out_path.h); "-" is
     * standard output (its scratch files go to $TMPDIR). */
    if (out_is_stdout(a.out))
        snprintf(target, sizeof target, "-");
    else if ((st = out_target_path(a.out, target, sizeof target)) != RV_OK)
        return cli_fail(st, CMD);
    if ((rc = cli_input_open(CMD, a.path, input, sizeof input, &spooled)) != 0)
        return rc;
    a.path = input;
    rc = RV_EXIT_FAIL;

    if ((st = rv_frames_plan_make(a.path, &a.o, a.start_at, &plan)) != RV_OK) {
        cli_fail(st, CMD);
        goto end;
    }
    const rv_probe *probe = plan.probe;
    if (spooled)
        snprintf(plan.probe->path, sizeof plan.probe->path, "-");
    /* The work the stated duration implies, refused before any decoding. */
    double span = probe->duration_s - plan.io.start_s;
    if (plan.io.duration_s > 0 && plan.io.duration_s < span)
        span = plan.io.duration_s;
    const double planned = floor(span * plan.io.fps_num / plan.io.fps_den);
    if (probe->video >= 0 && plan.io.video_stream != -2 && isfinite(planned) &&
        planned > (double)a.max_frames) {
        cli_fail(rv_fail(RV_ERR_INVALID, "%s: %.0f frames (%.0f s at %d/%d fps), more than "
                            "--max-frames %lld; raise --max-frames if the time and disk "
                            "(%.0f MB) are meant", a.path, planned, span, plan.io.fps_num,
                            plan.io.fps_den, (long long)a.max_frames,
                            planned * plan.io.size * plan.io.size * 3 / 1e6),
                    CMD);
        goto end;
    }
    fs.max_frames = a.max_frames;
    fs.path = a.path;
    if ((st = rv_frames_collector_new(plan.io.size, RV_KEEP_SCRATCH, target, &fs.col)) != RV_OK) {
        cli_fail(st, CMD);
        goto end;
    }
    fs.progress = isatty(STDERR_FILENO);
    fs.total_s = probe->duration_s;
    fs.start_time = plan.start_time;
    if ((st = rv_ingest_stream(a.path, &plan.io, on_chunk, &fs, &stats)) != RV_OK) {
        if (fs.progress)
            fputc('\n', stderr);
        cli_fail(st, CMD);
        goto end;
    }
    if ((st = rv_frames_arrays(fs.col, arr)) != RV_OK) {
        cli_fail(st, CMD);
        goto end;
    }
    if (rv_probe_json_text(probe, 0, &probe_text) != RV_OK)
        probe_text = NULL;
    meta_text = ingest_meta(&plan, &stats);
    if (!probe_text || !meta_text) {
        cli_error("%s: out of memory", CMD);
        goto end;
    }
    char origin_text[40];
    snprintf(origin_text, sizeof origin_text, "%.17g", plan.tl.time_origin);
    /* F64 first, then F32, then U8 (the collector's order): every tensor starts
     * aligned to its element. */
    static const rv_dtype dtypes[RV_FRAMES_ARRAYS] = {RV_F64, RV_F64, RV_F32, RV_U8};
    st = rv_st_writer_new(&w);
    for (int i = 0; i < RV_FRAMES_ARRAYS && st == RV_OK; i++)
        st = rv_st_writer_add(w, arr[i].name, dtypes[i], arr[i].ndim, arr[i].shape, arr[i].data);
    if (st != RV_OK || (st = rv_st_writer_meta(w, "format", "ringvit-frames")) != RV_OK ||
        (st = rv_st_writer_meta(w, "probe", probe_text)) != RV_OK ||
        (st = rv_st_writer_meta(w, "ingest", meta_text)) != RV_OK ||
        (st = rv_st_writer_meta(w, "time_origin", origin_text)) != RV_OK ||
        (st = out_write_st(w, a.out)) != RV_OK) {
        cli_fail(st, CMD);
        goto end;
    }
    const int64_t S = plan.io.size;
    printf("%s: %lld frames of %lldx%lld at %d/%d fps, %lld audio samples (%.3f s), "
           "%lld corrupt skipped\n",
           a.out, (long long)fs.nframes, (long long)S, (long long)S, plan.io.fps_num,
           plan.io.fps_den, (long long)fs.nsamples, (double)fs.nsamples / RV_AUDIO_RATE,
           (long long)stats.corrupt);
    rc = RV_EXIT_OK;
end:
    rv_st_writer_free(&w);
    rv_frames_collector_free(&fs.col);
    free(probe_text);
    free(meta_text);
    rv_frames_plan_release(&plan);
    cli_input_done(input, spooled);
    return rc;
}

const cli_command cmd_frames = {
    .name = "frames",
    .summary = "sample frames and audio of a media file (frames FILE -o OUT)",
    .main = frames_main,
    .help = help_text,
};
