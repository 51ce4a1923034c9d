/* test_tokenize_range.c: each rank tokenizing only its own part of the planned
 * sequence (rv_tokenize_rank: the grid range its tokens read, ingested with
 * the range API, which seeks) gets exactly the tokens the whole planned pass
 * gives at those positions, bit for bit, for N in {1, 2, 3, 4, 7} ranks under
 * contiguous and zigzag plans; every token lands on exactly one rank. On an
 * mp4 long enough for the ranges to seek (> 10 s in), on an mp3 whose
 * container claims more than it holds (the plan pads the end with silence), on
 * a webm whose audio outlasts its video (the container's end is the audio's, so
 * the plan repeats the last frame and pads silence) and on a webm whose
 * container claims a little less than it holds (the plan drops the tail).
 * With one special token and with two (class and distillation: a rank whose
 * slice starts at 1 gets the distillation token alone), and with AST's audio
 * patches (16 x 16, 10 frames and 10 bins apart: neighbouring patches share
 * fbank frames across rank boundaries) over 10.24 s and 25 s of audio and
 * beside video. With attention blocks (rv_tokens.h): frame windows and time
 * windows, each led by its special tokens and cut from the recording (its
 * own tubelets, fbank frames and audio steps, positions from 0): a rank
 * whose slice starts inside a window gets the whole pass's tokens there, the
 * special tokens of the later windows it reaches included, and each token's
 * window index; the same where the plan pads the end with the last frame, and
 * for AST's 10.24 s blocks over 25 s of audio. */
#include "ingest_media.h"
#include "tokenize_collect.h"

#include "rv_tokenize.h"

const media_recipe rv_test_media[] = {
    {"long.mp4", "-f lavfi -i testsrc2=size=64x48:rate=30 -f lavfi -i "
                 "anoisesrc=sample_rate=44100:amplitude=0.3:seed=3 -t 13 -c:v libx264 -g 30 "
                 "-pix_fmt yuv420p -c:a aac", NULL},
    {"tone.mp3", "-f lavfi -i sine=frequency=523:sample_rate=44100 -t 5.3 -c:a libmp3lame", NULL},
    {"clip.webm", "-f lavfi -i testsrc2=size=64x48:rate=25 -f lavfi -i "
                  "sine=frequency=440:sample_rate=48000 -t 3.3 -c:v libvpx -b:v 200k -c:a libopus",
     NULL},
    {"pad.webm", "-f lavfi -i testsrc2=size=64x48:rate=25:duration=3 -f lavfi -i "
                 "sine=frequency=440:sample_rate=48000:duration=3.6 -c:v libvpx -b:v 200k "
                 "-c:a libopus", NULL},
    /* AST's clip length, 163840 samples at 16 kHz; and 25 s, compressed (seeks
     * land on frame boundaries, and decoding needs the frames before) */
    {"ast.wav", "-f lavfi -i anoisesrc=sample_rate=16000:amplitude=0.3:seed=5 -t 10.24 "
                "-c:a pcm_s16le", NULL},
    {"ast25.m4a", "-f lavfi -i sine=frequency=300:beep_factor=4:sample_rate=16000 -f lavfi -i "
                  "anoisesrc=sample_rate=16000:amplitude=0.1:seed=9 -filter_complex amix=inputs=2 "
                  "-t 25 -c:a aac", NULL},
    {NULL, NULL, NULL},
};

typedef struct rcase {
    const char *media;
    int fps;
    double window;
    int cls;      /* special tokens: 0, 1 or 2 */
    int no_audio;
    int ast;      /* AST's audio patches (else the defaults) */
    int no_video;
    int blocks;   /* 0 plain windows; 1 time blocks of `window` s, 2 frame blocks
                     (both with cls_each_window and window_positions: cut from
                     the recording) */
} rcase;

