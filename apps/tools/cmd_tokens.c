/* cmd_tokens.c: `ringvit tokens FILE`, the tokenize stage on its own. Plans the
 * token sequence from the probe (before decoding), tokenizes the recording
 * along that plan chunk by chunk, and reports the counts per modality, the
 * sequence length, tokens per recording-second, the attention blocks (--block,
 * --frame: the windows, each led by its special tokens, positions restarting
 * in each) and, for --cp N ranks, each rank's shard: its tokens and time
 * ranges. With -o it writes
 *   video_patches   (video tokens, T*P*P*3) F32   normalised, (t, y, x, c)
 *   audio_fbank     (fbank frames, 128) F32       log-mel, before normalisation
 *   audio_patches   (audio tokens, F*W) F32       normalised, (f, w)
 *   token_modality  (seq) U8                      0 video, 1 audio, 2 cls / dist
 *   token_pos       (seq, 3) I64                  (t, y, x) | (t, f, 0) | (i, 0, 0)
 *   token_time      (seq, 2) F64                  start, end, s on the container's clock
 *   token_window    (seq) I64                     window (attention block) index
 * plus metadata "tokens" (options and counts, JSON), "probe" and "time_origin"
 * (t0, the first video frame's pts, s). Every time written or reported is on
 * the container's clock, as ffprobe and PyAV report pts; --start is on it too. The
 * library plans the sequence (rv_tok_recording_plan), tokenizes and gathers the
 * tensors (rv_tok_collect.h) in unlinked scratch files beside OUT as the
 * batches arrive, so a long recording costs disk, not memory, and builds the
 * report (rv_tok_report.h); OUT is written atomically. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps.h"
#include "cli.h"
#include "cli_flags.h"
#include "ingest_cli.h"
#include "out_path.h"
#include "rv_clock.h"
#include "rv_ingest.h"
#include "rv_safetensors.h"
#include "rv_shard.h"
#include "rv_tok_collect.h"
#include "rv_tok_report.h"
#include "rv_tok_slice.h"
#include "rv_tokenize.h"
#include "rv_tokens.h"

#define CMD "tokens"

static const char help_text[] =
    "usage: ringvit tokens FILE [--fps F] [--size N] [--pad] [--start S]\n"
    "                      [--duration D] [--tubelet T] [--patch P] [--mean R,G,B]\n"
    "                      [--std R,G,B] [--audio-freq F] [--audio-freq-stride K]\n"
    "                      [--audio-time W] [--audio-stride K] [--audio-mean M]\n"
    "                      [--audio-std S] [--audio-window SEC | --block SEC |\n"
    "                      --frame] [--cls] [--dist] [--no-audio | --audio-stream I]\n"
    "                      [--no-video | --video-stream I] [--cp N]\n"
    "                      [--shard contiguous|zigzag] [--plan-only] [--threads T]\n"
    "                      [--max-corrupt N|P%] [--max-tokens N] [--json]\n"
    "                      [-o OUT.safetensors]\n"
    "\n"
    "The tokenize stage on its own: turns FILE into one token sequence (video\n"
    "tubelets and audio patches of the log-mel filterbank, interleaved by time\n"
    "window, after the special tokens asked for), planned from the container's\n"
    "duration before decoding and then tokenized chunk by chunk along that plan.\n"
    "Prints the counts per modality, the sequence length, tokens per\n"
    "recording-second and, for N ranks, each rank's shard length and time ranges;\n"
    "-o writes the tokens.\n"
    "\n"
    "  --fps F, --size N, --pad, --start S, --duration D\n"
    "                      sampling as in 'ringvit frames' (defaults 1 fps, 224 px)\n"
    "  --tubelet T         frames per video token (default 2; 1: image patches)\n"
    "  --patch P           pixels per patch side (default 16; must divide N)\n"
    "  --mean R,G,B        video mean per channel on [0, 1] (default ImageNet)\n"
    "  --std R,G,B         video std per channel (default ImageNet)\n"
    "  --audio-freq F      mel bins per audio patch (default 16; 1..128)\n"
    "  --audio-freq-stride K\n"
    "                      mel bins between neighbouring frequency bands (default\n"
    "                      0 = F: side by side)\n"
    "  --audio-time W      fbank frames (10 ms) per audio patch (default 16)\n"
    "  --audio-stride K    fbank frames between audio patches (default W; AST: 10)\n"
    "  --audio-mean M, --audio-std S\n"
    "                      fbank normalisation (x - M) / (2 S) (default AST's,\n"
    "                      -4.2677393, 4.5689974)\n"
    "  --audio-window SEC  interleaving window (default 2)\n"
    "  --block SEC         attention blocks of SEC seconds, each tokenized as the\n"
    "                      recording cut there (its own tubelets, fbank frames and\n"
    "                      audio patches, positions from 0), led by the special\n"
    "                      tokens\n"
    "  --frame             attention blocks of one tubelet's time each, likewise\n"
    "                      (needs video)\n"
    "  --cls               a leading class token\n"
    "  --dist              a distillation token after the class token (implies --cls)\n"
    "  --no-audio, --no-video, --audio-stream I, --video-stream I\n"
    "                      leave a modality out, or pick its container stream\n"
    "  --cp N              ranks to shard the sequence over (default 1)\n"
    "  --shard KIND        contiguous (default) or zigzag (2N chunks, for causal\n"
    "                      masks)\n"
    "  --plan-only         only the plan from the probe; decode nothing\n"
    "  --threads T         decoder threads (default: automatic)\n"
    "  --max-corrupt N|P%  fail past N corrupt packets, or past P% of the file's\n"
    "                      packets (default: past both 32 and 1%)\n"
    "  --max-tokens N      refuse a sequence of more than N tokens (default 16777216,\n"
    "                      about 24 hours at the defaults)\n"
    "  --json              one JSON object on stdout instead of the table\n"
    "  -o, --output OUT    write the tokens to OUT.safetensors; '-': to standard\n"
    "                      output (not a terminal; the table goes to stderr, --json\n"
    "                      is refused); its audio_fbank holds the log-mel rows, with\n"
    "                      --block / --frame each block's own, block after block\n"
    "\n"
    "Exit status: 0 ok, 1 the file cannot be read or tokenized, 2 usage.\n"
    "\n"
    "examples:\n"
    "  ringvit tokens talk.mp4 --cp 4 --shard zigzag\n"
    "  ringvit tokens talk.mp4 --fps 2 --cls --json -o talk.tokens.safetensors\n"
    "  ringvit tokens talk.mp4 --fps 4 --cls --block 8    # 8 s blocks, a CLS in each\n"
    "  ringvit tokens talk.wav --no-video --dist --audio-time 16 --audio-stride 10 \\\n"
    "      --audio-freq-stride 10      # AST's patches: 12 bands per time step\n"
    "\n"
    "More: docs/media-commands.md (the sequence, plans, the file)\n";

/* ---- arguments ------------------------------------------------------------------- */

