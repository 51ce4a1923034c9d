/* test_ingest_bad.c: bad input never crashes, hangs or eats memory: missing,
 * empty, truncated (index at the end, or at the start with the data cut), random
 * bytes, text named .mp4, a directory, a file with no decodable stream, an
 * unsupported codec, absurd picture sizes, and corrupt packets in the middle of a
 * stream (counted and skipped up to the limit, then an error; the limit a share
 * of the file's packets, stated, estimated or, unknown, counted to the end).
 * Every failure is a status with a message that names the file. */
#include <math.h>

#include "ingest_media.h"

/* A hang fails instead of stalling the run: ctest gives this file 180 s in all
 * (tests/CMakeLists.txt). */

const media_recipe rv_test_media[] = {
    {"ok.mp4", "-f lavfi -i testsrc2=size=160x90:rate=30 -f lavfi -i "
               "sine=frequency=440:sample_rate=48000 -t 6 -c:v libx264 -bf 3 -g 30 -c:a aac",
     NULL},
    {"faststart.mp4", "-i {DIR}/ok.mp4 -c copy -movflags +faststart", "ok.mp4"},
    {"ok.avi", "-i {DIR}/ok.mp4 -map 0:v -c:v copy", "ok.mp4"},
    {"ok.ts", "-i {DIR}/ok.mp4 -c copy -f mpegts", "ok.mp4"},  /* no stated count */
    {"raw.h264", "-i {DIR}/ok.mp4 -map 0:v -c:v copy -f h264", "ok.mp4"}, /* no duration */
    {"small.y4m", "-f lavfi -i testsrc2=size=64x36:rate=5 -frames:v 3 -pix_fmt yuv420p", NULL},
    {NULL, NULL, NULL},
};

/* Writes n bytes to dir/name; returns the path (to free). */
static char *write_file(const char *name, const void *data, size_t n)
{
    size_t len = strlen(media_dir()) + strlen(name) + 2;
    char *p = malloc(len);
    snprintf(p, len, "%s/%s", media_dir(), name);
    FILE *f = fopen(p, "wb");
    cr_assert_not_null(f, "%s: %s", p, strerror(errno));
    cr_assert_eq(fwrite(data, 1, n, f), n);
    fclose(f);
    return p;
}

static unsigned char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n);
    cr_assert_eq(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

/* Ingest and probe both fail with want (0: any error) and name the file. */
static void expect_fail(const char *path, rv_status want, const char *words)
{
    rv_ingest_opts o;
    rv_ingest_opts_default(&o);
    o.size = 32;
    rv_ingest_result *r = NULL;
    rv_status st = rv_ingest_read(path, &o, &r);
    cr_assert_neq(st, RV_OK, "%s: ingest should fail", path);
    cr_assert_null(r);
    if (want)
        cr_expect_eq(st, want, "%s: status %s, want %s (%s)", path, rv_status_name(st),
                     rv_status_name(want), rv_last_error());
    cr_expect(strstr(rv_last_error(), path) != NULL, "message does not name the file: %s",
              rv_last_error());
    if (words)
        cr_expect(strstr(rv_last_error(), words) != NULL, "message lacks '%s': %s", words,
                  rv_last_error());
}

static void expect_probe_fail(const char *path)
{
    rv_probe *p = NULL;
    cr_expect_neq(rv_probe_file(path, &p), RV_OK, "%s: probe should fail", path);
    cr_expect_null(p);
    cr_expect(strstr(rv_last_error(), path) != NULL, "%s", rv_last_error());
}

Test(ingest_bad, missing_file)
{
    expect_fail("/nonexistent/dir/clip.mp4", RV_ERR_IO, "no such file");
    expect_probe_fail("/nonexistent/dir/clip.mp4");
}

Test(ingest_bad, directory) { expect_fail(media_dir(), RV_ERR_IO, "directory"); }

Test(ingest_bad, empty_file)
{
    char *p = write_file("empty.mp4", "", 0);
    expect_fail(p, RV_ERR_FORMAT, "empty");
    expect_probe_fail(p);
    free(p);
}

Test(ingest_bad, random_bytes)
{
    size_t n = 1 << 16;
    unsigned char *b = malloc(n);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int seed = 0; seed < 4; seed++) {
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            b[i] = (unsigned char)(x >> 24);
        }
        char name[32];
        snprintf(name, sizeof name, "random%d.bin", seed);
        char *p = write_file(name, b, n);
        expect_fail(p, 0, NULL);
        free(p);
    }
    free(b);
}