static void make_plan(const char *path, const rcase *c, rv_tok_layout *plan)
{
    rv_ingest_opts io;
    rv_tok_opts to;
    rv_ingest_opts_default(&io);
    io.fps_num = c->fps;
    io.size = 32;
    io.chunk_frames = 4;
    rv_tok_opts_default(&to);
    to.window_s = c->window;
    to.cls = c->cls;
    if (c->no_audio) {
        io.audio_stream = -2;
        to.audio = 0;
    }
    if (c->no_video) {
        io.video_stream = -2;
        to.video = 0;
    }
    if (c->ast) {
        to.audio_freq = to.audio_time = 16;
        to.audio_stride = to.audio_fstride = 10;
    }
    if (c->blocks) {
        to.frame_windows = c->blocks == 2;
        to.cls_each_window = 1;
        to.window_positions = 1;
    }
    rv_probe *p = NULL;
    cr_assert_eq(rv_probe_file(path, &p), RV_OK, "%s", rv_last_error());
    cr_assert_eq(rv_tok_layout_from_probe(p, &to, &io, plan, NULL), RV_OK, "%s", rv_last_error());
    rv_probe_free(&p);
}

/* want_pad: 1 the plan must pad samples, 2 frames; want_drop: it must drop. */
static void check_ranks(const rcase *c, const int *ns, int nn, int want_pad, int want_drop)
{
    char *path = media(c->media);
    rv_tok_layout plan;
    make_plan(path, c, &plan);
    tok_table whole;
    rv_tok_stats st;
    tt_init(&whole, plan.seq, plan.video_dim, plan.audio_dim, plan.fbank_frames);
    cr_assert_eq(rv_tokenize_range(path, &plan, 0, plan.seq, tt_collect, &whole, &st), RV_OK,
                 "%s: %s", path, rv_last_error());
    cr_assert_eq(st.tokens, plan.seq);
    if (want_pad)
        cr_assert_gt(want_pad == 2 ? st.padded_frames : st.padded_samples, 0,
                     "%s: expected the plan to pad %s", path, want_pad == 2 ? "frames" : "samples");
    if (want_drop)
        cr_assert_gt(st.dropped_frames + st.dropped_samples, 0, "%s: expected the plan to drop", path);
    cr_log_info("%s: plan %lld frames %lld samples, %lld tokens; padded %lld frames %lld samples, "
                "dropped %lld frames %lld samples", c->media, (long long)plan.nframes,
                (long long)plan.nsamples, (long long)plan.seq, (long long)st.padded_frames,
                (long long)st.padded_samples, (long long)st.dropped_frames,
                (long long)st.dropped_samples);
    char why[256];
    for (int kind = 0; kind < 2; kind++)
        for (int ni = 0; ni < nn; ni++) {
            rv_shard_plan sp;
            cr_assert_eq(rv_tok_shard_plan(&plan, (rv_shard_kind)kind, ns[ni], &sp), RV_OK);
            tok_table ranks;
            tt_init(&ranks, plan.seq, plan.video_dim, plan.audio_dim, plan.fbank_frames);
            int seeked = 0;
            int64_t cls_tokens = 0;
            for (int r = 0; r < ns[ni]; r++) {
                rv_tok_stats rs;
                rv_status s = rv_tokenize_rank(path, &plan, &sp, r, tt_collect, &ranks, &rs);
                cr_assert_eq(s, RV_OK, "%s %s N=%d rank %d: %s", c->media,
                             rv_shard_kind_name((rv_shard_kind)kind), ns[ni], r, rv_last_error());
                cr_assert_eq(rs.tokens, rv_shard_len(&sp, r));
                cls_tokens += rs.cls_tokens;
                seeked += rs.ingest.seeked;
            }
            for (int64_t g = 0; g < plan.seq; g++) {
                cr_assert_eq(ranks.have[g], 1, "%s %s N=%d: token %lld made %d times", c->media,
                             rv_shard_kind_name((rv_shard_kind)kind), ns[ni], (long long)g,
                             ranks.have[g]);
                cr_assert(tt_same_token(&whole, &ranks, g, why, sizeof why),
                          "%s %s N=%d: token %lld differs from the whole pass: %s", c->media,
                          rv_shard_kind_name((rv_shard_kind)kind), ns[ni], (long long)g, why);
            }
            cr_assert_eq(cls_tokens, plan.nspecial, "%s N=%d: %lld special tokens over the ranks",
                         c->media, ns[ni], (long long)cls_tokens);
            for (int i = 0; i < c->cls; i++)
                cr_assert(ranks.mod[i] == RV_MOD_CLS && ranks.pos[3 * i] == i,
                          "%s N=%d: token %d is not special token %d", c->media, ns[ni], i, i);
            /* the fbank rows the ranks computed are the whole pass's */
            for (int64_t f = 0; f < plan.fbank_frames; f++)
                if (ranks.fb_have[f])
                    cr_assert_arr_eq(ranks.fbank + f * 128, whole.fbank + f * 128,
                                     128 * sizeof(float), "%s N=%d: fbank frame %lld", c->media,
                                     ns[ni], (long long)f);
            cr_log_info("%s %s N=%d: %lld tokens equal, %d range passes seeked", c->media,
                        rv_shard_kind_name((rv_shard_kind)kind), ns[ni], (long long)plan.seq,
                        seeked);
            tt_free(&ranks);
        }
    /* slices through the special tokens: [1, 2) is the distillation token alone */
    const int64_t cuts[][2] = {{0, 1}, {1, 1}, {1, 40}};
    for (int k = 0; c->cls == 2 && k < 3; k++) {
        tok_table part;
        tt_init(&part, plan.seq, plan.video_dim, plan.audio_dim, plan.fbank_frames);
        rv_tok_stats ps;
        cr_assert_eq(rv_tokenize_range(path, &plan, cuts[k][0], cuts[k][1], tt_collect, &part, &ps),
                     RV_OK, "%s", rv_last_error());
        rv_tok_span span;
        cr_assert_eq(rv_tok_span_of(&plan, cuts[k][0], cuts[k][1], &span), RV_OK);
        cr_assert_eq(ps.cls_tokens, span.cls);
        if (!c->blocks)
            cr_assert_eq(ps.cls_tokens, 1); /* each slice holds one of the two */
        for (int64_t g = 0; g < plan.seq; g++) {
            int in = g >= cuts[k][0] && g < cuts[k][0] + cuts[k][1];
            cr_assert_eq(part.have[g], in, "%s: slice [%lld, +%lld): token %lld handed out %d times",
                         c->media, (long long)cuts[k][0], (long long)cuts[k][1], (long long)g,
                         part.have[g]);
            if (in)
                cr_assert(tt_same_token(&whole, &part, g, why, sizeof why), "%s: slice [%lld, "
                          "+%lld): token %lld: %s", c->media, (long long)cuts[k][0],
                          (long long)cuts[k][1], (long long)g, why);
        }
        tt_free(&part);
    }
    tt_free(&whole);
    free(path);
}

