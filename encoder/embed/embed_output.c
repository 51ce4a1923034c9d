/* embed_output.c: the output of one input (rv_embed.h lists its tensors and
 * metadata): built on group rank 0 by rv_embed_collect from the pooled outputs
 * and, with tokens, the gathered per-token outputs; the same list is written to
 * a safetensors file (rv_embed_output_writer) and handed to in-process callers
 * (the flat layer, through embed_output.h), so every client gets the same bytes.
 * Also rv_embed_output_complete, the --resume check. */
#define _GNU_SOURCE /* vasprintf */
#include <jansson.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "embed_internal.h"
#include "embed_output.h"
#include "rv_clock.h"
#include "rv_flat.h"
#include "rv_version.h"
#include "st_convert.h"

#define OUT_MAX_TENSORS 32
#define OUT_MAX_META 32

struct rv_embed_output {
    embed_out_tensor t[OUT_MAX_TENSORS];
    int nt;
    embed_out_meta m[OUT_MAX_META];
    int nm;
    void *owned[OUT_MAX_TENSORS]; /* buffers freed with the output (NULL: none) */
    collect_column tokens;       /* the gathered tokens (S, D) f32 */
    collect_column converted;    /* the tokens as written (dtype, normalize) */
    rv_vit_pooled pooled;        /* times on the container's clock */
    rv_vit_blocks blocks;        /* each block's, under block and frame spans */
    rv_st_writer *w;             /* made on first use */
};

/* ---- dtype and normalize ----------------------------------------------------------- */

/* ---- building the list --------------------------------------------------------------- */

static rv_status add(rv_embed_output *o, const char *name, rv_dtype dtype, int ndim,
                     const int64_t *shape, const void *data, void *owned)
{
    if (o->nt == OUT_MAX_TENSORS) {
        free(owned);
        return rv_fail(RV_ERR_INTERNAL, "embed output: too many tensors");
    }
    embed_out_tensor *t = &o->t[o->nt];
    *t = (embed_out_tensor){.name = name, .dtype = dtype, .ndim = ndim, .data = data};
    for (int d = 0; d < ndim; d++)
        t->shape[d] = shape[d];
    o->owned[o->nt++] = owned;
    return RV_OK;
}

/* x (rows, cols) F32 as opts say: x itself when nothing changes, else a converted
 * copy the output owns. norm: the rows are normalised with opts.normalize. */
static rv_status add_embedding(rv_embed_output *o, const rv_embed_opts *opts, const char *name,
                               int ndim, const int64_t *shape, const float *x, int norm)
{
    norm = norm && opts->normalize;
    if (opts->dtype == RV_F32 && !norm)
        return add(o, name, RV_F32, ndim, shape, x, NULL);
    const int64_t cols = shape[ndim - 1], rows = ndim == 2 ? shape[0] : 1;
    void *dst = malloc((size_t)(rows * cols) * rv_dtype_size(opts->dtype) + 1);
    if (!dst)
        return rv_fail(RV_ERR_NOMEM, "out of memory converting %s", name);
    st_rows_out(x, rows, cols, norm, opts->dtype, dst);
    return add(o, name, opts->dtype, ndim, shape, dst, dst);
}

/* The tokens (S, D), converted a block of rows at a time into a second column
 * (they may not fit in memory twice). */
static rv_status add_tokens(rv_embed_output *o, const rv_embed_opts *opts, rv_collect_keep keep,
                            const char *near, const int64_t *shape)
{
    rv_status st = collect_column_seal(&o->tokens);
    if (st != RV_OK)
        return st;
    const void *f32 = collect_column_data(&o->tokens);
    if (opts->dtype == RV_F32 && !opts->normalize)
        return add(o, "tokens", RV_F32, 2, shape, f32, collect_column_take(&o->tokens));
    const int64_t S = shape[0], D = shape[1], block = 4096;
    const size_t esz = rv_dtype_size(opts->dtype);
    void *buf = malloc((size_t)(block * D) * esz + 1);
    st = buf ? collect_column_open(&o->converted, keep, near)
             : rv_fail(RV_ERR_NOMEM, "out of memory");
    for (int64_t r = 0; r < S && st == RV_OK; r += block) {
        const int64_t n = S - r < block ? S - r : block;
        st_rows_out((const float *)f32 + r * D, n, D, opts->normalize, opts->dtype, buf);
        st = collect_column_put(&o->converted, buf, (size_t)(n * D) * esz);
    }
    free(buf);
    if (st == RV_OK)
        st = collect_column_seal(&o->converted);
    if (st == RV_OK)
        st = add(o, "tokens", opts->dtype, 2, shape, collect_column_data(&o->converted),
                 collect_column_take(&o->converted));
    collect_column_close(&o->tokens); /* the f32 rows are no longer needed */
    return st;
}

