/* test_ingest_golden.c: ingest against the peer reference (tests/peer/ingest_golden.py:
 * PyAV decoding of every frame, numpy rotation and crop, the ffmpeg command's
 * audio) on the media list of the ingest work: H.264 with B-frames, HEVC, VP9 in
 * WebM, AV1, MPEG-4 part 2 in Matroska, MOV with PCM audio, a variable-frame-rate
 * file, rotated files, 48 kHz 5.1 audio, audio only, video only, audio that starts
 * before the video (negative container start); plus start/duration, padding and
 * the probe. Frames within a level's mean absolute difference, times exact, audio
 * within a relative RMS (ingest_media.h states them). And times on the container's clock against ffprobe: an MPEG-TS
 * file whose video starts after 1.4 s of audio (as tests/cli/test_timeline.sh
 * makes one) hands out its chunks' times at ffprobe's pts. */
#include "ingest_media.h"

/* Times in seconds computed two ways in double (the library's t0 plus offsets,
 * ffprobe's pts / 90000): a few roundings of values of a few seconds, so relative
 * to the time (floored at 1 s, the scale of these recordings: a time of 0 is
 * matched within 1e-12 s); double epsilon is 2.2e-16. */
#define TOL_TIME 1e-12
#define TIME_TOL(t) (TOL_TIME * fmax(fabs(t), 1.0))
/* The probe's container duration of a 4 s clip against 4 s: the AAC encoder's
 * priming and padding, a frame or two of 1024 samples at 48 kHz (21 ms each). */
#define TOL_DURATION (0.05 / 4.0)

#define TONE(f, r) "-f lavfi -i sine=frequency=" #f ":sample_rate=" #r

const media_recipe rv_test_media[] = {
    {"h264.mp4", "-f lavfi -i testsrc2=size=320x180:rate=30 " TONE(440, 48000)
                 " -t 4 -c:v libx264 -bf 3 -g 30 -pix_fmt yuv420p -c:a aac", NULL},
    {"hevc.mp4", "-f lavfi -i testsrc2=size=320x180:rate=30 -t 3 -c:v libx265 "
                 "-x265-params log-level=none:bframes=3:keyint=30 -pix_fmt yuv420p "
                 "-colorspace bt709 -color_primaries bt709 -color_trc bt709", NULL},
    {"vp9.webm", "-f lavfi -i testsrc2=size=320x180:rate=30 " TONE(300, 48000)
                 " -t 3 -c:v libvpx-vp9 -deadline realtime -cpu-used 8 -c:a libopus", NULL},
    {"av1.mkv", "-f lavfi -i testsrc2=size=320x180:rate=30 -t 2 -c:v libaom-av1 "
                "-usage realtime -cpu-used 8", NULL},
    {"mpeg4.mkv", "-f lavfi -i testsrc2=size=320x180:rate=30 -t 3 -c:v mpeg4 -bf 2 -q:v 5",
     NULL},
    {"pcm.mov", "-f lavfi -i testsrc2=size=320x180:rate=24 " TONE(500, 44100)
                " -t 3 -c:v libx264 -bf 2 -c:a pcm_s16le", NULL},
    /* Frames dropped in a pattern (gaps of 5) and jittered by 0, 4, 8 ms. */
    {"vfr.mp4", "-f lavfi -i testsrc2=size=320x180:rate=30 -vf "
                "\"select='lt(mod(n\\,7)\\,3)+lt(n\\,5)',setpts='PTS+mod(N\\,3)*0.004/TB'\" "
                "-fps_mode vfr -t 4 -c:v libx264 -bf 3 -g 24 -video_track_timescale 1000", NULL},
    /* The tag is the counter-clockwise angle ffprobe reports: 270 shows 90 clockwise. */
    {"rot90.mp4", "-i {DIR}/h264.mp4 -c copy -metadata:s:v:0 rotate=270", "h264.mp4"},
    {"rot180.mp4", "-i {DIR}/h264.mp4 -c copy -metadata:s:v:0 rotate=180", "h264.mp4"},
    {"rot270.mp4", "-i {DIR}/h264.mp4 -c copy -metadata:s:v:0 rotate=90", "h264.mp4"},
    {"surround.mp4", "-f lavfi -i testsrc2=size=160x90:rate=25 -f lavfi -i "
                     "\"aevalsrc=0.1*sin(2*PI*220*t)|0.1*sin(2*PI*330*t)|0.1*sin(2*PI*440*t)|"
                     "0.05*sin(2*PI*60*t)|0.1*sin(2*PI*550*t)|0.1*sin(2*PI*660*t):s=48000:c=5.1\" "
                     "-t 3 -c:v libx264 -c:a aac", NULL},
    {"audio.m4a", TONE(700, 22050) " -t 3 -c:a aac", NULL},
    /* Audio from -1.2 s, video from 0: the container starts at a negative time. */
    {"negaudio.mkv", "-f lavfi -i testsrc2=size=160x90:rate=30 " TONE(440, 48000)
                     " -t 3 -vf setpts=PTS-1.5/TB -af asetpts=PTS-1.2/TB -c:v libx264 -bf 3 "
                     "-c:a aac -avoid_negative_ts disabled", NULL},
    /* Audio from 0, video from about 1.4 s (90 kHz pts). */
    {"pre.ts", TONE(440, 44100) ":duration=5 -itsoffset 1.4 -f lavfi -i "
               "testsrc2=size=64x64:rate=25:duration=3 -map 1:v -map 0:a -c:v mpeg2video -bf 0 "
               "-c:a mp2 -muxdelay 0 -muxpreload 0 -f mpegts", NULL},
    {NULL, NULL, NULL},
};

