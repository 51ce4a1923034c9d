/* tok_slice.c: one recording's tokens on one rank (rv_tok_slice.h): the plan from
 * the headers (probe, timeline, layout; a whole counting pass for a file that
 * states no duration), then the rank's shard of it tokenized into arrays sized
 * from the shard plan. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rv_tok_slice.h"

/* Where the tokens end: the recording's end, or start + duration before it. */
static double clamp_end(const rv_ingest_opts *io, double end_s)
{
    if (io->duration_s > 0 && io->start_s + io->duration_s < end_s)
        return io->start_s + io->duration_s;
    return end_s;
}

rv_status rv_tok_recording_plan(const char *path, const rv_tok_opts *to,
                                const rv_ingest_opts *io, double start_at,
                                rv_tok_recording *rec, rv_probe **probe)
{
    rv_probe *p = NULL;
    rv_timeline tl;
    rv_status st;
    if (probe)
        *probe = NULL;
    memset(rec, 0, sizeof *rec);
    rec->io = *io;
    rec->end_s = rec->probe_end_s = NAN;
    if ((st = rv_probe_file(path, &p)) != RV_OK ||
        (st = rv_ingest_timeline(path, io, &tl)) != RV_OK)
        goto end;
    rec->io.start_s = rv_timeline_start(&tl, start_at);
    rec->time_origin = tl.time_origin;
    rec->t0 = tl.t0;
    rec->rec_start = rv_timeline_start(&tl, NAN);
    double end_s = NAN;
    st = rv_tok_layout_from_probe(p, to, &rec->io, &rec->layout, &end_s);
    if (st == RV_ERR_UNSUPPORTED) {
        rec->need_count = 1; /* the message stays, for the caller to report */
        st = RV_OK;
    } else if (st == RV_OK) {
        rec->layout.t0 = rec->t0;
        rec->probe_end_s = end_s;
        rec->end_s = clamp_end(&rec->io, end_s);
    }
end:
    if (probe && st == RV_OK)
        *probe = p;
    else
        rv_probe_free(&p);
    return st;
}

typedef struct counting {
    int64_t frames, samples;
    rv_tok_beat_fn beat;
    void *user;
} counting;

static rv_status on_chunk(const rv_ingest_chunk *c, void *user)
{
    counting *n = user;
    rv_status st = n->beat ? n->beat(n->user) : RV_OK;
    n->frames += c->nframes;
    n->samples += c->nsamples;
    return st;
}

rv_status rv_tok_recording_count(const char *path, const rv_tok_opts *to, rv_tok_recording *rec,
                                 rv_tok_beat_fn beat, void *user, int64_t *frames,
                                 int64_t *samples, double *end_s)
{
    counting n = {.beat = beat, .user = user};
    rv_ingest_stats is;
    memset(&is, 0, sizeof is);
    rv_status st = rv_ingest_stream(path, &rec->io, on_chunk, &n, &is);
    if (frames)
        *frames = n.frames;
    if (samples)
        *samples = n.samples;
    if (end_s)
        *end_s = is.end_s;
    if (st != RV_OK)
        return st;
    return rv_tok_recording_counted(to, rec, n.frames, n.samples, is.end_s);
}

rv_status rv_tok_recording_counted(const rv_tok_opts *to, rv_tok_recording *rec, int64_t frames,
                                   int64_t samples, double end_s)
{
    rv_status st = rv_tok_layout_make(to, &rec->io, frames, samples, &rec->layout);
    if (st != RV_OK)
        return st;
    rec->layout.t0 = rec->t0;
    rec->end_s = clamp_end(&rec->io, end_s);
    rec->need_count = 0;
    return RV_OK;
}

/* ---- the rank's slice ------------------------------------------------------------- */

static void *alloc_rows(int64_t rows, int64_t width, size_t elem)
{
    return malloc((size_t)(rows > 0 ? rows : 1) * (size_t)(width > 0 ? width : 1) * elem);
}