Test(ingest_bad, text_named_mp4)
{
    char text[4000];
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = "this is not a video\n"[i % 20];
    char *p = write_file("notes.mp4", text, sizeof text);
    expect_fail(p, RV_ERR_FORMAT, "not a media file");
    expect_probe_fail(p);
    free(p);
}

Test(ingest_bad, truncated_index_at_end)
{
    char *ok = media("ok.mp4");
    size_t n;
    unsigned char *b = read_all(ok, &n);
    char *p = write_file("cut.mp4", b, n / 2);
    expect_fail(p, RV_ERR_FORMAT, "moov");
    free(p);
    free(b);
    free(ok);
}

Test(ingest_bad, truncated_data)
{
    char *fs = media("faststart.mp4");
    size_t n;
    unsigned char *b = read_all(fs, &n);
    char *p = write_file("cut_fs.mp4", b, n / 2);
    expect_fail(p, RV_ERR_FORMAT, "truncated");
    free(p);
    free(b);
    free(fs);
}

Test(ingest_bad, no_decodable_stream)
{
    const char srt[] = "1\n00:00:01,000 --> 00:00:02,000\nhello\n\n"
                       "2\n00:00:03,000 --> 00:00:04,000\nworld\n\n";
    char *p = write_file("subtitles.srt", srt, sizeof srt - 1);
    expect_fail(p, RV_ERR_FORMAT, "no video or audio");
    rv_probe *pr = NULL;
    cr_assert_eq(rv_probe_file(p, &pr), RV_OK, "a subtitle file still probes: %s", rv_last_error());
    cr_expect_eq(pr->video, -1);
    cr_expect_eq(pr->audio, -1);
    cr_expect_eq(pr->streams[0].kind, RV_STREAM_OTHER);
    rv_probe_free(&pr);
    free(p);
}

Test(ingest_bad, unsupported_codec)
{
    /* An AVI whose video fourcc no decoder knows. */
    char *avi = media("ok.avi");
    size_t n;
    unsigned char *b = read_all(avi, &n);
    size_t head = n < 8192 ? n : 8192;
    int hits = 0;
    for (size_t i = 0; i + 4 <= head; i++)
        if (!memcmp(b + i, "H264", 4) || !memcmp(b + i, "h264", 4) || !memcmp(b + i, "avc1", 4)) {
            memcpy(b + i, "QXZW", 4);
            hits++;
        }
    cr_assert_gt(hits, 0, "no fourcc found to replace");
    char *p = write_file("unknown.avi", b, n);
    expect_fail(p, RV_ERR_UNSUPPORTED, "QXZW");
    rv_probe *pr = NULL;
    cr_assert_eq(rv_probe_file(p, &pr), RV_OK, "%s", rv_last_error());
    cr_expect_not(pr->streams[0].decodable);
    cr_expect_eq(pr->video, -1);
    rv_probe_free(&pr);
    free(p);
    free(b);
    free(avi);
}

/* A Y4M file whose header claims a picture size ringvit refuses. */
static void absurd_size(const char *name, const char *dims)
{
    char *y4m = media("small.y4m");
    size_t n;
    unsigned char *b = read_all(y4m, &n);
    const char *old = "W64 H36";
    unsigned char *at = NULL;
    for (size_t i = 0; i + strlen(old) <= n && i < 128 && !at; i++)
        if (!memcmp(b + i, old, strlen(old)))
            at = b + i;
    cr_assert_not_null(at);
    size_t pre = (size_t)(at - b), dl = strlen(dims), ol = strlen(old);
    unsigned char *c = malloc(n - ol + dl);
    memcpy(c, b, pre);
    memcpy(c + pre, dims, dl);
    memcpy(c + pre + dl, at + ol, n - pre - ol);
    char *p = write_file(name, c, n - ol + dl);
    expect_fail(p, RV_ERR_UNSUPPORTED, "accepts at most");
    free(p);
    free(c);
    free(b);
    free(y4m);
}

