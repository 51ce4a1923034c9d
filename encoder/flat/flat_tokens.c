/* flat_tokens.c: rv_flat_tokens, the tensors `ringvit tokens -o` writes, in
 * memory: the tokenizer's options from the same flags (or from a model, as
 * embed takes them), the sequence planned by the library's recipe
 * (rv_tok_recording_plan: probe, timeline, layout; a file without a stated
 * duration is tokenized open) and gathered by tokenize's collector
 * (rv_tok_collect.h, times on the container's clock), with its report
 * (rv_tok_report.h). The metadata holds the layout ("layout"), from which
 * rv_flat_encoder_embed_tokens rebuilds the sequence. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "flat_internal.h"
#include "rv_clock.h"
#include "rv_tok_collect.h"
#include "rv_tok_report.h"
#include "rv_tok_slice.h"
#include "rv_tokenize.h"
#include "rv_vit.h"

/* Before each batch is kept: a Ctrl-C (rv_flat_interrupt) since the call began
 * stops the pass. */
static rv_status interrupted(const rv_tok_batch *b, void *user)
{
    (void)b;
    return flat_interrupt_check(*(const unsigned *)user);
}

static const char *const tokens_keys[] = {
    FLAT_INGEST_KEYS, "model", "seed", "tubelet", "patch", "mean", "std", "audio_freq",
    "audio_freq_stride", "audio_time", "audio_stride", "audio_mean", "audio_std",
    "audio_window", "block", "frame", "cls", "dist", "cp", "shard", "attention", NULL};

static rv_status opt_triple(const json_t *o, const char *key, double lo, double hi, float out[3])
{
    const json_t *x = json_object_get(o, key);
    if (!x || json_is_null(x))
        return RV_OK;
    for (int c = 0; c < 3; c++) {
        const json_t *e = json_array_get(x, (size_t)c);
        double v = e && json_is_number(e) ? json_number_value(e) : NAN;
        if (!json_is_array(x) || json_array_size(x) != 3 || !(v >= lo && v <= hi))
            return rv_fail(RV_ERR_INVALID, "option \"%s\" wants three numbers in [%g, %g]", key,
                           lo, hi);
        out[c] = (float)v;
    }
    return RV_OK;
}

/* The tokenizer flags of `ringvit tokens` (parse_args there), same defaults. */
static rv_status tok_flags(const json_t *o, const rv_ingest_opts *io, rv_tok_opts *to, int *blocks)
{
    int64_t tubelet = to->tubelet, patch = to->patch, freq = to->audio_freq,
            fstride = to->audio_fstride, atime = to->audio_time, astride = -1;
    double amean = to->audio_mean, astd = to->audio_std, window = -1, block = -1;
    int frame = 0, cls = 0, dist = 0;
    rv_status st;
    if ((st = flat_opt_int(o, "tubelet", 1, 64, &tubelet)) || (st = flat_opt_int(o, "patch", 1, 4096, &patch)) ||
        (st = opt_triple(o, "mean", -10, 10, to->mean)) || (st = opt_triple(o, "std", 1e-6, 1e6, to->std)) ||
        (st = flat_opt_int(o, "audio_freq", 1, RV_FBANK_BINS, &freq)) ||
        (st = flat_opt_int(o, "audio_freq_stride", 0, RV_FBANK_BINS, &fstride)) ||
        (st = flat_opt_int(o, "audio_time", 1, 4096, &atime)) ||
        (st = flat_opt_int(o, "audio_stride", 1, 4096, &astride)) ||
        (st = flat_opt_num(o, "audio_mean", -1e6, 1e6, &amean)) ||
        (st = flat_opt_num(o, "audio_std", 1e-6, 1e6, &astd)) ||
        (st = flat_opt_num(o, "audio_window", 0.01, 86400, &window)) ||
        (st = flat_opt_num(o, "block", 0.01, 86400, &block)) || (st = flat_opt_bool(o, "frame", &frame)) ||
        (st = flat_opt_bool(o, "cls", &cls)) || (st = flat_opt_bool(o, "dist", &dist)))
        return st;
    if (block > 0 && frame)
        return rv_fail(RV_ERR_INVALID, "options \"block\" and \"frame\" contradict each other");
    if ((block > 0 || frame) && window > 0)
        return rv_fail(RV_ERR_INVALID, "options \"audio_window\" and \"%s\" both set the windows",
                       frame ? "frame" : "block");
    if (frame && io->video_stream == -2)
        return rv_fail(RV_ERR_INVALID, "option \"frame\" makes blocks of video tubelets, and "
                       "\"video\": false leaves the video out");
    to->tubelet = (int)tubelet;
    to->patch = (int)patch;
    to->audio_freq = (int)freq;
    to->audio_fstride = (int)fstride;
    to->audio_time = (int)atime;
    to->audio_stride = astride > 0 ? (int)astride : (int)atime;
    to->audio_mean = (float)amean;
    to->audio_std = (float)astd;
    if (window > 0)
        to->window_s = window;
    if (block > 0)
        to->window_s = block;
    to->cls = dist ? 2 : cls ? 1 : 0;
    *blocks = frame ? 2 : block > 0 ? 1 : 0;
    if (block > 0 || frame) {
        to->frame_windows = frame;
        to->cls_each_window = to->cls > 0;
        to->window_positions = 1;
    }
    return RV_OK;
}

