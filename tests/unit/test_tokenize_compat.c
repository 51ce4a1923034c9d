/* test_tokenize_compat.c: the two generalisations of the token sequence (0, 1
 * or 2 leading special tokens; frequency bands a stride apart) leave the
 * defaults exactly as they were, and add what they say:
 *   - the layouts of the earlier options (cls 0 or 1, bands side by side, with
 *     audio_fstride 0 or spelled out as F) have the numbers and, hashed, the
 *     token descriptions and shard spans the code before the change gave;
 *   - an engine pass over a synthetic recording hands out the tokens (order,
 *     positions, times, video patches) it handed out before;
 *   - cls = 1 and 2 put their special tokens in front and shift every other
 *     token by that much, nothing else;
 *   - AST's geometry (F = W = 16, strides 10 and 10): 12 bands, and over
 *     10.24 s of audio 1022 fbank frames and 101 time steps.
 * The expected values were recorded from the tokenizer before the change. */
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

typedef struct ocase {
    int fps_num, fps_den, size, T, P, F, W, stride;
    double window, start;
    int video, audio;
    int64_t nframes, nsamples;
} ocase;

/* The layout test's cases as they stood, and the defaults at 1 fps, 224 px. */
static const ocase OLD[] = {
    {5, 1, 32, 2, 16, 16, 16, 16, 1.0, 0.0, 1, 1, 65, 13 * 16000},
    {30000, 1001, 24, 3, 8, 32, 16, 10, 0.35, 1.25, 1, 1, 100, 55555},
    {1, 1, 16, 1, 8, 16, 4, 4, 2.0, 0.0, 0, 1, 0, 9999},
    {2, 1, 16, 2, 16, 16, 16, 16, 0.5, 0.0, 1, 0, 21, 0},
    {4, 1, 16, 2, 8, 128, 16, 16, 0.25, 0.0, 1, 1, 9, 399},
    {25, 1, 16, 1, 8, 8, 16, 8, 0.01, 0.5, 1, 1, 37, 20000},
    {24000, 1001, 16, 2, 8, 16, 8, 3, 0.123457, 0.0, 1, 1, 61, 30011},
    {1, 1, 224, 2, 16, 16, 16, 16, 2.0, 0.0, 1, 1, 60, 60 * 16000},
};

typedef struct golden {
    int c, cls;
    int64_t seq;
    int bands;
    int64_t nvideo, naudio, steps, windows;
    uint64_t info_hash, span_hash;
} golden;

static const golden GOLD[] = {
    {0, 0, 780, 8, 132, 648, 81, 13, 0xc5b298ce768b8511ull, 0x00f740a5e77b35edull},
    {0, 1, 781, 8, 132, 648, 81, 13, 0x7fadf994bd135103ull, 0x1a9e511125197c39ull},
    {1, 0, 438, 4, 306, 132, 33, 10, 0x0f6f32aa26f97b63ull, 0xdb2195cb10d2fb65ull},
    {1, 1, 439, 4, 306, 132, 33, 10, 0xc67435e8e8206eb1ull, 0x135a671a61fde4faull},
    {2, 0, 120, 8, 0, 120, 15, 1, 0x81f8a9fbc08d7505ull, 0x0c574e8e0029b6faull},
    {2, 1, 121, 8, 0, 120, 15, 1, 0xffa0e14cd7b9e47full, 0xd3d25d18f2c83810ull},
    {3, 0, 11, 8, 11, 0, 0, 21, 0xd0a533603239f30eull, 0x26b0f9e814348d0dull},
    {3, 1, 12, 8, 11, 0, 0, 21, 0x60c71b9a56956c74ull, 0x611af08021fdc4eaull},
    {4, 0, 20, 1, 20, 0, 0, 9, 0xcb70f436aa5c35ddull, 0x91d14354a291c37full},
    {4, 1, 21, 1, 20, 0, 0, 9, 0x3923369ea7df5fe7ull, 0x26aea1f80d9c0c7aull},
    {5, 0, 372, 16, 148, 224, 14, 145, 0xce084b14b73ff0d5ull, 0xd03d72f874c2b358ull},
    {5, 1, 373, 16, 148, 224, 14, 145, 0x654480641b6fccb7ull, 0xbe960c3bbc15c653ull},
    {6, 0, 604, 8, 124, 480, 60, 21, 0x4a29d750906ecd9dull, 0xfeeb509786922be9ull},
    {6, 1, 605, 8, 124, 480, 60, 21, 0x8ed44da0ebbc510full, 0xcf8b2e313fc29ffaull},
    {7, 0, 8872, 8, 5880, 2992, 374, 30, 0x330b0c697291bcd9ull, 0x171f148cc175c105ull},
    {7, 1, 8873, 8, 5880, 2992, 374, 30, 0x71d814f235927eebull, 0x3847f17b06bee888ull},
};

