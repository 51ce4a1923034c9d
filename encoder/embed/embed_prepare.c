/* embed_prepare.c: one recording's work on one rank before the encoder, which
 * needs no other rank:
 *   1. probe: reads the file's headers and plans the token sequence from them
 *      (rv_tok_recording_plan), the same on every rank; a file that states no
 *      duration (a still image) stops here, to be counted by the group;
 *   2. tokens: refuses an input over max_tokens, plans the shards (zigzag with
 *      causal full attention, else contiguous) and decodes and tokenizes only
 *      this rank's slice, streamed chunk by chunk and embedded batch by batch
 *      into arrays sized from the plan, so a rank never holds more than its slice.
 * With prefetch both run on a worker thread of the rank (one input after
 * another, compute threads of its own) while the encoder works on the previous
 * input; failures are recorded (status and message) and voted on by the group
 * when the input's turn comes (embed_run.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "embed_internal.h"
#include "rv_clock.h"

/* ---- the slice ---------------------------------------------------------------------- */

size_t embed_slice_bytes(const embed_slice *s, int dim)
{
    return (size_t)s->t.len * (1 + 4 * sizeof(int64_t) + 2 * sizeof(double) + dim * sizeof(float));
}

/* Each stored batch: its embeddings now, since its patches die with the batch. */
static rv_status on_batch(const rv_tok_batch *b, int64_t offset, void *user)
{
    embed_slice *s = user;
    rv_comm_watch_beat(s->watch);
    if (embed_stopping(s->job))
        return rv_fail(RV_ERR_IO, "stopped by a signal");
    const int D = s->model->cfg.dim;
    rv_vit_tokens bt = {.len = b->count, .modality = b->modality, .pos = b->pos, .seq_time = b->seq_time,
                        .nvideo = b->nvideo, .video = b->video, .naudio = b->naudio,
                        .audio = b->audio, .grid = s->grid, .audio_steps = s->audio_steps,
                        .window = b->window, .layout = s->layout};
    rv_status st = rv_vit_embed(s->model, s->hb, &bt, s->y + (size_t)offset * D, &s->flops);
    if (st != RV_OK)
        return st;
    if (s->job->h.tokens)
        s->job->h.tokens(s->job->h.user, b->count);
    return RV_OK;
}

/* ---- the two stages ------------------------------------------------------------------ */

static void record(rv_status st, rv_status *where, char *msg)
{
    *where = st;
    if (st != RV_OK) {
        const char *m = rv_last_error();
        snprintf(msg, EMBED_MSG, "%s", m && m[0] ? m : rv_status_name(st));
    }
}

void embed_prepare_probe(rv_embed_job *j, rv_embed_input *in)
{
    double t0 = rv_clock_s();
    in->t_start = t0;
    rv_clear_error();
    rv_status st = rv_tok_recording_plan(in->path, &j->to, &j->io, j->o.start_at, &in->rec,
                                         &in->probe);
    record(st, &in->probe_st, in->probe_msg);
    in->reached = st == RV_OK && in->rec.need_count ? PREP_PROBED : PREP_DONE;
    in->probe_s = rv_clock_s() - t0;
}

/* The input's size checked against max_tokens (tokens, or segments of the
 * pooled output) before any of it is decoded, the same arithmetic on every
 * rank, so all refuse alike; a long one is announced. */
static rv_status check_size(rv_embed_job *j, const rv_embed_input *in)
{
    const rv_tok_layout *L = &in->rec.layout;
    const char *name = in->path ? in->path : "tokens";
    if (L->nvideo + L->naudio == 0)
        return rv_fail(RV_ERR_FORMAT, "%s: nothing to embed: no video or audio tokens (%lld "
                       "frames, %lld audio samples at these settings)", name,
                       (long long)L->nframes, (long long)L->nsamples);
    const double hop = j->o.hop_s > 0 ? j->o.hop_s : j->o.segment_s;
    const double segments =
        isfinite(in->rec.end_s) && hop > 0 ? ceil((in->rec.end_s - in->rec.io.start_s) / hop) : 0;
    if (L->seq > j->o.max_tokens || segments > (double)j->o.max_tokens)
        return rv_fail(RV_ERR_INVALID,
                       "%lld tokens and %.0f segments (of %g s) at these settings, more than "
                       "--max-tokens %lld; raise --max-tokens if the memory and time are meant "
                       "(each token and segment holds several rows of %d floats per rank)",
                       (long long)L->seq, segments, hop, (long long)j->o.max_tokens,
                       j->m.model->cfg.dim);
    if (L->seq >= RV_EMBED_LONG_TOKENS && j->rank == 0 && j->h.plan) {
        const rv_vit_config *cfg = &j->m.model->cfg;
        double flops = j->o.span.kind == RV_SPAN_FULL
                           ? rv_vit_forward_flops(cfg, L->seq, L->nvideo, L->naudio, j->o.causal)
                           : 0;
        j->h.plan(j->h.user, name, L->seq, L->nvideo, L->naudio, in->rec.end_s, flops);
    }
    return RV_OK;
}

