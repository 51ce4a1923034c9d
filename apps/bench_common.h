/* bench_common.h: what the benches share: the sgemm rate every compute bench
 * sets its figures against (measured in the same run, on the same backend and
 * threads). */
#ifndef RV_BENCH_COMMON_H
#define RV_BENCH_COMMON_H

#include "rv_backend.h"

/* Fastest of `repeat` runs (after one warm-up) of the backend's sgemm on
 * (2048 x 2048) @ (2048 x 2048), in GFLOP/s. */
rv_status rv_bench_sgemm_rate(rv_backend *be, int repeat, double *gflops);

#endif
