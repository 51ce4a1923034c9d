/* embed_labels.c: an embed output's classifier scores turned into ranked labels
 * (rv_embed_labels_read, rv_embed.h), what `ringvit labels` prints and Python's
 * ringvit.labels returns. The file is read as hostile input: its format, the
 * labels metadata (a JSON list of strings), the logits' dtype and shape and the
 * times beside them must agree, each failure naming the file and the tensor or
 * key.
 *
 *   per block (block_logits (G, C) F32, block_start / block_end (G) F64): row g
 *     spans [block_start[g], block_end[g]);
 *   recording (logits (C) F32): one row over [segment_start[0], segment_end[G-1]],
 *     the range the pooling covered.
 * Probabilities: softmax over the C logits of a row, or each logit's sigmoid
 * when the classes are independent (multi_label), in double; the top K by
 * decreasing probability, ties by the lower id. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rv_embed.h"

#define DEFAULT_TOP 5

void rv_labels_opts_default(rv_labels_opts *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->top = DEFAULT_TOP;
    o->multi_label = -1;
    o->level = RV_LABELS_AUTO;
}

void rv_embed_labels_free(rv_embed_labels **lp)
{
    rv_embed_labels *l = lp ? *lp : NULL;
    if (!l)
        return;
    for (int i = 0; l->labels && i < l->classes; i++)
        free(l->labels[i]);
    free(l->labels);
    free(l->start);
    free(l->end);
    free(l->index);
    free(l->prob);
    free(l);
    *lp = NULL;
}

/* Element i of an F32 / F64 tensor (its data may be unaligned). */
static double f32_at(const rv_st_tensor *t, int64_t i)
{
    float v;
    memcpy(&v, (const char *)t->data + 4 * i, 4);
    return v;
}

static double f64_at(const rv_st_tensor *t, int64_t i)
{
    double v;
    memcpy(&v, (const char *)t->data + 8 * i, 8);
    return v;
}

/* The labels metadata: a JSON list of strings, copied into l. */
static rv_status read_labels(const rv_safetensors *st, rv_embed_labels *l)
{
    const char *lb = rv_st_label(st), *text = rv_st_meta(st, "labels");
    rv_status s = RV_OK;
    json_error_t err;
    if (!text)
        return rv_fail(RV_ERR_FORMAT, "'%s' has logits but no 'labels' metadata", lb);
    json_t *a = json_loads(text, JSON_REJECT_DUPLICATES, &err);
    if (!json_is_array(a) || json_array_size(a) == 0) {
        s = rv_fail(RV_ERR_FORMAT, "'%s': metadata 'labels' is not a non-empty JSON list of "
                    "strings%s%.200s", lb, a ? "" : ": ", a ? "" : err.text);
        goto end;
    }
    const size_t n = json_array_size(a);
    if (n > RV_VIT_MAX_CLASSES) {
        s = rv_fail(RV_ERR_FORMAT, "'%s': metadata 'labels' names %zu labels (at most %d)", lb,
                    n, RV_VIT_MAX_CLASSES);
        goto end;
    }
    if (!(l->labels = calloc(n, sizeof *l->labels))) {
        s = rv_fail(RV_ERR_NOMEM, "'%s': out of memory for %zu labels", lb, n);
        goto end;
    }
    l->classes = (int)n;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(a, i);
        if (!json_is_string(e)) {
            s = rv_fail(RV_ERR_FORMAT, "'%s': metadata 'labels': entry %zu is not a string", lb,
                        i);
            goto end;
        }
        if (!(l->labels[i] = strdup(json_string_value(e)))) {
            s = rv_fail(RV_ERR_NOMEM, "'%s': out of memory for the labels", lb);
            goto end;
        }
    }
end:
    json_decref(a);
    return s;
}

/* Tensor name of dtype and rank ndim whose last extent is last (-1: any),
 * finite throughout; its first extent in *rows (1 for rank 1). */