Test(ingest_bad, absurd_width) { absurd_size("wide.y4m", "W17000 H36"); }
Test(ingest_bad, absurd_area) { absurd_size("huge.y4m", "W16000 H16000"); }

/* src with 20 runs of 48 random bytes in the middle third of the file, as dst. */
static char *corrupted_as(const char *src, const char *dst)
{
    char *ok = media(src);
    size_t n;
    unsigned char *b = read_all(ok, &n);
    uint64_t x = 12345;
    for (int i = 0; i < 20; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t off = n / 3 + (size_t)(x % (n / 3));
        for (int j = 0; j < 48 && off + (size_t)j < n; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            b[off + (size_t)j] = (unsigned char)x;
        }
    }
    char *p = write_file(dst, b, n);
    free(b);
    free(ok);
    return p;
}

/* ok.mp4 damaged as corrupt.mp4; the other tests that damage it take names of
 * their own, as tests run in parallel over one media folder. */
static char *corrupted(void) { return corrupted_as("ok.mp4", "corrupt.mp4"); }

Test(ingest_bad, corrupt_packets_skipped_and_counted)
{
    char *p = corrupted();
    rv_ingest_opts o = opts_fps(30, 1, 32);
    o.max_corrupt = 1000;
    rv_ingest_result *r = ingest_ok(p, &o);
    cr_expect_gt(r->stats.corrupt, 0, "the damage should be counted");
    cr_expect_geq(r->nframes, 170, "%lld frames", (long long)r->nframes);
    cr_expect_eq(r->nsamples, 6 * 16000);
    rv_ingest_result_free(&r);

    o.max_corrupt = 0; /* over the limit: an error naming the file */
    o.max_corrupt_share = 0;
    rv_status st = rv_ingest_read(p, &o, &r);
    cr_expect_eq(st, RV_ERR_FORMAT, "%s", rv_last_error());
    cr_expect(strstr(rv_last_error(), p) && strstr(rv_last_error(), "corrupt"), "%s",
              rv_last_error());
    free(p);
}

/* Counts every chunk and whether the last one came. */
typedef struct chunk_tally {
    int chunks, last;
} chunk_tally;

static rv_status tally_chunk(const rv_ingest_chunk *c, void *user)
{
    chunk_tally *t = user;
    t->chunks++;
    t->last |= c->last;
    return RV_OK;
}

/* Ingests p under (max_corrupt, share) with one decoder thread (the counts of
 * concealed frames then never vary); the status, the stats in *s. */
static rv_status ingest_limits(const char *p, int max_corrupt, double share,
                               rv_ingest_stats *s, chunk_tally *t)
{
    rv_ingest_opts o = opts_fps(30, 1, 32);
    o.threads = 1;
    o.max_corrupt = max_corrupt;
    o.max_corrupt_share = share;
    memset(t, 0, sizeof *t);
    return rv_ingest_stream(p, &o, tally_chunk, t, s);
}

/* The packets of the streams read are counted, and known before decoding: the
 * stated count (MP4), duration x rate (MPEG-TS), unknown (a raw H.264 stream);
 * a part of the file expects its share. */
