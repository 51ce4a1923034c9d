/* flat_encoder.c: rv_flat_encoder, `ringvit embed` in-process for other
 * languages: a model and cp ranks that are threads of this process
 * (rv_local_run), each running the library's embed job (rv_embed.h) on a file,
 * or on the token arrays rv_flat_tokens made. Rank 0's output becomes the named
 * arrays and metadata: the tensors and entries the command writes, the same
 * bytes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "embed_internal.h"
#include "embed_output.h"
#include "flat_internal.h"
#include "rv_backend.h"
#include "rv_comm.h"
#include "rv_embed.h"
#include "rv_vit.h"

struct rv_flat_encoder {
    rv_vit_model *m;
    char *spec;
    int cp;
    int random;             /* a preset: seeded random weights */
    rv_embed_opts base;     /* the encoder's options (device, strategy, span, ...) */
    char device[8];
};

static const char *const open_keys[] = {"cp", "device", "strategy", "attention", "causal",
                                        "threads", "seed", "precision", NULL};

rv_status rv_flat_encoder_open(const char *model, const char *opts_json, rv_flat_encoder **out)
{
    json_t *o = NULL;
    rv_flat_encoder *e = NULL;
    const char *device = "cpu", *strategy = "ring", *attention = "full", *precision = "auto";
    int64_t cp = 1, threads = 0, seed = 0;
    rv_status st;
    *out = NULL;
    if (!(e = calloc(1, sizeof *e)) || !(e->spec = strdup(model ? model : ""))) {
        st = rv_fail(RV_ERR_NOMEM, "out of memory");
        goto end;
    }
    rv_embed_opts_default(&e->base);
    if ((st = flat_opts_parse(opts_json, open_keys, &o)) != RV_OK ||
        (st = flat_opt_int(o, "cp", 1, 1024, &cp)) != RV_OK ||
        (st = flat_opt_str(o, "device", &device)) != RV_OK ||
        (st = flat_opt_str(o, "strategy", &strategy)) != RV_OK ||
        (st = flat_opt_str(o, "attention", &attention)) != RV_OK ||
        (st = flat_opt_bool(o, "causal", &e->base.causal)) != RV_OK ||
        (st = flat_opt_int(o, "threads", 0, 4096, &threads)) != RV_OK ||
        (st = flat_opt_int(o, "seed", 0, INT64_MAX, &seed)) != RV_OK ||
        (st = flat_opt_str(o, "precision", &precision)) != RV_OK)
        goto end;
    if (strcmp(device, "cpu") != 0 && strcmp(device, "cuda") != 0) {
        st = rv_fail(RV_ERR_INVALID, "option \"device\" wants \"cpu\" or \"cuda\", got \"%s\"",
                     device);
        goto end;
    }
    snprintf(e->device, sizeof e->device, "%s", device);
    e->base.device = e->device;
    /* The command's check, with its message, before anything is loaded. */
    if ((st = rv_backend_check(e->device)) != RV_OK)
        goto end;
    if (rv_precision_parse(precision, &e->base.precision) != RV_OK) {
        st = rv_fail(RV_ERR_INVALID, "option \"precision\": %s", rv_last_error());
        goto end;
    }
    if ((st = rv_precision_check(e->device, e->base.precision)) != RV_OK)
        goto end;
    if (rv_cp_strategy_parse(strategy, &e->base.strategy) != RV_OK) {
        st = rv_fail(RV_ERR_INVALID, "option \"strategy\": %s", rv_last_error());
        goto end;
    }
    if (rv_span_parse(attention, &e->base.span) != RV_OK) {
        st = rv_fail(RV_ERR_INVALID, "option \"attention\": %s", rv_last_error());
        goto end;
    }
    if ((st = flat_model_open(model, (uint64_t)seed, &e->m)) != RV_OK)
        goto end;
    e->cp = (int)cp;
    /* As the command: all cores shared among the ranks, unless told. */
    e->base.threads = (int)threads;
    e->base.local_ranks = e->cp;
    e->base.prefetch = 0; /* one input a call */
    if ((st = rv_embed_check(e->m, &e->base, e->cp, 0)) != RV_OK)
        goto end;
    e->random = strcmp(rv_vit_spec_kind(e->spec), "preset") == 0;
    *out = e;
    e = NULL;
end:
    rv_flat_encoder_close(&e);
    json_decref(o);
    return st;
}

void rv_flat_encoder_close(rv_flat_encoder **ep)
{
    if (!ep || !*ep)
        return;
    rv_vit_free(&(*ep)->m);
    free((*ep)->spec);
    free(*ep);
    *ep = NULL;
}

rv_status rv_flat_encoder_config(const rv_flat_encoder *e, char **json)
{
    *json = NULL;
    if (!e)
        return rv_fail(RV_ERR_INVALID, "encoder: closed");
    *json = rv_vit_config_to_json(&e->m->cfg);
    return *json ? RV_OK : rv_fail(RV_ERR_NOMEM, "out of memory");
}

/* ---- one embedding on cp threads ----------------------------------------------------- */