static void check(const char *name, int num, int den, int size, const char *tag)
{
    char *p = media(name);
    rv_ingest_opts o = opts_fps(num, den, size);
    expect_golden(p, &o, tag);
    free(p);
}

Test(ingest_golden, h264_bframes_at_source_rate) { check("h264.mp4", 30, 1, 64, "h264-30"); }
Test(ingest_golden, h264_bframes_fractional_rate) { check("h264.mp4", 7, 2, 64, "h264-3.5"); }
Test(ingest_golden, h264_one_fps_224) { check("h264.mp4", 1, 1, 224, "h264-1"); }
Test(ingest_golden, hevc_bt709) { check("hevc.mp4", 5, 1, 64, "hevc"); }
Test(ingest_golden, vp9_webm_opus) { check("vp9.webm", 5, 1, 64, "vp9"); }
Test(ingest_golden, av1) { check("av1.mkv", 5, 1, 64, "av1"); }
Test(ingest_golden, mpeg4_mkv) { check("mpeg4.mkv", 5, 1, 64, "mpeg4"); }
Test(ingest_golden, mov_pcm_dense) { check("pcm.mov", 24, 1, 64, "pcm"); }
Test(ingest_golden, vfr_dense) { check("vfr.mp4", 30, 1, 64, "vfr-30"); }
Test(ingest_golden, vfr_sparse) { check("vfr.mp4", 73, 10, 64, "vfr-7.3"); }
Test(ingest_golden, rotated_90) { check("rot90.mp4", 5, 1, 64, "rot90"); }
Test(ingest_golden, rotated_180) { check("rot180.mp4", 5, 1, 48, "rot180"); }
Test(ingest_golden, rotated_270) { check("rot270.mp4", 5, 1, 48, "rot270"); }
Test(ingest_golden, surround_48k_51) { check("surround.mp4", 2, 1, 32, "surround"); }
Test(ingest_golden, negative_audio_start) { check("negaudio.mkv", 10, 1, 32, "negaudio"); }