static json_t *layout_json(const rv_tok_layout *L, const rv_tok_recording *rec)
{
    const rv_tok_opts *o = &L->opts;
    const rv_ingest_opts *io = &L->ingest;
    json_t *m = json_pack("{sisis[fff]s[fff]sisisisisfsfsfsisisisisisisi}", "tubelet", o->tubelet,
                          "patch", o->patch, "mean", (double)o->mean[0], (double)o->mean[1],
                          (double)o->mean[2], "std", (double)o->std[0], (double)o->std[1],
                          (double)o->std[2], "audio_freq", o->audio_freq, "audio_time",
                          o->audio_time, "audio_stride", o->audio_stride, "audio_fstride",
                          o->audio_fstride, "audio_mean", (double)o->audio_mean, "audio_std",
                          (double)o->audio_std, "window_s", o->window_s, "cls", o->cls, "video",
                          o->video, "audio", o->audio, "frame_windows", o->frame_windows,
                          "cls_each_window", o->cls_each_window, "window_positions",
                          o->window_positions, "fps_num", io->fps_num);
    json_t *g = json_pack("{sisisisfsfsIsIsfsfsfsf}", "fps_den", io->fps_den, "size", io->size, "pad",
                          io->pad, "start_s", io->start_s, "duration_s", io->duration_s, "nframes",
                          (json_int_t)L->nframes, "nsamples", (json_int_t)L->nsamples, "t0",
                          rec->t0, "time_origin", rec->time_origin, "end_s", rec->end_s,
                          "rec_start", rec->rec_start);
    if (!m || !g || json_object_update(m, g) != 0) {
        json_decref(m);
        m = NULL;
    }
    json_decref(g);
    return m;
}