typedef struct job {
    const rv_flat_encoder *e;
    rv_embed_opts opts;
    const char *path;            /* a file, or: */
    const embed_patches *patches; /* the sequence's patches (embed_tokens) */
    unsigned mark;               /* the interrupt counter at the call's start */
    rv_embed_output *out;        /* rank 0's */
} job;

static int interrupted(void *user)
{
    const job *jb = user;
    return flat_interrupt_check(jb->mark) != RV_OK;
}

static rv_status rank_main(rv_comm *comm, void *arg)
{
    job *jb = arg;
    const rv_embed_model model = {.model = jb->e->m, .name = jb->e->spec,
                                  .random_weights = jb->e->random};
    const rv_embed_hooks hooks = {.user = jb, .stop = interrupted};
    rv_embed_job *j = NULL;
    rv_embed_input *in = NULL;
    rv_embed_output *out = NULL;
    rv_status st = RV_OK;
    rv_vote_outcome v = rv_embed_open(&model, comm, &jb->opts, &hooks, &j);
    if (v == RV_VOTE_OK)
        st = jb->path ? rv_embed_queue(j, jb->path, 0, &in)
                      : embed_queue_patches(j, jb->patches, 0, &in);
    if (v == RV_VOTE_OK && st == RV_OK && (v = rv_embed_run(j, in, NULL)) == RV_VOTE_OK)
        v = rv_embed_collect(j, in, NULL, &out, NULL);
    if (v == RV_VOTE_STOP)
        st = rv_fail(RV_ERR_IO, "interrupted");
    else if (v != RV_VOTE_OK && st == RV_OK)
        st = rv_fail(rv_last_error()[0] ? RV_ERR_IO : RV_ERR_INTERNAL, "%s", rv_last_error());
    if (st == RV_OK && comm->rank == 0) {
        jb->out = out;
        out = NULL;
    }
    rv_embed_output_free(&out);
    rv_embed_input_free(&in);
    rv_embed_close(&j);
    return st;
}

static const char *array_dtype(rv_dtype t)
{
    switch (t) {
    case RV_U8: return "u8";
    case RV_I64: return "i64";
    case RV_F16: return "f16";
    case RV_BF16: return "bf16";
    case RV_F64: return "f64";
    default: return "f32";
    }
}

/* The output as named arrays: its buffers taken over where it owns them, else
 * copied; its metadata as JSON values (numbers, objects) or strings. */
static rv_status to_arrays(rv_embed_output *o, rv_arrays **out)
{
    rv_arrays *a = NULL;
    json_t *meta = json_object();
    rv_status st = meta ? flat_arrays_new(&a) : rv_fail(RV_ERR_NOMEM, "out of memory");
    for (int i = 0; st == RV_OK && i < embed_output_count(o); i++) {
        const embed_out_tensor *t = embed_output_tensor(o, i);
        void *own = embed_output_take(o, i);
        st = own ? flat_arrays_adopt(a, t->name, array_dtype(t->dtype), t->ndim, t->shape, own)
                 : flat_arrays_add(a, t->name, array_dtype(t->dtype), t->ndim, t->shape, t->data,
                                   NULL);
    }
    for (int i = 0; st == RV_OK && i < embed_output_meta_count(o); i++) {
        const embed_out_meta *m = embed_output_meta(o, i);
        json_t *v = m->json ? json_loads(m->value, JSON_DECODE_ANY, NULL) : json_string(m->value);
        if (!v || json_object_set_new(meta, m->key, v) != 0)
            st = rv_fail(RV_ERR_NOMEM, "metadata %s: out of memory", m->key);
    }
    if (st == RV_OK) {
        st = flat_arrays_meta(a, meta);
        meta = NULL;
    }
    json_decref(meta);
    if (st != RV_OK)
        rv_arrays_free(&a);
    *out = a;
    return st;
}

static const char *const embed_keys[] = {FLAT_INGEST_KEYS, "segment", "hop", "tokens", "dtype",
                                         "normalize", NULL};

/* The output options of an embed call into o. */
static rv_status parse_output(const json_t *j, rv_embed_opts *o)
{
    const char *dtype = "f32";
    rv_status st;
    if ((st = flat_opt_num(j, "segment", 0.001, 1e9, &o->segment_s)) != RV_OK ||
        (st = flat_opt_num(j, "hop", 0.001, 1e9, &o->hop_s)) != RV_OK ||
        (st = flat_opt_bool(j, "tokens", &o->tokens)) != RV_OK ||
        (st = flat_opt_bool(j, "normalize", &o->normalize)) != RV_OK ||
        (st = flat_opt_str(j, "dtype", &dtype)) != RV_OK)
        return st;
    if (rv_embed_dtype_parse(dtype, &o->dtype) != RV_OK)
        return rv_fail(RV_ERR_INVALID, "option \"dtype\" wants \"f32\", \"f16\" or \"bf16\", got "
                       "\"%s\"", dtype);
    return RV_OK;
}

static rv_status run(job *jb, rv_arrays **out)
{
    rv_status st = rv_local_run_copy(jb->e->cp, rank_main, jb, rv_backend_copy(jb->e->device));
    if (st == RV_OK)
        st = to_arrays(jb->out, out);
    rv_embed_output_free(&jb->out);
    return st;
}

