/* embed_inputs.c: the input list of `ringvit embed` (command-line arguments and
 * --manifest files) and the output name of each input. Names are decided once,
 * in input order, before anything runs, so a rerun with the same list (--resume)
 * finds the same outputs. And the output folder: which outputs are complete
 * (--resume), the facts the index records of a skipped one, and the temporary
 * files "<out>.tmp.<pid>" a killed run left (rv_st_writer_write's names). */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "embed.h"
#include "rv_safetensors.h"

int embed_inputs_add(const char *path, embed_input **in, int *n, int *cap)
{
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 16;
        embed_input *p = realloc(*in, sizeof *p * (size_t)nc);
        if (!p) {
            cli_error("embed: out of memory for %d inputs", nc);
            return RV_EXIT_FAIL;
        }
        *in = p;
        *cap = nc;
    }
    embed_input *e = &(*in)[*n];
    memset(e, 0, sizeof *e);
    if (!(e->path = strdup(path))) {
        cli_error("embed: out of memory");
        return RV_EXIT_FAIL;
    }
    (*n)++;
    return 0;
}

int embed_inputs_manifest(const char *manifest, embed_input **in, int *n, int *cap)
{
    FILE *f = fopen(manifest, "r");
    if (!f)
        return cli_usage_error("embed", "cannot read the manifest %s: %s", manifest,
                                  strerror(errno));
    /* Relative entries are relative to the manifest's folder. */
    const char *slash = strrchr(manifest, '/');
    int dirlen = slash ? (int)(slash - manifest) + 1 : 0;
    char *line = NULL, *full = NULL;
    size_t cap_line = 0;
    ssize_t len;
    int rc = 0, lineno = 0;
    while ((len = getline(&line, &cap_line, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' ||
                           line[len - 1] == ' ' || line[len - 1] == '\t'))
            line[--len] = '\0';
        /* getline counts past a NUL byte, the string functions stop at it: such a
         * line would name another file than it holds. */
        if (memchr(line, '\0', (size_t)len)) {
            rc = cli_usage_error("embed", "%s:%d: a NUL byte in the line", manifest, lineno);
            goto end;
        }
        char *s = line;
        while (*s == ' ' || *s == '\t')
            s++;
        if (*s == '\0' || *s == '#')
            continue;
        free(full);
        full = NULL;
        if (s[0] != '/' && dirlen > 0) {
            size_t need = (size_t)dirlen + strlen(s) + 1;
            if (!(full = malloc(need))) {
                cli_error("embed: out of memory");
                rc = RV_EXIT_FAIL;
                goto end;
            }
            snprintf(full, need, "%.*s%s", dirlen, manifest, s);
        }
        if ((rc = embed_inputs_add(full ? full : s, in, n, cap)) != 0)
            goto end;
    }
    if (ferror(f))
        rc = cli_usage_error("embed", "cannot read the manifest %s: %s", manifest,
                                strerror(errno));
end:
    free(line);
    free(full);
    fclose(f);
    return rc;
}

/* ---- a set of names ------------------------------------------------------------ */

/* A taken output name, and (as a stem's plain name) the next -K suffix to try:
 * every suffix below it is taken, so naming stays linear in the inputs however
 * many share a stem (names are never given back). */
typedef struct name_slot {
    char *name; /* NULL: empty; borrowed */
    int next;
} name_slot;

typedef struct name_set {
    name_slot *slot; /* (cap) */
    size_t cap;
} name_set;

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* The slot holding name, or NULL. */
static name_slot *set_find(const name_set *s, const char *name)
{
    for (size_t i = fnv1a(name) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        if (!s->slot[i].name)
            return NULL;
        if (strcmp(s->slot[i].name, name) == 0)
            return &s->slot[i];
    }
}

static void set_add(name_set *s, char *name)
{
    size_t i = fnv1a(name) & (s->cap - 1);
    while (s->slot[i].name)
        i = (i + 1) & (s->cap - 1);
    s->slot[i] = (name_slot){name, 2};
}

/* ---- names ------------------------------------------------------------------------- */

/* The file name of path without folder and last extension ("a/talk.v2.mp4" ->
 * "talk.v2"); "input" when nothing is left. */
static char *stem_of(const char *path)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/')
        b--;
    size_t e = n;
    for (size_t i = n; i > b + 1; i--)
        if (path[i - 1] == '.') {
            e = i - 1;
            break;
        }
    if (e <= b)
        return strdup("input");
    char *s = malloc(e - b + 1);
    if (s) {
        memcpy(s, path + b, e - b);
        s[e - b] = '\0';
    }
    return s;
}

