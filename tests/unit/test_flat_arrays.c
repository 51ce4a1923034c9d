/* test_flat_arrays.c: the flat calls' plumbing without media: rv_arrays made by
 * the caller (copies, shapes, lookups), options refused naming the key, the
 * build facts matching the version text, and failing calls that leave memory
 * flat. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rv_flat.h"
#include "rv_version.h"

Test(flat_arrays, made_by_the_caller_are_copies)
{
    rv_arrays *a = NULL;
    cr_assert_eq(rv_arrays_new("{\"k\": 1}", &a), RV_OK);
    double v[6] = {1, 2, 3, 4, 5, 6};
    int64_t dims[2] = {2, 3};
    cr_assert_eq(rv_arrays_add(a, "x", "f64", 2, dims, v), RV_OK);
    v[0] = 99; /* the set holds its own copy */
    int64_t zero[1] = {0};
    cr_assert_eq(rv_arrays_add(a, "empty", "u8", 1, zero, NULL), RV_OK);
    cr_assert_eq(rv_arrays_count(a), 2);
    int i = rv_arrays_find(a, "x");
    cr_assert_eq(i, 0);
    cr_assert_eq(rv_arrays_find(a, "nope"), -1);
    cr_assert_str_eq(rv_arrays_name(a, i), "x");
    cr_assert_str_eq(rv_arrays_dtype(a, i), "f64");
    cr_assert_eq(rv_arrays_ndim(a, i), 2);
    cr_assert_eq(rv_arrays_dim(a, i, 0), 2);
    cr_assert_eq(rv_arrays_dim(a, i, 1), 3);
    const double *d = rv_arrays_data(a, i);
    cr_assert_eq(d[0], 1.0);
    cr_assert_eq(d[5], 6.0);
    cr_assert_null(rv_arrays_data(a, 1));
    cr_assert_str_eq(rv_arrays_meta(a), "{\"k\":1}");
    /* refused: a second name, a bad dtype, a negative dimension */
    cr_assert_eq(rv_arrays_add(a, "x", "f64", 2, dims, v), RV_ERR_INVALID);
    cr_assert_eq(rv_arrays_add(a, "y", "f16", 2, dims, v), RV_ERR_INVALID);
    int64_t neg[1] = {-1};
    cr_assert_eq(rv_arrays_add(a, "z", "u8", 1, neg, v), RV_ERR_INVALID);
    cr_assert_eq(rv_arrays_count(a), 2);
    rv_arrays_free(&a);
    cr_assert_null(a);
    rv_arrays_free(&a); /* no-op */
    cr_assert_eq(rv_arrays_new("[1]", &a), RV_ERR_INVALID);
    cr_assert_null(a);
}

Test(flat_arrays, options_name_the_bad_key)
{
    rv_flat_reader *r = NULL;
    cr_assert_eq(rv_flat_reader_open("/nonexistent.mp4", "{\"fsp\": 2}", &r), RV_ERR_INVALID);
    cr_assert(strstr(rv_last_error(), "\"fsp\""), "%s", rv_last_error());
    cr_assert_eq(rv_flat_reader_open("/nonexistent.mp4", "{\"size\": \"big\"}", &r), RV_ERR_INVALID);
    cr_assert(strstr(rv_last_error(), "\"size\""), "%s", rv_last_error());
    cr_assert_eq(rv_flat_reader_open("/nonexistent.mp4", "{\"fps\": \"0/1\"}", &r), RV_ERR_INVALID);
    cr_assert(strstr(rv_last_error(), "\"fps\""), "%s", rv_last_error());
    cr_assert_eq(rv_flat_reader_open("/nonexistent.mp4", "{not json", &r), RV_ERR_INVALID);
    cr_assert_null(r);
    rv_arrays *t = NULL;
    cr_assert_eq(rv_flat_tokens("/nonexistent.mp4", "{\"patch\": 0}", &t), RV_ERR_INVALID);
    cr_assert(strstr(rv_last_error(), "\"patch\""), "%s", rv_last_error());
    rv_flat_encoder *e = NULL;
    cr_assert_eq(rv_flat_encoder_open("tiny", "{\"strategy\": \"spiral\"}", &e), RV_ERR_INVALID);
    cr_assert(strstr(rv_last_error(), "strategy"), "%s", rv_last_error());
    cr_assert_eq(rv_flat_encoder_open("no-such-preset", NULL, &e), RV_ERR_INVALID);
    cr_assert(strstr(rv_last_error(), "no-such-preset"), "%s", rv_last_error());
    cr_assert_null(e);
}

Test(flat_arrays, build_info_states_the_version_text)
{
    char *info = NULL, *text = NULL, want[64];
    cr_assert_eq(rv_flat_build_info(&info), RV_OK);
    cr_assert_eq(rv_version_text(&text), RV_OK);
    snprintf(want, sizeof want, "ringvit %s\n", RINGVIT_VERSION);
    cr_assert_eq(strncmp(text, want, strlen(want)), 0, "%s", text);
    snprintf(want, sizeof want, "\"version\":\"%s\"", RINGVIT_VERSION);
    cr_assert(strstr(info, want), "%s", info);
    cr_assert(strstr(info, "\"cpu_kernels\":"), "%s", info);
    cr_assert(strstr(info, "\"threads\":"), "%s", info);
    rv_flat_free(info);
    rv_flat_free(text);
}

static long rss_kb(void)
{
    long kb = -1;
    char line[256];
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

static void failing_calls(int n)
{
    for (int i = 0; i < n; i++) {
        rv_flat_reader *r = NULL;
        rv_arrays *t = NULL;
        rv_flat_encoder *e = NULL;
        char *j = NULL;
        cr_assert_neq(rv_flat_reader_open("/nonexistent/a.mp4", "{\"fps\": 2}", &r), RV_OK);
        cr_assert_neq(rv_flat_reader_open("/nonexistent/a.mp4", "{\"bad\": 2}", &r), RV_OK);
        cr_assert_neq(rv_flat_tokens("/nonexistent/a.mp4", "{\"cls\": true}", &t), RV_OK);
        cr_assert_neq(rv_flat_probe("/nonexistent/a.mp4", &j), RV_OK);
        cr_assert_neq(rv_flat_encoder_open("/nonexistent/w.safetensors", NULL, &e), RV_OK);
        cr_assert(!r && !t && !e && !j);
    }
}

/* Under the sanitizers ASan's quarantine holds freed blocks, so RSS grows by
 * design; there LeakSanitizer checks the same calls at exit, and the release
 * pass measures RSS. */
Test(flat_arrays, failing_calls_leave_memory_flat)
{
    failing_calls(100); /* warm-up: the allocator's and FFmpeg's one-time state */
    long before = rss_kb();
    failing_calls(1000);
    long after = rss_kb();
#ifndef RV_TEST_SANITIZED
    cr_assert(after - before < 1024, "RSS grew %ld kB over 1000 failing calls", after - before);
#else
    (void)before, (void)after;
#endif
}