rv_status rv_flat_encoder_embed(rv_flat_encoder *e, const char *path, const char *opts_json,
                                rv_arrays **out)
{
    json_t *o = NULL;
    int size_set = 0;
    job jb = {.e = e, .path = path, .mark = flat_interrupt_mark()};
    rv_status st;
    *out = NULL;
    if (!e || !path) {
        st = rv_fail(RV_ERR_INVALID, "embed: %s", e ? "no path" : "the encoder is closed");
        goto end;
    }
    jb.opts = e->base;
    if ((st = flat_opts_parse(opts_json, embed_keys, &o)) != RV_OK ||
        (st = flat_opts_ingest(o, &jb.opts.io, &jb.opts.start_at, &size_set)) != RV_OK ||
        (st = parse_output(o, &jb.opts)) != RV_OK)
        goto end;
    if (!size_set)
        jb.opts.io.size = 0; /* the model's */
    if (!json_object_get(o, "threads"))
        jb.opts.io.threads = 0; /* decoders as many as the compute threads, as the command */
    st = run(&jb, out);
end:
    json_decref(o);
    return st;
}

rv_status rv_flat_encoder_embed_tokens(rv_flat_encoder *e, const rv_arrays *tokens,
                                       const char *opts_json, rv_arrays **out)
{
    static const char *const keys[] = {"segment", "hop", "tokens", "dtype", "normalize", NULL};
    json_t *o = NULL;
    flat_tok_plan p;
    embed_patches patches = {0};
    int64_t nv = 0, na = 0;
    job jb = {.e = e, .patches = &patches, .mark = flat_interrupt_mark()};
    rv_status st;
    *out = NULL;
    if (!e || !tokens) {
        st = rv_fail(RV_ERR_INVALID, "embed: %s", e ? "no tokens" : "the encoder is closed");
        goto end;
    }
    jb.opts = e->base;
    if ((st = flat_opts_parse(opts_json, keys, &o)) != RV_OK ||
        (st = parse_output(o, &jb.opts)) != RV_OK ||
        (st = flat_tokens_layout(rv_arrays_meta(tokens), &patches.layout, &p)) != RV_OK)
        goto end;
    const rv_tok_layout *L = &patches.layout;
    json_t *tmeta = json_loads(rv_arrays_meta(tokens), 0, NULL);
    const json_t *probe = json_object_get(tmeta, "probe");
    /* As the outputs store it (rv_probe_json_text's compact form). */
    patches.probe_json = json_is_object(probe) ? json_dumps(probe, JSON_COMPACT |
                                                            JSON_SORT_KEYS |
                                                            JSON_REAL_PRECISION(17)) : NULL;
    json_decref(tmeta);
    patches.video = flat_arrays_get(tokens, "video_patches", "f32", &nv);
    patches.audio = flat_arrays_get(tokens, "audio_patches", "f32", &na);
    if (!patches.video || !patches.audio || nv != L->nvideo * L->video_dim ||
        na != L->naudio * L->audio_dim) {
        st = rv_fail(RV_ERR_INVALID, "embed: the tokens want video_patches f32 (%lld, %lld) and "
                     "audio_patches f32 (%lld, %lld) as their layout says", (long long)L->nvideo,
                     (long long)L->video_dim, (long long)L->naudio, (long long)L->audio_dim);
        goto end;
    }
    /* The model must see the tokens it was made for: the tokenizer, and the
     * windows its attention span makes blocks of. */
    rv_tok_opts want;
    rv_ingest_opts wio = L->ingest;
    const rv_tok_opts *have = &L->opts;
    if (rv_vit_input_opts(&e->m->cfg, L->ingest.size, !have->video, !have->audio,
                          &e->base.span, &want, &wio) != RV_OK ||
        want.tubelet != have->tubelet || want.patch != have->patch ||
        want.audio_freq != have->audio_freq || want.audio_time != have->audio_time ||
        want.audio_stride != have->audio_stride || want.audio_fstride != have->audio_fstride ||
        want.cls != have->cls || want.frame_windows != have->frame_windows ||
        want.cls_each_window != have->cls_each_window ||
        want.window_positions != have->window_positions ||
        (!want.frame_windows && want.window_s != have->window_s) ||
        memcmp(want.mean, have->mean, sizeof want.mean) != 0 ||
        memcmp(want.std, have->std, sizeof want.std) != 0 || want.audio_mean != have->audio_mean ||
        want.audio_std != have->audio_std) {
        st = rv_fail(RV_ERR_INVALID, "embed: these tokens were not made for this encoder (make "
                     "them with rv_flat_tokens and \"model\" set to it, and \"attention\" to "
                     "its span when that is block= or frame)");
        goto end;
    }
    patches.t0 = p.t0;
    patches.time_origin = p.time_origin;
    patches.end_s = p.end_s;
    patches.rec_start = p.rec_start;
    st = run(&jb, out);
end:
    free(patches.probe_json);
    json_decref(o);
    return st;
}
