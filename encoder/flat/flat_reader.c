/* flat_reader.c: rv_flat_reader, `ringvit frames` pulled chunk by chunk. A
 * producer thread runs rv_ingest_stream and hands each chunk over through a
 * slot of one: it waits while the caller has not taken the previous chunk, so
 * at most two chunks (one being made, one waiting) exist at once, whatever the
 * recording's length. Closing early tells the producer, which leaves the
 * ingest at its next chunk; the thread is joined before the handle is freed.
 * The recording is opened, and each chunk gathered into its tensors, by
 * ingest's frames collector (rv_ingest.h), as `ringvit frames` does: times on
 * the container's clock. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flat_internal.h"

struct rv_flat_reader {
    char *path;
    rv_ingest_opts io;      /* the plan's: start_s set */
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

/* The chunk's tensors, gathered by the frames collector and taken over. */
static rv_status make_chunk(const rv_flat_reader *r, const rv_ingest_chunk *c, rv_arrays **out)
{
    rv_arrays *a = NULL;
    rv_frames_collector *col = NULL;
    rv_collected arr[RV_FRAMES_ARRAYS];
    rv_status st;
    /* the order the reader has always handed them out in */
    static const int order[RV_FRAMES_ARRAYS] = {RV_FRAMES_PICTURES, RV_FRAMES_TIME,
                                                RV_FRAMES_SOURCE_TIME, RV_FRAMES_AUDIO};
    if ((st = rv_frames_collector_new(r->io.size, RV_KEEP_MEMORY, NULL, &col)) != RV_OK ||
        (st = rv_frames_collect(c, col)) != RV_OK ||
        (st = rv_frames_arrays(col, arr)) != RV_OK || (st = flat_arrays_new(&a)) != RV_OK)
        goto end;
    for (int i = 0; i < RV_FRAMES_ARRAYS && st == RV_OK; i++)
        st = flat_arrays_adopt_collected(a, &arr[order[i]], rv_frames_take(col, order[i]));
    if (st == RV_OK)
        st = flat_arrays_meta(a, json_pack("{sIsIsfsb}", "first_frame", (json_int_t)c->first_frame,
                                           "first_sample", (json_int_t)c->first_sample,
                                           "time_origin", r->time_origin, "last", c->last));
end:
    rv_frames_collector_free(&col);
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
    rv_flat_reader *r = NULL;
    rv_frames_plan plan = {0};
    rv_ingest_opts io;
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
    rv_ingest_opts_default(&io);
    chunk = io.chunk_frames;
    if ((st = flat_opts_parse(opts_json, reader_keys, &o)) != RV_OK ||
        (st = flat_opts_ingest(o, &io, &start_at, NULL)) != RV_OK ||
        (st = flat_opt_int(o, "chunk_frames", 1, 65536, &chunk)) != RV_OK)
        goto end;
    io.chunk_frames = (int)chunk;
    /* As `ringvit frames` opens it: the probe first (its message for a file that
     * is not media), then where the recording starts on the container's clock. */
    if ((st = rv_frames_plan_make(path, &io, start_at, &plan)) != RV_OK)
        goto end;
    r->io = plan.io;
    r->time_origin = plan.tl.time_origin;
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
    rv_frames_plan_release(&plan);
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
