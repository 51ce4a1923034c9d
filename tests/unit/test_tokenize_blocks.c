/* test_tokenize_blocks.c: windows as attention blocks (rv_tokens.h): frame
 * windows (window w = tubelet w's time range), special tokens leading every
 * window (cls_each_window), positions counted from each window's start
 * (window_positions), and every token's window index.
 *   - layouts against a brute-force model that finds each tubelet's and audio
 *     step's window by linear search on exact integers and writes the
 *     documented order out token by token (the special tokens of every window,
 *     empty ones too): time windows with cls 1 and 2 per window, frame windows
 *     at 1, 2 and 30000/1001 fps with T 1 and 2 and audio (audio outlasting
 *     the video, and ending before it), window positions; every token's
 *     description and window, the index helpers, window starts and times;
 *   - spans of every rank of 1, 2, 3, 4, 7 under both shard plans and of every
 *     short run: the special tokens counted (any number now), the times and
 *     items exactly those of their tokens;
 *   - engine passes over synthetic recordings: the whole planned pass is what
 *     the layout says (window indices in every batch) with the patches of the
 *     plain sequence's tubelets and steps; the open pass equals it (no special
 *     tokens for windows that turn out not to exist); every rank of 1, 2, 3, 4
 *     and 7 under both shard plans, and slices starting inside a window, get
 *     bit for bit the whole pass's tokens, including special tokens of later
 *     windows;
 *   - a block is embedded as if on its own: the tokens of block w equal those
 *     of the plain tokenizer over the recording cut at the block;
 *   - the refusals (frame windows without video, flags other than 0 and 1).
 * That the options off give the earlier sequence bit for bit is
 * test_tokenize_compat.c. */
#include "tokenize_collect.h"

#include <math.h>
#include <stdio.h>

#include "rv_tokens.h"

/* Token times in seconds computed two ways in double (the library's from whole
 * samples, microseconds or frame indices; the test's from the same numbers
 * written plainly): a few roundings of values of seconds to minutes, so relative
 * to the time, floored at 1 s (a time of 0 is matched within 1e-12 s); double
 * epsilon is 2.2e-16. */
