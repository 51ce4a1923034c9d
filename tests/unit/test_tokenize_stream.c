/* test_tokenize_stream.c: tokenizing real media, chunk by chunk. The tokens
 * against ingest's own output: video patches unpatchify to ingest's frames,
 * token times are ingest's frame times, the fbank rows are rv_fbank over
 * ingest's audio and audio patches are those rows normalised; the order of
 * rv_tokens.h (windows, video before audio); the result does not depend on the
 * chunk size; the planned pass equals the open one when the container's
 * duration is exact (with attention blocks too); --no-audio, --no-video, CLS
 * and a still image; AST's audio patches (overlapping in time and frequency)
 * after class and distillation tokens, against the fbank rows of ingest's
 * audio cut plainly.
 * Media are made with the ffmpeg command at test time (tests/unit/ingest_media.h). */
#include "ingest_media.h"
#include "tokenize_collect.h"

#include <time.h>

#include "ref_ops.h"
#include "rv_fbank.h"
#include "rv_patch.h"
#include "rv_tokenize.h"

const media_recipe rv_test_media[] = {
    {"av.mp4", "-f lavfi -i testsrc2=size=64x48:rate=30 -f lavfi -i "
               "anoisesrc=sample_rate=44100:amplitude=0.3:seed=7 -t 7 -c:v libx264 -g 30 "
               "-pix_fmt yuv420p -c:a aac", NULL},
    {"still.png", "-f lavfi -i testsrc2=size=64x48 -frames:v 1", NULL},
    {NULL, NULL, NULL},
};

static void opts(rv_ingest_opts *io, rv_tok_opts *to, int fps, int size, double window)
{
    rv_ingest_opts_default(io);
    io->fps_num = fps;
    io->size = size;
    rv_tok_opts_default(to);
    to->window_s = window;
}

/* Runs the open pass into a table sized by a first counting pass. */
static void open_pass(const char *path, const rv_ingest_opts *io, const rv_tok_opts *to,
                      tok_table *t, rv_tok_stats *st)
{
    rv_ingest_result *r = ingest_ok(path, io);
    rv_tok_layout L;
    cr_assert_eq(rv_tok_layout_make(to, io, r->nframes, r->nsamples, &L), RV_OK);
    tt_init(t, L.seq, L.video_dim, L.audio_dim, L.fbank_frames);
    rv_ingest_result_free(&r);
    rv_status s = rv_tokenize_file(path, io, to, tt_collect, t, st);
    cr_assert_eq(s, RV_OK, "%s: %s", path, rv_last_error());
    cr_assert_eq(st->layout.seq, L.seq, "%s: open pass made %lld tokens, ingest's counts give %lld",
                 path, (long long)st->layout.seq, (long long)L.seq);
    cr_assert_eq(t->last_batches, 1);
    cr_assert(t->ordered, "batches out of order");
}

/* T = 2 and T = 3 over 35 frames: the last tubelet holds 1 and 2 real frames.
 * ast: AST's audio patches (16 x 16, 10 frames and 10 bins apart) after cls
 * special tokens. */
