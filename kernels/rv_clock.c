/* rv_clock.c: the clocks of rv_clock.h over clock_gettime. */
#include "rv_clock.h"

static double seconds_of(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

double rv_clock_s(void)
{
    return seconds_of(CLOCK_MONOTONIC);
}

double rv_clock_thread_cpu_s(void)
{
    return seconds_of(CLOCK_THREAD_CPUTIME_ID);
}

struct timespec rv_clock_realtime_after(double seconds)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    const time_t whole = (time_t)seconds;
    t.tv_sec += whole;
    t.tv_nsec += (long)((seconds - (double)whole) * 1e9);
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}
