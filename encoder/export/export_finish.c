/* export_finish.c: rv_export_finish, the rows of the outputs added written into
 * the export. The plan is known before a byte is written (each output's rows
 * were counted when it was added), so every shard's .npy header states its
 * final row count. A last shard an earlier run left partial is completed: a new
 * file holding its rows byte for byte, then the new ones, renamed over it; then
 * new shards; each with its metadata file, under temporary names until all are
 * written and synced, and renamed; the manifest last. A shard file beyond the
 * manifest (a run that stopped before its manifest) is replaced or removed. */
#include <dirent.h>
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

#include "embed_internal.h"
#include "export_internal.h"
#include "st_convert.h"
#include "export_npy.h"

#define PATH_CAP 4300

typedef struct shard_out {
    int index;              /* -1: none open */
    int64_t target;         /* the rows it will hold */
    int64_t rows;           /* written so far */
    FILE *emb, *meta;
    int64_t emb_bytes, meta_bytes;
} shard_out;

typedef struct writer {
    rv_export *e;
    const export_manifest *m; /* the export's settings and previous state */
    int64_t total;          /* rows after this run */
    int k0, nshards;        /* the first shard written, the shards after */
    int64_t keep;           /* rows of shard k0 an earlier run wrote */
    char **tmp;             /* (2 (nshards - k0)) the temporary names of shard k0 + i:
                               [2i] its rows, [2i + 1] its metadata (NULL: none) */
    export_shard *shards;   /* (nshards) after this run */
    export_done *done;      /* (nitems) added by this run */
    int ndone;
    shard_out cur;
    int64_t row;            /* the export's next row */
    void *rowbuf;           /* (dim) in the export's dtype */
} writer;

static void final_name(const rv_export *e, int k, int meta, char *out)
{
    snprintf(out, PATH_CAP, "%s/", e->dir);
    const size_t n = strlen(out);
    snprintf(out + n, PATH_CAP - n, meta ? EXPORT_META_FMT : EXPORT_EMB_FMT, k);
}

static rv_status make_dir(const char *path)
{
    if (mkdir(path, 0755) == 0 || errno == EEXIST) {
        struct stat sb;
        if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
            return RV_OK;
        return rv_fail(RV_ERR_IO, "%s: exists and is not a folder", path);
    }
    return rv_fail(RV_ERR_IO, "cannot create the folder %s: %s", path, strerror(errno));
}

/* Removes, in dir/sub, the temporary files of shards (an earlier run that
 * stopped; the lock is held, so none is another run's), and with from >= 0 the
 * shard files numbered from on (beyond the manifest). */
static void clean(const char *dir, const char *sub, const char *stem, const char *ext, long from)
{
    char path[PATH_CAP];
    snprintf(path, sizeof path, "%s/%s", dir, sub);
    DIR *d = opendir(path);
    if (!d)
        return;
    for (struct dirent *de; (de = readdir(d));) {
        long k;
        int tmp;
        if (!export_shard_file(de->d_name, stem, ext, &k, &tmp) || (!tmp && (from < 0 || k < from)))
            continue;
        char f[PATH_CAP + 256];
        snprintf(f, sizeof f, "%s/%s", path, de->d_name);
        unlink(f);
    }
    closedir(d);
}

static void clean_manifest_tmp(const char *dir)
{
    DIR *d = opendir(dir);
    const char *stem = RV_EXPORT_MANIFEST ".tmp.";
    if (!d)
        return;
    for (struct dirent *de; (de = readdir(d));) {
        if (strncmp(de->d_name, stem, strlen(stem)) != 0)
            continue;
        char f[PATH_CAP + 256];
        snprintf(f, sizeof f, "%s/%s", dir, de->d_name);
        unlink(f);
    }
    closedir(d);
}

static rv_status put(FILE *f, const void *p, size_t n, const char *name)
{
    if (n && fwrite(p, 1, n, f) != n)
        return rv_fail(RV_ERR_IO, "writing %s failed: %s", name, strerror(errno));
    return RV_OK;
}

