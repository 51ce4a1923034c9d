/* export_manifest.c: EXPORT/export.json, what an export holds (rv_export.h
 * lists its fields): read strictly (a manifest that does not add up is not
 * trusted with more rows), written through a temporary name, synced and
 * renamed, and the shard files it lists checked against it before a resumed
 * run adds to them. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "export_internal.h"
#include "export_npy.h"
#include "rv_version.h"

void export_manifest_clear(export_manifest *m)
{
    for (int i = 0; i < m->ndone; i++) {
        free(m->done[i].output);
        free(m->done[i].real);
        free(m->done[i].input);
        free(m->done[i].model);
    }
    free(m->done);
    free(m->shards);
    free(m->model);
    free(m->model_hash);
    memset(m, 0, sizeof *m);
}

static int get_i64(const json_t *o, const char *key, int64_t lo, int64_t *out)
{
    const json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < lo)
        return 0;
    *out = json_integer_value(v);
    return 1;
}

static char *get_str(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_string(v) ? strdup(json_string_value(v)) : NULL;
}

static int get_hex(const json_t *o, const char *key, uint64_t *out)
{
    const char *s = json_string_value(json_object_get(o, key));
    char *end = NULL;
    if (!s || strlen(s) != 16)
        return 0;
    errno = 0;
    *out = strtoull(s, &end, 16);
    return !errno && *end == '\0';
}

/* The outputs of the manifest, their rows covering 0 .. m->rows in order. */
static const char *read_outputs(const json_t *list, export_manifest *m)
{
    const size_t n = json_array_size(list);
    if (!json_is_array(list) || n > INT32_MAX)
        return "outputs is not a list";
    if (n && !(m->done = calloc(n, sizeof *m->done)))
        return "out of memory";
    int64_t row = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *o = json_array_get(list, i);
        export_done *d = &m->done[m->ndone++];
        d->output = get_str(o, "output");
        d->real = get_str(o, "real");
        d->input = get_str(o, "input");
        d->model = get_str(o, "model");
        if (!d->output || !d->real || !d->input || !d->model ||
            !get_i64(o, "row_start", 0, &d->row_start) || !get_i64(o, "row_end", 0, &d->row_end) ||
            !get_i64(o, "size", 0, &d->fp.size) || !get_hex(o, "header_fnv1a", &d->fp.header) ||
            !get_hex(o, "rows_fnv1a", &d->fp.rows))
            return "an entry of outputs lacks a field";
        if (d->row_start != row || d->row_end < d->row_start)
            return "the row ranges of outputs do not follow each other";
        row = d->row_end;
    }
    return row == m->rows ? NULL : "the outputs' rows are not the export's";
}

/* The shards: every one full but the last, their rows the export's. */
static const char *read_shards(const json_t *list, export_manifest *m)
{
    const size_t n = json_array_size(list);
    if (!json_is_array(list) || n > EXPORT_MAX_SHARDS)
        return "shards is not a list";
    if (n && !(m->shards = calloc(n, sizeof *m->shards)))
        return "out of memory";
    int64_t rows = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *o = json_array_get(list, i);
        export_shard *s = &m->shards[m->nshards++];
        char emb[64], meta[64];
        snprintf(emb, sizeof emb, EXPORT_EMB_FMT, (int)i);
        snprintf(meta, sizeof meta, EXPORT_META_FMT, (int)i);
        const char *e = json_string_value(json_object_get(o, "emb")),
                   *md = json_string_value(json_object_get(o, "metadata"));
        if (!e || !md || strcmp(e, emb) != 0 || strcmp(md, meta) != 0)
            return "a shard's files are not named in order";
        if (!get_i64(o, "rows", 1, &s->rows) || !get_i64(o, "emb_bytes", 0, &s->emb_bytes) ||
            !get_i64(o, "metadata_bytes", 0, &s->meta_bytes))
            return "a shard lacks rows or bytes";
        if (s->rows > m->shard_rows || (i + 1 < n && s->rows != m->shard_rows))
            return "a shard but the last is not full";
        rows += s->rows;
    }
    return rows == m->rows ? NULL : "the shards' rows are not the export's";
}

