/* export_open.c: the export folder and the outputs added to it. Opening decides
 * whether the folder is a new export (absent, empty, or what a first run that
 * failed left), an export to resume (its manifest read, its settings the run's,
 * its shards checked), or something else, refused. Adding reads and checks each
 * output (export_source.c) and the rules between outputs: one model and width,
 * one normalize, and an output the export holds already is not added twice (by
 * its real path, or its fingerprint when it moved), nor taken when it changed. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "export_internal.h"
#include "rv_ingest.h"

/* ---- the tables ---------------------------------------------------------------------- */

rv_status export_table_put(export_table *t, uint64_t key, int val)
{
    key |= 1; /* 0 marks an empty slot */
    if (2 * (t->n + 1) > t->cap) {
        const size_t cap = t->cap ? 2 * t->cap : 64;
        uint64_t *keys = calloc(cap, sizeof *keys);
        int *vals = calloc(cap, sizeof *vals);
        if (!keys || !vals) {
            free(keys);
            free(vals);
            return rv_fail(RV_ERR_NOMEM, "export: out of memory");
        }
        for (size_t i = 0; i < t->cap; i++) {
            if (!t->keys[i])
                continue;
            size_t j = (size_t)t->keys[i] & (cap - 1);
            while (keys[j])
                j = (j + 1) & (cap - 1);
            keys[j] = t->keys[i];
            vals[j] = t->vals[i];
        }
        free(t->keys);
        free(t->vals);
        t->keys = keys;
        t->vals = vals;
        t->cap = cap;
    }
    size_t j = (size_t)key & (t->cap - 1);
    while (t->keys[j])
        j = (j + 1) & (t->cap - 1);
    t->keys[j] = key;
    t->vals[j] = val;
    t->n++;
    return RV_OK;
}

int export_table_next(const export_table *t, uint64_t key, size_t *pos, int *val)
{
    key |= 1;
    if (!t->cap)
        return 0;
    for (size_t j = ((size_t)key + *pos) & (t->cap - 1); t->keys[j]; j = (j + 1) & (t->cap - 1)) {
        ++*pos;
        if (t->keys[j] == key) {
            *val = t->vals[j];
            return 1;
        }
    }
    return 0;
}

void export_table_free(export_table *t)
{
    free(t->keys);
    free(t->vals);
    memset(t, 0, sizeof *t);
}

static uint64_t text_key(const char *s)
{
    return export_fnv1a(EXPORT_FNV_SEED, s, strlen(s));
}

/* ---- the folder ---------------------------------------------------------------------- */

rv_status export_lock(rv_export *e)
{
    char path[4200];
    if (e->lock_fd >= 0)
        return RV_OK;
    snprintf(path, sizeof path, "%s/%s", e->dir, EXPORT_LOCK);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return rv_fail(RV_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        close(fd);
        return err == EWOULDBLOCK
                   ? rv_fail(RV_ERR_IO, "%s: another ringvit export is writing it", e->dir)
                   : rv_fail(RV_ERR_IO, "cannot lock %s: %s", path, strerror(err));
    }
    e->lock_fd = fd;
    return RV_OK;
}

int export_shard_file(const char *name, const char *stem, const char *ext, long *index, int *tmp)
{
    const size_t sl = strlen(stem), el = strlen(ext);
    if (strncmp(name, stem, sl) != 0)
        return 0;
    const char *p = name + sl, *d = p;
    long k = 0;
    for (; *p >= '0' && *p <= '9' && p - d < 9; p++)
        k = k * 10 + (*p - '0');
    if (p == d || strncmp(p, ext, el) != 0)
        return 0;
    p += el;
    *index = k;
    *tmp = *p != '\0';
    if (!*p)
        return 1;
    if (strncmp(p, ".tmp.", 5) != 0 || !p[5])
        return 0;
    return strspn(p + 5, "0123456789") == strlen(p + 5);
}

