/* test_tokenize_blocks.c: windows as attention blocks (rv_tokens.h): frame
 * windows (window w = tubelet w's time range), special tokens leading every
 * window (cls_each_window), windows cut from the recording (window_positions:
 * each window tokenized as a recording of its own, positions from 0), and
 * every token's window index.
 *   - layouts against a brute-force model that finds each frame's and each
 *     sample's window by linear search on exact integers (cut windows: each
 *     window's frames make its tubelets from its first frame, its samples its
 *     fbank frames from its first sample and its steps from its first fbank
 *     frame; windows of the whole grid: each tubelet's and step's window by
 *     its start) and writes the documented order out token by token (the
 *     special tokens of every window, empty ones too): time windows with cls 1
 *     and 2 per window, frame windows at 1, 2 and 30000/1001 fps with T 1 and
 *     2 and audio (audio outlasting the video, and ending before it), window
 *     edges off the frames and samples, windows of q or q + 1 frames (samples)
 *     that hold different numbers of tubelets (fbank frames); every token's
 *     description, window and time, what each item reads, the index helpers,
 *     window starts and times;
 *   - spans of every rank of 1, 2, 3, 4, 7 under both shard plans and of every
 *     short run: the special tokens counted, the times, items, frames, fbank
 *     frames and samples exactly those of their tokens;
 *   - engine passes over synthetic recordings: the whole planned pass is what
 *     the layout says (window indices in every batch) with, for windows of the
 *     whole grid, the patches of the plain sequence's tubelets and steps, and
 *     for cut windows patches and fbank rows written plainly from each window's
 *     own frames and samples; the open pass equals it (no special tokens for
 *     windows that turn out not to exist); every rank of 1, 2, 3, 4 and 7
 *     under both shard plans, and slices starting inside a window, get bit for
 *     bit the whole pass's tokens, including special tokens of later windows;
 *   - a block is the recording cut at its bounds: the tokens of cut window w
 *     equal an open pass, with the same options, over the window's frames and
 *     samples alone as a recording of its own (one window long), and a planned
 *     pass of the plain tokenizer over them: patches, positions, modality,
 *     fbank rows, and times shifted by where the window's frames and samples
 *     start;
 *   - the refusals (frame windows without video, flags other than 0 and 1).
 * That the options off give the earlier sequence bit for bit is
 * test_tokenize_compat.c; AST's 10.24 s blocks against torchaudio are
 * test_tokenize_ast_blocks.c. */
#include "tokenize_collect.h"

#include <math.h>
#include <stdio.h>

#include "rv_fbank.h"
#include "rv_tokens.h"

/* Token times in seconds computed two ways in double (the library's from whole
 * samples, microseconds or frame indices; the test's from the same numbers
 * written plainly): a few roundings of values of seconds to minutes, so relative
 * to the time, floored at 1 s (a time of 0 is matched within 1e-12 s); double
 * epsilon is 2.2e-16. */
#define TOL_TIME 1e-12
#define TIME_TOL(t) (TOL_TIME * fmax(fabs(t), 1.0))
/* A block's token times against the same block tokenized alone and shifted by
 * the block's start: two sums of doubles of a few terms, so a few ulps of the
 * larger time; 1e-9 of it (floored at 1 s) leaves room without hiding a sample. */
#define TOL_SHIFT 1e-9

typedef struct bcase {
    const char *name;
    int fps_num, fps_den, size, T, P, F, W, stride, fstride;
    int cls, video, audio;
    double window, start;
    int frame, each, rel; /* frame_windows, cls_each_window, window_positions */
    int64_t nframes, nsamples;
} bcase;

static const bcase CASES[] = {
    /* time windows, a special token per window */
    {"time 1 s, cls 1 each", 5, 1, 16, 2, 8, 16, 16, 16, 0, 1, 1, 1, 1.0, 0.0, 0, 1, 0, 65, 13 * 16000},
    {"time 0.35 s, cls 2 each, cut", 30000, 1001, 24, 3, 8, 32, 16, 10, 0, 2, 1, 1, 0.35,
     1.25, 0, 1, 1, 100, 55555},
    {"time 0.01 s (empty windows, no fbank frame), cls 2 each, cut", 25, 1, 16, 1, 8, 8, 16, 8, 0,
     2, 1, 1, 0.01, 0.5, 0, 1, 1, 37, 20000},
    {"video only 1 fps, 0.35 s windows, cls 2 each", 1, 1, 16, 1, 8, 16, 16, 16, 0, 2, 1, 0, 0.35,
     0.0, 0, 1, 1, 7, 0},
    {"audio only, 0.05 s windows, cls 1 each, cut", 1, 1, 16, 1, 8, 16, 4, 4, 0, 1, 0, 1,
     0.05, 0.0, 0, 1, 1, 0, 9999},
    {"time 1 s, AST audio, cls 2 each, cut", 5, 1, 16, 2, 8, 16, 16, 10, 10, 2, 1, 1, 1.0,
     0.0, 0, 1, 1, 65, 13 * 16000},
    /* frame windows */
    {"frames 1 fps T 1, audio outlasting video, cls 1 each", 1, 1, 16, 1, 8, 16, 16, 16, 0, 1, 1,
     1, 2.0, 0.0, 1, 1, 1, 7, 7 * 16000 + 40000},
    {"frames 1 fps T 2, cls 2 each", 1, 1, 16, 2, 8, 16, 16, 16, 0, 2, 1, 1, 2.0, 0.0, 1, 1, 0, 9,
     9 * 16000},
    {"frames 2 fps T 1, AST audio, cls 2 each, start 0.5", 2, 1, 16, 1, 8, 16, 16, 10, 10, 2, 1, 1,
     2.0, 0.5, 1, 1, 1, 21, 11 * 16000},
    {"frames 2 fps T 2, audio ending early, cls 1 each", 2, 1, 16, 2, 8, 16, 16, 16, 0, 1, 1, 1,
     2.0, 0.0, 1, 1, 1, 21, 3 * 16000},
    {"frames 30000/1001 T 1 (no audio step fits a frame), cls 1 each, cut", 30000, 1001, 16, 1, 8,
     32, 16, 10, 0, 1, 1, 1, 2.0, 1.25, 1, 1, 1, 100, 55555},
    {"frames 30000/1001 T 2, cls 2 each", 30000, 1001, 16, 2, 8, 16, 8, 3, 0, 2, 1, 1, 2.0, 0.0, 1,
     1, 0, 61, 30011},
    {"frames 2 fps T 1, no special tokens, cut", 2, 1, 16, 1, 8, 16, 16, 16, 0, 0, 1, 1, 2.0,
     0.0, 1, 1, 1, 21, 11 * 16000},
    {"frames 5 fps T 2, leading cls 2, cut", 5, 1, 16, 2, 8, 16, 16, 10, 0, 2, 1, 1, 2.0,
     0.0, 1, 0, 1, 33, 7 * 16000},
    {"frames video only 1 fps T 2, odd frames, cls 1 each", 1, 1, 16, 2, 8, 16, 16, 16, 0, 1, 1, 0,
     2.0, 0.0, 1, 1, 1, 9, 0},
    /* 10 ms audio steps (one fbank frame each): frame 300 k starts exactly at
     * sample 160160 k (10.01 k s), a tie only exact arithmetic puts in the
     * right window */
    {"frames 30000/1001 T 1, 10 ms audio steps, exact ties, cls 1 each", 30000, 1001, 16, 1, 16,
     128, 1, 1, 0, 1, 1, 1, 2.0, 0.0, 1, 1, 1, 630, 20 * 16000 + 3000},
    /* 25 fps, T 2: windows of 0.08 s, 1280 samples, 6 fbank frames: too short
     * for an audio step of 16 */
    {"frames 25 fps T 2, default audio (none fits), cls 2 each", 25, 1, 16, 2, 16, 16, 16, 16, 0, 2,
     1, 1, 2.0, 0.0, 1, 1, 1, 250, 10 * 16000},
    /* time windows, leading special token */
    {"time 0.5 s, leading cls 1, cut", 4, 1, 16, 2, 8, 16, 16, 16, 0, 1, 1, 1, 0.5, 0.0, 0,
     0, 1, 30, 8 * 16000},
    /* windows of q or q + 1 frames / samples that hold different numbers of items */
    {"time 0.41 s at 5 fps T 2: 2 or 3 frames, 1 or 2 tubelets, cls 1 each, cut", 5, 1, 16, 2, 8,
     16, 16, 16, 0, 1, 1, 1, 0.41, 0.0, 0, 1, 1, 45, 9 * 16000},
    {"audio only, 0.03499 s: 559 or 560 samples, 1 or 2 fbank frames, cls 1 each, cut", 1, 1, 16,
     1, 8, 16, 1, 1, 0, 1, 0, 1, 0.03499, 0.0, 0, 1, 1, 0, 30000},
    {"time 0.35 s at 7 fps, AST audio, cls 2 each, cut", 7, 1, 16, 2, 8, 16, 16, 10, 10, 2, 1, 1,
     0.35, 0.0, 0, 1, 1, 40, 6 * 16000 + 1234},
    /* blocks on frame and step edges (the cut keeps every patch of the whole
     * grid there) and off them */
    {"time 2 s, video only, cls 1, cut", 5, 1, 16, 2, 8, 16, 16, 10, 0, 1, 1, 0, 2.0, 0.0, 0, 1, 1,
     47, 0},
    {"time 2 s, video only, cls 2, start 0.5, cut", 5, 1, 16, 1, 8, 16, 16, 10, 0, 2, 1, 0, 2.0, 0.5,
     0, 1, 1, 33, 0},
    {"time 2 s, video and audio, cls 2, cut", 5, 1, 16, 2, 8, 16, 16, 10, 0, 2, 1, 1, 2.0, 0.0, 0, 1,
     1, 47, 9 * 16000 + 5000},
    {"time 1.28 s, 25 fps, default audio, cls 1, cut", 25, 1, 16, 2, 8, 16, 16, 16, 0, 1, 1, 1, 1.28,
     0.0, 0, 1, 1, 101, 4 * 16000},
    {"frame T 1, 5 fps, video and audio, cls 2, cut", 5, 1, 16, 1, 8, 16, 16, 10, 0, 2, 1, 1, 2.0,
     0.0, 1, 1, 1, 13, 3 * 16000},
    {"frame T 2, 5 fps, video and audio, cls 1, start 1, cut", 5, 1, 16, 2, 8, 16, 16, 10, 0, 1, 1,
     1, 2.0, 1.0, 1, 1, 1, 15, 3 * 16000 + 2000},
    {"frame T 2, 5 fps, video only, cls 1, cut", 5, 1, 16, 2, 8, 16, 16, 16, 0, 1, 1, 0, 2.0, 0.0, 1,
     1, 1, 9, 0},
    {"time 0.7 s, 3 fps T 2, AST audio, leading cls 2, cut", 3, 1, 16, 2, 8, 16, 16, 10, 10, 2, 1,
     1, 0.7, 0.0, 0, 0, 1, 20, 7 * 16000 + 333},
};
#define NCASES (sizeof CASES / sizeof CASES[0])

