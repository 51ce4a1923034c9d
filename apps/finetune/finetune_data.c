/* finetune_data.c: the training data of `ringvit finetune`: manifests of
 * "path<TAB>label" lines (classify) or "path" lines (mae; a label column is
 * ignored), '#' comments and blank lines skipped, relative paths resolved
 * against the manifest's folder; the class list (the sorted unique labels of
 * the training manifest); the manifest's content hash; and the order of the
 * epochs, a seeded permutation that is a function of (seed, epoch) only, so a
 * resumed run reads the recordings in the same order as an uninterrupted one. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "finetune.h"

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

uint64_t ft_mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * FNV_PRIME;
    return h;
}

uint64_t ft_classes_hash(const ft_classes *c)
{
    uint64_t h = FNV_OFFSET;
    for (int i = 0; i < c->n; i++)
        h = fnv(h, c->name[i], strlen(c->name[i]) + 1);
    return h;
}

void ft_classes_free(ft_classes *c)
{
    for (int i = 0; c && i < c->n; i++)
        free(c->name[i]);
    if (c) {
        free(c->name);
        c->name = NULL;
        c->n = 0;
    }
}

void ft_data_free(ft_data *d)
{
    for (int i = 0; d && i < d->n; i++)
        free(d->item[i].path);
    if (d) {
        free(d->item);
        memset(d, 0, sizeof *d);
    }
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int find_class(const ft_classes *c, const char *label)
{
    int lo = 0, hi = c->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, r = strcmp(label, c->name[mid]);
        if (r == 0)
            return mid;
        if (r < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return -1;
}

static int oom(void)
{
    cli_error(FT_CMD ": out of memory");
    return RV_EXIT_FAIL;
}

int ft_data_read(const char *manifest, int with_labels, ft_classes *derive,
                 const ft_classes *known, ft_data *out)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(manifest, "rb");
    if (!f)
        return cli_usage_error(FT_CMD, "cannot read the manifest %s: %s", manifest,
                                  strerror(errno));
    const char *slash = strrchr(manifest, '/');
    const int dirlen = slash ? (int)(slash - manifest) + 1 : 0;
    char *line = NULL, **labels = NULL;
    size_t cap_line = 0;
    ssize_t len;
    int rc = 0, lineno = 0, cap = 0;
    uint64_t h = FNV_OFFSET;
    while ((len = getline(&line, &cap_line, f)) >= 0) {
        lineno++;
        h = fnv(h, line, (size_t)len);
        if (memchr(line, 0, (size_t)len)) {
            rc = cli_usage_error(FT_CMD, "%s:%d: a NUL byte in the line", manifest, lineno);
            goto end;
        }
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        char *s = line;
        while (*s == ' ')
            s++;
        if (*s == '\0' || *s == '#')
            continue;
        char *tab = strchr(s, '\t'), *label = NULL;
        if (tab) {
            *tab = '\0';
            label = tab + 1;
            char *tab2 = strchr(label, '\t');
            if (tab2)
                *tab2 = '\0'; /* further columns are ignored */
            while (*label == ' ')
                label++;
            size_t ll = strlen(label);
            while (ll > 0 && label[ll - 1] == ' ')
                label[--ll] = '\0';
        }
        size_t pl = strlen(s);
        while (pl > 0 && s[pl - 1] == ' ')
            s[--pl] = '\0';
        if (with_labels && (!label || !label[0])) {
            rc = cli_usage_error(FT_CMD, "%s:%d: '%s' has no label (classify wants "
                                    "'path<TAB>label' lines)", manifest, lineno, s);
            goto end;
        }
        if (out->n == cap) {
            int nc = cap ? 2 * cap : 64;
            ft_item *p = realloc(out->item, sizeof *p * (size_t)nc);
            char **q = realloc(labels, sizeof *q * (size_t)nc);
            if (p)
                out->item = p;
            if (q)
                labels = q;
            if (!p || !q) {
                rc = oom();
                goto end;
            }
            cap = nc;
        }
        ft_item *it = &out->item[out->n];
        memset(it, 0, sizeof *it);
        labels[out->n] = NULL;
        size_t need = (size_t)dirlen + pl + 1;
        if (!(it->path = malloc(need)) ||
            (with_labels && !(labels[out->n] = strdup(label)))) {
            free(it->path);
            rc = oom();
            goto end;
        }
        if (s[0] != '/' && dirlen > 0)
            snprintf(it->path, need, "%.*s%s", dirlen, manifest, s);
        else
            snprintf(it->path, need, "%s", s);
        out->n++;
    }
    if (ferror(f)) {
        rc = cli_usage_error(FT_CMD, "cannot read the manifest %s: %s", manifest,
                                strerror(errno));
        goto end;
    }
    if (out->n == 0) {
        rc = cli_usage_error(FT_CMD, "the manifest %s lists no recordings", manifest);
        goto end;
    }
    out->hash = h;
    if (!with_labels)
        goto end;
    if (derive) {
        /* The sorted unique labels. */
        char **names = malloc(sizeof *names * (size_t)out->n);
        if (!names) {
            rc = oom();
            goto end;
        }
        memcpy(names, labels, sizeof *names * (size_t)out->n);
        qsort(names, (size_t)out->n, sizeof *names, cmp_str);
        int k = 0;
        for (int i = 0; i < out->n; i++)
            if (k == 0 || strcmp(names[k - 1], names[i]) != 0)
                names[k++] = names[i];
        derive->n = k;
        derive->name = calloc((size_t)k, sizeof *derive->name);
        for (int i = 0; derive->name && i < k; i++)
            if (!(derive->name[i] = strdup(names[i]))) {
                free(names);
                ft_classes_free(derive);
                rc = oom();
                goto end;
            }
        free(names);
        if (!derive->name) {
            rc = oom();
            goto end;
        }
        known = derive;
    }
    for (int i = 0; i < out->n; i++) {
        int c = find_class(known, labels[i]);
        if (c < 0) {
            rc = cli_usage_error(FT_CMD, "%s: label '%s' (of %s) is not a class of the "
                                    "training manifest (%d classes)", manifest, labels[i],
                                    out->item[i].path, known->n);
            goto end;
        }
        out->item[i].label = c;
    }