/* 1 when the folder dir/sub holds nothing but files named as ours (or is absent). */
static int only_ours(const char *dir, const char *sub, const char *stem, const char *ext)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, sub);
    DIR *d = opendir(path);
    if (!d)
        return errno == ENOENT;
    int ok = 1, tmp;
    long k;
    for (struct dirent *de; ok && (de = readdir(d));)
        ok = strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
             export_shard_file(de->d_name, stem, ext, &k, &tmp);
    closedir(d);
    return ok;
}

/* A folder with no export in it may become one when it holds nothing, or only
 * what a first run that failed before its manifest left: its lock, its shard
 * folders with shard files and temporary files. */
static int blank_folder(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int ok = 1;
    for (struct dirent *de; ok && (de = readdir(d));) {
        const char *n = de->d_name;
        if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0 || strcmp(n, EXPORT_LOCK) == 0 ||
            strncmp(n, RV_EXPORT_MANIFEST ".tmp.", strlen(RV_EXPORT_MANIFEST) + 5) == 0)
            continue;
        if (strcmp(n, EXPORT_EMB_DIR) == 0)
            ok = only_ours(dir, EXPORT_EMB_DIR, "emb_", ".npy");
        else if (strcmp(n, EXPORT_META_DIR) == 0)
            ok = only_ours(dir, EXPORT_META_DIR, "metadata_", ".jsonl");
        else
            ok = 0;
    }
    closedir(d);
    return ok;
}

static rv_status same_settings(const rv_export *e)
{
    const export_manifest *m = &e->m;
    const rv_export_opts *o = &e->o;
    char want[64] = "", have[64] = "";
    if (o->level != RV_EXPORT_AUTO && o->level != m->level) {
        snprintf(want, sizeof want, "level %s", rv_export_level_name(o->level));
        snprintf(have, sizeof have, "level %s", rv_export_level_name(m->level));
    } else if (o->dtype != m->dtype) {
        snprintf(want, sizeof want, "dtype %s", o->dtype == RV_F16 ? "f16" : "f32");
        snprintf(have, sizeof have, "dtype %s", m->dtype == RV_F16 ? "f16" : "f32");
    } else if (!o->normalize != !m->normalize) {
        snprintf(want, sizeof want, "%snormalize", o->normalize ? "" : "no ");
        snprintf(have, sizeof have, "%snormalize", m->normalize ? "" : "no ");
    } else if (o->shard_rows != m->shard_rows) {
        snprintf(want, sizeof want, "%" PRId64 " shard rows", o->shard_rows);
        snprintf(have, sizeof have, "%" PRId64 " shard rows", m->shard_rows);
    } else if (o->top_k != m->top_k) {
        snprintf(want, sizeof want, "top %d labels", o->top_k);
        snprintf(have, sizeof have, "top %d labels", m->top_k);
    } else {
        return RV_OK;
    }
    return rv_fail(RV_ERR_INVALID, "%s: the export has %s, not %s; add to it with its own "
                   "settings, or export to a new folder", e->dir, have, want);
}

/* The resumed export: its settings, its shards, the outputs it holds. */
static rv_status resume(rv_export *e)
{
    rv_status st;
    if ((st = same_settings(e)) != RV_OK || (st = export_lock(e)) != RV_OK ||
        (st = export_manifest_check(e->dir, &e->m)) != RV_OK)
        return st;
    for (int i = 0; i < e->m.ndone; i++)
        if ((st = export_table_put(&e->by_real, text_key(e->m.done[i].real), -1 - i)) != RV_OK ||
            (st = export_table_put(&e->by_fp, e->m.done[i].fp.header, -1 - i)) != RV_OK)
            return st;
    if (e->m.ndone && !(e->first = strdup(e->m.done[0].output)))
        return rv_fail(RV_ERR_NOMEM, "export: out of memory");
    return RV_OK;
}

rv_status rv_export_settings(const char *dir, rv_export_opts *o)
{
    export_manifest m;
    rv_status st = export_manifest_read(dir, &m);
    if (st != RV_OK)
        return st;
    o->level = m.level;
    o->dtype = m.dtype;
    o->normalize = m.normalize;
    o->shard_rows = m.shard_rows;
    o->top_k = m.top_k;
    export_manifest_clear(&m);
    return RV_OK;
}

