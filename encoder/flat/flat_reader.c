/* flat_reader.c: rv_flat_reader, `ringvit frames` pulled chunk by chunk. A
 * producer thread runs rv_ingest_stream and hands each chunk over through a
 * slot of one: it waits while the caller has not taken the previous chunk, so
 * at most two chunks (one being made, one waiting) exist at once, whatever the
 * recording's length. Closing early tells the producer, which leaves the
 * ingest at its next chunk; the thread is joined before the handle is freed.
 * Times are moved to the container's clock as cmd_frames does (+ t0). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flat_internal.h"

struct rv_flat_reader {
    char *path;
    rv_ingest_opts io;
    double origin_s;        /* t0 on the container's clock, s (whole microseconds) */
    double time_origin;     /* the first frame's pts, s */
    unsigned mark;          /* rv_flat_interrupt's counter at open */
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* the slot filled or emptied, the producer done, closing */
    rv_arrays *slot;        /* the chunk waiting for the caller */
    int done, closing;
    rv_status st;           /* the producer's result, with its message */
    char msg[1024];
};

static rv_status make_chunk(const rv_flat_reader *r, const rv_ingest_chunk *c, rv_arrays **out)
{
    rv_arrays *a = NULL;
    const int64_t S = c->size > 0 ? c->size : r->io.size;
    int64_t fdims[4] = {c->nframes, S, S, 3}, tdims[1] = {c->nframes}, adims[1] = {c->nsamples};
    double *t = NULL, *src = NULL;
    rv_status st;
    if ((st = flat_arrays_new(&a)) != RV_OK ||
        (st = flat_arrays_add(a, "frames", "u8", 4, fdims, c->frames, NULL)) != RV_OK ||
        (st = flat_arrays_add(a, "frame_time", "f64", 1, tdims, NULL, (void **)&t)) != RV_OK ||
        (st = flat_arrays_add(a, "frame_source_time", "f64", 1, tdims, NULL, (void **)&src)) != RV_OK ||
        (st = flat_arrays_add(a, "audio", "f32", 1, adims, c->audio, NULL)) != RV_OK)
        goto end;
    for (int i = 0; i < c->nframes; i++) {
        t[i] = c->frame_time[i] + r->origin_s;
        src[i] = c->source_time[i] + r->origin_s;
    }
    st = flat_arrays_meta(a, json_pack("{sIsIsfsb}", "first_frame", (json_int_t)c->first_frame,
                                       "first_sample", (json_int_t)c->first_sample, "time_origin",
                                       r->time_origin, "last", c->last));
end:
    if (st != RV_OK)
        rv_arrays_free(&a);
    *out = a;
    return st;
}

static rv_status on_chunk(const rv_ingest_chunk *c, void *user)
{
    rv_flat_reader *r = user;
    rv_arrays *a = NULL;
    rv_status st = flat_interrupt_check(r->mark);
    if (st != RV_OK)
        return st;
    if (c->nframes == 0 && c->nsamples == 0)
        return RV_OK; /* the empty final chunk adds nothing */
    if ((st = make_chunk(r, c, &a)) != RV_OK)
        return st;
    pthread_mutex_lock(&r->mu);
    while (r->slot && !r->closing)
        pthread_cond_wait(&r->cv, &r->mu);
    if (!r->closing) {
        r->slot = a;
        a = NULL;
        pthread_cond_broadcast(&r->cv);
    }
    int closing = r->closing;
    pthread_mutex_unlock(&r->mu);
    rv_arrays_free(&a);
    return closing ? rv_fail(RV_ERR_IO, "reader closed") : RV_OK;
}

static void *producer(void *arg)
{
    rv_flat_reader *r = arg;
    rv_status st = rv_ingest_stream(r->path, &r->io, on_chunk, r, NULL);
    pthread_mutex_lock(&r->mu);
    r->st = st;
    if (st != RV_OK)
        snprintf(r->msg, sizeof r->msg, "%s", rv_last_error());
    r->done = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static const char *const reader_keys[] = {FLAT_INGEST_KEYS, "chunk_frames", NULL};

rv_status rv_flat_reader_open(const char *path, const char *opts_json, rv_flat_reader **out)
{
    json_t *o = NULL;
    rv_probe *probe = NULL;
    rv_flat_reader *r = NULL;
    rv_timeline tl;
    double start_at = NAN;
    int64_t chunk = 0;
    rv_status st;
    *out = NULL;
    if (!path) {
        st = rv_fail(RV_ERR_INVALID, "reader: no path");
        goto end;
    }
    if (!(r = calloc(1, sizeof *r)) || !(r->path = strdup(path))) {
        st = rv_fail(RV_ERR_NOMEM, "out of memory");
        goto end;
    }
    r->mark = flat_interrupt_mark();
    rv_ingest_opts_default(&r->io);
    chunk = r->io.chunk_frames;
    if ((st = flat_opts_parse(opts_json, reader_keys, &o)) != RV_OK ||
        (st = flat_opts_ingest(o, &r->io, &start_at, NULL)) != RV_OK ||
        (st = flat_opt_int(o, "chunk_frames", 1, 65536, &chunk)) != RV_OK)
        goto end;
    r->io.chunk_frames = (int)chunk;
    /* As cmd_frames: the probe first (its message for a file that is not media),
     * then where the recording starts on the container's clock. */
    if ((st = rv_probe_file(path, &probe)) != RV_OK ||
        (st = rv_ingest_timeline(path, &r->io, &tl)) != RV_OK)
        goto end;
    r->io.start_s = rv_timeline_start(&tl, start_at);
    if ((st = rv_ingest_opts_check(&r->io)) != RV_OK)
        goto end;
    r->origin_s = (double)tl.t0_us / 1e6;
    r->time_origin = tl.origin_s;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->started = 1;
    int e = pthread_create(&r->thread, NULL, producer, r);
    if (e != 0) {
        r->done = 1;
        r->thread = pthread_self();
        st = rv_fail(RV_ERR_NOMEM, "reader: cannot start its thread: %s", strerror(e));
        r->started = 2; /* initialised, no thread to join */
        goto end;
    }
    *out = r;
    r = NULL;
end:
    rv_flat_reader_close(&r);
    rv_probe_free(&probe);
    json_decref(o);
    return st;
}

rv_status rv_flat_reader_next(rv_flat_reader *r, rv_arrays **chunk)
{
    *chunk = NULL;
    if (!r)
        return rv_fail(RV_ERR_INVALID, "reader: closed");
    rv_status st = RV_OK;
    pthread_mutex_lock(&r->mu);
    while (!r->slot && !r->done)
        pthread_cond_wait(&r->cv, &r->mu);
    if (r->slot) {
        *chunk = r->slot;
        r->slot = NULL;
        pthread_cond_broadcast(&r->cv);
    } else if (r->st != RV_OK) {
        st = r->st;
    }
    pthread_mutex_unlock(&r->mu);
    /* The producer's message, on this thread. */
    return st != RV_OK ? rv_fail(st, "%s", r->msg) : RV_OK;
}

void rv_flat_reader_close(rv_flat_reader **rp)
{
    if (!rp || !*rp)
        return;
    rv_flat_reader *r = *rp;
    if (r->started) {
        pthread_mutex_lock(&r->mu);
        r->closing = 1;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        if (r->started == 1)
            pthread_join(r->thread, NULL);
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
    }
    rv_arrays_free(&r->slot);
    free(r->path);
    free(r);
    *rp = NULL;
}
