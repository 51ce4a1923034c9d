/* rv_clock.h: the clocks of ringvit, one place for every timing and deadline:
 * the monotonic clock that timings, stats and communication deadlines read, the
 * calling thread's CPU time, and the wall-clock instant a pthread_cond_timedwait
 * on a default (CLOCK_REALTIME) condition variable wants. Like rv_status.h it sits
 * in kernels/, the bottom of the stack, so every module may use it. */
#ifndef RV_CLOCK_H
#define RV_CLOCK_H

#include <time.h>

#include "rv_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CLOCK_MONOTONIC, seconds: differences are elapsed time; the origin is arbitrary. */
RV_API double rv_clock_s(void);

/* CLOCK_THREAD_CPUTIME_ID, seconds: CPU time of the calling thread. */
RV_API double rv_clock_thread_cpu_s(void);

/* CLOCK_REALTIME now plus seconds (>= 0), normalised: the absolute time that
 * pthread_cond_timedwait takes on a condition variable of the default clock. */
RV_API struct timespec rv_clock_realtime_after(double seconds);

#ifdef __cplusplus
}
#endif
#endif