int embed_inputs_name(embed_input *in, int n, const char *out, const char *dir)
{
    if (out) {
        if (!(in[0].output = strdup(out))) {
            cli_error("embed: out of memory");
            return RV_EXIT_FAIL;
        }
        return 0;
    }
    name_set set = {0};
    char **names = calloc((size_t)n, sizeof *names);
    set.cap = 16;
    while (set.cap < (size_t)n * 2 + 2)
        set.cap *= 2;
    set.slot = calloc(set.cap, sizeof *set.slot);
    int rc = RV_EXIT_FAIL;
    if (!names || !set.slot)
        goto end;
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    int here = dl == 1 && dir[0] == '.';
    for (int i = 0; i < n; i++) {
        char *stem = stem_of(in[i].path);
        if (!stem)
            goto end;
        size_t cap = strlen(stem) + 32;
        char *name = malloc(cap);
        if (!name) {
            free(stem);
            goto end;
        }
        snprintf(name, cap, "%s.safetensors", stem);
        name_slot *plain_slot = set_find(&set, name);
        if (plain_slot) { /* taken: the stem's next free -K */
            int k = plain_slot->next;
            do
                snprintf(name, cap, "%s-%d.safetensors", stem, k++);
            while (set_find(&set, name));
            plain_slot->next = k;
        }
        free(stem);
        set_add(&set, name);
        names[i] = name;
        size_t need = dl + strlen(name) + 2;
        if (!(in[i].output = malloc(need)))
            goto end;
        if (here)
            snprintf(in[i].output, need, "%s", name);
        else
            snprintf(in[i].output, need, "%.*s/%s", (int)dl, dir, name);
        char *plain = stem_of(in[i].path);
        if (!plain)
            goto end;
        size_t pl = strlen(plain);
        if (strncmp(name, plain, pl) != 0 || strcmp(name + pl, ".safetensors") != 0) {
            size_t nn = strlen(name) + pl + 128;
            if ((in[i].note = malloc(nn)))
                snprintf(in[i].note, nn, "named %s: %s.safetensors is taken by an earlier input",
                         name, plain);
        }
        free(plain);
    }
    rc = 0;
end:
    if (rc)
        cli_error("embed: out of memory naming %d outputs", n);
    for (int i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
    free(set.slot);
    return rc;
}

void embed_inputs_free(embed_input *in, int n)
{
    for (int i = 0; in && i < n; i++) {
        free(in[i].path);
        free(in[i].output);
        free(in[i].note);
    }
    free(in);
}

/* ---- the output folder ---------------------------------------------------------------- */

int embed_output_complete(const char *path, const embed_settings *set)
{
    return rv_embed_output_complete(path, set->model, set->model_hash, &set->opts);
}

int embed_output_info(const char *path, double *recording_s, int64_t *tokens)
{
    rv_safetensors *st = NULL;
    *recording_s = NAN;
    *tokens = -1;
    if (rv_st_open(path, &st) != RV_OK)
        return -1;
    const char *rs = rv_st_meta(st, "recording_s"), *tk = rv_st_meta(st, "tokens");
    char *end;
    if (rs) {
        double v = strtod(rs, &end);
        if (end != rs && !*end && isfinite(v))
            *recording_s = v;
    }
    if (tk) {
        long long v = strtoll(tk, &end, 10);
        if (end != tk && !*end && v >= 0)
            *tokens = v;
    }
    rv_st_free(&st);
    return 0;
}

/* "<name>.tmp.<digits>" -> name length and pid; 0 when not of that form. */
static size_t tmp_of(const char *entry, long *pid)
{
    const char *t = strstr(entry, ".safetensors.tmp.");
    if (!t)
        return 0;
    const char *d = t + strlen(".safetensors.tmp.");
    if (!*d)
        return 0;
    char *end;
    long v = strtol(d, &end, 10);
    if (*end || v <= 0)
        return 0;
    *pid = v;
    return (size_t)(t - entry) + strlen(".safetensors");
}

int embed_output_clean_stale(const embed_input *in, int n)
{
    if (n <= 0)
        return 0;
    /* Every output lives in one folder (-o's, or --out-dir). */
    const char *o0 = in[0].output, *slash = strrchr(o0, '/');
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - o0) : 1, slash ? o0 : ".");
    if (slash == o0)
        snprintf(dir, sizeof dir, "/");
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long pid = 0;
        size_t len = tmp_of(e->d_name, &pid);
        if (!len)
            continue;
        /* A live process may be writing it (another run, or a rank of this one). */
        if (pid == (long)getpid() || !(kill((pid_t)pid, 0) != 0 && errno == ESRCH))
            continue;
        for (int i = 0; i < n; i++) {
            const char *base = strrchr(in[i].output, '/');
            base = base ? base + 1 : in[i].output;
            if (strlen(base) == len && strncmp(base, e->d_name, len) == 0) {
                char full[8192];
                snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
                if (unlink(full) == 0) {
                    removed++;
                    rv_log(RV_LOG_INFO, "embed: removed %s, left by a run that was stopped", full);
                }
                break;
            }
        }
    }
    closedir(d);
    return removed;
}
