/* ingest_time.h: the sample-time arithmetic that needs no FFmpeg, shared by the
 * sample grid (sample_grid.c) and the options (ingest_opts.c), which a build
 * without FFmpeg keeps, and the packet estimate the corrupt-data limit is a
 * share of (ingest_stream.c). Internal to ingest/. */
#ifndef RV_INGEST_TIME_H
#define RV_INGEST_TIME_H

#include <stdint.h>

/* t_k - t0 = start + k / fps in seconds, start given in microseconds: exact
 * integers N / D, then one correctly rounded division. */
double rv_grid_seconds(int64_t start_us, int64_t fps_num, int64_t fps_den, int64_t k);

/* Packets of one stream expected in [from_s, to_s) s of it (to_s = INFINITY: to
 * its end): the whole stream holds its stated count (stated > 0), else
 * duration_s x rate (packets/s; duration NAN or <= 0: unknown); a part holds
 * the whole's share by length, else (duration unknown) its length x rate.
 * -1 when none of these is known. */
int64_t rv_ingest_packets_expected(int64_t stated, double duration_s, double rate,
                                   double from_s, double to_s);

#endif