Test(ingest_golden, audio_only)
{
    char *p = media("audio.m4a");
    rv_ingest_opts o = opts_fps(1, 1, 32);
    o.chunk_frames = 1; /* audio chunks of one second */
    expect_golden(p, &o, "audio");
    rv_ingest_result *r = ingest_ok(p, &o);
    cr_expect_eq(r->nframes, 0);
    cr_expect_eq(r->stats.video_stream, -1);
    cr_expect_geq(r->nsamples, 3 * 16000 - 1);
    rv_ingest_result_free(&r);
    free(p);
}

Test(ingest_golden, video_only_has_no_audio)
{
    char *p = media("hevc.mp4");
    rv_ingest_opts o = opts_fps(2, 1, 32);
    rv_ingest_result *r = ingest_ok(p, &o);
    cr_expect_eq(r->nframes, 6);
    cr_expect_eq(r->nsamples, 0);
    cr_expect_eq(r->stats.audio_stream, -1);
    rv_ingest_result_free(&r);
    free(p);
}

Test(ingest_golden, start_and_duration)
{
    char *p = media("h264.mp4");
    rv_ingest_opts o = opts_fps(5, 1, 48);
    o.start_s = 1.3;
    o.duration_s = 2.0;
    expect_golden(p, &o, "h264-range");
    rv_ingest_result *r = ingest_ok(p, &o);
    cr_expect_eq(r->nframes, 10);
    cr_expect_eq(r->nsamples, 32000);
    cr_expect_eq(r->frame_time[0], 1.3);
    rv_ingest_result_free(&r);
    free(p);
}

Test(ingest_golden, pad_rotated)
{
    char *p = media("rot90.mp4");
    rv_ingest_opts o = opts_fps(5, 1, 64);
    o.pad = 1;
    expect_golden(p, &o, "rot90-pad");
    /* Portrait after the turn: black bars left and right, picture in the middle. */
    rv_ingest_result *r = ingest_ok(p, &o);
    cr_assert_gt(r->nframes, 0);
    const uint8_t *f = r->frames;
    int left = 0, mid = 0;
    for (int y = 0; y < 64; y++) {
        left += f[(y * 64 + 2) * 3] + f[(y * 64 + 2) * 3 + 1] + f[(y * 64 + 2) * 3 + 2];
        mid += f[(y * 64 + 32) * 3] + f[(y * 64 + 32) * 3 + 1] + f[(y * 64 + 32) * 3 + 2];
    }
    cr_expect_eq(left, 0, "letterbox bars should be black");
    cr_expect_gt(mid, 0);
    rv_ingest_result_free(&r);
    free(p);
}

Test(ingest_golden, no_audio_option)
{
    char *p = media("h264.mp4");
    rv_ingest_opts o = opts_fps(2, 1, 32);
    o.audio_stream = -2;
    expect_golden(p, &o, "h264-noaudio");
    free(p);
}

Test(ingest_golden, probe_fields)
{
    char *p = media("rot90.mp4");
    rv_probe *pr = NULL;
    cr_assert_eq(rv_probe_file(p, &pr), RV_OK, "%s", rv_last_error());
    cr_expect_eq(pr->nstreams, 2);
    cr_expect_eq(pr->video, 0);
    cr_expect_eq(pr->audio, 1);
    const rv_probe_stream *v = &pr->streams[0], *a = &pr->streams[1];
    cr_expect_eq(v->kind, RV_STREAM_VIDEO);
    cr_expect_str_eq(v->codec, "h264");
    cr_expect_eq(v->width, 320);
    cr_expect_eq(v->height, 180);
    cr_expect_eq(v->rotation, 90);
    cr_expect_eq(v->fps, 30.0, "fps %.17g", v->fps); /* the stream's 30/1 */
    cr_expect(v->decodable);
    cr_expect_eq(a->kind, RV_STREAM_AUDIO);
    cr_expect_eq(a->sample_rate, 48000);
    cr_expect_eq(a->channels, 1);
    cr_expect_float_eq(pr->duration_s, 4.0, TOL_DURATION * 4.0, "duration %.17g s", pr->duration_s);
    rv_probe_free(&pr);
    cr_expect_null(pr);
    free(p);

    p = media("audio.m4a");
    cr_assert_eq(rv_probe_file(p, &pr), RV_OK, "%s", rv_last_error());
    cr_expect_eq(pr->video, -1);
    cr_expect_eq(pr->audio, 0);
    cr_expect_eq(pr->streams[0].sample_rate, 22050);
    rv_probe_free(&pr);
    free(p);

    p = media("surround.mp4");
    cr_assert_eq(rv_probe_file(p, &pr), RV_OK, "%s", rv_last_error());
    cr_expect_eq(pr->streams[1].channels, 6);
    cr_expect_str_eq(pr->streams[1].channel_layout, "5.1");
    rv_probe_free(&pr);
    free(p);
}