rv_status rv_export_open(const char *dir, const rv_export_opts *o, rv_export **out)
{
    rv_export *e = NULL;
    struct stat sb;
    rv_status st = RV_OK;
    *out = NULL;
    if (!dir || !dir[0] || !o)
        return rv_fail(RV_ERR_INVALID, "export: %s", !o ? "no options" : "no folder");
    if ((o->dtype != RV_F32 && o->dtype != RV_F16) || o->shard_rows < 1 ||
        o->shard_rows > (INT64_C(1) << 40) || o->top_k < 0 || o->top_k > RV_EXPORT_MAX_TOP_K ||
        o->level < RV_EXPORT_AUTO || o->level > RV_EXPORT_GLOBAL)
        return rv_fail(RV_ERR_INVALID, "export: %s",
                       o->dtype != RV_F32 && o->dtype != RV_F16 ? "dtype wants f32 or f16"
                       : o->shard_rows < 1 || o->shard_rows > (INT64_C(1) << 40)
                           ? "shard rows want 1 .. 2^40"
                       : o->top_k < 0 || o->top_k > RV_EXPORT_MAX_TOP_K ? "top k wants 0 .. 100"
                                                                        : "no such level");
    if (!(e = calloc(1, sizeof *e)) || !(e->dir = strdup(dir))) {
        st = rv_fail(RV_ERR_NOMEM, "export: out of memory");
        goto end;
    }
    e->o = *o;
    e->lock_fd = -1;
    size_t n = strlen(e->dir);
    while (n > 1 && e->dir[n - 1] == '/')
        e->dir[--n] = '\0';
    if (stat(e->dir, &sb) != 0) {
        if (errno != ENOENT)
            st = rv_fail(RV_ERR_IO, "%s: %s", e->dir, strerror(errno));
        goto end; /* a new export: the folder is made when there is something to write */
    }
    if (!S_ISDIR(sb.st_mode)) {
        st = rv_fail(RV_ERR_INVALID, "%s: exists and is not a folder", e->dir);
        goto end;
    }
    st = export_manifest_read(e->dir, &e->m);
    if (st == RV_ERR_IO) { /* no manifest */
        st = blank_folder(e->dir)
                 ? RV_OK
                 : rv_fail(RV_ERR_INVALID, "%s: exists and is not an export (no %s); refusing "
                           "to write into it", e->dir, RV_EXPORT_MANIFEST);
        goto end;
    }
    if (st != RV_OK) {
        st = rv_fail(st, "%s; refusing to write into %s", rv_last_error(), e->dir);
        goto end;
    }
    e->exists = 1;
    if (!o->resume) {
        st = rv_fail(RV_ERR_INVALID, "%s: exists (an export of %" PRId64 " rows); --resume to add "
                     "to it", e->dir, e->m.rows);
        goto end;
    }
    st = resume(e);
end:
    if (st == RV_OK)
        *out = e;
    else
        rv_export_free(&e);
    return st;
}

/* ---- adding outputs ----------------------------------------------------------------- */

/* The fingerprint of table value v: a manifest entry (< 0) or an item. */
static const export_fp *fp_of(const rv_export *e, int v)
{
    return v < 0 ? &e->m.done[-1 - v].fp : &e->items[v].fp;
}

/* What the export already knows of the output opened as s at real path real:
 * 0 new, 1 held already, or an error for one that changed since. */
