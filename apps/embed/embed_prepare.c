/* embed_prepare.c: one recording's work on one rank of `ringvit embed` before
 * the encoder, which needs no other rank:
 *   1. probe: reads the file's headers and plans the token sequence from them
 *      (rv_tok_recording_plan), the same on every rank; a file that states
 *      no duration (a still image) stops here, to be counted by the group;
 *   2. tokens: refuses an input over --max-tokens, plans the shards (zigzag
 *      with --causal, else contiguous) and decodes and tokenizes only this
 *      rank's slice, streamed chunk by chunk into arrays sized from the plan,
 *      so a rank never holds more than its slice.
 * With --prefetch both run on a worker thread of the rank (one input after
 * another, compute threads of its own) while the encoder works on the previous
 * input; failures are recorded (status and message) and voted on
 * by the group when the input's turn comes (embed_job.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "embed_rank.h"
#include "cli.h"
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
    if (embed_stop_signal)
        return rv_fail(RV_ERR_IO, "stopped by a signal");
    const int D = s->model->cfg.dim;
    rv_vit_tokens bt = {.len = b->count, .modality = b->modality, .pos = b->pos, .seq_time = b->seq_time,
                        .nvideo = b->nvideo, .video = b->video, .naudio = b->naudio,
                        .audio = b->audio, .grid = s->grid, .audio_steps = s->audio_steps,
                        .window = b->window};
    rv_status st = rv_vit_embed(s->model, s->hb, &bt, s->y + (size_t)offset * D, &s->flops);
    if (st != RV_OK)
        return st;
    embed_report_tokens(s->report, b->count * s->report_scale);
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

void embed_prepare_probe(embed_rank *k, embed_prep *p)
{
    const embed_settings *set = k->set;
    const embed_input *in = &k->b->in[p->index];
    double t0 = rv_clock_s();
    p->t_start = rv_clock_s();
    rv_clear_error();
    rv_status st = rv_tok_recording_plan(in->path, &set->to, &set->io, set->start_at, &p->rec,
                                         &p->probe);
    record(st, &p->probe_st, p->probe_msg);
    p->reached = st == RV_OK && p->rec.need_count ? PREP_PROBED : PREP_DONE;
    p->probe_s = rv_clock_s() - t0;
}

void embed_prepare_tokens(embed_rank *k, embed_prep *p, rv_backend *hb, rv_comm_watch *watch)
{
    const embed_settings *set = k->set;
    const embed_input *in = &k->b->in[p->index];
    const rv_tok_layout *L = &p->rec.layout;
    const int D = set->model->cfg.dim;
    embed_slice *s = &p->s;
    double t0 = rv_clock_s();
    rv_status st = RV_OK;
    p->reached = PREP_DONE;
    rv_clear_error();
    /* The same arithmetic on every rank: all refuse alike. */
    if (L->nvideo + L->naudio == 0) {
        st = rv_fail(RV_ERR_FORMAT, "%s: nothing to embed: no video or audio tokens (%lld frames, "
                     "%lld audio samples at these settings)", in->path, (long long)L->nframes,
                     (long long)L->nsamples);
        goto end;
    }
    /* What the input costs, before any of it is decoded: refused over --max-tokens
     * (tokens, or segments of the pooled output), else said when it is long. */
    const double hop = set->hop_s > 0 ? set->hop_s : set->segment_s;
    const double segments =
        isfinite(p->rec.end_s) && hop > 0 ? ceil((p->rec.end_s - p->rec.io.start_s) / hop) : 0;
    if (L->seq > set->max_tokens || segments > (double)set->max_tokens) {
        st = rv_fail(RV_ERR_INVALID,
                     "%lld tokens and %.0f segments (of %g s) at these settings, more than "
                     "--max-tokens %lld; raise --max-tokens if the memory and time are meant "
                     "(each token and segment holds several rows of %d floats per rank)",
                     (long long)L->seq, segments, hop, (long long)set->max_tokens, D);
        goto end;
    }
    if (L->seq >= EMBED_LONG_TOKENS && k->rank == 0 && k->b->report) {
        const rv_vit_config *cfg = &set->model->cfg;
        double flops = set->span.kind == RV_SPAN_FULL
                           ? rv_vit_forward_flops(cfg, L->seq, L->nvideo, L->naudio, set->causal)
                           : 0;
        embed_report_plan(k->b->report, in->path, L->seq, L->nvideo, L->naudio, p->rec.end_s,
                          flops);
    }
    /* Zigzag balances causal full attention; a span wants contiguous slices (its
     * ranks talk only to those its keys reach). */
    const rv_shard_kind kind = set->causal && set->span.kind == RV_SPAN_FULL ? RV_SHARD_ZIGZAG
                                                                          : RV_SHARD_CONTIGUOUS;
    if ((st = rv_tok_slice_plan(L, kind, k->size, k->rank, 0, &s->t)) != RV_OK)
        goto end;
    if (!(s->y = malloc(sizeof(float) * (size_t)(s->t.len > 0 ? s->t.len : 1) * (size_t)D))) {
        st = rv_fail(RV_ERR_NOMEM, "rank %d: out of memory for the embeddings of its %lld "
                     "tokens", k->rank, (long long)s->t.len);
        goto end;
    }
    s->model = set->model;
    s->grid = L->grid;
    s->audio_steps = rv_vit_audio_steps(L);
    s->hb = hb;
    s->watch = watch;
    s->report_scale = set->mpi ? k->size : 1;
    st = rv_tok_slice_fill(in->path, L, &s->t, on_batch, s, &p->ts);