static void whole_pass_matches_ingest(int tubelet, int ast, int cls)
{
    char *path = media("av.mp4");
    rv_ingest_opts io;
    rv_tok_opts to;
    opts(&io, &to, 5, 32, 1.0);
    io.chunk_frames = 8;
    to.tubelet = tubelet;
    to.cls = cls;
    if (ast)
        to.audio_stride = to.audio_fstride = 10;
    tok_table t;
    rv_tok_stats st;
    open_pass(path, &io, &to, &t, &st);
    const rv_tok_layout *L = &st.layout;
    rv_ingest_result *r = ingest_ok(path, &io);
    cr_assert_eq(L->nframes, r->nframes);
    cr_assert_eq(L->nsamples, r->nsamples);
    cr_assert_neq(r->nframes % tubelet, 0, "the clip should end inside a tubelet");
    cr_assert_eq(L->t0, r->stats.t0, "the open pass takes t0 from its chunks: %.17g, ingest's "
                 "%.17g", L->t0, r->stats.t0);
    cr_assert_eq(st.tokens, L->seq);
    cr_assert_eq(st.video_tokens, L->nvideo);
    cr_assert_eq(st.audio_tokens, L->naudio);
    cr_assert_eq(st.cls_tokens, cls);
    cr_assert_eq(L->bands, ast ? 12 : 8);
    for (int i = 0; i < cls; i++)
        cr_assert(t.mod[i] == RV_MOD_CLS && t.pos[3 * i] == i && t.time[2 * i] == r->frame_time[0],
                  "token %d is not special token %d at the first frame's time", i, i);
    for (int64_t g = 0; g < L->seq; g++)
        cr_assert_eq(t.have[g], 1, "token %lld handed out %d times", (long long)g, t.have[g]);

    /* video: patches back to ingest's frames, times equal to ingest's */
    const int T = L->opts.tubelet, S = io.size, Q = L->per_tubelet;
    const size_t fsize = (size_t)S * S * 3;
    float lut[3][256];
    rv_tubelet_lut(to.mean, to.std, lut);
    float *tub = ref_alloc_f((size_t)(Q * L->video_dim));
    uint8_t *back = malloc(fsize * 3);
    double last[3] = {-1, -1, -1};
    for (int64_t g = 0; g < L->tubelets; g++) {
        int64_t i0 = rv_tok_index_video(L, g, 0);
        for (int q = 0; q < Q; q++) {
            int64_t i = rv_tok_index_video(L, g, q);
            cr_assert_eq(i, i0 + q);
            cr_assert_eq(t.mod[i], RV_MOD_VIDEO);
            cr_assert_eq(t.pos[3 * i], g);
            cr_assert_eq(t.time[2 * i], r->frame_time[g * T],
                         "tubelet %lld starts at %.17g, its first frame is at %.17g", (long long)g,
                         t.time[2 * i], r->frame_time[g * T]);
            cr_assert_eq(t.seq_time[2 * i], rv_ingest_frame_time(&io, g * T));
            double end = rv_ingest_frame_time(&io, (g + 1) * T);
            cr_assert_eq(t.seq_time[2 * i + 1], end);
            if ((g + 1) * T < r->nframes)
                cr_assert_eq(t.time[2 * i + 1], r->frame_time[(g + 1) * T]);
            cr_assert_eq(t.time[2 * i + 1], r->stats.t0 + end);
            memcpy(tub + q * L->video_dim, t.patch + i * L->video_dim, sizeof(float) * L->video_dim);
        }
        uint8_t *bp[3] = {back, back + fsize, back + 2 * fsize};
        rv_tubelet_unpatchify(tub, T, S, L->opts.patch, lut, bp);
        for (int k = 0; k < T; k++) {
            int64_t f = g * T + k < r->nframes ? g * T + k : r->nframes - 1; /* padded: repeated */
            cr_assert_arr_eq(bp[k], r->frames + f * fsize, fsize,
                             "tubelet %lld frame %d is not ingest's frame %lld", (long long)g, k,
                             (long long)f);
        }
    }
    /* monotone time per modality */
    for (int64_t i = 0; i < L->seq; i++) {
        int m = t.mod[i];
        cr_assert_geq(t.time[2 * i], last[m], "token %lld goes back in time", (long long)i);
        last[m] = t.time[2 * i];
    }

    /* audio: fbank rows are rv_fbank over ingest's audio, bit for bit; patches
     * are those rows normalised */
    rv_fbank *fb = NULL;
    cr_assert_eq(rv_fbank_new(&fb), RV_OK);
    cr_assert_eq(L->fbank_frames, rv_fbank_frames(r->nsamples));
    float *rows = ref_alloc_f((size_t)(L->fbank_frames * 128));
    rv_fbank_compute(fb, r->audio, r->nsamples, rows);
    for (int64_t f = 0; f < L->fbank_frames; f++)
        cr_assert_eq(t.fb_have[f], 1, "fbank frame %lld handed out %d times", (long long)f,
                     t.fb_have[f]);
    cr_assert_arr_eq(rows, t.fbank, sizeof(float) * (size_t)(L->fbank_frames * 128));
    float *want = ref_alloc_f((size_t)(L->bands * L->audio_dim));
    float *plain = ref_alloc_f((size_t)L->audio_dim);
    for (int64_t p = 0; p < L->steps; p++) {
        rv_audio_patchify(rows + p * L->opts.audio_stride * 128, 128, L->opts.audio_freq,
                          L->opts.audio_fstride, L->opts.audio_time, to.audio_mean, to.audio_std,
                          want);
        for (int b = 0; b < L->bands; b++) {
            int64_t i = rv_tok_index_audio(L, p, b);
            cr_assert_eq(t.mod[i], RV_MOD_AUDIO);
            cr_assert_eq(t.pos[3 * i], p);
            cr_assert_eq(t.pos[3 * i + 1], b);
            cr_assert_arr_eq(t.patch + i * L->video_dim, want + b * L->audio_dim,
                             sizeof(float) * L->audio_dim, "audio step %lld band %d", (long long)p, b);
            /* and the plain cut of the rows, bin by bin and frame by frame */
            tt_audio_patch_ref(L, rows, p, b, plain);
            cr_assert_arr_eq(t.patch + i * L->video_dim, plain, sizeof(float) * L->audio_dim,
                             "audio step %lld band %d: not mel bins %d.. of frames %lld..",
                             (long long)p, b, b * (ast ? 10 : 16), (long long)(p * L->opts.audio_stride));
        }
    }
    free(plain);
    cr_log_info("av.mp4: %lld tokens (%lld video, %lld audio), %.4f s CPU tokenizing: %.0f tokens/s",
                (long long)L->seq, (long long)L->nvideo, (long long)L->naudio, st.cpu_s,
                st.cpu_s > 0 ? L->seq / st.cpu_s : 0.0);
    free(want);
    free(rows);
    free(tub);
    free(back);
    rv_fbank_free(&fb);
    rv_ingest_result_free(&r);
    tt_free(&t);
    free(path);
}

