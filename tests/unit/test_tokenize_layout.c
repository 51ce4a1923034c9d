/* test_tokenize_layout.c: the token layout (rv_tokens.h) against a brute-force
 * model that lists every tubelet and audio step with its window found by
 * linear search and sorts them into the documented order, after 0, 1 or 2
 * special tokens, with side-by-side, overlapping and gapped frequency bands;
 * the index helpers against each other; planning from a probe (synthetic
 * probes shaped like the files ingest was measured on); shard plans over a
 * layout: every token on exactly one rank, each segment's span covering
 * exactly what its tokens read (its special tokens counted), contiguous
 * balance within one token and zigzag causal work within 5%; and the option
 * checks. (That the earlier options give the earlier layouts exactly is
 * test_tokenize_compat.c.) */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rv_cp_attention.h"
#include "rv_tokens.h"

/* Token times in seconds computed two ways in double (the library's from whole
 * samples, microseconds or frame indices; the test's from the same numbers
 * written plainly): a few roundings of values of seconds to minutes, so relative
 * to the time, floored at 1 s (a time of 0 is matched within 1e-12 s); double
 * epsilon is 2.2e-16. */
#define TOL_TIME 1e-12
#define TIME_TOL(t) (TOL_TIME * fmax(fabs(t), 1.0))

typedef struct lcase {
    int fps_num, fps_den, size, T, P, F, W, stride, cls, video, audio;
    double window, start;
    int64_t nframes, nsamples;
    int fstride; /* mel bins between bands; 0: F */
} lcase;

static const lcase CASES[] = {
    {5, 1, 32, 2, 16, 16, 16, 16, 0, 1, 1, 1.0, 0.0, 65, 13 * 16000, 0},
    {30000, 1001, 24, 3, 8, 32, 16, 10, 1, 1, 1, 0.35, 1.25, 100, 55555, 0},
    {1, 1, 16, 1, 8, 16, 4, 4, 1, 0, 1, 2.0, 0.0, 0, 9999, 0},        /* audio only */
    {2, 1, 16, 2, 16, 16, 16, 16, 0, 1, 0, 0.5, 0.0, 21, 0, 0},       /* video only */
    {4, 1, 16, 2, 8, 128, 16, 16, 0, 1, 1, 0.25, 0.0, 9, 399, 0},     /* too short for audio */
    {25, 1, 16, 1, 8, 8, 16, 8, 1, 1, 1, 0.01, 0.5, 37, 20000, 0},    /* tiny windows */
    {24000, 1001, 16, 2, 8, 16, 8, 3, 0, 1, 1, 0.123457, 0.0, 61, 30011, 0}, /* odd window */
    /* class and distillation tokens; AST's audio (16 x 16, strides 10 and 10) */
    {5, 1, 32, 2, 16, 16, 16, 10, 2, 1, 1, 1.0, 0.0, 65, 13 * 16000, 10},
    {1, 1, 16, 1, 8, 16, 16, 10, 2, 0, 1, 2.0, 0.0, 0, 163840, 10}, /* AST, 10.24 s */
    {30000, 1001, 24, 3, 8, 24, 16, 5, 2, 1, 1, 0.35, 1.25, 100, 55555, 0}, /* 24 bins: 5 bands */
    {25, 1, 16, 1, 8, 8, 4, 2, 1, 1, 1, 0.01, 0.5, 37, 20000, 3},  /* 41 overlapping bands */
    {4, 1, 16, 2, 8, 16, 16, 16, 2, 1, 1, 0.25, 0.0, 9, 16000, 20}, /* 6 bands, 4-bin gaps */
    {2, 1, 16, 2, 16, 16, 16, 16, 2, 1, 0, 0.5, 0.0, 21, 0, 0},    /* video only, cls 2 */
};
#define NCASES (sizeof CASES / sizeof CASES[0])

#define CLOCK_T0 1.4 /* s: the grid zero the cases are placed at */

