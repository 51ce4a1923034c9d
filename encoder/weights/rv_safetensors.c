/* rv_safetensors.c: safetensors reader and writer (format in rv_safetensors.h).
 *
 * Reader: the whole file is mapped (or read) once, the header is parsed with
 * jansson and every entry is validated before the handle is returned, so the
 * accessors never need to check anything again. Tensor data are never copied.
 * Writer: tensors are borrowed until the write, which goes to a temporary file
 * that is fsync'd and renamed onto the destination. */
#include "rv_safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Names come from hostile files: cap how much of one goes into a message. */
#define NAME_FMT "%.200s"
#define META_KEY "__metadata__"

static const struct {
    const char *name;
    size_t size;
} dtype_info[RV_DTYPE_COUNT] = {
    [RV_F32] = {"F32", 4},  [RV_F64] = {"F64", 8}, [RV_F16] = {"F16", 2},
    [RV_BF16] = {"BF16", 2}, [RV_U8] = {"U8", 1},   [RV_I8] = {"I8", 1},
    [RV_I16] = {"I16", 2},  [RV_I32] = {"I32", 4}, [RV_I64] = {"I64", 8},
    [RV_U16] = {"U16", 2},  [RV_U32] = {"U32", 4}, [RV_U64] = {"U64", 8},
    [RV_BOOL] = {"BOOL", 1},
};

size_t rv_dtype_size(rv_dtype dtype)
{
    return (unsigned)dtype < RV_DTYPE_COUNT ? dtype_info[dtype].size : 0;
}

const char *rv_dtype_name(rv_dtype dtype)
{
    return (unsigned)dtype < RV_DTYPE_COUNT ? dtype_info[dtype].name : "?";
}

/* "[2, 3]"; negative extents (wildcards) print as "*". */
static void format_shape(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++) {
        if (shape[i] < 0)
            n += (size_t)snprintf(buf + n, cap - n, "%s*", i ? ", " : "");
        else
            n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, i ? ", " : "", shape[i]);
    }
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
}

/* Product of the extents and its size in bytes, both checked for overflow.
 * Returns 0 on success, -1 if numel overflows int64, -2 if the bytes overflow. */
static int shape_size(int ndim, const int64_t *shape, size_t elem, int64_t *numel,
                      size_t *nbytes)
{
    int64_t n = 1;
    uint64_t b;
    for (int i = 0; i < ndim; i++)
        if (__builtin_mul_overflow(n, shape[i], &n))
            return -1;
    if (__builtin_mul_overflow((uint64_t)n, (uint64_t)elem, &b) || b > SIZE_MAX)
        return -2;
    *numel = n;
    *nbytes = (size_t)b;
    return 0;
}

/* ---- reader ------------------------------------------------------------------ */

enum st_backing { ST_HEAP, ST_MMAP };

struct rv_safetensors {
    char *label;                  /* path or caller's label, for messages */
    const uint8_t *bytes;         /* (len) the whole file */
    size_t len;
    enum st_backing backing;      /* how bytes are released */
    json_t *header;               /* parsed header; tensor names point into its keys */
    json_t *meta;                 /* "__metadata__" inside header, or NULL */
    int count;
    rv_st_tensor *tensors;        /* (count) in data order */
    const rv_st_tensor **by_name; /* (count) the same tensors sorted by name */
};

static int cmp_data_order(const void *pa, const void *pb)
{
    const rv_st_tensor *a = pa, *b = pb;
    const uint8_t *da = a->data, *db = b->data;
    if (da != db)
        return da < db ? -1 : 1;
    if (a->nbytes != b->nbytes)
        return a->nbytes < b->nbytes ? -1 : 1;
    return strcmp(a->name, b->name);
}

static int cmp_name(const void *pa, const void *pb)
{
    const rv_st_tensor *a = *(const rv_st_tensor *const *)pa;
    const rv_st_tensor *b = *(const rv_st_tensor *const *)pb;
    return strcmp(a->name, b->name);
}

/* A JSON integer >= 0, or -1. */
static json_int_t nonneg_int(const json_t *v)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    return json_integer_value(v);
}

static rv_status parse_metadata(const char *lb, json_t *meta)
{
    const char *key;
    json_t *v;
    if (!json_is_object(meta))
        return rv_fail(RV_ERR_FORMAT, "%s: \"" META_KEY "\" is not a JSON object", lb);
    json_object_foreach(meta, key, v) {
        if (!json_is_string(v))
            return rv_fail(RV_ERR_FORMAT,
                           "%s: \"" META_KEY "\" entry '" NAME_FMT "' is not a string", lb,
                           key);
    }
    return RV_OK;
}

