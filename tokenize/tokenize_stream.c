/* tokenize_stream.c: passes over a media file, feeding ingest chunks to the
 * tokenizer engine: the whole recording (open), a run of tokens of a planned
 * sequence (only the grid range its tokens read is ingested), and one rank's
 * segments of a shard plan. */
#include <math.h>
#include <string.h>

#include "rv_tokenize.h"
#include "tok_internal.h"

typedef struct pass {
    rv_tokenizer *tk;
    /* open pass: the engine is made at the first chunk, when ingest has said
     * which streams it decodes */
    const rv_ingest_opts *io;
    const rv_tok_opts *to;
    const rv_ingest_stats *istats;
    rv_tok_batch_fn fn;
    void *user;
} pass;

static rv_status on_chunk(const rv_ingest_chunk *c, void *user)
{
    pass *ps = user;
    if (!ps->tk) {
        /* ingest fills the stream indices of its stats before the first chunk; the
         * chunk itself says so too (no audio pointer without an audio stream). */
        int has_video = ps->istats->video_stream >= 0 || c->nframes > 0;
        int has_audio = ps->istats->audio_stream >= 0 || c->audio != NULL;
        rv_status st = rv_tokenizer_new(NULL, 0, 0, ps->to, ps->io, has_video, has_audio, ps->fn,
                                        ps->user, &ps->tk);
        if (st != RV_OK)
            return st;
    }
    return rv_tokenizer_push(ps->tk, c);
}

rv_status rv_tokenize_file(const char *path, const rv_ingest_opts *io, const rv_tok_opts *to,
                           rv_tok_batch_fn fn, void *user, rv_tok_stats *stats)
{
    rv_tok_stats local;
    if (!stats)
        stats = &local;
    memset(stats, 0, sizeof *stats);
    rv_tok_layout check;
    rv_status st = rv_tok_layout_make(to, io, 0, 0, &check);
    if (st != RV_OK)
        return st;
    if (!fn)
        return rv_fail(RV_ERR_INVALID, "tokenize: no batch callback");
    pass ps = {.io = io, .to = to, .istats = &stats->ingest, .fn = fn, .user = user};
    st = rv_ingest_stream(path, io, on_chunk, &ps, &stats->ingest);
    if (st == RV_OK && !ps.tk)
        st = rv_fail(RV_ERR_INTERNAL, "%s: ingest handed out no chunk", path);
    if (st == RV_OK)
        st = rv_tokenizer_finish(ps.tk);
    if (ps.tk) {
        rv_ingest_stats is = stats->ingest;
        rv_tokenizer_stats(ps.tk, stats);
        stats->ingest = is;
    }
    rv_tokenizer_free(&ps.tk);
    return st;
}

static rv_status on_range_chunk(const rv_ingest_chunk *c, void *user)
{
    return rv_tokenizer_push(user, c);
}

