/* cmd_export.c: `ringvit export DIR_OR_FILES... --to EXPORT`, finished embed
 * outputs into .npy shards and row-aligned JSON-lines metadata for vector
 * search. The library does the work (rv_export.h: open the export, add the
 * outputs, finish); this file parses the flags, takes a resumed export's
 * settings for the flags not given, and prints what was taken and written.
 *
 * Exit status: 0 exported (or nothing new), 1 refused or failed (the message
 * names the file and the problem; the export is left as it was), 2 usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "apps.h"
#include "cli.h"
#include "cli_flags.h"
#include "rv_clock.h"
#include "rv_export.h"

#define CMD "export"

static const char help_text[] =
    "usage: ringvit export DIR_OR_FILES... --to EXPORT [--level block|segment|global]\n"
    "                      [--dtype f32|f16] [--normalize] [--shard-rows N] [--resume]\n"
    "\n"
    "Writes the embeddings of finished 'ringvit embed' outputs as an export for\n"
    "vector search (FAISS, autofaiss, embedding-reader, Milvus): EXPORT/emb/\n"
    "emb_NNNN.npy, (N, D) shards, and beside each EXPORT/metadata/metadata_NNNN.jsonl,\n"
    "one JSON line per row (input, output, level, index, t_start, t_end, model,\n"
    "model_hash, the top labels where the output has logits), with the manifest\n"
    "EXPORT/export.json. Outputs of different models or dimensions are refused.\n"
    "\n"
    "  DIR_OR_FILES...    embed outputs (.safetensors), or --out-dir folders: the\n"
    "                     outputs their index.jsonl lists (failed inputs are not)\n"
    "  --to EXPORT        the export folder (made; an existing folder must be empty\n"
    "                     or an export)\n"
    "  --level L          a row per block (block_pooled: --attention frame or\n"
    "                     block=S), per segment, or per recording (global); default:\n"
    "                     block when every output has blocks, else segment\n"
    "  --dtype T          f32 (default) or f16\n"
    "  --normalize        L2-normalise each row (for inner-product search)\n"
    "  --shard-rows N     the most rows of a shard (default 100000)\n"
    "  --top K            labels per row where outputs hold logits (default 5; 0: none)\n"
    "  --resume           add the outputs EXPORT lacks (its settings are the default)\n"
    "  --json             the summary as one JSON object on standard output\n"
    "  -q, --quiet        nothing on standard error but errors\n"
    "\n"
    "Exit status: 0 ok (or nothing new), 1 an output or the export refused (the\n"
    "message names the file; the export is left as it was), 2 usage.\n"
    "\n"
    "examples:\n"
    "  ringvit export emb/ --to emb-export --normalize\n"
    "  ringvit export emb/ --to emb-export --normalize --resume\n"
    "  ringvit export a.safetensors b.safetensors --to ex --level global --dtype f16\n"
    "\n"
    "More: docs/export.md\n";

typedef struct export_args {
    const char **inputs;    /* (ninputs) */
    int ninputs;
    const char *to, *level, *dtype;
    int normalize, resume, json, quiet;
    int64_t shard_rows;
    int top_k;
    int level_set, dtype_set, normalize_set, shard_rows_set, top_set;
} export_args;

static int take_input(const char *cmd, const char *arg, int dashed, void *ctx)
{
    export_args *a = ctx;
    if (!dashed && strcmp(arg, "-") == 0)
        return cli_usage_error(cmd, "standard input ('-') cannot be exported: give the "
                                  "output files or their folder");
    a->inputs[a->ninputs++] = arg;
    return 0;
}

/* The options: the flags given, else (--resume over an export) its manifest's,
 * else the defaults. Returns 0 or an exit code after a message. */
