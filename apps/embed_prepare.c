/* embed_prepare.c: one recording's work on one rank of `ringvit embed` before
 * the encoder, which needs no other rank:
 *   1. probe: reads the file's headers and plans the token sequence from them
 *      (rv_tok_layout_from_probe), the same on every rank; a file that states
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

static void *alloc_rows(int64_t rows, int64_t width, size_t elem)
{
    return malloc((size_t)(rows > 0 ? rows : 1) * (size_t)width * elem);
}

static rv_status slice_alloc(embed_slice *s, const rv_tok_layout *L, const rv_shard_plan *sp,
                             int rank, int dim)
{
    rv_shard_seg seg[RV_SHARD_MAX_SEGS];
    int n = rv_shard_segments(sp, rank, seg);
    s->len = rv_shard_len(sp, rank);
    for (int i = 0; i < n; i++) {
        s->nvideo += rv_tok_video_before(L, seg[i].start + seg[i].len) -
                     rv_tok_video_before(L, seg[i].start);
        s->naudio += rv_tok_audio_before(L, seg[i].start + seg[i].len) -
                     rv_tok_audio_before(L, seg[i].start);
    }
    s->modality = alloc_rows(s->len, 1, 1);
    s->pos = alloc_rows(s->len, 3, sizeof(int64_t));
    s->time = alloc_rows(s->len, 2, sizeof(double));
    s->window = alloc_rows(s->len, 1, sizeof(int64_t));
    s->y = alloc_rows(s->len, dim, sizeof(float));
    if (!s->modality || !s->pos || !s->time || !s->window || !s->y)
        return rv_fail(RV_ERR_NOMEM, "rank %d: out of memory for its %lld tokens (%lld video, "
                       "%lld audio)", rank, (long long)s->len, (long long)s->nvideo,
                       (long long)s->naudio);
    return RV_OK;
}

size_t embed_slice_bytes(const embed_slice *s, int dim)
{
    return (size_t)s->len * (1 + 4 * sizeof(int64_t) + 2 * sizeof(double) + dim * sizeof(float));
}

/* memcpy that accepts n == 0 with NULL pointers (empty batches have them). */
static void copy(void *dst, const void *src, size_t n)
{
    if (n)
        memcpy(dst, src, n);
}

static rv_status on_batch(const rv_tok_batch *b, void *user)
{
    embed_slice *s = user;
    rv_comm_watch_beat(s->watch);
    if (embed_stop_signal)
        return rv_fail(RV_ERR_IO, "stopped by a signal");
    if (s->got + b->count > s->len || s->got_video + b->nvideo > s->nvideo ||
        s->got_audio + b->naudio > s->naudio)
        return rv_fail(RV_ERR_INTERNAL, "tokenizer handed out more tokens than the plan gives "
                       "this rank (%lld)", (long long)s->len);
    size_t c = (size_t)b->count;
    copy(s->modality + s->got, b->modality, c);
    copy(s->pos + 3 * s->got, b->pos, sizeof(int64_t) * 3 * c);
    copy(s->time + 2 * s->got, b->time, sizeof(double) * 2 * c);
    copy(s->window + s->got, b->window, sizeof(int64_t) * c);
    /* The batch's embeddings now; its patches die with the batch. */
    const int D = s->model->cfg.dim;
    rv_vit_tokens bt = {.len = b->count, .modality = b->modality, .pos = b->pos, .time = b->time,
                        .nvideo = b->nvideo, .video = b->video, .naudio = b->naudio,
                        .audio = b->audio, .grid = s->grid, .audio_steps = s->audio_steps,
                        .window = b->window};
    rv_status st = rv_vit_embed(s->model, s->hb, &bt, s->y + (size_t)s->got * D, &s->flops);
    if (st != RV_OK)
        return st;
    s->got += b->count;
    s->got_video += b->nvideo;
    s->got_audio += b->naudio;
    embed_report_tokens(s->report, b->count * s->report_scale);
    return RV_OK;
}

