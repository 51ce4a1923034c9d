/* finetune_tokens.c: one recording's tokens on one rank of `ringvit finetune`,
 * as `ringvit embed` makes them (embed_job.c): the sequence is planned from the
 * file's headers (rv_tok_layout_from_probe; a file that states no duration is
 * counted with a whole pass first), split over the cp group by a shard plan
 * (zigzag with --causal over full attention, else contiguous), and only this rank's slice is decoded
 * and tokenized, into arrays sized from the plan. Every rank of the group finds
 * the same plan from the same file without communicating. The loop keeps the
 * slices in a per-rank cache so later epochs do not decode again. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "finetune.h"
#include "rv_tokenize.h"

static void *alloc_rows(int64_t rows, int64_t width, size_t elem)
{
    return malloc((size_t)(rows > 0 ? rows : 1) * (size_t)(width > 0 ? width : 1) * elem);
}

static void copy(void *dst, const void *src, size_t n)
{
    if (n)
        memcpy(dst, src, n);
}

/* What the callbacks fill, and whom they tell that this rank works. */
typedef struct loading {
    ft_slice *s;
    int64_t frames, samples; /* counted (a file without a stated duration) */
    void (*beat)(void *);
    void *beat_arg;
} loading;

static rv_status on_batch(const rv_tok_batch *b, void *user)
{
    loading *ld = user;
    ft_slice *s = ld->s;
    if (ld->beat)
        ld->beat(ld->beat_arg);
    if (s->got + b->count > s->len || s->got_video + b->nvideo > s->nvideo ||
        s->got_audio + b->naudio > s->naudio)
        return rv_fail(RV_ERR_INTERNAL, "tokenizer handed out more tokens than the plan gives "
                       "this rank (%lld)", (long long)s->len);
    const size_t c = (size_t)b->count;
    copy(s->modality + s->got, b->modality, c);
    copy(s->pos + 3 * s->got, b->pos, sizeof(int64_t) * 3 * c);
    copy(s->time + 2 * s->got, b->time, sizeof(double) * 2 * c);
    copy(s->window + s->got, b->window, sizeof(int64_t) * c);
    copy(s->video + s->got_video * s->L.video_dim, b->video,
         sizeof(float) * (size_t)(b->nvideo * s->L.video_dim));
    copy(s->audio + s->got_audio * s->L.audio_dim, b->audio,
         sizeof(float) * (size_t)(b->naudio * s->L.audio_dim));
    s->got += b->count;
    s->got_video += b->nvideo;
    s->got_audio += b->naudio;
    return RV_OK;
}

static rv_status on_chunk(const rv_ingest_chunk *c, void *user)
{
    loading *ld = user;
    if (ld->beat)
        ld->beat(ld->beat_arg);
    ld->frames += c->nframes;
    ld->samples += c->nsamples;
    return RV_OK;
}