rv_status rv_tokenize_range(const char *path, const rv_tok_layout *plan, int64_t first,
                            int64_t count, rv_tok_batch_fn fn, void *user, rv_tok_stats *stats)
{
    rv_tok_stats local;
    if (!stats)
        stats = &local;
    memset(stats, 0, sizeof *stats);
    rv_tok_span sp;
    rv_status st = rv_tok_span_of(plan, first, count, &sp);
    if (st != RV_OK)
        return st;
    rv_tokenizer *tk = NULL;
    if ((st = rv_tokenizer_new(plan, first, count, NULL, NULL, 0, 0, fn, user, &tk)) != RV_OK)
        return st;
    const rv_ingest_opts *io = &plan->ingest;
    if (first == 0 && count == plan->seq && count > 0) {
        /* The whole planned sequence: read to the real end, so what the layout
         * leaves out is counted. */
        st = rv_ingest_stream(path, io, on_range_chunk, tk, &stats->ingest);
    } else if (sp.grid1 > sp.grid0) {
        int64_t g0 = sp.grid0;
        /* A range near the planned end may have to pad (the recording can end up
         * to RV_TOK_PAD_MAX_S early): start early enough to see the real end,
         * whose last frame it repeats and whose length it checks. */
        int64_t fps_ceil = (io->fps_num + io->fps_den - 1) / io->fps_den;
        int64_t pad_k = (int64_t)ceil(RV_TOK_PAD_MAX_S * (double)fps_ceil) + 1;
        int64_t pad_j = (int64_t)(RV_TOK_PAD_MAX_S * RV_AUDIO_RATE) + 1;
        if (sp.frame1 > sp.frame0 && sp.frame1 + pad_k > plan->nframes)
            g0 = tok_min(g0, tok_max(0, plan->nframes - pad_k));
        if (sp.sample1 > sp.sample0 && sp.sample1 + pad_j > plan->nsamples)
            g0 = tok_min(g0, tok_grid_at_or_before(io, tok_max(0, plan->nsamples - pad_j)));
        st = rv_ingest_range(path, io, g0, sp.grid1 - g0, on_range_chunk, tk, &stats->ingest);
    } else {
        /* No token reads a frame or a sample: nothing is ingested, and the pass
         * is still on the plan's clock. */
        stats->ingest.t0 = stats->ingest.end_time = plan->t0;
    }
    if (st == RV_OK)
        st = rv_tokenizer_finish(tk);
    rv_ingest_stats is = stats->ingest;
    rv_tokenizer_stats(tk, stats);
    stats->ingest = is;
    rv_tokenizer_free(&tk);
    return st;
}

static void add_stats(rv_tok_stats *sum, const rv_tok_stats *s)
{
    sum->tokens += s->tokens;
    sum->video_tokens += s->video_tokens;
    sum->audio_tokens += s->audio_tokens;
    sum->cls_tokens += s->cls_tokens;
    sum->fbank_frames += s->fbank_frames;
    sum->padded_frames += s->padded_frames;
    sum->padded_samples += s->padded_samples;
    sum->dropped_frames += s->dropped_frames;
    sum->dropped_samples += s->dropped_samples;
    sum->cpu_s += s->cpu_s;
    sum->ingest.frames += s->ingest.frames;
    sum->ingest.samples += s->ingest.samples;
    sum->ingest.decoded_frames += s->ingest.decoded_frames;
    sum->ingest.converted_frames += s->ingest.converted_frames;
    sum->ingest.skipped_packets += s->ingest.skipped_packets;
    sum->ingest.corrupt += s->ingest.corrupt;
    sum->ingest.seeked |= s->ingest.seeked;
    sum->ingest.truncated |= s->ingest.truncated;
}

rv_status rv_tokenize_rank(const char *path, const rv_tok_layout *plan,
                           const rv_shard_plan *sp, int rank, rv_tok_batch_fn fn, void *user,
                           rv_tok_stats *stats)
{
    rv_tok_stats sum, one;
    memset(&sum, 0, sizeof sum);
    sum.layout = *plan;
    if (sp->seq != plan->seq)
        return rv_fail(RV_ERR_INVALID, "tokenize: the shard plan has %lld tokens, the layout %lld",
                       (long long)sp->seq, (long long)plan->seq);
    if (rank < 0 || rank >= sp->ranks)
        return rv_fail(RV_ERR_INVALID, "tokenize: rank %d of %d", rank, sp->ranks);
    rv_shard_seg seg[RV_SHARD_MAX_SEGS];
    int n = rv_shard_segments(sp, rank, seg);
    rv_status st = RV_OK;
    for (int i = 0; i < n && st == RV_OK; i++) {
        if (seg[i].len == 0)
            continue;
        st = rv_tokenize_range(path, plan, seg[i].start, seg[i].len, fn, user, &one);
        if (i == 0 || sum.tokens == 0) {
            sum.first = one.first;
            sum.ingest = one.ingest;
            sum.ingest.frames = sum.ingest.samples = sum.ingest.decoded_frames = 0;
            sum.ingest.converted_frames = sum.ingest.skipped_packets = sum.ingest.corrupt = 0;
        }
        add_stats(&sum, &one);
    }
    if (stats)
        *stats = sum;
    return st;
}