typedef struct tokens_args {
    const char *path, *out;
    rv_ingest_opts io;   /* the flags (the plan sets start_s from start_at) */
    double start_at;     /* --start on the container's clock (NAN: not given) */
    rv_tok_opts to;
    int cp;
    rv_shard_kind shard;
    int plan_only, json;
    int blocks;          /* 0 none, 1 --block SEC, 2 --frame */
    int64_t max_tokens;  /* --max-tokens */
} tokens_args;

/* "a,b,c" -> three finite floats in [lo, hi]. */
static int parse_triple(const char *flag, const char *text, float lo, float hi, float out[3])
{
    const char *p = text;
    for (int c = 0; c < 3; c++) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno || !isfinite(v) || v < lo || v > hi ||
            (c < 2 ? *end != ',' : *end != '\0'))
            return cli_usage_error(CMD, "%s wants three numbers in [%g, %g] like "
                                      "0.485,0.456,0.406, got '%s'", flag, lo, hi, text);
        out[c] = (float)v;
        p = end + 1;
    }
    return 0;
}

static int take_mean(const char *cmd, const char *name, const char *value, void *dst)
{
    (void)cmd;
    return parse_triple(name, value, -10, 10, dst);
}

static int take_std(const char *cmd, const char *name, const char *value, void *dst)
{
    (void)cmd;
    return parse_triple(name, value, 1e-6f, 1e6f, dst);
}