static rv_status read_scores(const rv_safetensors *st, const char *name, rv_dtype dtype,
                             int ndim, int64_t last, const rv_st_tensor **out, int64_t *rows)
{
    const char *lb = rv_st_label(st);
    const rv_st_tensor *t = rv_st_find(st, name);
    if (!t)
        return rv_fail(RV_ERR_FORMAT, "'%s' has no tensor '%s'", lb, name);
    if (t->dtype != dtype || t->ndim != ndim || (last >= 0 && t->shape[ndim - 1] != last))
        return rv_fail(RV_ERR_FORMAT, "'%s': tensor '%s' is %s of %d dimensions (last %lld); "
                       "expected %s of %d dimensions%s", lb, name, rv_dtype_name(t->dtype),
                       t->ndim, t->ndim > 0 ? (long long)t->shape[t->ndim - 1] : 0LL,
                       rv_dtype_name(dtype), ndim,
                       last >= 0 ? " with one entry per label" : "");
    for (int64_t i = 0; i < t->numel; i++)
        if (!isfinite(dtype == RV_F32 ? f32_at(t, i) : f64_at(t, i)))
            return rv_fail(RV_ERR_FORMAT, "'%s': tensor '%s' holds a NaN or infinity at "
                           "element %lld", lb, name, (long long)i);
    *out = t;
    *rows = ndim == 2 ? t->shape[0] : 1;
    return RV_OK;
}

typedef struct ranked {
    double p;
    int32_t id;
} ranked;

static int by_prob(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->p != y->p)
        return x->p > y->p ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

rv_status embed_labels_rank(const float *logits, int C, int multi_label, int k, int32_t *ids,
                            double *p)
{
    ranked *r = malloc(sizeof *r * (size_t)(C > 0 ? C : 1));
    if (!r)
        return rv_fail(RV_ERR_NOMEM, "out of memory for %d labels", C);
    if (multi_label) {
        for (int c = 0; c < C; c++) {
            const double x = logits[c];
            r[c] = (ranked){.p = x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x)), .id = c};
        }
    } else {
        double zmax = -INFINITY, sum = 0;
        for (int c = 0; c < C; c++)
            zmax = fmax(zmax, logits[c]);
        for (int c = 0; c < C; c++) {
            r[c] = (ranked){.p = exp((double)logits[c] - zmax), .id = c};
            sum += r[c].p;
        }
        for (int c = 0; c < C; c++)
            r[c].p /= sum;
    }
    qsort(r, (size_t)C, sizeof *r, by_prob);
    for (int j = 0; j < k && j < C; j++) {
        ids[j] = r[j].id;
        p[j] = r[j].p;
    }
    free(r);
    return RV_OK;
}

/* Row r of logits z (C) -> l's top K of that row. */
static rv_status rank_row(rv_embed_labels *l, int64_t r, const rv_st_tensor *z, float *row,
                          int32_t *ids, double *p)
{
    for (int c = 0; c < l->classes; c++)
        row[c] = (float)f32_at(z, r * l->classes + c);
    rv_status st = embed_labels_rank(row, l->classes, l->multi_label, l->top, ids, p);
    for (int k = 0; st == RV_OK && k < l->top; k++) {
        l->index[r * l->top + k] = ids[k];
        l->prob[r * l->top + k] = (float)p[k];
    }
    return st;
}

/* The rows' time ranges: the blocks', or the recording's pooled range. */
static rv_status read_times(const rv_safetensors *st, rv_embed_labels *l)
{
    const char *lb = rv_st_label(st);
    const int block = l->level == RV_LABELS_BLOCK;
    const char *sn = block ? "block_start" : "segment_start";
    const char *en = block ? "block_end" : "segment_end";
    const rv_st_tensor *ts, *te;
    int64_t ns, ne;
    rv_status s;
    if ((s = read_scores(st, sn, RV_F64, 1, -1, &ts, &ns)) != RV_OK ||
        (s = read_scores(st, en, RV_F64, 1, -1, &te, &ne)) != RV_OK)
        return s;
    ns = ts->shape[0], ne = te->shape[0];
    if (ns != ne || (block && ns != l->rows) || ns < 1)
        return rv_fail(RV_ERR_FORMAT, "'%s': tensors '%s' (%lld) and '%s' (%lld) disagree%s",
                       lb, sn, (long long)ns, en, (long long)ne,
                       block ? " with the rows of 'block_logits'" : "");
    for (int64_t r = 0; r < l->rows; r++) {
        l->start[r] = f64_at(ts, block ? r : 0);
        l->end[r] = f64_at(te, block ? r : ne - 1);
    }
    return RV_OK;
}

