/* flat_encoder.c: rv_flat_encoder, `ringvit embed` in-process: a model and cp
 * ranks that are threads of this process (rv_local_run), through the library's
 * recipe (rv_vit_input_opts, rv_tok_recording_plan / _count, rv_tok_slice_plan
 * and _fill, rv_vit_forward, rv_vit_pool, rv_vit_pool_head; as
 * tests/install/embed_two_ranks.c). Each rank fills its slice from the file, or
 * from token arrays rv_flat_tokens made (embed_tokens). The outputs are the
 * tensors embed_output.c writes (f32 embeddings; times on the container's
 * clock). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "flat_internal.h"
#include "rv_backend.h"
#include "rv_comm.h"
#include "rv_tok_slice.h"
#include "rv_tokenize.h"
#include "rv_version.h"
#include "rv_vit.h"

struct rv_flat_encoder {
    rv_vit_model *m;
    char *spec;
    int cp, causal, threads;
    rv_cp_strategy strategy;
    rv_span span;
    char hash[17];
    int random;             /* a preset: seeded random weights */
};

static const char *const open_keys[] = {"cp", "device", "strategy", "attention", "causal",
                                        "threads", "seed", NULL};

rv_status rv_flat_encoder_open(const char *model, const char *opts_json, rv_flat_encoder **out)
{
    json_t *o = NULL;
    rv_flat_encoder *e = NULL;
    const char *device = "cpu", *strategy = "ring", *attention = "full";
    int64_t cp = 1, threads = 0, seed = 0;
    rv_status st;
    *out = NULL;
    if (!(e = calloc(1, sizeof *e)) || !(e->spec = strdup(model ? model : ""))) {
        st = rv_fail(RV_ERR_NOMEM, "out of memory");
        goto end;
    }
    if ((st = flat_opts_parse(opts_json, open_keys, &o)) != RV_OK ||
        (st = flat_opt_int(o, "cp", 1, 1024, &cp)) != RV_OK ||
        (st = flat_opt_str(o, "device", &device)) != RV_OK ||
        (st = flat_opt_str(o, "strategy", &strategy)) != RV_OK ||
        (st = flat_opt_str(o, "attention", &attention)) != RV_OK ||
        (st = flat_opt_bool(o, "causal", &e->causal)) != RV_OK ||
        (st = flat_opt_int(o, "threads", 0, 4096, &threads)) != RV_OK ||
        (st = flat_opt_int(o, "seed", 0, INT64_MAX, &seed)) != RV_OK)
        goto end;
    if (strcmp(device, "cpu") != 0) {
        st = rv_fail(RV_ERR_UNSUPPORTED, "option \"device\": only \"cpu\" runs in-process, got "
                     "\"%s\"", device);
        goto end;
    }
    if (rv_cp_strategy_parse(strategy, &e->strategy) != RV_OK) {
        st = rv_fail(RV_ERR_INVALID, "option \"strategy\" wants ring, allgather or ulysses, got "
                     "\"%s\"", strategy);
        goto end;
    }
    if (rv_span_parse(attention, &e->span) != RV_OK) {
        st = rv_fail(RV_ERR_INVALID, "option \"attention\": %s", rv_last_error());
        goto end;
    }
    if ((st = flat_model_open(model, (uint64_t)seed, &e->m)) != RV_OK)
        goto end;
    if (e->strategy == RV_CP_ULYSSES && e->m->cfg.heads % cp != 0) {
        st = rv_fail(RV_ERR_INVALID, "ulysses needs the model's heads (%d) to be a multiple of "
                     "cp (%lld)", e->m->cfg.heads, (long long)cp);
        goto end;
    }
    e->cp = (int)cp;
    /* As the command: all cores shared among the ranks, unless told. */
    int t = (threads > 0 ? (int)threads : rv_cpu_default_threads()) / e->cp;
    e->threads = t > 0 ? t : 1;
    rv_vit_hash(e->m, e->hash);
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

/* ---- one embedding ------------------------------------------------------------ */

typedef struct job {
    const rv_flat_encoder *e;
    const rv_tok_layout *L;
    const char *path;            /* fill from the file, or: */
    const float *video, *audio;  /* the whole sequence's patches (embed_tokens) */
    rv_vit_pool_opts po;
    rv_shard_kind kind;
    unsigned mark;
    float *tokens;               /* (seq, D) every token's output, or NULL */
    json_t *probe;               /* the file's probe (metadata "probe"; NULL: null) */
    rv_vit_pooled pooled;        /* rank 0's */
} job;

/* A rank's batch while its slice is tokenized: embedded at once into y, as embed
 * does (embed_prepare.c), so the patches are never held whole. */
typedef struct rank_fill {
    const job *j;
    rv_backend *be;
    float *y;
    int grid;
    int64_t audio_steps;
} rank_fill;

static rv_status each_batch(const rv_tok_batch *b, int64_t offset, void *user)
{
    rank_fill *f = user;
    rv_status st = flat_interrupt_check(f->j->mark);
    if (st != RV_OK)
        return st;
    rv_vit_tokens bt = {.len = b->count, .modality = b->modality, .pos = b->pos, .seq_time = b->seq_time,
                        .nvideo = b->nvideo, .video = b->video, .naudio = b->naudio,
                        .audio = b->audio, .grid = f->grid, .audio_steps = f->audio_steps,
                        .window = b->window};
    return rv_vit_embed(f->j->e->m, f->be, &bt, f->y + (size_t)offset * f->j->e->m->cfg.dim, NULL);
}

/* The slice from the token arrays: what the tokenizer would have handed out. */
static rv_status fill_from_arrays(const job *j, int rank, rv_tok_slice *s)
{
    const rv_tok_layout *L = j->L;
    rv_shard_seg segs[RV_SHARD_MAX_SEGS];
    int n = rv_shard_segments(&s->plan, rank, segs);
    int64_t at = 0, nv = 0, na = 0;
    rv_status st;
    for (int g = 0; g < n; g++) {
        int64_t vi = rv_tok_video_before(L, segs[g].start), ai = rv_tok_audio_before(L, segs[g].start);
        for (int64_t i = segs[g].start; i < segs[g].start + segs[g].len; i++, at++) {
            rv_token tk;
            if ((st = rv_tok_info(L, i, &tk)) != RV_OK)
                return st;
            s->modality[at] = (uint8_t)tk.modality;
            memcpy(s->pos + 3 * at, tk.pos, sizeof tk.pos);
            memcpy(s->seq_time + 2 * at, tk.seq_time, sizeof tk.seq_time);
            s->window[at] = tk.window;
            if (tk.modality == RV_MOD_VIDEO)
                memcpy(s->video + (size_t)(nv++ * L->video_dim), j->video + (size_t)(vi++ * L->video_dim),
                       sizeof(float) * (size_t)L->video_dim);
            else if (tk.modality == RV_MOD_AUDIO)
                memcpy(s->audio + (size_t)(na++ * L->audio_dim), j->audio + (size_t)(ai++ * L->audio_dim),
                       sizeof(float) * (size_t)L->audio_dim);
        }
    }
    s->got = at;
    s->got_video = nv;
    s->got_audio = na;
    return at == s->len && nv == s->nvideo && na == s->naudio
               ? RV_OK
               : rv_fail(RV_ERR_INTERNAL, "rank %d: %lld tokens filled of %lld", rank,
                         (long long)at, (long long)s->len);
}

/* Embeds the slice filled from arrays in the batches the tokenizer would have
 * handed its fill: one per window, cut at the rank's segment ends, the leading
 * special tokens with the first (tokenizer.c). The same GEMM shapes as a fill
 * from the file give the same sums, to the bit. */
static rv_status embed_as_batches(rank_fill *f, const rv_tok_slice *s, int rank)
{
    const rv_tok_layout *L = f->j->L;
    const int D = f->j->e->m->cfg.dim;
    rv_shard_seg segs[RV_SHARD_MAX_SEGS];
    int n = rv_shard_segments(&s->plan, rank, segs);
    int64_t off = 0, v = 0, au = 0;
    rv_status st = RV_OK;
    for (int g = 0; g < n && st == RV_OK; g++) {
        const int64_t end = segs[g].start + segs[g].len;
        int64_t a = segs[g].start, w = segs[g].len > 0 ? rv_tok_window_of(L, a) : 0;
        while (a < end && st == RV_OK) {
            int64_t b = end;
            while (++w <= L->windows) {
                int64_t ws = rv_tok_window_start(L, w);
                if (ws > a) {
                    b = ws < end ? ws : end;
                    break;
                }
            }
            int64_t nv = 0, na = 0;
            for (int64_t i = off; i < off + (b - a); i++) {
                nv += s->modality[i] == RV_MOD_VIDEO;
                na += s->modality[i] == RV_MOD_AUDIO;
            }
            rv_vit_tokens bt = {.len = b - a, .modality = s->modality + off, .pos = s->pos + 3 * off,
                                .seq_time = s->seq_time + 2 * off, .nvideo = nv,
                                .video = s->video ? s->video + (size_t)v * (size_t)L->video_dim : NULL,
                                .naudio = na,
                                .audio = s->audio ? s->audio + (size_t)au * (size_t)L->audio_dim : NULL,
                                .grid = f->grid, .audio_steps = f->audio_steps,
                                .window = s->window + off};
            st = rv_vit_embed(f->j->e->m, f->be, &bt, f->y + (size_t)off * D, NULL);
            off += b - a, v += nv, au += na;
            a = b;
        }
    }
    return st;
}

/* Before each layer of the forward: a Ctrl-C (rv_flat_interrupt) since the call
 * began stops it. */
static rv_status layer_check(void *arg)
{
    const job *j = arg;
    return flat_interrupt_check(j->mark);
}

static rv_status rank_main(rv_comm *comm, void *arg)
{
    job *j = arg;
    const rv_flat_encoder *e = j->e;
    const int rank = rv_comm_rank(comm), D = e->m->cfg.dim;
    rv_tok_slice s = {0};
    rv_backend *be = NULL;
    rv_vit_pooled pooled = {0};
    float *y = NULL;
    rv_status st;
    /* From the file: tokenized and embedded batch by batch; from arrays: the
     * slice's patches copied, then embedded in the same batches. */
    if ((st = rv_tok_slice_plan(j->L, j->kind, e->cp, rank, j->path ? 0 : 1, &s)) != RV_OK ||
        (st = rv_backend_cpu_create(e->threads, &be)) != RV_OK)
        goto end;
    if (!(y = malloc(sizeof(float) * (size_t)(s.len + 1) * (size_t)D))) {
        st = rv_fail(RV_ERR_NOMEM, "rank %d: out of memory for %lld tokens", rank, (long long)s.len);
        goto end;
    }
    rv_vit_tokens tok = rv_vit_slice_tokens(j->L, &s);
    rank_fill f = {.j = j, .be = be, .y = y, .grid = tok.grid, .audio_steps = tok.audio_steps};
    if (j->path)
        st = rv_tok_slice_fill(j->path, j->L, &s, each_batch, &f, NULL);
    else if ((st = fill_from_arrays(j, rank, &s)) == RV_OK)
        st = embed_as_batches(&f, &s, rank);
    if (st != RV_OK || (st = flat_interrupt_check(j->mark)) != RV_OK)
        goto end;
    tok = rv_vit_slice_tokens(j->L, &s);
    rv_vit_run run = {.be = be, .comm = comm, .plan = s.plan, .strategy = e->strategy,
                      .causal = e->causal, .span = e->span, .check = layer_check,
                      .check_arg = j};
    if ((st = rv_vit_forward_embedded(e->m, &run, &tok, y, NULL)) != RV_OK ||
        (st = rv_vit_pool(comm, &tok, y, D, &j->po, &pooled)) != RV_OK)
        goto end;
    if (j->tokens) { /* threads of one process: each rank writes its own rows */
        rv_shard_seg segs[RV_SHARD_MAX_SEGS];
        int n = rv_shard_segments(&s.plan, rank, segs);
        int64_t at = 0;
        for (int g = 0; g < n; g++) {
            memcpy(j->tokens + (size_t)segs[g].start * D, y + (size_t)at * D,
                   sizeof(float) * (size_t)(segs[g].len * D));
            at += segs[g].len;
        }
    }
    if (rank == 0 && (st = rv_vit_pool_head(e->m, &pooled)) == RV_OK) {
        j->pooled = pooled;
        pooled = (rv_vit_pooled){0};
    }
end:
    rv_vit_pooled_free(&pooled);
    free(y);
    rv_backend_free(&be);
    rv_tok_slice_release(&s);
    return st;
}

static const char *const embed_keys[] = {FLAT_INGEST_KEYS, "segment", "hop", "tokens", NULL};

typedef struct embed_opts {
    double segment_s, hop_s;
    int tokens;
} embed_opts;

static rv_status parse_embed(const rv_flat_encoder *e, const json_t *o, embed_opts *eo)
{
    rv_status st;
    int segment_set = json_object_get(o, "segment") != NULL;
    *eo = (embed_opts){.segment_s = 10};
    if ((st = flat_opt_num(o, "segment", 0.001, 1e9, &eo->segment_s)) != RV_OK ||
        (st = flat_opt_num(o, "hop", 0.001, 1e9, &eo->hop_s)) != RV_OK ||
        (st = flat_opt_bool(o, "tokens", &eo->tokens)) != RV_OK)
        return st;
    /* With blocks the segments are the blocks unless "segment" says otherwise. */
    if (e->span.kind == RV_SPAN_BLOCK && !segment_set)
        eo->segment_s = e->span.seconds;
    return RV_OK;
}

/* Runs the ranks over L and makes the outputs. */
static rv_status run(const rv_flat_encoder *e, job *j, const embed_opts *eo,
                     const flat_tok_plan *p, double start_s, rv_arrays **out)
{
    const rv_tok_layout *L = j->L;
    const int64_t D = e->m->cfg.dim, S = L->seq;
    rv_arrays *a = NULL;
    rv_status st;
    *out = NULL;
    if (L->nvideo + L->naudio == 0)
        return rv_fail(RV_ERR_FORMAT, "%s: nothing to embed: no video or audio tokens",
                       j->path ? j->path : "tokens");
    j->kind = e->causal && e->span.kind == RV_SPAN_FULL ? RV_SHARD_ZIGZAG : RV_SHARD_CONTIGUOUS;
    j->po = (rv_vit_pool_opts){.segment_s = eo->segment_s, .end_s = p->end_s, .hop_s = eo->hop_s,
                               .start_s = start_s, .t0 = p->t0};
    if (eo->tokens && !(j->tokens = malloc(sizeof(float) * (size_t)(S > 0 ? S : 1) * (size_t)D)))
        return rv_fail(RV_ERR_NOMEM, "out of memory for %lld tokens", (long long)S);
    if ((st = rv_local_run(e->cp, rank_main, j)) != RV_OK)
        goto end;
    rv_vit_pooled *q = &j->pooled;
    const int64_t G = q->segments, d1[1] = {D}, gd[2] = {G, D}, g1[1] = {G};
    if ((st = flat_arrays_new(&a)) != RV_OK ||
        (st = flat_arrays_add(a, "global", "f32", 1, d1, q->global, NULL)) != RV_OK ||
        (st = flat_arrays_add(a, "segments", "f32", 2, gd, q->segment, NULL)) != RV_OK ||
        (st = flat_arrays_add(a, "segment_start", "f64", 1, g1, q->segment_start, NULL)) != RV_OK ||
        (st = flat_arrays_add(a, "segment_end", "f64", 1, g1, q->segment_end, NULL)) != RV_OK ||
        (st = flat_arrays_add(a, "segment_tokens", "i64", 1, g1, q->segment_tokens, NULL)) != RV_OK ||
        (st = flat_arrays_add(a, "video_mean", "f32", 1, d1, q->modality_mean, NULL)) != RV_OK ||
        (st = flat_arrays_add(a, "audio_mean", "f32", 1, d1, q->modality_mean + D, NULL)) != RV_OK ||
        (e->m->cfg.cls && (st = flat_arrays_add(a, "cls", "f32", 1, d1, q->cls, NULL)) != RV_OK) ||
        (e->m->cfg.cls > 1 && (st = flat_arrays_add(a, "dist", "f32", 1, d1, q->dist, NULL)) != RV_OK) ||
        (q->pooled && (st = flat_arrays_add(a, "pooled", "f32", 1, d1, q->pooled, NULL)) != RV_OK))
        goto end;
    int64_t pj[1] = {q->proj_dim};
    if (q->proj_dim > 0 && (st = flat_arrays_add(a, "projected", "f32", 1, pj, q->projected, NULL)) != RV_OK)
        goto end;
    if (eo->tokens) {
        int64_t sd[2] = {S, D}, s1[1] = {S}, s2[2] = {S, 2}, s3[2] = {S, 3};
        double *tt;
        int64_t *tp;
        uint8_t *tm;
        if ((st = flat_arrays_adopt(a, "tokens", "f32", 2, sd, j->tokens)) != RV_OK ||
            (j->tokens = NULL, (st = flat_arrays_add(a, "token_time", "f64", 2, s2, NULL, (void **)&tt))) != RV_OK ||
            (st = flat_arrays_add(a, "token_modality", "u8", 1, s1, NULL, (void **)&tm)) != RV_OK ||
            (st = flat_arrays_add(a, "token_pos", "i64", 2, s3, NULL, (void **)&tp)) != RV_OK) {
            j->tokens = NULL;
            goto end;
        }
        for (int64_t i = 0; i < S; i++) {
            rv_token tk;
            if ((st = rv_tok_info(L, i, &tk)) != RV_OK)
                goto end;
            tm[i] = (uint8_t)tk.modality;
            memcpy(tp + 3 * i, tk.pos, sizeof tk.pos);
            memcpy(tt + 2 * i, tk.time, sizeof tk.time);
        }
    }
    char *config = rv_vit_config_to_json(&e->m->cfg), attention[64], fps[48];
    rv_span_format(&e->span, attention, sizeof attention);
    snprintf(fps, sizeof fps, "%d/%d", L->ingest.fps_num, L->ingest.fps_den);
    json_t *meta = json_pack("{sssssosssisssssfsbsssisfsfsfsfsIsIsIss}", "model", e->spec,
                             "model_hash", e->hash, "config",
                             config ? json_loads(config, 0, NULL) : json_null(), "family",
                             rv_vit_family_name(e->m->cfg.family), "cp", e->cp, "strategy",
                             rv_cp_strategy_name(e->strategy), "attention", attention, "hop_s",
                             eo->hop_s > 0 ? eo->hop_s : eo->segment_s, "causal", e->causal,
                             "fps", fps, "size", L->ingest.size, "segment_s", eo->segment_s,
                             "recording_s", p->end_s - p->rec_start, "time_origin", p->time_origin,
                             "start_s", rv_tok_start_time(L), "tokens", (json_int_t)S,
                             "video_tokens", (json_int_t)q->modality_tokens[0], "audio_tokens",
                             (json_int_t)q->modality_tokens[1], "source", j->path ? j->path : "");
    free(config);
    /* What else `ringvit embed` records (its outputs are f32, not normalised). */
    if (meta && json_object_update_new(meta, json_pack("{sssOsbssssss}", "format", "ringvit-embed",
                                                   "probe", j->probe ? j->probe : json_null(),
                                                   "random_weights", e->random, "dtype", "f32",
                                                   "normalize", "none", "ringvit_version",
                                                   RINGVIT_VERSION)) != 0) {
        json_decref(meta);
        meta = NULL;
    }
    st = flat_arrays_meta(a, meta);
end:
    free(j->tokens);
    j->tokens = NULL;
    rv_vit_pooled_free(&j->pooled);
    if (st != RV_OK)
        rv_arrays_free(&a);
    *out = a;
    return st;
}

rv_status rv_flat_encoder_embed(rv_flat_encoder *e, const char *path, const char *opts_json,
                                rv_arrays **out)
{
    json_t *o = NULL;
    rv_tok_recording rec;
    rv_tok_opts to;
    rv_ingest_opts io;
    embed_opts eo;
    double start_at = NAN;
    int size_set = 0;
    job j = {.e = e, .path = path, .mark = flat_interrupt_mark()};
    rv_probe *probe = NULL;
    char *probe_text = NULL;
    rv_status st;
    *out = NULL;
    memset(&rec, 0, sizeof rec);
    rv_ingest_opts_default(&io);
    if (!e || !path) {
        st = rv_fail(RV_ERR_INVALID, "embed: %s", e ? "no path" : "the encoder is closed");
        goto end;
    }
    if ((st = flat_opts_parse(opts_json, embed_keys, &o)) != RV_OK ||
        (st = flat_opts_ingest(o, &io, &start_at, &size_set)) != RV_OK ||
        (st = parse_embed(e, o, &eo)) != RV_OK)
        goto end;
    /* Decoders as many as the compute threads, as the command. */
    if (!json_object_get(o, "threads"))
        io.threads = e->threads > RV_INGEST_MAX_THREADS ? RV_INGEST_MAX_THREADS : e->threads;
    const rv_vit_config *cfg = &e->m->cfg;
    int video = cfg->video && io.video_stream != -2, audio = cfg->audio && io.audio_stream != -2;
    if ((st = rv_vit_input_opts(cfg, size_set ? io.size : 0, !video, !audio, &e->span, &to, &io)) != RV_OK ||
        (st = rv_tok_recording_plan(path, &to, &io, start_at, &rec, &probe)) != RV_OK ||
        (st = rv_probe_json_text(probe, 0, &probe_text)) != RV_OK)
        goto end;
    j.probe = json_loads(probe_text, 0, NULL);
    if (rec.need_count &&
        (st = rv_tok_recording_count(path, &to, &rec, NULL, NULL, NULL, NULL, NULL)) != RV_OK)
        goto end;
    flat_tok_plan p = {.t0 = rec.t0, .time_origin = rec.time_origin, .end_s = rec.end_s,
                       .rec_start = rec.rec_start};
    j.L = &rec.layout;
    st = run(e, &j, &eo, &p, rec.io.start_s, out);
end:
    json_decref(j.probe);
    free(probe_text);
    rv_probe_free(&probe);
    json_decref(o);
    return st;
}

rv_status rv_flat_encoder_embed_tokens(rv_flat_encoder *e, const rv_arrays *tokens,
                                       const char *opts_json, rv_arrays **out)
{
    static const char *const keys[] = {"segment", "hop", "tokens", NULL};
    json_t *o = NULL;
    rv_tok_layout L;
    flat_tok_plan p;
    embed_opts eo;
    int64_t nv = 0, na = 0;
    job j = {.e = e, .mark = flat_interrupt_mark()};
    rv_status st;
    *out = NULL;
    if (!e || !tokens) {
        st = rv_fail(RV_ERR_INVALID, "embed: %s", e ? "no tokens" : "the encoder is closed");
        goto end;
    }
    if ((st = flat_opts_parse(opts_json, keys, &o)) != RV_OK ||
        (st = parse_embed(e, o, &eo)) != RV_OK ||
        (st = flat_tokens_layout(rv_arrays_meta(tokens), &L, &p)) != RV_OK)
        goto end;
    json_t *tmeta = json_loads(rv_arrays_meta(tokens), 0, NULL);
    if (json_is_object(json_object_get(tmeta, "probe")))
        j.probe = json_incref(json_object_get(tmeta, "probe"));
    json_decref(tmeta);
    j.video = flat_arrays_get(tokens, "video_patches", "f32", &nv);
    j.audio = flat_arrays_get(tokens, "audio_patches", "f32", &na);
    if (!j.video || !j.audio || nv != L.nvideo * L.video_dim || na != L.naudio * L.audio_dim) {
        st = rv_fail(RV_ERR_INVALID, "embed: the tokens want video_patches f32 (%lld, %lld) and "
                     "audio_patches f32 (%lld, %lld) as their layout says", (long long)L.nvideo,
                     (long long)L.video_dim, (long long)L.naudio, (long long)L.audio_dim);
        goto end;
    }
    /* The model must see the tokens it was made for: the tokenizer, and the
     * windows its attention span makes blocks of. */
    rv_tok_opts want;
    rv_ingest_opts wio = L.ingest;
    const rv_tok_opts *have = &L.opts;
    if (rv_vit_input_opts(&e->m->cfg, L.ingest.size, !have->video, !have->audio, &e->span, &want,
                          &wio) != RV_OK ||
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
    j.L = &L;
    st = run(e, &j, &eo, &p, L.ingest.start_s, out);
end:
    json_decref(j.probe);
    json_decref(o);
    return st;
}