#define FNV0 14695981039346656037ull

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

static void old_layout(const ocase *k, int cls, int fstride, rv_tok_layout *L)
{
    rv_tok_opts to;
    rv_ingest_opts io;
    rv_tok_opts_default(&to);
    rv_ingest_opts_default(&io);
    io.fps_num = k->fps_num;
    io.fps_den = k->fps_den;
    io.size = k->size;
    io.start_s = k->start;
    to.tubelet = k->T;
    to.patch = k->P;
    to.audio_freq = k->F;
    to.audio_time = k->W;
    to.audio_stride = k->stride;
    to.audio_fstride = fstride;
    to.cls = cls;
    to.video = k->video;
    to.audio = k->audio;
    to.window_s = k->window;
    cr_assert_eq(rv_tok_layout_make(&to, &io, k->nframes, k->nsamples, L), RV_OK, "%s",
                 rv_last_error());
}

/* Every token's description, window and counts before it. */
static uint64_t info_hash(const rv_tok_layout *L)
{
    uint64_t h = FNV0;
    for (int64_t i = 0; i < L->seq; i++) {
        rv_token t;
        cr_assert_eq(rv_tok_info(L, i, &t), RV_OK);
        int32_t m = t.modality, part = t.part;
        int64_t vb = rv_tok_video_before(L, i), ab = rv_tok_audio_before(L, i);
        int64_t w = rv_tok_window_of(L, i);
        h = fnv(h, &m, 4);
        h = fnv(h, t.pos, 24);
        h = fnv(h, t.seq_time, 16);
        h = fnv(h, &t.item, 8);
        h = fnv(h, &part, 4);
        h = fnv(h, &vb, 8);
        h = fnv(h, &ab, 8);
        h = fnv(h, &w, 8);
    }
    return h;
}

/* Every span of every rank of 1..7 under both shard plans. */
static uint64_t span_hash(const rv_tok_layout *L)
{
    uint64_t h = FNV0;
    for (int kind = 0; kind < 2; kind++)
        for (int n = 1; n <= 7; n++) {
            rv_shard_plan sp;
            cr_assert_eq(rv_tok_shard_plan(L, (rv_shard_kind)kind, n, &sp), RV_OK);
            for (int r = 0; r < n; r++) {
                rv_tok_span s[RV_SHARD_MAX_SEGS];
                int ns = rv_tok_rank_spans(L, &sp, r, s);
                for (int j = 0; j < ns; j++) {
                    int64_t v[] = {s[j].first,   s[j].count,   s[j].cls,     s[j].tubelet0,
                                   s[j].tubelet1, s[j].step0,  s[j].step1,   s[j].frame0,
                                   s[j].frame1,  s[j].fbank0,  s[j].fbank1,  s[j].sample0,
                                   s[j].sample1, s[j].grid0,   s[j].grid1};
                    h = fnv(h, v, sizeof v);
                    h = fnv(h, &s[j].time[0], 8); /* t0 0: sequence time */
                    h = fnv(h, &s[j].time[1], 8);
                }
            }
        }
    return h;
}

/* fstride 0 (the default) and fstride spelled out as F both give the old
 * layouts, cls 0 and cls 1 alike. */
Test(compat, old_layouts_unchanged)
{
    for (size_t g = 0; g < sizeof GOLD / sizeof GOLD[0]; g++) {
        const golden *e = &GOLD[g];
        const ocase *k = &OLD[e->c];
        for (int spelled = 0; spelled < 2; spelled++) {
            rv_tok_layout L;
            old_layout(k, e->cls, spelled ? k->F : 0, &L);
            const char *how = spelled ? "fstride = F" : "fstride 0";
            cr_assert_eq(L.seq, e->seq, "case %d cls %d %s: seq %lld, was %lld", e->c, e->cls, how,
                         (long long)L.seq, (long long)e->seq);
            cr_assert_eq(L.bands, e->bands, "case %d %s: %d bands, was %d", e->c, how, L.bands,
                         e->bands);
            cr_assert_eq(L.nvideo, e->nvideo);
            cr_assert_eq(L.naudio, e->naudio, "case %d %s", e->c, how);
            cr_assert_eq(L.steps, e->steps);
            cr_assert_eq(L.windows, e->windows);
            cr_assert_eq(rv_tok_window_start(&L, 0), e->cls);
            cr_assert_eq(info_hash(&L), e->info_hash, "case %d cls %d %s: token descriptions "
                         "differ from before", e->c, e->cls, how);
            cr_assert_eq(span_hash(&L), e->span_hash, "case %d cls %d %s: shard spans differ "
                         "from before", e->c, e->cls, how);
        }
    }
}