static rv_status known(rv_export *e, const char *path, const char *real, export_source *s,
                       int *already)
{
    size_t pos = 0;
    int v;
    *already = 0;
    while (export_table_next(&e->by_real, text_key(real), &pos, &v)) {
        const char *other = v < 0 ? e->m.done[-1 - v].real : e->items[v].real;
        if (strcmp(other, real) != 0)
            continue;
        const export_fp *fp = fp_of(e, v);
        if (v >= 0) { /* given twice in this run */
            *already = 1;
            return RV_OK;
        }
        export_source_rows_fp(s);
        if (fp->size == s->fp.size && fp->header == s->fp.header && fp->rows == s->fp.rows) {
            *already = 1;
            return RV_OK;
        }
        const export_done *d = &e->m.done[-1 - v];
        return rv_fail(RV_ERR_INVALID, "%s: changed since it was exported to %s (rows %" PRId64
                       " .. %" PRId64 "); export it to a new folder, or restore it", path, e->dir,
                       d->row_start, d->row_end);
    }
    pos = 0;
    while (export_table_next(&e->by_fp, s->fp.header, &pos, &v)) {
        const export_fp *fp = fp_of(e, v);
        if (fp->size != s->fp.size || fp->header != s->fp.header)
            continue;
        if (v < 0) {
            export_source_rows_fp(s);
            if (fp->rows != s->fp.rows)
                continue;
        }
        *already = 1; /* the same file under another name (a folder moved) */
        return RV_OK;
    }
    return RV_OK;
}

/* The rules between this output and the export's others. */
static rv_status fits(rv_export *e, const char *path, const export_source *s)
{
    export_manifest *m = &e->m;
    if (!m->model_hash) {
        if (!(m->model_hash = strdup(s->model_hash)) || !(m->model = strdup(s->model)) ||
            !(e->first = strdup(path)))
            return rv_fail(RV_ERR_NOMEM, "export: out of memory");
        m->dim = s->dim;
        m->outputs_normalized = s->normalized;
        return RV_OK;
    }
    if (strcmp(m->model_hash, s->model_hash) != 0 || m->dim != s->dim)
        return rv_fail(RV_ERR_INVALID, "%s (model %s, model_hash %s, dim %d) and %s (model %s, "
                       "model_hash %s, dim %d) are outputs of different %s; an export holds "
                       "the embeddings of one model", e->first, m->model, m->model_hash, m->dim,
                       path, s->model, s->model_hash, s->dim,
                       m->dim != s->dim ? "models and dimensions" : "models");
    if (!e->o.normalize && !m->outputs_normalized != !s->normalized)
        return rv_fail(RV_ERR_INVALID, "%s (normalize %s) and %s (normalize %s) were embedded with "
                       "different --normalize; --normalize makes their rows alike", e->first,
                       m->outputs_normalized ? "l2" : "none", path, s->normalized ? "l2" : "none");
    return RV_OK;
}

rv_status rv_export_add(rv_export *e, const char *path, int *already)
{
    char real[PATH_MAX];
    export_source s;
    int held = 0;
    rv_status st;
    if (already)
        *already = 0;
    if (!e || !path || e->finished)
        return rv_fail(RV_ERR_INVALID, "export: %s", !e || !path ? "no export or path"
                                                                 : "add after finish");
    const rv_export_level level = e->exists ? e->m.level : e->o.level;
    if ((st = export_source_open(path, level, &s)) != RV_OK)
        return st;
    char *real_text = NULL;
    export_item it = {.rows = {-1, -1, -1, -1}};
    if (!realpath(path, real)) {
        st = rv_fail(RV_ERR_IO, "%s: %s", path, strerror(errno));
        goto end;
    }
    if (!(real_text = rv_utf8_text(real))) {
        st = rv_fail(RV_ERR_NOMEM, "export: out of memory");
        goto end;
    }
    if ((st = fits(e, path, &s)) != RV_OK || (st = known(e, path, real_text, &s, &held)) != RV_OK)
        goto end;
    if (held) {
        e->already++;
        goto end;
    }
    it.rows[s.level] = s.rows;
    it.rows[RV_EXPORT_GLOBAL] = 1;
    if (level == RV_EXPORT_AUTO && s.has_blocks) { /* the segments too: the level is
                                                      chosen at finish */
        if ((st = export_source_level(&s, path, RV_EXPORT_SEGMENT)) != RV_OK)
            goto end;
        it.rows[RV_EXPORT_SEGMENT] = s.rows;
    }
    it.has_blocks = s.has_blocks;
    it.fp = s.fp;
    if (e->nitems == e->cap) {
        const int cap = e->cap ? 2 * e->cap : 16;
        export_item *items = cap < INT32_MAX / 2 ? realloc(e->items, (size_t)cap * sizeof *items)
                                                 : NULL;
        if (!items) {
            st = rv_fail(RV_ERR_NOMEM, "export: out of memory");
            goto end;
        }
        e->items = items;
        e->cap = cap;
    }
    it.path = strdup(path);
    it.output = rv_utf8_text(path);
    it.input = strdup(s.input);
    it.model = strdup(s.model);
    it.real = real_text;
    if (!it.path || !it.output || !it.input || !it.model) {
        st = rv_fail(RV_ERR_NOMEM, "export: out of memory");
        goto end;
    }
    if ((st = export_table_put(&e->by_real, text_key(real_text), e->nitems)) != RV_OK ||
        (st = export_table_put(&e->by_fp, it.fp.header, e->nitems)) != RV_OK)
        goto end;
    e->items[e->nitems++] = it;
    memset(&it, 0, sizeof it);
    real_text = NULL;
end:
    if (st == RV_OK && already)
        *already = held;
    free(it.path);
    free(it.output);
    free(it.input);
    free(it.model);
    free(real_text);
    export_source_close(&s);
    return st;
}

