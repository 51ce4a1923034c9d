/* export_source.c: one `ringvit embed` output as the export reads it. The file
 * is hostile input twice over: rv_st_open checks it is a well-formed
 * safetensors file, and here its tensors are checked against its own metadata
 * (format, model, config dim, dtype) and against each other (the rows of the
 * embeddings, their start and end times, the logits and the label names), so
 * a row is never written whose metadata line would say something else. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "export_internal.h"
#include "rv_embed.h"

#define MAX_DIM (1 << 20)
#define MAX_CLASSES (1 << 20)

static void labels_free(export_source *s)
{
    for (int i = 0; s->labels && i < s->classes; i++)
        free(s->labels[i]);
    free(s->labels);
    s->labels = NULL;
}

void export_source_close(export_source *s)
{
    if (!s)
        return;
    labels_free(s);
    free(s->input);
    rv_st_free(&s->st);
    memset(s, 0, sizeof *s);
}

/* The safetensors header's bytes (8 + N) hashed, the file's size, and its
 * identity (device, inode, size, mtime) in *sb for the check that it did not
 * change while it was read. */
static rv_status header_fp(const char *path, export_fp *fp, struct stat *sb)
{
    unsigned char len8[8], buf[65536];
    rv_status st = RV_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return rv_fail(RV_ERR_IO, "%s: %s", path, strerror(errno));
    if (fstat(fd, sb) != 0 || pread(fd, len8, 8, 0) != 8) {
        st = rv_fail(RV_ERR_IO, "%s: cannot read its header", path);
        goto end;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | len8[i];
    if (n > RV_ST_MAX_HEADER || (uint64_t)sb->st_size < 8 + n) {
        st = rv_fail(RV_ERR_FORMAT, "%s: changed while it was read", path);
        goto end;
    }
    uint64_t h = export_fnv1a(EXPORT_FNV_SEED, len8, 8);
    for (uint64_t off = 8; off < 8 + n;) {
        const size_t want = 8 + n - off < sizeof buf ? (size_t)(8 + n - off) : sizeof buf;
        const ssize_t got = pread(fd, buf, want, (off_t)off);
        if (got <= 0) {
            st = rv_fail(RV_ERR_IO, "%s: cannot read its header", path);
            goto end;
        }
        h = export_fnv1a(h, buf, (size_t)got);
        off += (uint64_t)got;
    }
    fp->size = (int64_t)sb->st_size;
    fp->header = h;
end:
    close(fd);
    return st;
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* A metadata entry as a finite number. */
static rv_status meta_number(const export_source *s, const char *path, const char *key,
                             double *v)
{
    const char *text = rv_st_meta(s->st, key);
    char *end = NULL;
    if (!text)
        return rv_fail(RV_ERR_FORMAT, "%s: no metadata %s", path, key);
    errno = 0;
    *v = strtod(text, &end);
    if (end == text || *end || errno || !isfinite(*v))
        return rv_fail(RV_ERR_FORMAT, "%s: metadata %s is '%.40s', not a finite number", path,
                       key, text);
    return RV_OK;
}

static const char *dtype_text(rv_dtype d)
{
    return d == RV_F32 ? "f32" : d == RV_F16 ? "f16" : d == RV_BF16 ? "bf16" : "?";
}

static void shape_text(const rv_st_tensor *t, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < t->ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, d ? ", " : "", t->shape[d]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
}

/* The embeddings of a level: ndim 2 (rows, dim) or 1 (dim), of the metadata's
 * dtype and the config's width. */
static rv_status want_emb(const export_source *s, const char *path, const char *name, int ndim,
                          const char *why, const rv_st_tensor **out)
{
    char shape[96];
    const rv_st_tensor *t = rv_st_find(s->st, name);
    if (!t)
        return rv_fail(RV_ERR_FORMAT, "%s: no tensor %s%s", path, name, why);
    if (t->dtype != s->dtype)
        return rv_fail(RV_ERR_FORMAT, "%s: tensor %s is %s, but its metadata says dtype %s", path,
                       name, rv_dtype_name(t->dtype), dtype_text(s->dtype));
    shape_text(t, shape, sizeof shape);
    if (t->ndim != ndim || t->shape[ndim - 1] != s->dim)
        return rv_fail(RV_ERR_FORMAT, "%s: tensor %s has shape %s, but its config says dim %d%s",
                       path, name, shape, s->dim, ndim == 2 ? " (rows, dim)" : "");
    *out = t;
    return RV_OK;
}

static double f64_at(const rv_st_tensor *t, int64_t i)
{
    double v;
    memcpy(&v, (const unsigned char *)t->data + 8 * i, 8);
    return v;
}

/* A level's start and end times: F64 (rows), finite, each start <= its end. */
static rv_status want_times(export_source *s, const char *path, const char *sname,
                            const char *ename, const char *emb)
{
    const char *names[2] = {sname, ename};
    const rv_st_tensor *t[2];
    for (int k = 0; k < 2; k++) {
        t[k] = rv_st_find(s->st, names[k]);
        if (!t[k])
            return rv_fail(RV_ERR_FORMAT, "%s: no tensor %s for the rows of %s", path, names[k],
                           emb);
        if (t[k]->dtype != RV_F64 || t[k]->ndim != 1 || t[k]->shape[0] != s->rows)
            return rv_fail(RV_ERR_FORMAT, "%s: tensor %s is %s of %" PRId64 " values, but %s has %"
                           PRId64 " rows (want F64 (%" PRId64 "))", path, names[k],
                           rv_dtype_name(t[k]->dtype), t[k]->numel, emb, s->rows, s->rows);
    }
    for (int64_t i = 0; i < s->rows; i++) {
        const double a = f64_at(t[0], i), b = f64_at(t[1], i);
        if (!isfinite(a) || !isfinite(b) || a > b)
            return rv_fail(RV_ERR_FORMAT, "%s: row %" PRId64 " of %s runs from %g to %g s", path, i,
                           emb, a, b);
    }
    s->start = t[0];
    s->end = t[1];
    return RV_OK;
}

/* The logits of the level (name; may be absent) and the names of their classes
 * (metadata labels: a JSON list of C strings), multi_label. */
static rv_status want_logits(export_source *s, const char *path, const char *name, int ndim)
{
    const rv_st_tensor *t = name ? rv_st_find(s->st, name) : NULL;
    rv_status st = RV_OK;
    json_t *list = NULL;
    if (!t)
        return RV_OK;
    if (t->dtype != RV_F32 && t->dtype != RV_F16 && t->dtype != RV_BF16)
        return rv_fail(RV_ERR_FORMAT, "%s: tensor %s is %s, not F32, F16 or BF16", path, name,
                       rv_dtype_name(t->dtype));
    if (t->ndim != ndim || (ndim == 2 && t->shape[0] != s->rows) || t->shape[ndim - 1] < 1 ||
        t->shape[ndim - 1] > MAX_CLASSES) {
        char shape[96];
        shape_text(t, shape, sizeof shape);
        return rv_fail(RV_ERR_FORMAT, "%s: tensor %s has shape %s, want %s", path, name, shape,
                       ndim == 2 ? "(rows, classes) with the rows of the embeddings" : "(classes)");
    }
    s->logits = t;
    s->classes = (int)t->shape[ndim - 1];
    const char *multi = rv_st_meta(s->st, "multi_label");
    if (multi && strcmp(multi, "true") != 0 && strcmp(multi, "false") != 0)
        return rv_fail(RV_ERR_FORMAT, "%s: metadata multi_label is '%.20s', not true or false", path,
                       multi);
    s->multi_label = multi && strcmp(multi, "true") == 0;
    const char *text = rv_st_meta(s->st, "labels");
    if (!text)
        return RV_OK; /* classes named LABEL_<id>, as transformers names them */
    list = json_loads(text, JSON_DECODE_ANY, NULL);
    if (!json_is_array(list) || json_array_size(list) != (size_t)s->classes) {
        st = rv_fail(RV_ERR_FORMAT, "%s: metadata labels is %s, but %s has %d classes", path,
                     json_is_array(list) ? "a list of another length" : "not a JSON list", name,
                     s->classes);
        goto end;
    }
    if (!(s->labels = calloc((size_t)s->classes, sizeof *s->labels))) {
        st = rv_fail(RV_ERR_NOMEM, "%s: out of memory for %d labels", path, s->classes);
        goto end;
    }
    for (int i = 0; i < s->classes; i++) {
        const json_t *v = json_array_get(list, (size_t)i);
        if (!json_is_string(v)) {
            st = rv_fail(RV_ERR_FORMAT, "%s: metadata labels[%d] is not a string", path, i);
            goto end;
        }
        if (!(s->labels[i] = strdup(json_string_value(v)))) {
            st = rv_fail(RV_ERR_NOMEM, "%s: out of memory for %d labels", path, s->classes);
            goto end;
        }
    }
end:
    json_decref(list);
    if (st != RV_OK)
        labels_free(s);
    return st;
}

rv_status export_source_level(export_source *s, const char *path, rv_export_level level)
{
    rv_status st;
    labels_free(s);
    s->start = s->end = s->logits = NULL;
    s->classes = 0;
    s->multi_label = 0;
    s->level = level;
    if (level == RV_EXPORT_GLOBAL) {
        double start, len;
        if ((st = want_emb(s, path, "global", 1, "", &s->emb)) != RV_OK ||
            (st = meta_number(s, path, "start_s", &start)) != RV_OK ||
            (st = meta_number(s, path, "recording_s", &len)) != RV_OK)
            return st;
        if (len < 0)
            return rv_fail(RV_ERR_FORMAT, "%s: metadata recording_s is %g", path, len);
        s->rows = 1;
        s->t0 = start;
        s->t1 = start + len;
        return want_logits(s, path, "logits", 1);
    }
    const int block = level == RV_EXPORT_BLOCK;
    const char *emb = block ? "block_pooled" : "segments";
    if ((st = want_emb(s, path, emb, 2,
                       block ? " (no blocks: embedded without --attention frame or block=S; "
                               "--level segment or global)"
                             : "",
                       &s->emb)) != RV_OK)
        return st;
    s->rows = s->emb->shape[0];
    if ((st = want_times(s, path, block ? "block_start" : "segment_start",
                         block ? "block_end" : "segment_end", emb)) != RV_OK)
        return st;
    return want_logits(s, path, block ? "block_logits" : NULL, 2);
}

rv_status export_source_open(const char *path, rv_export_level level, export_source *s)
{
    struct stat first, before, after;
    json_t *cfg = NULL;
    rv_status st;
    memset(s, 0, sizeof *s);
    if (stat(path, &first) != 0) {
        st = rv_fail(RV_ERR_IO, "%s: %s", path, strerror(errno));
        goto end;
    }
    if (!S_ISREG(first.st_mode)) {
        st = rv_fail(RV_ERR_FORMAT, "%s: not a regular file", path);
        goto end;
    }
    /* The tensors and the fingerprint must come from one version of the file. */
    if ((st = rv_st_open(path, &s->st)) != RV_OK || (st = header_fp(path, &s->fp, &before)) != RV_OK)
        goto end;
    if (!same_file(&first, &before)) {
        st = rv_fail(RV_ERR_IO, "%s: changed while it was read", path);
        goto end;
    }
    const char *format = rv_st_meta(s->st, "format");
    if (!format || strcmp(format, RV_EMBED_FORMAT) != 0) {
        st = rv_fail(RV_ERR_FORMAT, "%s: not an output of ringvit embed (metadata format %s%.40s%s)",
                     path, format ? "'" : "", format ? format : "absent", format ? "'" : "");
        goto end;
    }
    s->model = rv_st_meta(s->st, "model");
    s->model_hash = rv_st_meta(s->st, "model_hash");
    if (!s->model_hash || !s->model_hash[0] || strlen(s->model_hash) > 64 || !s->model) {
        st = rv_fail(RV_ERR_FORMAT, "%s: no metadata %s", path, !s->model ? "model" : "model_hash");
        goto end;
    }
    const char *cfg_text = rv_st_meta(s->st, "config");
    cfg = cfg_text ? json_loads(cfg_text, 0, NULL) : NULL;
    const json_t *dim = json_object_get(cfg, "dim");
    if (!json_is_integer(dim) || json_integer_value(dim) < 1 ||
        json_integer_value(dim) > MAX_DIM) {
        st = rv_fail(RV_ERR_FORMAT, "%s: metadata config %s", path,
                     cfg ? "has no dim" : "is not a JSON object");
        goto end;
    }
    s->dim = (int)json_integer_value(dim);
    const char *dtype = rv_st_meta(s->st, "dtype"), *norm = rv_st_meta(s->st, "normalize");
    if (rv_embed_dtype_parse(dtype ? dtype : "f32", &s->dtype) != RV_OK) {
        st = rv_fail(RV_ERR_FORMAT, "%s: metadata dtype '%.20s' is not f32, f16 or bf16", path,
                     dtype);
        goto end;
    }
    if (norm && strcmp(norm, "l2") != 0 && strcmp(norm, "none") != 0) {
        st = rv_fail(RV_ERR_FORMAT, "%s: metadata normalize '%.20s' is not l2 or none", path, norm);
        goto end;
    }
    s->normalized = norm && strcmp(norm, "l2") == 0;
    const char *source = rv_st_meta(s->st, "source");
    if (!(s->input = strdup(source ? source : ""))) {
        st = rv_fail(RV_ERR_NOMEM, "out of memory");
        goto end;
    }
    s->has_blocks = rv_st_find(s->st, "block_pooled") != NULL;
    if (level == RV_EXPORT_AUTO) { /* both levels it may become */
        if (s->has_blocks && (st = export_source_level(s, path, RV_EXPORT_BLOCK)) != RV_OK)
            goto end;
        level = s->has_blocks ? RV_EXPORT_BLOCK : RV_EXPORT_SEGMENT;
        if ((st = export_source_level(s, path, RV_EXPORT_SEGMENT)) != RV_OK)
            goto end;
    }
    if ((st = export_source_level(s, path, level)) != RV_OK)
        goto end;
    if (stat(path, &after) != 0 || !same_file(&before, &after))
        st = rv_fail(RV_ERR_IO, "%s: changed while it was read", path);
end:
    json_decref(cfg);
    if (st != RV_OK)
        export_source_close(s);
    return st;
}

void export_source_rows_fp(export_source *s)
{
    uint64_t h = export_fnv1a(EXPORT_FNV_SEED, s->emb->data, s->emb->nbytes);
    if (s->start) {
        h = export_fnv1a(h, s->start->data, s->start->nbytes);
        h = export_fnv1a(h, s->end->data, s->end->nbytes);
    }
    s->fp.rows = h;
}

void export_source_times(const export_source *s, int64_t r, double *t0, double *t1)
{
    if (!s->start) {
        *t0 = s->t0;
        *t1 = s->t1;
        return;
    }
    *t0 = f64_at(s->start, r);
    *t1 = f64_at(s->end, r);
}