Test(ingest_golden, rotation_in_stats)
{
    const char *names[] = {"h264.mp4", "rot90.mp4", "rot180.mp4", "rot270.mp4"};
    const int want[] = {0, 90, 180, 270};
    for (int i = 0; i < 4; i++) {
        char *p = media(names[i]);
        rv_ingest_opts o = opts_fps(1, 1, 16);
        rv_ingest_result *r = ingest_ok(p, &o);
        cr_expect_eq(r->stats.rotation, want[i], "%s: rotation %d", names[i], r->stats.rotation);
        rv_ingest_result_free(&r);
        free(p);
    }
}

/* ffprobe's pts of stream sel's frames ("v:0", "a:0"), in its time base, which
 * must be 1/90000 (MPEG-TS); returns how many (at most cap). */
static int ffprobe_pts(const char *path, const char *sel, int64_t *pts, int cap)
{
    char out[1024];
    snprintf(out, sizeof out, "%s/.ffprobe.%d.%s.txt", media_dir(), (int)getpid(), sel);
    int rc = run_shell("ffprobe -v error -select_streams %s -show_entries stream=time_base "
                       "-of csv=p=0 '%s' > '%s' && ffprobe -v error -select_streams %s "
                       "-show_entries frame=pts -of csv=p=0 '%s' >> '%s'",
                       sel, path, out, sel, path, out);
    cr_assert_eq(rc, 0, "ffprobe failed on %s", path);
    FILE *f = fopen(out, "r");
    cr_assert_not_null(f);
    /* one value per line, perhaps followed by ",side_data,"; other lines are the
     * side data's, or the time base again (the stream listed under its program) */
    char line[256];
    cr_assert_not_null(fgets(line, sizeof line, f));
    cr_assert(strncmp(line, "1/90000", 7) == 0, "%s %s: time base %s", path, sel, line);
    int n = 0;
    while (n < cap && fgets(line, sizeof line, f))
        if (line[0] >= '0' && line[0] <= '9' && !strchr(line, '/'))
            pts[n++] = strtoll(line, NULL, 10);
    fclose(f);
    unlink(out);
    return n;
}

typedef struct clock_chunks {
    int64_t next_k;
    double t0;
    int nframes, chunks;
    double time[256], source[256];
} clock_chunks;

static rv_status on_clock_chunk(const rv_ingest_chunk *c, void *user)
{
    clock_chunks *cc = user;
    cr_assert_eq(c->first_frame, cc->next_k);
    cr_assert(cc->chunks == 0 || c->t0 == cc->t0, "t0 changed between chunks");
    cc->t0 = c->t0;
    cc->chunks++;
    for (int i = 0; i < c->nframes && cc->nframes < 256; i++, cc->nframes++) {
        cc->time[cc->nframes] = c->frame_time[i];
        cc->source[cc->nframes] = c->source_time[i];
    }
    cc->next_k += c->nframes;
    return RV_OK;
}