/* n bytes of src from off onto f: an earlier shard's rows, unchanged. */
static rv_status copy_prefix(const char *src, off_t off, uint64_t n, FILE *f, const char *name)
{
    unsigned char buf[1 << 16];
    rv_status st = RV_OK;
    int fd = open(src, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return rv_fail(RV_ERR_IO, "%s: %s", src, strerror(errno));
    while (n > 0 && st == RV_OK) {
        const ssize_t got = pread(fd, buf, n < sizeof buf ? (size_t)n : sizeof buf, off);
        if (got <= 0) {
            st = rv_fail(RV_ERR_IO, "%s: %s", src, got < 0 ? strerror(errno) : "cut short");
            break;
        }
        st = put(f, buf, (size_t)got, name);
        n -= (uint64_t)got;
        off += got;
    }
    close(fd);
    return st;
}

static FILE *create(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f && fd >= 0)
        close(fd);
    return f;
}

static rv_status close_file(FILE **f, const char *name)
{
    int bad = fflush(*f) != 0 || fsync(fileno(*f)) != 0;
    int err = errno;
    if (fclose(*f) != 0 && !bad) {
        bad = 1;
        err = errno;
    }
    *f = NULL;
    return bad ? rv_fail(RV_ERR_IO, "writing %s failed: %s", name, strerror(err)) : RV_OK;
}

static rv_status shard_close(writer *w)
{
    shard_out *c = &w->cur;
    const int i = c->index - w->k0;
    rv_status st = RV_OK, st2;
    if (c->index < 0)
        return RV_OK;
    if (c->rows != c->target)
        st = rv_fail(RV_ERR_INTERNAL, "export: shard %d has %" PRId64 " rows, planned %" PRId64,
                     c->index, c->rows, c->target);
    if ((st2 = close_file(&c->emb, w->tmp[2 * i])) != RV_OK && st == RV_OK)
        st = st2;
    if ((st2 = close_file(&c->meta, w->tmp[2 * i + 1])) != RV_OK && st == RV_OK)
        st = st2;
    w->shards[c->index] = (export_shard){c->rows, c->emb_bytes, c->meta_bytes};
    c->index = -1;
    return st;
}

/* Opens shard k's temporary files: the .npy header of its final rows, and the
 * rows (and metadata lines) an earlier run wrote into it. */
static rv_status shard_open(writer *w, int k)
{
    const export_manifest *m = w->m;
    shard_out *c = &w->cur;
    const int i = k - w->k0;
    char head[NPY_HEADER_MAX + 16];
    const int64_t left = w->total - (int64_t)k * m->shard_rows;
    *c = (shard_out){.index = k, .target = left < m->shard_rows ? left : m->shard_rows};
    char **tmp = w->tmp + 2 * i; /* [0] rows, [1] metadata */
    for (int f = 0; f < 2; f++) {
        char name[PATH_CAP], t[PATH_CAP + 32];
        final_name(w->e, k, f, name);
        snprintf(t, sizeof t, "%s.tmp.%ld", name, (long)getpid());
        if (!(tmp[f] = strdup(t)))
            return rv_fail(RV_ERR_NOMEM, "export: out of memory");
    }
    if (!(c->emb = create(tmp[0])) || !(c->meta = create(tmp[1])))
        return rv_fail(RV_ERR_IO, "cannot create %s: %s", tmp[c->emb ? 1 : 0], strerror(errno));
    const size_t hl = npy_header(m->dtype, c->target, m->dim, head, sizeof head);
    if (!hl)
        return rv_fail(RV_ERR_INTERNAL, "export: no .npy header for %" PRId64 " rows", c->target);
    rv_status st = put(c->emb, head, hl, tmp[0]);
    c->emb_bytes = (int64_t)hl;
    if (st == RV_OK && k == w->k0 && w->keep > 0) {
        char old[PATH_CAP];
        int64_t rows;
        size_t old_hl;
        const uint64_t bytes = (uint64_t)w->keep * (uint64_t)m->dim * rv_dtype_size(m->dtype);
        final_name(w->e, k, 0, old);
        if ((st = npy_check_file(old, m->dtype, m->dim, &rows, &old_hl)) == RV_OK &&
            (st = copy_prefix(old, (off_t)old_hl, bytes, c->emb, tmp[0])) == RV_OK) {
            final_name(w->e, k, 1, old);
            st = copy_prefix(old, 0, (uint64_t)m->shards[k].meta_bytes, c->meta, tmp[1]);
        }
        c->emb_bytes += (int64_t)bytes;
        c->meta_bytes = m->shards[k].meta_bytes;
        c->rows = w->keep;
    }
    return st;
}