static void make_case(const lcase *c, rv_tok_layout *L)
{
    rv_tok_opts to;
    rv_ingest_opts io;
    rv_tok_opts_default(&to);
    rv_ingest_opts_default(&io);
    io.fps_num = c->fps_num;
    io.fps_den = c->fps_den;
    io.size = c->size;
    io.start_s = c->start;
    to.tubelet = c->T;
    to.patch = c->P;
    to.audio_freq = c->F;
    to.audio_time = c->W;
    to.audio_stride = c->stride;
    to.audio_fstride = c->fstride;
    to.cls = c->cls;
    to.video = c->video;
    to.audio = c->audio;
    to.window_s = c->window;
    cr_assert_eq(rv_tok_layout_make(&to, &io, c->nframes, c->nsamples, L), RV_OK, "%s",
                 rv_last_error());
    cr_assert_eq(L->t0, 0.0, "a layout made from counts is in sequence time");
    /* placed on a container clock whose grid zero is 1.4 s (an MPEG-TS file's
     * first frame, as tests/cli/test_timeline.sh makes one) */
    L->t0 = CLOCK_T0;
}

typedef struct item {
    int64_t window;
    int mod;
    int64_t index;
} item;

static int item_cmp(const void *a, const void *b)
{
    const item *x = a, *y = b;
    if (x->window != y->window)
        return x->window < y->window ? -1 : 1;
    if (x->mod != y->mod)
        return x->mod < y->mod ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Largest w with w * window <= time, by linear search on integers: time of
 * tubelet g is g*T*fden/fnum s; of step p, p*stride*160/16000 s. */
static int64_t window_linear_video(const rv_tok_layout *L, int64_t g)
{
    __int128 t_num = (__int128)g * L->opts.tubelet * L->ingest.fps_den * 1000000; /* / fnum us */
    int64_t w = 0;
    while ((__int128)(w + 1) * L->window_us * L->ingest.fps_num <= t_num)
        w++;
    return w;
}

/* Frequency bands as counted by hand: starts b * fstride with room for F bins. */
static int naive_bands(int F, int fstride)
{
    int fs = fstride ? fstride : F, n = 0;
    while (n * fs + F <= 128)
        n++;
    return n;
}

/* Special token i of L: modality cls, position (i, 0, 0), no item, the grid
 * start's time (sequence time; on the clock 1.4 s later), in window 0 with no
 * video or audio token before it. */
/* A token on the clock: time = t0 + seq_time, computed as that sum, and within
 * TIME_TOL of the exact sum of the known offset and the sequence time. */
static void expect_clock(const rv_token *tk, const char *what)
{
    for (int e = 0; e < 2; e++) {
        cr_assert_eq(tk->time[e], CLOCK_T0 + tk->seq_time[e], "%s: time %.17g, seq_time %.17g",
                     what, tk->time[e], tk->seq_time[e]);
        cr_assert_float_eq(tk->time[e] - CLOCK_T0, tk->seq_time[e], TIME_TOL(tk->time[e]));
    }
}

static void expect_special(const rv_tok_layout *L, int64_t i, double start, const char *what)
{
    rv_token tk;
    cr_assert_eq(rv_tok_info(L, i, &tk), RV_OK, "%s: token %lld", what, (long long)i);
    cr_assert_eq(tk.modality, RV_MOD_CLS, "%s: token %lld is not special", what, (long long)i);
    cr_assert(tk.pos[0] == i && tk.pos[1] == 0 && tk.pos[2] == 0,
              "%s: special token %lld at (%lld %lld %lld)", what, (long long)i,
              (long long)tk.pos[0], (long long)tk.pos[1], (long long)tk.pos[2]);
    cr_assert_eq(tk.item, -1);
    cr_assert_eq(tk.part, 0);
    cr_assert_float_eq(tk.seq_time[0], start, TIME_TOL(start), "%s: special token %lld at %g s", what,
                       (long long)i, tk.seq_time[0]);
    cr_assert_eq(tk.seq_time[1], tk.seq_time[0]);
    expect_clock(&tk, what);
    cr_assert_eq(rv_tok_window_of(L, i), 0);
    cr_assert_eq(rv_tok_video_before(L, i), 0);
    cr_assert_eq(rv_tok_audio_before(L, i), 0);
}

static int64_t window_linear_audio(const rv_tok_layout *L, int64_t p)
{
    __int128 t16 = (__int128)p * L->opts.audio_stride * 160 * 1000; /* us * 16 */
    int64_t w = 0;
    while ((__int128)(w + 1) * L->window_us * 16 <= t16)
        w++;
    return w;
}

Test(layout, matches_brute_force_order)
{
    for (size_t c = 0; c < NCASES; c++) {
        rv_tok_layout L;
        make_case(&CASES[c], &L);
        const rv_tok_opts *o = &L.opts;
        int64_t G = L.tubelets, NP = L.steps;
        int64_t nf = CASES[c].nsamples >= 400 && o->audio ? 1 + (CASES[c].nsamples - 400) / 160 : 0;
        int64_t np = nf >= o->audio_time ? 1 + (nf - o->audio_time) / o->audio_stride : 0;
        cr_assert_eq(G, o->video ? (CASES[c].nframes + o->tubelet - 1) / o->tubelet : 0, "case %zu", c);
        cr_assert_eq(NP, np, "case %zu: steps", c);
        int nb = naive_bands(CASES[c].F, CASES[c].fstride);
        cr_assert_eq(L.bands, nb, "case %zu: %d bands, want %d", c, L.bands, nb);
        cr_assert_eq(L.seq, CASES[c].cls + G * L.per_tubelet + NP * nb, "case %zu", c);
        item *items = malloc(sizeof(item) * (size_t)(G + NP + 1));
        int64_t n = 0;
        for (int64_t g = 0; g < G; g++)
            items[n++] = (item){window_linear_video(&L, g), RV_MOD_VIDEO, g};
        for (int64_t p = 0; p < NP; p++)
            items[n++] = (item){window_linear_audio(&L, p), RV_MOD_AUDIO, p};
        qsort(items, (size_t)n, sizeof(item), item_cmp);
        int64_t i = 0, nv = 0, na = 0;
        double last_t[2] = {-1, -1};
        char what[32];
        snprintf(what, sizeof what, "case %zu", c);
        for (; i < CASES[c].cls; i++)
            expect_special(&L, i, CASES[c].start, what);
        cr_assert_eq(rv_tok_window_start(&L, 0), CASES[c].cls, "case %zu", c);
        for (int64_t k = 0; k < n; k++) {
            int parts = items[k].mod == RV_MOD_VIDEO ? L.per_tubelet : nb;
            for (int part = 0; part < parts; part++, i++) {
                rv_token tk;
                cr_assert_eq(rv_tok_info(&L, i, &tk), RV_OK);
                cr_assert_eq(tk.modality, items[k].mod, "case %zu token %lld", c, (long long)i);
                cr_assert_eq(tk.item, items[k].index, "case %zu token %lld", c, (long long)i);
                cr_assert_eq(tk.part, part);
                cr_assert_eq(rv_tok_window_of(&L, i), items[k].window, "case %zu token %lld", c,
                             (long long)i);
                int m = tk.modality;
                if (m == RV_MOD_VIDEO) {
                    cr_assert_eq(tk.pos[0], tk.item);
                    cr_assert_eq(tk.pos[1], part / L.grid);
                    cr_assert_eq(tk.pos[2], part % L.grid);
                    cr_assert_eq(tk.seq_time[0], rv_ingest_frame_time(&L.ingest, tk.item * o->tubelet));
                    cr_assert_eq(tk.seq_time[1], rv_ingest_frame_time(&L.ingest, (tk.item + 1) * o->tubelet));
                    cr_assert_eq(rv_tok_index_video(&L, tk.item, part), i);
                    cr_assert_eq(rv_tok_video_before(&L, i), nv);
                    nv++;
                } else {
                    int64_t j0 = tk.item * o->audio_stride * 160;
                    int64_t j1 = j0 + (int64_t)(o->audio_time - 1) * 160 + 400;
                    cr_assert_eq(tk.pos[0], tk.item);
                    cr_assert_eq(tk.pos[1], part);
                    cr_assert_float_eq(tk.seq_time[0], CASES[c].start + j0 / 16000.0,
                                       TIME_TOL(tk.seq_time[0]));
                    cr_assert_float_eq(tk.seq_time[1], CASES[c].start + j1 / 16000.0,
                                       TIME_TOL(tk.seq_time[1]));
                    cr_assert_eq(rv_tok_index_audio(&L, tk.item, part), i);
                    cr_assert_eq(rv_tok_audio_before(&L, i), na);
                    na++;
                }
                expect_clock(&tk, what);
                /* non-decreasing within a modality */
                cr_assert_geq(tk.time[0], last_t[m], "case %zu token %lld goes back in time", c,
                              (long long)i);
                last_t[m] = tk.time[0];
            }
        }
        cr_assert_eq(i, L.seq, "case %zu: %lld tokens listed, layout has %lld", c, (long long)i,
                     (long long)L.seq);
        cr_assert_eq(nv, L.nvideo);
        cr_assert_eq(na, L.naudio);
        cr_assert_eq(rv_tok_window_start(&L, L.windows), L.seq);
        cr_assert_eq(L.windows, n ? items[n - 1].window + 1 : 0);
        rv_token tk;
        cr_assert_eq(rv_tok_info(&L, L.seq, &tk), RV_ERR_INVALID);
        free(items);
    }
}

static int64_t J(const rv_tok_layout *L, int64_t k) { return rv_ingest_audio_index(&L->ingest, k); }

/* Every token on exactly one rank; each segment's span holds exactly the
 * tubelets and steps of its tokens, and the grid range reads all their frames
 * and samples. */
Test(layout, shard_spans_cover_exactly)
{
    const int ns[] = {1, 2, 3, 4, 7};
    for (size_t c = 0; c < NCASES; c++) {
        rv_tok_layout L;
        make_case(&CASES[c], &L);
        const int T = L.opts.tubelet;
        for (int kind = 0; kind < 2; kind++)
            for (int ni = 0; ni < 5; ni++) {
                rv_shard_plan sp;
                cr_assert_eq(rv_tok_shard_plan(&L, (rv_shard_kind)kind, ns[ni], &sp), RV_OK);
                uint8_t *seen = calloc((size_t)L.seq + 1, 1);
                int64_t mn = INT64_MAX, mx = 0;
                for (int r = 0; r < ns[ni]; r++) {
                    rv_tok_span spans[RV_SHARD_MAX_SEGS];
                    int nseg = rv_tok_rank_spans(&L, &sp, r, spans);
                    int64_t len = 0;
                    for (int s = 0; s < nseg; s++) {
                        const rv_tok_span *x = &spans[s];
                        int64_t g_lo = INT64_MAX, g_hi = -1, p_lo = INT64_MAX, p_hi = -1;
                        int special = 0;
                        len += x->count;
                        for (int64_t i = x->first; i < x->first + x->count; i++) {
                            rv_token tk;
                            cr_assert_eq(rv_tok_info(&L, i, &tk), RV_OK);
                            seen[i]++;
                            cr_assert(tk.time[0] >= x->time[0] && tk.time[1] <= x->time[1],
                                      "case %zu N=%d r=%d: token %lld outside the span's time",
                                      c, ns[ni], r, (long long)i);
                            if (tk.modality == RV_MOD_VIDEO) {
                                g_lo = tk.item < g_lo ? tk.item : g_lo;
                                g_hi = tk.item > g_hi ? tk.item : g_hi;
                                int64_t k1 = (tk.item + 1) * T < L.nframes ? (tk.item + 1) * T : L.nframes;
                                cr_assert(tk.item * T >= x->frame0 && k1 <= x->frame1);
                                cr_assert(x->frame0 >= x->grid0 && x->frame1 <= x->grid1);
                            } else if (tk.modality == RV_MOD_AUDIO) {
                                p_lo = tk.item < p_lo ? tk.item : p_lo;
                                p_hi = tk.item > p_hi ? tk.item : p_hi;
                                int64_t f0 = tk.item * L.opts.audio_stride;
                                cr_assert(f0 >= x->fbank0 && f0 + L.opts.audio_time <= x->fbank1);
                                cr_assert(f0 * 160 >= x->sample0);
                                cr_assert((f0 + L.opts.audio_time - 1) * 160 + 400 <= x->sample1);
                                cr_assert(J(&L, x->grid0) <= x->sample0 && J(&L, x->grid1) >= x->sample1,
                                          "case %zu: grid [%lld, %lld) does not read samples [%lld, %lld)",
                                          c, (long long)x->grid0, (long long)x->grid1,
                                          (long long)x->sample0, (long long)x->sample1);
                            } else {
                                special++;
                            }
                        }
                        cr_assert_eq(x->cls, special, "case %zu N=%d r=%d: span [%lld, +%lld) "
                                     "says %d special tokens, holds %d", c, ns[ni], r,
                                     (long long)x->first, (long long)x->count, x->cls, special);
                        if (g_hi >= 0) {
                            cr_assert_eq(x->tubelet0, g_lo);
                            cr_assert_eq(x->tubelet1, g_hi + 1);
                        } else {
                            cr_assert_eq(x->tubelet1 - x->tubelet0, 0);
                        }
                        if (p_hi >= 0) {
                            cr_assert_eq(x->step0, p_lo);
                            cr_assert_eq(x->step1, p_hi + 1);
                        } else {
                            cr_assert_eq(x->step1 - x->step0, 0);
                        }
                    }
                    mn = len < mn ? len : mn;
                    mx = len > mx ? len : mx;
                }
                for (int64_t i = 0; i < L.seq; i++)
                    cr_assert_eq(seen[i], 1, "case %zu kind %d N=%d: token %lld on %d ranks", c,
                                 kind, ns[ni], (long long)i, seen[i]);
                cr_assert_leq(mx - mn, kind == RV_SHARD_CONTIGUOUS ? 1 : 2);
                free(seen);
            }
    }
}

/* An hour at the defaults (1 fps, 224 px, T = 2, 16x16 audio patches): zigzag
 * gives every rank the same causal attention work within 5%. */
Test(layout, zigzag_causal_work_hour)
{
    rv_tok_opts to;
    rv_ingest_opts io;
    rv_tok_opts_default(&to);
    rv_ingest_opts_default(&io);
    rv_tok_layout L;
    cr_assert_eq(rv_tok_layout_make(&to, &io, 3600, 3600 * 16000, &L), RV_OK);
    cr_assert_eq(L.nvideo, 1800 * 196);
    cr_assert_eq(L.naudio, ((3600 * 100 - 2 - 16) / 16 + 1) * 8);
    const int ns[] = {2, 3, 4, 7, 8};
    for (int i = 0; i < 5; i++) {
        rv_shard_plan p;
        cr_assert_eq(rv_tok_shard_plan(&L, RV_SHARD_ZIGZAG, ns[i], &p), RV_OK);
        rv_shard_seg all = {0, L.seq};
        double mn = 1e300, mx = 0;
        for (int r = 0; r < ns[i]; r++) {
            rv_shard_seg sg[RV_SHARD_MAX_SEGS];
            int k = rv_shard_segments(&p, r, sg);
            double w = 0;
            for (int j = 0; j < k; j++)
                w += rv_cp_visible_pairs(sg[j], all, 1);
            mn = w < mn ? w : mn;
            mx = w > mx ? w : mx;
        }
        cr_expect(mx <= 1.05 * mn, "N=%d: causal work %g..%g", ns[i], mn, mx);
    }
}

/* ---- planning from a probe ---------------------------------------------------------- */

static rv_probe_stream vstream(int index, double start, double dur)
{
    rv_probe_stream s = {.index = index, .kind = RV_STREAM_VIDEO, .decodable = 1,
                         .start_s = start, .duration_s = dur, .width = 64, .height = 48};
    return s;
}

static rv_probe_stream astream(int index, double start, double dur)
{
    rv_probe_stream s = {.index = index, .kind = RV_STREAM_AUDIO, .decodable = 1,
                         .start_s = start, .duration_s = dur, .sample_rate = 44100, .channels = 1};
    return s;
}

static void plan(rv_probe *p, rv_ingest_opts *io, rv_tok_opts *to, int64_t want_frames,
                 int64_t want_samples)
{
    rv_tok_layout L;
    double end;
    rv_status st = rv_tok_layout_from_probe(p, to, io, &L, &end);
    cr_assert_eq(st, RV_OK, "%s: %s", p->path, rv_last_error());
    cr_assert_eq(L.nframes, want_frames, "%s: %lld frames planned, want %lld", p->path,
                 (long long)L.nframes, (long long)want_frames);
    cr_assert_eq(L.nsamples, want_samples, "%s: %lld samples planned, want %lld", p->path,
                 (long long)L.nsamples, (long long)want_samples);
}

/* The expected counts are what ingest handed out for such files (measured with
 * `ringvit frames --fps 7`: mp4 4.0 s, 28 frames, 64000 samples; webm with
 * stream starts 0.007 / -0.007 and no stream durations, 24 frames; mkv 2.502 s,
 * 18 frames, 40032 samples; wav 2.7 s, 43200 samples). */
Test(layout, from_probe)
{
    rv_tok_opts to;
    rv_ingest_opts io;
    rv_tok_opts_default(&to);
    rv_ingest_opts_default(&io);
    io.fps_num = 7;
    io.size = 32;
    rv_probe_stream s[2];
    rv_probe p = {.path = "mp4", .nstreams = 2, .streams = s, .video = 0, .audio = 1,
                  .duration_s = 4.0, .start_s = 0.0};
    s[0] = vstream(0, 0.0, 4.0);
    s[1] = astream(1, 0.0, 4.0);
    plan(&p, &io, &to, 28, 64000);

    /* matroska: no stream durations; container end less the video start */
    snprintf(p.path, sizeof p.path, "webm");
    p.duration_s = 3.327;
    p.start_s = -0.007;
    s[0] = vstream(0, 0.007, NAN);
    s[1] = astream(1, -0.007, NAN);
    plan(&p, &io, &to, 24, 53008);

    snprintf(p.path, sizeof p.path, "mkv");
    p.duration_s = 2.502;
    p.start_s = 0.0;
    s[0] = vstream(0, 0.0, NAN);
    s[1] = astream(1, 0.0, NAN);
    plan(&p, &io, &to, 18, 40032);
    /* samples are rounded to the nearest, as ingest's llround(end * 16000) */
    p.duration_s = 2.50204;
    plan(&p, &io, &to, 18, 40033);
    p.duration_s = 2.502;

    /* start and duration cut the grid as ingest does */
    snprintf(p.path, sizeof p.path, "mp4 part");
    p.duration_s = 4.0;
    s[0] = vstream(0, 0.0, 4.0);
    s[1] = astream(1, 0.0, 4.0);
    io.start_s = 1.0;
    io.duration_s = 2.0;
    plan(&p, &io, &to, 14, 32000);
    io.start_s = 0.0;
    io.duration_s = 0.0;

    /* streams left out */
    io.audio_stream = -2;
    plan(&p, &io, &to, 28, 0);
    io.audio_stream = -1;
    to.video = 0;
    plan(&p, &io, &to, 0, 64000);
    to.video = 1;

    /* audio only */
    snprintf(p.path, sizeof p.path, "wav");
    p.nstreams = 1;
    p.video = -1;
    p.audio = 0;
    s[0] = astream(0, NAN, 2.7);
    p.duration_s = 2.7;
    p.start_s = NAN;
    plan(&p, &io, &to, 0, 43200);

    /* no duration anywhere: cannot plan */
    s[0].duration_s = NAN;
    p.duration_s = NAN;
    rv_tok_layout L;
    cr_assert_eq(rv_tok_layout_from_probe(&p, &to, &io, &L, NULL), RV_ERR_UNSUPPORTED);
    /* nothing to tokenize */
    p.audio = -1;
    cr_assert_eq(rv_tok_layout_from_probe(&p, &to, &io, &L, NULL), RV_ERR_FORMAT);
}

Test(layout, rejects_bad_options)
{
    rv_tok_opts to;
    rv_ingest_opts io;
    rv_tok_layout L;
    rv_tok_opts_default(&to);
    rv_ingest_opts_default(&io);
    io.size = 40;
    cr_assert_eq(rv_tok_layout_make(&to, &io, 10, 10, &L), RV_ERR_INVALID); /* 16 does not divide 40 */
    io.size = 32;
    /* F need not divide 128 any more: 24 bins side by side are 5 bands, 8 left over */
    to.audio_freq = 24;
    cr_assert_eq(rv_tok_layout_make(&to, &io, 10, 16000, &L), RV_OK, "%s", rv_last_error());
    cr_assert_eq(L.bands, 5);
    rv_tok_opts_default(&to);
    to.audio_freq = 0;
    cr_assert_eq(rv_tok_layout_make(&to, &io, 10, 10, &L), RV_ERR_INVALID);
    to.audio_freq = 129;
    cr_assert_eq(rv_tok_layout_make(&to, &io, 10, 10, &L), RV_ERR_INVALID);
    rv_tok_opts_default(&to);
    to.audio_fstride = -1;
    cr_assert_eq(rv_tok_layout_make(&to, &io, 10, 10, &L), RV_ERR_INVALID);
    to.audio_fstride = 129;
    cr_assert_eq(rv_tok_layout_make(&to, &io, 10, 10, &L), RV_ERR_INVALID);
    cr_assert(strstr(rv_last_error(), "129"), "the message names the stride: %s", rv_last_error());
    for (int bad = -1; bad <= 3; bad += 4) {
        rv_tok_opts_default(&to);
        to.cls = bad;
        cr_assert_eq(rv_tok_opts_check(&to), RV_ERR_INVALID, "cls %d accepted", bad);
        char num[8];
        snprintf(num, sizeof num, "%d", bad);
        cr_assert(strstr(rv_last_error(), num), "the message names cls %d: %s", bad, rv_last_error());
    }
    for (int ok = 0; ok <= 2; ok++) {
        to.cls = ok;
        cr_assert_eq(rv_tok_opts_check(&to), RV_OK, "cls %d: %s", ok, rv_last_error());
    }
    rv_tok_opts_default(&to);
    to.std[1] = 0;
    cr_assert_eq(rv_tok_layout_make(&to, &io, 10, 10, &L), RV_ERR_INVALID);
    rv_tok_opts_default(&to);
    to.video = to.audio = 0;
    cr_assert_eq(rv_tok_layout_make(&to, &io, 10, 10, &L), RV_ERR_INVALID);
    rv_tok_opts_default(&to);
    to.window_s = 0;
    cr_assert_eq(rv_tok_layout_make(&to, &io, 10, 10, &L), RV_ERR_INVALID);
    rv_tok_opts_default(&to);
    cr_assert_eq(rv_tok_layout_make(&to, &io, -1, 10, &L), RV_ERR_INVALID);
    rv_tok_span sp;
    cr_assert_eq(rv_tok_layout_make(&to, &io, 10, 16000, &L), RV_OK);
    cr_assert_eq(rv_tok_span_of(&L, 0, L.seq + 1, &sp), RV_ERR_INVALID);
}