rv_status rv_embed_labels_read(const char *path, const rv_labels_opts *opts,
                               rv_embed_labels **out)
{
    rv_labels_opts o;
    rv_safetensors *st = NULL;
    rv_embed_labels *l = NULL;
    float *row = NULL;
    int32_t *ids = NULL;
    double *p = NULL;
    rv_status s = RV_OK;
    if (!path || !out)
        return rv_fail(RV_ERR_INVALID, "embed labels: path and out are required");
    *out = NULL;
    if (opts)
        o = *opts;
    else
        rv_labels_opts_default(&o);
    if (o.top < 0 || o.multi_label < -1 || o.multi_label > 1 || o.level < RV_LABELS_AUTO ||
        o.level > RV_LABELS_RECORDING)
        return rv_fail(RV_ERR_INVALID, "embed labels: top %d, multi_label %d, level %d out of "
                       "range", o.top, o.multi_label, (int)o.level);
    if ((s = rv_st_open(path, &st)) != RV_OK)
        goto end;
    const char *fmt = rv_st_meta(st, "format");
    if (!fmt || strcmp(fmt, RV_EMBED_FORMAT) != 0) {
        s = rv_fail(RV_ERR_FORMAT, "'%s' is not a ringvit embed output (metadata format '%.64s', "
                    "not '%s')", path, fmt ? fmt : "(none)", RV_EMBED_FORMAT);
        goto end;
    }
    const int has_block = rv_st_find(st, "block_logits") != NULL;
    if (!has_block && !rv_st_find(st, "logits")) {
        s = rv_fail(RV_ERR_FORMAT, "'%s' holds no logits: its model has no classifier head "
                    "(a task checkpoint such as ViTForImageClassification has one)", path);
        goto end;
    }
    if (o.level == RV_LABELS_BLOCK && !has_block) {
        s = rv_fail(RV_ERR_INVALID, "'%s' has no block_logits (per-block outputs come with "
                    "--attention frame or block=S)", path);
        goto end;
    }
    if (!(l = calloc(1, sizeof *l))) {
        s = rv_fail(RV_ERR_NOMEM, "out of memory");
        goto end;
    }
    l->level = o.level == RV_LABELS_AUTO ? (has_block ? RV_LABELS_BLOCK : RV_LABELS_RECORDING)
                                         : o.level;
    if ((s = read_labels(st, l)) != RV_OK)
        goto end;
    const int block = l->level == RV_LABELS_BLOCK;
    const rv_st_tensor *z;
    if ((s = read_scores(st, block ? "block_logits" : "logits", RV_F32, block ? 2 : 1,
                         l->classes, &z, &l->rows)) != RV_OK) {
        if (rv_st_find(st, block ? "block_logits" : "logits")) {
            char msg[512]; /* the message is rewritten: copy it out first */
            snprintf(msg, sizeof msg, "%s", rv_last_error());
            rv_fail(s, "%s (the 'labels' metadata names %d labels)", msg, l->classes);
        }
        goto end;
    }
    const char *ml = rv_st_meta(st, "multi_label");
    l->multi_label = o.multi_label >= 0 ? o.multi_label : (ml && strcmp(ml, "true") == 0);
    l->top = o.top == 0 ? DEFAULT_TOP : o.top;
    if (l->top > l->classes)
        l->top = l->classes;
    const size_t cells = (size_t)l->rows * (size_t)l->top;
    l->start = malloc(sizeof(double) * (size_t)l->rows + 1);
    l->end = malloc(sizeof(double) * (size_t)l->rows + 1);
    l->index = malloc(sizeof(int32_t) * cells + 1);
    l->prob = malloc(sizeof(float) * cells + 1);
    row = malloc(sizeof *row * (size_t)l->classes);
    ids = malloc(sizeof *ids * (size_t)l->classes);
    p = malloc(sizeof *p * (size_t)l->classes);
    if (!l->start || !l->end || !l->index || !l->prob || !row || !ids || !p) {
        s = rv_fail(RV_ERR_NOMEM, "'%s': out of memory for %lld rows of %d labels", path,
                    (long long)l->rows, l->classes);
        goto end;
    }
    if ((s = read_times(st, l)) != RV_OK)
        goto end;
    for (int64_t r = 0; r < l->rows && s == RV_OK; r++)
        s = rank_row(l, r, z, row, ids, p);
    if (s != RV_OK)
        goto end;
    *out = l;
    l = NULL;
end:
    free(row);
    free(ids);
    free(p);
    rv_embed_labels_free(&l);
    rv_st_free(&st);
    return s;
}