/* --block SEC and --frame (into the tokens_args at dst): blocks of seconds or of
 * one tubelet, not both. */
static int blocks_clash(void)
{
    return cli_usage_error(CMD, "--block and --frame contradict each other (blocks of "
                                "seconds or of one tubelet)");
}

static int take_block(const char *cmd, const char *name, const char *value, void *dst)
{
    tokens_args *a = dst;
    if (a->blocks == 2)
        return blocks_clash();
    a->blocks = 1;
    return cli_parse_double(cmd, name, value, 0.01, 86400, &a->to.window_s);
}

static int take_frame(const char *cmd, const char *name, const char *value, void *dst)
{
    (void)cmd, (void)name, (void)value;
    tokens_args *a = dst;
    if (a->blocks == 1)
        return blocks_clash();
    a->blocks = 2;
    return 0;
}

/* --cls and --dist into rv_tok_opts.cls: --dist already asks for the class token
 * it follows. */
static int take_cls(const char *cmd, const char *name, const char *value, void *dst)
{
    (void)cmd, (void)name, (void)value;
    int *cls = dst;
    *cls = *cls > 1 ? *cls : 1;
    return 0;
}

static int take_dist(const char *cmd, const char *name, const char *value, void *dst)
{
    (void)cmd, (void)name, (void)value;
    *(int *)dst = 2;
    return 0;
}

static int take_shard(const char *cmd, const char *name, const char *value, void *dst)
{
    (void)name;
    if (rv_shard_kind_parse(value, dst) != RV_OK)
        return cli_usage_error(cmd, "--shard wants contiguous or zigzag, got '%s'", value);
    return 0;
}