/* Validates one header entry and fills t; data/data_len is the data section. */
static rv_status parse_entry(const char *lb, const char *name, const json_t *v,
                             const uint8_t *data, size_t data_len, rv_st_tensor *t)
{
    char shp[256];
    const json_t *jd, *js, *jo;
    const char *ds;
    json_int_t begin, end;
    int d;

    if (!name[0])
        return rv_fail(RV_ERR_FORMAT, "%s: a tensor has an empty name", lb);
    if (!json_is_object(v))
        return rv_fail(RV_ERR_FORMAT, "%s: tensor '" NAME_FMT "': entry is not a JSON object",
                       lb, name);
    t->name = name;

    jd = json_object_get(v, "dtype");
    if (!jd)
        return rv_fail(RV_ERR_FORMAT, "%s: tensor '" NAME_FMT "': missing \"dtype\"", lb, name);
    if (!json_is_string(jd))
        return rv_fail(RV_ERR_FORMAT, "%s: tensor '" NAME_FMT "': \"dtype\" is not a string",
                       lb, name);
    ds = json_string_value(jd);
    for (d = 0; d < RV_DTYPE_COUNT; d++)
        if (strcmp(ds, dtype_info[d].name) == 0)
            break;
    if (d == RV_DTYPE_COUNT)
        return rv_fail(RV_ERR_FORMAT, "%s: tensor '" NAME_FMT "': unknown dtype '%.32s'", lb,
                       name, ds);
    t->dtype = (rv_dtype)d;

    js = json_object_get(v, "shape");
    if (!js)
        return rv_fail(RV_ERR_FORMAT, "%s: tensor '" NAME_FMT "': missing \"shape\"", lb, name);
    if (!json_is_array(js))
        return rv_fail(RV_ERR_FORMAT, "%s: tensor '" NAME_FMT "': \"shape\" is not an array",
                       lb, name);
    if (json_array_size(js) > RV_ST_MAX_DIMS)
        return rv_fail(RV_ERR_FORMAT,
                       "%s: tensor '" NAME_FMT "': shape has %zu dims, more than %d", lb,
                       name, json_array_size(js), RV_ST_MAX_DIMS);
    t->ndim = (int)json_array_size(js);
    for (int i = 0; i < t->ndim; i++) {
        json_int_t e = nonneg_int(json_array_get(js, (size_t)i));
        if (e < 0)
            return rv_fail(RV_ERR_FORMAT,
                           "%s: tensor '" NAME_FMT "': shape[%d] is not a non-negative integer",
                           lb, name, i);
        t->shape[i] = (int64_t)e;
    }
    format_shape(shp, sizeof shp, t->ndim, t->shape);
    switch (shape_size(t->ndim, t->shape, dtype_info[d].size, &t->numel, &t->nbytes)) {
    case -1:
        return rv_fail(RV_ERR_FORMAT,
                       "%s: tensor '" NAME_FMT "': shape %s element count overflows", lb,
                       name, shp);
    case -2:
        return rv_fail(RV_ERR_FORMAT,
                       "%s: tensor '" NAME_FMT "': shape %s of %s byte size overflows", lb,
                       name, shp, ds);
    }

    jo = json_object_get(v, "data_offsets");
    if (!jo)
        return rv_fail(RV_ERR_FORMAT, "%s: tensor '" NAME_FMT "': missing \"data_offsets\"",
                       lb, name);
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return rv_fail(RV_ERR_FORMAT,
                       "%s: tensor '" NAME_FMT "': \"data_offsets\" is not an array of two integers",
                       lb, name);
    begin = nonneg_int(json_array_get(jo, 0));
    end = nonneg_int(json_array_get(jo, 1));
    if (begin < 0 || end < 0)
        return rv_fail(RV_ERR_FORMAT,
                       "%s: tensor '" NAME_FMT "': \"data_offsets\" are not two non-negative integers",
                       lb, name);
    if (begin > end)
        return rv_fail(RV_ERR_FORMAT,
                       "%s: tensor '" NAME_FMT "': data_offsets begin %" JSON_INTEGER_FORMAT
                       " is after end %" JSON_INTEGER_FORMAT, lb, name, begin, end);
    if ((uint64_t)end > data_len)
        return rv_fail(RV_ERR_FORMAT,
                       "%s: tensor '" NAME_FMT "': data_offsets end %" JSON_INTEGER_FORMAT
                       " is beyond the %zu-byte data section (truncated file?)", lb, name,
                       end, data_len);
    if ((uint64_t)(end - begin) != t->nbytes)
        return rv_fail(RV_ERR_FORMAT,
                       "%s: tensor '" NAME_FMT "': data_offsets span %" JSON_INTEGER_FORMAT
                       " bytes but %s %s needs %zu", lb, name, end - begin, ds, shp,
                       t->nbytes);
    t->data = data + begin;
    return RV_OK;
}