static void case_opts(const bcase *c, rv_tok_opts *to, rv_ingest_opts *io)
{
    rv_tok_opts_default(to);
    rv_ingest_opts_default(io);
    io->fps_num = c->fps_num;
    io->fps_den = c->fps_den;
    io->size = c->size;
    io->start_s = c->start;
    to->tubelet = c->T;
    to->patch = c->P;
    to->audio_freq = c->F;
    to->audio_time = c->W;
    to->audio_stride = c->stride;
    to->audio_fstride = c->fstride;
    to->cls = c->cls;
    to->video = c->video;
    to->audio = c->audio;
    to->window_s = c->window;
    to->frame_windows = c->frame;
    to->cls_each_window = c->each;
    to->window_positions = c->rel;
}

static void make_case(const bcase *c, rv_tok_layout *L)
{
    rv_tok_opts to;
    rv_ingest_opts io;
    case_opts(c, &to, &io);
    cr_assert_eq(rv_tok_layout_make(&to, &io, c->nframes, c->nsamples, L), RV_OK, "%s: %s",
                 c->name, rv_last_error());
}

/* ---- the brute-force model ------------------------------------------------------- */

__extension__ typedef __int128 i128;

/* Whether window w starts at or before frame k, on exact integers: time windows
 * start w * window_us us after the grid start (window_us = the window rounded
 * to the microsecond), frame windows at frame w * T; frame k is k * fps_den /
 * fps_num s in. */
static int starts_by_frame(const bcase *c, int64_t w, int64_t k)
{
    if (c->frame)
        return w * c->T <= k;
    return (i128)w * llround(c->window * 1e6) * c->fps_num <= (i128)k * c->fps_den * 1000000;
}

/* The same for sample j, j / 16000 s in. */
static int starts_by_sample(const bcase *c, int64_t w, int64_t j)
{
    if (c->frame) /* frame w T at w T fd / fn s <= j / 16000 s */
        return (i128)w * c->T * c->fps_den * 16000 <= (i128)j * c->fps_num;
    return (i128)w * llround(c->window * 1e6) * 16 <= (i128)j * 1000; /* in 1/16e6 s */
}

/* Largest w starting at or before frame k (sample j), by linear search. */
static int64_t model_window_of_frame(const bcase *c, int64_t k)
{
    int64_t w = 0;
    while (starts_by_frame(c, w + 1, k))
        w++;
    return w;
}

static int64_t model_window_of_sample(const bcase *c, int64_t j)
{
    int64_t w = 0;
    while (starts_by_sample(c, w + 1, j))
        w++;
    return w;
}

/* One token as the model writes it. */
typedef struct mtok {
    int mod;
    int64_t item, window, pos0;
    int part;
} mtok;

typedef struct model {
    int64_t n, windows, nspecial;
    mtok *tok;
    int64_t *wstart;          /* (windows + 1) the first token of each window */
    /* what each item reads */
    int64_t ntub, nstep, nfb;
    int64_t *tub_k0, *tub_k1; /* (ntub) frames [k0, k1) (k1 cut at the last frame) */
    int64_t *tub_w;           /* (ntub) its window */
    int64_t *step_f0, *step_w; /* (nstep) first fbank frame, window */
    int64_t *fb_j0;           /* (nfb) first sample */
    /* cut windows [0, nwin): frames [wk0, wk0 + wnf), samples [wj0, wj0 + wns),
     * fbank frames [wf0, wf0 + wnfb) */
    int64_t nwin;
    int64_t *wk0, *wnf, *wj0, *wns, *wf0, *wnfb;
} model;

static int64_t *ialloc(int64_t n)
{
    int64_t *p = calloc((size_t)n + 1, sizeof(int64_t));
    cr_assert(p);
    return p;
}

/* Fbank frames of n samples and audio steps of f fbank frames, as rv_tokens.h
 * says. */
static int64_t model_fbanks(int64_t n) { return n >= 400 ? 1 + (n - 400) / 160 : 0; }
static int64_t model_steps(const bcase *c, int64_t f)
{
    return f >= c->W ? 1 + (f - c->W) / c->stride : 0;
}

/* Items of the whole grid: tubelet g reads frames gT.., step p fbank frames
 * p stride.., fbank frame f samples 160 f..; each in the window its start is in. */
static void model_items_whole(const bcase *c, model *m)
{
    const int64_t nf = c->video ? c->nframes : 0, ns = c->audio ? c->nsamples : 0;
    m->ntub = (nf + c->T - 1) / c->T;
    m->nfb = model_fbanks(ns);
    m->nstep = model_steps(c, m->nfb);
    m->tub_k0 = ialloc(m->ntub), m->tub_k1 = ialloc(m->ntub), m->tub_w = ialloc(m->ntub);
    m->step_f0 = ialloc(m->nstep), m->step_w = ialloc(m->nstep), m->fb_j0 = ialloc(m->nfb);
    for (int64_t g = 0; g < m->ntub; g++) {
        m->tub_k0[g] = g * c->T;
        m->tub_k1[g] = (g + 1) * c->T < nf ? (g + 1) * c->T : nf;
        m->tub_w[g] = model_window_of_frame(c, g * c->T);
    }
    for (int64_t f = 0; f < m->nfb; f++)
        m->fb_j0[f] = 160 * f;
    for (int64_t p = 0; p < m->nstep; p++) {
        m->step_f0[p] = p * c->stride;
        m->step_w[p] = model_window_of_sample(c, p * c->stride * 160);
    }
}

/* Items of cut windows: each frame and each sample in the window its time is
 * in; every window's frames make its tubelets (the last may be short), its
 * samples its fbank frames, those its steps. */