static int parse_args(int argc, char **argv, tokens_args *a)
{
    memset(a, 0, sizeof *a);
    rv_ingest_opts_default(&a->io);
    a->io.start_s = NAN; /* --start given or not */
    rv_tok_opts_default(&a->to);
    a->cp = 1;
    a->shard = RV_SHARD_CONTIGUOUS;
    a->max_tokens = RV_CLI_MAX_TOKENS;
    int no_audio = 0, no_video = 0, audio_set = 0, video_set = 0, stride_set = 0;
    int window_set = 0;
    rv_tok_opts *to = &a->to;
    const cli_flag flags[] = {
        {.name = "--output", .alias = "-o", .kind = RV_CLI_TEXT, .dst = &a->out},
        RV_CLI_INGEST_FLAGS(&a->io, NULL, &audio_set, &video_set),
        RV_CLI_INGEST_THREADS(&a->io),
        {.name = "--tubelet", .kind = RV_CLI_INT, .dst = &to->tubelet, .lo = 1, .hi = 64},
        {.name = "--patch", .kind = RV_CLI_INT, .dst = &to->patch, .lo = 1, .hi = 4096},
        {.name = "--mean", .kind = RV_CLI_CUSTOM, .dst = to->mean, .take = take_mean},
        {.name = "--std", .kind = RV_CLI_CUSTOM, .dst = to->std, .take = take_std},
        {.name = "--audio-freq", .kind = RV_CLI_INT, .dst = &to->audio_freq, .lo = 1,
         .hi = RV_FBANK_BINS},
        {.name = "--audio-freq-stride", .kind = RV_CLI_INT, .dst = &to->audio_fstride, .lo = 0,
         .hi = RV_FBANK_BINS},
        {.name = "--audio-time", .kind = RV_CLI_INT, .dst = &to->audio_time, .lo = 1, .hi = 4096},
        {.name = "--audio-stride", .kind = RV_CLI_INT, .dst = &to->audio_stride, .lo = 1,
         .hi = 4096, .seen = &stride_set},
        {.name = "--audio-mean", .kind = RV_CLI_FLOAT, .dst = &to->audio_mean, .lo = -1e6f,
         .hi = 1e6f},
        {.name = "--audio-std", .kind = RV_CLI_FLOAT, .dst = &to->audio_std, .lo = 1e-6f,
         .hi = 1e6f},
        {.name = "--audio-window", .kind = RV_CLI_DOUBLE, .dst = &to->window_s, .lo = 0.01,
         .hi = 86400, .seen = &window_set},
        {.name = "--block", .kind = RV_CLI_CUSTOM, .dst = a, .take = take_block},
        {.name = "--frame", .kind = RV_CLI_SWITCH, .dst = a, .take = take_frame},
        {.name = "--cp", .kind = RV_CLI_INT, .dst = &a->cp, .lo = 1, .hi = 65536},
        {.name = "--max-tokens", .kind = RV_CLI_I64, .dst = &a->max_tokens, .lo = 1,
         .hi = INT64_MAX},
        {.name = "--shard", .kind = RV_CLI_CUSTOM, .dst = &a->shard, .take = take_shard},
        {.name = "--cls", .kind = RV_CLI_SWITCH, .dst = &to->cls, .take = take_cls},
        {.name = "--dist", .kind = RV_CLI_SWITCH, .dst = &to->cls, .take = take_dist},
        {.name = "--no-audio", .kind = RV_CLI_SWITCH, .dst = &no_audio},
        {.name = "--no-video", .kind = RV_CLI_SWITCH, .dst = &no_video},
        {.name = "--plan-only", .kind = RV_CLI_SWITCH, .dst = &a->plan_only},
        {.name = "--json", .kind = RV_CLI_SWITCH, .dst = &a->json},
    };
    int rc = cli_flags_parse(CMD, argc, argv, flags, RV_CLI_NFLAGS(flags),
                             &(cli_operands){.what = "FILE", .one = &a->path});
    if (rc)
        return rc;
    if (no_audio && audio_set)
        return cli_usage_error(CMD, "--no-audio and --audio-stream contradict each other");
    if (no_video && video_set)
        return cli_usage_error(CMD, "--no-video and --video-stream contradict each other");
    if (no_audio && no_video)
        return cli_usage_error(CMD, "--no-audio and --no-video leave nothing to tokenize");
    if (a->blocks && window_set)
        return cli_usage_error(CMD, "--audio-window and --%s both set the windows",
                                  a->blocks == 1 ? "block" : "frame");
    if (a->blocks == 2 && no_video)
        return cli_usage_error(CMD, "--frame makes blocks of video tubelets, and --no-video "
                                  "leaves the video out");
    if (a->blocks) {
        /* the windows become attention blocks: each led by the special tokens asked
         * for, positions counted from its start */
        a->to.frame_windows = a->blocks == 2;
        a->to.cls_each_window = a->to.cls > 0;
        a->to.window_positions = 1;
    }
    if (no_audio) {
        a->io.audio_stream = -2;
        a->to.audio = 0;
    }
    if (no_video) {
        a->io.video_stream = -2;
        a->to.video = 0;
    }
    if (!stride_set)
        a->to.audio_stride = a->to.audio_time;
    a->start_at = a->io.start_s;
    a->io.start_s = 0;
    if (a->io.size % a->to.patch)
        return cli_usage_error(CMD, "--patch %d must divide --size %d", a->to.patch, a->io.size);
    if (a->plan_only && a->out)
        return cli_usage_error(CMD, "--plan-only decodes nothing, so -o has nothing to write");
    if (!a->path)
        return cli_usage_error(CMD, "which file? give a media FILE");
    if (out_is_stdout(a->out) && a->json)
        return cli_usage_error(CMD, "-o - and --json both want standard output: give one "
                                  "of them (the table goes to stderr with -o -)");
    if (out_is_stdout(a->out))
        return out_stdout_take(CMD);
    return 0;
}

/* ---- the limit on the tokens ------------------------------------------------------- */

typedef struct limit {
    int64_t tokens;            /* handed out so far */
    int64_t max_tokens;        /* --max-tokens */
    const char *path;
} limit;

static rv_status too_many(const char *path, int64_t tokens, int64_t max)
{
    return rv_fail(RV_ERR_INVALID, "%s: the sequence reaches %lld tokens at these settings, "
                   "more than --max-tokens %lld; raise --max-tokens if the time and disk are "
                   "meant", path, (long long)tokens, (long long)max);
}

/* Before each batch is kept (a file that states no duration is not planned). */
static rv_status within_limit(const rv_tok_batch *b, void *user)
{
    limit *l = user;
    if (l->tokens + b->count > l->max_tokens)
        return too_many(l->path, l->tokens + b->count, l->max_tokens);
    l->tokens += b->count;
    return RV_OK;
}

