/* flat_arrays.c: rv_arrays, the named n-d arrays (C order) plus JSON metadata
 * that every flat call returns; the caller reads them in place and frees the set. */
#include <stdlib.h>
#include <string.h>

#include "flat_internal.h"

typedef struct flat_array {
    char *name;
    const char *dtype;          /* "u8", "i64", "f16", "bf16", "f32", "f64" (static text) */
    int ndim;
    int64_t dims[FLAT_MAX_DIMS];
    void *data;                 /* NULL when empty */
} flat_array;

struct rv_arrays {
    int n, cap;
    flat_array *a;              /* (n) */
    char *meta;                 /* JSON object text */
    void *priv;                 /* flat_arrays_attach */
    void (*priv_free)(void *);
};

static size_t dtype_size(const char *dtype)
{
    if (!dtype)
        return 0;
    if (strcmp(dtype, "u8") == 0)
        return 1;
    if (strcmp(dtype, "f16") == 0 || strcmp(dtype, "bf16") == 0)
        return 2;
    if (strcmp(dtype, "f32") == 0)
        return 4;
    if (strcmp(dtype, "i64") == 0 || strcmp(dtype, "f64") == 0)
        return 8;
    return 0;
}

rv_status flat_arrays_new(rv_arrays **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? RV_OK : rv_fail(RV_ERR_NOMEM, "out of memory");
}

static rv_status add(rv_arrays *a, const char *name, const char *dtype, int ndim,
                     const int64_t *dims, void *data, size_t *bytes)
{
    static const char *const names[] = {"u8", "i64", "f16", "bf16", "f32", "f64"};
    const char *dt = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(dtype, names[i]) == 0)
            dt = names[i];
    if (!dt || ndim < 1 || ndim > FLAT_MAX_DIMS)
        return rv_fail(RV_ERR_INTERNAL, "array %s: bad dtype or rank", name);
    size_t n = dtype_size(dt);
    for (int d = 0; d < ndim; d++) {
        if (dims[d] < 0)
            return rv_fail(RV_ERR_INTERNAL, "array %s: negative dimension", name);
        n *= (size_t)dims[d];
    }
    if (a->n == a->cap) {
        int cap = a->cap ? 2 * a->cap : 8;
        flat_array *p = realloc(a->a, sizeof *p * (size_t)cap);
        if (!p)
            return rv_fail(RV_ERR_NOMEM, "out of memory");
        a->a = p;
        a->cap = cap;
    }
    flat_array *x = &a->a[a->n];
    *x = (flat_array){.dtype = dt, .ndim = ndim, .data = data};
    memcpy(x->dims, dims, sizeof(int64_t) * (size_t)ndim);
    if (!(x->name = strdup(name)))
        return rv_fail(RV_ERR_NOMEM, "out of memory");
    a->n++;
    *bytes = n;
    return RV_OK;
}

rv_status flat_arrays_add(rv_arrays *a, const char *name, const char *dtype, int ndim,
                          const int64_t *dims, const void *data, void **dst)
{
    size_t bytes = 0;
    rv_status st = add(a, name, dtype, ndim, dims, NULL, &bytes);
    if (st != RV_OK)
        return st;
    flat_array *x = &a->a[a->n - 1];
    if (bytes > 0) {
        if (!(x->data = malloc(bytes)))
            return rv_fail(RV_ERR_NOMEM, "out of memory for array %s (%zu bytes)", name, bytes);
        if (data)
            memcpy(x->data, data, bytes);
    }
    if (dst)
        *dst = x->data;
    return RV_OK;
}

rv_status flat_arrays_adopt(rv_arrays *a, const char *name, const char *dtype, int ndim,
                            const int64_t *dims, void *data)
{
    size_t bytes = 0;
    rv_status st = add(a, name, dtype, ndim, dims, data, &bytes);
    if (st != RV_OK)
        free(data);
    else if (bytes == 0) {
        free(data);
        a->a[a->n - 1].data = NULL;
    }
    return st;
}

rv_status flat_arrays_adopt_collected(rv_arrays *a, const rv_collected *c, void *data)
{
    return flat_arrays_adopt(a, c->name, c->dtype, c->ndim, c->shape, data);
}

rv_status flat_arrays_meta(rv_arrays *a, json_t *obj)
{
    char *text = obj ? json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(obj);
    if (!text)
        return rv_fail(RV_ERR_NOMEM, "out of memory");
    free(a->meta);
    a->meta = text;
    return RV_OK;
}

