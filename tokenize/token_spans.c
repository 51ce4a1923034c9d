/* token_spans.c: what a run of tokens needs, worked out before decoding. The
 * layout of a recording from its probe (the container's stated duration gives
 * the frame and sample counts), the span of a run of tokens (the tubelets, audio
 * steps, frames, samples and grid range it reads, and its time range), and each
 * rank's spans under a shard plan of the sequence (the plan itself is made in
 * shard_plan.c). */
#include <math.h>

#include "tok_internal.h"

__extension__ typedef __int128 i128;

#define US 1000000

static const rv_probe_stream *find_stream(const rv_probe *p, int index)
{
    for (int i = 0; i < p->nstreams; i++)
        if (p->streams[i].index == index)
            return &p->streams[i];
    return NULL;
}

/* The stream ingest would decode for `kind`: the one asked for, the probe's
 * pick (-1), or none (-2, or the file has none). */
static const rv_probe_stream *used_stream(const rv_probe *p, int asked, int pick)
{
    if (asked == -2)
        return NULL;
    return find_stream(p, asked >= 0 ? asked : pick);
}

rv_status rv_tok_layout_from_probe(const rv_probe *p, const rv_tok_opts *to,
                                   const rv_ingest_opts *io, rv_tok_layout *out,
                                   double *end_s)
{
    rv_status st = rv_tok_opts_check(to);
    if (st != RV_OK)
        return st;
    if ((st = rv_ingest_opts_check(io)) != RV_OK)
        return st;
    const rv_probe_stream *vs = used_stream(p, io->video_stream, p->video);
    const rv_probe_stream *as = used_stream(p, io->audio_stream, p->audio);
    if (vs && vs->kind != RV_STREAM_VIDEO)
        vs = NULL;
    if (as && as->kind != RV_STREAM_AUDIO)
        as = NULL;
    if (to->frame_windows && !vs)
        return rv_fail(RV_ERR_INVALID, "%s: frame windows (window w = tubelet w) need video, "
                       "and there is no video stream to tokenize", p->path);
    /* The stream whose first frame is time_origin and whose end ends the recording. */
    const rv_probe_stream *ref = vs ? vs : as;
    if (!ref)
        return rv_fail(RV_ERR_FORMAT, "%s: no video or audio stream to tokenize", p->path);
    double end;
    if (isfinite(ref->duration_s) && ref->duration_s > 0) {
        end = ref->duration_s;
    } else if (isfinite(p->duration_s) && p->duration_s > 0) {
        double cstart = isfinite(p->start_s) ? p->start_s : 0.0;
        double sstart = isfinite(ref->start_s) ? ref->start_s : cstart;
        end = cstart + p->duration_s - sstart;
    } else {
        return rv_fail(RV_ERR_UNSUPPORTED,
                       "%s: the container states no duration, so the tokens cannot be "
                       "planned before decoding", p->path);
    }
    if (end_s)
        *end_s = end;

    int64_t start_us = llround(io->start_s * US);
    int64_t rel_us = llround(end * US) - start_us;
    if (rel_us < 0)
        rel_us = 0;
    if (io->duration_s > 0) {
        int64_t dur_us = llround(io->duration_s * US);
        rel_us = rel_us < dur_us ? rel_us : dur_us;
    }
    int64_t nframes = 0, nsamples = 0;
    if (vs && to->video) {
        /* k with k * fps_den / fps_num < rel: ingest's sampling rule */
        i128 num = (i128)rel_us * io->fps_num, den = (i128)io->fps_den * US;
        nframes = (int64_t)((num + den - 1) / den);
    }
    if (as && to->audio) {
        /* the samples up to the end: llround(rel * 16000), as ingest cuts them */
        nsamples = (int64_t)(((i128)rel_us * RV_AUDIO_RATE * 2 + US) / (2 * US));
        if (io->duration_s > 0) {
            int64_t jd = llround(io->duration_s * RV_AUDIO_RATE);
            nsamples = nsamples < jd ? nsamples : jd;
        }
    }
    return rv_tok_layout_make(to, io, nframes, nsamples, out);
}

/* Largest grid k with J(k) <= j, and smallest with J(k) >= j; J is ingest's
 * first audio sample of grid index k (non-decreasing). */
int64_t tok_grid_at_or_before(const rv_ingest_opts *io, int64_t j)
{
    int64_t k = (int64_t)((i128)j * io->fps_num / ((i128)RV_AUDIO_RATE * io->fps_den));
    while (k > 0 && rv_ingest_audio_index(io, k) > j)
        k--;
    while (rv_ingest_audio_index(io, k + 1) <= j)
        k++;
    return k;
}

int64_t tok_grid_at_or_after(const rv_ingest_opts *io, int64_t j)
{
    i128 den = (i128)RV_AUDIO_RATE * io->fps_den;
    int64_t k = (int64_t)(((i128)j * io->fps_num + den - 1) / den);
    while (rv_ingest_audio_index(io, k) < j)
        k++;
    while (k > 0 && rv_ingest_audio_index(io, k - 1) >= j)
        k--;
    return k;
}

