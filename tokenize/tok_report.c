/* tok_report.c: the report of `ringvit tokens` as JSON (what --json prints and
 * -o stores as "tokens" metadata; rv_flat_tokens's "tokens" metadata too): the
 * options, the plan, the counts per modality, the windows (attention blocks),
 * the recording's decode and each rank's shard with its time ranges, every
 * time on the container's clock (the layout's t0 + the sequence time). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ingest_json.h"
#include "rv_tok_report.h"

/* Seconds of recording the sequence covers: from the grid start to the end
 * (the plan's, or the one ingest found), within --duration. */
double rv_tok_covered_s(const rv_tok_layout *L, double end_s)
{
    if (!isfinite(end_s)) {
        double v = (double)L->nframes * L->ingest.fps_den / L->ingest.fps_num;
        double a = (double)L->nsamples / RV_AUDIO_RATE;
        return v > a ? v : a;
    }
    double s = end_s - L->ingest.start_s;
    if (L->ingest.duration_s > 0 && s > L->ingest.duration_s)
        s = L->ingest.duration_s;
    return s > 0 ? s : 0;
}

/* A float option as the decimal it was given as (0.485, not 0.485000014). */
static json_t *json_float(float v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%.7g", v);
    return json_real(strtod(buf, NULL));
}

/* The block options as asked for: kind ("time", "frame" or null: plain
 * interleaving windows) and what the blocks bring. */
static json_t *blocks_opts_json(const rv_tok_report *a)
{
    const rv_tok_opts *o = a->to;
    if (!a->blocks)
        return json_null();
    json_t *b = json_object();
    json_object_set_new(b, "kind", json_string(o->frame_windows ? "frame" : "time"));
    json_object_set_new(b, "block_s", o->frame_windows ? json_null() : json_real(o->window_s));
    json_object_set_new(b, "frame_windows", json_boolean(o->frame_windows));
    json_object_set_new(b, "cls_each_window", json_boolean(o->cls_each_window));
    json_object_set_new(b, "window_positions", json_boolean(o->window_positions));
    return b;
}

/* The windows as the layout has them: what each is, how many, the special
 * tokens leading each. */
static json_t *blocks_json(const rv_tok_layout *L)
{
    const rv_tok_opts *o = &L->opts;
    json_t *b = json_object();
    json_object_set_new(b, "kind", json_string(o->frame_windows ? "frame" : "time"));
    json_object_set_new(b, "window_s", o->frame_windows ? json_null() : json_real(o->window_s));
    json_object_set_new(b, "window_frames", o->frame_windows ? json_integer(o->tubelet) : json_null());
    json_object_set_new(b, "count", json_integer(L->windows));
    json_object_set_new(b, "cls_each_window", json_boolean(o->cls_each_window && o->cls > 0));
    json_object_set_new(b, "special_per_window", json_integer(o->cls_each_window ? o->cls : 0));
    json_object_set_new(b, "special_tokens", json_integer(L->nspecial));
    json_object_set_new(b, "window_positions", json_boolean(o->window_positions));
    return b;
}

static json_t *options_json(const rv_tok_report *a)
{
    const rv_tok_opts *o = a->to;
    json_t *m = json_object();
    json_object_set_new(m, "fps", json_real((double)a->io->fps_num / a->io->fps_den));
    json_object_set_new(m, "fps_rational", json_sprintf("%d/%d", a->io->fps_num, a->io->fps_den));
    json_object_set_new(m, "size", json_integer(a->io->size));
    json_object_set_new(m, "pad", json_boolean(a->io->pad));
    json_object_set_new(m, "start_s", json_real(a->L->t0 + a->io->start_s));
    json_object_set_new(m, "time_origin", json_real(a->time_origin));
    json_object_set_new(m, "duration_s", a->io->duration_s > 0 ? json_real(a->io->duration_s) : json_null());
    json_object_set_new(m, "tubelet", json_integer(o->tubelet));
    json_object_set_new(m, "patch", json_integer(o->patch));
    json_t *mean = json_array(), *std = json_array();
    for (int c = 0; c < 3; c++) {
        json_array_append_new(mean, json_float(o->mean[c]));
        json_array_append_new(std, json_float(o->std[c]));
    }
    json_object_set_new(m, "mean", mean);
    json_object_set_new(m, "std", std);
    json_object_set_new(m, "audio_freq", json_integer(o->audio_freq));
    json_object_set_new(m, "audio_freq_stride", json_integer(rv_tok_audio_fstride(o)));
    json_object_set_new(m, "audio_time", json_integer(o->audio_time));
    json_object_set_new(m, "audio_stride", json_integer(o->audio_stride));
    json_object_set_new(m, "audio_mean", json_float(o->audio_mean));
    json_object_set_new(m, "audio_std", json_float(o->audio_std));
    json_object_set_new(m, "audio_window_s", json_real(o->window_s));
    json_object_set_new(m, "cls", json_boolean(o->cls >= 1));
    json_object_set_new(m, "dist", json_boolean(o->cls >= 2));
    json_object_set_new(m, "video", json_boolean(o->video));
    json_object_set_new(m, "audio", json_boolean(o->audio));
    json_object_set_new(m, "block", blocks_opts_json(a));
    return m;
}