static json_t *real_or_null(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

/* Row r of s: its metadata object. */
static json_t *row_json(const writer *w, const export_item *it, const export_source *s,
                        int64_t r, const float *logits)
{
    double t0, t1;
    export_source_times(s, r, &t0, &t1);
    json_t *o = json_object();
    json_object_set_new(o, "row", json_integer(w->row));
    json_object_set_new(o, "input", json_string(it->input));
    json_object_set_new(o, "output", json_string(it->output));
    json_object_set_new(o, "level", json_string(rv_export_level_name(w->m->level)));
    json_object_set_new(o, "index", json_integer(r));
    json_object_set_new(o, "t_start", json_real(t0));
    json_object_set_new(o, "t_end", json_real(t1));
    json_object_set_new(o, "model", json_string(it->model));
    json_object_set_new(o, "model_hash", json_string(s->model_hash));
    const int k = w->m->top_k < s->classes ? w->m->top_k : s->classes;
    if (logits && k > 0) {
        int32_t ids[RV_EXPORT_MAX_TOP_K];
        double p[RV_EXPORT_MAX_TOP_K];
        char name[32];
        if (embed_labels_rank(logits + r * s->classes, s->classes, s->multi_label, k, ids, p) !=
            RV_OK) {
            json_decref(o);
            return NULL;
        }
        json_t *labels = json_array();
        for (int j = 0; j < k; j++) {
            snprintf(name, sizeof name, "LABEL_%d", ids[j]);
            json_array_append_new(labels, json_pack("{s:s, s:i, s:o}", "label",
                                                    s->labels ? s->labels[ids[j]] : name, "id",
                                                    ids[j], "p", real_or_null(p[j])));
        }
        json_object_set_new(o, "labels", labels);
    }
    return o;
}

/* The rows of one output, at the export's level. */
static rv_status write_item(writer *w, const export_item *it)
{
    const export_manifest *m = w->m;
    export_source s;
    float *x = NULL, *logits = NULL;
    const int64_t rows = it->rows[m->level];
    rv_status st = export_source_open(it->path, m->level, &s);
    if (st != RV_OK)
        return st;
    if (s.fp.size != it->fp.size || s.fp.header != it->fp.header || s.rows != rows) {
        st = rv_fail(RV_ERR_INVALID, "%s: changed while it was exported; nothing was written",
                     it->path);
        goto end;
    }
    export_source_rows_fp(&s);
    const size_t esz = rv_dtype_size(m->dtype);
    if (!(x = malloc((size_t)s.emb->numel * sizeof *x + 1)) ||
        (s.logits && m->top_k > 0 &&
         !(logits = malloc((size_t)s.logits->numel * sizeof *logits)))) {
        st = rv_fail(RV_ERR_NOMEM, "%s: out of memory for its rows", it->path);
        goto end;
    }
    st_to_f32(s.emb, x);
    if (logits)
        st_to_f32(s.logits, logits);
    export_done *d = &w->done[w->ndone];
    *d = (export_done){.row_start = w->row, .fp = s.fp};
    for (int64_t r = 0; r < rows && st == RV_OK; r++) {
        shard_out *c = &w->cur;
        if (c->index < 0 || c->rows == c->target) {
            const int next = c->index < 0 ? w->k0 : c->index + 1;
            if ((st = shard_close(w)) != RV_OK || (st = shard_open(w, next)) != RV_OK)
                break;
        }
        const int i = c->index - w->k0;
        st_rows_out(x + r * m->dim, 1, m->dim, m->normalize, m->dtype, w->rowbuf);
        if ((st = put(c->emb, w->rowbuf, (size_t)m->dim * esz, w->tmp[2 * i])) != RV_OK)
            break;
        json_t *o = row_json(w, it, &s, r, logits);
        char *text = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17) |
                                           JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII)
                       : NULL;
        json_decref(o);
        if (!text) {
            st = rv_fail(RV_ERR_NOMEM, "%s: out of memory for row %" PRId64 "'s metadata",
                         it->path, r);
            break;
        }
        const size_t n = strlen(text);
        if ((st = put(c->meta, text, n, w->tmp[2 * i + 1])) == RV_OK)
            st = put(c->meta, "\n", 1, w->tmp[2 * i + 1]);
        free(text);
        c->emb_bytes += (int64_t)((size_t)m->dim * esz);
        c->meta_bytes += (int64_t)n + 1;
        c->rows++;
        w->row++;
    }
    if (st != RV_OK)
        goto end;
    d->row_end = w->row;
    d->output = strdup(it->output);
    d->real = strdup(it->real);
    d->input = strdup(it->input);
    d->model = strdup(it->model);
    w->ndone++; /* freed with the others from here on */
    if (!d->output || !d->real || !d->input || !d->model) {
        st = rv_fail(RV_ERR_NOMEM, "export: out of memory");
        goto end;
    }
    if (w->e->o.progress)
        w->e->o.progress(w->e->o.user, it->path, rows);