static int options(const export_args *a, rv_export_opts *o)
{
    rv_export_opts_default(o);
    if (a->resume) {
        struct stat sb;
        char manifest[4200];
        snprintf(manifest, sizeof manifest, "%s/%s", a->to, RV_EXPORT_MANIFEST);
        if (stat(manifest, &sb) == 0) {
            rv_status st = rv_export_settings(a->to, o);
            if (st != RV_OK)
                return cli_fail(st, CMD);
        }
    }
    if (a->level_set && rv_export_level_parse(a->level, &o->level) != RV_OK)
        return cli_usage_error(CMD, "--level wants block, segment or global, got '%s'", a->level);
    if (a->level_set && o->level == RV_EXPORT_AUTO)
        return cli_usage_error(CMD, "--level wants block, segment or global, got 'auto'");
    if (a->dtype_set) {
        if (strcmp(a->dtype, "f32") != 0 && strcmp(a->dtype, "f16") != 0)
            return cli_usage_error(CMD, "--dtype wants f32 or f16, got '%s'", a->dtype);
        o->dtype = strcmp(a->dtype, "f16") == 0 ? RV_F16 : RV_F32;
    }
    if (a->normalize_set)
        o->normalize = 1;
    if (a->shard_rows_set)
        o->shard_rows = a->shard_rows;
    if (a->top_set)
        o->top_k = a->top_k;
    o->resume = a->resume;
    return 0;
}

typedef struct progress {
    int quiet, done, total;
    double last;
    int64_t rows;
} progress;

/* A line at most every 5 s while a large export is written. */
static void on_output(void *user, const char *output, int64_t rows)
{
    (void)output;
    progress *p = user;
    p->done++;
    p->rows += rows;
    const double now = rv_clock_s();
    if (!p->quiet && now - p->last >= 5) {
        fprintf(stderr, RV_CLI_PROG ": export: %d of %d outputs written, %lld rows\n", p->done,
                p->total, (long long)p->rows);
        p->last = now;
    }
}

static int report(const export_args *a, const rv_export_opts *o, const rv_export_summary *s)
{
    if (a->json) {
        json_t *j = json_object();
        json_object_set_new(j, "export", cli_json_path(a->to));
        json_object_set_new(j, "level", json_string(rv_export_level_name(s->level)));
        json_object_set_new(j, "dim", json_integer(s->dim));
        json_object_set_new(j, "dtype", json_string(o->dtype == RV_F16 ? "f16" : "f32"));
        json_object_set_new(j, "normalize", json_boolean(o->normalize));
        json_object_set_new(j, "outputs", json_integer(s->outputs));
        json_object_set_new(j, "already", json_integer(s->already));
        json_object_set_new(j, "rows", json_integer(s->rows));
        json_object_set_new(j, "total_rows", json_integer(s->total_rows));
        json_object_set_new(j, "shards", json_integer(s->shards));
        json_object_set_new(j, "first_written",
                            s->first_written >= 0 ? json_integer(s->first_written) : json_null());
        const int rc = cli_json_print(j);
        json_decref(j);
        return rc;
    }
    if (s->outputs == 0) {
        printf("nothing new for %s: the %d outputs given are exported already (%lld rows in %d "
               "shards)\n", a->to, s->already, (long long)s->total_rows, s->shards);
        return RV_EXIT_OK;
    }
    printf("exported %lld rows of %d outputs to %s (level %s, dim %d, %s%s)", (long long)s->rows,
           s->outputs, a->to, rv_export_level_name(s->level), s->dim,
           o->dtype == RV_F16 ? "f16" : "f32", o->normalize ? ", normalized" : "");
    if (s->already)
        printf("; %d exported already", s->already);
    printf("\n%s now holds %lld rows in %d shards of at most %lld rows\n", a->to,
           (long long)s->total_rows, s->shards, (long long)o->shard_rows);
    return RV_EXIT_OK;
}

