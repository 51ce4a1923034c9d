/* test_tokenize_ast_blocks.c: AST's 10.24 s windows as attention blocks
 * (rv_tokens.h, window_positions: each block the recording cut at its bounds),
 * what `ringvit embed --attention block=10.24` with an AST model tokenizes: 25 s
 * of 16 kHz audio, AST's patches (16 x 16, 10 frames and 10 bins apart), class
 * and distillation tokens leading every block. Blocks 0 and 1 are what AST
 * sees on a 10.24 s clip: 1022 fbank frames, 101 time steps x 12 bands,
 * positions 0 .. 100; block 1 starts at 10.24 s (not on the whole
 * recording's step grid, which would start it at 10.30 s); the last block is
 * the 4.52 s left (450 fbank frames, 44 steps). Each block's audio_fbank rows
 * (rv_tok_batch.fbank) equal torchaudio's kaldi fbank of that block's samples
 * alone (tests/peer/fbank_golden.py, run at test time, within the tolerance of
 * test_tokenize_fbank.c), and its patches are those rows normalised. */
#include "tokenize_collect.h"

#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rv_fbank.h"
#include "rv_safetensors.h"
#include "rv_tokens.h"

#ifndef RV_TESTS_SOURCE_DIR
#error "RV_TESTS_SOURCE_DIR must name tests/ (tests/CMakeLists.txt sets it)"
#endif

#define TOL 1e-3 /* test_tokenize_fbank.c's */
#define BLOCK 163840 /* 10.24 s of samples */
#define NSAMPLES 400000 /* 25 s */

static void ast_opts(rv_tok_opts *to, rv_ingest_opts *io)
{
    rv_tok_opts_default(to);
    rv_ingest_opts_default(io);
    io->size = 16;
    io->video_stream = -2;
    to->video = 0;
    to->audio_freq = to->audio_time = 16;
    to->audio_stride = to->audio_fstride = 10;
    to->cls = 2;
    to->window_s = 10.24;
    to->cls_each_window = to->window_positions = 1;
}

/* torchaudio's fbank of samples [j0, j0 + n) of x, as "NAME/fbank" and
 * "NAME/fbank64", for the blocks given. */
static rv_safetensors *golden(const float *x, const int64_t (*blocks)[2], int nblocks)
{
    char dir[] = "/tmp/rv_ast_blocks_XXXXXX";
    cr_assert(mkdtemp(dir), "mkdtemp");
    char cmd[4096], path[512];
    int n = snprintf(cmd, sizeof cmd, "/usr/bin/python3 '" RV_TESTS_SOURCE_DIR
                     "/peer/fbank_golden.py' '%s/golden.safetensors'", dir);
    for (int b = 0; b < nblocks; b++) {
        snprintf(path, sizeof path, "%s/block%d.f32", dir, b);
        FILE *f = fopen(path, "wb");
        cr_assert(f);
        cr_assert_eq(fwrite(x + blocks[b][0], sizeof(float), (size_t)blocks[b][1], f),
                     (size_t)blocks[b][1]);
        fclose(f);
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, " block%d='%s'", b, path);
    }
    snprintf(cmd + n, sizeof cmd - (size_t)n, " 2>'%s/err'", dir);
    int rc = system(cmd);
    rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
    cr_assert_eq(rc, 0, "fbank_golden.py failed (exit %d); see %s/err", rc, dir);
    snprintf(path, sizeof path, "%s/golden.safetensors", dir);
    rv_safetensors *g = NULL;
    cr_assert_eq(rv_st_open(path, &g), RV_OK, "%s", rv_last_error());
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
    return g;
}

static double at(const rv_st_tensor *t, int64_t i)
{
    if (t->dtype == RV_F64) {
        double v;
        memcpy(&v, (const char *)t->data + 8 * i, 8);
        return v;
    }
    float v;
    memcpy(&v, (const char *)t->data + 4 * i, 4);
    return v;
}