/* Validates st->bytes (st->len) and fills the tensor tables. */
static rv_status st_load(rv_safetensors *st)
{
    rv_status rc = RV_OK;
    const char *lb = st->label;
    const uint8_t *data;
    size_t data_len, nobj;
    uint64_t n = 0;
    json_error_t jerr;
    const char *key;
    json_t *v;

    if (st->len < 8) {
        rc = rv_fail(RV_ERR_FORMAT,
                     "%s: file is %zu bytes, shorter than the 8-byte header length field",
                     lb, st->len);
        goto end;
    }
    for (int i = 0; i < 8; i++)
        n |= (uint64_t)st->bytes[i] << (8 * i);
    if (n == 0) {
        rc = rv_fail(RV_ERR_FORMAT, "%s: header length is 0", lb);
        goto end;
    }
    if (n > RV_ST_MAX_HEADER) {
        rc = rv_fail(RV_ERR_FORMAT, "%s: header length %" PRIu64 " exceeds the limit of %u bytes",
                     lb, n, RV_ST_MAX_HEADER);
        goto end;
    }
    if (n > st->len - 8) {
        rc = rv_fail(RV_ERR_FORMAT,
                     "%s: header length %" PRIu64 " exceeds the %zu bytes after the length field (truncated file?)",
                     lb, n, st->len - 8);
        goto end;
    }
    /* jansson checks UTF-8, rejects NUL in strings and keys, allows trailing
     * whitespace (the padding) and, with this flag, duplicate names. */
    st->header = json_loadb((const char *)st->bytes + 8, (size_t)n, JSON_REJECT_DUPLICATES,
                            &jerr);
    if (!st->header) {
        rc = rv_fail(RV_ERR_FORMAT, "%s: header is not valid UTF-8 JSON: %s (line %d, column %d)",
                     lb, jerr.text, jerr.line, jerr.column);
        goto end;
    }
    if (!json_is_object(st->header)) {
        rc = rv_fail(RV_ERR_FORMAT, "%s: header is not a JSON object", lb);
        goto end;
    }
    data = st->bytes + 8 + n;
    data_len = st->len - 8 - (size_t)n;

    nobj = json_object_size(st->header);
    if (nobj > INT_MAX) {
        rc = rv_fail(RV_ERR_FORMAT, "%s: header has %zu entries, too many", lb, nobj);
        goto end;
    }
    st->tensors = calloc(nobj ? nobj : 1, sizeof *st->tensors);
    st->by_name = calloc(nobj ? nobj : 1, sizeof *st->by_name);
    if (!st->tensors || !st->by_name) {
        rc = rv_fail(RV_ERR_NOMEM, "%s: cannot allocate %zu tensor entries", lb, nobj);
        goto end;
    }
    json_object_foreach(st->header, key, v) {
        if (strcmp(key, META_KEY) == 0) {
            rc = parse_metadata(lb, v);
            if (rc != RV_OK)
                goto end;
            st->meta = v;
            continue;
        }
        rc = parse_entry(lb, key, v, data, data_len, &st->tensors[st->count]);
        if (rc != RV_OK)
            goto end;
        st->count++;
    }

    /* The format requires the tensors to tile the data section: sorted by start,
     * each tensor that holds bytes begins exactly where the previous one ended,
     * the first at 0 and the last at data_len. A hole or trailing bytes mean the
     * header and the data disagree (a header length one byte short shifts every
     * tensor and leaves one byte over), so they are refused, not skipped.
     * Zero-byte tensors hold nothing and may sit at any offset in range. */
    qsort(st->tensors, (size_t)st->count, sizeof *st->tensors, cmp_data_order);
    const rv_st_tensor *prev = NULL;
    size_t covered = 0; /* end of the bytes tiled so far */
    for (int i = 0; i < st->count; i++) {
        const rv_st_tensor *t = &st->tensors[i];
        size_t tb = (size_t)((const uint8_t *)t->data - data);
        if (t->nbytes == 0)
            continue;
        if (tb < covered) {
            size_t pb = (size_t)((const uint8_t *)prev->data - data);
            rc = rv_fail(RV_ERR_FORMAT,
                         "%s: tensors '" NAME_FMT "' (bytes %zu..%zu) and '" NAME_FMT
                         "' (bytes %zu..%zu) overlap", lb, prev->name, pb, pb + prev->nbytes,
                         t->name, tb, tb + t->nbytes);
            goto end;
        }
        if (tb > covered) {
            rc = rv_fail(RV_ERR_FORMAT,
                         "%s: bytes %zu..%zu of the %zu-byte data section belong to no tensor "
                         "(a gap before '" NAME_FMT "'%s" NAME_FMT "%s); the tensors must "
                         "cover the data section exactly", lb, covered, tb, data_len, t->name,
                         prev ? ", after '" : "", prev ? prev->name : "", prev ? "'" : "");
            goto end;
        }
        covered = tb + t->nbytes;
        prev = t;
    }
    if (covered != data_len) {
        rc = rv_fail(RV_ERR_FORMAT,
                     "%s: %zu trailing byte%s (bytes %zu..%zu of the %zu-byte data section) "
                     "after the last tensor%s" NAME_FMT "%s belong%s to no tensor (wrong "
                     "header length?); the tensors must cover the data section exactly", lb,
                     data_len - covered, data_len - covered == 1 ? "" : "s", covered, data_len,
                     data_len, prev ? " '" : "", prev ? prev->name : "", prev ? "'" : "",
                     data_len - covered == 1 ? "s" : "");
        goto end;
    }
    for (int i = 0; i < st->count; i++)
        st->by_name[i] = &st->tensors[i];
    qsort(st->by_name, (size_t)st->count, sizeof *st->by_name, cmp_name);

end:
    return rc;
}

