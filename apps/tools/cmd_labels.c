/* cmd_labels.c: `ringvit labels OUT.safetensors [--top K] [--json]
 * [--multi-label | --softmax] [--level block|recording]`: which classes an embed
 * output's classifier scores highest, per block (block_logits) or for the whole
 * recording (logits), with their time ranges on the file's clock. Thin over
 * rv_embed_labels_read (rv_embed.h), which reads and ranks; this file prints. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps.h"
#include "cli.h"
#include "cli_flags.h"
#include "rv_embed.h"

#define CMD "labels"

static const char help_text[] =
    "usage: ringvit labels OUT.safetensors [--top K] [--json] [--multi-label | --softmax]\n"
    "                      [--level block|recording]\n"
    "\n"
    "Prints the top K labels of an embed output whose model has a classifier head\n"
    "(ViT, DINOv2, VideoMAE and AST task checkpoints, a finetune classify head),\n"
    "with their probabilities: per block when the file holds block_logits (embed\n"
    "with --attention frame or block=S), else for the whole recording. Each row\n"
    "is the time range on the file's clock (h:mm:ss.sss) and K 'label p' pairs.\n"
    "Probabilities are the softmax of the logits, or each logit's sigmoid when the\n"
    "classes are independent (the output's multi_label, from the model's\n"
    "problem_type, or --multi-label: AudioSet models).\n"
    "\n"
    "  --top K          labels per row (default 5)\n"
    "  --json           JSON lines: one object per row ({\"level\", \"index\",\n"
    "                   \"start\", \"end\", \"labels\": [{\"id\", \"label\", \"p\"}]})\n"
    "  --multi-label    sigmoid per label, whatever the file says\n"
    "  --softmax        softmax over the labels, whatever the file says\n"
    "  --level L        block or recording (default: block when the file has blocks)\n"
    "\n"
    "Exit status: 0 ok, 1 the file is not an embed output, has no logits, or its\n"
    "labels and logits disagree, 2 usage.\n"
    "\n"
    "examples:\n"
    "  ringvit embed talk.wav --model ast-audioset/ --attention block=10.24 -o talk.safetensors\n"
    "  ringvit labels talk.safetensors --top 3\n"
    "  ringvit labels clip.safetensors --level recording --json\n"
    "\n"
    "More: docs/labels.md, docs/embed.md (the outputs)\n";

static int take_level(const char *cmd, const char *name, const char *value, void *dst)
{
    rv_labels_level *l = dst;
    if (strcmp(value, "block") == 0)
        *l = RV_LABELS_BLOCK;
    else if (strcmp(value, "recording") == 0)
        *l = RV_LABELS_RECORDING;
    else
        return cli_usage_error(cmd, "%s wants block or recording, got '%s'", name, value);
    return 0;
}

/* Seconds as h:mm:ss.sss (a minus sign before a negative time). */
static void clock_text(double s, char *buf, size_t cap)
{
    const char *sign = s < 0 ? "-" : "";
    double a = fabs(s);
    long long ms = llround(a * 1000);
    snprintf(buf, cap, "%s%lld:%02lld:%02lld.%03lld", sign, ms / 3600000, ms / 60000 % 60,
             ms / 1000 % 60, ms % 1000);
}

static void print_table(const rv_embed_labels *l)
{
    printf("%-13s %-13s top %d of %d labels (%s)\n", "start", "end", l->top, l->classes,
           l->multi_label ? "sigmoid, multi-label" : "softmax");
    for (int64_t r = 0; r < l->rows; r++) {
        char a[32], b[32];
        clock_text(l->start[r], a, sizeof a);
        clock_text(l->end[r], b, sizeof b);
        printf("%-13s %-13s", a, b);
        for (int k = 0; k < l->top; k++) {
            const int64_t i = r * l->top + k;
            char *name = cli_utf8_text(l->labels[l->index[i]]);
            printf("  %s %.4f", name ? name : "?", (double)l->prob[i]);
            free(name);
        }
        printf("\n");
    }
}

/* One JSON object per row, on its own line. */
static int print_json(const rv_embed_labels *l)
{
    const char *level = l->level == RV_LABELS_BLOCK ? "block" : "recording";
    for (int64_t r = 0; r < l->rows; r++) {
        json_t *top = json_array();
        for (int k = 0; top && k < l->top; k++) {
            const int64_t i = r * l->top + k;
            json_array_append_new(top, json_pack("{s:i, s:o, s:f}", "id", l->index[i], "label",
                                                 cli_json_path(l->labels[l->index[i]]), "p",
                                                 (double)l->prob[i]));
        }
        json_t *o = json_pack("{s:s, s:I, s:f, s:f, s:b, s:o}", "level", level, "index",
                              (json_int_t)r, "start", l->start[r], "end", l->end[r],
                              "multi_label", l->multi_label, "labels", top);
        char *text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER |
                                           JSON_REAL_PRECISION(9))
                       : NULL;
        json_decref(o);
        if (!text) {
            cli_error("labels: out of memory");
            return RV_EXIT_FAIL;
        }
        int bad = printf("%s\n", text) < 0;
        free(text);
        if (bad) {
            cli_error("could not write JSON to standard output");
            return RV_EXIT_FAIL;
        }
    }
    if (fflush(stdout) != 0) {
        cli_error("could not write JSON to standard output");
        return RV_EXIT_FAIL;
    }
    return RV_EXIT_OK;
}

static int labels_main(int argc, char **argv)
{
    const char *path = NULL;
    int json = 0, multi = 0, softmax = 0, rc;
    rv_labels_opts o;
    rv_labels_opts_default(&o);
    const cli_flag flags[] = {
        {.name = "--top", .kind = RV_CLI_INT, .dst = &o.top, .lo = 1, .hi = RV_VIT_MAX_CLASSES},
        {.name = "--json", .kind = RV_CLI_SWITCH, .dst = &json},
        {.name = "--multi-label", .kind = RV_CLI_SWITCH, .dst = &multi},
        {.name = "--softmax", .kind = RV_CLI_SWITCH, .dst = &softmax},
        {.name = "--level", .kind = RV_CLI_CUSTOM, .dst = &o.level, .take = take_level},
    };
    if ((rc = cli_flags_parse(CMD, argc, argv, flags, RV_CLI_NFLAGS(flags),
                              &(cli_operands){.what = "FILE", .one = &path})) != 0)
        return rc;
    if (!path)
        return cli_usage_error(CMD, "which file? give an embed output (OUT.safetensors)");
    if (multi && softmax)
        return cli_usage_error(CMD, "--multi-label and --softmax exclude each other");
    if (multi || softmax)
        o.multi_label = multi;
    rv_embed_labels *l = NULL;
    rv_status st = rv_embed_labels_read(path, &o, &l);
    if (st != RV_OK)
        return cli_fail(st, CMD);
    if (json) {
        rc = print_json(l);
    } else {
        print_table(l);
        rc = RV_EXIT_OK;
    }
    rv_embed_labels_free(&l);
    return rc;
}

const cli_command cmd_labels = {
    .name = "labels",
    .summary = "the top labels of an embed output's classifier (labels OUT.safetensors)",
    .main = labels_main,
    .help = help_text,
};