rv_status embed_plan_slice(rv_embed_job *j, rv_embed_input *in, int keep_patches,
                            rv_backend *hb, rv_comm_watch *watch)
{
    const rv_tok_layout *L = &in->rec.layout;
    const int D = j->m.model->cfg.dim;
    embed_slice *s = &in->s;
    rv_status st = check_size(j, in);
    if (st != RV_OK)
        return st;
    /* Zigzag balances causal full attention; a span wants contiguous slices (its
     * ranks talk only to those its keys reach). */
    const rv_shard_kind kind = j->o.causal && j->o.span.kind == RV_SPAN_FULL
                                   ? RV_SHARD_ZIGZAG : RV_SHARD_CONTIGUOUS;
    if ((st = rv_tok_slice_plan(L, kind, j->size, j->rank, keep_patches, &s->t)) != RV_OK)
        return st;
    if (!(s->y = malloc(sizeof(float) * (size_t)(s->t.len > 0 ? s->t.len : 1) * (size_t)D)))
        return rv_fail(RV_ERR_NOMEM, "rank %d: out of memory for the embeddings of its %lld "
                       "tokens", j->rank, (long long)s->t.len);
    s->model = j->m.model;
    s->grid = L->grid;
    s->audio_steps = rv_vit_audio_steps(L);
    s->layout = L;
    s->hb = hb;
    s->watch = watch;
    s->job = j;
    return RV_OK;
}

void embed_prepare_tokens(rv_embed_job *j, rv_embed_input *in, rv_backend *hb,
                          rv_comm_watch *watch)
{
    double t0 = rv_clock_s();
    in->reached = PREP_DONE;
    rv_clear_error();
    rv_status st = embed_plan_slice(j, in, 0, hb, watch);
    if (st == RV_OK)
        st = rv_tok_slice_fill(in->path, &in->rec.layout, &in->s.t, on_batch, &in->s, &in->ts);
    record(st, &in->tok_st, in->tok_msg);
    in->tok_wall = rv_clock_s() - t0;
}

/* ---- ahead, on a thread ------------------------------------------------------------------ */

/* A rank's worker that prepares the inputs queued to it, one after another, with
 * compute threads of its own (the rank's are the encoder's meanwhile). */
struct embed_ahead {
    rv_embed_job *j;
    pthread_mutex_t mu;
    pthread_cond_t cv;            /* an input queued, or one finished, or quit */
    rv_embed_input **q;           /* (cap) the queue, a ring */
    int cap, head, n;
    int quit;
    pthread_t thread;
    rv_backend *hb;               /* the worker's host backend (the patch embedding) */
};

static void *ahead_main(void *arg)
{
    embed_ahead *a = arg;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->quit && a->n == 0)
            pthread_cond_wait(&a->cv, &a->mu);
        if (a->quit)
            break;
        rv_embed_input *in = a->q[a->head];
        a->head = (a->head + 1) % a->cap;
        a->n--;
        pthread_mutex_unlock(&a->mu);
        embed_prepare_probe(a->j, in);
        if (in->probe_st == RV_OK && !in->rec.need_count)
            embed_prepare_tokens(a->j, in, a->hb, NULL);
        pthread_mutex_lock(&a->mu);
        atomic_store(&in->finished, 1);
        pthread_cond_broadcast(&a->cv);
    }
    /* Stopped: what is still queued is never prepared. */
    for (; a->n > 0; a->n--, a->head = (a->head + 1) % a->cap) {
        rv_embed_input *in = a->q[a->head];
        in->probe_st = RV_ERR_IO;
        snprintf(in->probe_msg, sizeof in->probe_msg, "not prepared: the batch stopped");
        in->reached = PREP_DONE;
        atomic_store(&in->finished, 1);
    }
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