static json_t *report_json(const rv_tok_report *r)
{
    const rv_tok_layout *L = r->L;
    json_t *root = json_object();
    json_object_set_new(root, "path", ingest_json_path(r->path));
    json_object_set_new(root, "options", options_json(r));
    json_t *plan = json_object();
    json_object_set_new(plan, "source", json_string(r->plan_source));
    json_object_set_new(plan, "end_s", isfinite(r->plan_end_s) ? json_real(L->t0 + r->plan_end_s)
                                                               : json_null());
    json_object_set_new(plan, "frames", json_integer(L->nframes));
    json_object_set_new(plan, "samples", json_integer(L->nsamples));
    json_object_set_new(root, "plan", plan);
    json_object_set_new(root, "seq_len", json_integer(L->seq));
    json_object_set_new(root, "tokens", json_pack("{sIsIsI}", "video", (json_int_t)L->nvideo,
                                                  "audio", (json_int_t)L->naudio, "cls",
                                                  (json_int_t)L->nspecial));
    double secs = rv_tok_covered_s(L, r->end_s);
    json_object_set_new(root, "recording_s", json_real(secs));
    json_object_set_new(root, "tokens_per_s", secs > 0 ? json_real(L->seq / secs) : json_null());
    json_object_set_new(root, "windows", json_integer(L->windows));
    json_object_set_new(root, "blocks", blocks_json(L));
    json_object_set_new(root, "video_dim", json_integer(L->video_dim));
    json_object_set_new(root, "audio_dim", json_integer(L->audio_dim));
    json_object_set_new(root, "tubelets", json_integer(L->tubelets));
    json_object_set_new(root, "audio_steps", json_integer(L->steps));
    json_object_set_new(root, "audio_bands", json_integer(L->bands));
    json_object_set_new(root, "fbank_frames", json_integer(L->fbank_frames));
    if (r->stats) {
        const rv_tok_stats *s = r->stats;
        json_t *d = json_object();
        json_object_set_new(d, "end_s", json_real(L->t0 + s->ingest.end_s));
        json_object_set_new(d, "frames", json_integer(s->ingest.frames));
        json_object_set_new(d, "samples", json_integer(s->ingest.samples));
        json_object_set_new(d, "padded_frames", json_integer(s->padded_frames));
        json_object_set_new(d, "padded_samples", json_integer(s->padded_samples));
        json_object_set_new(d, "dropped_frames", json_integer(s->dropped_frames));
        json_object_set_new(d, "dropped_samples", json_integer(s->dropped_samples));
        json_object_set_new(d, "corrupt", json_integer(s->ingest.corrupt));
        json_object_set_new(d, "tokenize_cpu_s", json_real(s->cpu_s));
        json_object_set_new(d, "tokenize_tokens_per_s",
                            s->cpu_s > 0 ? json_real(s->tokens / s->cpu_s) : json_null());
        json_object_set_new(d, "wall_s", json_real(r->wall_s));
        json_object_set_new(root, "recording", d);
    } else {
        json_object_set_new(root, "recording", json_null());
    }
    json_t *shard = json_object(), *ranks = json_array();
    json_object_set_new(shard, "kind", json_string(rv_shard_kind_name(r->sp->kind)));
    json_object_set_new(shard, "ranks", json_integer(r->sp->ranks));
    json_object_set_new(shard, "max_len", json_integer(rv_shard_max_len(r->sp)));
    for (int k = 0; k < r->sp->ranks; k++) {
        rv_tok_span spans[RV_SHARD_MAX_SEGS];
        int n = rv_tok_rank_spans(L, r->sp, k, spans);
        json_t *rk = json_object(), *segs = json_array();
        json_object_set_new(rk, "rank", json_integer(k));
        json_object_set_new(rk, "len", json_integer(rv_shard_len(r->sp, k)));
        for (int i = 0; i < n; i++) {
            const rv_tok_span *x = &spans[i];
            json_t *sg = json_object();
            json_object_set_new(sg, "first", json_integer(x->first));
            json_object_set_new(sg, "count", json_integer(x->count));
            json_object_set_new(sg, "t0", json_real(x->time[0]));
            json_object_set_new(sg, "t1", json_real(x->time[1]));
            json_object_set_new(sg, "video_tokens", json_integer(rv_tok_video_before(L, x->first + x->count) -
                                                                 rv_tok_video_before(L, x->first)));
            json_object_set_new(sg, "audio_tokens", json_integer(rv_tok_audio_before(L, x->first + x->count) -
                                                                 rv_tok_audio_before(L, x->first)));
            json_object_set_new(sg, "grid_first", json_integer(x->grid0));
            json_object_set_new(sg, "grid_count", json_integer(x->grid1 - x->grid0));
            json_array_append_new(segs, sg);
        }
        json_object_set_new(rk, "segments", segs);
        json_array_append_new(ranks, rk);
    }
    json_object_set_new(shard, "per_rank", ranks);
    json_object_set_new(root, "shard", shard);
    json_object_set_new(root, "output", r->output ? json_string(r->output) : json_null());
    return root;
}

rv_status rv_tok_report_json(const rv_tok_report *r, char **json)
{
    json_t *root = report_json(r);
    *json = root ? json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(root);
    return *json ? RV_OK : rv_fail(RV_ERR_NOMEM, "out of memory");
}