static rv_status st_new(const char *label, rv_safetensors **out)
{
    rv_status rc = RV_OK;
    rv_safetensors *st = calloc(1, sizeof *st);
    if (!st || !(st->label = strdup(label))) {
        rc = rv_fail(RV_ERR_NOMEM, "%s: cannot allocate a safetensors handle", label);
        free(st);
        st = NULL;
        goto end;
    }
    st->backing = ST_HEAP;
end:
    *out = st;
    return rc;
}

rv_status rv_st_open(const char *path, rv_safetensors **out)
{
    rv_status rc = RV_OK;
    rv_safetensors *st = NULL;
    uint8_t *buf = NULL;
    struct stat sb;
    int fd = -1;

    if (!out)
        return rv_fail(RV_ERR_INVALID, "rv_st_open: out is NULL");
    *out = NULL;
    if (!path)
        return rv_fail(RV_ERR_INVALID, "rv_st_open: path is NULL");
    rc = st_new(path, &st);
    if (rc != RV_OK)
        goto end;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = rv_fail(RV_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        goto end;
    }
    if (fstat(fd, &sb) != 0) {
        rc = rv_fail(RV_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto end;
    }
    if (!S_ISREG(sb.st_mode)) {
        rc = rv_fail(RV_ERR_IO, "%s: not a regular file", path);
        goto end;
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        rc = rv_fail(RV_ERR_UNSUPPORTED, "%s: file of %lld bytes does not fit in memory", path,
                     (long long)sb.st_size);
        goto end;
    }
    st->len = (size_t)sb.st_size;
    if (st->len >= 8) {
        void *m = mmap(NULL, st->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m != MAP_FAILED) {
            st->bytes = m;
            st->backing = ST_MMAP;
        }
    }
    if (!st->bytes) {
        /* Fallback (or a file too short to hold a header): read it all. */
        size_t got = 0;
        buf = malloc(st->len ? st->len : 1);
        if (!buf) {
            rc = rv_fail(RV_ERR_NOMEM, "%s: cannot allocate %zu bytes to read it", path, st->len);
            goto end;
        }
        while (got < st->len) {
            ssize_t r = read(fd, buf + got, st->len - got);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0) {
                rc = rv_fail(RV_ERR_IO, "%s: read failed: %s", path, strerror(errno));
                goto end;
            }
            if (r == 0)
                break; /* shrank since fstat: validate what is there */
            got += (size_t)r;
        }
        st->bytes = buf;
        st->len = got;
        buf = NULL;
    }
    rc = st_load(st);

end:
    free(buf);
    if (fd >= 0)
        close(fd);
    if (rc != RV_OK)
        rv_st_free(&st);
    *out = st;
    return rc;
}

