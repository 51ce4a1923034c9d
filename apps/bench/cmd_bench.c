/* cmd_bench.c: `ringvit bench BENCH [options]`, the micro-benchmarks. This file
 * only lists the benches and dispatches to one of them with argv shifted by one
 * (argv[0] becomes the bench name), or prints its help for --help; each bench
 * parses its own flags (cli_flags_parse) and reports through bench_common.h in the
 * nccl-tests shape: one row per size, an OK/FAILED footer, --json for machines. */
#include <stdio.h>
#include <string.h>

#include "apps.h"
#include "cli.h"

/* Keep in step with the "benches:" list of BENCH_HELP. */
static const bench_cmd *const benches[] = {
    &bench_attention, &bench_comm, &bench_encoder,
    &bench_ingest,    &bench_ring, &bench_train,
};

#define BENCH_HELP                                                                     \
    "usage: ringvit bench BENCH [options]\n"                                           \
    "\n"                                                                               \
    "Times one compute kernel or communicator. A bench prints a table and an\n"       \
    "OK/FAILED footer, or one JSON object with --json.\n"                             \
    "\n"                                                                               \
    "benches:\n"                                                                       \
    "  attention   attention block forward (and backward) of the compute backend\n"    \
    "  comm        ring shift and allreduce of a communicator (local threads, MPI)\n"   \
    "  encoder     encoder forward with context parallelism (tokens/s, MFU, memory)\n" \
    "  ingest      media ingest (decode, sample, resize) against the ffmpeg command\n"  \
    "  ring        context-parallel attention (ring, allgather, ulysses) vs one rank\n"  \
    "  train       one training step (forward + backward) with context parallelism\n"    \
    "\n"                                                                               \
    "Run 'ringvit bench BENCH --help' for the options of one bench.\n"                  \
    "\n"                                                                               \
    "Exit status: 0 OK, 1 FAILED (a check of the bench) or runtime failure, 2 usage.\n"  \
    "\n"                                                                               \
    "examples:\n"                                                                      \
    "  ringvit bench attention --seq 4096 --heads 4 --dim 64\n"                        \
    "  ringvit bench ring --cp 2 --seq 32768 --causal --json\n"                        \
    "\n"                                                                               \
    "More: docs/benchmarks.md (every bench, the current numbers)\n"

static int bench_main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(BENCH_HELP, stderr);
        return cli_usage_error("bench", "which bench? name one of the benches above");
    }
    const char *name = argv[1];
    if (cli_is_help(name)) {
        fputs(BENCH_HELP, stdout);
        return RV_EXIT_OK;
    }
    if (name[0] == '-')
        return cli_unknown_arg("bench", name);
    for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++) {
        if (strcmp(benches[i]->name, name) != 0)
            continue;
        if (argc >= 3 && cli_is_help(argv[2])) {
            fputs(benches[i]->help, stdout);
            return RV_EXIT_OK;
        }
        return benches[i]->main(argc - 1, argv + 1);
    }
    return cli_usage_error("bench", "unknown bench '%s'", name);
}

const cli_command cmd_bench = {
    .name = "bench",
    .summary = "time the compute kernels and communicators (bench attention, comm, ring)",
    .main = bench_main,
    .help = BENCH_HELP,
};
