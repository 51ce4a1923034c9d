/* kernel_paths.h (tests only): force one CPU attention kernel set
 * (RINGVIT_CPU_KERNELS) for the rest of a test. Criterion runs every test in its
 * own process, so the environment change stays in that test. On a CPU that lacks
 * the set, forcing it must be refused: that refusal is what the test then checks
 * (a CPU backend cannot be made, and the message names the variable and the set),
 * and kernel_path_force returns 0 for the caller to stop there; so it does for
 * the set the file's other tests run: the best one, or the one RINGVIT_CPU_KERNELS
 * names when the whole suite runs with a set forced (then the best set is forced
 * here, so every set runs on every run of the suite). Shared by
 * test_attention.c, test_attention_span.c and test_cp_attention.c. */
#ifndef RV_TEST_KERNEL_PATHS_H
#define RV_TEST_KERNEL_PATHS_H

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <stdlib.h>
#include <string.h>

#include "rv_backend.h"

/* 1: path is now the kernel set in use; 0: the CPU lacks it and forcing it was
 * refused as it must be, or it is the set every other test of the file already
 * runs (the environment's: checked to be the best when nothing is forced). */
static inline int kernel_path_force(const char *path)
{
    const char *forced = getenv("RINGVIT_CPU_KERNELS");
    const char *others = rv_cpu_kernels(); /* the set the file's other tests get */
    cr_assert_not_null(others, "RINGVIT_CPU_KERNELS=%s: %s", forced, rv_last_error());
    if (!forced || !forced[0] || strcmp(forced, "auto") == 0)
        cr_assert_str_eq(others, rv_cpu_kernels_best(), "the default set %s is not the best, %s",
                         others, rv_cpu_kernels_best());
    if (strcmp(path, others) == 0) {
        cr_log_info("%s kernels: the set in use, run by the other tests", path);
        return 0;
    }
    cr_assert_eq(setenv("RINGVIT_CPU_KERNELS", path, 1), 0);
    if (rv_cpu_kernels_supported(path)) {
        cr_assert_str_eq(rv_cpu_kernels(), path, "RINGVIT_CPU_KERNELS=%s not in use", path);
        return 1;
    }
    rv_backend *be = NULL;
    rv_status st = rv_backend_cpu_create(1, &be);
    cr_assert_eq(st, RV_ERR_UNSUPPORTED, "forcing %s kernels on a CPU without them: %d", path,
                 st);
    cr_assert_null(be);
    cr_assert(strstr(rv_last_error(), "RINGVIT_CPU_KERNELS=") &&
                  strstr(rv_last_error(), path),
              "refusal names the variable and the set: %s", rv_last_error());
    cr_log_info("%s kernels: this CPU lacks them; checked that forcing them is refused", path);
    return 0;
}

#endif
