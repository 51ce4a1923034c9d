/* cli_flags.c: the table-driven flag parser of every subcommand and the takes of
 * the flags several commands share (cli_flags.h). */
#include "cli_flags.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "rv_cp_attention.h"
#include "rv_ingest.h"
#include "rv_vit.h"

/* 1 when arg is flag itself or "flag=...". */
static int flag_is(const char *arg, const char *flag)
{
    size_t n = strlen(flag);
    return strncmp(arg, flag, n) == 0 && (arg[n] == '\0' || arg[n] == '=');
}

/* The value of the flag at argv[*i]: "--flag VALUE" (advances *i past the value)
 * or "--flag=VALUE"; NULL, after a usage error naming the flag, when it is
 * missing or empty. */
static const char *flag_value(const char *cmd, int argc, char **argv, int *i)
{
    const char *arg = argv[*i];
    const char *eq = strchr(arg, '=');
    const char *v;
    if (eq && arg[0] == '-') {
        v = eq + 1;
    } else if (*i + 1 >= argc) {
        cli_usage_error(cmd, "flag '%s' needs a value", arg);
        return NULL;
    } else {
        *i += 1;
        v = argv[*i];
    }
    /* No flag takes an empty value: `-o ""` would otherwise fail only after the
     * work, when the output is written. */
    if (!v[0]) {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)strcspn(arg, "="), arg);
        cli_usage_error(cmd, "flag '%s' needs a value, not an empty one", name);
        return NULL;
    }
    return v;
}

/* The first entry of flags[0..n) that names arg (NULL: none). */
static const cli_flag *flag_find(const cli_flag *flags, int n, const char *arg)
{
    for (int k = 0; k < n; k++) {
        const cli_flag *f = &flags[k];
        if (f->kind == RV_CLI_SWITCH ? strcmp(arg, f->name) == 0 ||
                                           (f->alias && strcmp(arg, f->alias) == 0)
                                     : flag_is(arg, f->name) ||
                                           (f->alias && flag_is(arg, f->alias)))
            return f;
    }
    return NULL;
}

/* A table's bound as an int64_t: INT64_MAX is 2^63 as a double, one past it. */
static int64_t bound_i64(double v)
{
    return v >= 0x1p63 ? INT64_MAX : (int64_t)v;
}

/* --device's value: cpu or cuda, the argv string at dst. */
static int take_device(const char *cmd, const char *v, const char **dst)
{
    if (strcmp(v, "cpu") != 0 && strcmp(v, "cuda") != 0)
        return cli_usage_error(cmd, "--device wants cpu or cuda, got '%s'", v);
#ifndef RINGVIT_HAVE_CUDA
    if (strcmp(v, "cuda") == 0)
        return cli_usage_error(cmd, "--device cuda: this build has no CUDA (configure where "
                                  "the CUDA toolkit is installed, -DRINGVIT_CUDA=ON)");
#endif
    *dst = v;
    return 0;
}

static int take(const char *cmd, int argc, char **argv, int *i, const cli_flag *f)
{
    if (f->kind == RV_CLI_SWITCH) {
        if (f->take)
            return f->take(cmd, f->name, NULL, f->dst);
        *(int *)f->dst = 1;
        return 0;
    }
    const char *flag = argv[*i]; /* the name as given, for the messages */
    const char *v = flag_value(cmd, argc, argv, i);
    rv_ingest_opts *io = f->dst;
    if (!v)
        return RV_EXIT_USAGE;
    switch (f->kind) {
    case RV_CLI_INT:
        return cli_parse_int(cmd, flag, v, (int)f->lo, (int)f->hi, f->dst);
    case RV_CLI_I64:
        return cli_parse_i64(cmd, flag, v, bound_i64(f->lo), bound_i64(f->hi), f->dst);
    case RV_CLI_DOUBLE:
        return cli_parse_double(cmd, flag, v, f->lo, f->hi, f->dst);
    case RV_CLI_FLOAT:
        return cli_parse_float(cmd, flag, v, (float)f->lo, (float)f->hi, f->dst);
    case RV_CLI_FPS:
        if (rv_ingest_parse_fps(v, &io->fps_num, &io->fps_den) != RV_OK)
            return cli_usage_error(cmd, "%s wants a frame rate like 30, 29.97 or 30000/1001 "
                                   "(above 0, at most 1000), got '%s'", f->name, v);
        return 0;
    case RV_CLI_DEVICE:
        return take_device(cmd, v, f->dst);
    case RV_CLI_PRECISION:
        if (rv_precision_parse(v, f->dst) != RV_OK)
            return cli_usage_error(cmd, "%s wants auto, f32 or bf16, got '%s'", f->name, v);
        return 0;
    case RV_CLI_TEXT:
        *(const char **)f->dst = v;
        return 0;
    case RV_CLI_SWITCH:
    case RV_CLI_CUSTOM:
        break;
    }
    return f->take(cmd, f->name, v, f->dst);
}

/* The flag at argv[*i] taken by f (*i advanced past its value; *f->seen set). */
static int flag_take(const char *cmd, int argc, char **argv, int *i, const cli_flag *f)
{
    int rc = take(cmd, argc, argv, i, f);
    if (f->seen)
        *f->seen = 1;
    return rc;
}

int cli_flags_parse(const char *cmd, int argc, char **argv, const cli_flag *flags, int n,
                    const cli_operands *ops)
{
    int dashed = 0, rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i];
        const cli_flag *f = dashed ? NULL : flag_find(flags, n, a);
        if (f)
            rc = flag_take(cmd, argc, argv, &i, f);
        else if (ops && !dashed && strcmp(a, "--") == 0)
            dashed = 1;
        else if (!ops || (!dashed && a[0] == '-' && a[1] != '\0'))
            rc = cli_unknown_arg(cmd, a);
        else if (ops->take)
            rc = ops->take(cmd, a, dashed, ops->ctx);
        else if (*ops->one)
            rc = cli_usage_error(cmd, "one %s at a time (got '%s' and '%s')", ops->what,
                                 *ops->one, a);
        else
            *ops->one = a;
    }
    return rc;
}

int cli_take_backend(const char *cmd, const char *name, const char *value, void *dst)
{
    if (strcmp(value, "local") && strcmp(value, "mpi") && strcmp(value, "nccl"))
        return cli_usage_error(cmd, "%s wants local, mpi or nccl, got '%s'", name, value);
    *(const char **)dst = value;
    return 0;
}

int cli_take_strategy(const char *cmd, const char *name, const char *value, void *dst)
{
    if (rv_cp_strategy_parse(value, dst) != RV_OK)
        return cli_usage_error(cmd, "%s: %s", name, rv_last_error()); /* the table's names */
    return 0;
}

int cli_take_span(const char *cmd, const char *name, const char *value, void *dst)
{
    if (rv_span_parse(value, dst) != RV_OK)
        return cli_usage_error(cmd, "%s: %s", name, rv_last_error());
    return 0;
}