Test(ingest_bad, packets_counted_and_expected)
{
    rv_ingest_stats s;
    chunk_tally t;
    char *mp4 = media("ok.mp4"), *ts = media("ok.ts"), *raw = media("raw.h264");
    cr_assert_eq(ingest_limits(mp4, 32, 0.01, &s, &t), RV_OK, "%s", rv_last_error());
    cr_expect_eq(s.corrupt, 0);
    /* 6 s: 180 video packets and 6 x 48000 / 1024 AAC packets (and a priming one) */
    cr_expect(s.packets >= 180 + 281 && s.packets <= 180 + 284, "%lld", (long long)s.packets);
    cr_expect_eq(s.packets_expected, s.packets, "expected %lld, read %lld",
                 (long long)s.packets_expected, (long long)s.packets);
    cr_expect_eq(s.corrupt_limit, 32);
    int64_t all = s.packets;

    cr_assert_eq(ingest_limits(ts, 32, 0.01, &s, &t), RV_OK, "%s", rv_last_error());
    cr_expect_eq(s.packets, all);
    /* an estimate: FFmpeg gives the TS audio 5.76 s of the 6 (from its timestamps) */
    cr_expect(llabs(s.packets_expected - all) <= all / 20, "expected %lld, read %lld",
              (long long)s.packets_expected, (long long)all);

    cr_assert_eq(ingest_limits(raw, 32, 0.01, &s, &t), RV_OK, "%s", rv_last_error());
    cr_expect_eq(s.packets_expected, -1);
    cr_expect_eq(s.packets, 180);

    rv_ingest_opts o = opts_fps(30, 1, 32); /* 1 s of the 6 */
    o.start_s = 3;
    o.duration_s = 1;
    cr_assert_eq(rv_ingest_stream(mp4, &o, tally_chunk, &t, &s), RV_OK, "%s", rv_last_error());
    cr_expect(llabs(s.packets_expected - all / 6) <= 2, "expected %lld of %lld",
              (long long)s.packets_expected, (long long)all);
    free(mp4);
    free(ts);
    free(raw);
}

/* A share of the file's packets: the same damage passes or fails by the share
 * alone, and the error names the file, the count, the share and the limit. */
Test(ingest_bad, corrupt_share_of_the_packets)
{
    rv_ingest_stats s;
    chunk_tally t;
    char *p = corrupted_as("ok.mp4", "corrupt-share.mp4");
    cr_assert_eq(ingest_limits(p, 0, 1, &s, &t), RV_OK, "%s", rv_last_error());
    int64_t c = s.corrupt, n = s.packets;
    cr_assert_gt(c, 1, "the damage should be counted");
    cr_assert_gt(n, 400);
    char want[64];
    snprintf(want, sizeof want, "more than the %lld allowed", (long long)c - 1);

    /* exactly c of n allowed: passes; one less: fails */
    cr_expect_eq(ingest_limits(p, 0, (double)c / (double)n, &s, &t), RV_OK, "%s",
                 rv_last_error());
    cr_expect_eq(s.corrupt, c);
    cr_expect_eq(s.corrupt_limit, c);
    cr_expect_eq(ingest_limits(p, 0, (double)(c - 1) / (double)n, &s, &t), RV_ERR_FORMAT);
    const char *e = rv_last_error();
    cr_expect(strstr(e, p) && strstr(e, " corrupt packets or frames, ") && strstr(e, "% of ") &&
              strstr(e, want) && strstr(e, "% of the file's packets"), "%s", e);
    /* the count alone is the larger limit here: it decides */
    cr_expect_eq(ingest_limits(p, (int)c, (double)(c - 1) / (double)n, &s, &t), RV_OK, "%s",
                 rv_last_error());
    /* a share of 0 leaves the count alone, whatever the length */
    cr_expect_eq(ingest_limits(p, (int)c - 1, 0, &s, &t), RV_ERR_FORMAT);
    free(p);
}

/* A range (one rank's part of an embed --cp run) expects the packets of the whole
 * part it is cut from: the damage it sees is held to the limit a single pass
 * has, not to a share of its own, fewer packets. */
Test(ingest_bad, corrupt_range_held_to_the_whole_file)
{
    rv_ingest_stats s;
    chunk_tally t;
    char *p = corrupted_as("ok.mp4", "corrupt-range.mp4");
    cr_assert_eq(ingest_limits(p, 0, 1, &s, &t), RV_OK, "%s", rv_last_error());
    int64_t whole = s.packets_expected;
    cr_assert_gt(whole, 400);

    rv_ingest_opts o = opts_fps(30, 1, 32); /* frames 60 to 120: the middle third */
    o.threads = 1;
    o.max_corrupt = 0;
    o.max_corrupt_share = 1;
    cr_assert_eq(rv_ingest_range(p, &o, 60, 60, tally_chunk, &t, &s), RV_OK, "%s",
                 rv_last_error());
    int64_t c = s.corrupt, n = s.packets;
    cr_expect_eq(s.packets_expected, whole);
    cr_assert(c > 1 && n < whole, "%lld corrupt of %lld packets read", (long long)c,
              (long long)n);
    o.max_corrupt_share = (double)c / (double)whole;
    cr_assert_lt(rv_ingest_corrupt_limit(&o, n), c, "the range's own packets would refuse it");
    cr_expect_eq(rv_ingest_range(p, &o, 60, 60, tally_chunk, &t, &s), RV_OK, "%s",
                 rv_last_error());
    cr_expect_eq(s.corrupt_limit, c);
    o.max_corrupt_share = (double)(c - 1) / (double)whole;
    cr_expect_eq(rv_ingest_range(p, &o, 60, 60, tally_chunk, &t, &s), RV_ERR_FORMAT);
    cr_expect(strstr(rv_last_error(), "% of about "), "%s", rv_last_error());
    free(p);
}