rv_status ft_slice_load(const char *path, const rv_tok_opts *to, const rv_ingest_opts *io,
                        int zigzag, int ranks, int rank, void (*beat)(void *), void *beat_arg,
                        ft_slice **out)
{
    rv_probe *probe = NULL;
    ft_slice *s = calloc(1, sizeof *s);
    rv_status st = RV_OK;
    *out = NULL;
    if (!s)
        return rv_fail(RV_ERR_NOMEM, "%s: out of memory", path);
    loading ld = {.s = s, .beat = beat, .beat_arg = beat_arg};
    double end_s = 0;
    /* From the recording's start, as embed samples it (audio before the first
     * frame included). */
    rv_ingest_opts from_start = *io;
    rv_timeline tl;
    if ((st = rv_probe_file(path, &probe)) != RV_OK ||
        (st = rv_ingest_timeline(path, io, &tl)) != RV_OK)
        goto end;
    from_start.start_s = rv_timeline_start(&tl, NAN);
    io = &from_start;
    st = rv_tok_layout_from_probe(probe, to, io, &s->L, &end_s);
    if (st == RV_ERR_UNSUPPORTED) {
        /* No stated duration (a still image): count what a whole pass yields. */
        rv_ingest_stats is;
        memset(&is, 0, sizeof is);
        if ((st = rv_ingest_stream(path, io, on_chunk, &ld, &is)) != RV_OK ||
            (st = rv_tok_layout_make(to, io, ld.frames, ld.samples, &s->L)) != RV_OK)
            goto end;
        end_s = is.end_s;
    } else if (st != RV_OK) {
        goto end;
    }
    if (io->duration_s > 0 && io->start_s + io->duration_s < end_s)
        end_s = io->start_s + io->duration_s;
    s->end_s = end_s;
    if (s->L.nvideo + s->L.naudio == 0) {
        st = rv_fail(RV_ERR_FORMAT, "%s: nothing to train on: no video or audio tokens (%lld "
                     "frames, %lld audio samples at these settings)", path,
                     (long long)s->L.nframes, (long long)s->L.nsamples);
        goto end;
    }
    if ((st = rv_tok_shard_plan(&s->L, zigzag ? RV_SHARD_ZIGZAG : RV_SHARD_CONTIGUOUS, ranks,
                                &s->plan)) != RV_OK)
        goto end;
    rv_shard_seg seg[RV_SHARD_MAX_SEGS];
    const int nseg = rv_shard_segments(&s->plan, rank, seg);
    s->len = rv_shard_len(&s->plan, rank);
    for (int i = 0; i < nseg; i++) {
        s->nvideo += rv_tok_video_before(&s->L, seg[i].start + seg[i].len) -
                     rv_tok_video_before(&s->L, seg[i].start);
        s->naudio += rv_tok_audio_before(&s->L, seg[i].start + seg[i].len) -
                     rv_tok_audio_before(&s->L, seg[i].start);
    }
    s->modality = alloc_rows(s->len, 1, 1);
    s->pos = alloc_rows(s->len, 3, sizeof(int64_t));
    s->time = alloc_rows(s->len, 2, sizeof(double));
    s->window = alloc_rows(s->len, 1, sizeof(int64_t));
    s->video = alloc_rows(s->nvideo, s->L.video_dim, sizeof(float));
    s->audio = alloc_rows(s->naudio, s->L.audio_dim, sizeof(float));
    if (!s->modality || !s->pos || !s->time || !s->window || !s->video || !s->audio) {
        st = rv_fail(RV_ERR_NOMEM, "%s: rank %d: out of memory for its %lld tokens", path, rank,
                     (long long)s->len);
        goto end;
    }
    if ((st = rv_tokenize_rank(path, &s->L, &s->plan, rank, on_batch, &ld, NULL)) != RV_OK)
        goto end;
    if (s->got != s->len || s->got_video != s->nvideo || s->got_audio != s->naudio)
        st = rv_fail(RV_ERR_INTERNAL, "%s: rank %d: %lld tokens made, the plan gives it %lld",
                     path, rank, (long long)s->got, (long long)s->len);
end:
    rv_probe_free(&probe);
    if (st != RV_OK)
        ft_slice_free(&s);
    *out = s;
    return st;
}

rv_vit_tokens ft_slice_tokens(const ft_slice *s)
{
    rv_vit_tokens t = {.len = s->len, .modality = s->modality, .pos = s->pos, .time = s->time,
                       .nvideo = s->nvideo, .video = s->video, .naudio = s->naudio,
                       .audio = s->audio, .grid = s->L.grid, .audio_steps = s->L.steps,
                       .window = s->window};
    return t;
}

size_t ft_slice_bytes(const ft_slice *s)
{
    return sizeof *s + (size_t)s->len * (1 + 3 * sizeof(int64_t) + 2 * sizeof(double)) +
           sizeof(float) * (size_t)(s->nvideo * s->L.video_dim + s->naudio * s->L.audio_dim);
}

void ft_slice_free(ft_slice **p)
{
    if (!p || !*p)
        return;
    ft_slice *s = *p;
    free(s->modality), free(s->pos), free(s->time), free(s->window);
    free(s->video), free(s->audio);
    free(s);
    *p = NULL;
}