#define TOL_TIME 1e-12
#define TIME_TOL(t) (TOL_TIME * fmax(fabs(t), 1.0))

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
    {"time 0.35 s, cls 2 each, positions", 30000, 1001, 24, 3, 8, 32, 16, 10, 0, 2, 1, 1, 0.35,
     1.25, 0, 1, 1, 100, 55555},
    {"time 0.01 s (empty windows), cls 2 each, positions", 25, 1, 16, 1, 8, 8, 16, 8, 0, 2, 1, 1,
     0.01, 0.5, 0, 1, 1, 37, 20000},
    {"video only 1 fps, 0.35 s windows, cls 2 each", 1, 1, 16, 1, 8, 16, 16, 16, 0, 2, 1, 0, 0.35,
     0.0, 0, 1, 1, 7, 0},
    {"audio only, 0.05 s windows, cls 1 each, positions", 1, 1, 16, 1, 8, 16, 4, 4, 0, 1, 0, 1,
     0.05, 0.0, 0, 1, 1, 0, 9999},
    {"time 1 s, AST audio, cls 2 each, positions", 5, 1, 16, 2, 8, 16, 16, 10, 10, 2, 1, 1, 1.0,
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
    {"frames 30000/1001 T 1, cls 1 each, positions", 30000, 1001, 16, 1, 8, 32, 16, 10, 0, 1, 1, 1,
     2.0, 1.25, 1, 1, 1, 100, 55555},
    {"frames 30000/1001 T 2, cls 2 each", 30000, 1001, 16, 2, 8, 16, 8, 3, 0, 2, 1, 1, 2.0, 0.0, 1,
     1, 0, 61, 30011},
    {"frames 2 fps T 1, no special tokens, positions", 2, 1, 16, 1, 8, 16, 16, 16, 0, 0, 1, 1, 2.0,
     0.0, 1, 1, 1, 21, 11 * 16000},
    {"frames 5 fps T 2, leading cls 2, positions", 5, 1, 16, 2, 8, 16, 16, 10, 0, 2, 1, 1, 2.0,
     0.0, 1, 0, 1, 33, 7 * 16000},
    {"frames video only 1 fps T 2, odd frames, cls 1 each", 1, 1, 16, 2, 8, 16, 16, 16, 0, 1, 1, 0,
     2.0, 0.0, 1, 1, 1, 9, 0},
    /* audio steps of 10 ms: step 1001 k starts exactly where frame 300 k does
     * (10.01 k s), a tie only exact arithmetic puts in the right window */
    {"frames 30000/1001 T 1, 10 ms audio steps, exact ties, cls 1 each", 30000, 1001, 16, 1, 16,
     128, 1, 1, 0, 1, 1, 1, 2.0, 0.0, 1, 1, 1, 630, 20 * 16000 + 3000},
    /* 25 fps, T 2 (0.08 s) and 0.16 s audio steps: every other step starts on a
     * tubelet edge, where 29 * 0.16 / 0.08 in doubles is just under 58 */
    {"frames 25 fps T 2, default audio, ties, cls 2 each", 25, 1, 16, 2, 16, 16, 16, 16, 0, 2, 1, 1,
     2.0, 0.0, 1, 1, 1, 250, 10 * 16000},
    /* time windows, positions only (leading special token) */
    {"time 0.5 s, leading cls 1, positions", 4, 1, 16, 2, 8, 16, 16, 16, 0, 1, 1, 1, 0.5, 0.0, 0,
     0, 1, 30, 8 * 16000},
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

/* Largest w whose window starts at or before tubelet g's first frame, by linear
 * search on exact integers: time windows start w * window_us us after the grid
 * start, frame windows at frame w * T; frame k is k * fps_den / fps_num s in. */
static int64_t model_window_video(const rv_tok_layout *L, int64_t g)
{
    const int64_t T = L->opts.tubelet, fn = L->ingest.fps_num, fd = L->ingest.fps_den;
    int64_t w = 0;
    if (L->opts.frame_windows) {
        while ((w + 1) * T * fd <= g * T * fd) /* frame (w+1)T's time <= frame gT's */
            w++;
        return w;
    }
    i128 t_num = (i128)g * T * fd * 1000000; /* us * fps_num */
    while ((i128)(w + 1) * L->window_us * fn <= t_num)
        w++;
    return w;
}

/* The same for audio step p: its first sample j0 = p * stride * 160 is j0 / 16000
 * s after the grid start. */
static int64_t model_window_audio(const rv_tok_layout *L, int64_t p)
{
    const int64_t T = L->opts.tubelet, fn = L->ingest.fps_num, fd = L->ingest.fps_den;
    const i128 j0 = (i128)p * L->opts.audio_stride * 160;
    int64_t w = 0;
    if (L->opts.frame_windows) {
        /* frame (w+1)T at (w+1) T fd / fn s <= j0 / 16000 s */
        while ((i128)(w + 1) * T * fd * 16000 <= j0 * fn)
            w++;
        return w;
    }
    while ((i128)(w + 1) * L->window_us * 16 <= j0 * 1000) /* both in 1/16e6 s */
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
    int64_t *wstart; /* (windows + 1) the first token of each window */
} model;

/* The documented order, written out: the leading special tokens (or, with
 * cls_each_window, every window's), then window by window its tubelets' tokens
 * and its steps' tokens. */
static void model_make(const rv_tok_layout *L, model *m)
{
    const rv_tok_opts *o = &L->opts;
    int64_t G = L->tubelets, NP = L->steps;
    int64_t *wg = malloc(sizeof(int64_t) * (size_t)(G + 1));
    int64_t *wp = malloc(sizeof(int64_t) * (size_t)(NP + 1));
    int64_t windows = 0;
    for (int64_t g = 0; g < G; g++) {
        wg[g] = model_window_video(L, g);
        windows = wg[g] + 1 > windows ? wg[g] + 1 : windows;
    }
    for (int64_t p = 0; p < NP; p++) {
        wp[p] = model_window_audio(L, p);
        windows = wp[p] + 1 > windows ? wp[p] + 1 : windows;
    }
    int64_t cap = (o->cls_each_window ? windows + 1 : 1) * o->cls + G * L->per_tubelet +
                  NP * L->bands + 1;
    m->tok = malloc(sizeof(mtok) * (size_t)cap);
    m->wstart = malloc(sizeof(int64_t) * (size_t)(windows + 2));
    m->windows = windows;
    m->nspecial = 0;
    int64_t n = 0;
    if (!o->cls_each_window)
        for (int i = 0; i < o->cls; i++, n++, m->nspecial++)
            m->tok[n] = (mtok){RV_MOD_CLS, -1, 0, i, 0};
    for (int64_t w = 0; w < windows; w++) {
        m->wstart[w] = n;
        if (o->cls_each_window)
            for (int i = 0; i < o->cls; i++, n++, m->nspecial++)
                m->tok[n] = (mtok){RV_MOD_CLS, -1, w, i, 0};
        int64_t first = -1;
        for (int64_t g = 0; g < G; g++) {
            if (wg[g] != w)
                continue;
            if (first < 0)
                first = g;
            for (int q = 0; q < L->per_tubelet; q++, n++)
                m->tok[n] = (mtok){RV_MOD_VIDEO, g, w, o->window_positions ? g - first : g, q};
        }
        first = -1;
        for (int64_t p = 0; p < NP; p++) {
            if (wp[p] != w)
                continue;
            if (first < 0)
                first = p;
            for (int b = 0; b < L->bands; b++, n++)
                m->tok[n] = (mtok){RV_MOD_AUDIO, p, w, o->window_positions ? p - first : p, b};
        }
    }
    m->wstart[windows] = n;
    m->n = n;
    free(wg);
    free(wp);
}

static void model_free(model *m)
{
    free(m->tok);
    free(m->wstart);
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

Test(blocks, layouts_match_the_model)
{
    for (size_t c = 0; c < NCASES; c++) {
        const bcase *k = &CASES[c];
        rv_tok_layout L;
        make_case(k, &L);
        const rv_tok_opts *o = &L.opts;
        model m;
        model_make(&L, &m);
        cr_assert_eq(L.seq, m.n, "%s: seq %lld, the model has %lld", k->name, (long long)L.seq,
                     (long long)m.n);
        cr_assert_eq(L.windows, m.windows, "%s: %lld windows, the model has %lld", k->name,
                     (long long)L.windows, (long long)m.windows);
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
                cr_assert_eq(tk.pos[1], e->part / L.grid);
                cr_assert_eq(tk.pos[2], e->part % L.grid);
                cr_assert_eq(tk.seq_time[0], rv_ingest_frame_time(&L.ingest, e->item * o->tubelet));
                cr_assert_eq(tk.seq_time[1],
                             rv_ingest_frame_time(&L.ingest, (e->item + 1) * o->tubelet));
                cr_assert_eq(rv_tok_index_video(&L, e->item, e->part), i, "%s: token %lld",
                             k->name, (long long)i);
                cr_assert_eq(rv_tok_window_of_tubelet(&L, e->item), e->window);
                /* a frame window's time is its tubelet's */
                if (o->frame_windows)
                    cr_assert_eq(rv_tok_window_time(&L, e->window), tk.seq_time[0]);
                nv++;
            } else {
                int64_t j0 = e->item * o->audio_stride * 160;
                cr_assert_eq(tk.pos[1], e->part);
                cr_assert_eq(tk.pos[2], 0);
                cr_assert_float_eq(tk.seq_time[0], k->start + j0 / 16000.0,
                                   TIME_TOL(tk.seq_time[0]));
                cr_assert_eq(rv_tok_index_audio(&L, e->item, e->part), i, "%s: token %lld",
                             k->name, (long long)i);
                cr_assert_eq(rv_tok_window_of_step(&L, e->item), e->window);
                /* its first sample is inside its window's time range */
                cr_assert_geq(tk.seq_time[0], rv_tok_window_time(&L, e->window) -
                                                  TIME_TOL(tk.seq_time[0]));
                cr_assert_lt(tk.seq_time[0], rv_tok_window_time(&L, e->window + 1));
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
    make_case(&CASES[6], &L); /* 1 fps T 1, 7 frames, 9.5 s of audio */
    cr_assert_eq(L.tubelets, 7);
    cr_assert_eq(L.windows, 10, "audio after the last frame has windows of its own: %lld",
                 (long long)L.windows);
    cr_assert_eq(L.window_us, 0);
    /* window 1 is [1, 2) s: steps with first sample in [16000, 32000): 7 .. 12 */
    int64_t g0, g1, p0, p1;
    rv_tok_window_items(&L, 1, &g0, &g1, &p0, &p1);
    cr_assert(g0 == 1 && g1 == 2 && p0 == 7 && p1 == 13, "window 1: tubelets [%lld, %lld), steps "
              "[%lld, %lld)", (long long)g0, (long long)g1, (long long)p0, (long long)p1);
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
    /* the ties: step 1001 k opens window 300 k, step 1001 k - 1 is the window before */
    make_case(&CASES[15], &L);
    for (int64_t k = 1; k <= 2; k++) {
        cr_assert_eq(rv_tok_window_of_step(&L, 1001 * k), 300 * k);
        cr_assert_eq(rv_tok_window_of_step(&L, 1001 * k - 1), 300 * k - 1);
        int64_t g0, g1, p0, p1;
        rv_tok_window_items(&L, 300 * k, &g0, &g1, &p0, &p1);
        cr_assert(p0 == 1001 * k && g0 == 300 * k, "window %lld: step %lld, tubelet %lld",
                  (long long)(300 * k), (long long)p0, (long long)g0);
    }
    make_case(&CASES[16], &L);
    cr_assert_eq(rv_tok_window_of_step(&L, 29), 58, "step 29 (4.64 s) opens tubelet 58's window");
    cr_assert_eq(rv_tok_window_of_step(&L, 28), 56);
}

/* ---- spans ------------------------------------------------------------------------ */

/* Span [first, first + count) against its tokens: special tokens counted, the
 * earliest start and latest end, the items exactly those of its tokens. */
static void check_span(const rv_tok_layout *L, int64_t first, int64_t count, const char *what)
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
        cr_assert(x.tubelet0 == g_lo && x.tubelet1 == g_hi + 1 &&
                      x.frame0 == g_lo * L->opts.tubelet && x.grid0 <= x.frame0 &&
                      x.grid1 >= x.frame1,
                  "%s: span [%lld, +%lld) tubelets", what, (long long)first, (long long)count);
    else
        cr_assert_eq(x.tubelet1, x.tubelet0);
    if (p_hi >= 0)
        cr_assert(x.step0 == p_lo && x.step1 == p_hi + 1 &&
                      rv_ingest_audio_index(&L->ingest, x.grid0) <= x.sample0 &&
                      rv_ingest_audio_index(&L->ingest, x.grid1) >= x.sample1,
                  "%s: span [%lld, +%lld) steps", what, (long long)first, (long long)count);
    else
        cr_assert_eq(x.step1, x.step0);
    if (g_hi < 0 && p_hi < 0)
        cr_assert_eq(x.grid1, x.grid0, "%s: a span of special tokens only reads nothing", what);
}

Test(blocks, spans_count_what_they_hold)
{
    const int ns[] = {1, 2, 3, 4, 7};
    for (size_t c = 0; c < NCASES; c++) {
        rv_tok_layout L;
        make_case(&CASES[c], &L);
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
                        char what[160];
                        snprintf(what, sizeof what, "%s, %s N=%d rank %d", CASES[c].name,
                                 rv_shard_kind_name((rv_shard_kind)kind), ns[ni], r);
                        check_span(&L, spans[s].first, spans[s].count, what);
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
                    check_span(&L, first, counts[k], CASES[c].name);
    }
}

/* ---- engine passes ------------------------------------------------------------------ */

/* Only the cases the engine tests run (small enough for many passes). */
static const int ENGINE_CASES[] = {0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 13, 14, 16, 17};
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

/* The whole planned pass: every token the layout's, window indices included,
 * and its patch the plain sequence's patch of the same tubelet or step (the
 * blocks move tokens, never change them). The plan is placed on a clock whose
 * grid zero is 1.4 s (the chunks say 0: a planned pass keeps the plan's). */
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

/* ---- a block as if embedded on its own ---------------------------------------------- */

/* Block w of a recording tokenized with blocks (time windows of W s or frame
 * windows, cls_each_window, window_positions) against the plain tokenizer (one
 * window, leading special tokens, positions from 0) over the recording cut at
 * the block: its grid starts at t_w, with the block's frames, and the audio
 * patches whose first sample is in the block.
 *
 * Audio at a block's end: an audio patch belongs to the block its first sample
 * is in, but reads (W - 1) * 160 + 400 samples, so the block's last patches
 * read on past the block's end. In the whole recording they read the samples
 * of the next block (or of the recording's end); in the cut recording they
 * read the same samples, because the cut keeps the audio up to the last sample
 * the block's last patch reads (sample1 of its span), no further: exactly the
 * block's patches, no more (a cut at the block's end would lose them, one
 * going further could make a patch that starts after the block). The same for
 * video: a tubelet that starts in the block and runs past it keeps its frames
 * (the cases here put the block edges on tubelet edges, so none does; the last
 * block's partial tubelet repeats its last frame in both).
 *
 * The cut's grid must put its frames and samples where the whole recording
 * has them: t_w is a frame time (a tubelet edge) and an audio step edge; the
 * cases are chosen so (checked). */
typedef struct blockcase {
    const char *name;
    int fps, size, T, stride;
    int frame;       /* frame windows; else time windows of window s */
    double window, start;
    int cls;
    int64_t nframes, nsamples;
} blockcase;

static const blockcase BLOCKS[] = {
    /* 2 s blocks at 5 fps: 10 frames, 5 tubelets; 20 audio steps of 0.1 s */
    {"time 2 s, video only", 5, 16, 2, 10, 0, 2.0, 0.0, 1, 47, 0},
    {"time 2 s, video only, cls 2, start 0.5", 5, 16, 1, 10, 0, 2.0, 0.5, 2, 33, 0},
    {"time 2 s, video and audio, cls 2", 5, 16, 2, 10, 0, 2.0, 0.0, 2, 47, 9 * 16000 + 5000},
    /* 1.28 s at 25 fps, T 2: 16 tubelets; audio 16 x 16 side by side, 8 steps */
    {"time 1.28 s, 25 fps, default audio, cls 1", 25, 16, 2, 16, 0, 1.28, 0.0, 1, 101, 4 * 16000},
    /* frame windows at 5 fps: 0.2 s (T 1) or 0.4 s (T 2), 2 or 4 steps of 0.1 s */
    {"frame T 1, 5 fps, video and audio, cls 2", 5, 16, 1, 10, 1, 0.0, 0.0, 2, 13, 3 * 16000},
    {"frame T 2, 5 fps, video and audio, cls 1, start 1", 5, 16, 2, 10, 1, 0.0, 1.0, 1, 15,
     3 * 16000 + 2000},
    {"frame T 2, 5 fps, video only", 5, 16, 2, 16, 1, 0.0, 0.0, 1, 9, 0},
};

Test(blocks, a_block_is_its_own_recording)
{
    for (size_t b = 0; b < sizeof BLOCKS / sizeof BLOCKS[0]; b++) {
        const blockcase *c = &BLOCKS[b];
        rv_tok_opts to;
        rv_ingest_opts io;
        rv_tok_opts_default(&to);
        rv_ingest_opts_default(&io);
        io.fps_num = c->fps;
        io.size = c->size;
        io.start_s = c->start;
        to.tubelet = c->T;
        to.patch = 8;
        to.audio_stride = c->stride;
        to.audio = c->nsamples > 0;
        to.cls = c->cls;
        to.window_s = c->frame ? 2.0 : c->window;
        to.frame_windows = c->frame;
        to.cls_each_window = 1;
        to.window_positions = 1;
        tt_media m;
        tt_media_make(&m, c->nframes, c->size, c->nsamples, 400 + b);
        rv_tok_layout L;
        cr_assert_eq(rv_tok_layout_make(&to, &io, m.nframes, m.nsamples, &L), RV_OK, "%s",
                     rv_last_error());
        tok_table whole;
        tt_init(&whole, L.seq, L.video_dim, L.audio_dim, L.fbank_frames);
        const int sizes[] = {3, 2};
        rv_tok_stats st;
        run_planned(&L, 0, L.seq, &m, sizes, 2, &whole, &st);
        cr_assert_gt(L.windows, 2, "%s", c->name);
        const int64_t start_us = llround(c->start * 1e6);
        int64_t pd = L.video_dim > L.audio_dim ? L.video_dim : L.audio_dim;
        for (int64_t w = 0; w < L.windows; w++) {
            int64_t g0, g1, p0, p1;
            rv_tok_window_items(&L, w, &g0, &g1, &p0, &p1);
            /* where the block starts: t_w in microseconds, a frame and a sample */
            int64_t tw_us = c->frame ? start_us + w * c->T * 1000000 / c->fps
                                     : start_us + w * L.window_us;
            int64_t k_b = (tw_us - start_us) * c->fps / 1000000;
            int64_t j_b = (tw_us - start_us) * 16 / 1000;
            cr_assert_eq(k_b * 1000000, (tw_us - start_us) * c->fps, "%s: block %lld does not "
                         "start on a frame", c->name, (long long)w);
            cr_assert_eq(j_b * 1000, (tw_us - start_us) * 16, "%s: block %lld does not start on "
                         "a sample", c->name, (long long)w);
            cr_assert(g1 == g0 || g0 * c->T == k_b, "%s: block %lld does not start on a tubelet "
                      "edge", c->name, (long long)w);
            cr_assert(p1 == p0 || p0 * c->stride * 160 == j_b, "%s: block %lld does not start on "
                      "an audio step edge", c->name, (long long)w);
            /* the cut: the block's frames, and the samples its audio patches read */
            int64_t nf = g1 > g0 ? (g1 * c->T < m.nframes ? g1 * c->T : m.nframes) - g0 * c->T : 0;
            int64_t nsamp = p1 > p0 ? ((p1 - 1 - p0) * c->stride + 16 - 1) * 160 + 400 : 0;
            tt_media cut = tt_media_view(&m, g1 > g0 ? g0 * c->T : 0, nf, p1 > p0 ? j_b : 0, nsamp);
            rv_tok_opts po = to;
            po.frame_windows = po.cls_each_window = po.window_positions = 0;
            po.window_s = 86400;
            rv_ingest_opts pio = io;
            pio.start_s = (double)tw_us / 1e6;
            rv_tok_layout B;
            cr_assert_eq(rv_tok_layout_make(&po, &pio, nf, nsamp, &B), RV_OK, "%s", rv_last_error());
            int64_t ws = rv_tok_window_start(&L, w), n = rv_tok_window_start(&L, w + 1) - ws;
            cr_assert_eq(B.seq, n, "%s: block %lld holds %lld tokens, the cut recording %lld",
                         c->name, (long long)w, (long long)n, (long long)B.seq);
            cr_assert_eq(B.tubelets, g1 - g0);
            cr_assert_eq(B.steps, p1 - p0);
            tok_table own;
            tt_init(&own, B.seq, B.video_dim, B.audio_dim, B.fbank_frames);
            const int four[] = {4};
            rv_tok_stats bst;
            run_planned(&B, 0, B.seq, &cut, four, 1, &own, &bst);
            for (int64_t i = 0; i < n; i++) {
                int64_t g = ws + i;
                const char *what = c->name;
                cr_assert_eq(whole.win[g], w);
                cr_assert_eq(own.win[i], 0);
                cr_assert_eq(whole.mod[g], own.mod[i], "%s: block %lld token %lld: %s, on its own "
                             "%s", what, (long long)w, (long long)i, rv_modality_name(whole.mod[g]),
                             rv_modality_name(own.mod[i]));
                cr_assert(!memcmp(whole.pos + 3 * g, own.pos + 3 * i, 3 * sizeof(int64_t)),
                          "%s: block %lld token %lld at (%lld %lld %lld), on its own (%lld %lld "
                          "%lld)", what, (long long)w, (long long)i, (long long)whole.pos[3 * g],
                          (long long)whole.pos[3 * g + 1], (long long)whole.pos[3 * g + 2],
                          (long long)own.pos[3 * i], (long long)own.pos[3 * i + 1],
                          (long long)own.pos[3 * i + 2]);
                cr_assert(!memcmp(whole.time + 2 * g, own.time + 2 * i, 2 * sizeof(double)),
                          "%s: block %lld token %lld at %.17g..%.17g s, on its own %.17g..%.17g",
                          what, (long long)w, (long long)i, whole.time[2 * g],
                          whole.time[2 * g + 1], own.time[2 * i], own.time[2 * i + 1]);
                int64_t d = whole.mod[g] == RV_MOD_VIDEO ? L.video_dim
                            : whole.mod[g] == RV_MOD_AUDIO ? L.audio_dim : 0;
                int64_t bpd = B.video_dim > B.audio_dim ? B.video_dim : B.audio_dim;
                cr_assert_arr_eq(whole.patch + g * pd, own.patch + i * bpd,
                                 sizeof(float) * (size_t)d, "%s: block %lld token %lld: the patch "
                                 "differs from the cut recording's", what, (long long)w,
                                 (long long)i);
            }
            tt_free(&own);
        }
        tt_free(&whole);
        tt_media_free(&m);
    }
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
