/* cmd_init.c: `ringvit init --preset NAME -o OUT.safetensors`, a fresh encoder
 * with seeded weights (torchvision's initialisation, rv_vit_init_random) written
 * as safetensors, with the tokenizer-facing sizes (tubelet, patch, grid, CLS)
 * and the head count adjustable. Prints one line (or JSON) naming the model by
 * its hash. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps.h"
#include "cli.h"
#include "cli_flags.h"
#include "model_cli.h"
#include "out_path.h"
#include "rv_vit.h"

#define CMD "init"

static const char help_text[] =
    "usage: ringvit init --preset tiny|small|base -o OUT.safetensors [options]\n"
    "\n"
    "Writes a fresh encoder with seeded weights, initialised as torchvision\n"
    "initialises its VisionTransformer; the same seed gives the same file on every\n"
    "machine. Presets: tiny (D 192, 12 layers, 3 heads), small (384, 12, 6), base\n"
    "(768, 12, 12); all MLP 4 D, tubelet 2, patch 16, grid 14, a CLS token. The\n"
    "tubelet and patch must match the tokenizer's ('ringvit tokens').\n"
    "\n"
    "  --preset NAME   tiny, small or base (required)\n"
    "  -o, --output F  the safetensors file to write (required)\n"
    "  --seed S        random seed (default 0)\n"
    "  --tubelet T     frames per video token (default the preset's, 2)\n"
    "  --patch P       pixels per patch side (default 16)\n"
    "  --grid G        stored position grid side (default 14)\n"
    "  --heads H       attention heads; must divide D (default the preset's)\n"
    "  --no-cls        no class token leads the sequence\n"
    "  --json          one JSON object on stdout instead of the line\n"
    "\n"
    "Exit status: 0 ok, 1 the file cannot be written, 2 usage.\n"
    "\n"
    "example:\n"
    "  ringvit init --preset tiny --seed 1 -o tiny.safetensors\n"
    "\n"
    "More: docs/media-commands.md (init, inspect), docs/models.md\n";

static int init_main(int argc, char **argv)
{
    const char *preset = NULL, *outpath = NULL;
    int64_t seed = 0;
    int tubelet = 0, patch = 0, grid = 0, heads = 0, no_cls = 0, json = 0, rc = 0;
    const cli_flag flags[] = {
        {.name = "--preset", .kind = RV_CLI_TEXT, .dst = &preset},
        {.name = "--output", .alias = "-o", .kind = RV_CLI_TEXT, .dst = &outpath},
        RV_CLI_MODEL_FLAGS(&seed, NULL, &heads, &tubelet),
        {.name = "--patch", .kind = RV_CLI_INT, .dst = &patch, .lo = 1, .hi = 1024},
        {.name = "--grid", .kind = RV_CLI_INT, .dst = &grid, .lo = 1, .hi = 1024},
        {.name = "--no-cls", .kind = RV_CLI_SWITCH, .dst = &no_cls},
        {.name = "--json", .kind = RV_CLI_SWITCH, .dst = &json},
    };
    if ((rc = cli_flags_parse(CMD, argc, argv, flags, RV_CLI_NFLAGS(flags), NULL)) != 0)
        return rc;
    if (!preset)
        return cli_usage_error(CMD, "which model? give --preset tiny, small or base");
    if (!outpath || !outpath[0])
        return cli_usage_error(CMD, "where to? give -o OUT.safetensors");

    rv_vit_config c;
    if (rv_vit_preset(preset, &c) != RV_OK)
        return cli_usage_error(CMD, "%s", rv_last_error());
    const rv_vit_config base = c;
    if (tubelet)
        c.tubelet = tubelet;
    if (patch)
        c.patch = patch;
    if (grid)
        c.grid = grid;
    if (heads)
        c.heads = heads;
    if (no_cls) {
        c.cls = 0;
        c.pool = RV_POOL_MEAN; /* no CLS to pool: the mean of the tokens */
    }
    if (memcmp(&c, &base, sizeof c) != 0)
        snprintf(c.preset, sizeof c.preset, "custom"); /* no longer the preset's sizes */
    if (rv_vit_config_check(&c) != RV_OK)
        return cli_usage_error(CMD, "%s", rv_last_error());

    rv_vit_model *m = NULL;
    rv_status st;
    char target[4096];
    /* Before the work, and again just before writing (see out_path.h). */
    if ((st = out_target_path(outpath, target, sizeof target)) != RV_OK)
        return cli_fail(st, CMD);
    if ((st = rv_vit_new(&c, &m)) != RV_OK)
        return cli_fail(st, CMD);
    if ((st = rv_vit_init_random(m, (uint64_t)seed)) != RV_OK ||
        (st = out_target_path(outpath, target, sizeof target)) != RV_OK ||
        (st = rv_vit_save(m, target)) != RV_OK) {
        rc = cli_fail(st, CMD);
        goto end;
    }
    char hash[17];
    rv_vit_hash(m, hash);
    if (json) {
        char *cj = rv_vit_config_to_json(&c);
        json_t *cfg = cj ? json_loads(cj, 0, NULL) : NULL;
        json_t *root = json_pack("{s:s, s:s, s:I, s:I, s:s, s:o*}", "file", outpath, "preset",
                                 preset, "seed", (json_int_t)seed, "params",
                                 (json_int_t)rv_vit_params(m), "hash", hash, "config", cfg);
        free(cj);
        if (!root) {
            cli_error("%s: out of memory", CMD);
            rc = RV_EXIT_FAIL;
            goto end;
        }
        rc = cli_json_print(root);
        json_decref(root);
    } else {
        printf("init: %s%s, %" PRId64 " parameters, seed %" PRId64 ", hash %s -> %s\n", preset,
               strcmp(c.preset, "custom") == 0 ? " (custom)" : "", rv_vit_params(m), seed, hash,
               outpath);
    }
end:
    rv_vit_free(&m);
    return rc;
}

const cli_command cmd_init = {
    .name = "init",
    .summary = "write a fresh seeded encoder (init --preset tiny -o M.safetensors)",
    .main = init_main,
    .help = help_text,
};
