/* gpu_test_main.h: the main of a GPU test, included once at the end of its file:
 * runs the file's Criterion tests where the build has the CUDA backend and a CUDA
 * device is visible, else prints why it is skipped (no GPU) and exits 77, which
 * ctest reports as skipped. */
#ifndef RV_GPU_TEST_MAIN_H
#define RV_GPU_TEST_MAIN_H

#include <criterion/criterion.h>
#include <stdio.h>

#include "rv_cuda.h"

#ifdef RINGVIT_HAVE_CUDA

int main(int argc, char **argv)
{
    if (rv_cuda_device_count() == 0) {
        printf("SKIPPED: no GPU: no CUDA device is visible\n");
        return 77;
    }
    struct criterion_test_set *tests = criterion_initialize();
    int result = 0;
    if (criterion_handle_args(argc, argv, true))
        result = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
    return result;
}

#else /* !RINGVIT_HAVE_CUDA */

int main(void)
{
    printf("SKIPPED: no GPU: this build has no CUDA backend (configure where nvcc is installed)\n");
    return 77;
}

#endif

#endif