Test(ingest_golden, mpegts_times_on_the_container_clock)
{
    char *p = media("pre.ts");
    int64_t vpts[128], apts[4];
    const int nv = ffprobe_pts(p, "v:0", vpts, 128), na = ffprobe_pts(p, "a:0", apts, 4);
    cr_assert(nv >= 70 && na >= 1, "%s: %d video, %d audio frames", p, nv, na);
    cr_assert(vpts[0] > 126000 && apts[0] < vpts[0], "the video should start after 1.4 s and "
              "after the audio (pts %lld, %lld)", (long long)vpts[0], (long long)apts[0]);
    rv_ingest_opts o = opts_fps(5, 1, 32);
    o.chunk_frames = 7;
    rv_timeline tl;
    cr_assert_eq(rv_ingest_timeline(p, &o, &tl), RV_OK, "%s", rv_last_error());
    /* time_origin: ffprobe's first video pts; t0: it in whole microseconds, down */
    const int64_t t0_us = vpts[0] * 100 / 9;
    cr_assert_float_eq(tl.time_origin, vpts[0] / 90000.0, TIME_TOL(vpts[0] / 90000.0));
    cr_assert_eq(tl.t0_us, t0_us);
    cr_assert_eq(tl.t0, (double)t0_us / 1e6);
    /* the grid from the recording's start: the first audio */
    o.start_s = rv_timeline_start(&tl, NAN);
    const double a0 = (double)(apts[0] * 100 / 9) / 1e6;
    cr_assert_float_eq(o.start_s, a0 - tl.t0, TIME_TOL(a0 - tl.t0));
    clock_chunks cc = {0};
    rv_ingest_stats st;
    cr_assert_eq(rv_ingest_stream(p, &o, on_clock_chunk, &cc, &st), RV_OK, "%s", rv_last_error());
    cr_assert_eq(cc.t0, tl.t0);
    cr_assert_eq(st.t0, tl.t0);
    cr_assert(cc.chunks > 2 && cc.nframes >= 20, "%d chunks, %d frames", cc.chunks, cc.nframes);
    for (int k = 0; k < cc.nframes; k++) {
        /* the sum the library documents, and the grid at 5 fps from the first audio */
        cr_assert_eq(cc.time[k], tl.t0 + rv_ingest_frame_time(&o, k), "frame %d", k);
        cr_assert_float_eq(cc.time[k], a0 + k / 5.0, TIME_TOL(a0 + k / 5.0), "frame %d at %.17g s", k, cc.time[k]);
        /* ffprobe's pts of the last frame at or before it, the first before that */
        int i = 0;
        while (i + 1 < nv && vpts[i + 1] / 90000.0 <= cc.time[k] + 1e-12)
            i++;
        cr_assert_float_eq(cc.source[k], vpts[i] / 90000.0, TIME_TOL(vpts[i] / 90000.0), "frame %d at %.6f s shows "
                           "%.9f s, ffprobe's frame there is at %.9f s", k, cc.time[k],
                           cc.source[k], vpts[i] / 90000.0);
    }
    cr_assert_eq(st.end_time, st.t0 + st.end_s);
    cr_assert_float_eq(st.end_time, (vpts[nv - 1] + 3600) / 90000.0,
                       TIME_TOL((vpts[nv - 1] + 3600) / 90000.0),
                       "the recording ends at %.9f s, its last frame shows until %.9f s",
                       st.end_time, (vpts[nv - 1] + 3600) / 90000.0);
    /* the same times collected whole */
    rv_ingest_result *r = ingest_ok(p, &o);
    cr_assert_eq(r->nframes, cc.nframes);
    cr_assert_eq(memcmp(r->frame_time, cc.time, sizeof(double) * (size_t)cc.nframes), 0);
    cr_assert_eq(memcmp(r->source_time, cc.source, sizeof(double) * (size_t)cc.nframes), 0);
    rv_ingest_result_free(&r);
    free(p);
}