end:
    free(x);
    free(logits);
    export_source_close(&s);
    return st;
}

/* The new shards and metadata files into place, the manifest after them. */
static rv_status commit(writer *w)
{
    rv_export *e = w->e;
    export_manifest *m = &e->m;
    char name[PATH_CAP], sub[PATH_CAP];
    rv_status st = RV_OK;
    for (int k = w->k0; k < w->nshards && st == RV_OK; k++)
        for (int f = 1; f >= 0 && st == RV_OK; f--) { /* metadata, then its rows */
            char **tmp = &w->tmp[2 * (k - w->k0) + f];
            final_name(e, k, f, name);
            if (rename(*tmp, name) != 0) {
                st = rv_fail(RV_ERR_IO, "cannot rename %s onto %s: %s", *tmp, name,
                             strerror(errno));
            } else {
                free(*tmp);
                *tmp = NULL;
            }
        }
    for (int f = 0; f < 2 && st == RV_OK && w->nshards > w->k0; f++) {
        snprintf(sub, sizeof sub, "%s/%s", e->dir, f ? EXPORT_META_DIR : EXPORT_EMB_DIR);
        st = export_sync_dir(sub);
    }
    if (st != RV_OK)
        return st;
    /* The manifest: the previous one with this run's shards and outputs. */
    export_manifest next = *m;
    export_done *done = realloc(m->done, (size_t)(m->ndone + w->ndone) * sizeof *done);
    if (!done)
        return rv_fail(RV_ERR_NOMEM, "export: out of memory");
    memcpy(done + m->ndone, w->done, (size_t)w->ndone * sizeof *done);
    m->done = done;
    m->ndone += w->ndone;
    w->ndone = 0; /* the manifest owns them */
    next.done = m->done;
    next.ndone = m->ndone;
    next.shards = w->shards;
    next.nshards = w->nshards;
    next.rows = w->total;
    if ((st = export_manifest_write(e->dir, &next)) != RV_OK)
        return st;
    free(m->shards);
    m->shards = w->shards;
    w->shards = NULL;
    m->nshards = next.nshards;
    m->rows = next.rows;
    clean(e->dir, EXPORT_EMB_DIR, "emb_", ".npy", w->nshards);
    clean(e->dir, EXPORT_META_DIR, "metadata_", ".jsonl", w->nshards);
    return RV_OK;
}

/* The export's settings for a new export: the level AUTO resolves to. */
static void settle(rv_export *e)
{
    export_manifest *m = &e->m;
    int blocks = 1;
    for (int i = 0; i < e->nitems; i++)
        blocks = blocks && e->items[i].has_blocks;
    m->level = e->o.level != RV_EXPORT_AUTO ? e->o.level
               : blocks                    ? RV_EXPORT_BLOCK
                                           : RV_EXPORT_SEGMENT;
    m->dtype = e->o.dtype;
    m->normalize = e->o.normalize;
    m->shard_rows = e->o.shard_rows;
    m->top_k = e->o.top_k;
}

static rv_status prepare(rv_export *e)
{
    char sub[PATH_CAP];
    rv_status st;
    if ((st = make_dir(e->dir)) != RV_OK || (st = export_lock(e)) != RV_OK)
        return st;
    snprintf(sub, sizeof sub, "%s/%s", e->dir, RV_EXPORT_MANIFEST);
    if (!e->exists && access(sub, F_OK) == 0) /* another run made it after our open */
        return rv_fail(RV_ERR_INVALID, "%s: an export appeared there while this run read its "
                       "outputs; --resume to add to it", e->dir);
    for (int f = 0; f < 2; f++) {
        snprintf(sub, sizeof sub, "%s/%s", e->dir, f ? EXPORT_META_DIR : EXPORT_EMB_DIR);
        if ((st = make_dir(sub)) != RV_OK)
            return st;
    }
    clean(e->dir, EXPORT_EMB_DIR, "emb_", ".npy", -1);
    clean(e->dir, EXPORT_META_DIR, "metadata_", ".jsonl", -1);
    clean_manifest_tmp(e->dir);
    return RV_OK;
}