static void model_items_cut(const bcase *c, model *m)
{
    const int64_t nf = c->video ? c->nframes : 0, ns = c->audio ? c->nsamples : 0;
    int64_t last = -1;
    if (nf > 0)
        last = model_window_of_frame(c, nf - 1);
    if (ns > 0) {
        int64_t w = model_window_of_sample(c, ns - 1);
        last = w > last ? w : last;
    }
    m->nwin = last + 1;
    m->wk0 = ialloc(m->nwin), m->wnf = ialloc(m->nwin), m->wj0 = ialloc(m->nwin);
    m->wns = ialloc(m->nwin), m->wf0 = ialloc(m->nwin), m->wnfb = ialloc(m->nwin);
    for (int64_t w = 0; w < m->nwin; w++)
        m->wk0[w] = m->wj0[w] = -1;
    for (int64_t k = 0, w = 0; k < nf; k++) {
        while (starts_by_frame(c, w + 1, k))
            w++;
        if (m->wk0[w] < 0)
            m->wk0[w] = k;
        m->wnf[w]++;
    }
    for (int64_t j = 0, w = 0; j < ns; j++) {
        while (starts_by_sample(c, w + 1, j))
            w++;
        if (m->wj0[w] < 0)
            m->wj0[w] = j;
        m->wns[w]++;
    }
    m->ntub = m->nfb = m->nstep = 0;
    for (int64_t w = 0; w < m->nwin; w++) {
        m->ntub += (m->wnf[w] + c->T - 1) / c->T;
        m->wnfb[w] = model_fbanks(m->wns[w]);
        m->nfb += m->wnfb[w];
        m->nstep += model_steps(c, m->wnfb[w]);
    }
    m->tub_k0 = ialloc(m->ntub), m->tub_k1 = ialloc(m->ntub), m->tub_w = ialloc(m->ntub);
    m->step_f0 = ialloc(m->nstep), m->step_w = ialloc(m->nstep), m->fb_j0 = ialloc(m->nfb);
    int64_t g = 0, f = 0, p = 0;
    for (int64_t w = 0; w < m->nwin; w++) {
        for (int64_t k = m->wk0[w]; k >= 0 && k < m->wk0[w] + m->wnf[w]; k += c->T, g++) {
            m->tub_k0[g] = k;
            m->tub_k1[g] = k + c->T < m->wk0[w] + m->wnf[w] ? k + c->T : m->wk0[w] + m->wnf[w];
            m->tub_w[g] = w;
        }
        m->wf0[w] = f;
        for (int64_t i = 0; i < m->wnfb[w]; i++, f++)
            m->fb_j0[f] = m->wj0[w] + 160 * i;
        for (int64_t i = 0; i < model_steps(c, m->wnfb[w]); i++, p++) {
            m->step_f0[p] = m->wf0[w] + i * c->stride;
            m->step_w[p] = w;
        }
    }
}

/* The documented order, written out: the leading special tokens (or, with
 * cls_each_window, every window's), then window by window its tubelets' tokens
 * and its steps' tokens. */
static void model_make(const bcase *c, const rv_tok_layout *L, model *m)
{
    memset(m, 0, sizeof *m);
    if (c->rel)
        model_items_cut(c, m);
    else
        model_items_whole(c, m);
    int64_t windows = 0;
    for (int64_t g = 0; g < m->ntub; g++)
        windows = m->tub_w[g] + 1 > windows ? m->tub_w[g] + 1 : windows;
    for (int64_t p = 0; p < m->nstep; p++)
        windows = m->step_w[p] + 1 > windows ? m->step_w[p] + 1 : windows;
    int64_t cap = (c->each ? windows + 1 : 1) * c->cls + m->ntub * L->per_tubelet +
                  m->nstep * L->bands + 1;
    m->tok = malloc(sizeof(mtok) * (size_t)cap);
    m->wstart = ialloc(windows + 1);
    m->windows = windows;
    int64_t n = 0;
    if (!c->each)
        for (int i = 0; i < c->cls; i++, n++, m->nspecial++)
            m->tok[n] = (mtok){RV_MOD_CLS, -1, 0, i, 0};
    for (int64_t w = 0; w < windows; w++) {
        m->wstart[w] = n;
        if (c->each)
            for (int i = 0; i < c->cls; i++, n++, m->nspecial++)
                m->tok[n] = (mtok){RV_MOD_CLS, -1, w, i, 0};
        int64_t first = -1;
        for (int64_t g = 0; g < m->ntub; g++) {
            if (m->tub_w[g] != w)
                continue;
            if (first < 0)
                first = g;
            for (int q = 0; q < L->per_tubelet; q++, n++)
                m->tok[n] = (mtok){RV_MOD_VIDEO, g, w, c->rel ? g - first : g, q};
        }
        first = -1;
        for (int64_t p = 0; p < m->nstep; p++) {
            if (m->step_w[p] != w)
                continue;
            if (first < 0)
                first = p;
            for (int b = 0; b < L->bands; b++, n++)
                m->tok[n] = (mtok){RV_MOD_AUDIO, p, w, c->rel ? p - first : p, b};
        }
    }
    m->wstart[windows] = n;
    m->n = n;
}

static void model_free(model *m)
{
    free(m->tok), free(m->wstart);
    free(m->tub_k0), free(m->tub_k1), free(m->tub_w);
    free(m->step_f0), free(m->step_w), free(m->fb_j0);
    free(m->wk0), free(m->wnf), free(m->wj0), free(m->wns), free(m->wf0), free(m->wnfb);
    memset(m, 0, sizeof *m);
}

/* t_w: time windows start (start_us + w * window_us) / 1e6 s (the microsecond
 * arithmetic), frame windows at frame w * T. */
static double model_window_time(const rv_tok_layout *L, const bcase *c, int64_t w)
{
    if (L->opts.frame_windows)
        return rv_ingest_frame_time(&L->ingest, w * L->opts.tubelet);
    double t = (double)(llround(c->start * 1e6) + w * llround(c->window * 1e6)) / 1e6;
    cr_assert_float_eq(t, c->start + w * c->window, TIME_TOL(t));
    return t;
}

/* Sample j's time, s after t0 (the layout's must agree within TIME_TOL). */
static double model_sample_time(const bcase *c, int64_t j) { return c->start + j / 16000.0; }

Test(blocks, layouts_match_the_model)
{
    for (size_t c = 0; c < NCASES; c++) {
        const bcase *k = &CASES[c];
        rv_tok_layout L;
        make_case(k, &L);
        const rv_tok_opts *o = &L.opts;
        model m;
        model_make(k, &L, &m);
        cr_assert_eq(L.seq, m.n, "%s: seq %lld, the model has %lld", k->name, (long long)L.seq,
                     (long long)m.n);
        cr_assert_eq(L.windows, m.windows, "%s: %lld windows, the model has %lld", k->name,
                     (long long)L.windows, (long long)m.windows);
        cr_assert(L.tubelets == m.ntub && L.steps == m.nstep && L.fbank_frames == m.nfb,
                  "%s: %lld tubelets, %lld steps, %lld fbank frames; the model has %lld, %lld, "
                  "%lld", k->name, (long long)L.tubelets, (long long)L.steps,
                  (long long)L.fbank_frames, (long long)m.ntub, (long long)m.nstep,
                  (long long)m.nfb);
        cr_assert_eq(L.nspecial, m.nspecial, "%s", k->name);
        cr_assert_eq(L.seq, L.nspecial + L.nvideo + L.naudio);
        cr_assert_eq(L.nspecial, o->cls_each_window ? L.windows * o->cls : o->cls);
        for (int64_t w = 0; w <= L.windows; w++) {
            /* without cls_each_window window 0 starts after the leading tokens */
            int64_t want = w == 0 && !o->cls_each_window ? o->cls : m.wstart[w];
            cr_assert_eq(rv_tok_window_start(&L, w), want, "%s: window %lld starts at %lld, "
                         "want %lld", k->name, (long long)w,
                         (long long)rv_tok_window_start(&L, w), (long long)want);
        }
        int64_t nv = 0, na = 0, ns = 0;
        double last_t[2] = {-1, -1};
        for (int64_t i = 0; i < L.seq; i++) {
            const mtok *e = &m.tok[i];
            rv_token tk;
            cr_assert_eq(rv_tok_info(&L, i, &tk), RV_OK);
            cr_assert(tk.modality == e->mod && tk.item == e->item && tk.part == e->part &&
                          tk.window == e->window && tk.pos[0] == e->pos0,
                      "%s: token %lld is (%s item %lld part %d window %lld pos %lld), the model "
                      "has (%s %lld %d %lld %lld)", k->name, (long long)i,
                      rv_modality_name(tk.modality), (long long)tk.item, tk.part,
                      (long long)tk.window, (long long)tk.pos[0], rv_modality_name(e->mod),
                      (long long)e->item, e->part, (long long)e->window, (long long)e->pos0);
            cr_assert_eq(rv_tok_window_of(&L, i), e->window, "%s: token %lld", k->name,
                         (long long)i);
            cr_assert_eq(rv_tok_video_before(&L, i), nv, "%s: token %lld", k->name, (long long)i);
            cr_assert_eq(rv_tok_audio_before(&L, i), na, "%s: token %lld", k->name, (long long)i);
            if (e->mod == RV_MOD_CLS) {
                double tw = o->cls_each_window ? model_window_time(&L, k, e->window)
                                               : rv_ingest_frame_time(&L.ingest, 0);
                cr_assert(tk.pos[1] == 0 && tk.pos[2] == 0 && tk.seq_time[0] == tw &&
                              tk.seq_time[1] == tw,
                          "%s: special token %lld at %.17g s, want %.17g", k->name, (long long)i,
                          tk.seq_time[0], tw);
                if (o->cls_each_window)
                    cr_assert_eq(rv_tok_window_time(&L, e->window), tw);
                ns++;
            } else if (e->mod == RV_MOD_VIDEO) {
                int64_t k0 = m.tub_k0[e->item];
                cr_assert_eq(tk.pos[1], e->part / L.grid);
                cr_assert_eq(tk.pos[2], e->part % L.grid);
                cr_assert(tk.seq_time[0] == rv_ingest_frame_time(&L.ingest, k0) &&
                              tk.seq_time[1] == rv_ingest_frame_time(&L.ingest, k0 + o->tubelet),
                          "%s: token %lld (tubelet %lld, frame %lld) at %.17g s", k->name,
                          (long long)i, (long long)e->item, (long long)k0, tk.seq_time[0]);
                cr_assert_eq(rv_tok_index_video(&L, e->item, e->part), i, "%s: token %lld",
                             k->name, (long long)i);
                cr_assert_eq(rv_tok_window_of_tubelet(&L, e->item), e->window);
                /* a frame window's time is its tubelet's */
                if (o->frame_windows)
                    cr_assert_eq(rv_tok_window_time(&L, e->window), tk.seq_time[0]);
                nv++;
            } else {
                int64_t j0 = m.fb_j0[m.step_f0[e->item]];
                int64_t j1 = j0 + (o->audio_time - 1) * 160 + 400;
                cr_assert_eq(tk.pos[1], e->part);
                cr_assert_eq(tk.pos[2], 0);
                cr_assert(fabs(tk.seq_time[0] - model_sample_time(k, j0)) <= TIME_TOL(tk.seq_time[0]) &&
                              fabs(tk.seq_time[1] - model_sample_time(k, j1)) <= TIME_TOL(tk.seq_time[1]),
                          "%s: token %lld (step %lld, samples %lld..%lld) at %.17g..%.17g s",
                          k->name, (long long)i, (long long)e->item, (long long)j0,
                          (long long)j1, tk.seq_time[0], tk.seq_time[1]);
                cr_assert_eq(rv_tok_index_audio(&L, e->item, e->part), i, "%s: token %lld",
                             k->name, (long long)i);
                cr_assert_eq(rv_tok_window_of_step(&L, e->item), e->window);
                /* its first sample is inside its window's time range */
                cr_assert_geq(tk.seq_time[0], rv_tok_window_time(&L, e->window) -
                                                  TIME_TOL(tk.seq_time[0]));
                cr_assert_lt(tk.seq_time[0], rv_tok_window_time(&L, e->window + 1));
                /* a cut window's steps read no sample past its end */
                if (o->window_positions)
                    cr_assert_lt(tk.seq_time[1] - 1.0 / 16000,
                                 rv_tok_window_time(&L, e->window + 1) +
                                     TIME_TOL(tk.seq_time[1]),
                                 "%s: token %lld reads past its window's end", k->name,
                                 (long long)i);
                na++;
            }
            if (e->mod != RV_MOD_CLS) {
                cr_assert_geq(tk.seq_time[0], last_t[e->mod], "%s: token %lld goes back in time",
                              k->name, (long long)i);
                last_t[e->mod] = tk.seq_time[0];
            }
        }
        cr_assert_eq(nv, L.nvideo);
        cr_assert_eq(na, L.naudio);
        cr_assert_eq(ns, L.nspecial);
        rv_token tk;
        cr_assert_eq(rv_tok_info(&L, L.seq, &tk), RV_ERR_INVALID);
        model_free(&m);
    }
}