static const int ALL_N[] = {1, 2, 3, 4, 7};

Test(range, mp4_seeking_ranks_equal_whole)
{
    rcase c = {"long.mp4", 5, 1.0, 1, 0, 0, 0, 0};
    check_ranks(&c, ALL_N, 5, 0, 0);
}

/* Class and distillation tokens, AST's audio patches beside the video. */
Test(range, mp4_dist_ast_ranks_equal_whole)
{
    rcase c = {"long.mp4", 5, 1.0, 2, 0, 1, 0, 0};
    check_ranks(&c, ALL_N, 5, 0, 0);
}

/* AST's input: 10.24 s -> 1022 fbank frames -> 101 time steps x 12 bands. */
Test(range, ast_10s_ranks_equal_whole)
{
    rcase c = {"ast.wav", 1, 2.0, 2, 0, 1, 1, 0};
    char *path = media(c.media);
    rv_tok_layout plan;
    make_plan(path, &c, &plan);
    cr_assert_eq(plan.nsamples, 163840);
    cr_assert_eq(plan.fbank_frames, 1022);
    cr_assert_eq(plan.steps, 101);
    cr_assert_eq(plan.bands, 12);
    cr_assert_eq(plan.seq, 2 + 101 * 12);
    free(path);
    check_ranks(&c, ALL_N, 5, 0, 0);
}

/* 25 s of compressed audio at 7 fps (grid edges inside fbank frames), one
 * class token and odd windows. */
Test(range, ast_25s_ranks_equal_whole)
{
    rcase c = {"ast25.m4a", 7, 0.35, 1, 0, 1, 1, 0};
    char *path = media(c.media);
    rv_tok_layout plan;
    make_plan(path, &c, &plan);
    cr_assert_eq(plan.nsamples, 400000);
    cr_assert_eq(plan.fbank_frames, 2498);
    cr_assert_eq(plan.steps, 249);
    cr_assert_eq(plan.seq, 1 + 249 * 12);
    free(path);
    check_ranks(&c, ALL_N, 5, 0, 0);
}