rv_status rv_st_parse(const void *bytes, size_t len, const char *label, rv_safetensors **out)
{
    rv_status rc = RV_OK;
    rv_safetensors *st = NULL;
    uint8_t *copy = NULL;

    if (!out)
        return rv_fail(RV_ERR_INVALID, "rv_st_parse: out is NULL");
    *out = NULL;
    if (!label)
        label = "<memory>";
    if (!bytes && len)
        return rv_fail(RV_ERR_INVALID, "%s: bytes is NULL but len is %zu", label, len);
    rc = st_new(label, &st);
    if (rc != RV_OK)
        goto end;
    copy = malloc(len ? len : 1);
    if (!copy) {
        rc = rv_fail(RV_ERR_NOMEM, "%s: cannot allocate %zu bytes for a copy", label, len);
        goto end;
    }
    if (len)
        memcpy(copy, bytes, len);
    st->bytes = copy;
    st->len = len;
    copy = NULL;
    rc = st_load(st);

end:
    free(copy);
    if (rc != RV_OK)
        rv_st_free(&st);
    *out = st;
    return rc;
}

const char *rv_st_label(const rv_safetensors *st)
{
    return st ? st->label : NULL;
}

int rv_st_count(const rv_safetensors *st)
{
    return st ? st->count : 0;
}

const rv_st_tensor *rv_st_at(const rv_safetensors *st, int i)
{
    if (!st || i < 0 || i >= st->count)
        return NULL;
    return &st->tensors[i];
}

const rv_st_tensor *rv_st_find(const rv_safetensors *st, const char *name)
{
    if (!st || !name)
        return NULL;
    rv_st_tensor key = {.name = name};
    const rv_st_tensor *kp = &key;
    const rv_st_tensor **hit =
        bsearch(&kp, st->by_name, (size_t)st->count, sizeof *st->by_name, cmp_name);
    return hit ? *hit : NULL;
}

rv_status rv_st_get(const rv_safetensors *st, const char *name, rv_dtype dtype, int ndim,
                    const int64_t *shape, const rv_st_tensor **out)
{
    char want[256], have[256];
    const rv_st_tensor *t;

    if (out)
        *out = NULL;
    if (!st || !name || !out)
        return rv_fail(RV_ERR_INVALID, "rv_st_get: NULL argument");
    if (ndim > RV_ST_MAX_DIMS)
        return rv_fail(RV_ERR_INVALID, "%s: tensor '" NAME_FMT "': expected rank %d exceeds %d",
                       st->label, name, ndim, RV_ST_MAX_DIMS);
    t = rv_st_find(st, name);
    if (!t)
        return rv_fail(RV_ERR_FORMAT, "%s: tensor '" NAME_FMT "' not found", st->label, name);
    if (t->dtype != dtype)
        return rv_fail(RV_ERR_FORMAT, "%s: tensor '" NAME_FMT "': dtype is %s, expected %s",
                       st->label, name, rv_dtype_name(t->dtype), rv_dtype_name(dtype));
    if (ndim >= 0) {
        int ok = t->ndim == ndim;
        for (int i = 0; ok && shape && i < ndim; i++)
            ok = shape[i] < 0 || shape[i] == t->shape[i];
        if (!ok) {
            format_shape(have, sizeof have, t->ndim, t->shape);
            if (shape) {
                format_shape(want, sizeof want, ndim, shape);
            } else {
                snprintf(want, sizeof want, "rank %d", ndim);
            }
            return rv_fail(RV_ERR_FORMAT, "%s: tensor '" NAME_FMT "': shape is %s, expected %s",
                           st->label, name, have, want);
        }
    }
    *out = t;
    return RV_OK;
}

const char *rv_st_meta(const rv_safetensors *st, const char *key)
{
    if (!st || !st->meta || !key)
        return NULL;
    return json_string_value(json_object_get(st->meta, key)); /* NULL if absent */
}

void rv_st_free(rv_safetensors **p)
{
    rv_safetensors *st;
    if (!p || !*p)
        return;
    st = *p;
    json_decref(st->header);
    free(st->tensors);
    free(st->by_name);
    if (st->backing == ST_MMAP)
        munmap((void *)st->bytes, st->len);
    else
        free((void *)st->bytes);
    free(st->label);
    free(st);
    *p = NULL;
}

/* ---- writer ------------------------------------------------------------------ */

typedef struct st_entry {
    char *name;
    rv_dtype dtype;
    int ndim;
    int64_t shape[RV_ST_MAX_DIMS]; /* (ndim) */
    const void *data;              /* (nbytes) borrowed from the caller */
    size_t nbytes;
} st_entry;

struct rv_st_writer {
    st_entry *entries; /* (count) in insertion order = file order */
    int count, cap;
    json_t *names;     /* name -> null: the set of names added, for duplicates */
    json_t *meta;      /* key -> string */
};