end:
    record(st, &p->tok_st, p->tok_msg);
    p->tok_wall = rv_clock_s() - t0;
}

void embed_wait_beating(pthread_cond_t *cv, pthread_mutex_t *mu, long ms, rv_comm_watch *watch)
{
    struct timespec until = rv_clock_realtime_after(ms * 1e-3);
    pthread_cond_timedwait(cv, mu, &until);
    pthread_mutex_unlock(mu);
    rv_comm_watch_beat(watch);
    pthread_mutex_lock(mu);
}

/* ---- ahead, on a thread ------------------------------------------------------------------ */

/* A rank's worker that prepares the inputs queued to it, one after another, with
 * compute threads of its own (the rank's are the encoder's meanwhile). */
struct embed_ahead {
    embed_rank *k;
    pthread_mutex_t mu;
    pthread_cond_t cv;            /* an input queued, or one finished, or quit */
    embed_prep **q;               /* (cap) the queue, a ring */
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
        embed_prep *p = a->q[a->head];
        a->head = (a->head + 1) % a->cap;
        a->n--;
        pthread_mutex_unlock(&a->mu);
        embed_prepare_probe(a->k, p);
        if (p->probe_st == RV_OK && !p->rec.need_count)
            embed_prepare_tokens(a->k, p, a->hb, NULL);
        pthread_mutex_lock(&a->mu);
        atomic_store(&p->finished, 1);
        pthread_cond_broadcast(&a->cv);
    }
    /* Stopped: what is still queued is never prepared. */
    for (; a->n > 0; a->n--, a->head = (a->head + 1) % a->cap) {
        embed_prep *p = a->q[a->head];
        p->probe_st = RV_ERR_IO;
        snprintf(p->probe_msg, sizeof p->probe_msg, "not prepared: the batch stopped");
        atomic_store(&p->finished, 1);
    }
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

rv_status embed_ahead_create(embed_rank *k, int slots, embed_ahead **out)
{
    *out = NULL;
    embed_ahead *a = calloc(1, sizeof *a);
    rv_status st = RV_OK;
    if (!a || !(a->q = calloc((size_t)slots, sizeof *a->q))) {
        free(a);
        return rv_fail(RV_ERR_NOMEM, "rank %d: out of memory", k->rank);
    }
    a->k = k;
    a->cap = slots;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    if ((st = rv_backend_cpu_create(k->set->threads, &a->hb)) == RV_OK) {
        int e = pthread_create(&a->thread, NULL, ahead_main, a);
        if (e != 0)
            st = rv_fail(RV_ERR_NOMEM, "rank %d: cannot start a thread to prepare the next "
                         "inputs: %s", k->rank, strerror(e));
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

void embed_ahead_push(embed_ahead *a, embed_prep *p)
{
    pthread_mutex_lock(&a->mu);
    p->queued = 1;
    atomic_store(&p->finished, 0);
    a->q[(a->head + a->n) % a->cap] = p;
    a->n++;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

double embed_ahead_wait(embed_ahead *a, embed_prep *p)
{
    if (!p->queued)
        return 0;
    double t0 = rv_clock_s();
    pthread_mutex_lock(&a->mu);
    /* The group waits in the next vote: say this rank is working. */
    while (!atomic_load(&p->finished))
        embed_wait_beating(&a->cv, &a->mu, 100, a->k->watch);
    pthread_mutex_unlock(&a->mu);
    p->queued = 0;
    return rv_clock_s() - t0;
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

void embed_prepare_free(embed_prep *p)
{
    rv_tok_slice_release(&p->s.t);
    free(p->s.y);
    rv_probe_free(&p->probe);
    memset(p, 0, sizeof *p);
}