rv_status rv_export_finish(rv_export *e, rv_export_summary *sum)
{
    writer w = {.e = e, .cur = {.index = -1}};
    rv_status st = RV_OK;
    if (!e || e->finished)
        return rv_fail(RV_ERR_INVALID, "export: %s", e ? "finished already" : "no export");
    e->finished = 1;
    export_manifest *m = &e->m;
    if (!e->exists)
        settle(e);
    int64_t add = 0;
    for (int i = 0; i < e->nitems; i++) {
        const int64_t r = e->items[i].rows[m->level];
        if (r < 0)
            return rv_fail(RV_ERR_INTERNAL, "export: %s was not checked for the %s level",
                           e->items[i].path, rv_export_level_name(m->level));
        add += r;
    }
    w.m = m;
    w.total = m->rows + add;
    w.k0 = (int)(m->rows / m->shard_rows);
    w.keep = m->rows % m->shard_rows;
    const int64_t nshards = (w.total + m->shard_rows - 1) / m->shard_rows;
    if (nshards > EXPORT_MAX_SHARDS)
        return rv_fail(RV_ERR_INVALID, "%s: %" PRId64 " shards of %" PRId64 " rows; more rows a "
                       "shard (--shard-rows)", e->dir, nshards, m->shard_rows);
    w.nshards = (int)nshards; /* at least the manifest's: the rows only grow */
    if (add == 0)
        w.k0 = w.nshards; /* no shard is written, the manifest lists the outputs */
    if (sum)
        *sum = (rv_export_summary){.level = m->level, .dim = m->dim, .already = e->already,
                                   .total_rows = m->rows, .shards = m->nshards,
                                   .first_written = -1};
    if (e->nitems == 0)
        return e->exists ? RV_OK
                         : rv_fail(RV_ERR_INVALID, "export: no output to export into %s", e->dir);
    if (!(w.tmp = calloc(2 * (size_t)(w.nshards - w.k0) + 1, sizeof *w.tmp)) ||
        !(w.shards = calloc((size_t)w.nshards + 1, sizeof *w.shards)) ||
        !(w.done = calloc((size_t)e->nitems, sizeof *w.done)) ||
        !(w.rowbuf = malloc((size_t)m->dim * rv_dtype_size(m->dtype)))) {
        st = rv_fail(RV_ERR_NOMEM, "export: out of memory");
        goto end;
    }
    if (m->nshards)
        memcpy(w.shards, m->shards, (size_t)m->nshards * sizeof *w.shards);
    w.row = m->rows;
    if ((st = prepare(e)) != RV_OK)
        goto end;
    for (int i = 0; i < e->nitems && st == RV_OK; i++)
        st = write_item(&w, &e->items[i]);
    if (st == RV_OK)
        st = shard_close(&w);
    if (st == RV_OK && w.row != w.total)
        st = rv_fail(RV_ERR_INTERNAL, "export: %" PRId64 " rows written, %" PRId64 " planned",
                     w.row, w.total);
    if (st == RV_OK)
        st = commit(&w);
    if (st == RV_OK && sum) {
        sum->outputs = e->nitems;
        sum->rows = add;
        sum->total_rows = m->rows;
        sum->shards = m->nshards;
        sum->first_written = add > 0 ? w.k0 : -1;
    }
end:
    if (w.cur.index >= 0) {
        if (w.cur.emb)
            fclose(w.cur.emb);
        if (w.cur.meta)
            fclose(w.cur.meta);
    }
    for (int i = 0; w.tmp && i < 2 * (w.nshards - w.k0); i++)
        if (w.tmp[i]) {
            unlink(w.tmp[i]);
            free(w.tmp[i]);
        }
    for (int i = 0; w.done && i < w.ndone; i++) {
        free(w.done[i].output);
        free(w.done[i].real);
        free(w.done[i].input);
        free(w.done[i].model);
    }
    free(w.done);
    free(w.tmp);
    free(w.shards);
    free(w.rowbuf);
    return st;
}