/* The window geometry the cases are meant to have (so the model is not
 * trivially agreeing with a degenerate layout). */
Test(blocks, case_geometry)
{
    rv_tok_layout L;
    make_case(&CASES[6], &L); /* 1 fps T 1, 7 frames, 9.5 s of audio, cut */
    cr_assert_eq(L.tubelets, 7);
    cr_assert_eq(L.windows, 10, "audio after the last frame has windows of its own: %lld",
                 (long long)L.windows);
    cr_assert_eq(L.window_us, 0);
    /* window 1 is [1, 2) s: its own 16000 samples, 98 fbank frames, 6 steps of 16
     * (steps 6 .. 11); the whole grid would give it steps 7 .. 12 (those whose
     * first sample is in [16000, 32000)), the last reading past 2 s */
    int64_t g0, g1, p0, p1;
    rv_tok_window_items(&L, 1, &g0, &g1, &p0, &p1);
    cr_assert(g0 == 1 && g1 == 2 && p0 == 6 && p1 == 12, "window 1: tubelets [%lld, %lld), steps "
              "[%lld, %lld)", (long long)g0, (long long)g1, (long long)p0, (long long)p1);
    rv_tok_window_items(&L, 9, &g0, &g1, &p0, &p1); /* 8000 samples: 48 frames, 3 steps */
    cr_assert(g0 == 7 && g1 == 7 && p0 == 54 && p1 == 57, "window 9: tubelets [%lld, %lld), "
              "steps [%lld, %lld)", (long long)g0, (long long)g1, (long long)p0, (long long)p1);
    cr_assert_eq(L.fbank_frames, 9 * 98 + 48);
    cr_assert_eq(L.seq, 10 * 1 + L.nvideo + L.naudio);
    make_case(&CASES[3], &L); /* video only, 1 fps, 0.35 s windows: frames at 0, 1, .. 6 s */
    cr_assert_eq(L.windows, 18); /* 6 s is in [17 * 0.35, 18 * 0.35) */
    cr_assert_eq(L.seq, L.windows * 2 + 7 * L.per_tubelet, "empty windows get their special "
                 "tokens too");
    make_case(&CASES[11], &L); /* 30000/1001 fps, T 2: a window every 2002/30000 s */
    rv_token tk;
    cr_assert_eq(rv_tok_info(&L, rv_tok_window_start(&L, 3), &tk), RV_OK);
    cr_assert(tk.modality == RV_MOD_CLS && tk.window == 3 && tk.pos[0] == 0);
    cr_assert_eq(tk.seq_time[0], 3 * 2 * 1001 / 30000.0);
    /* the ties: frame 300 k is at 10.01 k s, sample 160160 k; that sample opens
     * window 300 k (its one 10 ms step starts there), the one before is window
     * 300 k - 1's */
    make_case(&CASES[15], &L);
    for (int64_t k = 1; k <= 2; k++) {
        rv_tok_window_items(&L, 300 * k, &g0, &g1, &p0, &p1);
        cr_assert(g0 == 300 * k && p1 == p0 + 1, "window %lld: tubelet %lld, steps [%lld, %lld)",
                  (long long)(300 * k), (long long)g0, (long long)p0, (long long)p1);
        cr_assert_eq(rv_tok_info(&L, rv_tok_index_audio(&L, p0, 0), &tk), RV_OK);
        cr_assert_eq(tk.seq_time[0], 10.01 * (double)k, "window %lld's step at %.17g s",
                     (long long)(300 * k), tk.seq_time[0]);
        cr_assert_eq(rv_tok_window_of_step(&L, p0), 300 * k);
    }
    for (int64_t w = 0; w < 600; w++) { /* the audio ends in window 605 */
        rv_tok_window_items(&L, w, &g0, &g1, &p0, &p1);
        cr_assert(g1 == g0 + 1 && p1 == p0 + 1, "window %lld of 1001/30000 s: %lld tubelets, "
                  "%lld steps", (long long)w, (long long)(g1 - g0), (long long)(p1 - p0));
    }
    /* 0.08 s windows hold 1280 samples, 6 fbank frames: no audio step of 16 */
    make_case(&CASES[16], &L);
    cr_assert(L.naudio == 0 && L.fbank_frames == 125 * 6, "%lld audio tokens, %lld fbank frames",
              (long long)L.naudio, (long long)L.fbank_frames);
    /* windows of 2 or 3 frames: 1 or 2 tubelets of 2 */
    make_case(&CASES[18], &L);
    int tub[3] = {0, 0, 0};
    for (int64_t w = 0; w < L.windows; w++) {
        rv_tok_window_items(&L, w, &g0, &g1, &p0, &p1);
        cr_assert(g1 - g0 >= 0 && g1 - g0 <= 2);
        tub[g1 - g0]++;
    }
    cr_assert(tub[1] > 0 && tub[2] > 0, "windows of 1 tubelet: %d, of 2: %d", tub[1], tub[2]);
    /* windows of 559 or 560 samples: 1 or 2 fbank frames (steps of one) */
    make_case(&CASES[19], &L);
    int steps[3] = {0, 0, 0};
    for (int64_t w = 0; w + 1 < L.windows; w++) {
        rv_tok_window_items(&L, w, &g0, &g1, &p0, &p1);
        cr_assert(p1 - p0 >= 1 && p1 - p0 <= 2);
        steps[p1 - p0]++;
    }
    cr_assert(steps[1] > 0 && steps[2] > 0, "windows of 1 step: %d, of 2: %d", steps[1], steps[2]);
    /* 0.01 s windows hold 160 samples: no fbank frame at all */
    make_case(&CASES[2], &L);
    cr_assert(L.fbank_frames == 0 && L.naudio == 0);
}

/* ---- spans ------------------------------------------------------------------------ */

/* Span [first, first + count) against its tokens: special tokens counted, the
 * earliest start and latest end, the items exactly those of its tokens, and
 * the frames, fbank frames and samples those items read (the model's). */