rv_status embed_ahead_create(rv_embed_job *j, int slots, embed_ahead **out)
{
    *out = NULL;
    embed_ahead *a = calloc(1, sizeof *a);
    rv_status st = RV_OK;
    if (!a || !(a->q = calloc((size_t)slots, sizeof *a->q))) {
        free(a);
        return rv_fail(RV_ERR_NOMEM, "rank %d: out of memory", j->rank);
    }
    a->j = j;
    a->cap = slots;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    if ((st = rv_backend_cpu_create(j->o.threads, &a->hb)) == RV_OK) {
        int e = pthread_create(&a->thread, NULL, ahead_main, a);
        if (e != 0)
            st = rv_fail(RV_ERR_NOMEM, "rank %d: cannot start a thread to prepare the next "
                         "inputs: %s", j->rank, strerror(e));
    }
    if (st != RV_OK) {
        rv_backend_free(&a->hb);
        pthread_mutex_destroy(&a->mu);
        pthread_cond_destroy(&a->cv);
        free(a->q);
        free(a);
        return st;
    }
    *out = a;
    return RV_OK;
}

void embed_ahead_push(embed_ahead *a, rv_embed_input *in)
{
    pthread_mutex_lock(&a->mu);
    in->queued = 1;
    atomic_store(&in->finished, 0);
    a->q[(a->head + a->n) % a->cap] = in;
    a->n++;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

/* One wait of at most ms on cv (mu held), then a beat of watch with mu
 * released: a rank that waits on a thread of its own still says it is alive. */
static void wait_beating(pthread_cond_t *cv, pthread_mutex_t *mu, long ms, rv_comm_watch *watch)
{
    struct timespec until = rv_clock_realtime_after(ms * 1e-3);
    pthread_cond_timedwait(cv, mu, &until);
    pthread_mutex_unlock(mu);
    rv_comm_watch_beat(watch);
    pthread_mutex_lock(mu);
}

double embed_ahead_wait(embed_ahead *a, rv_embed_input *in)
{
    if (!in->queued)
        return 0;
    double t0 = rv_clock_s();
    pthread_mutex_lock(&a->mu);
    /* The group waits in the next vote: say this rank is working. */
    while (!atomic_load(&in->finished))
        wait_beating(&a->cv, &a->mu, 100, a->j->watch);
    pthread_mutex_unlock(&a->mu);
    in->queued = 0;
    return rv_clock_s() - t0;
}

void embed_ahead_cancel(embed_ahead *a, rv_embed_input *in)
{
    if (!in->queued)
        return;
    pthread_mutex_lock(&a->mu);
    /* Still in the queue: taken out, never started; else wait for the worker. */
    for (int i = 0; i < a->n; i++) {
        const int at = (a->head + i) % a->cap;
        if (a->q[at] != in)
            continue;
        for (int k = i; k + 1 < a->n; k++)
            a->q[(a->head + k) % a->cap] = a->q[(a->head + k + 1) % a->cap];
        a->n--;
        atomic_store(&in->finished, 1);
        break;
    }
    while (!atomic_load(&in->finished))
        pthread_cond_wait(&a->cv, &a->mu);
    pthread_mutex_unlock(&a->mu);
    in->queued = 0;
}

void embed_ahead_free(embed_ahead **ap)
{
    embed_ahead *a = *ap;
    if (!a)
        return;
    pthread_mutex_lock(&a->mu);
    a->quit = 1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL); /* after the input in hand, if any */
    rv_backend_free(&a->hb);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a->q);
    free(a);
    *ap = NULL;
}

void embed_prepare_release(rv_embed_input *in)
{
    rv_tok_slice_release(&in->s.t);
    free(in->s.y);
    in->s.y = NULL;
    rv_probe_free(&in->probe);
    rv_vit_pooled_free(&in->pooled);
    rv_vit_blocks_free(&in->blocks);
}

rv_status rv_embed_queue(rv_embed_job *j, const char *path, int index, rv_embed_input **out)
{
    rv_embed_input *in = calloc(1, sizeof *in);
    *out = NULL;
    if (!in || !path || !(in->path = strdup(path))) {
        free(in);
        return rv_fail(path ? RV_ERR_NOMEM : RV_ERR_INVALID, "embed: %s",
                       path ? "out of memory" : "no path");
    }
    in->index = index;
    in->job = j;
    if (j->ahead)
        embed_ahead_push(j->ahead, in);
    *out = in;
    return RV_OK;
}

void rv_embed_input_free(rv_embed_input **inp)
{
    rv_embed_input *in = inp ? *inp : NULL;
    if (!in)
        return;
    if (in->job && in->job->ahead)
        embed_ahead_cancel(in->job->ahead, in);
    embed_prepare_release(in);
    if (in->patches)
        free(in->patches->probe_json);
    free(in->patches);
    free(in->path);
    free(in);
    *inp = NULL;
}
