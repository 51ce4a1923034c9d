/* ingest_time.h: the sample-time arithmetic that needs no FFmpeg, shared by the
 * sample grid (sample_grid.c) and the options (ingest_opts.c), which a build
 * without FFmpeg keeps. Internal to ingest/. */
#ifndef RV_INGEST_TIME_H
#define RV_INGEST_TIME_H

#include <stdint.h>

/* t_k - t0 = start + k / fps in seconds, start given in microseconds: exact
 * integers N / D, then one correctly rounded division. */
double rv_grid_seconds(int64_t start_us, int64_t fps_num, int64_t fps_den, int64_t k);

#endif
