/* cmd_inspect.c: `ringvit inspect MODEL [--json]`: what a model is before a
 * long run uses it: its family, sizes, the modalities its weights cover, the
 * input normalisation and frame side, the blocks' description, the pooled
 * output, the classifier head (its kind, classes and labels), the parameter
 * count, and what the load found in the file or folder
 * (tensors used, extras ignored, unknown ones, ringvit tensors left zero, and
 * the loader's notes). Loads the model the way embed does (model_cli.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps.h"
#include "cli.h"
#include "cli_flags.h"
#include "model_cli.h"

#define CMD "inspect"

static const char help_text[] =
    "usage: ringvit inspect MODEL [--json] [--heads H] [--tubelet T] [--seed N]\n"
    "\n"
    "Shows what MODEL is, as 'ringvit embed --model MODEL' would load it (a Hugging\n"
    "Face model folder, a weights file or a preset): its family, sizes, the\n"
    "modalities its weights cover, the input normalisation and frame side, the\n"
    "blocks, positions, the pooled output, the classifier head and its labels,\n"
    "the parameter count, and the tensors used, ignored, unknown and missing (left\n"
    "zero), with the loader's notes.\n"
    "\n"
    "  --json        one JSON object on stdout instead of the table\n"
    "  --heads H     head count of a torchvision-named file (default D / 64)\n"
    "  --tubelet T   frames per video token (default the model's; inflates an\n"
    "                image model)\n"
    "  --seed N      seed of a preset's random weights (default 0)\n"
    "\n"
    "Exit status: 0 ok, 1 the model cannot be read (the message names the file and\n"
    "the problem), 2 usage.\n"
    "\n"
    "examples:\n"
    "  ringvit inspect videomae-base/\n"
    "  ringvit inspect vit_b_16.safetensors --json\n"
    "\n"
    "More: docs/models.md (families, hub folders, presets), docs/media-commands.md\n";

static json_t *str_list(char **v, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        json_array_append_new(a, json_string(v[i]));
    return a;
}

static json_t *float3(const float *v)
{
    return json_pack("[fff]", (double)v[0], (double)v[1], (double)v[2]);
}

static void bias_text(int bits, char *out, size_t cap)
{
    if (bits == 7)
        snprintf(out, cap, "q, k, v biases");
    else if (bits == 0)
        snprintf(out, cap, "no q, k, v biases");
    else
        snprintf(out, cap, "%s%s%s biases only", bits & 1 ? "q" : "",
                 (bits & 1) && (bits & 6) ? "/" : "", bits & 2 ? (bits & 4 ? "k/v" : "k") : bits & 4 ? "v" : "");
}

static void print_list(const char *label, char **v, int n)
{
    printf("%-13s", label);
    if (n == 0)
        printf("-");
    for (int i = 0; i < n && i < 8; i++)
        printf("%s%s", i ? ", " : "", v[i]);
    if (n > 8)
        printf(", ... (%d in all)", n);
    printf("\n");
}

/* The first labels, each as a JSON string (a label may hold commas or quotes). */
static void print_labels(char **v, int n)
{
    printf("%-13s", "labels:");
    for (int i = 0; i < n && i < 8; i++) {
        json_t *s = cli_json_path(v[i]);
        char *q = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
        printf("%s%s", i ? ", " : "", q ? q : "?");
        free(q);
        json_decref(s);
    }
    if (n > 8)
        printf(", ... (%d in all)", n);
    printf("\n");
}

static json_t *report_json(const char *spec, const model_cli *mc)
{
    const rv_vit_config *c = &mc->m->cfg;
    const rv_vit_load_info *in = &mc->info;
    char *cfg_text = rv_vit_config_to_json(c);
    json_t *cfg = cfg_text ? json_loads(cfg_text, 0, NULL) : NULL;
    free(cfg_text);
    char hash[17];
    rv_vit_hash(mc->m, hash);
    json_t *o = json_object();
    json_object_set_new(o, "model", json_string(spec));
    json_object_set_new(o, "kind", json_string(model_cli_kind(spec)));
    json_object_set_new(o, "format", json_string(mc->random ? "preset" : in->format));
    json_object_set_new(o, "model_type", json_string(in->model_type));
    json_object_set_new(o, "weights", json_string(in->weights));
    json_object_set_new(o, "family", json_string(rv_vit_family_name(c->family)));
    json_object_set_new(o, "random_weights", json_boolean(mc->random));
    json_object_set_new(o, "params", json_integer(rv_vit_params(mc->m)));
    json_object_set_new(o, "model_hash", json_string(hash));
    json_t *mods = json_array();
    if (c->video)
        json_array_append_new(mods, json_string("video"));
    if (c->audio)
        json_array_append_new(mods, json_string("audio"));
    json_object_set_new(o, "modalities", mods);
    json_object_set_new(o, "frame_size", json_integer(rv_vit_frame_size(c)));
    json_object_set_new(o, "mean", float3(c->mean));
    json_object_set_new(o, "std", float3(c->std));
    json_object_set_new(o, "audio_mean", json_real(c->audio_mean));
    json_object_set_new(o, "audio_std", json_real(c->audio_std));
    json_object_set_new(o, "audio_bands", json_integer(rv_vit_bands(c)));
    json_object_set_new(o, "pool", json_string(rv_vit_pool_name(c->pool)));
    json_object_set_new(o, "head", json_string(rv_vit_head_name(c->head)));
    json_object_set_new(o, "classes", json_integer(c->classes));
    json_object_set_new(o, "multi_label", json_boolean(c->multi_label));
    json_object_set_new(o, "labels", str_list(mc->m->labels, mc->m->labels ? c->classes : 0));
    json_object_set_new(o, "tensors_in_file", json_integer(in->file_tensors));
    json_object_set_new(o, "tensors_used", json_integer(in->used));
    json_object_set_new(o, "ignored", str_list(in->ignored, in->nignored));
    json_object_set_new(o, "unknown", str_list(in->unknown, in->nunknown));
    json_object_set_new(o, "zeroed", str_list(in->zeroed, in->nzeroed));
    json_object_set_new(o, "notes", str_list(in->notes, in->nnotes));
    json_object_set_new(o, "config", cfg ? cfg : json_null());
    return o;
}