end:
    for (int i = 0; labels && i < out->n; i++)
        free(labels[i]);
    free(labels);
    free(line);
    fclose(f);
    if (rc)
        ft_data_free(out);
    return rc;
}

/* ---- the order of the epochs ----------------------------------------------------------- */

rv_status ft_order_init(ft_order *o, uint64_t seed, int n)
{
    memset(o, 0, sizeof *o);
    o->seed = seed;
    o->n = n;
    o->epoch = -1;
    if (!(o->perm = malloc(sizeof *o->perm * (size_t)(n > 0 ? n : 1))))
        return rv_fail(RV_ERR_NOMEM, "finetune: out of memory for the order of %d recordings", n);
    return RV_OK;
}

int ft_order_at(ft_order *o, int64_t pos)
{
    const int64_t e = pos / o->n;
    if (e != o->epoch) {
        /* Fisher-Yates; draw i from a hash of (seed, epoch, i). */
        const uint64_t key = ft_mix64(ft_mix64(o->seed ^ 0x6f72646572ull) + (uint64_t)e);
        for (int i = 0; i < o->n; i++)
            o->perm[i] = i;
        for (int i = o->n - 1; i > 0; i--) {
            uint64_t r = ft_mix64(key + (uint64_t)i * 0x9e3779b97f4a7c15ull);
            int j = (int)(r % (uint64_t)(i + 1));
            int t = o->perm[i];
            o->perm[i] = o->perm[j];
            o->perm[j] = t;
        }
        o->epoch = e;
    }
    return o->perm[pos % o->n];
}

void ft_order_free(ft_order *o)
{
    free(o->perm);
    o->perm = NULL;
}
