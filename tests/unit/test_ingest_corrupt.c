/* test_ingest_corrupt.c: the corrupt-data limit's arithmetic, no media needed:
 * how many corrupt packets a file of n packets may have (the larger of
 * max_corrupt and max_corrupt_share x n; an absolute count; a share alone; an
 * unknown n), and how many packets a stream is expected to hold before it is
 * decoded (the stated count, else duration x rate, scaled to the part read).
 * The files themselves are in test_ingest_bad.c and tests/cli/test_files.sh. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>

#include "ingest_time.h" /* rv_ingest_packets_expected (internal to ingest/) */
#include "rv_ingest.h"

static rv_ingest_opts limits(int max_corrupt, double share)
{
    rv_ingest_opts o;
    rv_ingest_opts_default(&o);
    o.max_corrupt = max_corrupt;
    o.max_corrupt_share = share;
    return o;
}

/* count corrupt of n packets fails the file under o */
static int fails(const rv_ingest_opts *o, int64_t count, int64_t n)
{
    return count > rv_ingest_corrupt_limit(o, n);
}

Test(ingest_corrupt, defaults_are_32_and_one_percent)
{
    rv_ingest_opts o;
    rv_ingest_opts_default(&o);
    cr_expect_eq(o.max_corrupt, 32);
    cr_expect_eq(o.max_corrupt_share, 0.01);
    cr_expect_eq(rv_ingest_opts_check(&o), RV_OK);
}

Test(ingest_corrupt, default_is_the_larger_of_the_two)
{
    rv_ingest_opts o;
    rv_ingest_opts_default(&o);
    cr_expect_eq(rv_ingest_corrupt_limit(&o, 0), 32);
    cr_expect_eq(rv_ingest_corrupt_limit(&o, 200), 32);     /* a short clip: the count */
    cr_expect_eq(rv_ingest_corrupt_limit(&o, 3299), 32);
    cr_expect_eq(rv_ingest_corrupt_limit(&o, 3300), 33);    /* from here the share */
    cr_expect_eq(rv_ingest_corrupt_limit(&o, 5667), 56);
    cr_expect_eq(rv_ingest_corrupt_limit(&o, 277200), 2772); /* an hour, 30 fps + AAC */
    /* "more than": exactly 1% is still within */
    cr_expect(!fails(&o, 56, 5600) && fails(&o, 57, 5600));
    cr_expect(!fails(&o, 32, 1000) && fails(&o, 33, 1000));
    /* The test file of tests/cli/test_files.sh: 64 KiB of garbage in the middle
     * of 40 s of 100 fps video and MP2 audio, about 41 corrupt of 5667 packets:
     * within the new default, past the old one (32 whatever the length). */
    cr_expect(!fails(&o, 41, 5667));
    rv_ingest_opts old = limits(32, 0);
    cr_expect(fails(&old, 41, 5667));
    /* The numbers, 48 of about 2900, are past both 32 and 1% (29). */
    cr_expect(fails(&o, 48, 2900));
}

Test(ingest_corrupt, absolute_count)
{
    rv_ingest_opts o = limits(10, 0);
    cr_expect_eq(rv_ingest_opts_check(&o), RV_OK);
    cr_expect_eq(rv_ingest_corrupt_limit(&o, -1), 10);
    for (int64_t n = 0; n < INT64_MAX / 8; n = n * 7 + 3)
        cr_expect_eq(rv_ingest_corrupt_limit(&o, n), 10, "n = %lld", (long long)n);
    o = limits(0, 0); /* no corrupt packet at all */
    cr_expect_eq(rv_ingest_corrupt_limit(&o, 5667), 0);
    cr_expect_eq(rv_ingest_corrupt_limit(&o, -1), 0);
}

Test(ingest_corrupt, share_alone)
{
    rv_ingest_opts o = limits(0, 0.001);
    cr_expect_eq(rv_ingest_corrupt_limit(&o, 5667), 5);
    cr_expect_eq(rv_ingest_corrupt_limit(&o, 999), 0);
    cr_expect_eq(rv_ingest_corrupt_limit(&o, 1000), 1);
    o = limits(0, 0.05);
    cr_expect_eq(rv_ingest_corrupt_limit(&o, 5667), 283);
    o = limits(0, 1);
    cr_expect_eq(rv_ingest_corrupt_limit(&o, 5667), 5667);
    /* shares that are a little off in binary still give the exact count:
     * 0.29 x 100 = 28.999999999999996, 0.07 x 100 = 7.000000000000001 */
    o = limits(0, 0.29);
    cr_expect_eq(rv_ingest_corrupt_limit(&o, 100), 29);
    o = limits(0, 0.07);
    cr_expect_eq(rv_ingest_corrupt_limit(&o, 100), 7);
    /* --max-corrupt 0.5% and 1% of every count up to 10^6: exact integer shares */
    rv_ingest_opts half = limits(0, 0.005), one = limits(0, 0.01);
    int64_t wrong = 0, first = -1;
    for (int64_t n = 0; n <= 1000000; n++) {
        if (rv_ingest_corrupt_limit(&half, n) == n / 200 &&
            rv_ingest_corrupt_limit(&one, n) == n / 100)
            continue;
        wrong++;
        if (first < 0)
            first = n;
    }
    cr_expect_eq(wrong, 0, "%lld counts wrong, the first %lld", (long long)wrong,
                 (long long)first);
}

