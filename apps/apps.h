/* apps.h: the subcommands of the `ringvit` command. Each subcommand lives in its
 * own file (apps/cmd_NAME.c) and exports one rv_command; main.c lists them in its
 * table. Adding a subcommand (probe, frames, tokens, embed, finetune, init):
 *   1. write apps/cmd_NAME.c defining `const rv_command rv_cmd_NAME = {...};`
 *   2. declare it below;
 *   3. add `&rv_cmd_NAME,` to the table in main.c.
 * Every .c file in apps/ is globbed into the executable, so CMake needs no change. */
#ifndef RV_APPS_H
#define RV_APPS_H

typedef struct rv_command {
    const char *name;    /* "bench" */
    const char *summary; /* one line for `ringvit --help` */
    /* argv[0] is the subcommand name; returns an exit code (cli.h: 0, 1, 2).
     * "-h"/"--help" right after the name never reaches main: main.c prints help. */
    int (*main)(int argc, char **argv);
    const char *help; /* full text for `ringvit NAME --help` and `ringvit help NAME` */
} rv_command;

/* cmd_bench.c: `ringvit bench BENCH ...` */
extern const rv_command rv_cmd_bench;

/* cmd_probe.c: `ringvit probe FILE [--json]` */
extern const rv_command rv_cmd_probe;

/* cmd_frames.c: `ringvit frames FILE -o OUT.safetensors ...` */
extern const rv_command rv_cmd_frames;

/* cmd_tokens.c: `ringvit tokens FILE [--cp N] [--json] [-o OUT.safetensors] ...` */
extern const rv_command rv_cmd_tokens;

/* cmd_inspect.c: `ringvit inspect MODEL [--json]` */
extern const rv_command rv_cmd_inspect;

/* cmd_init.c: `ringvit init --preset NAME -o OUT.safetensors [--seed S] ...` */
extern const rv_command rv_cmd_init;

/* cmd_embed.c: `ringvit embed INPUT... [-o OUT.safetensors | --out-dir DIR] ...`
 * (its parts: embed.h) */
extern const rv_command rv_cmd_embed;

/* cmd_finetune.c: `ringvit finetune --task classify|mae --manifest LIST -o OUT ...`
 * (its parts: finetune.h) */
extern const rv_command rv_cmd_finetune;

/* bench_ingest.c: `ringvit bench ingest FILE ...`; argv[0] is "ingest".
 * Handles its own --help; returns an exit code. */
int rv_bench_ingest(int argc, char **argv);

/* bench_attention.c: `ringvit bench attention ...`; argv[0] is "attention".
 * Handles its own --help; returns an exit code. */
int rv_bench_attention(int argc, char **argv);

/* bench_comm.c: `ringvit bench comm ...` (ring shift and allreduce of a
 * communicator); argv[0] is "comm". Handles its own --help. */
int rv_bench_comm(int argc, char **argv);
/* bench_ring.c: `ringvit bench ring ...` (context-parallel attention). */
int rv_bench_ring(int argc, char **argv);
/* bench_encoder.c: `ringvit bench encoder ...` (the encoder forward with context
 * parallelism). */
int rv_bench_encoder(int argc, char **argv);
/* bench_train.c: `ringvit bench train ...` (one training step: forward, backward
 * with context parallelism). */
int rv_bench_train(int argc, char **argv);

#endif