rv_status export_manifest_read(const char *dir, export_manifest *m)
{
    char path[4200];
    json_error_t jerr;
    const char *why = NULL;
    memset(m, 0, sizeof *m);
    snprintf(path, sizeof path, "%s/%s", dir, RV_EXPORT_MANIFEST);
    if (access(path, F_OK) != 0)
        return rv_fail(RV_ERR_IO, "%s: %s", path, strerror(errno));
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        rv_status st = rv_fail(RV_ERR_FORMAT, "%s: not a ringvit export manifest (line %d: %s)",
                               path, jerr.line, jerr.text);
        return st;
    }
    const char *format = json_string_value(json_object_get(root, "format"));
    const char *dtype = json_string_value(json_object_get(root, "dtype"));
    const char *level = json_string_value(json_object_get(root, "level"));
    int64_t version = 0, dim = 0, top_k = 0;
    if (!format || strcmp(format, RV_EXPORT_FORMAT) != 0) {
        why = "its format is not " RV_EXPORT_FORMAT;
    } else if (!get_i64(root, "version", 0, &version) || version != RV_EXPORT_VERSION) {
        why = "its version is not 1";
    } else if (!(m->model = get_str(root, "model")) ||
               !(m->model_hash = get_str(root, "model_hash")) ||
               !get_i64(root, "dim", 1, &dim) || dim > INT32_MAX ||
               !get_i64(root, "shard_rows", 1, &m->shard_rows) ||
               !get_i64(root, "top_k", 0, &top_k) || top_k > RV_EXPORT_MAX_TOP_K ||
               !get_i64(root, "rows", 0, &m->rows) ||
               !json_is_boolean(json_object_get(root, "normalize")) ||
               !json_is_boolean(json_object_get(root, "outputs_normalized"))) {
        why = "a field is missing or out of range";
    } else if (!dtype || (strcmp(dtype, "f32") != 0 && strcmp(dtype, "f16") != 0)) {
        why = "its dtype is not f32 or f16";
    } else if (!level || rv_export_level_parse(level, &m->level) != RV_OK ||
               m->level == RV_EXPORT_AUTO) {
        why = "its level is not block, segment or global";
    } else {
        m->dim = (int)dim;
        m->top_k = (int)top_k;
        m->dtype = strcmp(dtype, "f16") == 0 ? RV_F16 : RV_F32;
        m->normalize = json_is_true(json_object_get(root, "normalize"));
        m->outputs_normalized = json_is_true(json_object_get(root, "outputs_normalized"));
        if (!(why = read_shards(json_object_get(root, "shards"), m)))
            why = read_outputs(json_object_get(root, "outputs"), m);
    }
    json_decref(root);
    if (!why)
        return RV_OK;
    export_manifest_clear(m);
    return rv_fail(RV_ERR_FORMAT, "%s: not a ringvit export manifest (%s)", path, why);
}

rv_status export_manifest_check(const char *dir, const export_manifest *m)
{
    char path[4200];
    for (int i = 0; i < m->nshards; i++) {
        const export_shard *s = &m->shards[i];
        const int last = i + 1 == m->nshards;
        int64_t rows = 0;
        size_t hl;
        struct stat sb;
        snprintf(path, sizeof path, "%s/" EXPORT_EMB_FMT, dir, i);
        rv_status st = npy_check_file(path, m->dtype, m->dim, &rows, &hl);
        if (st != RV_OK)
            return rv_fail(st, "%s; it does not match the manifest, so nothing is added", rv_last_error());
        if (last ? rows < s->rows : rows != s->rows)
            return rv_fail(RV_ERR_FORMAT, "%s: %" PRId64 " rows, but the manifest lists %" PRId64
                           "; nothing is added", path, rows, s->rows);
        if (rows == s->rows && (int64_t)(hl + (size_t)rows * (size_t)m->dim *
                                                  rv_dtype_size(m->dtype)) != s->emb_bytes)
            return rv_fail(RV_ERR_FORMAT, "%s: not the %" PRId64 " bytes the manifest lists; nothing "
                           "is added", path, s->emb_bytes);
        snprintf(path, sizeof path, "%s/" EXPORT_META_FMT, dir, i);
        if (stat(path, &sb) != 0)
            return rv_fail(RV_ERR_FORMAT, "%s: %s; the manifest lists it, so nothing is added", path,
                           strerror(errno));
        if (last ? sb.st_size < s->meta_bytes : sb.st_size != s->meta_bytes)
            return rv_fail(RV_ERR_FORMAT, "%s: %lld bytes, but the manifest lists %" PRId64
                           "%s; nothing is added", path, (long long)sb.st_size, s->meta_bytes,
                           sb.st_size < s->meta_bytes ? " (truncated)" : "");
    }
    return RV_OK;
}

static json_t *hex(uint64_t v)
{
    char buf[17];
    snprintf(buf, sizeof buf, "%016" PRIx64, v);
    return json_string(buf);
}