static void report_text(const char *spec, const model_cli *mc)
{
    const rv_vit_config *c = &mc->m->cfg;
    const rv_vit_load_info *in = &mc->info;
    char bias[64];
    bias_text(c->qkv_bias, bias, sizeof bias);
    printf("model:       %s (%s", spec, mc->random ? "preset, RANDOM weights" : in->format);
    if (in->model_type[0])
        printf(", model_type %s", in->model_type);
    printf(")\n");
    printf("family:      %s\n", rv_vit_family_name(c->family));
    if (in->weights[0])
        printf("weights:     %s (%d tensors: %d used, %d ignored, %d unknown)\n", in->weights,
               in->file_tensors, in->used, in->nignored, in->nunknown);
    printf("sizes:       D %d, %d layers, %d heads, MLP %d, patch %d, tubelet %d, grid %d\n",
           c->dim, c->layers, c->heads, c->mlp, c->patch, c->tubelet, c->grid);
    printf("modalities:  %s%s%s\n", c->video ? "video" : "", c->video && c->audio ? ", " : "",
           c->audio ? "audio" : "");
    if (c->video)
        printf("video input: frames of %d px, mean %.6g %.6g %.6g, std %.6g %.6g %.6g; "
               "positions %s\n", rv_vit_frame_size(c), c->mean[0], c->mean[1], c->mean[2],
               c->std[0], c->std[1], c->std[2], rv_vit_pos_name(c->pos));
    if (c->audio)
        printf("audio input: %d x %d fbank patches every %d bins x %d frames (%d bands), "
               "(x - %.8g) / (2 x %.8g); positions %s%s\n", c->audio_freq, c->audio_time,
               c->audio_fstride, c->audio_tstride, rv_vit_bands(c), c->audio_mean, c->audio_std,
               rv_vit_audio_pos_name(c->audio_pos), c->time_code ? " + time code" : "");
    printf("tokens:      %d special (%s)%s\n", c->cls,
           c->cls == 2 ? "CLS, distillation" : c->cls ? "CLS" : "none",
           c->time_code ? "; time code and modality embeddings" : "");
    printf("blocks:      %s, LayerNorm eps %g, %s%s%s%s\n", rv_vit_act_name(c->act),
           (double)c->eps, bias, c->layer_scale ? ", layer scale" : "",
           c->pre_norm ? ", pre-norm" : "", c->final_norm ? ", final norm" : ", no final norm");
    printf("pooled:      %s", rv_vit_pool_name(c->pool));
    if (c->pool == RV_POOL_MEAN_NORM || c->pool == RV_POOL_CLS_NORM)
        printf(" (LayerNorm eps %g)", (double)c->pool_eps);
    if (c->proj_dim)
        printf(", projected to %d", c->proj_dim);
    printf("\n");
    if (c->head != RV_HEAD_NONE) {
        printf("head:        %s: %s, %d classes%s\n", rv_vit_head_name(c->head),
               rv_vit_head_text(c->head), c->classes,
               c->multi_label ? ", multi-label (sigmoid)" : " (softmax)");
        print_labels(mc->m->labels, c->classes);
    } else {
        printf("head:        none (no classifier: outputs have no logits)\n");
    }
    printf("parameters:  %lld\n", (long long)rv_vit_params(mc->m));
    for (int i = 0; i < in->nnotes; i++)
        printf("%-13s%s\n", i ? "" : "notes:", in->notes[i]);
    if (!mc->random) {
        print_list("ignored:", in->ignored, in->nignored);
        print_list("unknown:", in->unknown, in->nunknown);
        print_list("zeroed:", in->zeroed, in->nzeroed);
    }
}

static int inspect_main(int argc, char **argv)
{
    const char *spec = NULL;
    int json = 0, heads = 0, tubelet = 0, seed_set = 0, rc = 0;
    int64_t seed = 0;
    const cli_flag flags[] = {
        {.name = "--json", .kind = RV_CLI_SWITCH, .dst = &json},
        RV_CLI_MODEL_FLAGS(&seed, &seed_set, &heads, &tubelet),
    };
    if ((rc = cli_flags_parse(CMD, argc, argv, flags, RV_CLI_NFLAGS(flags),
                              &(cli_operands){.what = "MODEL", .one = &spec})) != 0)
        return rc;
    if (!spec)
        return cli_usage_error(CMD, "which model? give a folder, a weights file or a preset");
    model_cli mc;
    if ((rc = model_cli_open(CMD, spec, seed, seed_set, heads, tubelet, 1, &mc)) != 0)
        return rc;
    if (json) {
        json_t *o = report_json(spec, &mc);
        rc = o ? cli_json_print(o) : (cli_error("inspect: out of memory"), RV_EXIT_FAIL);
        json_decref(o);
    } else {
        report_text(spec, &mc);
    }
    model_cli_close(&mc);
    return rc;
}

const cli_command cmd_inspect = {
    .name = "inspect",
    .summary = "what a model is: family, sizes, modalities, inputs, tensors (inspect MODEL)",
    .main = inspect_main,
    .help = help_text,
};
