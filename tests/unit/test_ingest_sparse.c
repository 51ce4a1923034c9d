/* test_ingest_sparse.c: the sparse fast path (non-reference frames left
 * undecoded, GOP stretches skipped, seeking for a late start) gives byte for byte
 * what decoding every frame gives, on closed-GOP H.264 with B-frames, open-GOP
 * HEVC, VP9 and a variable-frame-rate file, at rates from one frame in 3 s to 7
 * frames/s; and that it does skip work. The range API (a rank's own part) matches
 * the same slice of a whole run. */
#include "ingest_media.h"

/* A part reached by seeking against the whole run: the RMS of the audio's
 * difference relative to the whole run's RMS over the same samples (the AAC
 * decoder's warm-up after a seek falls in the seek margin; what is left is the
 * restarted decoder's and resampler's first frames' rounding). Parts reached
 * without seeking are compared exactly. */
#define TOL_SEEK_RMS 1e-3

#define TONE "-f lavfi -i sine=frequency=440:sample_rate=48000"

const media_recipe rv_test_media[] = {
    {"h264.mp4", "-f lavfi -i testsrc2=size=160x90:rate=30 " TONE
                 " -t 24 -c:v libx264 -bf 3 -g 30 -c:a aac", NULL},
    {"hevc_open.mkv", "-f lavfi -i testsrc2=size=160x90:rate=30 -t 16 -c:v libx265 "
                      "-x265-params log-level=none:bframes=3:keyint=30:min-keyint=30:open-gop=1",
     NULL},
    {"vp9.webm", "-f lavfi -i testsrc2=size=160x90:rate=30 -t 16 -c:v libvpx-vp9 "
                 "-deadline realtime -cpu-used 8 -g 30", NULL},
    {"vfr.mp4", "-f lavfi -i testsrc2=size=160x90:rate=30 -vf "
                "\"select='lt(mod(n\\,7)\\,3)+lt(n\\,5)',setpts='PTS+mod(N\\,3)*0.004/TB'\" "
                "-fps_mode vfr -t 16 -c:v libx264 -bf 3 -g 24 -video_track_timescale 1000",
     NULL},
    {NULL, NULL, NULL},
};

static void expect_same(const rv_ingest_result *a, const rv_ingest_result *b, const char *what)
{
    cr_assert_eq(a->nframes, b->nframes, "%s: %lld frames, decode-all %lld", what,
                 (long long)a->nframes, (long long)b->nframes);
    size_t fsize = (size_t)a->size * a->size * 3;
    for (int64_t k = 0; k < a->nframes; k++) {
        cr_assert_eq(a->frame_time[k], b->frame_time[k], "%s: frame %lld time", what, (long long)k);
        cr_assert_eq(a->source_time[k], b->source_time[k],
                     "%s: frame %lld comes from %.6f s, decode-all from %.6f s", what,
                     (long long)k, a->source_time[k], b->source_time[k]);
        cr_assert(memcmp(a->frames + k * fsize, b->frames + k * fsize, fsize) == 0,
                  "%s: frame %lld differs from decode-all", what, (long long)k);
    }
    cr_assert_eq(a->nsamples, b->nsamples, "%s: audio length", what);
    cr_assert(a->nsamples == 0 ||
                  memcmp(a->audio, b->audio, sizeof(float) * (size_t)a->nsamples) == 0,
              "%s: audio differs from decode-all", what);
}

/* Sparse and decode-all runs at each rate; returns the sparse stats of the last. */
static void compare_rates(const char *name, const int (*rates)[2], int n, double start,
                          rv_ingest_stats *last)
{
    char *p = media(name);
    for (int i = 0; i < n; i++) {
        rv_ingest_opts o = opts_fps(rates[i][0], rates[i][1], 32);
        o.start_s = start;
        rv_ingest_result *fast = ingest_ok(p, &o);
        o.decode_all = 1;
        rv_ingest_result *all = ingest_ok(p, &o);
        char what[256];
        snprintf(what, sizeof what, "%s at %d/%d fps from %.2f s", name, rates[i][0],
                 rates[i][1], start);
        expect_same(fast, all, what);
        cr_expect_leq(fast->stats.decoded_frames, all->stats.decoded_frames, "%s", what);
        if (last)
            *last = fast->stats;
        rv_ingest_result_free(&fast);
        rv_ingest_result_free(&all);
    }
    free(p);
}

static const int rates[][2] = {{1, 3}, {1, 1}, {5, 2}, {7, 1}};

Test(ingest_sparse, h264_closed_gop)
{
    rv_ingest_stats s;
    compare_rates("h264.mp4", rates, 4, 0.0, &s);
    /* At 1 frame/s with 1 s GOPs most packets need no decoding. */
    compare_rates("h264.mp4", (const int[][2]){{1, 1}}, 1, 0.0, &s);
    cr_expect_gt(s.skipped_packets, 200, "skipped %lld packets", (long long)s.skipped_packets);
    cr_expect_lt(s.decoded_frames, 720 / 2, "decoded %lld of 720 frames",
                 (long long)s.decoded_frames);
    cr_expect_eq(s.converted_frames, s.frames);
}

