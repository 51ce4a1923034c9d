/* main.c: entry of the `ringvit` command. Parses the global options, installs the
 * stderr log sink, and dispatches to a subcommand from the table below; every
 * subcommand lives in its own apps/cmd_NAME.c (see apps.h for how to add one).
 *
 *   ringvit [-v|-q] COMMAND [options]     run a subcommand
 *   ringvit --help | help [COMMAND...]    usage, or one command's help
 *   ringvit --version                     version and build facts
 *
 * Exit status: 0 ok, 1 runtime failure, 2 usage error (cli.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps.h"
#include "cli.h"
#include "rv_backend.h"
#include "rv_comm.h"
#include "rv_flat.h"

/* The subcommands, in the order `ringvit --help` lists them. */
static const cli_command *const commands[] = {
    &cmd_probe,
    &cmd_frames,
    &cmd_tokens,
    &cmd_embed,
    &cmd_labels,
    &cmd_export,
    &cmd_init,
    &cmd_inspect,
    &cmd_finetune,
    &cmd_bench,
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static const cli_command *find_command(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i]->name, name) == 0)
            return commands[i];
    return NULL;
}

static void print_usage(FILE *f)
{
    fputs("usage: ringvit [-v | -q] COMMAND [options]\n"
          "       ringvit help COMMAND | --help | --version\n"
          "\n"
          "ringvit turns long recordings into embeddings with a context-parallel\n"
          "vision transformer and ring attention.\n"
          "\n"
          "commands:\n",
          f);
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-10s %s\n", commands[i]->name, commands[i]->summary);
    fprintf(f, "  %-10s %s\n", "help", "show the help of a command (help bench attention)");
    fputs("\n"
          "options:\n"
          "  -h, --help     show this help and exit\n"
          "      --version  show the version and build facts (CUDA, MPI, GEMM) and exit\n"
          "  -v, --verbose  more log output on stderr (-vv: debug)\n"
          "  -q, --quiet    less log output on stderr (-qq: errors only)\n"
          "\n"
          "environment:\n"
          "  RINGVIT_LOG          log level: error, warn, info (default) or debug\n"
          "  RINGVIT_CPU_KERNELS  CPU attention kernels: avx512, avx2, blas or auto\n"
          "                       (default auto: the best this CPU runs; see --version);\n"
          "                       avx2 also caps oneDNN's GEMMs at AVX2 (an AVX2-only CPU)\n"
          "  RINGVIT_CPU_BF16     0 refuses --precision bf16 on the CPU whatever it has\n"
          "\n"
          "exit status: 0 success, 1 runtime failure, 2 usage error.\n"
          "Run 'ringvit COMMAND --help' for the options of one command.\n"
          "\n"
          "examples:\n"
          "  ringvit probe talk.mp4\n"
          "  ringvit embed talk.mp4 --model videomae-base/ -o talk.safetensors\n"
          "  ringvit help embed\n"
          "\n"
          "More: README.md and docs/ (docs/media-commands.md: what every command\n"
          "shares; docs/environment.md: the environment variables)\n",
          f);
}

static void print_version(void)
{
    char *text = NULL;
    if (rv_version_text(&text) == RV_OK)
        fputs(text, stdout);
    else
        printf("ringvit: %s\n", rv_last_error());
    free(text);
}

/* A command's help, then, for a command with --backend or --device, what this
 * build can run (the help lists every value a build may have). */
static void print_help(const cli_command *cmd)
{
    fputs(cmd->help, stdout);
    if (!strstr(cmd->help, "--backend") && !strstr(cmd->help, "--device"))
        return;
    printf("\nThis build: --backend local%s%s, --device cpu%s.\n",
           rv_comm_backend_built("mpi") ? ", mpi" : " (no MPI)",
           rv_comm_backend_built("nccl") ? ", nccl" : " (no NCCL)",
#ifdef RINGVIT_HAVE_CUDA
           ", cuda"
#else
           " (no CUDA)"
#endif
    );
}

/* `ringvit help [COMMAND [SUB...]]`: argv[0] is "help". */
static int help_main(int argc, char **argv)
{
    if (argc < 2) {
        print_usage(stdout);
        return RV_EXIT_OK;
    }
    if (strcmp(argv[1], "help") == 0) {
        puts("usage: ringvit help COMMAND [SUBCOMMAND]\n"
             "\n"
             "Shows the help of a command; the same as 'ringvit COMMAND --help'.");
        return RV_EXIT_OK;
    }
    const cli_command *cmd = find_command(argv[1]);
    if (!cmd)
        return cli_usage_error(NULL, "unknown command '%s'", argv[1]);
    if (argc == 2) {
        print_help(cmd);
        return RV_EXIT_OK;
    }
    /* `help bench attention` -> `bench attention --help`: the help of a nested
     * command belongs to that command. */
    int n = argc - 1;
    char **sub = calloc((size_t)n + 2, sizeof *sub);
    if (!sub) {
        cli_error("out of memory");
        return RV_EXIT_FAIL;
    }
    for (int i = 0; i < n; i++)
        sub[i] = argv[i + 1];
    sub[n] = "--help";
    sub[n + 1] = NULL;
    int rc = cmd->main(n + 1, sub);
    free(sub);
    return rc;
}

static int run(int argc, char **argv)
{
    int verbosity = 0;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            print_usage(stdout);
            return RV_EXIT_OK;
        } else if (strcmp(a, "--version") == 0) {
            print_version();
            return RV_EXIT_OK;
        } else if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            verbosity++;
        } else if (strcmp(a, "-vv") == 0) {
            verbosity += 2;
        } else if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
            verbosity--;
        } else if (strcmp(a, "-qq") == 0) {
            verbosity -= 2;
        } else {
            return cli_usage_error(NULL, "unknown option '%s'", a);
        }
    }
    cli_log_init(verbosity);

    if (i >= argc) {
        print_usage(stderr);
        return RV_EXIT_USAGE;
    }
    const char *name = argv[i];
    if (strcmp(name, "help") == 0)
        return help_main(argc - i, argv + i);
    const cli_command *cmd = find_command(name);
    if (!cmd)
        return cli_usage_error(NULL, "unknown command '%s'", name);
    if (i + 1 < argc && cli_is_help(argv[i + 1])) {
        print_help(cmd);
        return RV_EXIT_OK;
    }
    return cmd->main(argc - i, argv + i);
}

int main(int argc, char **argv)
{
    /* Library messages reach stderr from the first call on; run() re-installs the
     * sink at the level RINGVIT_LOG and the global options ask for. */
    rv_log_set(cli_log_stderr, NULL, RV_LOG_INFO);
    int rc = run(argc, argv);
    /* A result that could not be written is a failure, not a silent success. */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_error("could not write to standard output");
        if (rc == RV_EXIT_OK)
            rc = RV_EXIT_FAIL;
    }
    return rc;
}
