/* cli_flags.h: the one flag parser of every subcommand. A command lists its flags
 * in a table of cli_flag (name, alias, kind, destination, range) and
 * cli_flags_parse walks argv against it, with the usage errors of cli.h: a bad
 * value names the flag and its range, an argument no entry names goes to
 * cli_unknown_arg. A flag with a value takes it as "--flag VALUE" or
 * "--flag=VALUE", never empty; a switch matches exactly ("--json=1" is unknown). Tables share fragments: the ingest flags
 * (ingest_cli.h), the model flags (model_cli.h), the bench flags (bench_common.h). */
#ifndef RV_CLI_FLAGS_H
#define RV_CLI_FLAGS_H

typedef enum cli_flag_kind {
    RV_CLI_SWITCH, /* no value: *(int *)dst = 1, or with take: take(cmd, name, NULL, dst) */
    RV_CLI_INT,    /* *(int *)dst in [lo, hi] */
    RV_CLI_I64,    /* *(int64_t *)dst in [lo, hi] (hi INT64_MAX: no bound) */
    RV_CLI_DOUBLE, /* *(double *)dst in [lo, hi] */
    RV_CLI_FLOAT,  /* *(float *)dst in [lo, hi] */
    RV_CLI_TEXT,   /* *(const char **)dst = the value (argv's) */
    RV_CLI_FPS,    /* a frame rate (rv_ingest_parse_fps: 30, 29.97, 30000/1001) into the
                      rv_ingest_opts at dst */
    RV_CLI_DEVICE, /* *(const char **)dst = cpu or cuda (cuda only in a CUDA build) */
    RV_CLI_PRECISION, /* *(rv_precision *)dst = auto, f32 or bf16 (whether the device
                         computes it here is the command's check: cli_check_precision) */
    RV_CLI_CUSTOM, /* take(cmd, name, value, dst) */
} cli_flag_kind;

/* A flag's own parser: name is the table's (f->name), value the flag's value
 * (NULL for a switch). Returns 0, or an exit code after a message. */
typedef int (*cli_take_fn)(const char *cmd, const char *name, const char *value, void *dst);

/* One flag of a table. */
typedef struct cli_flag {
    const char *name;  /* "--output" */
    const char *alias; /* "-o" (NULL: none) */
    cli_flag_kind kind;
    void *dst;
    double lo, hi;     /* the range of the numeric kinds */
    cli_take_fn take;
    int *seen;         /* set to 1 when the flag is given (NULL: not kept) */
} cli_flag;

#define RV_CLI_NFLAGS(table) ((int)(sizeof(table) / sizeof(table)[0]))

/* The operands of a command: the arguments that are "-" or do not start with '-',
 * and every argument after "--". Either at most one, into *one (a second is "one
 * WHAT at a time (got 'a' and 'b')"), or each in turn to take (dashed: it came
 * after "--"), which returns 0 or an exit code after a message. */
typedef struct cli_operands {
    const char *what;  /* "FILE", "MODEL" */
    const char **one;
    int (*take)(const char *cmd, const char *arg, int dashed, void *ctx);
    void *ctx;
} cli_operands;

/* Parses argv[1..argc) of `ringvit <cmd>` against flags[0..n) (the first entry
 * naming an argument takes it) and ops (NULL: the command takes no operands, and
 * "--" is an unknown flag as any other). Stops at the first bad argument: returns
 * 0, or an exit code after a usage message. */
int cli_flags_parse(const char *cmd, int argc, char **argv, const cli_flag *flags, int n,
                    const cli_operands *ops);

/* Takes of flags more than one command has, with the texts of embed and finetune:
 * --backend local|mpi|nccl (the value, as RV_CLI_TEXT), --strategy
 * ring|allgather|ulysses (an rv_cp_strategy), --attention SPAN (an rv_span). */
int cli_take_backend(const char *cmd, const char *name, const char *value, void *dst);
int cli_take_strategy(const char *cmd, const char *name, const char *value, void *dst);
int cli_take_span(const char *cmd, const char *name, const char *value, void *dst);

#endif
