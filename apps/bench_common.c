/* bench_common.c: the sgemm baseline of the compute benches (bench_common.h). */
#include "bench_common.h"

#include <stdlib.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

rv_status rv_bench_sgemm_rate(rv_backend *be, int repeat, double *gflops)
{
    const int n = 2048;
    size_t nn = (size_t)n * n;
    float *a = malloc(sizeof(float) * nn), *b = malloc(sizeof(float) * nn),
          *c = malloc(sizeof(float) * nn);
    rv_status st = RV_OK;
    if (!a || !b || !c) {
        st = rv_fail(RV_ERR_NOMEM, "sgemm baseline: out of memory");
        goto end;
    }
    for (size_t i = 0; i < nn; i++) {
        a[i] = (float)((i * 7919) % 1000) * 1e-3f;
        b[i] = (float)((i * 104729) % 1000) * 1e-3f;
    }
    double best = 1e30;
    for (int r = 0; r <= repeat; r++) { /* the first call warms up */
        double t0 = now_s();
        st = be->gemm(be, 0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double dt = now_s() - t0;
        if (st != RV_OK)
            goto end;
        if (r > 0 && dt < best)
            best = dt;
    }
    *gflops = 2.0 * n * n * (double)n / best * 1e-9;
end:
    free(a);
    free(b);
    free(c);
    return st;
}
