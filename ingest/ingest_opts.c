/* ingest_opts.c: the ingest options (defaults, checks) and the grid arithmetic
 * the tokenizer plans with (frame times, audio indices); plain arithmetic with
 * no FFmpeg, so a build without it (RINGVIT_MEDIA=OFF) keeps tokenizing
 * synthetic and precomputed sequences. */
#include <math.h>
#include <string.h>

#include "ingest_time.h"
#include "rv_ingest.h"

#define US 1000000

double rv_grid_seconds(int64_t start_us, int64_t fps_num, int64_t fps_den, int64_t k)
{
    __extension__ __int128 n = (__int128)start_us * fps_num + (__int128)k * fps_den * US;
    __extension__ __int128 d = (__int128)US * fps_num;
    /* Both exact in a double for any realistic recording, so the quotient is
     * correctly rounded, as float(Fraction(n, d)) is. */
    return (double)n / (double)d;
}

void rv_ingest_opts_default(rv_ingest_opts *o)
{
    memset(o, 0, sizeof *o);
    o->fps_num = 1;
    o->fps_den = 1;
    o->size = 224;
    o->video_stream = -1;
    o->audio_stream = -1;
    o->chunk_frames = 32;
    o->max_corrupt = 32;
}

rv_status rv_ingest_opts_check(const rv_ingest_opts *o)
{
    if (!o)
        return rv_fail(RV_ERR_INVALID, "ingest: no options");
    if (o->fps_num <= 0 || o->fps_den <= 0 || o->fps_num > 1000000 || o->fps_den > 1000000 ||
        (double)o->fps_num / o->fps_den > 1000.0)
        return rv_fail(RV_ERR_INVALID, "ingest: fps %d/%d must be positive and at most 1000",
                       o->fps_num, o->fps_den);
    if (o->size < 8 || o->size > 4096)
        return rv_fail(RV_ERR_INVALID, "ingest: size %d must be in [8, 4096]", o->size);
    if (!(o->start_s >= 0) || o->start_s > 1e9)
        return rv_fail(RV_ERR_INVALID, "ingest: start %g s must be >= 0", o->start_s);
    if (!(o->duration_s <= 1e9) || o->duration_s != o->duration_s)
        return rv_fail(RV_ERR_INVALID, "ingest: duration %g s is out of range", o->duration_s);
    if (o->first_frame < 0)
        return rv_fail(RV_ERR_INVALID, "ingest: first frame %lld must be >= 0",
                       (long long)o->first_frame);
    if (o->chunk_frames < 1 || o->chunk_frames > 1 << 20)
        return rv_fail(RV_ERR_INVALID, "ingest: chunk_frames %d must be in [1, 2^20]",
                       o->chunk_frames);
    if (o->max_corrupt < 0)
        return rv_fail(RV_ERR_INVALID, "ingest: max_corrupt must be >= 0");
    if (o->threads < 0 || o->threads > RV_INGEST_MAX_THREADS)
        return rv_fail(RV_ERR_INVALID, "ingest: threads %d must be in [0, %d]", o->threads,
                       RV_INGEST_MAX_THREADS);
    return RV_OK;
}

double rv_ingest_frame_time(const rv_ingest_opts *o, int64_t k)
{
    return rv_grid_seconds(llround(o->start_s * 1e6), o->fps_num, o->fps_den, k);
}

int64_t rv_ingest_audio_index(const rv_ingest_opts *o, int64_t k)
{
    /* round(k * 16000 * fps_den / fps_num), half up */
    __extension__ __int128 n = (__int128)k * RV_AUDIO_RATE * o->fps_den;
    return (int64_t)((2 * n + o->fps_num) / (2 * (__int128)o->fps_num));
}
