/* convert_worker.c: resizing frames to RGB on a thread of its own, so the
 * decoder keeps decoding while the previous frame is resized (the two together
 * are the whole cost of dense sampling). Jobs run in order from a small bounded
 * queue; each holds a reference to a decoded frame (or asks for the last picture
 * again, for a frame that answers several samples) and the chunk slots to fill.
 * The sampler waits for the queue to drain before it hands a chunk out. */
#include <stdlib.h>
#include <string.h>

#include "ingest_internal.h"

static void *worker_main(void *arg)
{
    rv_cworker *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (w->count == 0 && !w->stop)
            pthread_cond_wait(&w->cv_job, &w->mu);
        if (w->count == 0 && w->stop)
            break;
        rv_cjob *j = &w->jobs[w->head];
        w->busy = 1;
        pthread_mutex_unlock(&w->mu);

        rv_status st = RV_OK;
        if (j->has_frame && w->status == RV_OK) {
            st = rv_convert_frame(&w->conv, w->path, j->frame, w->last_rgb);
            if (st == RV_OK)
                w->converted++;
        }
        if (st == RV_OK && w->status == RV_OK)
            for (int c = 0; c < j->copies; c++)
                memcpy(j->dst + (size_t)c * w->fsize, w->last_rgb, w->fsize);
        av_frame_unref(j->frame);

        pthread_mutex_lock(&w->mu);
        if (st != RV_OK && w->status == RV_OK) {
            w->status = st;
            snprintf(w->err, sizeof w->err, "%s", rv_last_error());
        }
        w->head = (w->head + 1) % RV_CWORKER_JOBS;
        w->count--;
        w->busy = 0;
        pthread_cond_broadcast(&w->cv_done);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

rv_status rv_cworker_start(rv_cworker *w, const char *path, int size, int pad, int rotation,
                           int threads)
{
    memset(w, 0, sizeof *w);
    w->path = path;
    w->fsize = (size_t)size * size * 3;
    rv_convert_init(&w->conv, size, pad, rotation, threads);
    if (!(w->last_rgb = malloc(w->fsize)))
        return rv_fail(RV_ERR_NOMEM, "%s: out of memory for frames", path);
    for (int i = 0; i < RV_CWORKER_JOBS; i++)
        if (!(w->jobs[i].frame = av_frame_alloc()))
            return rv_fail(RV_ERR_NOMEM, "%s: out of memory for frames", path);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv_job, NULL);
    pthread_cond_init(&w->cv_done, NULL);
    w->sync_live = 1;
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0)
        return rv_fail(RV_ERR_INTERNAL, "%s: cannot start the resize thread", path);
    w->running = 1;
    return RV_OK;
}

rv_status rv_cworker_submit(rv_cworker *w, const AVFrame *frame, uint8_t *dst, int copies)
{
    rv_status st = RV_OK;
    pthread_mutex_lock(&w->mu);
    while (w->count == RV_CWORKER_JOBS && w->status == RV_OK)
        pthread_cond_wait(&w->cv_done, &w->mu);
    if (w->status != RV_OK) {
        st = rv_fail(w->status, "%s", w->err);
        goto end;
    }
    rv_cjob *j = &w->jobs[(w->head + w->count) % RV_CWORKER_JOBS];
    j->has_frame = frame != NULL;
    if (frame && av_frame_ref(j->frame, frame) < 0) {
        st = rv_fail(RV_ERR_NOMEM, "%s: out of memory for a frame reference", w->path);
        goto end;
    }
    j->dst = dst;
    j->copies = copies;
    w->count++;
    pthread_cond_signal(&w->cv_job);
end:
    pthread_mutex_unlock(&w->mu);
    return st;
}

rv_status rv_cworker_wait(rv_cworker *w)
{
    pthread_mutex_lock(&w->mu);
    while ((w->count > 0 || w->busy) && w->running)
        pthread_cond_wait(&w->cv_done, &w->mu);
    rv_status st = w->status;
    if (st != RV_OK)
        rv_fail(st, "%s", w->err);
    pthread_mutex_unlock(&w->mu);
    return st;
}

void rv_cworker_stop(rv_cworker *w)
{
    if (w->running) {
        pthread_mutex_lock(&w->mu);
        w->stop = 1;
        pthread_cond_signal(&w->cv_job);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
        w->running = 0;
    }
    if (w->sync_live) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv_job);
        pthread_cond_destroy(&w->cv_done);
        w->sync_live = 0;
    }
    for (int i = 0; i < RV_CWORKER_JOBS; i++)
        av_frame_free(&w->jobs[i].frame);
    free(w->last_rgb);
    w->last_rgb = NULL;
    rv_convert_release(&w->conv);
}