void flat_arrays_attach(rv_arrays *a, void *priv, void (*free_fn)(void *))
{
    a->priv = priv;
    a->priv_free = free_fn;
}

void *flat_arrays_private(const rv_arrays *a)
{
    return a ? a->priv : NULL;
}

const void *flat_arrays_get(const rv_arrays *a, const char *name, const char *dtype,
                            int64_t *count)
{
    int i = rv_arrays_find(a, name);
    if (i < 0 || strcmp(a->a[i].dtype, dtype) != 0)
        return NULL;
    int64_t n = 1;
    for (int d = 0; d < a->a[i].ndim; d++)
        n *= a->a[i].dims[d];
    if (count)
        *count = n;
    return a->a[i].data ? a->a[i].data : (const void *)"";
}

int rv_arrays_count(const rv_arrays *a)
{
    return a ? a->n : 0;
}

int rv_arrays_find(const rv_arrays *a, const char *name)
{
    for (int i = 0; a && name && i < a->n; i++)
        if (strcmp(a->a[i].name, name) == 0)
            return i;
    return -1;
}

static const flat_array *at(const rv_arrays *a, int i)
{
    return a && i >= 0 && i < a->n ? &a->a[i] : NULL;
}

const char *rv_arrays_name(const rv_arrays *a, int i)
{
    const flat_array *x = at(a, i);
    return x ? x->name : NULL;
}

const char *rv_arrays_dtype(const rv_arrays *a, int i)
{
    const flat_array *x = at(a, i);
    return x ? x->dtype : NULL;
}

int rv_arrays_ndim(const rv_arrays *a, int i)
{
    const flat_array *x = at(a, i);
    return x ? x->ndim : 0;
}

int64_t rv_arrays_dim(const rv_arrays *a, int i, int d)
{
    const flat_array *x = at(a, i);
    return x && d >= 0 && d < x->ndim ? x->dims[d] : 0;
}

const void *rv_arrays_data(const rv_arrays *a, int i)
{
    const flat_array *x = at(a, i);
    return x ? x->data : NULL;
}

const char *rv_arrays_meta(const rv_arrays *a)
{
    return a && a->meta ? a->meta : "{}";
}

void rv_arrays_free(rv_arrays **ap)
{
    if (!ap || !*ap)
        return;
    rv_arrays *a = *ap;
    for (int i = 0; i < a->n; i++) {
        free(a->a[i].name);
        free(a->a[i].data);
    }
    free(a->a);
    free(a->meta);
    if (a->priv_free)
        a->priv_free(a->priv);
    free(a);
    *ap = NULL;
}

void rv_flat_free(void *p)
{
    free(p);
}

rv_status rv_arrays_new(const char *meta_json, rv_arrays **out)
{
    rv_arrays *a = NULL;
    *out = NULL;
    rv_status st = flat_arrays_new(&a);
    if (st == RV_OK && meta_json && meta_json[0]) {
        json_error_t err;
        json_t *m = json_loads(meta_json, 0, &err);
        if (!json_is_object(m)) {
            json_decref(m);
            st = rv_fail(RV_ERR_INVALID, "arrays: the metadata is not a JSON object");
        } else {
            st = flat_arrays_meta(a, m);
        }
    }
    if (st != RV_OK)
        rv_arrays_free(&a);
    *out = a;
    return st;
}

rv_status rv_arrays_add(rv_arrays *a, const char *name, const char *dtype, int ndim,
                        const int64_t *dims, const void *data)
{
    /* What callers pass in (token arrays) is u8, i64, f32 or f64; f16 and bf16
     * only come out (embeddings written at a lower precision). */
    const int input_dtype = dtype && dtype_size(dtype) && strcmp(dtype, "f16") != 0 &&
                            strcmp(dtype, "bf16") != 0;
    if (!a || !name || !input_dtype || ndim < 1 || ndim > FLAT_MAX_DIMS ||
        (ndim > 0 && !dims))
        return rv_fail(RV_ERR_INVALID, "arrays: array %s: dtype must be u8, i64, f32 or f64 "
                       "and 1 to %d dimensions", name ? name : "(null)", FLAT_MAX_DIMS);
    for (int d = 0; d < ndim; d++)
        if (dims[d] < 0)
            return rv_fail(RV_ERR_INVALID, "arrays: array %s: negative dimension", name);
    if (rv_arrays_find(a, name) >= 0)
        return rv_fail(RV_ERR_INVALID, "arrays: a second array called %s", name);
    return flat_arrays_add(a, name, dtype, ndim, dims, data, NULL);
}