/* Odd windows (not a multiple of the frame or fbank step) and one frame per
 * second: windows without video, tubelets across window edges. */
Test(range, mp4_odd_windows)
{
    rcase c = {"long.mp4", 1, 0.35, 0, 0, 0, 0, 0};
    const int ns[] = {3, 7};
    check_ranks(&c, ns, 2, 0, 0);
}

Test(range, mp3_plan_pads_end)
{
    rcase c = {"tone.mp3", 2, 1.0, 0, 0, 0, 0, 0};
    check_ranks(&c, ALL_N, 5, 1, 0);
}

Test(range, webm_plan_drops_tail)
{
    rcase c = {"clip.webm", 7, 0.5, 1, 0, 0, 0, 0};
    const int ns[] = {3, 7};
    check_ranks(&c, ns, 2, 0, 1);
}

/* The plan has 0.6 s more than the recording: the ranks near the end repeat
 * the last real frame, which they read from before their own range. */
Test(range, webm_plan_pads_frames)
{
    rcase c = {"pad.webm", 7, 0.5, 0, 0, 0, 0, 0};
    const int ns[] = {2, 3, 7};
    check_ranks(&c, ns, 3, 2, 0);
    /* without audio, only the frames tell the ranks where the end is */
    rcase v = {"pad.webm", 7, 0.5, 0, 1, 0, 0, 0};
    const int n7[] = {7};
    check_ranks(&v, n7, 1, 2, 0);
}

/* Frame blocks (0.4 s: a tubelet and the 2 audio patches its 6400 samples
 * make), class and distillation tokens leading each: slices start inside
 * windows everywhere. */
Test(range, mp4_frame_blocks_ranks_equal_whole)
{
    rcase c = {"long.mp4", 5, 1.0, 2, 0, 0, 0, 2};
    char *path = media(c.media);
    rv_tok_layout plan;
    make_plan(path, &c, &plan);
    cr_assert_eq(plan.windows, plan.tubelets);
    cr_assert_eq(plan.nspecial, 2 * plan.windows);
    int64_t g0, g1, p0, p1;
    rv_tok_window_items(&plan, 1, &g0, &g1, &p0, &p1);
    cr_assert(g1 - g0 == 1 && p1 - p0 == 2, "frame block 1: %lld tubelets, %lld steps",
              (long long)(g1 - g0), (long long)(p1 - p0));
    free(path);
    check_ranks(&c, ALL_N, 5, 0, 0);
}

/* Time blocks of 0.35 s (not a multiple of the frame or fbank step: 1 or 2
 * frames, 5600 samples) with AST's overlapping audio patches, a class token
 * leading each. */
Test(range, mp4_time_blocks_ast_ranks_equal_whole)
{
    rcase c = {"long.mp4", 5, 0.35, 1, 0, 1, 0, 1};
    check_ranks(&c, ALL_N, 5, 0, 0);
}

/* AST's 10.24 s blocks over 25 s of compressed audio (as `embed --attention
 * block=10.24` with an AST model): 101, 101 and 44 steps of 12 bands, each block
 * led by its class and distillation tokens; ranks cut through blocks. */
Test(range, ast_25s_blocks_ranks_equal_whole)
{
    rcase c = {"ast25.m4a", 7, 10.24, 2, 0, 1, 1, 1};
    char *path = media(c.media);
    rv_tok_layout plan;
    make_plan(path, &c, &plan);
    cr_assert_eq(plan.nsamples, 400000);
    cr_assert_eq(plan.windows, 3);
    cr_assert_eq(plan.fbank_frames, 1022 + 1022 + 450);
    cr_assert_eq(plan.steps, 101 + 101 + 44);
    cr_assert_eq(plan.seq, 3 * 2 + 246 * 12);
    free(path);
    check_ranks(&c, ALL_N, 5, 0, 0);
}

/* The plan pads 0.6 s of frames: the last blocks' tubelets repeat the last real
 * frame on every rank that holds them. */
Test(range, webm_frame_blocks_pad_frames)
{
    rcase c = {"pad.webm", 7, 0.5, 1, 0, 0, 0, 2};
    const int ns[] = {3, 7};
    check_ranks(&c, ns, 2, 2, 0);
}