static rv_status meta(rv_embed_output *o, const char *key, int json, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static rv_status meta(rv_embed_output *o, const char *key, int json, const char *fmt, ...)
{
    if (o->nm == OUT_MAX_META)
        return rv_fail(RV_ERR_INTERNAL, "embed output: too many metadata entries");
    va_list ap;
    va_start(ap, fmt);
    char *v = NULL;
    int n = vasprintf(&v, fmt, ap);
    va_end(ap);
    if (n < 0)
        return rv_fail(RV_ERR_NOMEM, "out of memory");
    o->m[o->nm++] = (embed_out_meta){.key = key, .value = v, .json = json};
    return RV_OK;
}

/* The metadata entries, in the order the command always wrote them. */
static rv_status add_meta(rv_embed_output *o, const rv_embed_job *j, const rv_embed_input *in,
                          const rv_tok_layout *L)
{
    const rv_embed_opts *op = &j->o;
    const rv_vit_config *cfg = &j->m.model->cfg;
    char attention[64];
    rv_span_format(&op->span, attention, sizeof attention);
    /* Metadata is UTF-8: a file name that is not keeps its other bytes as \xNN. */
    char *source = rv_utf8_text(in->path ? in->path : "");
    char *probe = NULL;
    if (in->patches && in->patches->probe_json)
        probe = strdup(in->patches->probe_json);
    else if (in->probe && rv_probe_json_text(in->probe, 0, &probe) != RV_OK)
        probe = NULL;
    const double time_origin = in->rec.time_origin;
    rv_status st = RV_OK;
    if (!source)
        st = rv_fail(RV_ERR_NOMEM, "out of memory");
    if (st != RV_OK ||
        (st = meta(o, "format", 0, "%s", RV_EMBED_FORMAT)) != RV_OK ||
         (st = meta(o, "source", 0, "%s", source)) != RV_OK ||
         (st = meta(o, "probe", 1, "%s", probe ? probe : "null")) != RV_OK ||
         (st = meta(o, "model", 0, "%s", j->m.name)) != RV_OK ||
         (st = meta(o, "model_hash", 0, "%s", j->hash)) != RV_OK ||
         (st = meta(o, "config", 1, "%s", j->config_json)) != RV_OK ||
         (st = meta(o, "family", 0, "%s", rv_vit_family_name(cfg->family))) != RV_OK ||
         (st = meta(o, "random_weights", 1, "%s", j->m.random_weights ? "true" : "false")) != RV_OK ||
         (st = meta(o, "cp", 1, "%d", j->size)) != RV_OK ||
         (st = meta(o, "strategy", 0, "%s", rv_cp_strategy_name(op->strategy))) != RV_OK ||
         (st = meta(o, "attention", 0, "%s", attention)) != RV_OK ||
         (st = meta(o, "hop_s", 1, "%.17g", op->hop_s > 0 ? op->hop_s : op->segment_s)) != RV_OK ||
         (st = meta(o, "causal", 1, "%s", op->causal ? "true" : "false")) != RV_OK ||
         (st = meta(o, "fps", 0, "%d/%d", L->ingest.fps_num, L->ingest.fps_den)) != RV_OK ||
         (st = meta(o, "size", 1, "%d", L->ingest.size)) != RV_OK ||
         (st = meta(o, "segment_s", 1, "%.17g", op->segment_s)) != RV_OK ||
         (st = meta(o, "recording_s", 1, "%.17g", in->rec.end_s - in->rec.rec_start)) != RV_OK ||
         (st = meta(o, "time_origin", 1, "%.17g", time_origin)) != RV_OK ||
         (st = meta(o, "start_s", 1, "%.17g", rv_tok_start_time(L))) != RV_OK ||
         (st = meta(o, "tokens", 1, "%lld", (long long)L->seq)) != RV_OK ||
         (st = meta(o, "video_tokens", 1, "%lld", (long long)o->pooled.modality_tokens[0])) != RV_OK ||
         (st = meta(o, "audio_tokens", 1, "%lld", (long long)o->pooled.modality_tokens[1])) != RV_OK ||
         (st = meta(o, "dtype", 0, "%s", embed_dtype_name(op->dtype))) != RV_OK ||
         (st = meta(o, "normalize", 0, "%s", op->normalize ? "l2" : "none")) != RV_OK ||
         (st = meta(o, "ringvit_version", 0, "%s", RINGVIT_VERSION)) != RV_OK)
        goto end;
end:
    free(source);
    free(probe);
    return st;
}

/* The classifier's scores (models with a head): logits (C) F32 as computed,
 * never converted by dtype nor normalised (scores, not embeddings). */
static rv_status add_logits(rv_embed_output *o, const rv_vit_pooled *p)
{
    if (p->classes <= 0)
        return RV_OK;
    const int64_t c1[1] = {p->classes};
    return add(o, "logits", RV_F32, 1, c1, p->logits, NULL);
}

/* The head's metadata (models with one): labels, the id2label list in order
 * (JSON), and multi_label (true: sigmoid scores, false: softmax). */
static rv_status add_head_meta(rv_embed_output *o, const rv_vit_model *m)
{
    if (m->cfg.head == RV_HEAD_NONE)
        return RV_OK;
    json_t *a = json_array();
    for (int i = 0; a && i < m->cfg.classes; i++)
        if (json_array_append_new(a, json_string(m->labels[i])) != 0) {
            json_decref(a);
            a = NULL;
        }
    char *labels = a ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
    rv_status st = labels ? meta(o, "labels", 1, "%s", labels)
                          : rv_fail(RV_ERR_NOMEM, "out of memory for the labels");
    free(labels);
    if (st == RV_OK)
        st = meta(o, "multi_label", 1, "%s", m->cfg.multi_label ? "true" : "false");
    return st;
}

/* The per-token descriptions of the whole sequence (rank 0): token_time (S, 2)
 * on the container's clock (rv_tok_info), token_pos (S, 3), token_modality (S). */
static rv_status token_info(const rv_tok_layout *L, rv_comm_watch *watch, double **tt,
                            int64_t **tp, uint8_t **tm)
{
    const size_t S = (size_t)L->seq;
    *tt = malloc(sizeof(double) * 2 * (S > 0 ? S : 1));
    *tp = malloc(sizeof(int64_t) * 3 * (S > 0 ? S : 1));
    *tm = malloc(S > 0 ? S : 1);
    if (!*tt || !*tp || !*tm)
        return rv_fail(RV_ERR_NOMEM, "rank 0: out of memory for %zu tokens' metadata", S);
    for (int64_t i = 0; i < L->seq; i++) {
        rv_token tk;
        if ((i & 0xffff) == 0)
            rv_comm_watch_beat(watch); /* the others wait in the next vote */
        rv_status st = rv_tok_info(L, i, &tk);
        if (st != RV_OK)
            return st;
        (*tm)[i] = (uint8_t)tk.modality;
        memcpy(*tp + 3 * i, tk.pos, sizeof tk.pos);
        memcpy(*tt + 2 * i, tk.time, sizeof tk.time);
    }
    return RV_OK;
}

/* Each block's bounds on the container's clock: from its window's start to the
 * next one's, the last to where the recording's tokens end (end_s, sequence time). */
static rv_status block_times(const rv_tok_layout *L, double end_s, int64_t G, double **start,
                             double **end)
{
    *start = malloc(sizeof(double) * (size_t)G);
    *end = malloc(sizeof(double) * (size_t)G);
    if (!*start || !*end)
        return rv_fail(RV_ERR_NOMEM, "out of memory for %lld blocks", (long long)G);
    for (int64_t g = 0; g < G; g++) {
        const double next = g + 1 < G ? rv_tok_window_time(L, g + 1) : end_s;
        (*start)[g] = L->t0 + rv_tok_window_time(L, g);
        (*end)[g] = L->t0 + next;
    }
    return RV_OK;
}

/* The output's list from the pooled outputs and (tokens) the gathered rows. */
static rv_status build(rv_embed_output *o, const rv_embed_job *j, const rv_embed_input *in,
                       rv_collect_keep keep, const char *near)
{
    const rv_embed_opts *op = &j->o;
    const rv_tok_layout *L = &in->rec.layout;
    const rv_vit_pooled *p = &o->pooled;
    const int64_t D = p->dim, G = p->segments, S = L->seq;
    const int64_t d1[1] = {D}, g1[1] = {G}, gd[2] = {G, D}, pj[1] = {p->proj_dim},
                  s1[1] = {S}, s2[2] = {S, 2}, s3[2] = {S, 3}, sd[2] = {S, D};
    const rv_vit_blocks *b = &o->blocks;
    const int64_t b1[1] = {b->blocks}, bd[2] = {b->blocks, D}, bp[2] = {b->blocks, b->proj_dim},
                  bc[2] = {b->blocks, b->classes};
    double *tt = NULL, *bs = NULL, *be = NULL;
    int64_t *tp = NULL;
    uint8_t *tm = NULL;
    rv_status st;
    if (op->tokens && (st = token_info(L, j->watch, &tt, &tp, &tm)) != RV_OK)
        goto end;
    /* 8-byte elements first, then 4 (or 2), then 1: every tensor starts aligned. */
    if ((st = add(o, "segment_start", RV_F64, 1, g1, p->segment_start, NULL)) != RV_OK ||
        (st = add(o, "segment_end", RV_F64, 1, g1, p->segment_end, NULL)) != RV_OK ||
        (st = add(o, "segment_tokens", RV_I64, 1, g1, p->segment_tokens, NULL)) != RV_OK)
        goto end;
    if (b->blocks > 0 && ((st = block_times(L, in->rec.end_s, b->blocks, &bs, &be)) != RV_OK ||
                          (st = add(o, "block_start", RV_F64, 1, b1, bs, bs)) != RV_OK ||
                          (bs = NULL, (st = add(o, "block_end", RV_F64, 1, b1, be, be))) != RV_OK))
        goto end;
    be = NULL;
    if (op->tokens &&
        ((st = add(o, "token_time", RV_F64, 2, s2, tt, tt)) != RV_OK ||
         (tt = NULL, (st = add(o, "token_pos", RV_I64, 2, s3, tp, tp))) != RV_OK))
        goto end;
    tp = NULL;
    if ((st = add_embedding(o, op, "global", 1, d1, p->global, 1)) != RV_OK ||
        (st = add_embedding(o, op, "segments", 2, gd, p->segment, 1)) != RV_OK ||
        (st = add_embedding(o, op, "video_mean", 1, d1, p->modality_mean, 0)) != RV_OK ||
        (st = add_embedding(o, op, "audio_mean", 1, d1, p->modality_mean + D, 0)) != RV_OK)
        goto end;
    if (j->m.model->cfg.cls && (st = add_embedding(o, op, "cls", 1, d1, p->cls, 0)) != RV_OK)
        goto end;
    if (j->m.model->cfg.cls > 1 && (st = add_embedding(o, op, "dist", 1, d1, p->dist, 0)) != RV_OK)
        goto end;
    if (p->pooled && (st = add_embedding(o, op, "pooled", 1, d1, p->pooled, 0)) != RV_OK)
        goto end;
    if (p->proj_dim > 0 &&
        (st = add_embedding(o, op, "projected", 1, pj, p->projected, 0)) != RV_OK)
        goto end;
    if ((st = add_logits(o, p)) != RV_OK)
        goto end;
    /* Each block's pooled output and projection, rows normalised with --normalize;
     * its logits as the recording's (F32). */
    if (b->blocks > 0 &&
        ((st = add_embedding(o, op, "block_pooled", 2, bd, b->pooled, 1)) != RV_OK ||
         (b->proj_dim > 0 &&
          (st = add_embedding(o, op, "block_projected", 2, bp, b->projected, 1)) != RV_OK) ||
         (b->classes > 0 &&
          (st = add(o, "block_logits", RV_F32, 2, bc, b->logits, NULL)) != RV_OK)))
        goto end;
    if (op->tokens &&
        ((st = add_tokens(o, op, keep, near, sd)) != RV_OK ||
         (st = add(o, "token_modality", RV_U8, 1, s1, tm, tm)) != RV_OK))
        goto end;
    tm = NULL;
    if ((st = add_meta(o, j, in, L)) != RV_OK || (st = add_head_meta(o, j->m.model)) != RV_OK)
        goto end;
end:
    free(tt);
    free(tp);
    free(tm);
    free(bs);
    free(be);
    return st;
}

/* ---- rv_embed_collect ---------------------------------------------------------------- */

rv_vote_outcome rv_embed_collect(rv_embed_job *j, rv_embed_input *in, const char *scratch_near,
                                 rv_embed_output **out, rv_embed_stats *stats)
{
    const int D = j->m.model->cfg.dim;
    /* Beside the output (standard output's in $TMPDIR), or in memory. */
    const rv_collect_keep keep = scratch_near ? RV_KEEP_SCRATCH : RV_KEEP_MEMORY;
    const char *near = scratch_near;
    rv_embed_output *o = NULL;
    rv_vote_outcome v = RV_VOTE_OK;
    rv_status st = RV_OK, wst = RV_OK;
    const double t = rv_clock_s();
    *out = NULL;
    if (!in->ran) {
        rv_fail(RV_ERR_INVALID, "embed: collect before a successful run");
        return RV_VOTE_FAILED;
    }
    if (j->rank == 0 && j->h.stage)
        j->h.stage(j->h.user, in->index, in->path ? in->path : "tokens", "write",
                   in->rec.end_s, in->rec.layout.seq, 0);
    rv_clear_error();
    if (j->rank == 0) {
        if (!(o = calloc(1, sizeof *o)))
            st = rv_fail(RV_ERR_NOMEM, "out of memory");
        else {
            o->tokens.fd = o->converted.fd = -1;
            if (j->o.tokens)
                st = collect_column_open(&o->tokens, keep, near);
        }
    }
    if (j->o.tokens) {
        if ((v = embed_agree(j, st, NULL, 0)) != RV_VOTE_OK)
            goto end;
        /* The messages between ranks broke: nothing further can be trusted. */
        if ((st = embed_gather_tokens(j, &in->s.t.plan, in->s.y, D, o ? &o->tokens : NULL,
                                      &wst)) != RV_OK) {
            v = RV_VOTE_BROKEN;
            goto end;
        }
    }
    if (j->rank == 0) {
        if (st == RV_OK && wst == RV_OK) {
            o->pooled = in->pooled;
            memset(&in->pooled, 0, sizeof in->pooled);
            o->blocks = in->blocks;
            memset(&in->blocks, 0, sizeof in->blocks);
            wst = build(o, j, in, keep, near);
        }
        if (st == RV_OK && wst != RV_OK) {
            rv_fail(wst, "%s", rv_last_error());
            v = RV_VOTE_FAILED;
        }
        rv_comm_watch_beat(j->watch);
    }
    if (v == RV_VOTE_OK && st == RV_OK && j->rank == 0) {
        *out = o;
        o = NULL;
    }
end:
    rv_embed_output_free(&o);
    if (stats) {
        stats->collect_s = rv_clock_s() - t;
        stats->seconds = rv_clock_s() - (in->t_start > 0 ? in->t_start : t);
    }
    return v;
}

/* ---- the output's uses ---------------------------------------------------------------- */

int embed_output_count(const rv_embed_output *o)
{
    return o->nt;
}

const embed_out_tensor *embed_output_tensor(const rv_embed_output *o, int i)
{
    return &o->t[i];
}

void *embed_output_take(rv_embed_output *o, int i)
{
    void *p = o->owned[i];
    o->owned[i] = NULL;
    return p;
}

int embed_output_meta_count(const rv_embed_output *o)
{
    return o->nm;
}

const embed_out_meta *embed_output_meta(const rv_embed_output *o, int i)
{
    return &o->m[i];
}

static rv_status make_writer(rv_embed_output *o)
{
    if (o->w)
        return RV_OK;
    rv_status st = rv_st_writer_new(&o->w);
    for (int i = 0; i < o->nt && st == RV_OK; i++)
        st = rv_st_writer_add(o->w, o->t[i].name, o->t[i].dtype, o->t[i].ndim, o->t[i].shape,
                              o->t[i].data);
    for (int i = 0; i < o->nm && st == RV_OK; i++)
        st = rv_st_writer_meta(o->w, o->m[i].key, o->m[i].value);
    if (st != RV_OK)
        rv_st_writer_free(&o->w);
    return st;
}

rv_st_writer *rv_embed_output_writer(rv_embed_output *o)
{
    return o && make_writer(o) == RV_OK ? o->w : NULL;
}

rv_status rv_embed_output_write(rv_embed_output *o, const char *path)
{
    if (!o || !path)
        return rv_fail(RV_ERR_INVALID, "embed: %s", o ? "no path" : "no output");
    rv_status st = make_writer(o);
    return st != RV_OK ? st : rv_st_writer_write(o->w, path);
}

void rv_embed_output_free(rv_embed_output **op)
{
    rv_embed_output *o = op ? *op : NULL;
    if (!o)
        return;
    rv_st_writer_free(&o->w);
    for (int i = 0; i < o->nt; i++)
        free(o->owned[i]);
    for (int i = 0; i < o->nm; i++)
        free(o->m[i].value);
    collect_column_close(&o->tokens);
    collect_column_close(&o->converted);
    rv_vit_pooled_free(&o->pooled);
    rv_vit_blocks_free(&o->blocks);
    free(o);
    *op = NULL;
}

/* ---- --resume ----------------------------------------------------------------------------- */

int rv_embed_output_complete(const char *path, const rv_vit_model *m, const char *model_hash,
                             const rv_embed_opts *o)
{
    static const char *const always[] = {"global", "segments", "segment_start", "segment_end",
                                         "segment_tokens", "video_mean", "audio_mean", "pooled"};
    static const char *const per_token[] = {"tokens", "token_time", "token_modality",
                                            "token_pos"};
    char own_hash[17];
    if (!path || !m || !o || access(path, F_OK) != 0)
        return 0;
    if (!model_hash) {
        rv_vit_hash(m, own_hash);
        model_hash = own_hash;
    }
    rv_safetensors *st = NULL;
    int ok = 0;
    if (rv_st_open(path, &st) != RV_OK)
        goto end;
    const char *fmt = rv_st_meta(st, "format");
    if (!fmt || strcmp(fmt, RV_EMBED_FORMAT) != 0)
        goto end;
    /* An output of another model is not this run's: it is redone. */
    const char *file_hash = rv_st_meta(st, "model_hash");
    if (!file_hash || strcmp(file_hash, model_hash) != 0)
        goto end;
    for (size_t i = 0; i < sizeof always / sizeof always[0]; i++)
        if (!rv_st_find(st, always[i]))
            goto end;
    for (size_t i = 0; o->tokens && i < sizeof per_token / sizeof per_token[0]; i++)
        if (!rv_st_find(st, per_token[i]))
            goto end;
    if (m->cfg.cls && !rv_st_find(st, "cls"))
        goto end;
    if (m->cfg.head != RV_HEAD_NONE && !rv_st_find(st, "logits"))
        goto end;
    const int blocks = o->span.kind == RV_SPAN_BLOCK || o->span.kind == RV_SPAN_FRAME;
    if (blocks && (!rv_st_find(st, "block_pooled") ||
                   (m->cfg.head != RV_HEAD_NONE && !rv_st_find(st, "block_logits"))))
        goto end;
    /* Another dtype or normalize is another output (written before these
     * existed: f32, none). */
    const char *dtype = rv_st_meta(st, "dtype"), *norm = rv_st_meta(st, "normalize");
    if (!embed_dtype_name(o->dtype) ||
        strcmp(dtype ? dtype : "f32", embed_dtype_name(o->dtype)) != 0 ||
        strcmp(norm ? norm : "none", o->normalize ? "l2" : "none") != 0)
        goto end;
    const rv_st_tensor *g = rv_st_find(st, "global");
    ok = g->ndim == 1 && g->shape[0] == m->cfg.dim && g->dtype == o->dtype;
end:
    rv_st_free(&st);
    return ok;
}