Test(ingest_corrupt, unknown_packet_count)
{
    /* The share cannot be judged: no limit until the end of the file. */
    rv_ingest_opts o;
    rv_ingest_opts_default(&o);
    cr_expect_eq(rv_ingest_corrupt_limit(&o, -1), INT64_MAX);
    o = limits(0, 0.001);
    cr_expect_eq(rv_ingest_corrupt_limit(&o, -1), INT64_MAX);
}

Test(ingest_corrupt, huge_counts_do_not_overflow)
{
    rv_ingest_opts o = limits(1 << 30, 1);
    cr_expect_eq(rv_ingest_corrupt_limit(&o, INT64_MAX), INT64_MAX);
    cr_expect_eq(rv_ingest_corrupt_limit(&o, 5), 1 << 30);
    o = limits(0, 0.5);
    int64_t l = rv_ingest_corrupt_limit(&o, INT64_MAX / 2);
    cr_expect(l > INT64_MAX / 5 && l <= INT64_MAX / 4 + 1024, "%lld", (long long)l);
}

Test(ingest_corrupt, share_out_of_range_is_refused)
{
    rv_ingest_opts o = limits(32, -0.01);
    cr_expect_eq(rv_ingest_opts_check(&o), RV_ERR_INVALID);
    o = limits(32, 1.5);
    cr_expect_eq(rv_ingest_opts_check(&o), RV_ERR_INVALID);
    o = limits(32, NAN);
    cr_expect_eq(rv_ingest_opts_check(&o), RV_ERR_INVALID);
    o = limits(32, 1);
    cr_expect_eq(rv_ingest_opts_check(&o), RV_OK);
    o = limits(-1, 0.01);
    cr_expect_eq(rv_ingest_opts_check(&o), RV_ERR_INVALID);
}

Test(ingest_corrupt, whole_stream_estimate)
{
    /* the stated count wins (MP4's nb_frames) */
    cr_expect_eq(rv_ingest_packets_expected(4000, 40.0, 30.0, 0, INFINITY), 4000);
    cr_expect_eq(rv_ingest_packets_expected(4000, NAN, 0, 0, INFINITY), 4000);
    /* else duration x rate: 30 fps video; 48 kHz MP2 (1152 samples a packet) */
    cr_expect_eq(rv_ingest_packets_expected(0, 40.0, 30.0, 0, INFINITY), 1200);
    cr_expect_eq(rv_ingest_packets_expected(0, 40.008, 48000.0 / 1152, 0, INFINITY), 1667);
    /* a span that reaches past the end is the whole stream */
    cr_expect_eq(rv_ingest_packets_expected(0, 40.0, 30.0, 0, 100.0), 1200);
    /* unknown: no rate, no duration, or neither with nothing stated */
    cr_expect_eq(rv_ingest_packets_expected(0, 40.0, 0, 0, INFINITY), -1);
    cr_expect_eq(rv_ingest_packets_expected(0, NAN, 30.0, 0, INFINITY), -1);
    cr_expect_eq(rv_ingest_packets_expected(0, -1, 30.0, 0, INFINITY), -1);
    cr_expect_eq(rv_ingest_packets_expected(0, 40.0, NAN, 0, INFINITY), -1);
}

Test(ingest_corrupt, part_of_a_stream)
{
    /* --start 10 --duration 10 of 40 s: a quarter of the stated 4000 */
    cr_expect_eq(rv_ingest_packets_expected(4000, 40.0, 100.0, 10.0, 20.0), 1000);
    cr_expect_eq(rv_ingest_packets_expected(0, 40.0, 30.0, 10.0, 20.0), 300);
    /* to the end from 30 s; past the end: the rest, then nothing */
    cr_expect_eq(rv_ingest_packets_expected(0, 40.0, 30.0, 30.0, INFINITY), 300);
    cr_expect_eq(rv_ingest_packets_expected(0, 40.0, 30.0, 35.0, 60.0), 150);
    cr_expect_eq(rv_ingest_packets_expected(0, 40.0, 30.0, 50.0, INFINITY), 0);
    /* length unknown: the span's own length x rate, at most the stated count */
    cr_expect_eq(rv_ingest_packets_expected(0, NAN, 25.0, 0, 10.0), 250);
    cr_expect_eq(rv_ingest_packets_expected(100, NAN, 25.0, 0, 10.0), 100);
    cr_expect_eq(rv_ingest_packets_expected(0, NAN, 25.0, 5.0, INFINITY), -1);
    cr_expect_eq(rv_ingest_packets_expected(0, NAN, 0, 0, 10.0), -1);
}
