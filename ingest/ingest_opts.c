/* ingest_opts.c: the ingest options (defaults, checks), the grid arithmetic
 * the tokenizer plans with (frame times, audio indices) and the corrupt-data
 * limit (how many packets a span holds, how many of them may be corrupt); plain
 * arithmetic with no FFmpeg, so a build without it (RINGVIT_MEDIA=OFF) keeps
 * tokenizing synthetic and precomputed sequences. Also the text forms of two
 * options (a frame rate, a corrupt-data limit) the command line and the flat
 * calls read alike. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
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
    o->max_corrupt_share = 0.01;
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
    if (!(o->start_s >= -1e9 && o->start_s <= 1e9))
        return rv_fail(RV_ERR_INVALID, "ingest: start %g s is out of range (|start| <= 1e9 s)",
                       o->start_s);
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
    if (!(o->max_corrupt_share >= 0 && o->max_corrupt_share <= 1))
        return rv_fail(RV_ERR_INVALID, "ingest: max_corrupt_share %g must be in [0, 1]",
                       o->max_corrupt_share);
    if (o->threads < 0 || o->threads > RV_INGEST_MAX_THREADS)
        return rv_fail(RV_ERR_INVALID, "ingest: threads %d must be in [0, %d]", o->threads,
                       RV_INGEST_MAX_THREADS);
    return RV_OK;
}

int64_t rv_ingest_corrupt_limit(const rv_ingest_opts *o, int64_t packets)
{
    int64_t limit = o->max_corrupt > 0 ? o->max_corrupt : 0;
    if (!(o->max_corrupt_share > 0))
        return limit;
    if (packets < 0)
        return INT64_MAX;
    /* The product is exact enough for any real file; the nudge keeps 1% of 2900
     * at 29 although 0.01 is a little off in binary. */
    double share = floor(o->max_corrupt_share * (double)packets + 1e-6);
    int64_t by_share = share >= 9e18 ? INT64_MAX : (int64_t)share;
    return by_share > limit ? by_share : limit;
}

int64_t rv_ingest_packets_expected(int64_t stated, double duration_s, double rate,
                                   double from_s, double to_s)
{
    int dur_known = duration_s > 0 && isfinite(duration_s);
    int rate_known = rate > 0 && isfinite(rate);
    double whole = -1, n = -1;
    if (stated > 0)
        whole = (double)stated;
    else if (dur_known && rate_known)
        whole = duration_s * rate;
    if (!(from_s > 0))
        from_s = 0;
    if (dur_known) {
        double to = to_s < duration_s ? to_s : duration_s;
        double frac = (to - from_s) / duration_s;
        if (whole >= 0)
            n = whole * (frac > 0 ? (frac < 1 ? frac : 1) : 0);
    } else if (from_s == 0 && !isfinite(to_s)) {
        n = whole;
    } else if (rate_known && isfinite(to_s)) {
        /* a part of a stream of unknown length: its own length x rate, at most
         * the stated whole */
        n = to_s > from_s ? (to_s - from_s) * rate : 0;
        if (whole >= 0 && whole < n)
            n = whole;
    }
    if (!(n >= 0) || n >= 9e18)
        return -1;
    return llround(n);
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

double rv_timeline_start(const rv_timeline *tl, double at_s)
{
    int64_t at_us = tl->start_us;
    if (at_s > (double)tl->start_us / US) { /* false for NAN */
        double v = at_s * US;
        at_us = v >= 9e15 ? (int64_t)9e15 : llround(v); /* 9e15: past the options' range */
        if (at_us < tl->start_us)
            at_us = tl->start_us;
    }
    return (double)(at_us - tl->t0_us) / US;
}

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

rv_status rv_ingest_parse_fps(const char *text, int *num, int *den)
{
    int64_t n = 0, d = 1;
    const char *p = text;
    int ok = p && *p;
    int digits = 0;
    for (; ok && *p >= '0' && *p <= '9'; p++, digits++)
        if ((n = n * 10 + (*p - '0')) > 1000000000)
            ok = 0;
    if (ok && *p == '/') {
        int64_t q = 0;
        int qd = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, qd++)
            if ((q = q * 10 + (*p - '0')) > 1000000000)
                ok = 0;
        ok = ok && qd > 0 && digits > 0 && q > 0;
        d = q;
    } else if (ok && *p == '.') {
        int fd = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, fd++) {
            if (fd >= 6)
                ok = 0;
            n = n * 10 + (*p - '0');
            d *= 10;
        }
        ok = ok && (digits > 0 || fd > 0);
    } else {
        ok = ok && digits > 0;
    }
    ok = ok && *p == '\0' && n > 0;
    if (ok) {
        int64_t g = gcd64(n, d);
        n /= g;
        d /= g;
        ok = n <= 1000000 && d <= 1000000 && n <= 1000 * d;
    }
    if (!ok)
        return rv_fail(RV_ERR_INVALID, "a frame rate like 30, 29.97 or 30000/1001 (above 0, at "
                       "most 1000) is wanted, got '%s'", text ? text : "");
    *num = (int)n;
    *den = (int)d;
    return RV_OK;
}

rv_status rv_ingest_parse_max_corrupt(const char *text, rv_ingest_opts *o)
{
    const int max = 1 << 30;
    size_t n = strlen(text);
    int pct = n > 1 && text[n - 1] == '%';
    char num[64], *endp = NULL;
    double v = NAN;
    /* plain decimals only: no sign, exponent, hex, inf or nan */
    if (n - (size_t)pct < sizeof num && n > (size_t)pct &&
        strspn(text, "0123456789.") == n - (size_t)pct) {
        memcpy(num, text, n - (size_t)pct);
        num[n - (size_t)pct] = '\0';
        errno = 0;
        v = strtod(num, &endp);
        if (errno || *endp != '\0')
            v = NAN;
    }
    if (pct ? !(v >= 0 && v <= 100) : !(v >= 0 && v <= max && v == floor(v)))
        return rv_fail(RV_ERR_INVALID, "a count of corrupt packets (0 to %d) or a share of the "
                       "file's packets from 0%% to 100%% (like 0.5%%) is wanted, got '%s'", max,
                       text);
    if (pct) {
        o->max_corrupt = 0;
        o->max_corrupt_share = v / 100;
    } else {
        o->max_corrupt = (int)v;
        o->max_corrupt_share = 0;
    }
    return RV_OK;
}
