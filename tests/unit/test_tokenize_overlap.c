/* test_tokenize_overlap.c: the tokenizer engine on synthetic recordings fed in
 * chunks the way ingest hands them out (grid indices at 5 or 7 fps, so chunk
 * edges fall anywhere inside fbank frames and audio patches), with what the
 * generalised sequence adds: 1 or 2 leading special tokens, and AST's audio
 * patches, which overlap in time (16 frames, 10 apart) and in frequency (16
 * bins, 10 apart). For 10.24 s and 25 s of audio, and with video beside it:
 *   - the whole planned pass: every token as the layout describes it (its
 *     window index too, in every batch), every fbank row once, every audio
 *     patch equal to a plain cut of those rows, the special tokens first;
 *   - the open pass (length unknown until the end), chunked differently,
 *     equals it;
 *   - every rank of 1, 2, 3, 4 and 7 under both shard plans, each segment a
 *     pass of its own fed only its grid range, gets bit for bit the whole
 *     pass's tokens (a rank whose slice starts at 1 with cls = 2 gets the
 *     distillation token alone), and the fbank rows it computes, shared with
 *     its neighbours by overlapping patches, are the whole pass's. */
#include "tokenize_collect.h"

#include <stdio.h>

#include "rv_tokenize.h"

typedef struct ocase {
    const char *name;
    int fps, size;
    int64_t nframes, nsamples;
    int cls;
    double window;
    int ast; /* AST's audio patches, else the defaults (16 x 16 side by side) */
} ocase;

static const ocase CASES[] = {
    {"AST 10.24 s, cls 2", 7, 16, 0, 163840, 2, 2.0, 1},
    {"AST 25 s, cls 2", 7, 16, 0, 25 * 16000, 2, 2.0, 1},
    {"AST 25 s, cls 1", 7, 16, 0, 25 * 16000, 1, 0.35, 1},
    {"video + AST audio, cls 2", 5, 32, 65, 13 * 16000, 2, 0.35, 1},
    {"video + audio, cls 2", 5, 32, 65, 13 * 16000, 2, 1.0, 0},
    {"video + audio, cls 1", 5, 32, 65, 13 * 16000, 1, 1.0, 0},
    {"video only, cls 2", 5, 32, 33, 0, 2, 1.0, 0},
};
#define NCASES (sizeof CASES / sizeof CASES[0])

static void case_opts(const ocase *c, rv_tok_opts *to, rv_ingest_opts *io)
{
    rv_ingest_opts_default(io);
    io->fps_num = c->fps;
    io->size = c->size;
    rv_tok_opts_default(to);
    to->window_s = c->window;
    to->cls = c->cls;
    to->video = c->nframes > 0;
    to->audio = c->nsamples > 0;
    if (c->ast) {
        to->audio_freq = to->audio_time = 16;
        to->audio_stride = to->audio_fstride = 10;
    }
}