Test(ingest_sparse, hevc_open_gop) { compare_rates("hevc_open.mkv", rates, 4, 0.0, NULL); }
Test(ingest_sparse, vp9) { compare_rates("vp9.webm", rates, 4, 0.0, NULL); }
Test(ingest_sparse, vfr) { compare_rates("vfr.mp4", rates, 4, 0.0, NULL); }

Test(ingest_sparse, late_start_seeks)
{
    rv_ingest_stats s;
    compare_rates("h264.mp4", (const int[][2]){{2, 1}, {30, 1}}, 2, 13.37, &s);
    cr_expect(s.seeked, "a start 13 s in should seek");
    compare_rates("hevc_open.mkv", (const int[][2]){{2, 1}}, 1, 11.5, &s);
    compare_rates("vfr.mp4", (const int[][2]){{3, 1}}, 1, 12.01, &s);
}

/* A rank's part through rv_ingest_range: the same frames as that slice of a whole
 * run; the same audio length and samples: identical when reached without seeking,
 * within a relative RMS (TOL_SEEK_RMS) when the audio decoder restarted at a seek point (its warm-up
 * falls in the seek margin, the resampler restarts on the whole run's grid). */
typedef struct part {
    rv_ingest_result *r;
} part;

static rv_status append_part(const rv_ingest_chunk *c, void *user)
{
    rv_ingest_result *r = user;
    size_t fsize = (size_t)c->size * c->size * 3;
    if (r->nframes == 0 && r->nsamples == 0)
        r->first_sample = c->first_sample;
    if (c->nframes) {
        r->frames = realloc(r->frames, fsize * (size_t)(r->nframes + c->nframes));
        r->frame_time = realloc(r->frame_time, sizeof(double) * (size_t)(r->nframes + c->nframes));
        memcpy(r->frames + fsize * (size_t)r->nframes, c->frames, fsize * (size_t)c->nframes);
        memcpy(r->frame_time + r->nframes, c->frame_time, sizeof(double) * (size_t)c->nframes);
        r->nframes += c->nframes;
    }
    if (c->nsamples) {
        r->audio = realloc(r->audio, sizeof(float) * (size_t)(r->nsamples + c->nsamples));
        memcpy(r->audio + r->nsamples, c->audio, sizeof(float) * (size_t)c->nsamples);
        r->nsamples += c->nsamples;
    }
    return RV_OK;
}

Test(ingest_sparse, range_parts_match_whole_run)
{
    char *p = media("h264.mp4");
    rv_ingest_opts o = opts_fps(5, 2, 32);
    o.chunk_frames = 7;
    rv_ingest_result *whole = ingest_ok(p, &o);
    cr_assert_eq(whole->nframes, 60);
    const int64_t parts[][2] = {{0, 13}, {13, 20}, {33, 27}, {50, 1000}};
    size_t fsize = 32 * 32 * 3;
    for (int i = 0; i < 4; i++) {
        rv_ingest_result part = {0};
        part.size = 32;
        rv_ingest_stats st;
        rv_status s = rv_ingest_range(p, &o, parts[i][0], parts[i][1], append_part, &part, &st);
        cr_assert_eq(s, RV_OK, "%s", rv_last_error());
        int64_t k0 = parts[i][0];
        int64_t n = parts[i][1] < whole->nframes - k0 ? parts[i][1] : whole->nframes - k0;
        cr_assert_eq(part.nframes, n, "part %d: %lld frames, want %lld", i,
                     (long long)part.nframes, (long long)n);
        cr_assert(memcmp(part.frames, whole->frames + fsize * k0, fsize * (size_t)n) == 0,
                  "part %d: frames differ from the whole run", i);
        for (int64_t k = 0; k < n; k++)
            cr_assert_eq(part.frame_time[k], whole->frame_time[k0 + k]);
        int64_t j0 = rv_ingest_audio_index(&o, k0);
        int64_t j1 = k0 + n >= whole->nframes ? whole->nsamples
                                               : rv_ingest_audio_index(&o, k0 + n);
        cr_assert_eq(part.first_sample, j0);
        cr_assert_eq(part.nsamples, j1 - j0, "part %d: %lld samples, want %lld", i,
                     (long long)part.nsamples, (long long)(j1 - j0));
        double se = 0, sw = 0;
        for (int64_t j = 0; j < part.nsamples; j++) {
            double d = part.audio[j] - whole->audio[j0 + j];
            se += d * d;
            sw += (double)whole->audio[j0 + j] * whole->audio[j0 + j];
        }
        double rms = se > 0 ? sqrt(se / (sw > 0 ? sw : 1e-300)) : 0; /* relative */
        printf("ingest_sparse: part %d (from frame %lld): audio RMS %.3g of the whole run's "
               "RMS %.3g%s\n", i, (long long)k0, rms,
               part.nsamples ? sqrt(sw / (double)part.nsamples) : 0.0,
               st.seeked ? ", video seeked" : "");
        cr_expect_leq(rms, TOL_SEEK_RMS, "part %d: audio RMS %.3g of the whole run's", i, rms);
        if (j0 < 10 * 16000) /* reached without seeking: identical */
            cr_expect_eq(rms, 0.0, "part %d: audio RMS %.3g from the whole run", i, rms);
        free(part.frames);
        free(part.frame_time);
        free(part.audio);
    }
    rv_ingest_result_free(&whole);
    free(p);
}