/* The hash of an engine pass the way it was recorded: every token's index,
 * modality, position and time, and the video patches' bits (the audio patches
 * are left out: their fbank goes through libavutil's FFT, whose last bits may
 * depend on the machine; the layout pins down which rows they read). */
static uint64_t engine_hash(const tok_table *t)
{
    uint64_t h = FNV0;
    int64_t pd = t->vdim > t->adim ? t->vdim : t->adim;
    for (int64_t g = 0; g < t->seq; g++) {
        h = fnv(h, &g, 8);
        h = fnv(h, &t->mod[g], 1);
        h = fnv(h, t->pos + 3 * g, 24);
        h = fnv(h, t->time + 2 * g, 16);
        if (t->mod[g] == RV_MOD_VIDEO)
            h = fnv(h, t->patch + g * pd, sizeof(float) * (size_t)t->vdim);
    }
    return h;
}

/* 13 s at 5 fps, 32 px, T = 2, 16 x 16 audio patches, a class token, windows of
 * 1 s, chunks of 7 grid indices; fstride 0 and 16 give the same tokens. */
Test(compat, old_engine_pass_unchanged)
{
    tt_media m;
    tt_media_make(&m, 65, 32, 13 * 16000, 1);
    tok_table t[2];
    for (int spelled = 0; spelled < 2; spelled++) {
        rv_tok_opts to;
        rv_ingest_opts io;
        rv_tok_opts_default(&to);
        rv_ingest_opts_default(&io);
        io.fps_num = 5;
        io.size = 32;
        to.window_s = 1.0;
        to.cls = 1;
        to.audio_fstride = spelled ? 16 : 0;
        rv_tok_layout L;
        cr_assert_eq(rv_tok_layout_make(&to, &io, m.nframes, m.nsamples, &L), RV_OK);
        cr_assert_eq(L.seq, 781);
        tt_init(&t[spelled], L.seq, L.video_dim, L.audio_dim, L.fbank_frames);
        rv_tokenizer *tk = NULL;
        cr_assert_eq(rv_tokenizer_new(&L, 0, L.seq, NULL, NULL, 0, 0, tt_collect, &t[spelled], &tk),
                     RV_OK);
        const int seven[] = {7};
        tt_feed(tk, &io, &m, 0, tt_media_grid_end(&io, &m), seven, 1, 1);
        rv_tok_stats st;
        rv_tokenizer_stats(tk, &st);
        cr_assert_eq(st.tokens, 781);
        cr_assert_eq(st.cls_tokens, 1);
        rv_tokenizer_free(&tk);
        cr_assert_eq(engine_hash(&t[spelled]), 0x3f54e2c5acbfbc4cull,
                     "fstride %d: the engine's tokens differ from before", to.audio_fstride);
    }
    /* audio patches too, bit for bit, between the two spellings */
    char why[256];
    for (int64_t g = 0; g < t[0].seq; g++)
        cr_assert(tt_same_token(&t[0], &t[1], g, why, sizeof why), "token %lld: %s", (long long)g,
                  why);
    tt_free(&t[0]);
    tt_free(&t[1]);
    tt_media_free(&m);
}

/* With cls special tokens, token i + cls is token i of the sequence without
 * them, in the same window; the windows start cls later; spans count the
 * special tokens they hold. */
