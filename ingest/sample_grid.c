/* sample_grid.c: the sample-time grid t_k = t0 + start + k / fps as exact integer
 * arithmetic against pts in a stream time base (t0: the first frame's pts
 * rounded down to the microsecond, so the grid lies on whole microseconds of
 * the container's clock). Comparing "pts <= t_k" through
 * doubles drifts over hours of video and disagrees with any other
 * implementation at frame boundaries; with 128-bit integers it is exact, so the
 * peer reference (tests/peer/ingest_golden.py, using Python fractions) picks the
 * very same frames. */
#include <math.h>

#include "ingest_internal.h"
#include "ingest_time.h"

__extension__ typedef __int128 i128;

#define US 1000000

void rv_grid_init(rv_grid *g, const rv_ingest_opts *o)
{
    g->fps_num = o->fps_num;
    g->fps_den = o->fps_den;
    g->start_us = llround(o->start_s * US);
    g->time_origin = g->t0_us = 0;
    g->tb = (AVRational){1, 1};
    g->k_first = o->first_frame > 0 ? o->first_frame : 0;
    g->k_end = INT64_MAX;
    if (o->max_frames > 0 && o->max_frames <= INT64_MAX - g->k_first)
        g->k_end = g->k_first + o->max_frames;
    if (o->duration_s > 0) {
        /* k / fps < duration  <=>  k * fps_den * US < dur_us * fps_num */
        i128 dur_us = (i128)llround(o->duration_s * US);
        i128 num = dur_us * g->fps_num, den = (i128)g->fps_den * US;
        i128 k_dur = (num + den - 1) / den; /* ceil: first k not allowed */
        if (k_dur < g->k_end)
            g->k_end = (int64_t)k_dur;
    }
}

static i128 floor_div(i128 x, i128 d) /* d > 0 */
{
    return x >= 0 ? x / d : -((-x + d - 1) / d);
}

int64_t rv_pts_floor_us(int64_t pts, AVRational tb)
{
    i128 q = floor_div((i128)pts * tb.num * US, tb.den > 0 ? tb.den : 1);
    return q > INT64_MAX ? INT64_MAX : q < INT64_MIN ? INT64_MIN : (int64_t)q;
}

void rv_grid_set_time_origin(rv_grid *g, int64_t pts)
{
    g->time_origin = pts;
    g->t0_us = rv_pts_floor_us(pts, g->tb);
}

/* t_k = t0 + start + k / fps = N(k) / D seconds on the container's clock, with
 * N = (t0_us + start_us) * fps_num + k * fps_den * US and D = US * fps_num;
 * in tb units multiply by tb.den / tb.num. */
int64_t rv_grid_floor_pts(const rv_grid *g, int64_t k)
{
    i128 n = ((i128)g->t0_us + g->start_us) * g->fps_num + (i128)k * g->fps_den * US;
    i128 d = (i128)US * g->fps_num * g->tb.num;
    i128 r = floor_div(n * g->tb.den, d);
    if (r > INT64_MAX)
        return INT64_MAX;
    if (r < INT64_MIN)
        return INT64_MIN;
    return (int64_t)r;
}

int64_t rv_grid_first_k_at_or_after(const rv_grid *g, int64_t pts, int64_t k_from)
{
    /* pts <= N(k) * tb.den / (D * tb.num) (pts integer, so floor does not matter)
     * <=> k * fps_den * US * tb.den >= pts * D * tb.num - (t0_us + start_us) *
     * fps_num * tb.den. */
    i128 lhs = (i128)pts * ((i128)US * g->fps_num * g->tb.num) -
               ((i128)g->t0_us + g->start_us) * g->fps_num * g->tb.den;
    i128 step = (i128)g->fps_den * US * g->tb.den;
    i128 k;
    if (lhs <= 0)
        k = -((-lhs) / step); /* ceil of a non-positive quotient */
    else
        k = (lhs + step - 1) / step;
    if (k < k_from)
        return k_from;
    if (k > INT64_MAX)
        return INT64_MAX;
    return (int64_t)k;
}

int rv_grid_valid(const rv_grid *g, int64_t k)
{
    return k >= g->k_first && k < g->k_end;
}

double rv_grid_time(const rv_grid *g, int64_t k)
{
    return rv_grid_seconds(g->start_us, g->fps_num, g->fps_den, k);
}

double rv_grid_pts_seconds(const rv_grid *g, int64_t pts)
{
    /* (pts - time_origin) x tb plus time_origin's part below a microsecond:
     * small integers, so one correctly rounded division */
    i128 resid = (i128)g->time_origin * g->tb.num * US - (i128)g->t0_us * g->tb.den;
    i128 n = ((i128)pts - g->time_origin) * g->tb.num * US + resid;
    return (double)n / ((double)g->tb.den * US);
}
