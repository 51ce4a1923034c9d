/* rotation.c: the clockwise rotation that shows a stream upright, read from its
 * display matrix (phones record portrait video as landscape plus a matrix). */
#include <math.h>

#include <libavutil/display.h>

#include "ingest_internal.h"

int rv_stream_rotation(const AVStream *st)
{
    size_t size = 0;
    const uint8_t *m = av_stream_get_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, &size);
    if (!m || size < 9 * sizeof(int32_t))
        return 0;
    /* av_display_rotation_get: counter-clockwise degrees in [-180, 180]. */
    double ccw = av_display_rotation_get((const int32_t *)m);
    if (isnan(ccw))
        return 0;
    long cw = lround(-ccw);
    cw = ((cw % 360) + 360) % 360;
    if (cw % 90 != 0)
        return 0; /* not a quarter turn: shown as coded */
    return (int)cw;
}