/* ---- reporting --------------------------------------------------------------------- */

typedef struct report {
    const tokens_args *a;
    const rv_tok_recording *rec;
    const rv_tok_layout *L;
    const char *plan_source;    /* "probe" or "decode" */
    double plan_end_s;          /* NAN unknown */
    double end_s;               /* the recording's end, sequence time: the plan's, else
                                   ingest's */
    int decoded;
    const rv_tok_stats *st;
    double wall_s;
    const rv_shard_plan *sp;
} report;

/* The report as JSON (the library builds it: --json prints it, -o stores it). */
static json_t *report_json(const report *r)
{
    const tokens_args *a = r->a;
    rv_tok_report t = {.path = a->path, .output = a->out, .io = &r->rec->io, .to = &a->to,
                       .blocks = a->blocks, .time_origin = r->rec->time_origin,
                       .L = r->L, .plan_source = r->plan_source, .plan_end_s = r->plan_end_s,
                       .end_s = r->end_s, .stats = r->decoded ? r->st : NULL,
                       .wall_s = r->wall_s, .sp = r->sp};
    char *text = NULL;
    json_t *root = rv_tok_report_json(&t, &text) == RV_OK ? json_loads(text, 0, NULL) : NULL;
    free(text);
    return root;
}

static void report_table(const report *r)
{
    const rv_tok_layout *L = r->L;
    double secs = rv_tok_covered_s(L, r->end_s);
    printf("file:       %s\n", r->a->path);
    if (strcmp(r->plan_source, "probe") == 0)
        printf("plan:       from the probe (ends %.3f s)", r->plan_end_s);
    else
        printf("plan:       counted while decoding (the container states no duration)");
    printf(": %lld frames at %d/%d fps, %lld audio samples\n", (long long)L->nframes,
           L->ingest.fps_num, L->ingest.fps_den, (long long)L->nsamples);
    /* "cls" counts the special tokens: the class token and the distillation one
     * (of every block with --block / --frame) */
    printf("sequence:   %lld tokens: %lld video, %lld audio, %lld cls; %.1f per recording-second\n",
           (long long)L->seq, (long long)L->nvideo, (long long)L->naudio, (long long)L->nspecial,
           secs > 0 ? L->seq / secs : 0.0);
    char wdesc[64];
    if (L->opts.frame_windows)
        snprintf(wdesc, sizeof wdesc, "of one tubelet (%d frames)", L->opts.tubelet);
    else
        snprintf(wdesc, sizeof wdesc, "of %g s", L->opts.window_s);
    printf("layout:     %lld windows %s; %lld tubelets x %d patches of %lld floats; "
           "%lld audio steps x %d bands (%d mel bins apart) of %lld floats; %lld fbank frames\n",
           (long long)L->windows, wdesc, (long long)L->tubelets, L->per_tubelet,
           (long long)L->video_dim, (long long)L->steps, L->bands, rv_tok_audio_fstride(&L->opts),
           (long long)L->audio_dim,
           (long long)L->fbank_frames);
    if (r->a->blocks)
        printf("blocks:     %lld attention blocks (the windows), each the recording cut at "
               "its bounds, led by %d special token%s, positions from 0\n", (long long)L->windows,
               L->opts.cls_each_window ? L->opts.cls : 0,
               (L->opts.cls_each_window ? L->opts.cls : 0) == 1 ? "" : "s");
    if (r->decoded) {
        const rv_tok_stats *s = r->st;
        printf("recording:  ends %.3f s; %lld frames, %lld samples decoded; padded %lld frames, "
               "%lld samples; dropped %lld frames, %lld samples\n",
               s->ingest.end_time, (long long)s->ingest.frames, (long long)s->ingest.samples,
               (long long)s->padded_frames, (long long)s->padded_samples,
               (long long)s->dropped_frames, (long long)s->dropped_samples);
        printf("tokenize:   %.3f s CPU without decoding (%.0f tokens/s), %.3f s wall with it\n",
               s->cpu_s, s->cpu_s > 0 ? s->tokens / s->cpu_s : 0.0, r->wall_s);
    }
    printf("shard:      %s over %d rank%s, at most %lld tokens each\n",
           rv_shard_kind_name(r->sp->kind), r->sp->ranks, r->sp->ranks == 1 ? "" : "s",
           (long long)rv_shard_max_len(r->sp));
    printf("  rank   tokens  segments: first+count  time s  (video, audio tokens)\n");
    for (int k = 0; k < r->sp->ranks; k++) {
        rv_tok_span spans[RV_SHARD_MAX_SEGS];
        int n = rv_tok_rank_spans(L, r->sp, k, spans);
        printf("  %4d %8lld ", k, (long long)rv_shard_len(r->sp, k));
        for (int i = 0; i < n; i++) {
            const rv_tok_span *x = &spans[i];
            printf(" %s%lld+%lld %.3f..%.3f (%lld, %lld)", i ? "| " : "", (long long)x->first,
                   (long long)x->count, x->time[0], x->time[1],
                   (long long)(rv_tok_video_before(L, x->first + x->count) -
                               rv_tok_video_before(L, x->first)),
                   (long long)(rv_tok_audio_before(L, x->first + x->count) -
                               rv_tok_audio_before(L, x->first)));
        }
        printf("\n");
    }
    if (r->a->out)
        printf("wrote:      %s\n", out_is_stdout(r->a->out) ? "standard output" : r->a->out);
}