/* With no packet count known up front (a raw H.264 stream states no duration),
 * the share cannot be judged while decoding: the verdict comes at the end, on
 * the packets read, after the last chunk. */
Test(ingest_bad, corrupt_share_of_an_unknown_count)
{
    rv_ingest_stats s;
    chunk_tally t;
    char *p = corrupted_as("raw.h264", "corrupt.h264");
    cr_assert_eq(ingest_limits(p, 0, 1, &s, &t), RV_OK, "%s", rv_last_error());
    int64_t c = s.corrupt, n = s.packets;
    cr_assert_gt(c, 1, "the damage should be counted");
    cr_expect_eq(s.packets_expected, -1);
    cr_expect_eq(ingest_limits(p, 0, (double)c / (double)n, &s, &t), RV_OK, "%s",
                 rv_last_error());
    cr_expect_eq(ingest_limits(p, 0, (double)(c - 1) / (double)n, &s, &t), RV_ERR_FORMAT);
    cr_expect(t.last, "the verdict should come after the last chunk");
    char want[96];
    snprintf(want, sizeof want, "%lld corrupt packets or frames, ", (long long)c);
    cr_expect(strstr(rv_last_error(), p) && strstr(rv_last_error(), want), "%s",
              rv_last_error());
    /* an absolute count needs no packet count: it stops mid-stream */
    cr_expect_eq(ingest_limits(p, 0, 0, &s, &t), RV_ERR_FORMAT);
    cr_expect(!t.last && s.corrupt == 1, "%lld corrupt", (long long)s.corrupt);
    free(p);
}

Test(ingest_bad, bad_options)
{
    rv_ingest_opts o;
    rv_ingest_opts_default(&o);
    rv_ingest_result *r = NULL;
    o.fps_num = 0;
    cr_expect_eq(rv_ingest_read("x.mp4", &o, &r), RV_ERR_INVALID);
    rv_ingest_opts_default(&o);
    o.size = 3;
    cr_expect_eq(rv_ingest_read("x.mp4", &o, &r), RV_ERR_INVALID);
    rv_ingest_opts_default(&o);
    o.start_s = -2e9; /* a start before t0 is allowed (audio ahead of the video), not this */
    cr_expect_eq(rv_ingest_read("x.mp4", &o, &r), RV_ERR_INVALID);
    o.start_s = NAN;
    cr_expect_eq(rv_ingest_read("x.mp4", &o, &r), RV_ERR_INVALID);
    rv_ingest_opts_default(&o);
    cr_expect_eq(rv_ingest_range("x.mp4", &o, -1, 5, NULL, NULL, NULL), RV_ERR_INVALID);
    cr_expect_null(r);
}

Test(ingest_bad, stream_choice_errors)
{
    char *p = media("ok.mp4");
    rv_ingest_opts o = opts_fps(1, 1, 16);
    rv_ingest_result *r = NULL;
    o.audio_stream = 0; /* stream 0 is the video */
    cr_expect_eq(rv_ingest_read(p, &o, &r), RV_ERR_INVALID, "%s", rv_last_error());
    o.audio_stream = 7;
    cr_expect_eq(rv_ingest_read(p, &o, &r), RV_ERR_INVALID, "%s", rv_last_error());
    cr_expect(strstr(rv_last_error(), p) != NULL);
    free(p);
}