Test(ast_blocks, layout_of_25_s)
{
    rv_tok_opts to;
    rv_ingest_opts io;
    ast_opts(&to, &io);
    rv_tok_layout L;
    cr_assert_eq(rv_tok_layout_make(&to, &io, 0, NSAMPLES, &L), RV_OK, "%s", rv_last_error());
    cr_assert_eq(L.windows, 3);
    cr_assert_eq(L.bands, 12);
    const int64_t steps[3] = {101, 101, 44}, fbanks[3] = {1022, 1022, 450};
    cr_assert_eq(L.fbank_frames, 1022 + 1022 + 450);
    cr_assert_eq(L.steps, 101 + 101 + 44);
    cr_assert_eq(L.seq, 3 * 2 + L.steps * 12);
    int64_t p = 0;
    for (int w = 0; w < 3; w++) {
        int64_t g0, g1, p0, p1;
        rv_tok_window_items(&L, w, &g0, &g1, &p0, &p1);
        cr_assert(p0 == p && p1 == p + steps[w], "block %d: steps [%lld, %lld), want %lld", w,
                  (long long)p0, (long long)p1, (long long)steps[w]);
        cr_assert_eq(rv_tok_window_time(&L, w), 10.24 * w);
        /* the block's tokens: its class and distillation tokens at its start,
         * then its steps from position 0, the first at the block's first sample */
        int64_t s = rv_tok_window_start(&L, w);
        cr_assert_eq(s, w * 2 + p * 12);
        rv_token tk;
        for (int i = 0; i < 2; i++) {
            cr_assert_eq(rv_tok_info(&L, s + i, &tk), RV_OK);
            cr_assert(tk.modality == RV_MOD_CLS && tk.pos[0] == i && tk.window == w &&
                      tk.seq_time[0] == 10.24 * w);
        }
        for (int64_t q = 0; q < steps[w]; q++)
            for (int b = 0; b < 12; b++) {
                cr_assert_eq(rv_tok_info(&L, s + 2 + q * 12 + b, &tk), RV_OK);
                cr_assert(tk.modality == RV_MOD_AUDIO && tk.pos[0] == q && tk.pos[1] == b &&
                              tk.window == w,
                          "block %d step %lld band %d: (%lld, %lld) window %lld", w,
                          (long long)q, b, (long long)tk.pos[0], (long long)tk.pos[1],
                          (long long)tk.window);
                /* samples w * 163840 + 1600 q .. + 2800 */
                int64_t j0 = (int64_t)w * BLOCK + q * 1600;
                cr_assert(fabs(tk.seq_time[0] - j0 / 16000.0) < 1e-9 &&
                              fabs(tk.seq_time[1] - (j0 + 2800) / 16000.0) < 1e-9,
                          "block %d step %lld at %.17g..%.17g s", w, (long long)q,
                          tk.seq_time[0], tk.seq_time[1]);
            }
        /* the block reads its own samples and no further */
        rv_tok_span sp;
        cr_assert_eq(rv_tok_span_of(&L, s, rv_tok_window_start(&L, w + 1) - s, &sp), RV_OK);
        int64_t f0 = w == 0 ? 0 : w == 1 ? 1022 : 2044;
        cr_assert(sp.fbank0 == f0 && sp.fbank1 == f0 + (steps[w] - 1) * 10 + 16,
                  "block %d: fbank frames [%lld, %lld)", w, (long long)sp.fbank0,
                  (long long)sp.fbank1);
        cr_assert(sp.sample0 == (int64_t)w * BLOCK && sp.sample1 <= (int64_t)(w + 1) * BLOCK &&
                      sp.sample1 <= NSAMPLES,
                  "block %d: samples [%lld, %lld)", w, (long long)sp.sample0,
                  (long long)sp.sample1);
        cr_assert_eq(fbanks[w], w < 2 ? rv_fbank_frames(BLOCK) : rv_fbank_frames(NSAMPLES - 2 * BLOCK));
        p += steps[w];
    }
    cr_assert_eq(NSAMPLES - 2 * BLOCK, 72320, "the last block is 4.52 s");
}