/* Strict UTF-8 (no overlongs, no surrogates, <= U+10FFFF), as jansson requires. */
static int utf8_valid(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    while (*s) {
        unsigned c = *s++, cp, min;
        int n;
        if (c < 0x80)
            continue;
        if ((c & 0xE0) == 0xC0) {
            n = 1, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            n = 2, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            n = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return 0;
        }
        for (int i = 0; i < n; i++) {
            if ((*s & 0xC0) != 0x80) /* also stops at the terminating NUL */
                return 0;
            cp = (cp << 6) | (*s++ & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
    }
    return 1;
}

rv_status rv_st_writer_new(rv_st_writer **out)
{
    rv_status rc = RV_OK;
    rv_st_writer *w = NULL;

    if (!out)
        return rv_fail(RV_ERR_INVALID, "rv_st_writer_new: out is NULL");
    w = calloc(1, sizeof *w);
    if (!w || !(w->names = json_object()) || !(w->meta = json_object())) {
        rc = rv_fail(RV_ERR_NOMEM, "safetensors writer: out of memory");
        rv_st_writer_free(&w);
        goto end;
    }
end:
    *out = w;
    return rc;
}

rv_status rv_st_writer_add(rv_st_writer *w, const char *name, rv_dtype dtype, int ndim,
                           const int64_t *shape, const void *data)
{
    rv_status rc = RV_OK;
    st_entry e = {0};
    char shp[256];

    if (!w || !name)
        return rv_fail(RV_ERR_INVALID, "rv_st_writer_add: NULL writer or name");
    if (!name[0])
        return rv_fail(RV_ERR_INVALID, "safetensors writer: tensor name is empty");
    if (!utf8_valid(name))
        return rv_fail(RV_ERR_INVALID, "safetensors writer: tensor name '" NAME_FMT
                       "' is not valid UTF-8", name);
    if (strcmp(name, META_KEY) == 0)
        return rv_fail(RV_ERR_INVALID, "safetensors writer: tensor name '" META_KEY
                       "' is reserved");
    if (json_object_get(w->names, name))
        return rv_fail(RV_ERR_INVALID, "safetensors writer: tensor '" NAME_FMT
                       "' added twice (duplicate name)", name);
    if ((unsigned)dtype >= RV_DTYPE_COUNT)
        return rv_fail(RV_ERR_INVALID, "safetensors writer: tensor '" NAME_FMT
                       "': unknown dtype %d", name, (int)dtype);
    if (ndim < 0 || ndim > RV_ST_MAX_DIMS || (ndim > 0 && !shape))
        return rv_fail(RV_ERR_INVALID, "safetensors writer: tensor '" NAME_FMT
                       "': ndim %d not in 0..%d (or shape is NULL)", name, ndim,
                       RV_ST_MAX_DIMS);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return rv_fail(RV_ERR_INVALID, "safetensors writer: tensor '" NAME_FMT
                           "': shape[%d] = %" PRId64 " is negative", name, i, shape[i]);
        e.shape[i] = shape[i];
    }
    int64_t numel;
    if (shape_size(ndim, e.shape, rv_dtype_size(dtype), &numel, &e.nbytes) != 0) {
        format_shape(shp, sizeof shp, ndim, e.shape);
        return rv_fail(RV_ERR_INVALID, "safetensors writer: tensor '" NAME_FMT
                       "': shape %s size overflows", name, shp);
    }
    if (e.nbytes > 0 && !data)
        return rv_fail(RV_ERR_INVALID, "safetensors writer: tensor '" NAME_FMT
                       "': data is NULL for %zu bytes", name, e.nbytes);
    e.dtype = dtype;
    e.ndim = ndim;
    e.data = data;

    if (w->count == w->cap) {
        if (w->cap > INT_MAX / 2) {
            rc = rv_fail(RV_ERR_INVALID, "safetensors writer: too many tensors");
            goto end;
        }
        int cap = w->cap ? 2 * w->cap : 16;
        st_entry *grown = realloc(w->entries, (size_t)cap * sizeof *grown);
        if (!grown) {
            rc = rv_fail(RV_ERR_NOMEM, "safetensors writer: out of memory");
            goto end;
        }
        w->entries = grown;
        w->cap = cap;
    }
    e.name = strdup(name);
    if (!e.name || json_object_set_new(w->names, name, json_null()) != 0) {
        rc = rv_fail(RV_ERR_NOMEM, "safetensors writer: out of memory");
        goto end;
    }
    w->entries[w->count++] = e;
    e.name = NULL;

end:
    free(e.name);
    return rc;
}

rv_status rv_st_writer_meta(rv_st_writer *w, const char *key, const char *value)
{
    if (!w || !key || !value)
        return rv_fail(RV_ERR_INVALID, "rv_st_writer_meta: NULL argument");
    if (!utf8_valid(key) || !utf8_valid(value))
        return rv_fail(RV_ERR_INVALID, "safetensors writer: metadata '" NAME_FMT
                       "' is not valid UTF-8", key);
    if (json_object_set_new(w->meta, key, json_string(value)) != 0)
        return rv_fail(RV_ERR_NOMEM, "safetensors writer: out of memory");
    return RV_OK;
}

/* Writes all n bytes, in chunks write(2) accepts. */
static rv_status write_all(int fd, const void *buf, size_t n, const char *path,
                           const char *tmp)
{
    const uint8_t *p = buf;
    while (n > 0) {
        size_t chunk = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t r = write(fd, p, chunk);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return rv_fail(RV_ERR_IO, "%s: writing %s%sfailed: %s", path, tmp ? tmp : "",
                           tmp ? " " : "", r < 0 ? strerror(errno) : "no progress");
        p += r;
        n -= (size_t)r;
    }
    return RV_OK;
}

/* Best effort: make the rename itself durable. */
static void fsync_parent(const char *path)
{
    char *dir = strdup(path);
    char *slash;
    int fd;
    if (!dir)
        return;
    slash = strrchr(dir, '/');
    if (!slash)
        strcpy(dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

/* The header object: "__metadata__" and one entry per tensor with its offsets. */
static rv_status build_header(const rv_st_writer *w, const char *path, json_t **out)
{
    rv_status rc = RV_OK;
    json_t *root = json_object(), *shape = NULL, *ent = NULL;
    uint64_t off = 0;
    int ok = root != NULL;

    if (ok && json_object_size(w->meta) > 0)
        ok = json_object_set(root, META_KEY, w->meta) == 0;
    for (int i = 0; ok && i < w->count; i++) {
        const st_entry *e = &w->entries[i];
        uint64_t end;
        if (__builtin_add_overflow(off, (uint64_t)e->nbytes, &end) || end > INT64_MAX) {
            rc = rv_fail(RV_ERR_INVALID, "%s: total tensor data size overflows at '" NAME_FMT
                         "'", path, e->name);
            goto end;
        }
        ok = (shape = json_array()) != NULL;
        for (int d = 0; ok && d < e->ndim; d++)
            ok = json_array_append_new(shape, json_integer((json_int_t)e->shape[d])) == 0;
        if (!ok)
            break;
        /* "o" steals shape, also when json_pack fails. */
        ent = json_pack("{s:s, s:o, s:[I, I]}", "dtype", rv_dtype_name(e->dtype), "shape",
                        shape, "data_offsets", (json_int_t)off, (json_int_t)end);
        shape = NULL;
        ok = ent && json_object_set_new(root, e->name, ent) == 0; /* steals ent */
        off = end;
    }
    if (!ok)
        rc = rv_fail(RV_ERR_NOMEM, "%s: out of memory building the header", path);

end:
    json_decref(shape);
    if (rc != RV_OK) {
        json_decref(root);
        root = NULL;
    }
    *out = root;
    return rc;
}

/* The rename below replaces whatever path names: only nothing or a regular file
 * may be there (a device node, FIFO, directory or symlink is refused; the command
 * line resolves symlinks to their targets before it calls the writer). */
static rv_status check_replaceable(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? RV_OK
                               : rv_fail(RV_ERR_IO, "%s: cannot inspect it: %s", path,
                                         strerror(errno));
    if (S_ISREG(st.st_mode))
        return RV_OK;
    const char *what = S_ISLNK(st.st_mode)    ? "a symlink"
                       : S_ISDIR(st.st_mode)  ? "a directory"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    return rv_fail(RV_ERR_IO, "%s: is %s; refusing to replace it (only a regular file is "
                   "replaced)", path, what);
}

/* The bytes before the data: the 8-byte length, then the header JSON padded
 * with spaces so the data start 8-byte aligned. *head (*len bytes) is malloc'd. */
static rv_status make_head(const rv_st_writer *w, const char *path, uint8_t **head,
                           size_t *len)
{
    json_t *root = NULL;
    char *json = NULL;
    size_t jlen, n;
    rv_status rc = build_header(w, path, &root);
    *head = NULL;
    if (rc != RV_OK)
        goto end;
    json = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    if (!json) {
        rc = rv_fail(RV_ERR_NOMEM, "%s: out of memory serialising the header", path);
        goto end;
    }
    jlen = strlen(json);
    n = (jlen + 7) / 8 * 8; /* 8 + n is a multiple of 8: the data start aligned */
    if (n > RV_ST_MAX_HEADER) {
        rc = rv_fail(RV_ERR_INVALID, "%s: header of %zu bytes exceeds the limit of %u", path,
                     n, RV_ST_MAX_HEADER);
        goto end;
    }
    if (!(*head = malloc(8 + n))) {
        rc = rv_fail(RV_ERR_NOMEM, "%s: out of memory", path);
        goto end;
    }
    for (int i = 0; i < 8; i++)
        (*head)[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(*head + 8, json, jlen);
    memset(*head + 8 + jlen, ' ', n - jlen);
    *len = 8 + n;
end:
    free(json);
    json_decref(root);
    return rc;
}

rv_status rv_st_writer_write_fd(rv_st_writer *w, int fd, const char *label)
{
    uint8_t *head = NULL;
    size_t len = 0;
    if (!w || fd < 0 || !label || !label[0])
        return rv_fail(RV_ERR_INVALID, "rv_st_writer_write_fd: NULL writer, bad descriptor "
                       "or empty label");
    rv_status rc = make_head(w, label, &head, &len);
    if (rc == RV_OK)
        rc = write_all(fd, head, len, label, NULL);
    for (int i = 0; rc == RV_OK && i < w->count; i++)
        if (w->entries[i].nbytes > 0)
            rc = write_all(fd, w->entries[i].data, w->entries[i].nbytes, label, NULL);
    free(head);
    return rc;
}

rv_status rv_st_writer_write(rv_st_writer *w, const char *path)
{
    rv_status rc = RV_OK;
    char *tmp = NULL;
    uint8_t *head = NULL;
    size_t hlen = 0, tmp_cap;
    int fd = -1, tmp_made = 0;

    if (!w || !path || !path[0])
        return rv_fail(RV_ERR_INVALID, "rv_st_writer_write: NULL writer or empty path");
    if ((rc = make_head(w, path, &head, &hlen)) != RV_OK)
        goto end;
    tmp_cap = strlen(path) + 32;
    tmp = malloc(tmp_cap);
    if (!tmp) {
        rc = rv_fail(RV_ERR_NOMEM, "%s: out of memory", path);
        goto end;
    }
    snprintf(tmp, tmp_cap, "%s.tmp.%ld", path, (long)getpid());

    if ((rc = check_replaceable(path)) != RV_OK)
        goto end;
    /* O_TRUNC, not O_EXCL: a temp file left by a crashed process with the same
     * pid (common in containers) must not block writes forever. O_NOFOLLOW keeps
     * a planted symlink from redirecting the write. */
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = rv_fail(RV_ERR_IO, "%s: cannot create temporary file %s: %s", path, tmp,
                     strerror(errno));
        goto end;
    }
    tmp_made = 1;
    rc = write_all(fd, head, hlen, path, tmp);
    for (int i = 0; rc == RV_OK && i < w->count; i++)
        if (w->entries[i].nbytes > 0)
            rc = write_all(fd, w->entries[i].data, w->entries[i].nbytes, path, tmp);
    if (rc != RV_OK)
        goto end;
    if (fsync(fd) != 0) {
        rc = rv_fail(RV_ERR_IO, "%s: fsync of %s failed: %s", path, tmp, strerror(errno));
        goto end;
    }
    int cfd = fd;
    fd = -1;
    if (close(cfd) != 0) {
        rc = rv_fail(RV_ERR_IO, "%s: closing %s failed: %s", path, tmp, strerror(errno));
        goto end;
    }
    if ((rc = check_replaceable(path)) != RV_OK) /* again: the writing took a while */
        goto end;
    if (rename(tmp, path) != 0) {
        rc = rv_fail(RV_ERR_IO, "%s: cannot rename %s onto it: %s", path, tmp, strerror(errno));
        goto end;
    }
    tmp_made = 0;
    fsync_parent(path);

end:
    if (fd >= 0)
        close(fd);
    if (tmp_made)
        unlink(tmp);
    free(tmp);
    free(head);
    return rc;
}

void rv_st_writer_free(rv_st_writer **p)
{
    rv_st_writer *w;
    if (!p || !*p)
        return;
    w = *p;
    for (int i = 0; i < w->count; i++)
        free(w->entries[i].name);
    free(w->entries);
    json_decref(w->names);
    json_decref(w->meta);
    free(w);
    *p = NULL;
}