/* The whole planned pass, checked against a plain cut of its fbank rows. */
static void whole_pass(const ocase *c, const tt_media *m, rv_tok_layout *L, tok_table *t)
{
    rv_tok_opts to;
    rv_ingest_opts io;
    case_opts(c, &to, &io);
    cr_assert_eq(rv_tok_layout_make(&to, &io, m->nframes, m->nsamples, L), RV_OK, "%s",
                 rv_last_error());
    if (c->ast)
        cr_assert_eq(L->bands, 12);
    tt_init(t, L->seq, L->video_dim, L->audio_dim, L->fbank_frames);
    rv_tokenizer *tk = NULL;
    cr_assert_eq(rv_tokenizer_new(L, 0, L->seq, NULL, NULL, 0, 0, tt_collect, t, &tk), RV_OK);
    const int sizes[] = {1, 2, 3, 5};
    tt_feed(tk, &io, m, 0, tt_media_grid_end(&io, m), sizes, 4, 1);
    rv_tok_stats st;
    rv_tokenizer_stats(tk, &st);
    rv_tokenizer_free(&tk);
    cr_assert_eq(st.tokens, L->seq, "%s", c->name);
    cr_assert_eq(st.cls_tokens, c->cls, "%s: %lld special tokens counted", c->name,
                 (long long)st.cls_tokens);
    cr_assert(t->ordered, "%s: batches out of order", c->name);
    for (int64_t g = 0; g < L->seq; g++)
        cr_assert_eq(t->have[g], 1, "%s: token %lld handed out %d times", c->name, (long long)g,
                     t->have[g]);
    for (int i = 0; i < c->cls; i++)
        cr_assert(t->mod[i] == RV_MOD_CLS && t->pos[3 * i] == i && t->pos[3 * i + 1] == 0 &&
                      t->pos[3 * i + 2] == 0,
                  "%s: token %d is not special token %d", c->name, i, i);
    /* every token as the layout describes it */
    for (int64_t g = 0; g < L->seq; g++) {
        rv_token tk;
        cr_assert_eq(rv_tok_info(L, g, &tk), RV_OK);
        cr_assert(t->mod[g] == tk.modality && !memcmp(t->pos + 3 * g, tk.pos, sizeof tk.pos) &&
                      !memcmp(t->time + 2 * g, tk.time, sizeof tk.time) &&
                      !memcmp(t->seq_time + 2 * g, tk.seq_time, sizeof tk.seq_time) &&
                      t->win[g] == tk.window && tk.window == rv_tok_window_of(L, g),
                  "%s: token %lld is not the layout's (modality %d, pos %lld %lld, time %.17g, "
                  "window %lld)", c->name, (long long)g, t->mod[g], (long long)t->pos[3 * g],
                  (long long)t->pos[3 * g + 1], t->time[2 * g], (long long)t->win[g]);
    }
    for (int64_t f = 0; f < L->fbank_frames; f++)
        cr_assert_eq(t->fb_have[f], 1, "%s: fbank frame %lld handed out %d times", c->name,
                     (long long)f, t->fb_have[f]);
    float *want = malloc(sizeof(float) * (size_t)L->audio_dim);
    int64_t pd = L->video_dim > L->audio_dim ? L->video_dim : L->audio_dim;
    for (int64_t p = 0; p < L->steps; p++)
        for (int b = 0; b < L->bands; b++) {
            int64_t i = rv_tok_index_audio(L, p, b);
            cr_assert(t->mod[i] == RV_MOD_AUDIO && t->pos[3 * i] == p && t->pos[3 * i + 1] == b);
            tt_audio_patch_ref(L, t->fbank, p, b, want);
            cr_assert_arr_eq(t->patch + i * pd, want, sizeof(float) * (size_t)L->audio_dim,
                             "%s: audio step %lld band %d is not its cut of the fbank rows",
                             c->name, (long long)p, b);
        }
    free(want);
}

static void expect_same(const tok_table *a, const tok_table *b, int64_t seq, const char *what)
{
    char why[256];
    for (int64_t g = 0; g < seq; g++) {
        cr_assert_eq(b->have[g], 1, "%s: token %lld handed out %d times", what, (long long)g,
                     b->have[g]);
        cr_assert(tt_same_token(a, b, g, why, sizeof why), "%s: token %lld differs from the "
                  "whole pass: %s", what, (long long)g, why);
    }
    for (int64_t f = 0; f < a->nfbank; f++)
        if (b->fb_have[f])
            cr_assert_arr_eq(b->fbank + f * 128, a->fbank + f * 128, 128 * sizeof(float),
                             "%s: fbank frame %lld", what, (long long)f);
}

Test(overlap, open_pass_equals_planned)
{
    for (size_t c = 0; c < NCASES; c++) {
        tt_media m;
        tt_media_make(&m, CASES[c].nframes, CASES[c].size, CASES[c].nsamples, 100 + c);
        rv_tok_layout L;
        tok_table whole, open;
        whole_pass(&CASES[c], &m, &L, &whole);
        rv_tok_opts to;
        rv_ingest_opts io;
        case_opts(&CASES[c], &to, &io);
        tt_init(&open, L.seq, L.video_dim, L.audio_dim, L.fbank_frames);
        rv_tokenizer *tk = NULL;
        cr_assert_eq(rv_tokenizer_new(NULL, 0, 0, &to, &io, m.nframes > 0, m.nsamples > 0,
                                      tt_collect, &open, &tk), RV_OK, "%s", rv_last_error());
        const int sizes[] = {4, 1, 7};
        tt_feed(tk, &io, &m, 0, tt_media_grid_end(&io, &m), sizes, 3, 1);
        rv_tok_stats st;
        rv_tokenizer_stats(tk, &st);
        rv_tokenizer_free(&tk);
        cr_assert_eq(st.layout.seq, L.seq, "%s: the open pass closed at %lld tokens, want %lld",
                     CASES[c].name, (long long)st.layout.seq, (long long)L.seq);
        cr_assert_eq(st.cls_tokens, CASES[c].cls);
        cr_assert(open.ordered);
        char what[96];
        snprintf(what, sizeof what, "%s, open pass", CASES[c].name);
        expect_same(&whole, &open, L.seq, what);
        tt_free(&open);
        tt_free(&whole);
        tt_media_free(&m);
    }
}

/* Rank r's segments, each a planned range pass fed only [grid0, grid1) of its
 * span, as rv_tokenize_range ingests it. */