static void check_span(const rv_tok_layout *L, const model *m, int64_t first, int64_t count,
                       const char *what)
{
    rv_tok_span x;
    cr_assert_eq(rv_tok_span_of(L, first, count, &x), RV_OK);
    int64_t special = 0, g_lo = INT64_MAX, g_hi = -1, p_lo = INT64_MAX, p_hi = -1;
    double t0 = INFINITY, t1 = -INFINITY;
    for (int64_t i = first; i < first + count; i++) {
        rv_token tk;
        cr_assert_eq(rv_tok_info(L, i, &tk), RV_OK);
        t0 = fmin(t0, tk.time[0]);
        t1 = fmax(t1, tk.time[1]);
        if (tk.modality == RV_MOD_CLS) {
            special++;
        } else if (tk.modality == RV_MOD_VIDEO) {
            g_lo = tk.item < g_lo ? tk.item : g_lo;
            g_hi = tk.item > g_hi ? tk.item : g_hi;
        } else {
            p_lo = tk.item < p_lo ? tk.item : p_lo;
            p_hi = tk.item > p_hi ? tk.item : p_hi;
        }
    }
    cr_assert_eq(x.cls, special, "%s: span [%lld, +%lld) says %lld special tokens, holds %lld",
                 what, (long long)first, (long long)count, (long long)x.cls, (long long)special);
    if (count > 0)
        cr_assert(x.time[0] == t0 && x.time[1] == t1, "%s: span [%lld, +%lld) times "
                  "%.17g..%.17g, its tokens %.17g..%.17g", what, (long long)first,
                  (long long)count, x.time[0], x.time[1], t0, t1);
    if (g_hi >= 0)
        cr_assert(x.tubelet0 == g_lo && x.tubelet1 == g_hi + 1 && x.frame0 == m->tub_k0[g_lo] &&
                      x.frame1 == m->tub_k1[g_hi] && x.grid0 <= x.frame0 && x.grid1 >= x.frame1,
                  "%s: span [%lld, +%lld) tubelets [%lld, %lld) frames [%lld, %lld), the model "
                  "[%lld, %lld) [%lld, %lld)", what, (long long)first, (long long)count,
                  (long long)x.tubelet0, (long long)x.tubelet1, (long long)x.frame0,
                  (long long)x.frame1, (long long)g_lo, (long long)g_hi + 1,
                  (long long)m->tub_k0[g_lo], (long long)m->tub_k1[g_hi]);
    else
        cr_assert_eq(x.tubelet1, x.tubelet0);
    if (p_hi >= 0) {
        int64_t f0 = m->step_f0[p_lo], f1 = m->step_f0[p_hi] + L->opts.audio_time;
        cr_assert(x.step0 == p_lo && x.step1 == p_hi + 1 && x.fbank0 == f0 && x.fbank1 == f1 &&
                      x.sample0 == m->fb_j0[f0] && x.sample1 == m->fb_j0[f1 - 1] + 400 &&
                      rv_ingest_audio_index(&L->ingest, x.grid0) <= x.sample0 &&
                      rv_ingest_audio_index(&L->ingest, x.grid1) >= x.sample1,
                  "%s: span [%lld, +%lld) steps [%lld, %lld) fbank [%lld, %lld) samples [%lld, "
                  "%lld), the model [%lld, %lld) [%lld, %lld)", what, (long long)first,
                  (long long)count, (long long)x.step0, (long long)x.step1, (long long)x.fbank0,
                  (long long)x.fbank1, (long long)x.sample0, (long long)x.sample1,
                  (long long)p_lo, (long long)p_hi + 1, (long long)f0, (long long)f1);
    } else {
        cr_assert_eq(x.step1, x.step0);
    }
    if (g_hi < 0 && p_hi < 0)
        cr_assert_eq(x.grid1, x.grid0, "%s: a span of special tokens only reads nothing", what);
}

Test(blocks, spans_count_what_they_hold)
{
    const int ns[] = {1, 2, 3, 4, 7};
    for (size_t c = 0; c < NCASES; c++) {
        rv_tok_layout L;
        make_case(&CASES[c], &L);
        model m;
        model_make(&CASES[c], &L, &m);
        for (int kind = 0; kind < 2; kind++)
            for (int ni = 0; ni < 5; ni++) {
                rv_shard_plan sp;
                cr_assert_eq(rv_tok_shard_plan(&L, (rv_shard_kind)kind, ns[ni], &sp), RV_OK);
                uint8_t *seen = calloc((size_t)L.seq + 1, 1);
                int64_t special = 0;
                for (int r = 0; r < ns[ni]; r++) {
                    rv_tok_span spans[RV_SHARD_MAX_SEGS];
                    int nseg = rv_tok_rank_spans(&L, &sp, r, spans);
                    for (int s = 0; s < nseg; s++) {
                        char what[200];
                        snprintf(what, sizeof what, "%s, %s N=%d rank %d", CASES[c].name,
                                 rv_shard_kind_name((rv_shard_kind)kind), ns[ni], r);
                        check_span(&L, &m, spans[s].first, spans[s].count, what);
                        special += spans[s].cls;
                        for (int64_t i = spans[s].first; i < spans[s].first + spans[s].count; i++)
                            seen[i]++;
                    }
                }
                cr_assert_eq(special, L.nspecial, "%s: %lld special tokens over the ranks",
                             CASES[c].name, (long long)special);
                for (int64_t i = 0; i < L.seq; i++)
                    cr_assert_eq(seen[i], 1);
                free(seen);
            }
        /* every short run */
        const int64_t counts[] = {0, 1, 2, 3, 7};
        for (int64_t first = 0; first <= L.seq; first++)
            for (int k = 0; k < 5; k++)
                if (first + counts[k] <= L.seq)
                    check_span(&L, &m, first, counts[k], CASES[c].name);
        model_free(&m);
    }
}

/* ---- engine passes ------------------------------------------------------------------ */

/* Only the cases the engine tests run (small enough for many passes). */
static const int ENGINE_CASES[] = {0,  1,  2,  3,  4,  5,  6,  8,  9,  10, 11, 13, 14, 16,
                                   17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28};
#define NENGINE (sizeof ENGINE_CASES / sizeof ENGINE_CASES[0])

static void media_for(const bcase *c, uint64_t seed, tt_media *m)
{
    tt_media_make(m, c->video ? c->nframes : 0, c->size, c->audio ? c->nsamples : 0, seed);
}

static void run_planned(const rv_tok_layout *L, int64_t first, int64_t count, const tt_media *m,
                        const int *sizes, int nsizes, tok_table *t, rv_tok_stats *st)
{
    rv_tok_span span;
    cr_assert_eq(rv_tok_span_of(L, first, count, &span), RV_OK);
    rv_tokenizer *tk = NULL;
    cr_assert_eq(rv_tokenizer_new(L, first, count, NULL, NULL, 0, 0, tt_collect, t, &tk), RV_OK,
                 "%s", rv_last_error());
    if (first == 0 && count == L->seq)
        tt_feed(tk, &L->ingest, m, 0, tt_media_grid_end(&L->ingest, m), sizes, nsizes, 1);
    else
        tt_feed(tk, &L->ingest, m, span.grid0, span.grid1, sizes, nsizes, 1);
    rv_tokenizer_stats(tk, st);
    rv_tokenizer_free(&tk);
    cr_assert_eq(st->tokens, count, "[%lld, +%lld): %lld tokens", (long long)first,
                 (long long)count, (long long)st->tokens);
    cr_assert_eq(st->cls_tokens, span.cls, "[%lld, +%lld): %lld special tokens, the span has "
                 "%lld", (long long)first, (long long)count, (long long)st->cls_tokens,
                 (long long)span.cls);
}

/* Video patch q of a tubelet reading frames [k0, k1) of m (the last repeated up
 * to T), written plainly in (t, y, x, c) order: (pixel / 255 - mean) / std in
 * the expression of the library's table, so equal bit for bit. */
static void ref_video_patch(const rv_tok_layout *L, const tt_media *m, int64_t k0, int64_t k1,
                            int q, float *out)
{
    const int T = L->opts.tubelet, P = L->opts.patch, S = m->size, G = S / P;
    const int gy = q / G, gx = q % G;
    int64_t o = 0;
    for (int t = 0; t < T; t++) {
        int64_t k = k0 + t < k1 ? k0 + t : k1 - 1;
        const uint8_t *f = m->frames + (size_t)k * S * S * 3;
        for (int y = 0; y < P; y++)
            for (int x = 0; x < P; x++)
                for (int c = 0; c < 3; c++) {
                    uint8_t v = f[((size_t)(gy * P + y) * S + (size_t)gx * P + x) * 3 + c];
                    out[o++] = (float)(((double)v / 255.0 - L->opts.mean[c]) / L->opts.std[c]);
                }
    }
}

/* Cut windows: every window's fbank rows are the filterbank of its own samples
 * (bit for bit: the same frames of the same samples), every video patch is
 * written from the window's frames, every audio patch from the window's rows. */