static int export_main(int argc, char **argv)
{
    export_args a = {.shard_rows = RV_EXPORT_SHARD_ROWS, .top_k = RV_EXPORT_TOP_K};
    rv_export *e = NULL;
    rv_export_opts o;
    rv_export_summary s;
    progress p = {0};
    int rc;
    if (!(a.inputs = calloc((size_t)argc, sizeof *a.inputs))) {
        cli_error("export: out of memory");
        return RV_EXIT_FAIL;
    }
    const cli_flag flags[] = {
        {.name = "--to", .kind = RV_CLI_TEXT, .dst = &a.to},
        {.name = "--level", .kind = RV_CLI_TEXT, .dst = &a.level, .seen = &a.level_set},
        {.name = "--dtype", .kind = RV_CLI_TEXT, .dst = &a.dtype, .seen = &a.dtype_set},
        {.name = "--normalize", .kind = RV_CLI_SWITCH, .dst = &a.normalize,
         .seen = &a.normalize_set},
        {.name = "--shard-rows", .kind = RV_CLI_I64, .dst = &a.shard_rows, .lo = 1,
         .hi = (double)(INT64_C(1) << 40), .seen = &a.shard_rows_set},
        {.name = "--top", .kind = RV_CLI_INT, .dst = &a.top_k, .lo = 0,
         .hi = RV_EXPORT_MAX_TOP_K, .seen = &a.top_set},
        {.name = "--resume", .kind = RV_CLI_SWITCH, .dst = &a.resume},
        {.name = "--json", .kind = RV_CLI_SWITCH, .dst = &a.json},
        {.name = "--quiet", .alias = "-q", .kind = RV_CLI_SWITCH, .dst = &a.quiet},
    };
    rc = cli_flags_parse(CMD, argc, argv, flags, RV_CLI_NFLAGS(flags),
                         &(cli_operands){.what = "DIR_OR_FILE", .take = take_input, .ctx = &a});
    if (rc)
        goto end;
    if (a.ninputs == 0) {
        rc = cli_usage_error(CMD, "which outputs? give embed outputs or --out-dir folders");
        goto end;
    }
    if (!a.to) {
        rc = cli_usage_error(CMD, "where to? give the export folder with --to EXPORT");
        goto end;
    }
    if ((rc = options(&a, &o)) != 0)
        goto end;
    p.quiet = a.quiet;
    p.last = rv_clock_s();
    o.progress = on_output;
    o.user = &p;
    rv_status st = rv_export_open(a.to, &o, &e);
    if (st != RV_OK) {
        rc = cli_fail(st, CMD);
        goto end;
    }
    for (int i = 0; i < a.ninputs; i++) {
        struct stat sb;
        int taken = 0, already = 0;
        if (stat(a.inputs[i], &sb) == 0 && S_ISDIR(sb.st_mode)) {
            st = rv_export_add_dir(e, a.inputs[i], &taken, &already);
            if (st == RV_OK && !a.quiet && already)
                fprintf(stderr, RV_CLI_PROG ": export: %s: %d outputs taken from its index.jsonl "
                        "(%d exported already)\n", a.inputs[i], taken, already);
            else if (st == RV_OK && !a.quiet)
                fprintf(stderr, RV_CLI_PROG ": export: %s: %d outputs taken from its "
                        "index.jsonl\n", a.inputs[i], taken);
        } else {
            st = rv_export_add(e, a.inputs[i], &already);
            taken = 1;
        }
        if (st != RV_OK) {
            rc = cli_fail(st, CMD);
            goto end;
        }
        p.total += taken - already;
    }
    if ((st = rv_export_finish(e, &s)) != RV_OK) {
        rc = cli_fail(st, CMD);
        goto end;
    }
    rc = report(&a, &o, &s);
end:
    rv_export_free(&e);
    free(a.inputs);
    return rc;
}

const cli_command cmd_export = {
    .name = "export",
    .summary = "embed outputs as .npy shards for vector search (export DIR --to EX)",
    .main = export_main,
    .help = help_text,
};