Test(tokenize, whole_pass_matches_ingest_t2) { whole_pass_matches_ingest(2, 0, 0); }
Test(tokenize, whole_pass_matches_ingest_t3) { whole_pass_matches_ingest(3, 0, 0); }
Test(tokenize, whole_pass_matches_ingest_ast_dist) { whole_pass_matches_ingest(2, 1, 2); }

static void expect_same_tables(const tok_table *a, const tok_table *b, const char *what)
{
    char why[256];
    cr_assert_eq(a->seq, b->seq, "%s: %lld vs %lld tokens", what, (long long)a->seq, (long long)b->seq);
    for (int64_t g = 0; g < a->seq; g++) {
        cr_assert(a->have[g] == 1 && b->have[g] == 1, "%s: token %lld missing", what, (long long)g);
        cr_assert(tt_same_token(a, b, g, why, sizeof why), "%s: token %lld differs: %s", what,
                  (long long)g, why);
    }
    cr_assert_eq(a->nfbank, b->nfbank);
    cr_assert_arr_eq(a->fbank, b->fbank, sizeof(float) * (size_t)(a->nfbank * 128), "%s: fbank", what);
}

Test(tokenize, chunk_size_does_not_matter)
{
    char *path = media("av.mp4");
    rv_ingest_opts io;
    rv_tok_opts to;
    opts(&io, &to, 5, 32, 0.35);
    to.cls = 1;
    tok_table a, b;
    rv_tok_stats st;
    io.chunk_frames = 1;
    open_pass(path, &io, &to, &a, &st);
    io.chunk_frames = 64;
    open_pass(path, &io, &to, &b, &st);
    expect_same_tables(&a, &b, "chunks of 1 and 64 frames");
    cr_assert_eq(a.mod[0], RV_MOD_CLS);
    tt_free(&a);
    tt_free(&b);
    /* class and distillation tokens, AST's audio patches: chunk edges cut
     * through patches that share fbank frames */
    to.cls = 2;
    to.audio_stride = to.audio_fstride = 10;
    io.chunk_frames = 1;
    open_pass(path, &io, &to, &a, &st);
    io.chunk_frames = 3;
    open_pass(path, &io, &to, &b, &st);
    expect_same_tables(&a, &b, "AST patches, chunks of 1 and 3 frames");
    cr_assert_eq(st.cls_tokens, 2);
    cr_assert(a.mod[0] == RV_MOD_CLS && a.mod[1] == RV_MOD_CLS && a.pos[3] == 1);
    tt_free(&a);
    tt_free(&b);
    free(path);
}