rv_status rv_tok_span_of(const rv_tok_layout *L, int64_t first, int64_t count,
                         rv_tok_span *out)
{
    if (first < 0 || count < 0 || first > L->seq || count > L->seq - first)
        return rv_fail(RV_ERR_INVALID, "tokenize: tokens [%lld, +%lld) outside the sequence "
                       "of %lld", (long long)first, (long long)count, (long long)L->seq);
    rv_tok_span s = {.first = first, .count = count};
    const int64_t end = first + count;
    const rv_tok_opts *o = &L->opts;
    int64_t v0 = rv_tok_video_before(L, first), v1 = rv_tok_video_before(L, end);
    int64_t a0 = rv_tok_audio_before(L, first), a1 = rv_tok_audio_before(L, end);
    int have = 0;
    double t[2], t0 = 0, t1 = 0; /* sequence time */
    const int64_t lead = tok_lead(L);
    if (!lead) {
        s.cls = tok_max(0, tok_min(end, o->cls) - first); /* special tokens [0, cls) */
        if (s.cls) {
            t0 = t1 = rv_ingest_frame_time(&L->ingest, 0);
            have = 1;
        }
    } else if ((s.cls = tok_specials_before(L, end) - tok_specials_before(L, first)) > 0) {
        /* window w's special tokens are [start(w), start(w) + lead), at t_w: the
         * first one in the run is first's window's, or the next window's when
         * first is past them; the last one is end - 1's window's */
        int64_t wa = rv_tok_window_of(L, first), wb = rv_tok_window_of(L, end - 1);
        if (first >= rv_tok_window_start(L, wa) + lead)
            wa++;
        t0 = rv_tok_window_time(L, wa);
        t1 = rv_tok_window_time(L, wb);
        have = 1;
    }
    int64_t kmin = INT64_MAX, kmax = INT64_MIN;
    if (v1 > v0) {
        int64_t k0, k1;
        s.tubelet0 = v0 / L->per_tubelet;
        s.tubelet1 = (v1 - 1) / L->per_tubelet + 1;
        tok_tubelet_frames(L, s.tubelet0, NULL, &s.frame0, &k1);
        tok_tubelet_frames(L, s.tubelet1 - 1, NULL, &k0, &k1);
        s.frame1 = tok_min(k1, L->nframes);
        kmin = s.frame0;
        kmax = s.frame1;
        tok_tubelet_time(L, s.tubelet0, t);
        t0 = have ? fmin(t0, t[0]) : t[0];
        tok_tubelet_time(L, s.tubelet1 - 1, t);
        t1 = have ? fmax(t1, t[1]) : t[1];
        have = 1;
    }
    if (a1 > a0) {
        s.step0 = a0 / L->bands;
        s.step1 = (a1 - 1) / L->bands + 1;
        /* a step's fbank frames, and a fbank frame's samples, are consecutive
         * (within one window when windows are cut from the recording) */
        s.fbank0 = tok_step_fbank(L, s.step0, NULL);
        s.fbank1 = tok_step_fbank(L, s.step1 - 1, NULL) + o->audio_time;
        s.sample0 = tok_fbank_sample(L, s.fbank0, NULL);
        s.sample1 = tok_fbank_sample(L, s.fbank1 - 1, NULL) + RV_FBANK_LEN;
        kmin = tok_min(kmin, tok_grid_at_or_before(&L->ingest, s.sample0));
        kmax = tok_max(kmax, tok_grid_at_or_after(&L->ingest, s.sample1));
        tok_step_time(L, s.step0, t);
        t0 = have ? fmin(t0, t[0]) : t[0];
        tok_step_time(L, s.step1 - 1, t);
        t1 = have ? fmax(t1, t[1]) : t[1];
    }
    if (kmin <= kmax) {
        s.grid0 = kmin;
        s.grid1 = kmax;
    }
    s.time[0] = L->t0 + t0;
    s.time[1] = L->t0 + t1;
    *out = s;
    return RV_OK;
}

rv_status rv_tok_shard_plan(const rv_tok_layout *L, rv_shard_kind kind, int ranks,
                            rv_shard_plan *out)
{
    return rv_shard_plan_make(kind, ranks, L->seq, out);
}

int rv_tok_rank_spans(const rv_tok_layout *L, const rv_shard_plan *p, int rank,
                      rv_tok_span spans[RV_SHARD_MAX_SEGS])
{
    rv_shard_seg seg[RV_SHARD_MAX_SEGS];
    int n = rv_shard_segments(p, rank, seg);
    for (int i = 0; i < n; i++)
        if (rv_tok_span_of(L, seg[i].start, seg[i].len, &spans[i]) != RV_OK)
            spans[i] = (rv_tok_span){.first = seg[i].start, .time = {L->t0, L->t0}};
    return n;
}
