/* test_ingest_api.c: the parts of the ingest API that need no media: option
 * checks, the sample-time grid (exact, correctly rounded times), the audio index
 * of a grid index, and the resize geometry. */
#include <criterion/criterion.h>

#include <math.h>

#include "rv_ingest.h"

static rv_ingest_opts fps(int num, int den)
{
    rv_ingest_opts o;
    rv_ingest_opts_default(&o);
    o.fps_num = num;
    o.fps_den = den;
    return o;
}

Test(ingest_api, defaults_are_valid)
{
    rv_ingest_opts o;
    rv_ingest_opts_default(&o);
    cr_expect_eq(rv_ingest_opts_check(&o), RV_OK, "%s", rv_last_error());
    cr_expect_eq(o.fps_num, 1);
    cr_expect_eq(o.size, 224);
    cr_expect_eq(o.audio_stream, -1);
}

Test(ingest_api, option_errors_name_the_field)
{
    rv_ingest_opts o = fps(0, 1);
    cr_expect_eq(rv_ingest_opts_check(&o), RV_ERR_INVALID);
    cr_expect(strstr(rv_last_error(), "fps"));
    o = fps(2001, 2);
    cr_expect_eq(rv_ingest_opts_check(&o), RV_ERR_INVALID);
    o = fps(1, 1);
    o.size = 5000;
    cr_expect_eq(rv_ingest_opts_check(&o), RV_ERR_INVALID);
    cr_expect(strstr(rv_last_error(), "size"));
    o = fps(1, 1);
    o.start_s = NAN;
    cr_expect_eq(rv_ingest_opts_check(&o), RV_ERR_INVALID);
    o = fps(1, 1);
    o.chunk_frames = 0;
    cr_expect_eq(rv_ingest_opts_check(&o), RV_ERR_INVALID);
    cr_expect_eq(rv_ingest_opts_check(NULL), RV_ERR_INVALID);
}

Test(ingest_api, frame_times_are_exact)
{
    rv_ingest_opts o = fps(30000, 1001);
    cr_expect_eq(rv_ingest_frame_time(&o, 0), 0.0);
    /* k / fps correctly rounded: 1001/30000 and 30000 frames = 1001 s exactly. */
    cr_expect_eq(rv_ingest_frame_time(&o, 1), 1001.0 / 30000.0);
    cr_expect_eq(rv_ingest_frame_time(&o, 30000), 1001.0);
    o = fps(3, 1);
    o.start_s = 1.25;
    cr_expect_eq(rv_ingest_frame_time(&o, 3), 2.25);
    cr_expect_eq(rv_ingest_frame_time(&o, 1), 1.25 + 1.0 / 3.0);
    /* An hour in at 29.97 does not drift. */
    o = fps(2997, 100);
    cr_expect_eq(rv_ingest_frame_time(&o, 2997LL * 3600), 360000.0);
}

Test(ingest_api, audio_index_of_grid_index)
{
    rv_ingest_opts o = fps(30, 1);
    cr_expect_eq(rv_ingest_audio_index(&o, 0), 0);
    cr_expect_eq(rv_ingest_audio_index(&o, 30), 16000);
    cr_expect_eq(rv_ingest_audio_index(&o, 1), 533);  /* 533.33 */
    cr_expect_eq(rv_ingest_audio_index(&o, 2), 1067); /* 1066.67 */
    o = fps(30000, 1001);
    cr_expect_eq(rv_ingest_audio_index(&o, 30000), 1001LL * 16000);
    o = fps(1, 3);
    cr_expect_eq(rv_ingest_audio_index(&o, 5), 5 * 3 * 16000);
}

Test(ingest_api, scaled_size)
{
    int w, h;
    rv_ingest_scaled_size(1280, 720, 224, 0, &w, &h); /* shorter side to 224 */
    cr_expect(w == 398 && h == 224, "%dx%d", w, h);
    rv_ingest_scaled_size(720, 1280, 224, 0, &w, &h);
    cr_expect(w == 224 && h == 398, "%dx%d", w, h);
    rv_ingest_scaled_size(1280, 720, 224, 1, &w, &h); /* pad: longer side to 224 */
    cr_expect(w == 224 && h == 126, "%dx%d", w, h);
    rv_ingest_scaled_size(320, 180, 64, 0, &w, &h);
    cr_expect(w == 114 && h == 64, "%dx%d", w, h); /* 113.78 rounds to 114 */
    rv_ingest_scaled_size(10000, 1, 16, 1, &w, &h);
    cr_expect(w == 16 && h == 1, "%dx%d", w, h); /* never 0 */
    rv_ingest_scaled_size(0, 10, 16, 0, &w, &h);
    cr_expect(w == 0 && h == 0);
}