static rv_status write_output(const tokens_args *a, const rv_tok_collected *col,
                              const rv_tok_recording *rec, const rv_probe *probe,
                              const report *rep)
{
    rv_status st = RV_OK;
    rv_st_writer *w = NULL;
    char *probe_text = NULL, *meta_text = NULL;
    rv_collected arr[RV_TOK_ARRAYS];
    rv_tok_collected_arrays(col, arr);
    if (rv_probe_json_text(probe, 0, &probe_text) != RV_OK)
        probe_text = NULL;
    json_t *mj = report_json(rep);
    meta_text = mj ? json_dumps(mj, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(mj);
    if (!probe_text || !meta_text) {
        st = rv_fail(RV_ERR_NOMEM, "out of memory");
        goto end;
    }
    char origin_text[40];
    snprintf(origin_text, sizeof origin_text, "%.17g", rec->time_origin);
    /* 8-byte elements first, then 4, then 1: every tensor starts aligned. */
    static const struct {
        int i;
        rv_dtype dtype;
    } order[RV_TOK_ARRAYS] = {{RV_TOK_POS, RV_I64},           {RV_TOK_TIME, RV_F64},
                              {RV_TOK_WINDOW, RV_I64},        {RV_TOK_VIDEO_PATCHES, RV_F32},
                              {RV_TOK_AUDIO_PATCHES, RV_F32}, {RV_TOK_AUDIO_FBANK, RV_F32},
                              {RV_TOK_MODALITY, RV_U8}};
    st = rv_st_writer_new(&w);
    for (int k = 0; k < RV_TOK_ARRAYS && st == RV_OK; k++) {
        const rv_collected *x = &arr[order[k].i];
        st = rv_st_writer_add(w, x->name, order[k].dtype, x->ndim, x->shape, x->data);
    }
    if (st != RV_OK || (st = rv_st_writer_meta(w, "format", "ringvit-tokens")) != RV_OK ||
        (st = rv_st_writer_meta(w, "probe", probe_text)) != RV_OK ||
        (st = rv_st_writer_meta(w, "tokens", meta_text)) != RV_OK ||
        (st = rv_st_writer_meta(w, "time_origin", origin_text)) != RV_OK ||
        (st = out_write_st(w, a->out)) != RV_OK)
        goto end;
end:
    rv_st_writer_free(&w);
    free(probe_text);
    free(meta_text);
    return st;
}

/* Prints the report: --json's object, else the table. */
static int report_print(const tokens_args *a, const report *rep)
{
    if (!a->json) {
        report_table(rep);
        return RV_EXIT_OK;
    }
    json_t *j = report_json(rep);
    int rc = j ? cli_json_print(j) : (cli_error("%s: out of memory", CMD), RV_EXIT_FAIL);
    json_decref(j);
    return rc;
}

static int tokens_main(int argc, char **argv)
{
    tokens_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc;
    rv_probe *probe = NULL;
    rv_tok_recording rec;
    rv_tok_stats stats;
    rv_shard_plan sp;
    rv_tok_collected *col = NULL;
    limit lim = {.max_tokens = a.max_tokens, .path = a.path};
    memset(&stats, 0, sizeof stats);
    rv_status st;
    char target[4096];
    /* Before the work, and again just before writing (see out_path.h); "-" is
     * standard output (its scratch files go to $TMPDIR). */
    if (out_is_stdout(a.out))
        snprintf(target, sizeof target, "-");
    else if (a.out && !a.plan_only && (st = out_target_path(a.out, target, sizeof target)) != RV_OK)
        return cli_fail(st, CMD);
    rc = RV_EXIT_FAIL;

    /* probe, timeline and the plan from the container's duration */
    if ((st = rv_tok_recording_plan(a.path, &a.to, &a.io, a.start_at, &rec, &probe)) != RV_OK) {
        cli_fail(st, CMD);
        goto end;
    }
    const char *source = rec.need_count ? "decode" : "probe";
    const double plan_end = rec.probe_end_s;
    if (rec.need_count && a.plan_only) {
        cli_fail(RV_ERR_UNSUPPORTED, CMD); /* why: the plan's message */
        goto end;
    }
    if (rec.need_count) /* No stated duration: the recording itself decides (one open pass). */
        rv_log(RV_LOG_INFO, "%s; counting while decoding", rv_last_error());
    if (!a.plan_only && !rec.need_count && rec.layout.seq > a.max_tokens) {
        cli_fail(too_many(a.path, rec.layout.seq, a.max_tokens), CMD);
        goto end;
    }
    if (a.plan_only) {
        if ((st = rv_tok_shard_plan(&rec.layout, a.shard, a.cp, &sp)) != RV_OK) {
            cli_fail(st, CMD);
            goto end;
        }
        report rep = {.a = &a, .rec = &rec, .L = &rec.layout, .plan_source = source,
                      .plan_end_s = plan_end, .end_s = plan_end, .sp = &sp};
        rc = report_print(&a, &rep);
        goto end;
    }
    rv_tok_collect_opts co = {.keep = a.out ? RV_KEEP_SCRATCH : RV_KEEP_NONE, .beside = target,
                              .check = within_limit, .user = &lim};
    double t0 = rv_clock_s();
    if ((st = rv_tok_collect(a.path, &rec, &a.to, &co, &col, &stats)) != RV_OK) {
        cli_fail(st, CMD);
        goto end;
    }
    const rv_tok_layout *L = &stats.layout;
    int64_t fps_ceil = (rec.io.fps_num + rec.io.fps_den - 1) / rec.io.fps_den;
    int much = stats.dropped_frames > (int64_t)(RV_TOK_PAD_MAX_S * fps_ceil) ||
               stats.dropped_samples > (int64_t)(RV_TOK_PAD_MAX_S * RV_AUDIO_RATE);
    if (stats.dropped_frames || stats.dropped_samples)
        rv_log(much ? RV_LOG_WARN : RV_LOG_DEBUG, "%s: the recording goes on after the length its container states "
               "(%.3f s): %lld frames and %lld audio samples after it were left out", a.path,
               plan_end, (long long)stats.dropped_frames, (long long)stats.dropped_samples);
    double wall = rv_clock_s() - t0;
    if ((st = rv_tok_shard_plan(L, a.shard, a.cp, &sp)) != RV_OK) {
        cli_fail(st, CMD);
        goto end;
    }
    double end = isfinite(plan_end) ? plan_end : stats.ingest.end_s;
    report rep = {.a = &a, .rec = &rec, .L = L, .plan_source = source, .plan_end_s = plan_end,
                  .end_s = end, .decoded = 1, .st = &stats, .wall_s = wall, .sp = &sp};
    if (a.out && (st = write_output(&a, col, &rec, probe, &rep)) != RV_OK) {
        cli_fail(st, CMD);
        goto end;
    }
    rc = report_print(&a, &rep);
end:
    rv_tok_collected_free(&col);
    rv_probe_free(&probe);
    return rc;
}

const cli_command cmd_tokens = {
    .name = "tokens",
    .summary = "tokenize a media file and show its shard plan (tokens FILE)",
    .main = tokens_main,
    .help = help_text,
};