Test(compat, special_tokens_shift_the_sequence)
{
    for (size_t c = 0; c < sizeof OLD / sizeof OLD[0]; c++)
        for (int cls = 1; cls <= 2; cls++) {
            rv_tok_layout L0, L;
            old_layout(&OLD[c], 0, 0, &L0);
            old_layout(&OLD[c], cls, 0, &L);
            cr_assert_eq(L.seq, L0.seq + cls);
            cr_assert_eq(L.windows, L0.windows);
            for (int64_t w = 0; w <= L.windows; w++)
                cr_assert_eq(rv_tok_window_start(&L, w), rv_tok_window_start(&L0, w) + cls);
            double t0 = rv_ingest_frame_time(&L.ingest, 0);
            for (int64_t i = 0; i < cls; i++) {
                rv_token tk;
                cr_assert_eq(rv_tok_info(&L, i, &tk), RV_OK);
                cr_assert_eq(tk.modality, RV_MOD_CLS, "case %zu cls %d: token %lld", c, cls,
                             (long long)i);
                cr_assert(tk.pos[0] == i && tk.pos[1] == 0 && tk.pos[2] == 0,
                          "case %zu cls %d: special token %lld at (%lld, %lld, %lld)", c, cls,
                          (long long)i, (long long)tk.pos[0], (long long)tk.pos[1],
                          (long long)tk.pos[2]);
                cr_assert(tk.item == -1 && tk.part == 0 && tk.time[0] == t0 && tk.time[1] == t0);
            }
            for (int64_t i = 0; i < L0.seq; i++) {
                rv_token a, b;
                cr_assert_eq(rv_tok_info(&L0, i, &a), RV_OK);
                cr_assert_eq(rv_tok_info(&L, i + cls, &b), RV_OK);
                /* field by field: the struct's padding is not part of the token */
                cr_assert(a.modality == b.modality && !memcmp(a.pos, b.pos, sizeof a.pos) &&
                              !memcmp(a.time, b.time, sizeof a.time) && a.item == b.item &&
                              a.part == b.part,
                          "case %zu cls %d: token %lld moved or changed", c, cls, (long long)i);
                cr_assert_eq(rv_tok_window_of(&L, i + cls), rv_tok_window_of(&L0, i));
                cr_assert_eq(rv_tok_video_before(&L, i + cls), rv_tok_video_before(&L0, i));
                cr_assert_eq(rv_tok_audio_before(&L, i + cls), rv_tok_audio_before(&L0, i));
            }
            /* spans: [first, first + count) holds the special tokens of [0, cls) in it */
            for (int64_t first = 0; first <= 3 && first <= L.seq; first++)
                for (int64_t count = 0; count <= 3 && first + count <= L.seq; count++) {
                    rv_tok_span s;
                    cr_assert_eq(rv_tok_span_of(&L, first, count, &s), RV_OK);
                    int64_t lo = first, hi = first + count < cls ? first + count : cls;
                    int want = hi > lo ? (int)(hi - lo) : 0;
                    cr_assert_eq(s.cls, want, "case %zu cls %d: span [%lld, +%lld) has %d special "
                                 "tokens, want %d", c, cls, (long long)first, (long long)count,
                                 s.cls, want);
                    if (want && count == want)
                        cr_assert(s.time[0] == t0 && s.time[1] == t0 && s.grid1 == s.grid0,
                                  "a span of special tokens only reads nothing");
                }
        }
}

/* AST's audio patches: 16 mel bins x 16 frames, 10 frames and 10 bins apart. */
static void ast_layout(int64_t nsamples, int cls, rv_tok_layout *L)
{
    rv_tok_opts to;
    rv_ingest_opts io;
    rv_tok_opts_default(&to);
    rv_ingest_opts_default(&io);
    to.video = 0;
    to.audio_freq = 16;
    to.audio_time = 16;
    to.audio_stride = 10;
    to.audio_fstride = 10;
    to.cls = cls;
    cr_assert_eq(rv_tok_layout_make(&to, &io, 0, nsamples, L), RV_OK, "%s", rv_last_error());
}

Test(compat, ast_geometry)
{
    rv_tok_layout L;
    ast_layout(163840, 2, &L); /* 10.24 s */
    cr_assert_eq(L.bands, 12);
    cr_assert_eq(L.fbank_frames, 1022);
    cr_assert_eq(L.steps, 101);
    cr_assert_eq(L.naudio, 101 * 12);
    cr_assert_eq(L.seq, 2 + 1212);
    cr_assert_eq(L.audio_dim, 256);
    /* the last band reads bins 110..125 */
    rv_token tk;
    cr_assert_eq(rv_tok_info(&L, L.seq - 1, &tk), RV_OK);
    cr_assert(tk.modality == RV_MOD_AUDIO && tk.pos[0] == 100 && tk.pos[1] == 11);
    /* step 100 reads fbank frames 1000..1015 of the 1022: samples up to 162800 */
    cr_assert_float_eq(tk.time[0], 10.0, TIME_TOL(10.0));
    cr_assert_float_eq(tk.time[1], (1015 * 160 + 400) / 16000.0,
                       TIME_TOL((1015 * 160 + 400) / 16000.0));
    ast_layout(25 * 16000, 2, &L);
    cr_assert_eq(L.fbank_frames, 2498);
    cr_assert_eq(L.steps, 249);
    cr_assert_eq(L.seq, 2 + 249 * 12);
    ast_layout(163840, 1, &L);
    cr_assert_eq(L.seq, 1 + 1212);
}
