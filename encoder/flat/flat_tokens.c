/* flat_tokens.c: rv_flat_tokens, the tensors `ringvit tokens -o` writes, in
 * memory: the tokenizer's options from the same flags (or from a model, as
 * embed takes them), the sequence planned by the library's recipe
 * (rv_tok_recording_plan: probe, timeline, layout; a file without a stated
 * duration is tokenized open) and every batch appended, times moved to the
 * container's clock. The metadata holds the layout ("layout"), from which
 * rv_flat_encoder_embed_tokens rebuilds the sequence. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "flat_internal.h"
#include "rv_clock.h"
#include "rv_tok_report.h"
#include "rv_tok_slice.h"
#include "rv_tokenize.h"
#include "rv_vit.h"

enum { V_VIDEO, V_AUDIO, V_FBANK, V_MOD, V_POS, V_TIME, V_WINDOW, V_COUNT };

typedef struct vec {
    char *p;
    size_t n, cap;
} vec;

static rv_status vec_put(vec *v, const void *data, size_t bytes)
{
    if (v->n + bytes > v->cap) {
        size_t cap = v->cap ? v->cap : 4096;
        while (cap < v->n + bytes)
            cap *= 2;
        char *p = realloc(v->p, cap);
        if (!p)
            return rv_fail(RV_ERR_NOMEM, "tokens: out of memory (%zu bytes)", cap);
        v->p = p;
        v->cap = cap;
    }
    if (bytes)
        memcpy(v->p + v->n, data, bytes);
    v->n += bytes;
    return RV_OK;
}

typedef struct collect {
    vec v[V_COUNT];
    int64_t video_dim, audio_dim;
    double clock0;
    unsigned mark;
} collect;

static rv_status on_batch(const rv_tok_batch *b, void *user)
{
    collect *c = user;
    rv_status st = flat_interrupt_check(c->mark);
    if (st != RV_OK ||
        (st = vec_put(&c->v[V_VIDEO], b->video, sizeof(float) * (size_t)(b->nvideo * c->video_dim))) ||
        (st = vec_put(&c->v[V_AUDIO], b->audio, sizeof(float) * (size_t)(b->naudio * c->audio_dim))) ||
        (st = vec_put(&c->v[V_FBANK], b->fbank, sizeof(float) * (size_t)(b->nfbank * RV_FBANK_BINS))) ||
        (st = vec_put(&c->v[V_MOD], b->modality, (size_t)b->count)) ||
        (st = vec_put(&c->v[V_POS], b->pos, sizeof(int64_t) * 3 * (size_t)b->count)) ||
        (st = vec_put(&c->v[V_WINDOW], b->window, sizeof(int64_t) * (size_t)b->count)))
        return st;
    for (int64_t i = 0; i < 2 * b->count; i++) {
        double t = b->time[i] + c->clock0; /* as cmd_tokens: on the container's clock */
        if ((st = vec_put(&c->v[V_TIME], &t, sizeof t)) != RV_OK)
            return st;
    }
    return RV_OK;
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
                          (json_int_t)L->nframes, "nsamples", (json_int_t)L->nsamples, "clock0",
                          rec->clock0, "time_origin", rec->time_origin, "end_s", rec->end_s,
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
                          "nsamples", &nsamples, "clock0", &p->clock0, "time_origin",
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
    st = rv_tok_layout_make(&to, &io, nframes, nsamples, L);
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
    collect c = {.mark = flat_interrupt_mark()};
    const char *model = NULL, *shard = "contiguous", *attention = NULL;
    rv_span span = {0};
    rv_shard_kind kind = RV_SHARD_CONTIGUOUS;
    rv_shard_plan sp;
    rv_probe *probe = NULL;
    char *probe_text = NULL, *report_text = NULL;
    double start_at = NAN, plan_end = NAN;
    int size_set = 0, blocks = 0;
    int64_t seed = 0, cp = 1;
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
    if (!rec.need_count) { /* the end the probe states, as the report gives it */
        rv_tok_layout plan;
        if ((st = rv_tok_layout_from_probe(probe, &to, &rec.io, &plan, &plan_end)) != RV_OK)
            goto end;
    }
    rv_tok_layout shape;
    if ((st = rv_tok_layout_make(&to, &rec.io, 0, 0, &shape)) != RV_OK)
        goto end;
    c.video_dim = shape.video_dim;
    c.audio_dim = shape.audio_dim;
    c.clock0 = rec.clock0;
    const double t0 = rv_clock_s();
    if (rec.need_count)
        st = rv_tokenize_file(path, &rec.io, &to, on_batch, &c, &stats);
    else
        st = rv_tokenize_range(path, &rec.layout, 0, rec.layout.seq, on_batch, &c, &stats);
    if (st != RV_OK)
        goto end;
    const double wall = rv_clock_s() - t0;
    const rv_tok_layout *L = &stats.layout;
    if (rec.need_count)
        rec.end_s = stats.ingest.end_s;
    if ((st = rv_tok_shard_plan(L, kind, (int)cp, &sp)) != RV_OK)
        goto end;
    /* The report `ringvit tokens` stores (without -o's path). */
    rv_tok_report rep = {.path = path, .io = &rec.io, .to = &to, .blocks = blocks,
                         .origin = rec.clock0, .time_origin = rec.time_origin, .L = L,
                         .plan_source = rec.need_count ? "decode" : "probe",
                         .plan_end_s = plan_end,
                         .end_s = isfinite(plan_end) ? plan_end : stats.ingest.end_s,
                         .stats = &stats, .wall_s = wall, .sp = &sp};
    if ((st = rv_tok_report_json(&rep, &report_text)) != RV_OK ||
        (st = rv_probe_json_text(probe, 0, &probe_text)) != RV_OK)
        goto end;
    if ((int64_t)c.v[V_MOD].n != L->seq) {
        st = rv_fail(RV_ERR_INTERNAL, "tokens: %zu tokens collected, the layout has %lld",
                     c.v[V_MOD].n, (long long)L->seq);
        goto end;
    }
    int64_t vd[2] = {L->nvideo, L->video_dim}, ad[2] = {L->naudio, L->audio_dim},
            fd[2] = {L->fbank_frames, RV_FBANK_BINS}, sd[1] = {L->seq}, pd[2] = {L->seq, 3},
            td[2] = {L->seq, 2};
    if ((st = flat_arrays_new(&a)) != RV_OK ||
        (st = flat_arrays_adopt(a, "video_patches", "f32", 2, vd, c.v[V_VIDEO].p)) != RV_OK ||
        (c.v[V_VIDEO].p = NULL,
         (st = flat_arrays_adopt(a, "audio_patches", "f32", 2, ad, c.v[V_AUDIO].p))) != RV_OK ||
        (c.v[V_AUDIO].p = NULL,
         (st = flat_arrays_adopt(a, "audio_fbank", "f32", 2, fd, c.v[V_FBANK].p))) != RV_OK ||
        (c.v[V_FBANK].p = NULL,
         (st = flat_arrays_adopt(a, "token_modality", "u8", 1, sd, c.v[V_MOD].p))) != RV_OK ||
        (c.v[V_MOD].p = NULL,
         (st = flat_arrays_adopt(a, "token_pos", "i64", 2, pd, c.v[V_POS].p))) != RV_OK ||
        (c.v[V_POS].p = NULL,
         (st = flat_arrays_adopt(a, "token_time", "f64", 2, td, c.v[V_TIME].p))) != RV_OK ||
        (c.v[V_TIME].p = NULL,
         (st = flat_arrays_adopt(a, "token_window", "i64", 1, sd, c.v[V_WINDOW].p))) != RV_OK) {
        for (int i = 0; i < V_COUNT; i++)
            c.v[i].p = NULL; /* adopt frees what it is given, on failure too */
        goto end;
    }
    c.v[V_WINDOW].p = NULL;
    json_t *meta = json_pack("{sssfsoso}", "format", "ringvit-tokens", "time_origin",
                             rec.time_origin, "probe", json_loads(probe_text, 0, NULL), "tokens",
                             json_loads(report_text, 0, NULL));
    if (meta && json_object_set_new(meta, "layout", layout_json(L, &rec)) != 0) {
        json_decref(meta);
        meta = NULL;
    }
    st = flat_arrays_meta(a, meta);
end:
    for (int i = 0; i < V_COUNT; i++)
        free(c.v[i].p);
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