Test(ast_blocks, fbank_rows_are_torchaudio_of_each_block)
{
    rv_tok_opts to;
    rv_ingest_opts io;
    ast_opts(&to, &io);
    tt_media m;
    tt_media_make(&m, 0, 16, NSAMPLES, 1024);
    /* a tone over the noise, so the mel energies span a range */
    for (int64_t j = 0; j < NSAMPLES; j++)
        m.audio[j] = 0.2f * m.audio[j] + 0.5f * (float)sin(2 * M_PI * 440.0 * j / 16000.0);
    rv_tok_layout L;
    cr_assert_eq(rv_tok_layout_make(&to, &io, 0, NSAMPLES, &L), RV_OK);
    tok_table t;
    tt_init(&t, L.seq, L.video_dim, L.audio_dim, L.fbank_frames);
    rv_tokenizer *tk = NULL;
    cr_assert_eq(rv_tokenizer_new(&L, 0, L.seq, NULL, NULL, 0, 0, tt_collect, &t, &tk), RV_OK,
                 "%s", rv_last_error());
    const int sizes[] = {3, 1, 4};
    tt_feed(tk, &L.ingest, &m, 0, tt_media_grid_end(&L.ingest, &m), sizes, 3, 1);
    rv_tokenizer_free(&tk);
    for (int64_t g = 0; g < L.seq; g++)
        cr_assert_eq(t.have[g], 1);
    for (int64_t f = 0; f < L.fbank_frames; f++)
        cr_assert_eq(t.fb_have[f], 1, "fbank frame %lld handed out %d times", (long long)f,
                     t.fb_have[f]);
    const int64_t blocks[3][2] = {{0, BLOCK}, {BLOCK, BLOCK}, {2 * BLOCK, NSAMPLES - 2 * BLOCK}};
    const int64_t rows0[3] = {0, 1022, 2044};
    rv_safetensors *gold = golden(m.audio, blocks, 3);
    for (int b = 0; b < 3; b++) {
        char name[64];
        snprintf(name, sizeof name, "block%d/fbank", b);
        const rv_st_tensor *f32 = rv_st_find(gold, name);
        snprintf(name, sizeof name, "block%d/fbank64", b);
        const rv_st_tensor *f64 = rv_st_find(gold, name);
        cr_assert(f32 && f64, "the golden lacks block %d", b);
        const int64_t frames = f32->shape[0];
        cr_assert_eq(frames, b < 2 ? 1022 : 450, "block %d: torchaudio makes %lld frames", b,
                     (long long)frames);
        const float *ours = t.fbank + rows0[b] * 128;
        double e64 = 0, excess = 0;
        for (int64_t k = 0; k < frames * 128; k++) {
            double d64 = fabs(ours[k] - at(f64, k)), d32 = fabs(ours[k] - at(f32, k));
            double own = fabs(at(f32, k) - at(f64, k));
            e64 = fmax(e64, d64);
            excess = fmax(excess, d32 - own);
        }
        cr_log_info("block %d: %lld fbank rows, max |diff| %.2e vs torchaudio float64", b,
                    (long long)frames, e64);
        cr_assert_leq(e64, TOL, "block %d: max |ours - torchaudio float64| = %g", b, e64);
        cr_assert_leq(excess, TOL, "block %d: float32 torchaudio differs by %g beyond its own "
                      "error", b, excess);
        /* the block's patches are its own rows, normalised, from its first row */
        int64_t g0, g1, p0, p1;
        rv_tok_window_items(&L, b, &g0, &g1, &p0, &p1);
        float ref[256];
        const int64_t pd = L.video_dim > L.audio_dim ? L.video_dim : L.audio_dim;
        int64_t s = rv_tok_window_start(&L, b) + 2;
        for (int64_t q = 0; q < p1 - p0; q++)
            for (int band = 0; band < 12; band++) {
                tt_audio_patch_ref(&L, ours, q, band, ref);
                cr_assert_arr_eq(t.patch + (s + q * 12 + band) * pd, ref,
                                 sizeof(float) * 256, "block %d step %lld band %d", b,
                                 (long long)q, band);
            }
    }
    rv_st_free(&gold);
    tt_free(&t);
    tt_media_free(&m);
}