static void check_cut_patches(const bcase *c, const model *mm, const rv_tok_layout *L,
                              const tt_media *m, const tok_table *t)
{
    rv_fbank *fb = NULL;
    cr_assert_eq(rv_fbank_new(&fb), RV_OK);
    int64_t pd = L->video_dim > L->audio_dim ? L->video_dim : L->audio_dim;
    float *ref = malloc(sizeof(float) * (size_t)pd);
    float **rows = calloc((size_t)mm->nwin + 1, sizeof(float *));
    cr_assert(ref && rows);
    for (int64_t w = 0; w < mm->nwin; w++) {
        if (mm->wnfb[w] == 0)
            continue;
        rows[w] = malloc(sizeof(float) * (size_t)(mm->wnfb[w] * 128));
        cr_assert(rows[w]);
        rv_fbank_compute(fb, m->audio + mm->wj0[w], mm->wns[w], rows[w]);
        for (int64_t f = mm->wf0[w]; f < mm->wf0[w] + mm->wnfb[w]; f++)
            cr_assert_eq(t->fb_have[f], 1, "%s: fbank frame %lld handed out %d times", c->name,
                         (long long)f, t->fb_have[f]);
        cr_assert_arr_eq(t->fbank + mm->wf0[w] * 128, rows[w],
                         sizeof(float) * (size_t)(mm->wnfb[w] * 128),
                         "%s: window %lld's fbank rows are not the filterbank of its %lld samples",
                         c->name, (long long)w, (long long)mm->wns[w]);
    }
    for (int64_t g = 0; g < L->seq; g++) {
        rv_token tk;
        cr_assert_eq(rv_tok_info(L, g, &tk), RV_OK);
        if (tk.modality == RV_MOD_VIDEO) {
            ref_video_patch(L, m, mm->tub_k0[tk.item], mm->tub_k1[tk.item], tk.part, ref);
            cr_assert_arr_eq(t->patch + g * pd, ref, sizeof(float) * (size_t)L->video_dim,
                             "%s: token %lld (tubelet %lld, frames [%lld, %lld)) is not its "
                             "frames' patch", c->name, (long long)g, (long long)tk.item,
                             (long long)mm->tub_k0[tk.item], (long long)mm->tub_k1[tk.item]);
        } else if (tk.modality == RV_MOD_AUDIO) {
            int64_t w = mm->step_w[tk.item];
            /* a window's steps from its first fbank frame: pos[0] apart */
            tt_audio_patch_ref(L, rows[w], tk.pos[0], tk.part, ref);
            cr_assert_arr_eq(t->patch + g * pd, ref, sizeof(float) * (size_t)L->audio_dim,
                             "%s: token %lld (step %lld of window %lld) is not its window's "
                             "patch", c->name, (long long)g, (long long)tk.item, (long long)w);
        }
    }
    for (int64_t w = 0; w < mm->nwin; w++)
        free(rows[w]);
    free(rows);
    free(ref);
    rv_fbank_free(&fb);
}

/* The whole planned pass: every token the layout's, window indices included;
 * windows of the whole grid move tokens, never change them (each patch is the
 * plain sequence's of the same tubelet or step); cut windows make their own
 * (check_cut_patches). The plan is placed on a clock whose grid zero is 1.4 s
 * (the chunks say 0: a planned pass keeps the plan's). */
static void whole_pass(const bcase *c, const tt_media *m, rv_tok_layout *L, tok_table *t)
{
    make_case(c, L);
    L->t0 = 1.4;
    tt_init(t, L->seq, L->video_dim, L->audio_dim, L->fbank_frames);
    const int sizes[] = {1, 2, 3, 5};
    rv_tok_stats st;
    run_planned(L, 0, L->seq, m, sizes, 4, t, &st);
    cr_assert_eq(st.cls_tokens, L->nspecial);
    cr_assert_eq(st.video_tokens, L->nvideo);
    cr_assert_eq(st.audio_tokens, L->naudio);
    cr_assert_eq(st.fbank_frames, L->fbank_frames);
    cr_assert(t->ordered, "%s: batches out of order", c->name);
    for (int64_t g = 0; g < L->seq; g++) {
        rv_token tk;
        cr_assert_eq(t->have[g], 1, "%s: token %lld handed out %d times", c->name, (long long)g,
                     t->have[g]);
        cr_assert_eq(rv_tok_info(L, g, &tk), RV_OK);
        cr_assert(t->mod[g] == tk.modality && !memcmp(t->pos + 3 * g, tk.pos, sizeof tk.pos) &&
                      !memcmp(t->time + 2 * g, tk.time, sizeof tk.time) &&
                      !memcmp(t->seq_time + 2 * g, tk.seq_time, sizeof tk.seq_time) &&
                      t->win[g] == tk.window,
                  "%s: token %lld is not the layout's (%s pos %lld window %lld, the layout %s "
                  "pos %lld window %lld)", c->name, (long long)g, rv_modality_name(t->mod[g]),
                  (long long)t->pos[3 * g], (long long)t->win[g], rv_modality_name(tk.modality),
                  (long long)tk.pos[0], (long long)tk.window);
        for (int e = 0; e < 2; e++)
            cr_assert(t->time[2 * g + e] == 1.4 + t->seq_time[2 * g + e],
                      "%s: token %lld at %.17g s on the clock, %.17g s from t0 1.4", c->name,
                      (long long)g, t->time[2 * g + e], t->seq_time[2 * g + e]);
    }
    if (c->rel) {
        model mm;
        model_make(c, L, &mm);
        check_cut_patches(c, &mm, L, m, t);
        model_free(&mm);
        return;
    }
    /* the plain sequence (no blocks) over the same recording */
    rv_tok_opts to;
    rv_ingest_opts io;
    case_opts(c, &to, &io);
    to.frame_windows = to.cls_each_window = to.window_positions = 0;
    to.window_s = 2.0;
    rv_tok_layout P;
    cr_assert_eq(rv_tok_layout_make(&to, &io, c->nframes, c->nsamples, &P), RV_OK);
    tok_table plain;
    tt_init(&plain, P.seq, P.video_dim, P.audio_dim, P.fbank_frames);
    run_planned(&P, 0, P.seq, m, sizes, 4, &plain, &st);
    int64_t pd = L->video_dim > L->audio_dim ? L->video_dim : L->audio_dim;
    for (int64_t g = 0; g < L->seq; g++) {
        rv_token tk;
        cr_assert_eq(rv_tok_info(L, g, &tk), RV_OK);
        if (tk.modality == RV_MOD_CLS)
            continue;
        int64_t j = tk.modality == RV_MOD_VIDEO ? rv_tok_index_video(&P, tk.item, tk.part)
                                                : rv_tok_index_audio(&P, tk.item, tk.part);
        int64_t d = tk.modality == RV_MOD_VIDEO ? L->video_dim : L->audio_dim;
        cr_assert_arr_eq(t->patch + g * pd, plain.patch + j * pd, sizeof(float) * (size_t)d,
                         "%s: token %lld (%s %lld part %d) is not the plain sequence's token "
                         "%lld", c->name, (long long)g, rv_modality_name(tk.modality),
                         (long long)tk.item, tk.part, (long long)j);
    }
    cr_assert_arr_eq(t->fbank, plain.fbank, sizeof(float) * (size_t)(L->fbank_frames * 128));
    tt_free(&plain);
}

static void expect_same(const tok_table *a, const tok_table *b, int64_t first, int64_t count,
                        const char *what)
{
    char why[256];
    for (int64_t g = 0; g < a->seq; g++) {
        int in = g >= first && g < first + count;
        cr_assert_eq(b->have[g], in, "%s: token %lld handed out %d times", what, (long long)g,
                     b->have[g]);
        if (in)
            cr_assert(tt_same_token(a, b, g, why, sizeof why), "%s: token %lld differs from the "
                      "whole pass: %s", what, (long long)g, why);
    }
    for (int64_t f = 0; f < a->nfbank; f++)
        if (b->fb_have[f])
            cr_assert_arr_eq(b->fbank + f * 128, a->fbank + f * 128, 128 * sizeof(float),
                             "%s: fbank frame %lld", what, (long long)f);
}

/* The open pass (length unknown until the end) equals the planned one; it
 * hands out no special tokens for windows after the last token's. */
Test(blocks, open_pass_equals_planned)
{
    for (size_t e = 0; e < NENGINE; e++) {
        const bcase *c = &CASES[ENGINE_CASES[e]];
        tt_media m;
        media_for(c, 200 + e, &m);
        rv_tok_layout L;
        tok_table whole, open;
        whole_pass(c, &m, &L, &whole);
        m.t0 = 1.4; /* the chunks' clock, the whole pass's plan's: the open pass takes it */
        rv_tok_opts to;
        rv_ingest_opts io;
        case_opts(c, &to, &io);
        tt_init(&open, L.seq + 64, L.video_dim, L.audio_dim, L.fbank_frames);
        rv_tokenizer *tk = NULL;
        cr_assert_eq(rv_tokenizer_new(NULL, 0, 0, &to, &io, m.nframes > 0, m.nsamples > 0,
                                      tt_collect, &open, &tk), RV_OK, "%s", rv_last_error());
        const int sizes[] = {4, 1, 7};
        tt_feed(tk, &io, &m, 0, tt_media_grid_end(&io, &m), sizes, 3, 1);
        rv_tok_stats st;
        rv_tokenizer_stats(tk, &st);
        rv_tokenizer_free(&tk);
        cr_assert_eq(st.layout.seq, L.seq, "%s: the open pass closed at %lld tokens, want %lld",
                     c->name, (long long)st.layout.seq, (long long)L.seq);
        cr_assert_eq(st.tokens, L.seq, "%s: the open pass handed out %lld tokens, want %lld",
                     c->name, (long long)st.tokens, (long long)L.seq);
        cr_assert_eq(st.cls_tokens, L.nspecial);
        cr_assert_eq(st.layout.t0, 1.4, "%s: the open pass is at t0 %.17g, its chunks at 1.4",
                     c->name, st.layout.t0);
        cr_assert(open.ordered);
        char what[160];
        snprintf(what, sizeof what, "%s, open pass", c->name);
        open.seq = L.seq;
        expect_same(&whole, &open, 0, L.seq, what);
        tt_free(&open);
        tt_free(&whole);
        tt_media_free(&m);
    }
}