rv_status flat_tokens_layout(const char *meta, rv_tok_layout *L, flat_tok_plan *p)
{
    json_t *root = meta ? json_loads(meta, 0, NULL) : NULL, *m = json_object_get(root, "layout");
    rv_tok_opts to;
    rv_ingest_opts io;
    json_int_t nframes = 0, nsamples = 0;
    double mean[3], std[3];
    rv_status st = RV_OK;
    rv_tok_opts_default(&to);
    rv_ingest_opts_default(&io);
    if (!m || json_unpack(m, "{si si s[FFF] s[FFF] si si si si sF sF sF si si si si si si si si si si"
                             " sF sF sI sI sF sF sF sF}",
                          "tubelet", &to.tubelet, "patch", &to.patch, "mean", &mean[0], &mean[1],
                          &mean[2], "std", &std[0], &std[1], &std[2], "audio_freq", &to.audio_freq,
                          "audio_time", &to.audio_time, "audio_stride", &to.audio_stride,
                          "audio_fstride", &to.audio_fstride, "audio_mean", &(double){0},
                          "audio_std", &(double){0}, "window_s", &to.window_s, "cls", &to.cls,
                          "video", &to.video, "audio", &to.audio, "frame_windows",
                          &to.frame_windows, "cls_each_window", &to.cls_each_window,
                          "window_positions", &to.window_positions, "fps_num", &io.fps_num,
                          "fps_den", &io.fps_den, "size", &io.size, "pad", &io.pad, "start_s",
                          &io.start_s, "duration_s", &io.duration_s, "nframes", &nframes,
                          "nsamples", &nsamples, "t0", &p->t0, "time_origin",
                          &p->time_origin, "end_s", &p->end_s, "rec_start", &p->rec_start) != 0) {
        st = rv_fail(RV_ERR_INVALID, "tokens: the metadata holds no token layout (make the "
                     "tokens with rv_flat_tokens and pass its metadata back)");
        goto end;
    }
    /* floats stored as doubles: exact back */
    to.audio_mean = (float)json_real_value(json_object_get(m, "audio_mean"));
    to.audio_std = (float)json_real_value(json_object_get(m, "audio_std"));
    for (int c = 0; c < 3; c++) {
        to.mean[c] = (float)mean[c];
        to.std[c] = (float)std[c];
    }
    if ((st = rv_tok_layout_make(&to, &io, nframes, nsamples, L)) == RV_OK)
        L->t0 = p->t0;
end:
    json_decref(root);
    return st;
}

