/* apps.h: the subcommands of the `ringvit` command. Each subcommand lives in its
 * own file (apps/cmd_NAME.c) and exports one cli_command; main.c lists them in its
 * table. Adding a subcommand (probe, frames, tokens, embed, finetune, init):
 *   1. write apps/cmd_NAME.c defining `const cli_command cmd_NAME = {...};`
 *   2. declare it below;
 *   3. add `&cmd_NAME,` to the table in main.c.
 * Every .c file in apps/ is globbed into the executable, so CMake needs no change. */
#ifndef RV_APPS_H
#define RV_APPS_H

typedef struct cli_command {
    const char *name;    /* "bench" */
    const char *summary; /* one line for `ringvit --help` */
    /* argv[0] is the subcommand name; returns an exit code (cli.h: 0, 1, 2).
     * "-h"/"--help" right after the name never reaches main: main.c prints help. */
    int (*main)(int argc, char **argv);
    const char *help; /* full text for `ringvit NAME --help` and `ringvit help NAME` */
} cli_command;

/* cmd_bench.c: `ringvit bench BENCH ...` */
extern const cli_command cmd_bench;

/* cmd_probe.c: `ringvit probe FILE [--json]` */
extern const cli_command cmd_probe;

/* cmd_frames.c: `ringvit frames FILE -o OUT.safetensors ...` */
extern const cli_command cmd_frames;

/* cmd_tokens.c: `ringvit tokens FILE [--cp N] [--json] [-o OUT.safetensors] ...` */
extern const cli_command cmd_tokens;

/* cmd_inspect.c: `ringvit inspect MODEL [--json]` */
extern const cli_command cmd_inspect;

/* cmd_init.c: `ringvit init --preset NAME -o OUT.safetensors [--seed S] ...` */
extern const cli_command cmd_init;

/* cmd_embed.c: `ringvit embed INPUT... [-o OUT.safetensors | --out-dir DIR] ...`
 * (its parts: embed.h) */
extern const cli_command cmd_embed;

/* cmd_labels.c: `ringvit labels OUT.safetensors [--top K] [--json] ...` */
extern const cli_command cmd_labels;
/* cmd_export.c: `ringvit export DIR_OR_FILES... --to EXPORT ...` (rv_export.h) */
extern const cli_command cmd_export;

/* cmd_finetune.c: `ringvit finetune --task classify|mae --manifest LIST -o OUT ...`
 * (its parts: finetune.h) */
extern const cli_command cmd_finetune;

/* A bench of `ringvit bench` (cmd_bench.c lists them, dispatches with argv[0]
 * the bench's name and prints its help for --help); main returns an exit code. */
typedef struct bench_cmd {
    const char *name;
    const char *help;
    int (*main)(int argc, char **argv);
} bench_cmd;

extern const bench_cmd bench_attention; /* bench_attention.c: the attention block */
extern const bench_cmd bench_comm;      /* bench_comm.c: ring shift and allreduce */
extern const bench_cmd bench_encoder;   /* bench_encoder.c: encoder forward with CP */
extern const bench_cmd bench_ingest;    /* bench_ingest.c: media ingest vs ffmpeg */
extern const bench_cmd bench_ring;      /* bench_ring.c: CP attention vs one rank */
extern const bench_cmd bench_train;     /* bench_train.c: one training step with CP */

#endif