/* Every rank of 1, 2, 3, 4 and 7 under both shard plans, each segment a pass of
 * its own fed only its grid range, gets bit for bit the whole pass's tokens. */
Test(blocks, ranks_equal_whole_pass)
{
    const int ns[] = {1, 2, 3, 4, 7};
    for (size_t e = 0; e < NENGINE; e++) {
        const bcase *c = &CASES[ENGINE_CASES[e]];
        tt_media m;
        media_for(c, 200 + e, &m);
        rv_tok_layout L;
        tok_table whole;
        whole_pass(c, &m, &L, &whole);
        for (int kind = 0; kind < 2; kind++)
            for (int ni = 0; ni < 5; ni++) {
                rv_shard_plan sp;
                cr_assert_eq(rv_tok_shard_plan(&L, (rv_shard_kind)kind, ns[ni], &sp), RV_OK);
                tok_table ranks;
                tt_init(&ranks, L.seq, L.video_dim, L.audio_dim, L.fbank_frames);
                int64_t special = 0;
                for (int r = 0; r < ns[ni]; r++) {
                    rv_shard_seg seg[RV_SHARD_MAX_SEGS];
                    int n = rv_shard_segments(&sp, r, seg);
                    for (int s = 0; s < n; s++) {
                        if (seg[s].len == 0)
                            continue;
                        const int sizes[] = {3, 1, 4, 1, 5};
                        rv_tok_stats st;
                        run_planned(&L, seg[s].start, seg[s].len, &m, sizes + r % 5, 5 - r % 5,
                                    &ranks, &st);
                        special += st.cls_tokens;
                    }
                }
                char what[160];
                snprintf(what, sizeof what, "%s, %s N=%d", c->name,
                         rv_shard_kind_name((rv_shard_kind)kind), ns[ni]);
                cr_assert_eq(special, L.nspecial, "%s: %lld special tokens", what,
                             (long long)special);
                expect_same(&whole, &ranks, 0, L.seq, what);
                tt_free(&ranks);
            }
        tt_free(&whole);
        tt_media_free(&m);
    }
}

/* Slices that start inside a window: at each of its special tokens, just
 * before them, after them, through several windows, and of special tokens
 * alone (an empty window's too). */
Test(blocks, slices_inside_windows)
{
    const int pick[] = {1, 2, 3, 6, 8, 11};
    for (size_t e = 0; e < sizeof pick / sizeof pick[0]; e++) {
        const bcase *c = &CASES[pick[e]];
        tt_media m;
        media_for(c, 300 + e, &m);
        rv_tok_layout L;
        tok_table whole;
        whole_pass(c, &m, &L, &whole);
        const int64_t ws[] = {1, L.windows / 2, L.windows - 1};
        int slices = 0;
        for (int k = 0; k < 3; k++) {
            int64_t s = rv_tok_window_start(&L, ws[k]);
            const int64_t cuts[][2] = {{s, 1}, {s + 1, 1}, {s - 1, 2}, {s + 1, 7},
                                       {s + L.opts.cls, 5}, {s - 3, 40}, {s, L.seq - s}};
            for (size_t j = 0; j < sizeof cuts / sizeof cuts[0]; j++) {
                int64_t first = cuts[j][0], count = cuts[j][1];
                if (first < 0 || count < 1 || first + count > L.seq)
                    continue;
                tok_table part;
                tt_init(&part, L.seq, L.video_dim, L.audio_dim, L.fbank_frames);
                const int two[] = {2};
                rv_tok_stats st;
                run_planned(&L, first, count, &m, two, 1, &part, &st);
                char what[200];
                snprintf(what, sizeof what, "%s, slice [%lld, +%lld)", c->name, (long long)first,
                         (long long)count);
                expect_same(&whole, &part, first, count, what);
                cr_assert(part.ordered);
                tt_free(&part);
                slices++;
            }
        }
        cr_assert_gt(slices, 10);
        /* an empty window's special tokens alone (the video-only case at 0.35 s
         * has windows without a frame: 1 s apart) */
        if (pick[e] == 3) {
            rv_token tk;
            int64_t s = rv_tok_window_start(&L, 1);
            cr_assert_eq(rv_tok_window_start(&L, 2) - s, L.opts.cls, "window 1 holds only its "
                         "special tokens");
            cr_assert_eq(rv_tok_info(&L, s, &tk), RV_OK);
            cr_assert(tk.modality == RV_MOD_CLS && tk.window == 1);
            tok_table part;
            tt_init(&part, L.seq, L.video_dim, L.audio_dim, L.fbank_frames);
            const int one[] = {1};
            rv_tok_stats st;
            run_planned(&L, s, L.opts.cls, &m, one, 1, &part, &st);
            expect_same(&whole, &part, s, L.opts.cls, "window 1's special tokens alone");
            tt_free(&part);
        }
        tt_free(&whole);
        tt_media_free(&m);
    }
}

/* ---- a block is the recording cut at its bounds ------------------------------------ */

/* Token g of a (whole) and token i of b (a window's own recording) are the same
 * but for the window (b's is 0) and the times, a's being b's shifted by where
 * the window's frames (video), samples (audio) or the window itself (special
 * tokens) start. */
static void expect_shifted(const tok_table *a, int64_t g, const tok_table *b, int64_t i,
                           int64_t w, const double shift[3], const char *what)
{
    int64_t pa = a->vdim > a->adim ? a->vdim : a->adim, pb = b->vdim > b->adim ? b->vdim : b->adim;
    cr_assert_eq(a->win[g], w, "%s: token %lld in window %lld", what, (long long)g,
                 (long long)a->win[g]);
    cr_assert_eq(b->win[i], 0, "%s: its own recording has one window", what);
    cr_assert_eq(a->mod[g], b->mod[i], "%s: token %lld: %s, on its own %s", what, (long long)i,
                 rv_modality_name(a->mod[g]), rv_modality_name(b->mod[i]));
    cr_assert(!memcmp(a->pos + 3 * g, b->pos + 3 * i, 3 * sizeof(int64_t)),
              "%s: token %lld at (%lld %lld %lld), on its own (%lld %lld %lld)", what,
              (long long)i, (long long)a->pos[3 * g], (long long)a->pos[3 * g + 1],
              (long long)a->pos[3 * g + 2], (long long)b->pos[3 * i],
              (long long)b->pos[3 * i + 1], (long long)b->pos[3 * i + 2]);
    for (int e = 0; e < 2; e++) {
        double want = b->seq_time[2 * i + e] + shift[a->mod[g]];
        cr_assert(fabs(a->seq_time[2 * g + e] - want) <= TOL_SHIFT * fmax(1.0, fabs(want)),
                  "%s: token %lld at %.17g s, on its own %.17g s + %.17g", what, (long long)i,
                  a->seq_time[2 * g + e], b->seq_time[2 * i + e], shift[a->mod[g]]);
    }
    int64_t d = a->mod[g] == RV_MOD_VIDEO ? a->vdim : a->mod[g] == RV_MOD_AUDIO ? a->adim : 0;
    cr_assert_arr_eq(a->patch + g * pa, b->patch + i * pb, sizeof(float) * (size_t)d,
                     "%s: token %lld: the patch differs from its own recording's", what,
                     (long long)i);
}

/* Every cut window w of every cut case, against two passes over its frames
 * [K(w), K(w + 1)) and samples [J(w), J(w + 1)) (the model's, cut at the
 * recording's end) as a recording of their own, grid at 0: an open pass with
 * the case's options (so one window long) and a planned pass of the plain
 * tokenizer (one window of a day, the special tokens in front). Both give the
 * window's tokens in order (without the sequence's leading special tokens when
 * they do not lead every window), and its fbank rows. */