/* The audio steps a token's positions are resampled to (AST): the sequence's,
 * or with blocks (positions restart in each) the longest block's. */
static int64_t audio_steps_of(const rv_tok_layout *L)
{
    if (!L->opts.window_positions)
        return L->steps;
    int64_t most = 0;
    for (int64_t w = 0; w < L->windows; w++) {
        int64_t g0, g1, p0, p1;
        rv_tok_window_items(L, w, &g0, &g1, &p0, &p1);
        most = p1 - p0 > most ? p1 - p0 : most;
    }
    return most;
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
    p->end_s = NAN;
    rv_clear_error();
    rv_timeline tl;
    p->io = set->io;
    p->time_origin = p->clock0 = p->rec_start = 0;
    rv_status st = rv_probe_file(in->path, &p->probe);
    if (st == RV_OK && (st = rv_ingest_timeline(in->path, &set->io, &tl)) == RV_OK) {
        p->io.start_s = rv_timeline_start(&tl, set->start_at);
        p->time_origin = tl.origin_s;
        p->clock0 = (double)tl.t0_us / 1e6;
        p->rec_start = rv_timeline_start(&tl, NAN);
        st = rv_tok_layout_from_probe(p->probe, &set->to, &p->io, &p->L, &p->end_s);
        if (st == RV_ERR_UNSUPPORTED) {
            p->need_count = 1;
            st = RV_OK;
        }
    }
    record(st, &p->probe_st, p->probe_msg);
    p->reached = st == RV_OK && p->need_count ? PREP_PROBED : PREP_DONE;
    p->probe_s = rv_clock_s() - t0;
}

void embed_prepare_tokens(embed_rank *k, embed_prep *p, rv_backend *hb, rv_comm_watch *watch)
{
    const embed_settings *set = k->set;
    const embed_input *in = &k->b->in[p->index];
    const rv_tok_layout *L = &p->L;
    const int D = set->model->cfg.dim;
    embed_slice *s = &p->s;
    double t0 = rv_clock_s();
    rv_status st = RV_OK;
    p->reached = PREP_DONE;
    rv_clear_error();
    if (p->io.duration_s > 0 && p->io.start_s + p->io.duration_s < p->end_s)
        p->end_s = p->io.start_s + p->io.duration_s;
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
        isfinite(p->end_s) && hop > 0 ? ceil((p->end_s - p->io.start_s) / hop) : 0;
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
        embed_report_plan(k->b->report, in->path, L->seq, L->nvideo, L->naudio, p->end_s, flops);
    }
    /* Zigzag balances causal full attention; a span wants contiguous slices (its
     * ranks talk only to those its keys reach). */
    const rv_shard_kind kind = set->causal && set->span.kind == RV_SPAN_FULL ? RV_SHARD_ZIGZAG
                                                                          : RV_SHARD_CONTIGUOUS;
    if ((st = rv_tok_shard_plan(L, kind, k->size, &p->sp)) != RV_OK)
        goto end;
    if ((st = slice_alloc(s, L, &p->sp, k->rank, D)) != RV_OK)
        goto end;
    s->model = set->model;
    s->grid = L->grid;
    s->audio_steps = audio_steps_of(L);
    s->hb = hb;
    s->watch = watch;
    s->report_scale = set->mpi ? k->size : 1;
    st = rv_tokenize_rank(in->path, L, &p->sp, k->rank, on_batch, s, &p->ts);
    if (st == RV_OK && (s->got != s->len || s->got_video != s->nvideo || s->got_audio != s->naudio))
        st = rv_fail(RV_ERR_INTERNAL, "rank %d: %lld tokens made, the plan gives it %lld",
                     k->rank, (long long)s->got, (long long)s->len);
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
        if (p->probe_st == RV_OK && !p->need_count)
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
    embed_slice *s = &p->s;
    free(s->modality), free(s->pos), free(s->time), free(s->window), free(s->y);
    rv_probe_free(&p->probe);
    memset(p, 0, sizeof *p);
}
