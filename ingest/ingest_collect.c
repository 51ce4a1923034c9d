/* ingest_collect.c: rv_ingest_read, the whole result in memory, for short files
 * and tests; it is rv_ingest_stream with a callback that appends each chunk. */
#include <stdlib.h>
#include <string.h>

#include "ingest_internal.h"

typedef struct collector {
    rv_ingest_result *r;
    int64_t frame_cap, sample_cap;
} collector;

static rv_status grow(void **p, int64_t *cap, int64_t need, size_t elem)
{
    if (need <= *cap)
        return RV_OK;
    int64_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q)
        return rv_fail(RV_ERR_NOMEM, "ingest: out of memory collecting the result");
    *p = q;
    *cap = c;
    return RV_OK;
}

static rv_status append(const rv_ingest_chunk *c, void *user)
{
    collector *col = user;
    rv_ingest_result *r = col->r;
    const size_t fsize = (size_t)c->size * c->size * 3;
    rv_status st;
    if (c->nframes > 0) {
        int64_t need = r->nframes + c->nframes, cap = col->frame_cap;
        if ((st = grow((void **)&r->frames, &cap, need, fsize)) != RV_OK)
            return st;
        cap = col->frame_cap;
        if ((st = grow((void **)&r->frame_time, &cap, need, sizeof(double))) != RV_OK)
            return st;
        cap = col->frame_cap;
        if ((st = grow((void **)&r->source_time, &cap, need, sizeof(double))) != RV_OK)
            return st;
        col->frame_cap = cap;
        memcpy(r->frames + (size_t)r->nframes * fsize, c->frames, fsize * (size_t)c->nframes);
        memcpy(r->frame_time + r->nframes, c->frame_time, sizeof(double) * (size_t)c->nframes);
        memcpy(r->source_time + r->nframes, c->source_time,
               sizeof(double) * (size_t)c->nframes);
        r->nframes = need;
    }
    if (r->nframes == 0 && r->nsamples == 0)
        r->first_sample = c->first_sample;
    if (c->nsamples > 0) {
        int64_t need = r->nsamples + c->nsamples;
        if ((st = grow((void **)&r->audio, &col->sample_cap, need, sizeof(float))) != RV_OK)
            return st;
        memcpy(r->audio + r->nsamples, c->audio, sizeof(float) * (size_t)c->nsamples);
        r->nsamples = need;
    }
    return RV_OK;
}

rv_status rv_ingest_read(const char *path, const rv_ingest_opts *opts, rv_ingest_result **out)
{
    rv_ingest_result *r = calloc(1, sizeof *r);
    rv_status st;
    *out = NULL;
    if (!r)
        return rv_fail(RV_ERR_NOMEM, "ingest: out of memory");
    r->size = opts ? opts->size : 0;
    collector col = {r, 0, 0};
    st = rv_ingest_stream(path, opts, append, &col, &r->stats);
    if (st != RV_OK) {
        rv_ingest_result_free(&r);
        return st;
    }
    *out = r;
    return RV_OK;
}

void rv_ingest_result_free(rv_ingest_result **pr)
{
    rv_ingest_result *r = pr ? *pr : NULL;
    if (!r)
        return;
    free(r->frames);
    free(r->frame_time);
    free(r->source_time);
    free(r->audio);
    free(r);
    *pr = NULL;
}