static void rank_pass(const rv_tok_layout *L, const rv_shard_plan *sp, int r, const tt_media *m,
                      tok_table *t, int64_t *cls_tokens)
{
    rv_shard_seg seg[RV_SHARD_MAX_SEGS];
    int n = rv_shard_segments(sp, r, seg);
    for (int s = 0; s < n; s++) {
        if (seg[s].len == 0)
            continue;
        rv_tok_span span;
        cr_assert_eq(rv_tok_span_of(L, seg[s].start, seg[s].len, &span), RV_OK);
        rv_tokenizer *tk = NULL;
        cr_assert_eq(rv_tokenizer_new(L, seg[s].start, seg[s].len, NULL, NULL, 0, 0, tt_collect, t,
                                      &tk), RV_OK, "%s", rv_last_error());
        const int sizes[] = {3, 1, 4, 1, 5};
        tt_feed(tk, &L->ingest, m, span.grid0, span.grid1, sizes + r % 5, 5 - r % 5, 1);
        rv_tok_stats st;
        rv_tokenizer_stats(tk, &st);
        rv_tokenizer_free(&tk);
        cr_assert_eq(st.tokens, seg[s].len, "segment [%lld, +%lld): %lld tokens",
                     (long long)seg[s].start, (long long)seg[s].len, (long long)st.tokens);
        cr_assert_eq(st.cls_tokens, span.cls);
        *cls_tokens += st.cls_tokens;
    }
}

Test(overlap, ranks_equal_whole_pass)
{
    const int ns[] = {1, 2, 3, 4, 7};
    for (size_t c = 0; c < NCASES; c++) {
        tt_media m;
        tt_media_make(&m, CASES[c].nframes, CASES[c].size, CASES[c].nsamples, 100 + c);
        rv_tok_layout L;
        tok_table whole;
        whole_pass(&CASES[c], &m, &L, &whole);
        for (int kind = 0; kind < 2; kind++)
            for (int ni = 0; ni < 5; ni++) {
                rv_shard_plan sp;
                cr_assert_eq(rv_tok_shard_plan(&L, (rv_shard_kind)kind, ns[ni], &sp), RV_OK);
                tok_table ranks;
                tt_init(&ranks, L.seq, L.video_dim, L.audio_dim, L.fbank_frames);
                int64_t cls_tokens = 0;
                for (int r = 0; r < ns[ni]; r++)
                    rank_pass(&L, &sp, r, &m, &ranks, &cls_tokens);
                char what[128];
                snprintf(what, sizeof what, "%s, %s N=%d", CASES[c].name,
                         rv_shard_kind_name((rv_shard_kind)kind), ns[ni]);
                cr_assert_eq(cls_tokens, CASES[c].cls, "%s: %lld special tokens", what,
                             (long long)cls_tokens);
                expect_same(&whole, &ranks, L.seq, what);
                tt_free(&ranks);
            }
        tt_free(&whole);
        tt_media_free(&m);
    }
}

/* Slices that split the special tokens: [0, 1) the class token, [1, 2) the
 * distillation token alone, [1, 5) it and the first tokens after it. */
Test(overlap, slices_through_the_special_tokens)
{
    const ocase *c = &CASES[3]; /* video + AST audio, cls 2 */
    tt_media m;
    tt_media_make(&m, c->nframes, c->size, c->nsamples, 103);
    rv_tok_layout L;
    tok_table whole;
    whole_pass(c, &m, &L, &whole);
    const int64_t cuts[][2] = {{0, 1}, {1, 1}, {1, 4}, {0, 2}, {2, 3}};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        tok_table part;
        tt_init(&part, L.seq, L.video_dim, L.audio_dim, L.fbank_frames);
        rv_tok_span span;
        cr_assert_eq(rv_tok_span_of(&L, cuts[k][0], cuts[k][1], &span), RV_OK);
        rv_tokenizer *tk = NULL;
        cr_assert_eq(rv_tokenizer_new(&L, cuts[k][0], cuts[k][1], NULL, NULL, 0, 0, tt_collect,
                                      &part, &tk), RV_OK);
        const int two[] = {2};
        tt_feed(tk, &L.ingest, &m, span.grid0, span.grid1, two, 1, 1);
        rv_tokenizer_free(&tk);
        cr_assert_eq(part.batches > 0, 1);
        char why[256];
        for (int64_t g = 0; g < L.seq; g++) {
            int in = g >= cuts[k][0] && g < cuts[k][0] + cuts[k][1];
            cr_assert_eq(part.have[g], in, "slice [%lld, +%lld): token %lld handed out %d times",
                         (long long)cuts[k][0], (long long)cuts[k][1], (long long)g, part.have[g]);
            if (in)
                cr_assert(tt_same_token(&whole, &part, g, why, sizeof why),
                          "slice [%lld, +%lld): token %lld: %s", (long long)cuts[k][0],
                          (long long)cuts[k][1], (long long)g, why);
        }
        cr_assert(part.ordered);
        tt_free(&part);
    }
    tt_free(&whole);
    tt_media_free(&m);
}
