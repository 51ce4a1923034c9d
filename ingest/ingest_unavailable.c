/* ingest_unavailable.c: the media entry points of the ingest API in a build
 * without FFmpeg (RINGVIT_MEDIA OFF, or AUTO where FFmpeg's development files are
 * missing), where it, ingest_opts.c and the files without FFmpeg types
 * (probe_json.c, collect_column.c, frames_collect.c) replace ingest/. Such a build keeps the
 * compute path (backends, CP attention, the encoder on tokens, the kernel and
 * ring benchmarks: what a GPU machine without FFmpeg checks); every media entry
 * point fails with RV_ERR_UNSUPPORTED and says why. */
#include "rv_ingest.h"

static rv_status no_media(const char *what, const char *path)
{
    return rv_fail(RV_ERR_UNSUPPORTED, "%s%s%s: this ringvit was built without FFmpeg "
                   "(RINGVIT_MEDIA=OFF): it cannot read media", what, path ? " " : "",
                   path ? path : "");
}

rv_status rv_probe_file(const char *path, rv_probe **out)
{
    if (out)
        *out = NULL;
    return no_media("probe", path);
}

void rv_probe_free(rv_probe **p)
{
    if (p)
        *p = NULL; /* nothing is ever allocated */
}

void rv_ingest_scaled_size(int w, int h, int size, int pad, int *ow, int *oh)
{
    (void)w, (void)h, (void)size, (void)pad;
    *ow = *oh = 0;
}

rv_status rv_ingest_stream(const char *path, const rv_ingest_opts *opts, rv_ingest_chunk_fn fn,
                           void *user, rv_ingest_stats *stats)
{
    (void)opts, (void)fn, (void)user, (void)stats;
    return no_media("ingest", path);
}

rv_status rv_ingest_range(const char *path, const rv_ingest_opts *opts, int64_t first_frame,
                          int64_t count, rv_ingest_chunk_fn fn, void *user,
                          rv_ingest_stats *stats)
{
    (void)opts, (void)first_frame, (void)count, (void)fn, (void)user, (void)stats;
    return no_media("ingest", path);
}

rv_status rv_ingest_read(const char *path, const rv_ingest_opts *opts, rv_ingest_result **out)
{
    (void)opts;
    if (out)
        *out = NULL;
    return no_media("ingest", path);
}

void rv_ingest_result_free(rv_ingest_result **r)
{
    if (r)
        *r = NULL;
}

rv_status rv_ingest_timeline(const char *path, const rv_ingest_opts *opts, rv_timeline *out)
{
    (void)opts;
    if (out)
        *out = (rv_timeline){.audio_s = 0};
    return no_media("timeline", path);
}