/* mp4 states its duration exactly, so the plan from the probe is the recording
 * and the planned whole pass equals the open one. blocks: 1 time blocks of
 * 0.35 s, 2 frame blocks, each led by class and distillation tokens, positions
 * counted from each block's start. */
static void planned_equals_open(int blocks)
{
    char *path = media("av.mp4");
    rv_ingest_opts io;
    rv_tok_opts to;
    opts(&io, &to, 5, 32, 1.0);
    if (blocks) {
        to.window_s = 0.35;
        to.cls = 2;
        to.frame_windows = blocks == 2;
        to.cls_each_window = to.window_positions = 1;
    }
    tok_table a, b;
    rv_tok_stats st, st2;
    open_pass(path, &io, &to, &a, &st);
    rv_probe *p = NULL;
    cr_assert_eq(rv_probe_file(path, &p), RV_OK);
    rv_tok_layout plan;
    cr_assert_eq(rv_tok_layout_from_probe(p, &to, &io, &plan, NULL), RV_OK, "%s", rv_last_error());
    cr_assert_eq(plan.nframes, st.layout.nframes);
    cr_assert_eq(plan.nsamples, st.layout.nsamples);
    tt_init(&b, plan.seq, plan.video_dim, plan.audio_dim, plan.fbank_frames);
    cr_assert_eq(rv_tokenize_range(path, &plan, 0, plan.seq, tt_collect, &b, &st2), RV_OK, "%s",
                 rv_last_error());
    cr_assert_eq(st2.padded_frames + st2.padded_samples + st2.dropped_frames + st2.dropped_samples, 0);
    cr_assert_eq(st.cls_tokens, plan.nspecial);
    cr_assert_eq(st2.cls_tokens, plan.nspecial);
    if (blocks)
        cr_assert_eq(plan.nspecial, 2 * plan.windows);
    expect_same_tables(&a, &b, "open and planned passes");
    rv_probe_free(&p);
    tt_free(&a);
    tt_free(&b);
    free(path);
}

Test(tokenize, planned_pass_equals_open_pass) { planned_equals_open(0); }
Test(tokenize, planned_pass_equals_open_pass_time_blocks) { planned_equals_open(1); }
Test(tokenize, planned_pass_equals_open_pass_frame_blocks) { planned_equals_open(2); }

