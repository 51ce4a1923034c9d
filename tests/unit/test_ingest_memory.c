/* test_ingest_memory.c: memory stays bounded by the chunk size, not the length of
 * the recording: a 30-minute file (64x36 video at 2 frames/s with 8 kHz PCM audio,
 * cheap to make) adds next to nothing to the peak resident memory reached by a
 * 2-minute one, and every chunk holds at most chunk_frames frames and their audio.
 * (Under AddressSanitizer, whose quarantine keeps freed memory resident, only the
 * chunk bounds are checked.) */
#include <sys/resource.h>

#include "ingest_media.h"

#define LOWRES "-f lavfi -i testsrc2=size=64x36:rate=2 -f lavfi -i sine=frequency=300:sample_rate=8000"
#define ENC "-c:v libx264 -preset ultrafast -g 20 -c:a pcm_s16le"

const media_recipe rv_test_media[] = {
    {"short.mkv", LOWRES " -t 120 " ENC, NULL},
    {"long.mkv", LOWRES " -t 1800 " ENC, NULL},
    {NULL, NULL, NULL},
};

typedef struct tally {
    int64_t frames, samples, chunks, next_frame, next_sample;
    int max_frames;
    int64_t max_samples;
    int bad_order;
} tally;

static rv_status count(const rv_ingest_chunk *c, void *user)
{
    tally *t = user;
    if (c->first_frame != t->next_frame || c->first_sample != t->next_sample)
        t->bad_order = 1;
    t->frames += c->nframes;
    t->samples += c->nsamples;
    t->chunks++;
    t->next_frame = c->first_frame + c->nframes;
    t->next_sample = c->first_sample + c->nsamples;
    if (c->nframes > t->max_frames)
        t->max_frames = c->nframes;
    if (c->nsamples > t->max_samples)
        t->max_samples = c->nsamples;
    return RV_OK;
}

static double peak_mb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;
}

static tally run(const char *name, const rv_ingest_opts *o)
{
    char *p = media(name);
    tally t = {0};
    rv_ingest_stats s;
    rv_status st = rv_ingest_stream(p, o, count, &t, &s);
    cr_assert_eq(st, RV_OK, "%s: %s", p, rv_last_error());
    free(p);
    return t;
}

Test(ingest_memory, thirty_minutes_in_bounded_memory)
{
    rv_ingest_opts o = opts_fps(1, 1, 64);
    o.chunk_frames = 16;
    tally a = run("short.mkv", &o);
    cr_expect_eq(a.frames, 120);
    double before = peak_mb();
    tally b = run("long.mkv", &o);
    double after = peak_mb();
    cr_expect_eq(b.frames, 1800);
    cr_expect_eq(b.samples, 1800LL * 16000, "%lld samples", (long long)b.samples);
    cr_expect_not(b.bad_order, "chunks must follow each other without gaps");
    cr_expect_leq(b.max_frames, 16);
    cr_expect_leq(b.max_samples, 16 * 16000 + 1);
    cr_expect_geq(b.chunks, 1800 / 16);
    cr_log_info("peak RSS: %.1f MB after 2 minutes, %.1f MB after 30 minutes", before, after);
#if defined(__SANITIZE_ADDRESS__)
    (void)before;
    (void)after;
#else
    cr_expect_leq(after - before, 16.0,
                  "peak RSS grew from %.1f MB (2 min) to %.1f MB (30 min)", before, after);
#endif
}