rv_status rv_tok_slice_plan(const rv_tok_layout *L, rv_shard_kind kind, int ranks, int rank,
                            int keep_patches, rv_tok_slice *s)
{
    memset(s, 0, sizeof *s);
    rv_status st = rv_tok_shard_plan(L, kind, ranks, &s->plan);
    if (st != RV_OK)
        return st;
    if (rank < 0 || rank >= ranks)
        return rv_fail(RV_ERR_INVALID, "slice: rank %d of %d", rank, ranks);
    s->rank = rank;
    rv_shard_seg seg[RV_SHARD_MAX_SEGS];
    const int nseg = rv_shard_segments(&s->plan, rank, seg);
    s->len = rv_shard_len(&s->plan, rank);
    for (int i = 0; i < nseg; i++) {
        s->nvideo += rv_tok_video_before(L, seg[i].start + seg[i].len) -
                     rv_tok_video_before(L, seg[i].start);
        s->naudio += rv_tok_audio_before(L, seg[i].start + seg[i].len) -
                     rv_tok_audio_before(L, seg[i].start);
    }
    s->modality = alloc_rows(s->len, 1, 1);
    s->pos = alloc_rows(s->len, 3, sizeof(int64_t));
    s->seq_time = alloc_rows(s->len, 2, sizeof(double));
    s->window = alloc_rows(s->len, 1, sizeof(int64_t));
    int ok = s->modality && s->pos && s->seq_time && s->window;
    if (keep_patches) {
        s->video = alloc_rows(s->nvideo, L->video_dim, sizeof(float));
        s->audio = alloc_rows(s->naudio, L->audio_dim, sizeof(float));
        ok = ok && s->video && s->audio;
    }
    if (!ok)
        return rv_fail(RV_ERR_NOMEM, "rank %d: out of memory for its %lld tokens (%lld video, "
                       "%lld audio)", rank, (long long)s->len, (long long)s->nvideo,
                       (long long)s->naudio);
    return RV_OK;
}

/* memcpy that accepts n == 0 with NULL pointers (empty batches have them). */
static void copy(void *dst, const void *src, size_t n)
{
    if (n)
        memcpy(dst, src, n);
}

typedef struct filling {
    rv_tok_slice *s;
    const rv_tok_layout *L;
    rv_tok_slice_fn each;
    void *user;
} filling;

static rv_status on_batch(const rv_tok_batch *b, void *user)
{
    filling *f = user;
    rv_tok_slice *s = f->s;
    if (s->got + b->count > s->len || s->got_video + b->nvideo > s->nvideo ||
        s->got_audio + b->naudio > s->naudio)
        return rv_fail(RV_ERR_INTERNAL, "tokenizer handed out more tokens than the plan gives "
                       "this rank (%lld)", (long long)s->len);
    const size_t c = (size_t)b->count;
    copy(s->modality + s->got, b->modality, c);
    copy(s->pos + 3 * s->got, b->pos, sizeof(int64_t) * 3 * c);
    copy(s->seq_time + 2 * s->got, b->seq_time, sizeof(double) * 2 * c);
    copy(s->window + s->got, b->window, sizeof(int64_t) * c);
    if (s->video)
        copy(s->video + s->got_video * f->L->video_dim, b->video,
             sizeof(float) * (size_t)(b->nvideo * f->L->video_dim));
    if (s->audio)
        copy(s->audio + s->got_audio * f->L->audio_dim, b->audio,
             sizeof(float) * (size_t)(b->naudio * f->L->audio_dim));
    rv_status st = f->each ? f->each(b, s->got, f->user) : RV_OK;
    s->got += b->count;
    s->got_video += b->nvideo;
    s->got_audio += b->naudio;
    return st;
}

rv_status rv_tok_slice_fill(const char *path, const rv_tok_layout *L, rv_tok_slice *s,
                            rv_tok_slice_fn each, void *user, rv_tok_stats *stats)
{
    filling f = {.s = s, .L = L, .each = each, .user = user};
    rv_status st = rv_tokenize_rank(path, L, &s->plan, s->rank, on_batch, &f, stats);
    if (st == RV_OK && (s->got != s->len || s->got_video != s->nvideo || s->got_audio != s->naudio))
        st = rv_fail(RV_ERR_INTERNAL, "%s: rank %d: %lld tokens made, the plan gives it %lld",
                     path, s->rank, (long long)s->got, (long long)s->len);
    return st;
}

size_t rv_tok_slice_bytes(const rv_tok_slice *s, const rv_tok_layout *L)
{
    size_t b = (size_t)s->len * (1 + 4 * sizeof(int64_t) + 2 * sizeof(double));
    if (s->video)
        b += sizeof(float) * (size_t)(s->nvideo * L->video_dim);
    if (s->audio)
        b += sizeof(float) * (size_t)(s->naudio * L->audio_dim);
    return b;
}

void rv_tok_slice_release(rv_tok_slice *s)
{
    if (!s)
        return;
    free(s->modality), free(s->pos), free(s->seq_time), free(s->window);
    free(s->video), free(s->audio);
    memset(s, 0, sizeof *s);
}