Test(tokenize, modalities_cls_and_still_image)
{
    char *path = media("av.mp4");
    rv_ingest_opts io;
    rv_tok_opts to;
    tok_table t;
    rv_tok_stats st;
    opts(&io, &to, 5, 32, 1.0);
    to.audio = 0;
    io.audio_stream = -2;
    open_pass(path, &io, &to, &t, &st);
    cr_assert_eq(st.layout.naudio, 0);
    cr_assert_eq(st.video_tokens, st.tokens);
    cr_assert_gt(st.tokens, 0);
    tt_free(&t);

    opts(&io, &to, 5, 32, 1.0);
    to.video = 0;
    io.video_stream = -2;
    to.cls = 1;
    open_pass(path, &io, &to, &t, &st);
    cr_assert_eq(st.layout.nvideo, 0);
    cr_assert_eq(st.cls_tokens, 1);
    cr_assert_eq(st.audio_tokens + 1, st.tokens);
    cr_assert_eq(t.mod[0], RV_MOD_CLS);
    for (int64_t i = 1; i < t.seq; i++)
        cr_assert_eq(t.mod[i], RV_MOD_AUDIO);
    tt_free(&t);
    free(path);

    /* A still image is a one-frame video: T = 1 gives its patches; T = 2 repeats it. */
    path = media("still.png");
    for (int T = 1; T <= 2; T++) {
        opts(&io, &to, 1, 32, 2.0);
        to.tubelet = T;
        to.patch = 8;
        open_pass(path, &io, &to, &t, &st);
        cr_assert_eq(st.layout.nframes, 1);
        cr_assert_eq(st.tokens, 16, "still image, T=%d: %lld tokens", T, (long long)st.tokens);
        cr_assert_eq(st.audio_tokens, 0);
        tt_free(&t);
    }
    free(path);
}

/* Tokens per second of tokenization alone (no decoding): synthetic chunks of
 * one minute at 1 fps, 224 px, 16 kHz audio pushed through the engine. */
Test(tokenize, speed_without_decode)
{
    rv_ingest_opts io;
    rv_tok_opts to;
    opts(&io, &to, 1, 224, 2.0);
    const int secs = 60, C = 8;
    rv_tok_layout L;
    cr_assert_eq(rv_tok_layout_make(&to, &io, secs, secs * 16000, &L), RV_OK);
    const size_t fsize = 224 * 224 * 3;
    uint8_t *frames = malloc(fsize * C);
    float *audio = ref_alloc_f(16000 * C);
    double *times = calloc(C, sizeof(double));
    ref_rng r = ref_rng_make(1);
    for (size_t i = 0; i < fsize * C; i++)
        frames[i] = (uint8_t)(ref_rng_u64(&r) >> 56);
    ref_fill_uniform(&r, audio, 16000 * C, -0.5f, 0.5f);
    tok_table t;
    tt_init(&t, L.seq, L.video_dim, L.audio_dim, L.fbank_frames);
    rv_tokenizer *tk = NULL;
    cr_assert_eq(rv_tokenizer_new(&L, 0, L.seq, NULL, NULL, 0, 0, tt_collect, &t, &tk), RV_OK);
    for (int k = 0; k < secs; k += C) {
        int n = secs - k < C ? secs - k : C;
        rv_ingest_chunk c = {.first_frame = k, .nframes = n, .size = 224, .frames = frames,
                             .frame_time = times, .source_time = times, .first_sample = k * 16000,
                             .nsamples = n * 16000, .audio = audio, .last = k + n >= secs};
        cr_assert_eq(rv_tokenizer_push(tk, &c), RV_OK, "%s", rv_last_error());
    }
    cr_assert_eq(rv_tokenizer_finish(tk), RV_OK, "%s", rv_last_error());
    rv_tok_stats st;
    rv_tokenizer_stats(tk, &st);
    cr_assert_eq(st.tokens, L.seq);
    for (int64_t i = 0; i < L.seq; i++)
        cr_assert_eq(t.have[i], 1);
    cr_log_info("tokenize without decode: %lld tokens (%lld video, %lld audio) of %d s in %.3f s "
                "CPU: %.0f tokens/s, %.0fx real time", (long long)st.tokens,
                (long long)st.video_tokens, (long long)st.audio_tokens, secs, st.cpu_s,
                st.tokens / st.cpu_s, secs / st.cpu_s);
    rv_tokenizer_free(&tk);
    tt_free(&t);
    free(frames);
    free(audio);
    free(times);
}