rv_status rv_export_add_dir(rv_export *e, const char *dir, int *taken, int *already)
{
    char path[4200], out[4400];
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0, n = 0, held = 0;
    rv_status st = RV_OK;
    if (taken)
        *taken = 0;
    if (already)
        *already = 0;
    if (!e || !dir)
        return rv_fail(RV_ERR_INVALID, "export: no export or folder");
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    snprintf(path, sizeof path, "%.*s/index.jsonl", (int)dl, dir);
    FILE *f = fopen(path, "re");
    if (!f)
        return rv_fail(RV_ERR_IO, "%s: %s (an embed --out-dir folder has one once its run ends)",
                       path, strerror(errno));
    for (ssize_t len; st == RV_OK && (len = getline(&line, &cap, f)) >= 0;) {
        lineno++;
        if (strspn(line, " \t\r\n") == (size_t)len)
            continue;
        json_t *o = json_loads(line, 0, NULL);
        const char *output = json_string_value(json_object_get(o, "output"));
        const char *status = json_string_value(json_object_get(o, "status"));
        const char *base = output ? strrchr(output, '/') : NULL;
        base = base ? base + 1 : output;
        if (!json_is_object(o) || !base || !status || !base[0] || strcmp(base, ".") == 0 ||
            strcmp(base, "..") == 0) {
            st = rv_fail(RV_ERR_FORMAT, "%s:%d: not an index line of ringvit embed (an object "
                         "with output and status)", path, lineno);
        } else if (strcmp(status, "ok") == 0 || strcmp(status, "skipped") == 0) {
            /* The outputs of an --out-dir run lie in its folder, wherever it moved. */
            int a = 0;
            snprintf(out, sizeof out, "%.*s/%s", (int)dl, dir, base);
            if ((st = rv_export_add(e, out, &a)) == RV_OK) {
                n++;
                held += a;
            } else {
                st = rv_fail(st, "%s (listed in %s:%d)", rv_last_error(), path, lineno);
            }
        }
        json_decref(o);
    }
    if (st == RV_OK && ferror(f))
        st = rv_fail(RV_ERR_IO, "%s: %s", path, strerror(errno));
    fclose(f);
    free(line);
    if (taken)
        *taken = n;
    if (already)
        *already = held;
    return st;
}

void rv_export_free(rv_export **ep)
{
    rv_export *e = ep ? *ep : NULL;
    if (!e)
        return;
    for (int i = 0; i < e->nitems; i++) {
        free(e->items[i].path);
        free(e->items[i].output);
        free(e->items[i].real);
        free(e->items[i].input);
        free(e->items[i].model);
    }
    free(e->items);
    export_table_free(&e->by_real);
    export_table_free(&e->by_fp);
    export_manifest_clear(&e->m);
    if (e->lock_fd >= 0)
        close(e->lock_fd);
    free(e->first);
    free(e->dir);
    free(e);
    *ep = NULL;
}