static json_t *manifest_json(const export_manifest *m)
{
    json_t *root = json_object(), *shards = json_array(), *outputs = json_array();
    char emb[64], meta[64];
    json_object_set_new(root, "format", json_string(RV_EXPORT_FORMAT));
    json_object_set_new(root, "version", json_integer(RV_EXPORT_VERSION));
    json_object_set_new(root, "model", json_string(m->model));
    json_object_set_new(root, "model_hash", json_string(m->model_hash));
    json_object_set_new(root, "dim", json_integer(m->dim));
    json_object_set_new(root, "dtype", json_string(m->dtype == RV_F16 ? "f16" : "f32"));
    json_object_set_new(root, "level", json_string(rv_export_level_name(m->level)));
    json_object_set_new(root, "normalize", json_boolean(m->normalize));
    json_object_set_new(root, "outputs_normalized", json_boolean(m->outputs_normalized));
    json_object_set_new(root, "shard_rows", json_integer(m->shard_rows));
    json_object_set_new(root, "top_k", json_integer(m->top_k));
    json_object_set_new(root, "rows", json_integer(m->rows));
    for (int i = 0; i < m->nshards; i++) {
        snprintf(emb, sizeof emb, EXPORT_EMB_FMT, i);
        snprintf(meta, sizeof meta, EXPORT_META_FMT, i);
        json_array_append_new(shards, json_pack("{s:s, s:s, s:I, s:I, s:I}", "emb", emb,
                                                "metadata", meta, "rows",
                                                (json_int_t)m->shards[i].rows, "emb_bytes",
                                                (json_int_t)m->shards[i].emb_bytes,
                                                "metadata_bytes",
                                                (json_int_t)m->shards[i].meta_bytes));
    }
    json_object_set_new(root, "shards", shards);
    for (int i = 0; i < m->ndone; i++) {
        const export_done *d = &m->done[i];
        json_t *o = json_object();
        json_object_set_new(o, "output", json_string(d->output));
        json_object_set_new(o, "real", json_string(d->real));
        json_object_set_new(o, "input", json_string(d->input));
        json_object_set_new(o, "model", json_string(d->model));
        json_object_set_new(o, "row_start", json_integer(d->row_start));
        json_object_set_new(o, "row_end", json_integer(d->row_end));
        json_object_set_new(o, "size", json_integer(d->fp.size));
        json_object_set_new(o, "header_fnv1a", hex(d->fp.header));
        json_object_set_new(o, "rows_fnv1a", hex(d->fp.rows));
        json_array_append_new(outputs, o);
    }
    json_object_set_new(root, "outputs", outputs);
    json_object_set_new(root, "ringvit_version", json_string(RINGVIT_VERSION));
    return root;
}

rv_status export_manifest_write(const char *dir, const export_manifest *m)
{
    char path[4200], tmp[4300];
    rv_status st = RV_OK;
    snprintf(path, sizeof path, "%s/%s", dir, RV_EXPORT_MANIFEST);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    json_t *root = manifest_json(m);
    char *text = root ? json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII)
                      : NULL;
    json_decref(root);
    if (!text)
        return rv_fail(RV_ERR_NOMEM, "%s: out of memory (or a text that is not UTF-8)", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = rv_fail(RV_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
        goto end;
    }
    const size_t n = strlen(text);
    size_t done = 0;
    while (done < n) {
        const ssize_t w = write(fd, text + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    if (done < n || write(fd, "\n", 1) != 1 || fsync(fd) != 0)
        st = rv_fail(RV_ERR_IO, "writing %s failed: %s", tmp, strerror(errno));
    if (close(fd) != 0 && st == RV_OK)
        st = rv_fail(RV_ERR_IO, "writing %s failed: %s", tmp, strerror(errno));
    if (st == RV_OK && rename(tmp, path) != 0)
        st = rv_fail(RV_ERR_IO, "cannot rename %s onto %s: %s", tmp, path, strerror(errno));
    if (st != RV_OK)
        unlink(tmp);
    else
        st = export_sync_dir(dir);
end:
    free(text);
    return st;
}

rv_status export_sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return rv_fail(RV_ERR_IO, "%s: %s", dir, strerror(errno));
    const int bad = fsync(fd) != 0 && errno != EINVAL;
    const int err = errno;
    close(fd);
    return bad ? rv_fail(RV_ERR_IO, "cannot sync the folder %s: %s", dir, strerror(err)) : RV_OK;
}