rv_status rv_flat_tokens(const char *path, const char *opts_json, rv_arrays **out)
{
    json_t *o = NULL;
    rv_arrays *a = NULL;
    rv_vit_model *m = NULL;
    rv_tok_recording rec;
    rv_tok_stats stats;
    rv_tok_opts to;
    rv_ingest_opts io;
    rv_tok_collected *col = NULL;
    const char *model = NULL, *shard = "contiguous", *attention = NULL;
    rv_span span = {0};
    rv_shard_kind kind = RV_SHARD_CONTIGUOUS;
    rv_shard_plan sp;
    rv_probe *probe = NULL;
    char *probe_text = NULL, *report_text = NULL;
    double start_at = NAN;
    int size_set = 0, blocks = 0;
    int64_t seed = 0, cp = 1;
    unsigned mark = flat_interrupt_mark();
    rv_status st;
    *out = NULL;
    memset(&rec, 0, sizeof rec);
    memset(&stats, 0, sizeof stats);
    rv_ingest_opts_default(&io);
    rv_tok_opts_default(&to);
    if (!path) {
        st = rv_fail(RV_ERR_INVALID, "tokens: no path");
        goto end;
    }
    if ((st = flat_opts_parse(opts_json, tokens_keys, &o)) != RV_OK ||
        (st = flat_opts_ingest(o, &io, &start_at, &size_set)) != RV_OK ||
        (st = flat_opt_str(o, "model", &model)) != RV_OK ||
        (st = flat_opt_int(o, "seed", 0, INT64_MAX, &seed)) != RV_OK ||
        (st = flat_opt_int(o, "cp", 1, 65536, &cp)) != RV_OK ||
        (st = flat_opt_str(o, "shard", &shard)) != RV_OK ||
        (st = flat_opt_str(o, "attention", &attention)) != RV_OK)
        goto end;
    if (attention && !model) {
        st = rv_fail(RV_ERR_INVALID, "option \"attention\" goes with \"model\" (the blocks it "
                     "makes are the model's tokenizer windows)");
        goto end;
    }
    if (attention && rv_span_parse(attention, &span) != RV_OK) {
        st = rv_fail(RV_ERR_INVALID, "option \"attention\": %s", rv_last_error());
        goto end;
    }
    if (rv_shard_kind_parse(shard, &kind) != RV_OK) {
        st = rv_fail(RV_ERR_INVALID, "option \"shard\" wants contiguous or zigzag, got \"%s\"", shard);
        goto end;
    }
    if (model) {
        /* The model's tokens and frames, as embed makes them. */
        static const char *const tok_only[] = {"tubelet", "patch", "mean", "std", "audio_freq",
                                               "audio_freq_stride", "audio_time", "audio_stride",
                                               "audio_mean", "audio_std", "audio_window", "block",
                                               "frame", "cls", "dist", NULL};
        for (int i = 0; tok_only[i]; i++)
            if (json_object_get(o, tok_only[i])) {
                st = rv_fail(RV_ERR_INVALID, "option \"%s\" and \"model\": the model sets the "
                             "tokenizer", tok_only[i]);
                goto end;
            }
        if ((st = flat_model_open(model, (uint64_t)seed, &m)) != RV_OK ||
            (st = rv_vit_input_opts(&m->cfg, size_set ? io.size : 0, io.video_stream == -2,
                                    io.audio_stream == -2, &span, &to, &io)) != RV_OK)
            goto end;
        /* The report's block options, as `tokens --block S` / `--frame` state them. */
        blocks = span.kind == RV_SPAN_FRAME ? 2 : span.kind == RV_SPAN_BLOCK ? 1 : 0;
    } else {
        if ((st = tok_flags(o, &io, &to, &blocks)) != RV_OK)
            goto end;
        to.video = io.video_stream != -2;
        to.audio = io.audio_stream != -2;
    }
    if ((st = rv_tok_recording_plan(path, &to, &io, start_at, &rec, &probe)) != RV_OK)
        goto end;
    const double t0 = rv_clock_s();
    rv_tok_collect_opts co = {.keep = RV_KEEP_MEMORY, .check = interrupted, .user = &mark};
    if ((st = rv_tok_collect(path, &rec, &to, &co, &col, &stats)) != RV_OK)
        goto end;
    const double wall = rv_clock_s() - t0;
    const rv_tok_layout *L = &stats.layout;
    if (rec.need_count)
        rec.end_s = stats.ingest.end_s;
    if ((st = rv_tok_shard_plan(L, kind, (int)cp, &sp)) != RV_OK)
        goto end;
    /* The report `ringvit tokens` stores (without -o's path). */
    rv_tok_report rep = {.path = path, .io = &rec.io, .to = &to, .blocks = blocks,
                         .time_origin = rec.time_origin, .L = L,
                         .plan_source = rec.need_count ? "decode" : "probe",
                         .plan_end_s = rec.probe_end_s,
                         .end_s = isfinite(rec.probe_end_s) ? rec.probe_end_s : stats.ingest.end_s,
                         .stats = &stats, .wall_s = wall, .sp = &sp};
    if ((st = rv_tok_report_json(&rep, &report_text)) != RV_OK ||
        (st = rv_probe_json_text(probe, 0, &probe_text)) != RV_OK)
        goto end;
    /* The arrays in the order rv_flat_tokens has always listed them. */
    static const int order[RV_TOK_ARRAYS] = {RV_TOK_VIDEO_PATCHES, RV_TOK_AUDIO_PATCHES,
                                             RV_TOK_AUDIO_FBANK, RV_TOK_MODALITY, RV_TOK_POS,
                                             RV_TOK_TIME, RV_TOK_WINDOW};
    rv_collected arr[RV_TOK_ARRAYS];
    rv_tok_collected_arrays(col, arr);
    if ((st = flat_arrays_new(&a)) != RV_OK)
        goto end;
    for (int i = 0; i < RV_TOK_ARRAYS && st == RV_OK; i++)
        st = flat_arrays_adopt_collected(a, &arr[order[i]], rv_tok_collected_take(col, order[i]));
    if (st != RV_OK)
        goto end;
    json_t *meta = json_pack("{sssfsoso}", "format", "ringvit-tokens", "time_origin",
                             rec.time_origin, "probe", json_loads(probe_text, 0, NULL), "tokens",
                             json_loads(report_text, 0, NULL));
    if (meta && json_object_set_new(meta, "layout", layout_json(L, &rec)) != 0) {
        json_decref(meta);
        meta = NULL;
    }
    st = flat_arrays_meta(a, meta);
end:
    rv_tok_collected_free(&col);
    if (st != RV_OK)
        rv_arrays_free(&a);
    *out = a;
    rv_vit_free(&m);
    rv_probe_free(&probe);
    free(probe_text);
    free(report_text);
    json_decref(o);
    return st;
}