Test(blocks, a_block_is_its_own_recording)
{
    int blocks = 0;
    for (size_t e = 0; e < NENGINE; e++) {
        const bcase *c = &CASES[ENGINE_CASES[e]];
        if (!c->rel)
            continue;
        tt_media m;
        media_for(c, 500 + e, &m);
        rv_tok_layout L;
        tok_table whole;
        whole_pass(c, &m, &L, &whole);
        model mm;
        model_make(c, &L, &mm);
        rv_tok_opts to, po;
        rv_ingest_opts io;
        case_opts(c, &to, &io);
        io.start_s = 0;
        po = to;
        po.frame_windows = po.cls_each_window = po.window_positions = 0;
        po.window_s = 86400;
        po.cls = c->each ? c->cls : 0;
        const int64_t lead_a = c->each ? 0 : c->cls; /* the own pass's leading tokens to skip */
        int64_t g = c->each ? 0 : c->cls;            /* the whole pass's, skipped */
        for (int64_t w = 0; w < L.windows; w++, blocks++) {
            const int64_t nf = w < mm.nwin ? mm.wnf[w] : 0, ns = w < mm.nwin ? mm.wns[w] : 0;
            tt_media cut = tt_media_view(&m, nf ? mm.wk0[w] : 0, nf, ns ? mm.wj0[w] : 0, ns);
            int64_t n = 0; /* the window's tokens in the whole pass */
            while (g + n < L.seq && whole.win[g + n] == w &&
                   !(n > 0 && whole.mod[g + n] == RV_MOD_CLS && whole.mod[g + n - 1] != RV_MOD_CLS))
                n++;
            /* the open pass, same options */
            tok_table own;
            tt_init(&own, n + 2 * c->cls + 8, L.video_dim, L.audio_dim,
                    (w < mm.nwin ? mm.wnfb[w] : 0) + 8);
            rv_tokenizer *tk = NULL;
            cr_assert_eq(rv_tokenizer_new(NULL, 0, 0, &to, &io, c->video, c->audio, tt_collect,
                                          &own, &tk), RV_OK, "%s", rv_last_error());
            const int sizes[] = {2, 3};
            tt_feed(tk, &io, &cut, 0, tt_media_grid_end(&io, &cut), sizes, 2, 1);
            rv_tok_stats st;
            rv_tokenizer_stats(tk, &st);
            rv_tokenizer_free(&tk);
            /* the plain tokenizer, planned */
            rv_tok_layout B;
            cr_assert_eq(rv_tok_layout_make(&po, &io, nf, ns, &B), RV_OK, "%s", rv_last_error());
            tok_table plain;
            tt_init(&plain, B.seq, B.video_dim, B.audio_dim, B.fbank_frames);
            rv_tok_stats bst;
            run_planned(&B, 0, B.seq, &cut, sizes, 2, &plain, &bst);
            char what[200];
            snprintf(what, sizeof what, "%s: window %lld (frames %lld at %lld, samples %lld at "
                     "%lld)", c->name, (long long)w, (long long)nf, (long long)(nf ? mm.wk0[w] : 0),
                     (long long)ns, (long long)(ns ? mm.wj0[w] : 0));
            /* a window without video or audio tokens is in the sequence for a later
             * one's sake: on its own it is nothing (no window, no special token),
             * its special tokens the plain tokenizer's leading ones */
            const int empty = n == (c->each ? c->cls : 0);
            cr_assert_eq(st.layout.windows, empty ? 0 : 1, "%s: its own recording has %lld "
                         "windows", what, (long long)st.layout.windows);
            cr_assert_eq(st.tokens - lead_a, empty ? 0 : n, "%s: %lld tokens, on its own %lld",
                         what, (long long)n, (long long)(st.tokens - lead_a));
            cr_assert_eq(B.seq, n, "%s: %lld tokens, the plain tokenizer %lld", what, (long long)n,
                         (long long)B.seq);
            /* times shift by the window's first frame's, first sample's, own time */
            const double shift[3] = {nf ? rv_ingest_frame_time(&L.ingest, mm.wk0[w]) : 0,
                                     ns ? model_sample_time(c, mm.wj0[w]) : 0,
                                     c->each ? model_window_time(&L, c, w) : 0};
            for (int64_t i = 0; i < n; i++) {
                if (!empty)
                    expect_shifted(&whole, g + i, &own, lead_a + i, w, shift, what);
                expect_shifted(&whole, g + i, &plain, i, w, shift, what);
            }
            /* its fbank rows, bit for bit */
            const int64_t nfb = w < mm.nwin ? mm.wnfb[w] : 0;
            cr_assert(st.layout.fbank_frames == nfb && B.fbank_frames == nfb, "%s: %lld fbank "
                      "frames on its own, %lld plain, the model %lld", what,
                      (long long)st.layout.fbank_frames, (long long)B.fbank_frames, (long long)nfb);
            if (nfb > 0) {
                cr_assert_arr_eq(whole.fbank + mm.wf0[w] * 128, own.fbank,
                                 sizeof(float) * (size_t)(nfb * 128), "%s: fbank rows", what);
                cr_assert_arr_eq(plain.fbank, own.fbank, sizeof(float) * (size_t)(nfb * 128),
                                 "%s: fbank rows", what);
            }
            g += n;
            tt_free(&own);
            tt_free(&plain);
        }
        cr_assert_eq(g, L.seq, "%s: the windows hold %lld of %lld tokens", c->name, (long long)g,
                     (long long)L.seq);
        model_free(&mm);
        tt_free(&whole);
        tt_media_free(&m);
    }
    cr_assert_gt(blocks, 500, "only %d blocks checked", blocks);
}

/* ---- refusals ------------------------------------------------------------------------ */

Test(blocks, refusals)
{
    rv_tok_opts to;
    rv_ingest_opts io;
    rv_tok_layout L;
    rv_tok_opts_default(&to);
    rv_ingest_opts_default(&io);
    io.size = 32;
    /* frame windows need video */
    to.frame_windows = 1;
    to.video = 0;
    cr_assert_eq(rv_tok_opts_check(&to), RV_ERR_INVALID);
    cr_assert(strstr(rv_last_error(), "frame windows") && strstr(rv_last_error(), "video"),
              "the message names the problem: %s", rv_last_error());
    cr_assert_eq(rv_tok_layout_make(&to, &io, 0, 16000, &L), RV_ERR_INVALID);
    /* an open pass over a recording without video */
    to.video = 1;
    rv_tokenizer *tk = NULL;
    tok_table t;
    tt_init(&t, 1, 1, 1, 1);
    cr_assert_eq(rv_tokenizer_new(NULL, 0, 0, &to, &io, 0, 1, tt_collect, &t, &tk),
                 RV_ERR_INVALID);
    cr_assert_null(tk);
    cr_assert(strstr(rv_last_error(), "frame windows") && strstr(rv_last_error(), "video"),
              "%s", rv_last_error());
    tt_free(&t);
    /* a plan from a file without a video stream */
    rv_probe_stream s = {.index = 0, .kind = RV_STREAM_AUDIO, .decodable = 1, .start_s = 0,
                         .duration_s = 3.0, .sample_rate = 16000, .channels = 1};
    rv_probe p = {.path = "talk.wav", .nstreams = 1, .streams = &s, .video = -1, .audio = 0,
                  .duration_s = 3.0, .start_s = 0.0};
    cr_assert_eq(rv_tok_layout_from_probe(&p, &to, &io, &L, NULL), RV_ERR_INVALID);
    cr_assert(strstr(rv_last_error(), "talk.wav") && strstr(rv_last_error(), "video"), "%s",
              rv_last_error());
    to.frame_windows = 0;
    cr_assert_eq(rv_tok_layout_from_probe(&p, &to, &io, &L, NULL), RV_OK, "time windows over "
                 "audio alone are fine: %s", rv_last_error());
    /* window_s is not used by frame windows, so not checked */
    to.frame_windows = 1;
    to.window_s = 0;
    cr_assert_eq(rv_tok_opts_check(&to), RV_OK, "%s", rv_last_error());
    to.frame_windows = 0;
    cr_assert_eq(rv_tok_opts_check(&to), RV_ERR_INVALID);
    /* the flags are 0 or 1 */
    for (int f = 0; f < 3; f++)
        for (int bad = -1; bad <= 2; bad += 3) {
            rv_tok_opts_default(&to);
            int *flag = f == 0 ? &to.frame_windows : f == 1 ? &to.cls_each_window
                                                            : &to.window_positions;
            *flag = bad;
            cr_assert_eq(rv_tok_opts_check(&to), RV_ERR_INVALID, "flag %d = %d accepted", f, bad);
        }
    /* the defaults are off */
    rv_tok_opts_default(&to);
    cr_assert(!to.frame_windows && !to.cls_each_window && !to.window_positions);
}

/* A recording with no token has no window, so cls_each_window gives no special
 * token (the leading ones stay, as before). */
Test(blocks, nothing_to_lead)
{
    rv_tok_opts to;
    rv_ingest_opts io;
    rv_tok_layout L;
    rv_tok_opts_default(&to);
    rv_ingest_opts_default(&io);
    io.size = 32;
    to.cls = 2;
    cr_assert_eq(rv_tok_layout_make(&to, &io, 0, 399, &L), RV_OK);
    cr_assert(L.windows == 0 && L.seq == 2 && L.nspecial == 2);
    to.cls_each_window = 1;
    cr_assert_eq(rv_tok_layout_make(&to, &io, 0, 399, &L), RV_OK);
    cr_assert(L.windows == 0 && L.seq == 0 && L.nspecial == 0);
    rv_tok_span sp;
    cr_assert_eq(rv_tok_span_of(&L, 0, 0, &sp), RV_OK);
    cr_assert_eq(sp.cls, 0);
}
