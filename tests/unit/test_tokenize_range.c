/* test_tokenize_range.c: each rank tokenizing only its own part of the planned
 * sequence (rv_tokenize_rank: the grid range its tokens read, ingested with
 * the range API, which seeks) gets exactly the tokens the whole planned pass
 * gives at those positions, bit for bit, for N in {1, 2, 3, 4, 7} ranks under
 * contiguous and zigzag plans; every token lands on exactly one rank. On an
 * mp4 long enough for the ranges to seek (> 10 s in), on an mp3 whose
 * container claims more than it holds (the plan pads the end with silence), on
 * a webm whose audio outlasts its video (the container's end is the audio's, so
 * the plan repeats the last frame and pads silence) and on a webm whose
 * container claims a little less than it holds (the plan drops the tail). */
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
    {NULL, NULL, NULL},
};

typedef struct rcase {
    const char *media;
    int fps;
    double window;
    int cls;
    int no_audio;
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
            for (int r = 0; r < ns[ni]; r++) {
                rv_tok_stats rs;
                rv_status s = rv_tokenize_rank(path, &plan, &sp, r, tt_collect, &ranks, &rs);
                cr_assert_eq(s, RV_OK, "%s %s N=%d rank %d: %s", c->media,
                             rv_shard_kind_name((rv_shard_kind)kind), ns[ni], r, rv_last_error());
                cr_assert_eq(rs.tokens, rv_shard_len(&sp, r));
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
    tt_free(&whole);
    free(path);
}

static const int ALL_N[] = {1, 2, 3, 4, 7};

Test(range, mp4_seeking_ranks_equal_whole)
{
    rcase c = {"long.mp4", 5, 1.0, 1, 0};
    check_ranks(&c, ALL_N, 5, 0, 0);
}

/* Odd windows (not a multiple of the frame or fbank step) and one frame per
 * second: windows without video, tubelets across window edges. */
Test(range, mp4_odd_windows)
{
    rcase c = {"long.mp4", 1, 0.35, 0, 0};
    const int ns[] = {3, 7};
    check_ranks(&c, ns, 2, 0, 0);
}

Test(range, mp3_plan_pads_end)
{
    rcase c = {"tone.mp3", 2, 1.0, 0, 0};
    check_ranks(&c, ALL_N, 5, 1, 0);
}

Test(range, webm_plan_drops_tail)
{
    rcase c = {"clip.webm", 7, 0.5, 1, 0};
    const int ns[] = {3, 7};
    check_ranks(&c, ns, 2, 0, 1);
}

/* The plan has 0.6 s more than the recording: the ranks near the end repeat
 * the last real frame, which they read from before their own range. */
Test(range, webm_plan_pads_frames)
{
    rcase c = {"pad.webm", 7, 0.5, 0, 0};
    const int ns[] = {2, 3, 7};
    check_ranks(&c, ns, 3, 2, 0);
    /* without audio, only the frames tell the ranks where the end is */
    rcase v = {"pad.webm", 7, 0.5, 0, 1};
    const int n7[] = {7};
    check_ranks(&v, n7, 1, 2, 0);
}
